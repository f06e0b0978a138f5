"""Privacy of the clipped Poisson binomial mechanism (cPBM) sum.

Chen et al., "Federated frequency estimation" (``shared/papers/
federated-frequency-estimation-cpbm.txt``), Lemma 2 and its proof in App. C.2.

The reduction of Lemma 2, spelled out (it is the part the paper leaves to
Lemma 3.6 of Chen et al. 2022, "The Poisson binomial mechanism"):

1. Per coordinate, the sum over clients of Binomial(m, p_i) is the sum over
   the m trials of independent Poisson binomials, each with one Bernoulli
   per client. Releasing the m partial sums separately is at least as
   revealing, so the RDP is m times that of one trial, and d times that for d
   independent coordinates (the factor m d of Lemma 2).
2. One trial: the target client's Bernoulli(a) moves to Bernoulli(b), the
   others' Bernoullis X are fixed. Every Bernoulli(p) with p in
   [1/2 - theta, 1/2 + theta] is a mixture of the two extreme ones, and
   exp((alpha - 1) D_alpha) is jointly convex, so the worst case has the
   target at the extremes (a, b) = (1/2 -+ theta, 1/2 +- theta) -- which also
   bounds zero-out (b = 1/2) and any replace-one pair -- and the others at
   the extremes too, k of them at 1/2 + theta and n - 1 - k at 1/2 - theta.
   Flipping every bit (Z -> n - Z) swaps the signs, so some sign is held by
   at least n' = ceil((n - 1)/2) of the others; dropping the rest only adds
   information (adding independent noise is post-processing), so
3. with p = 1/2 + theta, the per-trial divergence is at most the larger of
     D_alpha(Ber(1 - p) + Bin(n', p) || Bin(n' + 1, p))       (Pi_1 of Lemma 2)
     D_alpha(Bin(n' + 1, p) || Ber(1 - p) + Bin(n', p))       (Pi_2, flipped).

We compute those two divergences *exactly* from the PMFs (log space,
`scipy.special.gammaln`), for integer and fractional orders alike, rather than
from the printed Pi_1, Pi_2: Pi_1 agrees with the PMF computation (tested),
while the printed Pi_2 differs between the main text and App. C.2 (a missing
factor 1/2 + theta and swapped mu_m terms). The result is an upper bound on the
divergence of the actual sums of n m Bernoullis; the tests check it against
brute force over small grids of datasets.

Two curves (`rdp(..., relation=...)`):

* 'replace_one' -- Lemma 2 as published: the target moves between the two
  extremes, a = 1/2 -+ theta, b = 1/2 +- theta (covers every pair in the
  range, so also zero-out, but loosely).
* 'zero_out' -- the target moves from a in [1/2 - theta, 1/2 + theta] to
  b = 1/2 (its input replaced by zeros). The same argument (joint convexity
  in a and in each other client's probability; drop the minority-sign
  clients by post-processing; flip symmetry, which fixes b = 1/2) gives the
  per-trial bound
     max over a in {p, 1 - p} of max(D_alpha(P_a || Q), D_alpha(Q || P_a)),
     P_a = Ber(a) + Bin(n', p), Q = Ber(1/2) + Bin(n', p), p = 1/2 + theta,
  a shift of theta instead of 2 theta: about 4x less RDP in the Gaussian
  regime. It is never above the replace-one curve (Q is the even mixture of
  P_p and P_{1-p}, and exp((alpha - 1) D_alpha) is jointly convex).

The accountant uses 'zero_out' for its zero-out relations (ADD_OR_REMOVE_ONE,
REPLACE_SPECIAL) and 'replace_one' for REPLACE_ONE, as it does for the DDG.
"""

import math
from typing import Sequence

import numpy as np
from scipy import special

from tff_ddp.accounting import events

# Evaluate the divergence matrix in blocks of at most this many entries.
_BLOCK_ENTRIES = 1 << 22


def _validate(event: events.PoissonBinomialDpEvent):
  if not isinstance(event, events.PoissonBinomialDpEvent):
    raise TypeError(
        f'Expected a PoissonBinomialDpEvent, got {type(event).__name__}.')
  theta = event.theta
  if theta is None or not 0.0 < theta <= 0.25:
    raise ValueError(f'theta must be in (0, 1/4], got {theta}.')
  for name in ('num_trials', 'num_clients', 'dimension'):
    value = getattr(event, name)
    if int(value) != value or value < 1:
      raise ValueError(f'{name} must be an integer >= 1, got {value}.')
  wide = event.replace_one_dimension
  if wide is not None and (int(wide) != wide or wide < event.dimension):
    raise ValueError('replace_one_dimension must be None or an integer >= '
                     f'dimension = {event.dimension}, got {wide}.')


def log_binomial_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
  """log Bin(k; n, p) for integer k (-inf outside 0..n), exact via gammaln."""
  k = np.asarray(k, dtype=np.float64)
  inside = (k >= 0) & (k <= n)
  kk = np.where(inside, k, 0.0)
  logpmf = (special.gammaln(n + 1.0) - special.gammaln(kk + 1.0)
            - special.gammaln(n - kk + 1.0)
            + kk * math.log(p) + (n - kk) * math.log1p(-p))
  return np.where(inside, logpmf, -np.inf)


def renyi_divergence(
    log_p: np.ndarray, log_q: np.ndarray, orders: Sequence[float]
) -> np.ndarray:
  """D_alpha(P || Q) of two PMFs on a common finite support, alpha > 1.

    D_alpha = log(sum_x P(x)^alpha Q(x)^(1 - alpha)) / (alpha - 1).

  Stable for tiny divergences: with r = log(P/Q), the sum minus one equals
  sum_x Q(x) [expm1(alpha r) - alpha expm1(r)] (the subtracted part sums to
  zero), whose terms are all >= 0, so log1p of it loses no digits. Where that
  overflows we fall back to a plain logsumexp.

  Args:
    log_p: log P(x) over the support; -inf allowed where P(x) = 0.
    log_q: log Q(x), same shape. Where Q(x) = 0 < P(x) the result is inf.
    orders: the orders alpha > 1.

  Returns:
    Array of D_alpha, one per order.
  """
  log_p = np.asarray(log_p, dtype=np.float64)
  log_q = np.asarray(log_q, dtype=np.float64)
  orders = np.asarray(orders, dtype=np.float64)
  if np.any(orders <= 1.0):
    raise ValueError(f'orders must be > 1, got {orders.min()}.')
  if np.any(np.isneginf(log_q) & np.isfinite(log_p)):
    return np.full(orders.shape, np.inf)
  keep = np.isfinite(log_q)
  log_p, log_q = log_p[keep], log_q[keep]
  r = np.where(np.isfinite(log_p), log_p - log_q, -np.inf)
  q = np.exp(log_q)
  out = np.empty(orders.shape)
  block = max(1, _BLOCK_ENTRIES // max(1, r.size))
  for start in range(0, orders.size, block):
    a = orders[start:start + block, None]
    with np.errstate(over='ignore', invalid='ignore'):
      excess = np.sum(q * (np.expm1(a * r) - a * np.expm1(r)), axis=1)
      stable = np.log1p(np.maximum(excess, 0.0))
      plain = special.logsumexp(log_q + a * r, axis=1)
    cgf = np.where(np.isfinite(stable) & (stable < 1.0), stable, plain)
    out[start:start + block] = np.maximum(cgf, 0.0) / (a[:, 0] - 1.0)
  return out


def worst_case_pair(theta: float, num_clients: int):
  """log PMFs (P, Q) of the one-trial worst case of Lemma 2 (term Pi_1).

  P = Ber(1/2 - theta) + Bin(n', 1/2 + theta), Q = Bin(n' + 1, 1/2 + theta),
  n' = ceil((n - 1)/2), on the support 0..n' + 1. The other term of Lemma 2
  is D(Q || P) by the bit-flip symmetry (module docstring).
  """
  n_prime = (num_clients - 1 + 1) // 2  # ceil((n - 1) / 2)
  p = 0.5 + theta
  k = np.arange(n_prime + 2)
  log_q = log_binomial_pmf(k, n_prime + 1, p)
  log_p = np.logaddexp(
      math.log1p(-p) + log_binomial_pmf(k - 1, n_prime, p),
      math.log(p) + log_binomial_pmf(k, n_prime, p))
  return log_p, log_q


RELATIONS = ('zero_out', 'replace_one')


def zero_out_pairs(theta: float, num_clients: int):
  """[(log P_a, log Q) for a in (p, 1 - p)]: the zero-out worst cases.

  P_a = Ber(a) + Bin(n', p), Q = Ber(1/2) + Bin(n', p), p = 1/2 + theta,
  n' = ceil((n - 1)/2), on the support 0..n' + 1 (module docstring).
  """
  n_prime = (num_clients - 1 + 1) // 2  # ceil((n - 1) / 2)
  p = 0.5 + theta
  k = np.arange(n_prime + 2)
  shifted = log_binomial_pmf(k - 1, n_prime, p)  # the target sent a 1
  same = log_binomial_pmf(k, n_prime, p)  # the target sent a 0
  half = math.log(0.5)
  log_q = np.logaddexp(half + shifted, half + same)
  return [(np.logaddexp(math.log(a) + shifted, math.log1p(-a) + same), log_q)
          for a in (p, 1.0 - p)]


def per_trial_rdp(
    theta: float, num_clients: int, orders: Sequence[float],
    relation: str = 'replace_one',
) -> np.ndarray:
  """The one-trial divergence bound of `relation`, per order.

  'replace_one': max of the two divergences of Lemma 2; 'zero_out': max
  over the pairs of `zero_out_pairs`, both directions.
  """
  if relation not in RELATIONS:
    raise ValueError(f'relation must be one of {RELATIONS}, got '
                     f'{relation!r}.')
  if relation == 'replace_one':
    pairs = [worst_case_pair(theta, num_clients)]
  else:
    pairs = zero_out_pairs(theta, num_clients)
  out = np.zeros(np.shape(orders))
  for log_p, log_q in pairs:
    out = np.maximum(out, renyi_divergence(log_p, log_q, orders))
    out = np.maximum(out, renyi_divergence(log_q, log_p, orders))
  return out


def rdp(
    event: events.PoissonBinomialDpEvent, orders: Sequence[float],
    relation: str = 'replace_one',
) -> np.ndarray:
  """RDP curve of one cPBM release, Lemma 2: m d times the one-trial bound.

  eps(alpha) = m d times `per_trial_rdp` of `relation`, computed exactly
  from the PMFs (see the module docstring for the reduction). The default
  'replace_one' is Lemma 2 as published and bounds both relations (over
  `event.replace_one_dimension` coordinates when set); 'zero_out' is the
  tighter curve for zero-out neighbours (over `event.dimension`).
  """
  _validate(event)
  orders = np.asarray(orders, dtype=np.float64)
  dimension = event.dimension
  if relation == 'replace_one' and event.replace_one_dimension is not None:
    dimension = event.replace_one_dimension
  return (int(event.num_trials) * int(dimension)
          * per_trial_rdp(float(event.theta), int(event.num_clients), orders,
                          relation))
