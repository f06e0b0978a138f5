"""Exact worst-case pairs of the distributed mechanisms, one coordinate each.

What the PLD accountant (`tff_ddp.accounting.pld_accountant`) composes: for
each release, a `pld_curves.Curve` bounding the hockey-stick curves of its
worst pair of neighbouring output laws in ONE coordinate (or one Bernoulli
trial for cPBM), and how many such independent pieces (`Leaf.count`) the
release is made of. DDG: the n-fold convolution of N_Z(0, sigma^2), or one
N_Z(0, n sigma^2) with Theorem 9 / Proposition 10 of Kairouz, Liu & Steinke
(2021), "The distributed discrete Gaussian mechanism for federated learning
with secure aggregation" (arXiv:2102.06387); Skellam: Pois(n lambda) -
Pois(n lambda); cPBM: the reduction of Lemma 2 of Chen, Choquette-Choo,
Kairouz & Suresh, "Federated frequency estimation" (Alg. 3), up to
`CPBM_MAX_CLIENTS` clients, fair coins beyond. Log-concavity: Hoggar 1974.

Why each pair is the worst: docs/notes/pld_accountant.md.
"""

import functools
import math
from typing import Tuple

import numpy as np
from scipy import special
from scipy import stats

from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import events
from tff_ddp.accounting import pld_curves

# Relative error allowed for the computed PMFs (float sums of non-negative
# terms, gammaln, scipy's ive): far above what they make, far below what
# matters (it scales delta by 1 + 2e-9).
PMF_RELATIVE_ERROR = 1e-9
# Entries below this are dropped from convolutions; their mass is missing.
_TINY = 1e-300
# The single-Gaussian route of the DDG sum when tau/2 is below this.
DDG_SANDWICH_TAU = 1e-9
# The exact convolution of the DDG shares is used up to this many points.
DDG_MAX_EXACT_POINTS = 40001
CPBM_MAX_CLIENTS = 512
# Noise laws wider than this many points are not built (RDP is reported).
MAX_NOISE_POINTS = 2_000_001
# Quantile grid of the fair-coin count J (rounded down to its points).
_FAIR_COIN_STEPS = 200
_FAIR_COIN_TAIL = 1e-18


class Unsupported(ValueError):
  """No exact pair for this release (the caller falls back to RDP)."""


def _log_dg(sigma: float, width: int) -> np.ndarray:
  """log N_Z(0, sigma^2) on -width..width (normalised on the window)."""
  x = np.arange(-width, width + 1, dtype=np.float64)
  return pld_curves.log_normalize(-x * x / (2.0 * sigma * sigma))


def _dg_width(sigma: float) -> int:
  """Half-width beyond which N_Z(0, sigma^2) has mass < 1e-310."""
  return int(math.ceil(sigma * math.sqrt(2.0 * 715.0))) + 2


@functools.lru_cache(maxsize=64)
def ddg_sum(sigma: float, n: int) -> Tuple[np.ndarray, float, float]:
  """(log f centred on -w..w, log error factor a, missing mass) of the sum
  of n N_Z(0, sigma^2): P_true <= e^a f + D and >= e^-a f pointwise."""
  t = ddg_rdp.tau(sigma, n)
  rel = math.log1p(PMF_RELATIVE_ERROR)
  total_width = n * _dg_width(sigma)
  if n == 1 or t / 2.0 <= DDG_SANDWICH_TAU or (
      2 * min(total_width, _dg_width(sigma * math.sqrt(n))) + 1
      > DDG_MAX_EXACT_POINTS):
    # One discrete Gaussian (exact for n = 1), Theorem 9's factor.
    if t / 2.0 > 1.0:
      raise Unsupported(
          f'the sum of {n} discrete Gaussians of scale {sigma:g} is too '
          f'large to convolve here and too far from one discrete Gaussian '
          f'(tau/2 = {t / 2:.3g}).')
    sd = sigma * math.sqrt(n)
    if 2 * _dg_width(sd) + 1 > MAX_NOISE_POINTS:
      raise Unsupported(f'the summed noise (stddev {sd:.3g}) is too wide '
                        'to tabulate')
    return _log_dg(sd, _dg_width(sd)), t / 2.0 + rel, 1e-300
  single = np.exp(_log_dg(sigma, _dg_width(sigma)))
  result, missing = np.array([1.0]), 0.0
  power, k = single, n
  while True:
    if k & 1:
      result = np.convolve(result, power)
      result, dropped = _trim(result)
      missing += dropped
    k >>= 1
    if not k:
      break
    power = np.convolve(power, power)
    power, dropped = _trim(power)
    missing += dropped
  # Trimming is symmetric (the law is), so the result stays centred.
  with np.errstate(divide='ignore'):
    log_f = np.log(result)
  return log_f, rel, missing + 1e-300


def _trim(values: np.ndarray):
  """values without the symmetric ends below _TINY, and the dropped mass
  (counted as missing by the caller; each entry is < 1e-300)."""
  big = np.nonzero(values >= _TINY)[0]
  cut = min(big[0], values.size - 1 - big[-1])
  dropped = _TINY * 2 * cut
  if cut:
    values = values[cut:values.size - cut]
  return values, dropped


def _skellam_tail(mu: float, t: float) -> float:
  """Chernoff bound on P(S >= t) for S = Pois(mu) - Pois(mu): the MGF is
  exp(2 mu (cosh s - 1)); at s = asinh(t / (2 mu))."""
  s = math.asinh(t / (2.0 * mu))
  return math.exp(2.0 * mu * (math.cosh(s) - 1.0) - s * t)


@functools.lru_cache(maxsize=64)
def skellam_sum(variance: float) -> Tuple[np.ndarray, float, float]:
  """(log f on -w..w, log error factor, missing mass) of the symmetric
  Skellam of `variance` (= 2 mu)."""
  mu = variance / 2.0
  width = int(math.ceil(math.sqrt(variance))) + 2
  while _skellam_tail(mu, width) > 1e-310:
    width *= 2
  if 2 * width + 1 > MAX_NOISE_POINTS:
    raise Unsupported(f'the summed noise (variance {variance:.3g}) is too '
                      'wide to tabulate')
  x = np.arange(-width, width + 1)
  with np.errstate(divide='ignore'):
    log_f = np.log(special.ive(np.abs(x), 2.0 * mu))
  underflow = np.count_nonzero(~np.isfinite(log_f)) * 1e-307
  return (log_f, math.log1p(PMF_RELATIVE_ERROR),
          2.0 * _skellam_tail(mu, width + 1) + underflow)


def shift_curve(noise, shift: int) -> pld_curves.Curve:
  """The curve of (f(. - shift), f) for a symmetric log-concave f."""
  log_f, log_err, missing = noise
  if shift == 0:
    return pld_curves.Family([(np.zeros(1), np.zeros(1))])
  return pld_curves.Family([pld_curves.shift_pair(log_f, shift)],
                           log_hi=log_err,
                           log_lo=-log_err,
                           missing=missing,
                           symmetric=True)


def integer_shift(event, relation) -> int:
  """V (zero-out) or 2V (replace-one): the largest coordinate shift of one
  client, V = floor(min(Delta_2, Delta_1, Delta_inf)) (inputs are integers;
  Delta_inf the event's `linf_sensitivity`, if any)."""
  linf = event.linf_sensitivity
  v = math.floor(
      min(float(event.l2_sensitivity), ddg_rdp.l1_sensitivity(event),
          math.inf if linf is None else float(linf)) + 1e-9)
  return 2 * v if events.as_relation(relation) is (
      events.Relation.REPLACE_ONE) else v


@functools.lru_cache(maxsize=8)
def _log_factorials(n: int) -> np.ndarray:
  return special.gammaln(np.arange(n + 1, dtype=np.float64) + 1.0)


def _log_binom(n: int, p: float) -> np.ndarray:
  """log Bin(k; n, p), k = 0..n (gammaln: relative error ~1e-15)."""
  k = np.arange(n + 1, dtype=np.float64)
  lf = _log_factorials(max(n, 1024))
  with np.errstate(divide='ignore'):
    return (lf[n] - lf[:n + 1] - lf[n::-1] + k * math.log(p) +
            (n - k) * math.log1p(-p))


def _trial_pair(noise: np.ndarray, a: float, b: float):
  """(log P, log Q) for Ber(a) + S vs Ber(b) + S, S with PMF `noise`."""
  pad = np.zeros(1)
  s0 = np.concatenate([noise, pad])  # the target sent 0
  s1 = np.concatenate([pad, noise])  # the target sent 1
  with np.errstate(divide='ignore'):
    log_p = np.log((1.0 - a) * s0 + a * s1)
    log_q = np.log((1.0 - b) * s0 + b * s1)
  return log_p, log_q


# theta is rounded up to 2^(j / CPBM_THETA_STEPS) before the family is built
# (and cached): the worst case over inputs in [1/2 - theta, 1/2 + theta]
# can only grow with theta (the sets grow), so the family at theta' >= theta
# bounds the release at theta; a calibration over theta then reuses a few
# families, at most 2^(2^-20) - 1 < 1e-6 of theta from the exact one.
CPBM_THETA_STEPS = 1 << 20


def theta_grid_point(theta: float) -> float:
  """The least 2^(j / CPBM_THETA_STEPS) >= theta, capped at 1/4."""
  theta = float(theta)
  point = min(
      0.25,
      2.0**(math.ceil(CPBM_THETA_STEPS * math.log2(theta)) / CPBM_THETA_STEPS))
  while point < theta:  # log2 rounding
    point = min(0.25, point * 2.0**(1.0 / CPBM_THETA_STEPS))
  return point


def cpbm_trial_family(theta: float, num_clients: int,
                      replace_one: bool) -> pld_curves.Curve:
  """The per-trial worst-case family (docs/notes/pld_accountant.md, "cPBM,
  per Bernoulli trial"), at `theta_grid_point(theta)`."""
  return _cpbm_trial_family(theta_grid_point(theta), int(num_clients),
                            bool(replace_one))


@functools.lru_cache(maxsize=64)
def _cpbm_trial_family(theta, num_clients, replace_one):
  if num_clients > CPBM_MAX_CLIENTS:
    return fair_coin_curve(theta, int(num_clients), replace_one)
  n = int(num_clients)
  p_plus, p_minus = 0.5 + theta, 0.5 - theta
  b = p_minus if replace_one else 0.5
  ups = [np.exp(_log_binom(k, p_plus)) for k in range(n)]
  downs = [np.exp(_log_binom(k, p_minus)) for k in range(n)]
  pairs = [
      _trial_pair(np.convolve(ups[k], downs[n - 1 - k]), p_plus, b)
      for k in range(n)
  ]
  return pld_curves.Family(pairs,
                           log_hi=math.log1p(PMF_RELATIVE_ERROR),
                           log_lo=math.log1p(-PMF_RELATIVE_ERROR))


@functools.lru_cache(maxsize=64)
def fair_coin_curve(theta: float, num_clients: int,
                    replace_one: bool) -> pld_curves.Curve:
  """The fair-coin bound, one trial (docs/notes/pld_accountant.md, "Fair
  coins")."""
  others = num_clients - 1
  fair = 1.0 - 2.0 * theta
  p_plus, p_minus = 0.5 + theta, 0.5 - theta
  b = p_minus if replace_one else 0.5
  dist = stats.binom(others, fair)
  lo = int(dist.ppf(_FAIR_COIN_TAIL))
  lo = max(0, lo - 1)
  below = float(dist.cdf(lo - 1)) if lo > 0 else 0.0
  qs = np.linspace(0.0, 1.0, _FAIR_COIN_STEPS + 1)
  points = np.unique(
      np.concatenate([[lo],
                      dist.ppf(np.clip(qs, _FAIR_COIN_TAIL,
                                       1 - 1e-16)).astype(int)]))
  points = points[points >= lo]
  # Weight of each grid point: the mass of J in [point, next point).
  edges = np.append(points, others + 1)
  weights = dist.cdf(edges[1:] - 1) - dist.cdf(edges[:-1] - 1)
  pairs = [
      _trial_pair(np.exp(_log_binom(int(j), 0.5)), p_plus, b) for j in points
  ]
  return Mixture(pairs, weights, missing=below + 1e-15)


class Mixture(pld_curves.Curve):
  """Disjoint mixture of pairs (the mixture index revealed): H is the
  weighted sum of the pairs' curves."""

  def __init__(self, pairs, weights, missing):
    self._parts = [
        pld_curves.Family([pair],
                          log_hi=math.log1p(PMF_RELATIVE_ERROR),
                          log_lo=math.log1p(-PMF_RELATIVE_ERROR))
        for pair in pairs
    ]
    self._weights = np.asarray(weights, np.float64)
    self._missing = float(missing)
    rem = [p.ranges[0] for p in self._parts]
    add = [p.ranges[1] for p in self._parts]
    self._ranges = ((min(r[0] for r in rem), max(r[1] for r in rem)),
                    (min(r[0] for r in add), max(r[1] for r in add)))

  def _sum(self, eps, which):
    out = np.full(np.shape(eps), self._missing)
    for w, part in zip(self._weights, self._parts):
      out = out + w * getattr(part, which)(eps)
    return np.minimum(out, 1.0)

  def remove(self, eps):
    return self._sum(eps, 'remove')

  def add(self, eps):
    return self._sum(eps, 'add')

  @property
  def ranges(self):
    return self._ranges


class Smaller(pld_curves.Curve):
  """Pointwise minimum of two bounds on the same pairs' curves."""

  def __init__(self, first, second):
    self._first, self._second = first, second

  def remove(self, eps):
    return np.minimum(self._first.remove(eps), self._second.remove(eps))

  def add(self, eps):
    return np.minimum(self._first.add(eps), self._second.add(eps))

  @property
  def ranges(self):
    (a, b), (c, d) = self._first.ranges
    (e, f), (g, h) = self._second.ranges
    return (min(a, e), max(b, f)), (min(c, g), max(d, h))
