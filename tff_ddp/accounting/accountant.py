"""An RDP accountant for the events of tff_ddp, with the adversary named.

`RdpAccountant(orders, neighboring_relation, adversary)` implements
dp-accounting's `PrivacyAccountant` interface. Every epsilon it returns is for
one adversary, one neighbouring relation and a stated theorem:

Adversaries (`adversary=`):

* 'server' (the default): the party that runs the protocol. Distributed DP
  protects against it: it sees who takes part in each secure sum and the
  sum's output (and everything it publishes). It knows any sample it drew.
* 'release': whoever sees only what the server publishes, with the sample
  secret (an analyst, the users of a trained model).

Neighbouring relations (`neighboring_relation=`): ADD_OR_REMOVE_ONE and
REPLACE_SPECIAL mean **zero-out** for this library's events (one client's
input replaced by zeros while it still adds its noise share; distributed
noise has no add/remove analysis, see `events`); REPLACE_ONE means
replace-one. A `GaussianDpEvent(z)` has noise stddev z C for a per-record l2
bound C (dp-accounting's docstring): removed or zeroed records move the sum
by at most C, RDP alpha / (2 z^2); replaced ones by up to 2C, RDP
2 alpha / z^2 (`gaussian_rdp`). This is the convention on every path below
(plain, composed, every sampling), and where dp-accounting 0.4.3's own
accountant differs from it: it costs REPLACE_ONE like add/remove (its open
issue #378), so for `GaussianDpEvent(2.0)` at delta 1e-5 it gives 2.17 where
this accountant gives 4.73.

What each event costs (orders alpha > 1; "curve" = RDP curve; M_q(E) = the
known-sample mixture `subsampling.known_sample_rdp` of E's curve at rate q):

| event | 'server' | 'release' |
|---|---|---|
| DDG, cPBM, Skellam | `ddg_rdp.rdp`, `pbm_rdp.rdp`, `skellam_rdp.rdp` for the relation | same |
| Gaussian | `gaussian_rdp`: alpha / (2 z^2) zero-out, 2 alpha / z^2 replace-one | same |
| Composed / SelfComposed | sum / count times | same |
| PoissonSampled(q, E): the server picks the cohort, others do not take part | M_q(E) | min of M_q(E) and, for Gaussian-only E under the zero-out relations, dp-accounting's tight sampled Gaussian |
| SampledWithoutReplacement(N, m, E): a fixed-size cohort | M_{m/N}(E) | min of M_{m/N}(E) and Wang, Balle & Kasiviswanathan (2019) on E's replace-one curve (Thm 27 through dp-accounting for Gaussian-only E, Thm 9 otherwise) |
| SelfSampled(q, E): everyone in the sum, private coins | zero-out relations: min of M_q(E) and Zhu & Wang (2019) on E's zero-out curve (tight sampled Gaussian for Gaussian-only E); REPLACE_ONE: M_q(E) | same |

Why the 'release' row of PoissonSampled is not amplified for distributed
noise: amplification by Poisson subsampling (Zhu & Wang) needs "the client
was not sampled" to look exactly like "the client sent its zero-out
neighbour's input". In the usual protocol an unsampled client leaves the
secure sum and takes its noise share with it, while its zero-out neighbour
stays in and adds noise; the cohort size also changes the noise. The known-
sample bound is proved for every adversary (joint convexity), so it is what
this accountant reports there. Fixed-size cohorts (sampling without
replacement: the number of noise shares is fixed, and conditioned on the
cohort being a uniform m-subset the zero-out pair is a replace-one pair of
WBK19's setting) and self-sampling (`client_sampling_rate`) are amplified
against the release adversary with proofs.

One curve per event: the per-order minimum of the valid bounds. An RDP
curve eps(.) of an event, for one adversary and one relation, states
D_alpha(P || Q) <= eps(alpha) for every order alpha and every pair (P, Q) of
that adversary's views of neighbouring inputs, in both directions. Two
bounds proved for the same adversary, relation and pairs are two upper
bounds on the same number at each alpha, so their minimum is one too. It is
taken at each sampling event, per order, on this accountant's grid, before
the event is composed: RDP composition adds per order (Mironov 2017, Prop.
1, adaptive composition included), so the minimum enters every level of a
nested event and then every composition. (Taking the smaller of two final
epsilons would also be valid, but weaker.)

Release <= server, always. The release adversary sees a function of what
the server sees, so every server bound holds against it (data processing).
Structurally: the known-sample mixture, the server's bound for the
server-drawn samplings, is in the release's minimum too, computed on the
inner event's release curve; by induction that curve is at most the inner
server curve, and M_q, Zhu & Wang and WBK19 increase with the inner curve;
self-sampling uses the same bounds for both; composition adds. So the
release curve is at most the server curve at every order, for every event
tree, and so is its epsilon (the sampler term below is the same for both).

Everything above holds for nested events too: every curve produced bounds
both D(P||Q) and D(Q||P) of the pair it describes.

Approximate samplers. A DDG or Skellam event may carry
`sampler_tv_distance` eta: each noise sample is within eta of the discrete
Gaussian (of the Skellam law) in total variation (the alias-table samplers,
`tff_ddp.mechanisms.alias_table`). With N the samples of all composed releases
(num_clients x dimension each), the implemented mechanism is within N eta
of the ideal one on every input, so (eps, delta)-DP of the ideal one gives
(eps, delta + (1 + e^eps) N eta) for the implemented one. The accountant
sums N eta over everything composed (`sampler_tv_mass`, the same for both
adversaries) and adds the term once, in `get_epsilon_and_optimal_order` and
`get_delta` (`running.TabulatedAccountant` does the same inside TF); the
CLI's `tff-ddp privacy` goes through the same methods. The term is at
least e^eps N eta, so it turns eps infinite once e^eps N eta reaches delta:
with the first table's eta = 2^-106, 50 rounds of 50 clients x 16384
coordinates at noise multiplier 1 (eps 57 with an exact sampler) were
already there; with the tables' eta < 2^-231 (`tff_ddp.mechanisms.
alias_table`) no eps below 100 is, for up to 2^40 samples and delta >=
1e-12 (the term is then at most 1% of delta), and at the README's runs it
is below 1e-20 of delta (e.g. 1e-32 of it in the run above).
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
  """Whom an epsilon holds against (module docstring).

  SERVER: the party that runs the protocol (sees who is in each secure sum,
  knows any sample it drew). RELEASE: whoever sees only what the server
  publishes. A str (`Adversary.SERVER == 'server'`), so results compare
  with the names users pass; `as_adversary` resolves a name once.
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
    return math.inf if total == 0 else (0.0 if total == math.inf
                                        else total**-0.5)
  return None


class RdpAccountant(dp_accounting.PrivacyAccountant):
  """RDP accountant for Gaussian, DDG and cPBM events, adversary named.

  Example (a DDG factory's round, 1000 rounds, Poisson-sampled cohorts the
  server chooses, against the server):

    accountant = RdpAccountant(adversary='server')
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        0.01, factory.dp_event(value_type)), 1000)
    accountant.get_epsilon(target_delta=1e-6)

  See the module docstring for what every event costs. Curves are cached per
  (event, relation, adversary), so composing many identical rounds one by one
  costs one evaluation.
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
    the ideal samplers' (module docstring)."""
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

  def get_epsilon_and_optimal_order(self, target_delta: float
                                    ) -> Tuple[float, float]:
    """(eps, order) with (eps, target_delta)-DP, sampler term included.

    With eta = `sampler_tv_mass`: eps0 = eps of the curve at target_delta/2;
    if (1 + e^eps0) eta <= target_delta / 2, the curve's eps at
    target_delta - (1 + e^eps0) eta is valid (it is <= eps0, so its own
    term is smaller). Otherwise inf.
    """
    delta = checks.real(target_delta, 'target_delta', 0.0, 1.0,
                        low_open=True, high_open=True)
    if self._tv_mass == 0:
      return conversions.rdp_to_epsilon(self._orders, self._rdp, delta)
    first, order = conversions.rdp_to_epsilon(self._orders, self._rdp,
                                              delta / 2)
    extra = (1.0 + math.exp(min(first, 700.0))) * self._tv_mass
    if not extra <= delta / 2:
      return math.inf, order
    return conversions.rdp_to_epsilon(self._orders, self._rdp,
                                      delta - extra)

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
    return min(1.0, delta + (1.0 + math.exp(min(eps, 700.0))) *
               self._tv_mass)

  def _least_delta(self) -> Tuple[float, float]:
    """(e*, f(e*)): the least delta-with-sampler-term over e in [0, 700].

    A grid in e (fine near 0, geometric above), then golden section on the
    grid cell around the best point. Cached per composed state.
    """
    key = (self._rdp.tobytes(), self._tv_mass)
    cached = self._least_delta_cache
    if cached is not None and cached[0] == key:
      return cached[1]
    grid = np.unique(np.concatenate([np.linspace(0.0, 2.0, 41),
                                     np.geomspace(2.0, 700.0, 240)]))
    values = [self._delta_with_sampler_term(e) for e in grid]
    i = int(np.argmin(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    found = conversions.golden_section_min(self._delta_with_sampler_term,
                                           float(lo), float(hi), 60)
    best = min((float(grid[i]), float(values[i])), found,
               key=lambda t: t[1])
    self._least_delta_cache = (key, best)
    return best

  # -- Curves ---------------------------------------------------------------

  def _check(self, event):
    """Raises _Unsupported for an event this accountant cannot cost."""
    if isinstance(event, (dp_accounting.NoOpDpEvent,
                          dp_accounting.NonPrivateDpEvent,
                          dp_accounting.GaussianDpEvent,
                          events.DistributedDiscreteGaussianDpEvent,
                          events.DistributedSkellamDpEvent,
                          events.PoissonBinomialDpEvent)):
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
      raise _Unsupported(event, (
          f'{type(event).__name__} is not supported by tff_ddp\'s '
          'RdpAccountant (it knows NoOp, NonPrivate, Gaussian, '
          'DistributedDiscreteGaussian, PoissonBinomial, Composed, '
          'SelfComposed, PoissonSampled, SampledWithoutReplacement and '
          'SelfSampled events).'))

  def curve(self, event: dp_accounting.DpEvent,
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
    minimum is one too (module docstring, "One curve per event").
    """
    curve = self._known_sample(q, event, relation)
    for bound in other_bounds:
      curve = np.minimum(curve, bound())
    return curve

  def _poisson(self, event, relation) -> np.ndarray:
    q = checks.probability(event.sampling_probability,
                           'sampling_probability', allow_zero=True)
    z = _gaussian_noise_multiplier(event.event)
    if (self._adversary is Adversary.RELEASE and relation in _ZERO_OUT
        and _finite_positive(z)):
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
                           'sampling_probability', allow_zero=True)
    if relation not in _ZERO_OUT:
      return self._sampled(q, event.event, relation)
    z = _gaussian_noise_multiplier(event.event)
    if _finite_positive(z):
      zhu_wang = lambda: dp_accounting_adapter.poisson_sampled_gaussian_rdp(
          q, z, self._orders)
    else:
      zhu_wang = lambda: subsampling.poisson_rdp(
          lambda a: self._sub_curve(event.event, relation, a), q,
          self._orders)
    return self._sampled(q, event.event, relation, zhu_wang)


def gaussian_rdp(noise_multiplier: float, orders: Sequence[float],
                 relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE
                 ) -> np.ndarray:
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
