"""A running epsilon inside a TFF computation, from curves tabulated by n.

A TFF process reports its metrics from inside the computation, where the RDP
curves of this library (numpy, scipy) cannot run. But a round of the
library's processes depends on the data only through releases whose event is
a function of one public number: n, the clients in the secure sum (every
other field of the event is configuration). So the round's curve is one of a
finite table, computed here once with `RdpAccountant.curve` -- the curve an
offline accountant composes for the same event -- for n = 0 .. max_clients:

  state    = (rdp, tv_mass, uncovered)   composed so far (float64 [orders],
                                         float64, bool)
  compose  : state + table[n]            n > max_clients: uncovered
  epsilon  : the accountant's get_epsilon_and_optimal_order, in TF

`epsilon` is `RdpAccountant.get_epsilon` of the same composition (the test
checks them against each other): dp-accounting's conversion (Canonne, Kamath
& Steinke 2020, Prop. 12) minimised over the orders, with the approximate
samplers' total-variation term added to delta exactly as the accountant does
(`sampler_tv_mass`). A round with more than `max_clients` clients has no
tabulated curve: it is not guessed (the DDG's curve is not monotone in n), the
state records it and `epsilon` is +inf from then on -- compose the rounds'
measured events offline (`extract_dp_event`) in that case.

    table = TabulatedAccountant(lambda n: factory.dp_event(value_type, n),
                                max_clients=100, adversary='server')
    state = table.initial_state()            # numpy, for an init computation
    state = table.compose(state, n)          # inside a tff.tensorflow.computation
    eps = table.epsilon(state, delta=1e-5)   # likewise
"""

import collections
import math
from typing import Callable, Optional, Sequence, TypeAlias

import dp_accounting
import numpy as np

from tff_ddp.accounting import accountant as accountant_lib
from tff_ddp.accounting.orders import check_orders
from tff_ddp.accounting.orders import DEFAULT_ORDERS
from tff_ddp.utils import checks

NeighborRel: TypeAlias = dp_accounting.NeighboringRelation
# The accountant's own cap of exp(eps) in the sampler term.
_EXP_CAP = 700.0
# dp-accounting's conversion is numerically unstable below this order.
_MIN_CONVERSION_ORDER = 1.01


class TabulatedAccountant:
  """RDP curves of a round, one per public client count, and their sum in TF.

  Args:
    event_fn: n -> the DpEvent of one round with n clients in the secure
      sum (n >= 1). n = 0 (an empty round releases nothing that depends on
      data) costs nothing.
    max_clients: the largest n tabulated.
    adversary: 'server' or 'release' (see `tff_ddp.accounting.accountant`).
    orders: RDP orders (default: the library's grid).
    neighboring_relation: default ADD_OR_REMOVE_ONE (zero-out).
  """

  def __init__(
      self,
      event_fn: Callable[[int], dp_accounting.DpEvent],
      max_clients: int,
      adversary: str = 'server',
      orders: Optional[Sequence[float]] = None,
      neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
  ):
    if not callable(event_fn):
      raise TypeError(f'event_fn must be callable, got {event_fn!r}.')
    self.max_clients = checks.integer(max_clients, 'max_clients', 1)
    self.adversary = accountant_lib.as_adversary(adversary)
    self.orders = check_orders(DEFAULT_ORDERS if orders is None else orders)
    self._accountant = accountant_lib.RdpAccountant(self.orders,
                                                    neighboring_relation,
                                                    self.adversary)
    self.neighboring_relation = neighboring_relation
    curves = [np.zeros_like(self.orders)]
    tv = [0.0]
    self.events = [dp_accounting.NoOpDpEvent()]
    for n in range(1, self.max_clients + 1):
      event = event_fn(n)
      if not isinstance(event, dp_accounting.DpEvent):
        raise TypeError(f'event_fn({n}) returned {event!r}, not a DpEvent.')
      self.events.append(event)
      curves.append(self._accountant.curve(event))
      tv.append(accountant_lib._tv_mass(event))  # pylint: disable=protected-access  # shared within the accounting package
    self.curves = np.stack(curves)  # [max_clients + 1, len(orders)]
    self.tv_masses = np.asarray(tv, np.float64)

  def describe(self) -> str:
    return self._accountant.describe()

  def initial_state(self):
    """Nothing composed (numpy values, for an initialize computation)."""
    return collections.OrderedDict(rdp=np.zeros_like(self.orders),
                                   tv_mass=np.float64(0.0),
                                   uncovered=np.bool_(False))

  def compose(self, state, num_clients):
    """The state after one more round with `num_clients` (a TF int)."""
    import tensorflow as tf
    n = tf.cast(num_clients, tf.int64)
    covered = (n >= 0) & (n <= self.max_clients)
    index = tf.clip_by_value(n, 0, self.max_clients)
    curve = tf.gather(tf.constant(self.curves, tf.float64), index)
    tv = tf.gather(tf.constant(self.tv_masses, tf.float64), index)
    return collections.OrderedDict(
        rdp=tf.cast(state['rdp'], tf.float64) + curve,
        tv_mass=tf.cast(state['tv_mass'], tf.float64) + tv,
        uncovered=tf.logical_or(state['uncovered'], tf.logical_not(covered)))

  def round_epsilon(self, num_clients, delta: float):
    """Epsilon of one round alone with `num_clients` (TF)."""
    return self.epsilon(self.compose(self.initial_state(), num_clients), delta)

  def epsilon(self, state, delta: float):
    """(eps, delta)-DP of the composed rounds, +inf if any was uncovered."""
    import tensorflow as tf
    delta = checks.probability(delta, 'delta', allow_one=False)
    rdp = tf.cast(state['rdp'], tf.float64)
    tv = tf.cast(state['tv_mass'], tf.float64)
    first = rdp_to_epsilon(self.orders, rdp, delta / 2.0)
    extra = (1.0 + tf.exp(tf.minimum(first, _EXP_CAP))) * tv
    with_tv = tf.where(extra <= delta / 2.0,
                       rdp_to_epsilon(self.orders, rdp, delta - extra),
                       tf.constant(math.inf, tf.float64))
    eps = tf.where(tv > 0.0, with_tv, rdp_to_epsilon(self.orders, rdp, delta))
    return tf.where(state['uncovered'], tf.constant(math.inf, tf.float64), eps)

  def numpy_epsilon(self, counts: Sequence[int], delta: float) -> float:
    """The offline accountant's epsilon of rounds with these counts."""
    accountant = accountant_lib.RdpAccountant(self.orders,
                                              self.neighboring_relation,
                                              self.adversary)
    for n in counts:
      n = checks.integer(n, 'num_clients', 0)
      if n > self.max_clients:
        return math.inf
      accountant.compose(self.events[n])
    return accountant.get_epsilon(delta)


def rdp_to_epsilon(orders, rdp, delta):
  """`conversions.rdp_to_epsilon` (dp-accounting's compute_epsilon) in TF.

  For each order a: eps_a = 0 if delta^2 + expm1(-rdp_a) > 0 (the KL bound),
  rdp_a + log1p(-1/a) - log(delta a) / (a - 1) if a > 1.01, else +inf; the
  result is max(0, min_a eps_a). `delta` may be a float64 tensor.
  """
  import tensorflow as tf
  a = tf.constant(np.asarray(orders, np.float64))
  rdp = tf.cast(rdp, tf.float64)
  delta = tf.cast(delta, tf.float64)
  # delta <= 0 (the sampler term ate the budget): nothing is certified.
  safe_delta = tf.where(delta > 0.0, delta, tf.ones_like(delta))
  improved = rdp + tf.math.log1p(
      -1.0 / a) - tf.math.log(safe_delta * a) / (a - 1.0)
  eps = tf.where(a > _MIN_CONVERSION_ORDER, improved,
                 tf.constant(math.inf, tf.float64))
  eps = tf.where(delta * delta + tf.math.expm1(-rdp) > 0.0, tf.zeros_like(eps),
                 eps)
  eps = tf.maximum(tf.reduce_min(eps), 0.0)
  return tf.where(delta > 0.0, eps, tf.constant(math.inf, tf.float64))
