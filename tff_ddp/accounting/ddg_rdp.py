"""Privacy of the distributed discrete Gaussian (DDG) sum.

Kairouz, Liu & Steinke (2021), "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation" (arXiv:2102.06387): Theorem 5
(eqs. 3-5), Proposition 10 (eq. 8) and Theorem 9. Every quantity is in the
scaled integer domain.

Neighbouring relations (`rdp(..., relation=...)`):

* 'zero_out' -- one client's vector replaced by zeros while all `num_clients`
  clients still add their noise, as in the paper's footnote to Theorem 5.
* 'replace_one' -- one client's vector replaced by another: the difference
  of the sums is bounded by twice the sensitivities (triangle inequality),
  so both Delta_2 and Delta_1 double.

Under add/remove the removed client's noise share would vanish too; no curve
here covers that relation.
"""

import math
from typing import Sequence

import numpy as np

from tff_ddp.accounting import events
from tff_ddp.accounting.orders import check_orders
from tff_ddp.utils import checks

RELATIONS = events.RELATIONS
# tau's sum has num_clients - 1 terms; the first _TAU_EXACT_TERMS are summed
# exactly, the rest bounded (the terms decrease in k).
_TAU_EXACT_TERMS = 1 << 20


def tau(local_stddev: float, num_clients: int) -> float:
  """The tau of Theorem 5 eq. (4) / Proposition 10, per coordinate.

    tau = 10 * sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 * k / (k+1)),

  with sigma the *scaled* local noise (sigma/gamma in the paper's notation).
  tau/2 bounds the max divergence between the sum of n discrete Gaussians of
  scale sigma and one discrete Gaussian of scale sqrt(n) sigma (Theorem 9,
  extended by the triangle inequality). It is negligible for sigma >~ 1 and
  explodes below; Theorem 9 needs sigma >= 1/2.

  Memory and time are bounded whatever n is: the first 2^20 terms are summed
  exactly and the remaining ones bounded by (number of them) times the
  2^20-th term, which is an upper bound because k/(k+1) increases in k, so
  the terms decrease (and exceeds the exact tail by a factor of at most
  exp(2 pi^2 sigma^2 / 2^20)).
  """
  sigma = checks.nonnegative(local_stddev, 'local_stddev')
  n = checks.integer(num_clients, 'num_clients', 1)
  if n == 1:
    return 0.0
  exact = min(n - 1, _TAU_EXACT_TERMS)
  k = np.arange(1, exact + 1, dtype=np.float64)
  coefficient = -2.0 * math.pi**2 * sigma * sigma
  total = float(np.sum(np.exp(coefficient * k / (k + 1.0))))
  rest = n - 1 - exact
  if rest > 0:
    total += rest * math.exp(coefficient * exact / (exact + 1.0))
  return 10.0 * total


def l1_sensitivity(event) -> float:
  """The event's Delta_1, or min(sqrt(d) Delta_2, Delta_2^2) if not given.

  For any event with `l1_sensitivity`, `l2_sensitivity` and `dimension` of
  an integer vector: the DDG's and the Skellam's (`skellam_rdp`).

  The default holds for any integer vector with l2 norm <= Delta_2:
  ||v||_1 <= sqrt(d) ||v||_2 (Cauchy-Schwarz) and ||v||_1 <= ||v||_2^2
  (|v_i| <= v_i^2 for integers).
  """
  if event.l1_sensitivity is not None:
    return checks.nonnegative(event.l1_sensitivity, 'l1_sensitivity')
  l2 = event.l2_sensitivity
  return min(math.sqrt(event.dimension) * l2, l2 * l2)


def check_event(event) -> events.DistributedDiscreteGaussianDpEvent:
  """Validates the fields of a DDG event (TypeError / ValueError)."""
  return check_sum_event(event, events.DistributedDiscreteGaussianDpEvent,
                         'local_stddev', checks.nonnegative)


def check_sum_event(event, event_type, noise_field: str, noise_check):
  """Validates an event of a sum of clients' integer noise: the DDG's or
  the Skellam's (`skellam_rdp`), whose fields differ only in the noise
  (`noise_field`, checked by `noise_check(value, name)`)."""
  if not isinstance(event, event_type):
    raise TypeError(f'Expected a {event_type.__name__}, got '
                    f'{type(event).__name__}.')
  checks.nonnegative(event.l2_sensitivity, 'l2_sensitivity')
  noise_check(getattr(event, noise_field), noise_field)
  checks.integer(event.num_clients, 'num_clients', 1, events.MAX_EVENT_INTEGER)
  checks.integer(event.dimension, 'dimension', 1, events.MAX_EVENT_INTEGER)
  if event.l1_sensitivity is not None:
    checks.nonnegative(event.l1_sensitivity, 'l1_sensitivity')
  if event.sampler_tv_distance is not None:
    checks.real(event.sampler_tv_distance, 'sampler_tv_distance', 0.0, 1.0)
  checks.optional_integer(getattr(event, 'l0_sensitivity', None),
                          'l0_sensitivity', 1, events.MAX_EVENT_INTEGER)
  if event.linf_sensitivity is not None:
    checks.nonnegative(event.linf_sensitivity, 'linf_sensitivity')
  return event


def _terms(event, relation: str):
  """(s2, s1, tau, d), or None when no bound applies (sigma < 1/2)."""
  check_event(event)
  relation = events.as_relation(relation)
  d = int(event.dimension)
  if event.l2_sensitivity == 0:
    return 0.0, 0.0, 0.0, d
  if event.local_stddev < 0.5:
    # Theorem 9 (hence Theorem 5) needs the scaled local noise >= 1/2.
    return None
  factor = 2.0 if relation is events.Relation.REPLACE_ONE else 1.0
  central = math.sqrt(event.num_clients) * event.local_stddev
  return (factor * event.l2_sensitivity / central,
          factor * l1_sensitivity(event) / central,
          tau(event.local_stddev, int(event.num_clients)), d)


def zcdp_epsilon(event: events.DistributedDiscreteGaussianDpEvent,
                 relation: str = 'zero_out') -> float:
  """The epsilon of 1/2 eps^2-zCDP for one DDG release (Prop. 10, eq. 8).

  With s2 = Delta_2/(sqrt(n) sigma), s1 = Delta_1/(sqrt(n) sigma):

    eps = min{ sqrt(s2^2 + tau d / 2),
               sqrt(s2^2 + 2 s1 tau + tau^2 d),
               s2 + tau sqrt(d) }.

  Theorem 5 eq. (5) is the first and last term. This is the eps of
  concentrated DP, *not* of (eps, delta)-DP; convert with
  `conversions.zcdp_to_approx_dp` (Lemma 4) and rho = eps^2 / 2. Returns inf
  when the scaled local noise is below 1/2, where the theorem does not apply.
  """
  parts = _terms(event, relation)
  if parts is None:
    return math.inf
  s2, s1, t, d = parts
  return min(
      math.sqrt(s2 * s2 + 0.5 * t * d),
      math.sqrt(s2 * s2 + 2.0 * s1 * t + t * t * d),
      s2 + t * math.sqrt(d),
  )


def rdp(
    event: events.DistributedDiscreteGaussianDpEvent,
    orders: Sequence[float],
    relation: str = 'zero_out',
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

  Every term bounds both D(P||Q) and D(Q||P). Returns an array of inf if the
  scaled local noise is below 1/2.
  """
  orders = check_orders(orders)
  parts = _terms(event, relation)
  if parts is None:
    return np.full_like(orders, np.inf)
  s2, s1, t, d = parts
  a = 0.5 * t * d
  with np.errstate(over='ignore'):  # huge sensitivities: inf, as they should
    terms = np.stack([
        orders / 2.0 * (s2 * s2 + a),
        orders / 2.0 * (s2 * s2 + 2.0 * s1 * t + t * t * d),
        orders / 2.0 * (s2 + t * math.sqrt(d)) * (s2 + t * math.sqrt(d)),
        orders * (s2 * s2) / 2.0 + a * (2.0 * orders - 1.0) / (orders - 1.0),
    ])
  return terms.min(axis=0)
