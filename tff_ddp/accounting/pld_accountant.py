"""A privacy-loss-distribution accountant for the events of tff_ddp.

`PldAccountant(neighboring_relation, adversary)` has the interface of
`RdpAccountant` and composes, beside the RDP curve, a privacy loss
distribution on dp-accounting's PLD machinery with pessimistic
discretization only (`pld_curves`); one dominating pair per release and
direction (`pld_mechanisms`), composed as in Zhu, Dong & Wang 2022, Thm 10
(adaptive composition of dominating pairs). Its epsilon is the smaller of
the two valid bounds (`bound_used` / `describe()` name it), so no event gets
a larger epsilon than from `RdpAccountant`. `tightest` and
`tightest_epsilon` are the library's default accountant and epsilon.

Each event's pair, what stays RDP-only, speed: docs/notes/pld_accountant.md.
"""

import collections
import dataclasses
import math
from typing import Any, Optional, Sequence, Tuple, TypeAlias

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from tff_ddp.accounting import accountant as rdp_lib
from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import pld_curves
from tff_ddp.accounting import pld_mechanisms
from tff_ddp.accounting import skellam_rdp
from tff_ddp.utils import checks

NeighborRel: TypeAlias = dp_accounting.NeighboringRelation
Adversary = rdp_lib.Adversary
_ZERO_OUT = (NeighborRel.ADD_OR_REMOVE_ONE, NeighborRel.REPLACE_SPECIAL)
# The RDP accountant's tests for a Gaussian-only subtree, shared.
_finite_positive = rdp_lib._finite_positive  # pylint: disable=protected-access  # shared within the accounting package
_gaussian_noise_multiplier = rdp_lib._gaussian_noise_multiplier  # pylint: disable=protected-access  # shared within the accounting package
DEFAULT_INTERVAL = 1e-3
# dp-accounting's composition may drop this much mass per composition
# (into the infinity mass: pessimistic).
_TAIL_TRUNCATION = 1e-15
PLD = 'PLD'
RDP = 'RDP'
# More self-compositions of one PLD than this are not attempted (memory and
# time grow with them; RDP is reported instead).
MAX_COMPOSITIONS = 100000
# A composition whose loss spread would need more grid points than this
# (2 sqrt(18 S) / h for a summed squared range S: Hoeffding at 1e-15,
# dp-accounting's truncation) is not attempted; RDP is reported instead.
MAX_GRID_POINTS = 2e7


class _Lru:
  """A small least-recently-used map (the PLDs of recent events)."""

  def __init__(self, size: int):
    self._size = size
    self._items: collections.OrderedDict[Any, Any] = collections.OrderedDict()

  def get(self, key):
    value = self._items.get(key)
    if value is not None:
      self._items.move_to_end(key)
    return value

  def put(self, key, value):
    self._items[key] = value
    self._items.move_to_end(key)
    while len(self._items) > self._size:
      self._items.popitem(last=False)

  def clear(self):
    self._items.clear()


# PLDs of recently composed events, shared by every accountant (keyed by
# event, relation, adversary and grid; a PLD is never modified once built).
_STATES = _Lru(32)


class _Infinite(Exception):
  """A non-private event: epsilon is infinite."""


class _State:
  """(remove, add) PLDs composed so far, and whether they are one."""

  def __init__(self, remove, add, symmetric, spread=0.0, interval=1e-3):
    self.remove, self.add, self.symmetric = remove, add, symmetric
    self.spread, self.interval = spread, interval

  @classmethod
  def identity(cls, interval):
    pld = pld_lib.identity(interval)
    return cls(pld, pld, True, 0.0, interval)

  def _check_size(self, spread):
    points = 2.0 * math.sqrt(18.0 * spread) / self.interval
    if points > MAX_GRID_POINTS:
      raise pld_mechanisms.Unsupported(
          f'the composed PLD would span ~{points:.3g} grid points')

  def compose(self, other: '_State') -> '_State':
    spread = self.spread + other.spread
    self._check_size(spread)
    remove = self.remove.compose(other.remove, _TAIL_TRUNCATION)
    if self.symmetric and other.symmetric:
      return _State(remove, remove, True, spread, self.interval)
    return _State(remove, self.add.compose(other.add, _TAIL_TRUNCATION), False,
                  spread, self.interval)

  def power(self, count: int) -> '_State':
    if count == 1:
      return self
    if count > MAX_COMPOSITIONS:
      raise pld_mechanisms.Unsupported(
          f'{count} compositions of one PLD (more than {MAX_COMPOSITIONS})')
    spread = self.spread * count
    self._check_size(spread)
    remove = self.remove.self_compose(count, _TAIL_TRUNCATION)
    if self.symmetric:
      return _State(remove, remove, True, spread, self.interval)
    return _State(remove, self.add.self_compose(count, _TAIL_TRUNCATION), False,
                  spread, self.interval)

  def delta(self, eps: float) -> float:
    d = float(self.remove.get_delta_for_epsilon(eps))
    return d if self.symmetric else max(
        d, float(self.add.get_delta_for_epsilon(eps)))

  def epsilon(self, delta: float) -> float:
    e = float(self.remove.get_epsilon_for_delta(delta))
    return e if self.symmetric else max(
        e, float(self.add.get_epsilon_for_delta(delta)))


class PldAccountant(dp_accounting.PrivacyAccountant):
  """PLD accountant with RDP beside it; the smaller epsilon, named.

  Example (DDG rounds, Poisson cohorts the server draws, against the
  server):

    accountant = PldAccountant(adversary='server')
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        0.01, factory.dp_event(value_type)), 1000)
    accountant.get_epsilon(1e-6), accountant.bound_used(1e-6)

  Args:
    neighboring_relation: as `RdpAccountant` (zero-out for
      ADD_OR_REMOVE_ONE and REPLACE_SPECIAL, replace-one for REPLACE_ONE).
    adversary: 'server' (default) or 'release'.
    value_discretization_interval: the PLD's loss grid (pessimistic).
    orders: the RDP orders of the RDP bound beside it.
    use_rdp: False reports the PLD alone (inf where it has none).
  """

  def __init__(
      self,
      neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
      adversary: str = Adversary.SERVER,
      value_discretization_interval: float = DEFAULT_INTERVAL,
      orders: Optional[Sequence[float]] = None,
      use_rdp: bool = True,
  ):
    self._orders = orders
    self._rdp = rdp_lib.RdpAccountant(orders, neighboring_relation, adversary)
    super().__init__(neighboring_relation)
    self._adversary = self._rdp.adversary
    self._interval = checks.real(value_discretization_interval,
                                 'value_discretization_interval',
                                 0.0,
                                 1.0,
                                 low_open=True)
    self._use_rdp = checks.boolean(use_rdp, 'use_rdp')
    self._state = _State.identity(self._interval)
    # Without RDP beside it (use_rdp=False: a calibration's search) the RDP
    # curves are not computed; the sampler term is summed here instead.
    self._tv_mass = 0.0
    self._infinite = False
    self._unsupported: Optional[str] = None
    self._cache: dict[Any, Any] = {}
    self._curves: dict[Any, Any] = {}

  @property
  def adversary(self) -> Adversary:
    return self._adversary

  def pld_only(self, interval_factor: float = 1.0) -> 'PldAccountant':
    """A fresh accountant like this one without the RDP beside it (what
    `calibrate` searches with before it compares with RDP), on a loss grid
    `interval_factor` times as coarse (still pessimistic: every epsilon of
    it is an upper bound too)."""
    return PldAccountant(self._neighboring_relation,
                         self._adversary,
                         min(1.0, self._interval * interval_factor),
                         use_rdp=False)

  def rdp_only(self) -> rdp_lib.RdpAccountant:
    """A fresh `RdpAccountant` of this one's adversary, relation and
    orders: the RDP bound beside the PLD, alone."""
    return rdp_lib.RdpAccountant(self._orders, self._neighboring_relation,
                                 self._adversary)

  @property
  def uses_rdp(self) -> bool:
    """False: the PLD bound alone is reported (use_rdp=False)."""
    return self._use_rdp

  @property
  def value_discretization_interval(self) -> float:
    return self._interval

  @property
  def rdp_accountant(self) -> rdp_lib.RdpAccountant:
    """The RDP accountant composed beside the PLD (same events; nothing
    composed when use_rdp is False)."""
    return self._rdp

  @property
  def sampler_tv_mass(self) -> float:
    return self._rdp.sampler_tv_mass if self._use_rdp else self._tv_mass

  @property
  def pld_unsupported(self) -> Optional[str]:
    """Why the composition has no PLD bound (None: it has one)."""
    return self._unsupported

  def describe(self, target_delta: Optional[float] = None) -> str:
    """'against the server, zero-out neighbours', and with a delta the
    bound its epsilon comes from."""
    text = self._rdp.describe()
    if target_delta is None:
      return text
    return f'{text}; {self.bound_description(target_delta)}'

  def bound_description(self, target_delta: float) -> str:
    used = self.bound_used(target_delta)
    if used == PLD:
      return ('bound: privacy loss distribution (exact law of the noise, '
              'pessimistic discretization)')
    reason = (f'; no PLD: {self._unsupported}' if self._unsupported else '')
    return f'bound: RDP (smaller than the PLD here{reason})' if (
        not self._unsupported) else f'bound: RDP{reason}'

  # -- PrivacyAccountant ----------------------------------------------------

  def _maybe_compose(self, event, count, do_compose):
    if not do_compose:
      return self._rdp._maybe_compose(event, count, False)  # pylint: disable=protected-access  # the accountant's RDP curve
    count = checks.integer(count, 'count', 0)
    if self._use_rdp:
      self._rdp.compose(event, count)
    else:
      self._tv_mass += count * rdp_lib._tv_mass(event)  # pylint: disable=protected-access  # shared within the accounting package
    if count == 0 or self._infinite or self._unsupported:
      return None
    try:
      self._state = self._state.compose(self._plds(event).power(count))
    except (_Infinite, pld_curves.Saturated):
      # Saturated: delta > 1/2 at every epsilon; inf is an upper bound.
      self._infinite = True
    except pld_mechanisms.Unsupported as e:
      self._unsupported = str(e)
    except IndexError:
      # dp-accounting 0.4.3's tail truncation fails on a PLD whose finite
      # part has (nearly) no mass (noise far too small): no PLD bound.
      self._unsupported = 'the PLD degenerates (almost all mass infinite)'
    return None

  def pld_epsilon(self, target_delta: float) -> float:
    """The PLD bound alone (inf without one), sampler term included."""
    delta = checks.probability(target_delta, 'target_delta', allow_one=False)
    if self._infinite or self._unsupported:
      return math.inf
    tv = self.sampler_tv_mass
    if tv == 0:
      return self._state.epsilon(delta)
    first = self._state.epsilon(delta / 2.0)
    extra = (1.0 + math.exp(min(first, 700.0))) * tv
    if not extra <= delta / 2.0:
      return math.inf
    return self._state.epsilon(delta - extra)

  def pld_delta(self, target_epsilon: float) -> float:
    eps = checks.nonnegative(target_epsilon, 'target_epsilon')
    if self._infinite or self._unsupported:
      return 1.0
    tv = self.sampler_tv_mass
    return min(1.0,
               self._state.delta(eps) + (1.0 + math.exp(min(eps, 700.0))) * tv)

  def get_epsilon_and_bound(self, target_delta: float) -> Tuple[float, str]:
    """(eps, 'PLD' or 'RDP'): the smaller valid bound and its name."""
    pld = self.pld_epsilon(target_delta)
    if not self._use_rdp:
      return pld, PLD
    rdp = self._rdp.get_epsilon(target_delta)
    return (pld, PLD) if pld <= rdp else (rdp, RDP)

  def bound_used(self, target_delta: float) -> str:
    return self.get_epsilon_and_bound(target_delta)[1]

  def get_epsilon_and_optimal_order(
      self, target_delta: float) -> Tuple[float, Optional[float]]:
    """(eps, RDP order), the order None when the PLD bound is reported."""
    eps, bound = self.get_epsilon_and_bound(target_delta)
    if bound == PLD:
      return eps, None
    return self._rdp.get_epsilon_and_optimal_order(target_delta)

  def get_epsilon(self, target_delta: float) -> float:
    return self.get_epsilon_and_bound(target_delta)[0]

  def get_delta(self, target_epsilon: float) -> float:
    pld = self.pld_delta(target_epsilon)
    if not self._use_rdp:
      return pld
    return min(pld, self._rdp.get_delta(target_epsilon))

  # -- PLDs of events -------------------------------------------------------

  def _relation(self):
    return self._neighboring_relation

  def _plds(self, event) -> _State:
    """The (remove, add) PLDs of `event`: cached per accountant, and across
    accountants of the same class, relation, adversary and grid (`_STATES`: a
    calibration's final check and report, and a budget split's repeated
    releases, compose the same events again)."""
    key = (type(self), event, self._neighboring_relation, self._adversary,
           self._interval)
    try:
      return self._cache[event]
    except (KeyError, TypeError):
      pass
    try:
      value = _STATES.get(key)
    except TypeError:  # an unhashable event (a list inside)
      value = None
    if value is None:
      value = self._compute(event)
      try:
        _STATES.put(key, value)
      except TypeError:
        pass
    try:
      self._cache[event] = value
    except TypeError:
      pass
    return value

  def _compute(self, event) -> _State:
    if isinstance(event, dp_accounting.NoOpDpEvent):
      return _State.identity(self._interval)
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
      raise _Infinite()
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
      count = checks.integer(event.count, 'count', 0)
      if count == 0:
        return _State.identity(self._interval)
      return self._plds(event.event).power(count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
      state = _State.identity(self._interval)
      for e in event.events:
        state = state.compose(self._plds(e))
      return state
    curve, count = self._leaf_or_sampled(event)
    if curve is None:
      return _State.identity(self._interval)
    remove, add = pld_curves.to_pld(curve, self._interval)
    return _State(remove, add, curve.symmetric, _spread(curve),
                  self._interval).power(count)

  def _curve(self, event) -> pld_curves.Curve:
    """A curve of the whole event (for the sampling transforms)."""
    try:
      return self._curves[event]
    except (KeyError, TypeError):
      pass
    if isinstance(
        event,
        (dp_accounting.SelfComposedDpEvent, dp_accounting.ComposedDpEvent,
         dp_accounting.NoOpDpEvent, dp_accounting.NonPrivateDpEvent)):
      curve = self._state_curve(self._plds(event))
    else:
      curve, count = self._leaf_or_sampled(event)
      if curve is None:
        curve = self._state_curve(_State.identity(self._interval))
      elif count != 1:
        remove, add = pld_curves.to_pld(curve, self._interval)
        curve = self._state_curve(
            _State(remove, add, curve.symmetric, _spread(curve),
                   self._interval).power(count))
    try:
      self._curves[event] = curve
    except TypeError:
      pass
    return curve

  @staticmethod
  def _state_curve(state: _State) -> pld_curves.Curve:
    return pld_curves.PldCurve((state.remove, state.add), state.symmetric)

  def _leaf_or_sampled(self, event):
    """(curve, count): the event is `count` compositions of `curve`
    (None: nothing released)."""
    relation = self._relation()
    if isinstance(event, dp_accounting.GaussianDpEvent):
      z = checks.nonnegative(event.noise_multiplier, 'noise_multiplier')
      if z == 0:
        raise _Infinite()
      if math.isinf(z):
        return None, 1
      sensitivity = 2.0 if relation is NeighborRel.REPLACE_ONE else 1.0
      return pld_curves.Gaussian(sensitivity / z), 1
    if isinstance(event, (events.DistributedDiscreteGaussianDpEvent,
                          events.DistributedSkellamDpEvent)):
      return self._sum_leaf(event, relation)
    if isinstance(event, events.PoissonBinomialDpEvent):
      pbm_rdp.check_event(event)
      replace = relation is NeighborRel.REPLACE_ONE
      dimension = int(event.dimension)
      if replace and event.replace_one_dimension is not None:
        dimension = int(event.replace_one_dimension)
      curve = pld_mechanisms.cpbm_trial_family(float(event.theta),
                                               int(event.num_clients), replace)
      return curve, int(event.num_trials) * dimension
    if isinstance(event, (dp_accounting.PoissonSampledDpEvent,
                          dp_accounting.SampledWithoutReplacementDpEvent,
                          events.SelfSampledDpEvent)):
      return self._sampled(event, relation), 1
    raise pld_mechanisms.Unsupported(f'{type(event).__name__} has no PLD here.')

  def _sum_leaf(self, event, relation):
    if isinstance(event, events.DistributedDiscreteGaussianDpEvent):
      ddg_rdp.check_event(event)
      noise = pld_mechanisms.ddg_sum(float(event.local_stddev),
                                     int(event.num_clients))
    else:
      skellam_rdp.check_event(event)
      variance = float(event.num_clients) * float(event.local_variance)
      noise = pld_mechanisms.skellam_sum(variance)
    shift = pld_mechanisms.integer_shift(event, relation)
    if shift == 0:
      return None, 1
    l1 = ddg_rdp.l1_sensitivity(event)
    l2 = float(event.l2_sensitivity)
    # Coordinates one client moves: every one moves by >= 1 (integers), so
    # at most Delta_2^2 and Delta_1 of them; an l0 clip bounds them too.
    coordinates = min(int(event.dimension), math.floor(l2 * l2 + 1e-9),
                      math.floor(l1 + 1e-9), event.l0_sensitivity or
                      int(event.dimension))
    if relation is NeighborRel.REPLACE_ONE:
      coordinates = min(int(event.dimension), 2 * coordinates)
    budget = (2.0 * l2)**2 if relation is NeighborRel.REPLACE_ONE else (l2 * l2)
    if coordinates > 1 and coordinates * shift * shift > 1.5 * budget:
      # Each coordinate charged the largest shift: more than RDP's
      # Delta_2^2 (the PLD would lose to it; not built).
      raise pld_mechanisms.Unsupported(
          f'a client may move {coordinates} coordinates by up to {shift}: '
          'the coordinate-wise PLD is looser than RDP there.')
    return pld_mechanisms.shift_curve(noise, shift), coordinates

  def _sampled(self, event, relation) -> pld_curves.Curve:
    inner = event.event
    if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
      population = checks.integer(event.source_dataset_size,
                                  'source_dataset_size', 1)
      size = checks.integer(event.sample_size, 'sample_size', 0, population)
      q = size / population
    else:
      q = checks.probability(event.sampling_probability,
                             'sampling_probability',
                             allow_zero=True)
    if q == 0:
      return pld_curves.Family([(np.zeros(1), np.zeros(1))], symmetric=True)
    curve = self._curve(inner)
    if q == 1:
      return curve
    known = pld_curves.KnownSample(curve, q)
    if isinstance(event, events.SelfSampledDpEvent):
      if relation in _ZERO_OUT:
        return pld_curves.Amplified(curve, q)
      return known
    if (isinstance(event, dp_accounting.PoissonSampledDpEvent) and
        self._adversary is Adversary.RELEASE and relation in _ZERO_OUT and
        _finite_positive(_gaussian_noise_multiplier(inner))):
      return pld_mechanisms.Smaller(known, pld_curves.Amplified(curve, q))
    return known


def tightest_epsilon(
    event: dp_accounting.DpEvent,
    target_delta: float,
    adversary: str = Adversary.SERVER,
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
) -> Tuple[float, str]:
  """(eps, 'PLD' or 'RDP') of `event`: the smaller valid bound, named."""
  acc = tightest(adversary, neighboring_relation)
  acc.compose(event)
  return acc.get_epsilon_and_bound(target_delta)


def _spread(curve) -> float:
  """Squared width of a leaf's loss range (both directions' larger)."""
  (a, b), (c, d) = curve.ranges
  return max(b - a, d - c, 0.0)**2


def bound_label(order) -> str:
  """How a report names the bound of an epsilon, from its RDP order (None:
  the privacy loss distribution's): 'privacy loss distribution' or
  'RDP, best order k'."""
  return ('privacy loss distribution'
          if order is None else f'RDP, best order {order:g}')


def tightest(
    adversary: str = Adversary.SERVER,
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
) -> 'PldAccountant':
  """A fresh accountant reporting the tightest valid bound (the PLD, or RDP
  where that is smaller or the PLD has none), which it names: the one
  accountant choice of every calibration and report (`calibrate`'s
  `make_fresh_accountant=lambda: tightest(adversary)`,
  `tff_ddp.accounting.epsilon`, the CLI)."""
  return PldAccountant(neighboring_relation, adversary)


def epsilon(
    event: dp_accounting.DpEvent,
    target_delta: float,
    adversary: str = Adversary.SERVER,
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
    orders: Optional[Sequence[float]] = None,
) -> Tuple[float, Optional[float]]:
  """(eps, RDP order) of `event` at `target_delta`: the tightest valid
  bound (`tff_ddp.accounting.epsilon`). The order is None where the PLD is
  reported. With `orders` given, RDP at those orders alone
  (`accountant.epsilon`, the value of earlier releases)."""
  if orders is not None:
    return rdp_lib.epsilon(event, target_delta, adversary, neighboring_relation,
                           orders)
  acc = tightest(adversary, neighboring_relation).compose(event)
  return acc.get_epsilon_and_optimal_order(target_delta)


def compose_rounds(
    accountant: dp_accounting.PrivacyAccountant,
    round_events: Sequence[dp_accounting.DpEvent]
) -> dp_accounting.PrivacyAccountant:
  """`accountant` with the events of a run's rounds composed: each distinct
  event once, with its number of rounds. The order does not matter: the
  dominating pairs' PLDs convolve (Zhu, Dong & Wang 2022, Thm 10) and the
  RDP curves add (Mironov 2017, Prop. 1), both commutative. T identical
  rounds are then one `self_compose` of their PLD, not T compositions of a
  growing one.

    accountant = compose_rounds(tightest('release'), measured_events)
    accountant.get_epsilon_and_bound(delta), accountant.describe(delta)
  """
  counts: collections.OrderedDict[Any, int] = collections.OrderedDict()
  unhashable: list[list[Any]] = [
  ]  # [event, count] of events with a list inside
  for event in round_events:
    try:
      counts[event] = counts.get(event, 0) + 1
      continue
    except TypeError:
      pass
    for group in unhashable:
      if group[0] == event:
        group[1] += 1
        break
    else:
      unhashable.append([event, 1])
  for event, count in list(counts.items()) + [tuple(g) for g in unhashable]:
    accountant.compose(event, count)
  return accountant


@dataclasses.dataclass(frozen=True)
class FinalEpsilon:
  """The epsilon of a run's rounds by the tightest accountant.

  Attributes:
    epsilon: at `delta` against `adversary` (inf: not private against it).
    bound: 'PLD' (privacy loss distribution) or 'RDP', the bound `epsilon`
      is; None when it is inf because the rounds add no noise the
      adversary does not see.
    delta: the delta of `epsilon`.
    adversary: 'server' or 'release'.
    description: the adversary, the neighbouring relation and the bound,
      one line ('against the release, zero-out neighbours; bound: ...').
    rounds: the number of round events composed.
    rdp_epsilon: the running epsilon (RDP) of the same rounds where the
      caller kept one (`tff-ddp train`), else None.
  """

  epsilon: float
  bound: Optional[str]
  delta: float
  adversary: str
  description: str
  rounds: int
  rdp_epsilon: Optional[float] = None


def final_epsilon(adversary,
                  round_events: Sequence[dp_accounting.DpEvent],
                  delta: float,
                  rdp_epsilon: Optional[float] = None) -> FinalEpsilon:
  """`FinalEpsilon` of `round_events` (one per round) at `delta` against
  `adversary`: `compose_rounds` on `tightest(adversary)`."""
  round_events = list(round_events)
  for event in round_events:
    if not isinstance(event, dp_accounting.DpEvent):
      raise TypeError('round_events must be dp_accounting.DpEvents (one '
                      f'per round), got {type(event).__name__}.')
  accountant = compose_rounds(tightest(adversary), round_events)
  eps, bound = accountant.get_epsilon_and_bound(delta)
  return FinalEpsilon(epsilon=eps,
                      bound=bound,
                      delta=delta,
                      adversary=accountant.adversary.value,
                      description=accountant.describe(delta),
                      rounds=len(round_events),
                      rdp_epsilon=rdp_epsilon)
