"""Privacy of the distributed Skellam sum.

Agarwal, Kairouz & Liu (2021), "The Skellam Mechanism for Differentially
Private Federated Learning" (NeurIPS 2021, arXiv 2110.04995), the RDP of the
multi-dimensional Skellam mechanism (Section 3). Every quantity is in the
scaled integer domain.

The curve. Let V = num_clients * local_variance be the variance of the
summed noise per coordinate (a sum of independent symmetric Skellams is a
symmetric Skellam: Pois(lambda_1) - Pois(lambda_1) + Pois(lambda_2) -
Pois(lambda_2) = Pois(lambda_1 + lambda_2) - Pois(lambda_1 + lambda_2)).
For two integer vectors whose difference v has ||v||_2 <= Delta_2 and
||v||_1 <= Delta_1, at every order alpha > 1,

  eps(alpha) <= alpha Delta_2^2 / (2 V)
                + min( ((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 V^2),
                       3 Delta_1 / (2 V) ).

Derivation. The coordinates' noises are independent, so the divergence of
the released sums is the sum over coordinates of the one-dimensional
divergences D_alpha(Sk_V || Sk_V + v_i); the paper bounds each by the
formula above with (Delta_2^2, Delta_1) replaced by (v_i^2, |v_i|) (its
one-dimensional theorem: the Gaussian term alpha v^2 / (2 V) plus the
deviation of the Skellam's log-PMF ratio from the Gaussian's, bounded
through the modified Bessel functions' ratio I_{k+1}(x) / I_k(x)).
Summing, sum_i min(a_i, b_i) <= min(sum_i a_i, sum_i b_i) and the sums of
v_i^2, |v_i| are at most Delta_2^2, Delta_1. The bound is symmetric in the
two distributions, so it covers D(P||Q) and D(Q||P).

Checked here, not taken on trust: `skellam_rdp_test` computes the exact
Renyi divergence of Sk_V and its shift from the Skellam PMF
(exp(-2 lambda) I_|k|(2 lambda), scipy's exponentially scaled Bessel
function) for V from 1 to 400, shifts 1 to 10, orders 1.5 to 50, and of
small integer vectors in 2 and 3 dimensions (products of the 1-D curves),
and asserts the bound is never below it (the closest case is within 0.3%:
the bound is tight at small shifts).

Neighbouring relations (`rdp(..., relation=...)`), as for the DDG
(`tff_ddp.accounting.ddg_rdp`):

* 'zero_out' -- one client's vector replaced by zeros while every client
  still adds its noise: v is that client's rounded vector, (Delta_2,
  Delta_1) as given.
* 'replace_one' -- one client's vector replaced by another: v is the
  difference of two rounded vectors, so both sensitivities double.
"""

import math
from typing import Sequence

import numpy as np

from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import events
from tff_ddp.accounting.orders import check_orders
from tff_ddp.utils import checks

RELATIONS = events.RELATIONS


# The event's Delta_1, or min(sqrt(d) Delta_2, Delta_2^2) if not given: the
# DDG's bound for integer vectors, on the same fields.
l1_sensitivity = ddg_rdp.l1_sensitivity


def check_event(event) -> events.DistributedSkellamDpEvent:
  """Validates the fields of a Skellam event (TypeError / ValueError)."""
  return ddg_rdp.check_sum_event(event, events.DistributedSkellamDpEvent,
                                 'local_variance', checks.positive)


def curve(l2: float, l1: float, variance: float,
          orders: np.ndarray) -> np.ndarray:
  """The module's bound for sensitivities (l2, l1) and summed variance V."""
  with np.errstate(over='ignore'):
    gaussian = orders * l2 * l2 / (2.0 * variance)
    excess = np.minimum(
        ((2.0 * orders - 1.0) * l2 * l2 + 6.0 * l1) / (4.0 * variance
                                                       * variance),
        3.0 * l1 / (2.0 * variance))
  return gaussian + excess


def rdp(
    event: events.DistributedSkellamDpEvent,
    orders: Sequence[float],
    relation: str = 'zero_out',
) -> np.ndarray:
  """RDP curve eps(alpha) of one distributed Skellam release (module doc)."""
  orders = check_orders(orders)
  check_event(event)
  relation = events.as_relation(relation)
  factor = 2.0 if relation is events.Relation.REPLACE_ONE else 1.0
  variance = float(event.num_clients) * float(event.local_variance)
  if not math.isfinite(variance):
    raise ValueError(f'num_clients * local_variance = {variance} is not '
                     'finite.')
  return curve(factor * float(event.l2_sensitivity),
               factor * l1_sensitivity(event), variance, orders)
