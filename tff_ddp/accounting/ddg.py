"""Privacy of the distributed discrete Gaussian (DDG) sum.

Kairouz, Liu & Steinke (2021), "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation" (``shared/papers/
distributed-discrete-gaussian.txt``): Theorem 5 (eqs. 3-5), Proposition 10
(eq. 8) and Theorem 9. Every quantity is in the scaled integer domain.

Neighbouring relation: zero-out (one client's vector replaced by zeros while
all `num_clients` clients still add their noise), as in the paper's footnote to
Theorem 5. Under add/remove the removed client's noise share would vanish too;
under replace-one the sensitivity doubles.
"""

import fractions
import math
from typing import Optional, Sequence, Tuple

import dp_accounting
import numpy as np

from tff_ddp.accounting import events
# Re-exported: the conversion lives in conversions.py.
from tff_ddp.accounting.conversions import zcdp_to_approx_dp  # pylint: disable=unused-import

# Orders used when the caller gives none: dense near 1, then geometric.
DEFAULT_ORDERS = tuple(
    [1.0 + x / 20.0 for x in range(1, 20)]
    + [2.0 + x / 4.0 for x in range(0, 40)]
    + [12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 48.0, 64.0, 96.0, 128.0,
       256.0, 512.0, 1024.0]
)


def rounded_l2_norm_bound_squared(
    scaled_l2_clip: float, dimension: int, beta: float
) -> float:
  """Squared l2 bound after conditional randomized rounding, Theorem 5 eq. (3).

  In the scaled domain (c/gamma = `scaled_l2_clip`, d = `dimension`) the
  rounding loop of Algorithm 1 accepts x~ only if ||x~||_2^2 is at most

    min{ (c/gamma + sqrt(d))^2,
         (c/gamma)^2 + d/4 + sqrt(2 log(1/beta)) * (c/gamma + sqrt(d)/2) }.

  The first bound holds for every rounding (||x~ - x''||_inf < 1); the second
  is the conditional one and is absent for beta = 0 (log(1/0) = inf).

  Args:
    scaled_l2_clip: c / gamma, the clip norm in integer units; >= 0.
    dimension: d, the (padded) dimension; >= 1.
    beta: conditional rounding bias in [0, 1).

  Returns:
    The squared bound, a float.
  """
  _check_nonnegative(scaled_l2_clip, 'scaled_l2_clip')
  if dimension < 1:
    raise ValueError(f'dimension must be >= 1, got {dimension}.')
  if not 0.0 <= beta < 1.0:
    raise ValueError(f'beta must be in [0, 1), got {beta}.')
  c = float(scaled_l2_clip)
  sqrt_d = math.sqrt(dimension)
  bound = (c + sqrt_d) ** 2
  if beta > 0.0:
    conditional = (
        c**2 + dimension / 4.0
        + math.sqrt(2.0 * math.log(1.0 / beta)) * (c + sqrt_d / 2.0)
    )
    bound = min(bound, conditional)
  return bound


def tau(local_stddev: float, num_clients: int) -> float:
  """The tau of Theorem 5 eq. (4) / Proposition 10, per coordinate.

    tau = 10 * sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 * k / (k+1)),

  with sigma the *scaled* local noise (sigma/gamma in the paper's notation).
  tau/2 bounds the max divergence between the sum of n discrete Gaussians of
  scale sigma and one discrete Gaussian of scale sqrt(n) sigma (Theorem 9,
  extended by the triangle inequality). It is negligible for sigma >~ 1 and
  explodes below; Theorem 9 needs sigma >= 1/2.
  """
  _check_nonnegative(local_stddev, 'local_stddev')
  if num_clients < 1:
    raise ValueError(f'num_clients must be >= 1, got {num_clients}.')
  if num_clients == 1:
    return 0.0
  k = np.arange(1, num_clients, dtype=np.float64)
  exponents = -2.0 * math.pi**2 * float(local_stddev) ** 2 * k / (k + 1.0)
  return float(10.0 * np.sum(np.exp(exponents)))


def _validated(event: events.DistributedDiscreteGaussianDpEvent):
  """Returns (s2, s1, tau, d) of an event, or None when no bound applies."""
  if not isinstance(event, events.DistributedDiscreteGaussianDpEvent):
    raise TypeError(
        'Expected a DistributedDiscreteGaussianDpEvent, got '
        f'{type(event).__name__}.'
    )
  _check_nonnegative(event.l2_sensitivity, 'l2_sensitivity')
  _check_nonnegative(event.local_stddev, 'local_stddev')
  if int(event.num_clients) != event.num_clients or event.num_clients < 1:
    raise ValueError(
        f'num_clients must be an integer >= 1, got {event.num_clients}.'
    )
  if int(event.dimension) != event.dimension or event.dimension < 1:
    raise ValueError(
        f'dimension must be an integer >= 1, got {event.dimension}.'
    )
  if event.l2_sensitivity == 0:
    return 0.0, 0.0, 0.0, event.dimension
  if event.local_stddev < 0.5:
    # Theorem 9 (hence Theorem 5) needs the scaled local noise >= 1/2.
    return None
  d = int(event.dimension)
  l1 = event.l1_sensitivity
  if l1 is None:
    l1 = min(math.sqrt(d) * event.l2_sensitivity, event.l2_sensitivity**2)
  _check_nonnegative(l1, 'l1_sensitivity')
  central = math.sqrt(event.num_clients) * event.local_stddev
  return (
      event.l2_sensitivity / central,
      l1 / central,
      tau(event.local_stddev, int(event.num_clients)),
      d,
  )


def zcdp_epsilon(event: events.DistributedDiscreteGaussianDpEvent) -> float:
  """The epsilon of 1/2 eps^2-zCDP for one DDG release (Prop. 10, eq. 8).

  With s2 = Delta_2/(sqrt(n) sigma), s1 = Delta_1/(sqrt(n) sigma):

    eps = min{ sqrt(s2^2 + tau d / 2),
               sqrt(s2^2 + 2 s1 tau + tau^2 d),
               s2 + tau sqrt(d) }.

  Theorem 5 eq. (5) is the first and last term. This is the eps of
  concentrated DP, *not* of (eps, delta)-DP; convert with
  `zcdp_to_approx_dp` (Lemma 4). Returns inf when the scaled local noise is
  below 1/2, where the theorem does not apply.
  """
  parts = _validated(event)
  if parts is None:
    return math.inf
  s2, s1, t, d = parts
  return min(
      math.sqrt(s2**2 + 0.5 * t * d),
      math.sqrt(s2**2 + 2.0 * s1 * t + t**2 * d),
      s2 + t * math.sqrt(d),
  )


def rdp(
    event: events.DistributedDiscreteGaussianDpEvent,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> np.ndarray:
  """RDP curve eps(alpha) of one DDG release, at each order alpha > 1.

  The minimum of four valid bounds:

  * the three terms of eq. (8) as RDP: (alpha/2) eps_i^2 for
    eps_1^2 = s2^2 + tau d/2, eps_2^2 = s2^2 + 2 s1 tau + tau^2 d,
    eps_3 = s2 + tau sqrt(d);
  * alpha s2^2/2 + (tau d/2) (2 alpha - 1)/(alpha - 1). Derivation: with
    P, Q the shifted sums of noise and P', Q' the shifted single discrete
    Gaussians N_Z(0, n sigma^2)^d, Theorem 9 (triangle inequality over the n
    shares, composition over d coordinates) gives e^{-a} P' <= P <= e^{a} P'
    pointwise with a = tau d / 2, likewise for Q; then
    D_alpha(P||Q) <= D_alpha(P'||Q') + a alpha/(alpha-1) + a, and Theorem 8
    gives D_alpha(P'||Q') <= alpha s2^2 / 2.

  The public code of the paper uses alpha s2^2/2 + tau d for the last term; we
  could not derive that for small alpha, so we use the form above, which is
  larger by tau d / (2 (alpha - 1)) -- immaterial whenever tau is negligible,
  which is the only regime a calibrated configuration should be in.

  Returns an array of inf if the scaled local noise is below 1/2.
  """
  orders = np.asarray(orders, dtype=np.float64)
  if np.any(orders <= 1.0):
    raise ValueError(f'RDP orders must be > 1, got {orders.min()}.')
  parts = _validated(event)
  if parts is None:
    return np.full_like(orders, np.inf)
  s2, s1, t, d = parts
  a = 0.5 * t * d
  terms = np.stack([
      orders / 2.0 * (s2**2 + a),
      orders / 2.0 * (s2**2 + 2.0 * s1 * t + t**2 * d),
      orders / 2.0 * (s2 + t * math.sqrt(d)) ** 2,
      orders * s2**2 / 2.0 + a * (2.0 * orders - 1.0) / (orders - 1.0),
  ])
  return terms.min(axis=0)


def epsilon(
    event: dp_accounting.DpEvent,
    target_delta: float,
    count: int = 1,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> Tuple[float, float]:
  """(eps, best order) of `count` compositions of a DDG event at `target_delta`.

  RDP -> (eps, delta) with dp-accounting's conversion (the improved one of
  Canonne, Kamath & Steinke / Asoodeh et al.). Zero-out neighbours.
  """
  curve = count * rdp(event, orders)
  eps, order = dp_accounting.rdp.compute_epsilon(orders, curve, target_delta)
  return float(eps), float(order)


def _check_nonnegative(value, name):
  if value is None or not math.isfinite(value) or value < 0:
    raise ValueError(f'{name} must be a finite number >= 0, got {value}.')
