"""Conversions between RDP, zCDP and (eps, delta)-DP, for reporting.

* RDP -> (eps, delta) and delta given eps: dp-accounting's improved
  conversion (Canonne, Kamath & Steinke 2020, Prop. 12; Asoodeh et al. 2020).
* rho-zCDP <-> (eps, delta): the same conversion applied to the RDP curve
  alpha -> rho alpha of rho-zCDP (DDG paper Lemma 4), minimised over real
  orders alpha > 1 rather than over a grid.

zCDP composes by adding rho (not eps); a 1/2 eps'^2-zCDP guarantee, as in the
DDG paper's Theorem 5, is rho = eps'^2 / 2.
"""

import math
from typing import Callable, Sequence, Tuple

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
from scipy import optimize

from tff_ddp.accounting.orders import check_orders
from tff_ddp.utils import checks


def _curve(orders, rdp):
  orders = check_orders(orders)
  try:
    rdp = np.asarray(rdp, dtype=np.float64)
  except (TypeError, ValueError):
    raise TypeError(
        f'rdp must be a sequence of numbers, got {rdp!r}.') from None
  if rdp.shape != orders.shape:
    raise ValueError(f'rdp has shape {rdp.shape}, orders {orders.shape}.')
  if np.any(np.isnan(rdp)) or np.any(rdp < 0):
    raise ValueError(f'rdp values must be >= 0 (inf allowed), got {rdp}.')
  return orders, rdp


def rdp_to_epsilon(orders: Sequence[float], rdp: Sequence[float],
                   target_delta: float) -> Tuple[float, float]:
  """(eps, optimal order) of an RDP curve at `target_delta`.

  The one RDP -> (eps, delta) conversion of tff_ddp: dp-accounting's
  improved bound (Canonne, Kamath & Steinke 2020, Prop. 12; Asoodeh et al.).
  """
  delta = checks.probability(target_delta, 'target_delta', allow_one=False)
  orders, rdp = _curve(orders, rdp)
  eps, order = rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)
  return float(eps), float(order)


def rdp_to_delta(orders: Sequence[float], rdp: Sequence[float],
                 target_epsilon: float) -> Tuple[float, float]:
  """(delta, optimal order) of an RDP curve at `target_epsilon`."""
  eps = checks.nonnegative(target_epsilon, 'target_epsilon')
  orders, rdp = _curve(orders, rdp)
  delta, order = rdp_privacy_accountant.compute_delta(orders, rdp, eps)
  return float(delta), float(order)


def golden_section_min(objective: Callable[[float], float], lo: float,
                       hi: float, iterations: int) -> Tuple[float, float]:
  """(x, objective(x)): the least value seen by golden-section search.

  For an objective unimodal on [lo, hi] this converges to its minimum; for
  any objective the value returned is one the objective takes (an
  evaluated point), which is what the privacy conversions need: every order
  alpha (or epsilon) gives a valid bound, the search only finds a good one.
  One new evaluation per iteration.
  """
  g = (math.sqrt(5.0) - 1.0) / 2.0
  x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
  f1, f2 = objective(x1), objective(x2)
  best = min((x1, f1), (x2, f2), key=lambda t: t[1])
  for _ in range(iterations):
    if f1 < f2:
      hi, x2, f2 = x2, x1, f1
      x1 = hi - g * (hi - lo)
      f1 = objective(x1)
      best = min(best, (x1, f1), key=lambda t: t[1])
    else:
      lo, x1, f1 = x1, x2, f2
      x2 = lo + g * (hi - lo)
      f2 = objective(x2)
      best = min(best, (x2, f2), key=lambda t: t[1])
  return best


def _minimize_over_orders(objective: Callable[[float], float]) -> float:
  """min over alpha > 1 of a function convex in alpha (golden section).

  Searches over log(alpha - 1) in [log 1e-6, log 1e8].
  """
  return golden_section_min(lambda x: objective(1.0 + math.exp(x)),
                            math.log(1e-6), math.log(1e8), 200)[1]


def _check_rho(rho):
  return checks.real(rho, 'rho', low=0.0, allow_inf=True)


def zcdp_to_approx_dp(rho: float, target_delta: float) -> float:
  """eps of (eps, delta)-DP implied by rho-zCDP (DDG paper Lemma 4).

    eps = inf_{alpha > 1} rho alpha + log(1/(alpha delta))/(alpha - 1)
          + log(1 - 1/alpha).

  For 1/2 eps'^2-zCDP pass rho = eps'^2 / 2 (zCDP composes by adding rho).
  """
  rho = _check_rho(rho)
  target_delta = checks.probability(target_delta,
                                    'target_delta',
                                    allow_one=False)
  if rho == 0:
    return 0.0
  if math.isinf(rho):
    return math.inf

  def objective(alpha):
    return (rho * alpha + math.log(1.0 / (alpha * target_delta)) / (alpha - 1) +
            math.log(1.0 - 1.0 / alpha))

  # The objective is convex in alpha on (1, inf).
  return max(0.0, _minimize_over_orders(objective))


def zcdp_to_delta(rho: float, target_epsilon: float) -> float:
  """delta of (eps, delta)-DP implied by rho-zCDP at eps = `target_epsilon`.

  The inverse of `zcdp_to_approx_dp` in delta:

    log delta = inf_{alpha > 1} (alpha - 1)(rho alpha - eps)
                + (alpha - 1) log(1 - 1/alpha) - log(alpha),

  capped at 1.
  """
  rho = _check_rho(rho)
  target_epsilon = checks.nonnegative(target_epsilon, 'target_epsilon')
  if rho == 0:
    return 0.0
  if math.isinf(rho):
    return 1.0

  def objective(alpha):
    return ((alpha - 1) * (rho * alpha - target_epsilon) +
            (alpha - 1) * math.log1p(-1.0 / alpha) - math.log(alpha))

  # exp(min(0, .)): a log delta above 0 (huge rho) is delta 1, not an
  # OverflowError.
  return math.exp(min(0.0, _minimize_over_orders(objective)))


# The search for rho stops here: beyond it eps(rho) overflows float64.
_MAX_RHO = 1e300


def approx_dp_to_zcdp(target_epsilon: float, target_delta: float) -> float:
  """The largest rho whose rho-zCDP implies (eps, delta)-DP (Lemma 4).

  Root of `zcdp_to_approx_dp(rho, delta) = eps`, which increases in rho.
  Useful to split an (eps, delta) budget into zCDP shares that add up.
  """
  target_epsilon = checks.positive(target_epsilon, 'target_epsilon')
  target_delta = checks.probability(target_delta,
                                    'target_delta',
                                    allow_one=False)

  def gap(rho):
    return zcdp_to_approx_dp(rho, target_delta) - target_epsilon

  hi = 1.0
  while gap(hi) < 0:
    if hi > _MAX_RHO:
      raise ValueError(
          f'target_epsilon={target_epsilon} is beyond what zCDP with a finite '
          f'rho <= {_MAX_RHO:.3g} reaches at target_delta={target_delta}; '
          'use a smaller target_epsilon.')
    hi *= 2.0
  rho = optimize.brentq(gap, 0.0, hi, xtol=1e-15, rtol=1e-12)
  # Step back onto the safe side of the root if brentq landed past it.
  while gap(rho) > 0:
    rho *= 1 - 1e-12
  return rho
