"""Privacy of the distributed Skellam sum.

Agarwal, Kairouz & Liu (2021), "The Skellam Mechanism for Differentially
Private Federated Learning" (NeurIPS 2021, arXiv 2110.04995), the RDP of the
multi-dimensional Skellam mechanism (Section 3), in the scaled integer
domain: with V the summed noise's variance per coordinate,

  eps(alpha) <= alpha Delta_2^2 / (2 V)
                + min( ((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 V^2),
                       3 Delta_1 / (2 V) ).

`rdp(..., relation=...)` gives it for 'zero_out' or 'replace_one' (both
sensitivities doubled); `curve` for one (l2, l1, variance).

The derivation, how it is checked, the relations: docs/notes/distributed_skellam.md.
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
    excess = np.minimum(((2.0 * orders - 1.0) * l2 * l2 + 6.0 * l1) /
                        (4.0 * variance * variance),
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
