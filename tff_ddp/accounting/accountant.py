"""An RDP accountant for the events of tff_ddp, with the adversary named.

`RdpAccountant(orders, neighboring_relation, adversary)` implements
dp-accounting's `PrivacyAccountant` interface; every epsilon is for one
adversary ('server', the default, or 'release'), one neighbouring relation
(ADD_OR_REMOVE_ONE and REPLACE_SPECIAL mean zero-out, REPLACE_ONE
replace-one) and a stated theorem: RDP composition (Mironov 2017, Prop. 1),
the known-sample mixture (`subsampling.known_sample_rdp`), Zhu & Wang (2019)
for Poisson and self-sampling, Wang, Balle & Kasiviswanathan (2019), Thm 27
and Thm 9, for sampling without replacement; per order, the minimum of the
valid bounds. `gaussian_rdp` is the Gaussian's curve; `sampler_tv_mass` the
approximate samplers' term added to delta.

Each event's cost, the adversaries and relations, and the proofs:
docs/notes/rdp_accountant.md.
"""

import enum
import math
from typing import Any, Optional, Sequence, Tuple, TypeAlias, TypeGuard

import dp_accounting
import numpy as np

from tff_ddp.accounting import conversions
from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import dp_accounting_adapter
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import skellam_rdp
from tff_ddp.accounting import subsampling
from tff_ddp.accounting.orders import check_orders
from tff_ddp.accounting.orders import DEFAULT_ORDERS
from tff_ddp.utils import checks

NeighborRel: TypeAlias = dp_accounting.NeighboringRelation
_ErrorDetails = dp_accounting.PrivacyAccountant.CompositionErrorDetails
_ZERO_OUT = (NeighborRel.ADD_OR_REMOVE_ONE, NeighborRel.REPLACE_SPECIAL)


class Adversary(enum.StrEnum):
  """Whom an epsilon holds against.

  SERVER: the party that runs the protocol (sees who is in each secure sum,
  knows any sample it drew). RELEASE: whoever sees only what the server
  publishes. A str (`Adversary.SERVER == 'server'`), so results compare
  with the names users pass; `as_adversary` resolves a name once. In full:
  docs/notes/rdp_accountant.md, "Adversaries".
  """

  SERVER = 'server'
  RELEASE = 'release'


ADVERSARIES = tuple(a.value for a in Adversary)


def as_adversary(value, name: str = 'adversary') -> Adversary:
  """`value` ('server', 'release' or an Adversary) as an Adversary; the
  one check of every entry point that takes an adversary."""
  return checks.member(value, name, Adversary)


class _Unsupported(Exception):

  def __init__(self, event, message):
    super().__init__(message)
    self.event = event
    self.message = message


def describe_relation(relation: NeighborRel) -> str:
  """'zero-out' or 'replace-one': what this library's events mean."""
  return events.as_relation(relation).value.replace('_', '-')


def _gaussian_noise_multiplier(event) -> Optional[float]:
  """z of a subtree made only of Gaussian events (composition adds z^-2),
  or None when the subtree holds anything else."""
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return checks.nonnegative(event.noise_multiplier, 'noise_multiplier')
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    z = _gaussian_noise_multiplier(event.event)
    if z is None:
      return None
    count = checks.integer(event.count, 'count', 0)
    return math.inf if count == 0 else z / math.sqrt(count)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    total = 0.0
    for e in event.events:
      z = _gaussian_noise_multiplier(e)
      if z is None:
        return None
      total += math.inf if z == 0 else z**-2
    return math.inf if total == 0 else (
        0.0 if total == math.inf else total**-0.5)
  return None


class RdpAccountant(dp_accounting.PrivacyAccountant):
  """RDP accountant for Gaussian, DDG and cPBM events, adversary named.

  Example (a DDG factory's round, 1000 rounds, Poisson-sampled cohorts the
  server chooses, against the server):

    accountant = RdpAccountant(adversary='server')
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        0.01, factory.dp_event(value_type)), 1000)
    accountant.get_epsilon(target_delta=1e-6)

  What every event costs: docs/notes/rdp_accountant.md, table "What each
  event costs". Curves are cached per (event, relation, adversary), so
  composing many identical rounds one by one costs one evaluation.
  """

  def __init__(
      self,
      orders: Optional[Sequence[float]] = None,
      neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
      adversary: str = Adversary.SERVER,
  ):
    if not isinstance(neighboring_relation, dp_accounting.NeighboringRelation):
      raise TypeError(
          'neighboring_relation must be a dp_accounting.NeighboringRelation, '
          f'got {neighboring_relation!r}.')
    super().__init__(neighboring_relation)
    self._orders = check_orders(DEFAULT_ORDERS if orders is None else orders)
    self._adversary = as_adversary(adversary)
    self._rdp = np.zeros_like(self._orders)
    self._tv_mass = 0.0
    self._least_delta_cache: Optional[Tuple[Any, Tuple[float, float]]] = None
    self._cache: dict[Any, np.ndarray] = {}

  @property
  def adversary(self) -> Adversary:
    return self._adversary

  @property
  def orders(self) -> np.ndarray:
    return self._orders.copy()

  @property
  def rdp(self) -> np.ndarray:
    """The composed RDP curve at `orders`."""
    return self._rdp.copy()

  @property
  def sampler_tv_mass(self) -> float:
    """N eta: total-variation distance of all composed releases' noise from
    the ideal samplers' (docs/notes/rdp_accountant.md, "Approximate
    samplers")."""
    return self._tv_mass

  def describe(self) -> str:
    """'against the server, zero-out neighbours' etc., for reports."""
    return (f'against the {self._adversary}, '
            f'{describe_relation(self._neighboring_relation)} neighbours')

  # -- PrivacyAccountant ----------------------------------------------------

  def _maybe_compose(self, event, count, do_compose):
    try:
      if do_compose:
        count = checks.integer(count, 'count', 0)
        self._rdp = self._rdp + count * self.curve(event)
        self._tv_mass += count * _tv_mass(event)
      else:
        self._check(event)
    except _Unsupported as e:
      return _ErrorDetails(invalid_event=e.event, error_message=e.message)
    return None

  def get_epsilon_and_optimal_order(self,
                                    target_delta: float) -> Tuple[float, float]:
    """(eps, order) with (eps, target_delta)-DP, sampler term included.

    With eta = `sampler_tv_mass`: eps0 = eps of the curve at target_delta/2;
    if (1 + e^eps0) eta <= target_delta / 2, the curve's eps at
    target_delta - (1 + e^eps0) eta is valid (it is <= eps0, so its own
    term is smaller). Otherwise inf.
    """
    delta = checks.probability(target_delta, 'target_delta', allow_one=False)
    if self._tv_mass == 0:
      return conversions.rdp_to_epsilon(self._orders, self._rdp, delta)
    first, order = conversions.rdp_to_epsilon(self._orders, self._rdp,
                                              delta / 2)
    extra = (1.0 + math.exp(min(first, 700.0))) * self._tv_mass
    if not extra <= delta / 2:
      return math.inf, order
    return conversions.rdp_to_epsilon(self._orders, self._rdp, delta - extra)

  def get_epsilon(self, target_delta: float) -> float:
    return self.get_epsilon_and_optimal_order(target_delta)[0]

  def get_delta(self, target_epsilon: float) -> float:
    """delta at `target_epsilon`, sampler term included (non-increasing).

    With eta = `sampler_tv_mass` > 0, f(e) = delta_curve(e) + (1 + e^e) eta
    bounds delta at e, and (e, delta) implies (e', delta) for e' >= e; so
    the answer is min f over e <= target_epsilon: f at the target and at the
    minimizer of f when that lies below the target. (Without the minimum,
    the eta term made delta grow with epsilon once it dominates.)
    """
    eps = checks.nonnegative(target_epsilon, 'target_epsilon')
    if self._tv_mass == 0:
      return conversions.rdp_to_delta(self._orders, self._rdp, eps)[0]
    best_eps, best_delta = self._least_delta()
    delta = self._delta_with_sampler_term(eps)
    return delta if eps < best_eps else min(delta, best_delta)

  def _delta_with_sampler_term(self, eps: float) -> float:
    delta = conversions.rdp_to_delta(self._orders, self._rdp, eps)[0]
    return min(1.0, delta + (1.0 + math.exp(min(eps, 700.0))) * self._tv_mass)

  def _least_delta(self) -> Tuple[float, float]:
    """(e*, f(e*)): the least delta-with-sampler-term over e in [0, 700].

    A grid in e (fine near 0, geometric above), then golden section on the
    grid cell around the best point. Cached per composed state.
    """
    key = (self._rdp.tobytes(), self._tv_mass)
    cached = self._least_delta_cache
    if cached is not None and cached[0] == key:
      return cached[1]
    grid = np.unique(
        np.concatenate(
            [np.linspace(0.0, 2.0, 41),
             np.geomspace(2.0, 700.0, 240)]))
    values = [self._delta_with_sampler_term(e) for e in grid]
    i = int(np.argmin(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    found = conversions.golden_section_min(self._delta_with_sampler_term,
                                           float(lo), float(hi), 60)
    best = min((float(grid[i]), float(values[i])), found, key=lambda t: t[1])
    self._least_delta_cache = (key, best)
    return best

  # -- Curves ---------------------------------------------------------------

  def _check(self, event):
    """Raises _Unsupported for an event this accountant cannot cost."""
    if isinstance(
        event,
        (dp_accounting.NoOpDpEvent, dp_accounting.NonPrivateDpEvent,
         dp_accounting.GaussianDpEvent,
         events.DistributedDiscreteGaussianDpEvent,
         events.DistributedSkellamDpEvent, events.PoissonBinomialDpEvent)):
      return
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
      self._check(event.event)
    elif isinstance(event, dp_accounting.ComposedDpEvent):
      for e in event.events:
        self._check(e)
    elif isinstance(event, (dp_accounting.PoissonSampledDpEvent,
                            dp_accounting.SampledWithoutReplacementDpEvent,
                            events.SelfSampledDpEvent)):
      self._check(event.event)
    else:
      raise _Unsupported(
          event, (f'{type(event).__name__} is not supported by tff_ddp\'s '
                  'RdpAccountant (it knows NoOp, NonPrivate, Gaussian, '
                  'DistributedDiscreteGaussian, PoissonBinomial, Composed, '
                  'SelfComposed, PoissonSampled, SampledWithoutReplacement and '
                  'SelfSampled events).'))

  def curve(self,
            event: dp_accounting.DpEvent,
            relation: Optional[NeighborRel] = None) -> np.ndarray:
    """The RDP curve of one `event` at this accountant's orders.

    Args:
      event: any supported event.
      relation: the neighbouring relation (default: the accountant's).

    Raises:
      _Unsupported (via `compose`, as UnsupportedEventError) or TypeError /
      ValueError for malformed events.
    """
    relation = relation or self._neighboring_relation
    key = (event, relation)
    try:
      return self._cache[key]
    except (KeyError, TypeError):
      pass
    value = self._compute(event, relation)
    try:
      self._cache[key] = value
    except TypeError:  # Unhashable (e.g. an event holding a list).
      pass
    return value

  def _compute(self, event, relation) -> np.ndarray:
    orders = self._orders
    if isinstance(event, dp_accounting.NoOpDpEvent):
      return np.zeros_like(orders)
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
      return np.full_like(orders, np.inf)
    if isinstance(event, dp_accounting.GaussianDpEvent):
      return gaussian_rdp(
          checks.nonnegative(event.noise_multiplier, 'noise_multiplier'),
          orders, relation)
    if isinstance(event, events.DistributedDiscreteGaussianDpEvent):
      return ddg_rdp.rdp(event, orders, events.as_relation(relation))
    if isinstance(event, events.PoissonBinomialDpEvent):
      return pbm_rdp.rdp(event, orders, events.as_relation(relation))
    if isinstance(event, events.DistributedSkellamDpEvent):
      return skellam_rdp.rdp(event, orders, events.as_relation(relation))
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
      count = checks.integer(event.count, 'count', 0)
      return count * self.curve(event.event, relation) if count else (
          np.zeros_like(orders))
    if isinstance(event, dp_accounting.ComposedDpEvent):
      total = np.zeros_like(orders)
      for e in event.events:
        total = total + self.curve(e, relation)
      return total
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
      return self._poisson(event, relation)
    if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
      return self._without_replacement(event, relation)
    if isinstance(event, events.SelfSampledDpEvent):
      return self._self_sampled(event, relation)
    self._check(event)  # raises
    raise AssertionError(event)

  def _known_sample(self, q, event, relation):
    return subsampling.known_sample_rdp(
        lambda a: self._sub_curve(event, relation, a), q, self._orders)

  def _sub_curve(self, event, relation, orders) -> np.ndarray:
    """The curve of `event` at arbitrary orders (for the sampling bounds)."""
    orders = np.asarray(orders, np.float64)
    if orders.shape == self._orders.shape and np.array_equal(
        orders, self._orders):
      return self.curve(event, relation)
    other = RdpAccountant(orders, relation, self._adversary)
    return other.curve(event)

  def _sampled(self, q, event, relation, *other_bounds) -> np.ndarray:
    """Per order, the least of the known-sample mixture and `other_bounds`.

    Every bound is a valid RDP curve of the same pair of output laws
    (this adversary, this relation) at every order, so their pointwise
    minimum is one too (docs/notes/rdp_accountant.md, "One curve per event").
    """
    curve = self._known_sample(q, event, relation)
    for bound in other_bounds:
      curve = np.minimum(curve, bound())
    return curve

  def _poisson(self, event, relation) -> np.ndarray:
    q = checks.probability(event.sampling_probability,
                           'sampling_probability',
                           allow_zero=True)
    z = _gaussian_noise_multiplier(event.event)
    if (self._adversary is Adversary.RELEASE and relation in _ZERO_OUT and
        _finite_positive(z)):
      # The sample is secret and an unsampled record is its zero-out
      # neighbour (a central Gaussian has no noise shares to take away).
      return self._sampled(
          q, event.event, relation,
          lambda: dp_accounting_adapter.poisson_sampled_gaussian_rdp(
              q, z, self._orders))
    return self._sampled(q, event.event, relation)

  def _without_replacement(self, event, relation) -> np.ndarray:
    population = checks.integer(event.source_dataset_size,
                                'source_dataset_size', 1)
    size = checks.integer(event.sample_size, 'sample_size', 0, population)
    q = size / population
    if self._adversary is Adversary.SERVER:
      return self._sampled(q, event.event, relation)
    # WBK19 needs the base curve of replace-one pairs; zero-out pairs are
    # replace-one pairs, so the bound covers both relations.
    z = _gaussian_noise_multiplier(event.event)
    if _finite_positive(z):
      # Their Theorem 27 for a Gaussian whose replace-one sensitivity is
      # the unit: twice the per-record bound, i.e. noise multiplier z / 2
      # (the curve 2 alpha / z^2 of `gaussian_rdp`).
      wbk = lambda: dp_accounting_adapter.without_replacement_gaussian_rdp(
          q, z / 2.0, self._orders)
    else:
      wbk = lambda: subsampling.without_replacement_rdp(
          lambda a: self._sub_curve(event.event, NeighborRel.REPLACE_ONE, a),
          size, population, self._orders)
    return self._sampled(q, event.event, relation, wbk)

  def _self_sampled(self, event, relation) -> np.ndarray:
    q = checks.probability(event.sampling_probability,
                           'sampling_probability',
                           allow_zero=True)
    if relation not in _ZERO_OUT:
      return self._sampled(q, event.event, relation)
    z = _gaussian_noise_multiplier(event.event)
    if _finite_positive(z):
      zhu_wang = lambda: dp_accounting_adapter.poisson_sampled_gaussian_rdp(
          q, z, self._orders)
    else:
      zhu_wang = lambda: subsampling.poisson_rdp(
          lambda a: self._sub_curve(event.event, relation, a), q, self._orders)
    return self._sampled(q, event.event, relation, zhu_wang)


def gaussian_rdp(
    noise_multiplier: float,
    orders: Sequence[float],
    relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE) -> np.ndarray:
  """RDP of `GaussianDpEvent(noise_multiplier)` under `relation`.

  dp-accounting's `GaussianDpEvent` docstring: the noise standard deviation
  is noise_multiplier * C with C the per-record l2 bound. Neighbours that
  remove a record or replace it by zeros differ by at most C: alpha /
  (2 z^2). Replace-one neighbours (one record swapped for another) differ by
  up to 2C: alpha (2C)^2 / (2 (zC)^2) = 2 alpha / z^2 (Mironov 2017,
  "Renyi differential privacy", Prop. 7, with sensitivity 2C). dp-accounting
  0.4.3 costs REPLACE_ONE like add/remove (its open issue #378); this
  library does not.

  Args:
    noise_multiplier: z >= 0 (0: infinite).
    orders: RDP orders.
    relation: the neighbouring relation.
  """
  orders = np.asarray(orders, np.float64)
  z = checks.nonnegative(noise_multiplier, 'noise_multiplier')
  if z == 0:
    return np.full_like(orders, np.inf)
  sensitivity = 2.0 if relation is NeighborRel.REPLACE_ONE else 1.0
  return orders * (sensitivity / z)**2 / 2.0


def _finite_positive(z: Optional[float]) -> TypeGuard[float]:
  """True for the noise multiplier of a Gaussian-only subtree that has a
  tight sampled curve (0: infinite curve, inf: no Gaussian in it; both are
  left to the generic bounds, which handle them exactly)."""
  return z is not None and 0.0 < z < math.inf


def _tv_mass(event) -> float:
  """Total variation the approximate samplers of `event` may add (N eta).

  Every client in a release draws its noise whether or not it was sampled,
  so sampled events count all of their inner event's samples.
  """
  if isinstance(event, (events.DistributedDiscreteGaussianDpEvent,
                        events.DistributedSkellamDpEvent)):
    eta = event.sampler_tv_distance or 0.0
    return float(eta) * int(event.num_clients) * int(event.dimension)
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return int(event.count) * _tv_mass(event.event)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return float(sum(_tv_mass(e) for e in event.events))
  if isinstance(event, (dp_accounting.PoissonSampledDpEvent,
                        dp_accounting.SampledWithoutReplacementDpEvent,
                        events.SelfSampledDpEvent)):
    return _tv_mass(event.event)
  return 0.0


def epsilon(
    event: dp_accounting.DpEvent,
    target_delta: float,
    adversary: str = Adversary.SERVER,
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
    orders: Optional[Sequence[float]] = None,
) -> Tuple[float, float]:
  """(eps, optimal order) of `event` at `target_delta` by RDP alone (see
  RdpAccountant). The library's default, the tightest valid bound, is
  `tff_ddp.accounting.epsilon` (`pld_accountant.epsilon`)."""
  accountant = RdpAccountant(orders, neighboring_relation, adversary)
  accountant.compose(event)
  return accountant.get_epsilon_and_optimal_order(target_delta)
