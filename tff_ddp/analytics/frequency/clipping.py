"""The math of federated frequency estimation with a clipped cPBM.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): Section 3.3 (OcPBM), Theorem 1 and its proof (App. C.3),
eq. 5, Section 4.3 and App. D (MFFE, Corollary 1), Section 5.2 (the
baselines). The mechanism itself (Algorithms 1-3) is
`tff_ddp.mechanisms.poisson_binomial`; its privacy (Lemma 2) is
`tff_ddp.accounting.pbm_rdp`; the processes are in `frequency.process`.
Start from `optimal_clip` / `optimal_quantile` (eq. 5),
`expected_l2_error_bound` and `tightened_error_bound` (Theorem 1),
`published_epsilon`, `effective_dimension` and the Table 2 baselines.

Theorem 1, where the paper is loose and what we do, the baselines:
docs/notes/frequency_protocols.md.
"""

import math
import numbers
from typing import Optional, Sequence

import dp_accounting
import numpy as np

from tff_ddp.accounting import accountant as accountant_lib
from tff_ddp.accounting import events
from tff_ddp.mechanisms import poisson_binomial as pbm
from tff_ddp.utils import checks

DIVISORS = pbm.DIVISORS
# Counts (m, n, d, D, k) above float64's exact integers are refused: every
# formula here is float64 arithmetic, and a count this large is a bug.
MAX_COUNT = 2**53
_MAX_ROW_ITEMS = 10**9  # numpy's multivariate_hypergeometric ('marginals')


def _count(value, name: str) -> int:
  return checks.integer(value, name, 1, MAX_COUNT)


def _real_array(value, name: str) -> np.ndarray:
  """`value` as a float64 array; a TypeError naming `name` for anything
  that is not an array (or nested list) of real numbers."""
  if isinstance(value, (str, bytes, dict, set)) or value is None:
    raise TypeError(f'{name} must be an array of real numbers, got '
                    f'{value!r:.100} ({type(value).__name__}).')
  try:
    array = np.asarray(value)
  except (TypeError, ValueError) as e:  # ragged lists
    raise TypeError(f'{name} must be an array of real numbers: {e}') from None
  if array.dtype == object:  # Python ints beyond int64, mixed types
    flat = array.reshape(-1)
    if not all(
        isinstance(v, (numbers.Real, np.floating,
                       np.integer)) and not isinstance(v, (bool, np.bool_))
        for v in flat):
      raise TypeError(f'{name} must be an array of real numbers, got '
                      f'{value!r:.100}.')
    try:
      return np.asarray([float(v) for v in flat],
                        np.float64).reshape(array.shape)
    except OverflowError:
      raise ValueError(f'{name} must hold finite numbers, got '
                       f'{value!r:.100} (an integer beyond float64).') from None
  if array.dtype.kind not in 'iuf':
    raise TypeError(f'{name} must be an array of real numbers, got '
                    f'{value!r:.100} (dtype {array.dtype}).')
  return array.astype(np.float64)


def _clips(clip, name: str = 'clip') -> np.ndarray:
  """Clip values C: finite numbers >= 0 (a scalar or an array)."""
  clip = _real_array(clip, name)
  if not np.all(np.isfinite(clip)) or np.any(clip < 0):
    raise ValueError(f'{name} must be finite numbers >= 0, got {clip!r:.100}.')
  return clip


def _matrix(x, name: str = 'x') -> np.ndarray:
  """The clients' vectors: a [n, d] array of finite numbers, n, d >= 1."""
  x = _real_array(x, name)
  if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
    raise ValueError(f'{name} must be a [num_clients, dim] array with at '
                     f'least one client and one item, got shape {x.shape}.')
  if not np.all(np.isfinite(x)):
    raise ValueError(f'{name} must hold finite numbers.')
  return x


def effective_dimension(output_dim: int,
                        divisor=pbm.Divisor.L2,
                        level: Optional[float] = None) -> float:
  """D_eff: D for divisor 'l2' (Algorithm 3), K^2 for 'linf' (a
  `poisson_binomial.Divisor` or its value).

  With the divisor B (C or K C / sqrt(D)), D times the variance bound of a
  coordinate of the mean, B^2 / (4 m n theta^2), is D_eff C^2 / (4 m n
  theta^2).
  """
  output_dim = _count(output_dim, 'output_dim')
  if pbm.as_divisor(divisor) is pbm.Divisor.L2:
    checks.optional_positive(level, 'level')  # unused, but not junk
    return float(output_dim)
  level = checks.positive(level, 'level')
  # min(D, K^2) without squaring a huge K (float overflow).
  return float(output_dim) if level >= math.sqrt(output_dim) else level**2


def noise_scale(effective_dim: float, num_trials: int, num_clients: int,
                theta: float) -> float:
  """s = sqrt(D_eff / (4 m n theta^2)): E(C; D) grows by s per unit of C."""
  effective_dim = checks.positive(effective_dim, 'effective_dim')
  m = _count(num_trials, 'num_trials')
  n = _count(num_clients, 'num_clients')
  theta = checks.real(theta, 'theta', 0.0, 0.25, low_open=True)
  # sqrt(D) / (2 theta sqrt(m n)): theta**2 underflows to 0 for a tiny
  # theta (a ZeroDivisionError), D / (m n) can overflow.
  s = math.sqrt(effective_dim) / (2.0 * theta * math.sqrt(m) * math.sqrt(n))
  if not math.isfinite(s):
    raise ValueError(
        f'sqrt(D / (4 m n theta^2)) overflows float64 (effective_dim = '
        f'{effective_dim:g}, num_trials = {m}, num_clients = {n}, theta = '
        f'{theta:g}): theta is too small.')
  return s


def optimal_quantile(effective_dim: float, num_trials: int, num_clients: int,
                     theta: float) -> float:
  """Eq. (5): the quantile 1 - sqrt(D / (4 m n theta^2)) of the norms.

  Raises:
    ValueError: when s >= 1: E(C; D) is then non-decreasing in C, so the
      bound is minimised by C = 0 (nothing estimated); raise m, n or theta.
  """
  s = noise_scale(effective_dim, num_trials, num_clients, theta)
  if s >= 1.0:
    raise ValueError(
        f'sqrt(D / (4 m n theta^2)) = {s:.4g} >= 1 (D = '
        f'{float(effective_dim):g}, m = {int(num_trials)}, n = '
        f'{int(num_clients)}, theta = {float(theta):g}): Theorem '
        "1's bound has no interior minimum (the optimal clip is 0). Use more "
        'clients, more trials or a larger theta.')
  return 1.0 - s


def gaussian_quantile(stddev_per_clip: float,
                      dim: int,
                      num_clients: int,
                      num_noises: int = 1) -> float:
  """The Gaussian baselines' target, 1 - r sqrt(k d) / n (the eq. 5 argument).

  The sum of the clipped x_i gets k independent N(0, (r C)^2 I_d) noises
  (k = 1 central, k = n local), so the mean's noise has l2 norm about
  r C sqrt(k d) / n and bias + C r sqrt(k d) / n is minimised at the
  1 - r sqrt(k d) / n quantile of ||x_i||_2.

  Args:
    stddev_per_clip: r = sigma / C (z for the central Gaussian, 2 z for the
      local one: replace-one sensitivity 2 C).
    dim: d.
    num_clients: n.
    num_noises: k.
  """
  r = checks.positive(stddev_per_clip, 'stddev_per_clip')
  d = _count(dim, 'dim')
  n = _count(num_clients, 'num_clients')
  k = _count(num_noises, 'num_noises')
  s = r * math.sqrt(k) * math.sqrt(d) / n
  if s >= 1.0:
    raise ValueError(
        f'the Gaussian baseline has no interior optimum: r sqrt(k d) / n = '
        f'{s:.4g} >= 1 (stddev_per_clip = {r:g}, num_noises = {k}, dim = '
        f'{d}, num_clients = {n}).')
  return 1.0 - s


def _norms(norms) -> np.ndarray:
  norms = _real_array(norms, 'norms').reshape(-1)
  if norms.size < 1 or not np.all(np.isfinite(norms)) or np.any(norms < 0):
    raise ValueError('norms must be a non-empty array of finite numbers '
                     '>= 0.')
  return norms


def error_functional(clip, norms, effective_dim: float, num_trials: int,
                     theta: float) -> np.ndarray:
  """E(C; D) of Theorem 1 at each clip (n = len(norms))."""
  norms = _norms(norms)
  clip = _clips(clip)
  s = noise_scale(effective_dim, num_trials, norms.size, theta)
  excess = np.maximum(0.0, norms[:, None] - clip.reshape(-1)[None, :])
  # The mean as a sum of excess / n: the sum of n norms near the float64
  # maximum would overflow, their mean does not.
  mean = (excess / norms.size).sum(axis=0)
  return (mean + clip.reshape(-1) * s).reshape(clip.shape)


def expected_l2_error_bound(clip, norms, effective_dim: float, num_trials: int,
                            theta: float, dim: int) -> np.ndarray:
  """Theorem 1 as published: sqrt(d) E(C; D) (docs/notes/frequency_protocols.md,
  section on clipping.py)."""
  d = _count(dim, 'dim')
  return math.sqrt(d) * error_functional(clip, norms, effective_dim, num_trials,
                                         theta)


def clip_factors(norms, clip: float) -> np.ndarray:
  """min(1, C / ||y_i||): what cPBM's clip multiplies each y_i (and x_i) by."""
  norms = _norms(norms)
  clip = checks.positive(clip, 'clip')
  # A zero vector is not clipped: factor 1 (C / 0 = inf), not min(1, C).
  positive = norms > 0
  return np.where(positive,
                  np.minimum(1.0, clip / np.where(positive, norms, 1.0)), 1.0)


def expected_sum(x, norms, clip: float) -> np.ndarray:
  """E[decoded sum] = sum_i x_i min(1, C / ||y_i||) (exact representations).

  cPBM is unbiased for sum_i clip(y_i) (eq. 3) and U is linear with
  U y_i = x_i, so the bias is exactly minus the clipped mass
  sum_i x_i (1 - C / ||y_i||)_+.
  """
  x = _matrix(x)
  factors = clip_factors(norms, clip)
  if factors.size != x.shape[0]:
    raise ValueError(f'x has {x.shape[0]} rows (clients) but norms has '
                     f'{factors.size} values; one norm per client.')
  return (x * factors[:, None]).sum(axis=0)


def tightened_error_bound(clip,
                          x,
                          norms,
                          num_trials: int,
                          theta: float,
                          coordinate_ratio: float = 1.0) -> np.ndarray:
  """sqrt(||bias_x||^2 + d (r C)^2 / (4 m n theta^2)) >= E||xhat - x_bar||.

  Jensen (E||e|| <= sqrt(E||e||^2)), the exact bias of the mean in x-space
  (`expected_sum`), and the noise through U: E||U e||^2 = sum_k ||u_k||^2
  Var(e_k) <= trace(U^T U) (r C)^2 / (4 m n theta^2), trace = d for a tight
  frame. r = B / C: 1 for divisor 'l2', K / sqrt(D) for 'linf'.
  """
  x = _matrix(x)
  n, d = x.shape
  m = _count(num_trials, 'num_trials')
  theta = checks.real(theta, 'theta', 0.0, 0.25, low_open=True)
  r = checks.positive(coordinate_ratio, 'coordinate_ratio')
  clip = _clips(clip)
  clips = clip.reshape(-1)
  truth = x.mean(axis=0)
  out = []
  for c in clips:
    bias = expected_sum(x, norms, float(c)) / n - truth
    noise = r * c / (2.0 * theta * math.sqrt(m) * math.sqrt(n))
    out.append(math.sqrt(bias @ bias + d * noise**2))
  return np.asarray(out).reshape(clip.shape)


def optimal_clip(norms, quantile: float) -> float:
  """The inverted-CDF `quantile` of the norms: y_(ceil(n q)) (1-based).

  With q the target of eq. 5 this is the minimiser of E(C; D)
  (docs/notes/frequency_protocols.md, section on clipping.py); the
  non-private "best C" of the paper's tables.
  """
  norms = np.sort(_norms(norms))
  q = checks.real(quantile, 'quantile', 0.0, 1.0, high_open=False)
  j = max(1, math.ceil(norms.size * q - 1e-12))
  return float(norms[min(j, norms.size) - 1])


def l2_error(estimated_sum, x) -> float:
  """Eq. (1): ||sum_i x_i - estimated_sum||_2 / n, the mean's l2 error."""
  x = _matrix(x)
  estimate = _real_array(estimated_sum, 'estimated_sum')
  if estimate.shape != (x.shape[1],):
    raise ValueError(f'estimated_sum must be a vector of x.shape[1] = '
                     f'{x.shape[1]} numbers, got shape {estimate.shape}.')
  if not np.all(np.isfinite(estimate)):
    raise ValueError('estimated_sum must hold finite numbers.')
  return float(np.linalg.norm(estimate - x.sum(axis=0)) / x.shape[0])


def sample_items(x, k: int, rng) -> np.ndarray:
  """Each row keeps k of its items, drawn without replacement (numpy).

  A multivariate hypergeometric draw per row (all items when a row holds
  at most k): the Sample(k) baseline's client step, for the simulator.
  """
  counts = _real_array(x, 'x')
  if counts.ndim != 2:
    raise ValueError(f'x must be a [num_clients, dim] array of item counts, '
                     f'got shape {counts.shape}.')
  if not np.all(np.isfinite(counts)) or np.any(counts < 0) or np.any(
      counts != np.round(counts)):
    raise ValueError('x must hold item counts: integers >= 0.')
  # numpy's sampler (method 'marginals') takes fewer than 10^9 items.
  if counts.size and np.max(counts.sum(axis=1)) >= _MAX_ROW_ITEMS:
    raise ValueError(f'x: a row holds {np.max(counts.sum(axis=1)):.4g} '
                     f'items; at most {_MAX_ROW_ITEMS - 1} per client.')
  k = checks.integer(k, 'k', 1)
  if not isinstance(rng, np.random.Generator):
    raise TypeError('rng must be a numpy.random.Generator '
                    f'(np.random.default_rng), got {type(rng).__name__}.')
  x = np.asarray(x).astype(np.int64)
  out = x.copy()
  totals = x.sum(axis=1)
  for i in np.nonzero(totals > k)[0]:
    out[i] = rng.multivariate_hypergeometric(x[i], k)
  return out


def published_epsilon(parts: Sequence[tuple], delta: float) -> float:
  """Lemma 2 as published for composed cPBM releases (replace-one).

  Args:
    parts: (theta, num_trials, num_clients, coordinates) per release, with
      the coordinates the paper composes over: D for a frequency release,
      2^b - 1 for the Haar coefficients (Proposition 4 and App. C.7), 1
      for MFFE's indicator (App. D).
    delta: the delta.

  Returns:
    epsilon of the composition under REPLACE_ONE, the printed Lemma 2's
    relation, computed exactly by `tff_ddp.accounting.pbm_rdp` (against the
    server: no sampling, so the same for every adversary).
  """
  delta = checks.probability(delta, 'delta', allow_one=False)

  def sequence(value, ndim):
    if isinstance(value, np.ndarray):
      return value.ndim == ndim
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))

  if not sequence(parts, 2):
    raise TypeError('parts must be a sequence of (theta, num_trials, '
                    f'num_clients, coordinates), got {parts!r:.100}.')
  # The accountant's limit on an event's counts (pbm_rdp.check_event),
  # checked here so that the message names the part.
  limit = events.MAX_EVENT_INTEGER
  released = []
  for i, part in enumerate(parts):
    if not sequence(part, 1) or len(part) != 4:
      raise TypeError(f'parts[{i}] must be (theta, num_trials, num_clients, '
                      f'coordinates), got {part!r:.100}.')
    t, m, n, k = part
    released.append(
        events.PoissonBinomialDpEvent(
            checks.real(t, f'parts[{i}] theta', 0.0, 0.25, low_open=True),
            checks.integer(m, f'parts[{i}] num_trials', 1, limit),
            checks.integer(n, f'parts[{i}] num_clients', 1, limit),
            checks.integer(k, f'parts[{i}] coordinates', 1, limit)))
  composed = dp_accounting.ComposedDpEvent(released)
  return accountant_lib.epsilon(
      composed, delta, 'server',
      dp_accounting.NeighboringRelation.REPLACE_ONE)[0]
