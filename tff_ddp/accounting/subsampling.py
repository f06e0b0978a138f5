"""RDP of subsampled rounds, for any RDP curve of the base mechanism.

`known_sample_rdp`: the adversary sees the sample (exact mixture, every
order). `poisson_rdp`: Zhu & Wang (2019), "Poisson subsampled Renyi
differential privacy", Theorem 6, integer orders. `without_replacement_rdp`:
Wang, Balle & Kasiviswanathan (2019), "Subsampled Renyi differential privacy
and analytical moments accountant", Theorem 9 (replace-one curve), with
fractional orders by WBK19 Corollary 10 (van Erven & Harremoes 2014). Which
one applies is the accountant's choice (`tff_ddp.accounting.accountant`).

The three bounds and their formulas: docs/notes/rdp_accountant.md.
"""

import math
from typing import Callable, Sequence

import numpy as np
from scipy import special

from tff_ddp.accounting.orders import check_orders
from tff_ddp.utils import checks

RdpFunction = Callable[[np.ndarray], np.ndarray]


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
  return (special.gammaln(n + 1.0) - special.gammaln(k + 1.0) -
          special.gammaln(n - k + 1.0))


def _poisson_cgf_int(alpha: int, q: float, eps: np.ndarray) -> float:
  """(alpha - 1) eps'(alpha) of Zhu & Wang; eps[l] = eps(l), l = 0..alpha."""
  log_q, log_1mq = math.log(q), math.log1p(-q)
  terms = [(alpha - 1) * log_1mq + math.log1p((alpha - 1) * q),
           _log_comb(alpha, 2) + 2 * log_q + (alpha - 2) * log_1mq + eps[2]]
  if alpha >= 3:
    l = np.arange(3, alpha + 1, dtype=np.float64)
    terms.extend(
        math.log(3.0) + _log_comb(alpha, l) + (alpha - l) * log_1mq +
        l * log_q + (l - 1) * eps[3:alpha + 1])
  return float(special.logsumexp(np.asarray(terms, dtype=np.float64)))


def _wor_cgf_int(alpha: int, gamma: float, eps: np.ndarray) -> float:
  """(alpha - 1) eps'(alpha) of WBK19 Theorem 9 with eps(inf) = inf."""
  log_g = math.log(gamma)
  e2 = eps[2]
  log_second = min(
      math.log(4.0) +
      (e2 + math.log(-math.expm1(-e2)) if e2 > 0 else -math.inf),
      math.log(2.0) + e2)
  terms = [0.0, 2 * log_g + _log_comb(alpha, 2) + log_second]
  if alpha >= 3:
    j = np.arange(3, alpha + 1, dtype=np.float64)
    terms.extend(
        math.log(2.0) + j * log_g + _log_comb(alpha, j) +
        (j - 1) * eps[3:alpha + 1])
  return float(special.logsumexp(np.asarray(terms, dtype=np.float64)))


def _amplify(rdp_fn: RdpFunction, orders, rate, cgf_int) -> np.ndarray:
  """The bound of `cgf_int` at `orders` for a sampling rate in [0, 1]."""
  orders = check_orders(orders)
  if rate == 0.0:
    return np.zeros(orders.shape)
  if rate == 1.0:
    return np.asarray(rdp_fn(orders), dtype=np.float64)
  top = int(math.ceil(orders.max()))
  top = max(top, 2)
  integers = np.arange(2, top + 1, dtype=np.float64)
  eps = np.concatenate([[0.0, 0.0], np.asarray(rdp_fn(integers), np.float64)])
  if np.any(np.isnan(eps)) or np.any(eps < 0):
    raise ValueError('the RDP curve must be >= 0 at every integer order.')
  cgf_cache = {1: 0.0}

  def cgf(k):
    if k not in cgf_cache:
      cgf_cache[k] = cgf_int(k, eps)
    return cgf_cache[k]

  out = np.empty(orders.shape)
  for i, a in enumerate(orders):
    lo, hi = math.floor(a), math.ceil(a)
    if lo == hi:
      k = cgf(int(a))
    else:
      t = a - lo
      k = (1 - t) * cgf(int(lo)) + t * cgf(int(hi))
    out[i] = max(k, 0.0) / (a - 1.0)
  unsampled = np.asarray(rdp_fn(orders), dtype=np.float64)
  return np.minimum(out, unsampled)


def poisson_rdp(rdp_fn: RdpFunction, sampling_probability: float,
                orders: Sequence[float]) -> np.ndarray:
  """RDP at `orders` of the Poisson-subsampled mechanism (Zhu & Wang 2019).

  Args:
    rdp_fn: maps an array of orders to the base mechanism's RDP there; it is
      called at every integer order 2..ceil(max(orders)) and at `orders`.
    sampling_probability: q in [0, 1].
    orders: orders > 1; fractional ones by interpolating the cumulant
      between integers (WBK19 Corollary 10; docs/notes/rdp_accountant.md,
      "Fractional orders").

  Returns:
    min(Zhu-Wang bound, unsampled curve) per order.
  """
  q = checks.probability(sampling_probability,
                         'sampling_probability',
                         allow_zero=True)
  return _amplify(rdp_fn, orders, q, lambda a, eps: _poisson_cgf_int(a, q, eps))


def without_replacement_rdp(rdp_fn: RdpFunction, sample_size: int,
                            population_size: int,
                            orders: Sequence[float]) -> np.ndarray:
  """RDP at `orders` of sampling `sample_size` of `population_size` (WBK19).

  Replace-one relation: `rdp_fn` must be the base mechanism's replace-one
  curve, and so is the result.
  """
  population_size = checks.integer(population_size, 'population_size', 1)
  sample_size = checks.integer(sample_size, 'sample_size', 0, population_size)
  gamma = sample_size / population_size
  return _amplify(rdp_fn, orders, gamma,
                  lambda a, eps: _wor_cgf_int(a, gamma, eps))


def known_sample_rdp(rdp_fn: RdpFunction, sampling_probability: float,
                     orders: Sequence[float]) -> np.ndarray:
  """RDP at `orders` of a round whose sample the adversary sees.

  (1/(alpha - 1)) log(1 - q + q exp((alpha - 1) eps(alpha))), computed in log
  space (derived in docs/notes/rdp_accountant.md, `known_sample_rdp`).
  `rdp_fn` is the base mechanism's curve under the relation in use; q is the
  probability that the client is in the sample (the sampling rate, or
  sample_size / population without replacement).
  """
  q = checks.probability(sampling_probability,
                         'sampling_probability',
                         allow_zero=True)
  orders = check_orders(orders)
  eps = np.asarray(rdp_fn(orders), dtype=np.float64)
  if q == 0.0:
    return np.zeros(orders.shape)
  if q == 1.0:
    return eps
  with np.errstate(over='ignore', invalid='ignore'):
    cgf = np.logaddexp(math.log1p(-q), math.log(q) + (orders - 1.0) * eps)
  cgf = np.where(np.isinf(eps), np.inf, cgf)
  return np.minimum(np.maximum(cgf, 0.0) / (orders - 1.0), eps)
