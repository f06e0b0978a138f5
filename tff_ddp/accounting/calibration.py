"""Calibrate one parameter of a mechanism to a target (eps, delta).

As dp-accounting's `mechanism_calibration.calibrate_dp_mechanism(
make_fresh_accountant, make_event_from_param, ...)`, the search knows no
mechanism: `calibrate(make_fresh_accountant, make_event, target_epsilon,
target_delta, parameter=Parameter...)` returns the least noise that meets
the target as a `CalibrationResult` (bracketed root finding, `least_noise`;
with a `PldAccountant` a coarse-then-fine PLD search, `_pld_search`). The
returned eps never exceeds the target. `split_budget` shares one budget
among several releases; `rounds_event` wraps a round's event in rounds and
sampling.

The callables, an example, the parameters' directions, the guarantee:
docs/notes/calibration.md.
"""

import dataclasses
import enum
import math
from typing import Any, Callable, Optional, Sequence, TypeAlias

import dp_accounting
from scipy import optimize

from tff_ddp.accounting import accountant as accountant_lib
from tff_ddp.accounting import events
from tff_ddp.accounting import pld_accountant
from tff_ddp.utils import checks
from tff_ddp.utils import search as search_lib


class Sampling(enum.StrEnum):
  """How each round's cohort is chosen (`rounds_event`; what each buys
  against which adversary: `tff_ddp.accounting.accountant`).

  NONE: every client of a round takes part. POISSON: the server draws each
  client with a probability (the others do not take part).
  WITHOUT_REPLACEMENT: the server draws a cohort of fixed size. SELF: every
  client takes part and keeps its value with a private coin (the
  factories' `client_sampling_rate`).
  """

  NONE = 'none'
  POISSON = 'poisson'
  WITHOUT_REPLACEMENT = 'without-replacement'
  SELF = 'self'


SAMPLINGS = tuple(s.value for s in Sampling)


def as_sampling(value) -> Sampling:
  """`value` (a name of SAMPLINGS or a Sampling) as a Sampling."""
  return checks.member(value, 'sampling', Sampling)


NeighborRel: TypeAlias = dp_accounting.NeighboringRelation
# Lower end of a noise parameter that no theorem bounds from below.
MIN_NOISE = 1e-6
# Upper end of the search for a noise parameter that decreases eps.
_MAX_NOISE = 1e12


@dataclasses.dataclass(frozen=True)
class Parameter:
  """The calibrated parameter: its name, its range, which way eps moves.

  Build with `Parameter.noise` (eps falls as it grows: a noise multiplier,
  a noise stddev; the range is [low, inf)) or `Parameter.signal` (eps grows
  with it: cPBM's theta or num_trials; the range is [low, high]).

  Attributes:
    name: the parameter's name, for results and error messages.
    low, high: the range.
    epsilon_increases: True if eps grows with the parameter.
    discrete: the parameter is an integer.
  """

  name: str
  low: float
  high: float = math.inf
  epsilon_increases: bool = False
  discrete: bool = False

  def __post_init__(self):
    if not isinstance(self.name, str):
      raise TypeError(f'Parameter name must be a string, got {self.name!r}.')
    if self.discrete:  # integers: the search passes them to make_event
      int_low = checks.integer(self.low, f'{self.name} low end')
      low, high = int_low, checks.integer(self.high, f'{self.name} high end',
                                          int_low)
    else:
      low = checks.real(self.low, f'{self.name} low end')
      high = checks.real(self.high,
                         f'{self.name} high end',
                         low=low,
                         allow_inf=not self.epsilon_increases)
    object.__setattr__(self, 'low', low)
    object.__setattr__(self, 'high', high)

  @classmethod
  def noise(cls, name: str, low: float = MIN_NOISE) -> 'Parameter':
    """A noise parameter in [low, inf): eps falls as it grows."""
    return cls(name, checks.positive(low, f'{name} low end'))

  @classmethod
  def signal(cls,
             name: str,
             low: float,
             high: float,
             discrete: bool = False) -> 'Parameter':
    """A parameter in [low, high] (finite) with which eps grows."""
    return cls(name, low, high, True, checks.boolean(discrete, 'discrete'))


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
  """What `calibrate` chose and what it costs.

  Attributes:
    parameter: name of the calibrated parameter.
    value: its calibrated value.
    epsilon: eps at `target_delta` with that value (<= target_epsilon).
    order: RDP order attaining `epsilon`.
    target_epsilon: the target.
    target_delta: the delta.
    at_limit: True if the value is the end of the parameter's range (the
      target is not binding there) or eps is limited by integrality.
    event: the full DpEvent (all rounds, sampling) that was accounted.
    neighboring_relation: the relation `epsilon` holds for.
    adversary: the adversary `epsilon` holds against.
    bound: 'PLD' (privacy loss distribution) or 'RDP': which valid bound
      `epsilon` is (an RdpAccountant's is always 'RDP'; `order` is None
      for 'PLD').
  """

  parameter: str
  value: float
  epsilon: float
  order: float
  target_epsilon: float
  target_delta: float
  at_limit: bool
  event: dp_accounting.DpEvent
  neighboring_relation: dp_accounting.NeighboringRelation
  adversary: str
  bound: str = 'RDP'


def rounds_event(
    event: dp_accounting.DpEvent,
    rounds: int = 1,
    sampling: str = 'none',
    rate: Optional[float] = None,
    sample_size: Optional[int] = None,
    population: Optional[int] = None,
) -> dp_accounting.DpEvent:
  """`rounds` compositions of `event` under the given sampling scheme.

  'poisson' (the server draws each client with probability `rate`, or
  sample_size / population; the others do not take part),
  'without-replacement' (a cohort of `sample_size` of `population`), 'self'
  (every client takes part and sends its value with probability `rate`:
  `client_sampling_rate` of the factories).
  """
  rounds = checks.integer(rounds, 'rounds', 1)
  sampling = as_sampling(sampling)
  if sampling in (Sampling.POISSON, Sampling.SELF):
    if rate is None:
      if sample_size is None or population is None:
        raise ValueError(f'{sampling} sampling needs rate, or sample_size and '
                         'population.')
      population = checks.integer(population, 'population', 1)
      rate = checks.integer(sample_size, 'sample_size', 1,
                            population) / population
    rate = checks.probability(rate, 'rate')
    event = (dp_accounting.PoissonSampledDpEvent(rate, event) if sampling
             is Sampling.POISSON else events.SelfSampledDpEvent(rate, event))
  elif sampling is Sampling.WITHOUT_REPLACEMENT:
    if sample_size is None or population is None:
      raise ValueError('without-replacement sampling needs sample_size and '
                       'population.')
    population = checks.integer(population, 'population', 1)
    sample_size = checks.integer(sample_size, 'sample_size', 1, population)
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population, sample_size, event)
  elif rate is not None or sample_size is not None or population is not None:
    raise ValueError("rate, sample_size and population need sampling='poisson'"
                     ", 'without-replacement' or 'self'.")
  if rounds > 1:
    event = dp_accounting.SelfComposedDpEvent(event, rounds)
  return event


@dataclasses.dataclass(frozen=True)
class Rounds:
  """`count` rounds, each under one sampling scheme: `rounds_event`'s
  arguments as one value (validated at construction).

  Attributes:
    count: the number of rounds (>= 1).
    sampling, rate, sample_size, population: as for `rounds_event`.
  """

  count: int = 1
  sampling: str = Sampling.NONE
  rate: Optional[float] = None
  sample_size: Optional[int] = None
  population: Optional[int] = None

  def __post_init__(self):
    object.__setattr__(self, 'sampling', as_sampling(self.sampling))
    self.of(dp_accounting.NoOpDpEvent())  # argument errors now

  def of(self, event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """The event of all rounds of `event` (`rounds_event`)."""
    return rounds_event(event, self.count, self.sampling, self.rate,
                        self.sample_size, self.population)

  @classmethod
  def split(cls, rounds, keywords):
    """(Rounds, the other keywords) from `rounds` (a count or a Rounds) and
    keywords that may hold the sampling's (sampling, rate, sample_size,
    population): how a calibration entry point takes both."""
    names = [f.name for f in dataclasses.fields(cls)][1:]
    mine = {k: v for k, v in keywords.items() if k in names}
    rest = {k: v for k, v in keywords.items() if k not in names}
    if isinstance(rounds, cls):
      if mine:
        raise ValueError(f'give rounds=Rounds(...) or {sorted(mine)}, not '
                         'both.')
      return rounds, rest
    return cls(rounds, **mine), rest


def _fresh(make_fresh_accountant):
  """A fresh RdpAccountant or PldAccountant (both name the adversary)."""
  accountant = make_fresh_accountant()
  if not isinstance(
      accountant, (accountant_lib.RdpAccountant, pld_accountant.PldAccountant)):
    raise TypeError(
        'make_fresh_accountant must return a tff_ddp.accounting.'
        'RdpAccountant or PldAccountant (its epsilon names the adversary), '
        f'got {type(accountant).__name__}.')
  if not isinstance(accountant.ledger, dp_accounting.NoOpDpEvent):
    raise ValueError('make_fresh_accountant must return an accountant with '
                     f'nothing composed yet, got ledger {accountant.ledger}.')
  return accountant


def _check_callables(make_fresh_accountant, make_event) -> None:
  if isinstance(make_fresh_accountant, str):
    raise TypeError(
        f'calibrate({make_fresh_accountant!r}, ...): calibration works over '
        'callables, not mechanism names. Use calibrate(make_fresh_accountant, '
        'make_event, target_epsilon, target_delta, parameter), e.g. '
        'calibrate(lambda: RdpAccountant(adversary=...), lambda z: '
        'dp_accounting.GaussianDpEvent(z), 2.0, 1e-5, '
        "Parameter.noise('noise_multiplier')), or calibrate_gaussian.")
  for name, value in (('make_fresh_accountant', make_fresh_accountant),
                      ('make_event', make_event)):
    if not callable(value):
      raise TypeError(f'{name} must be callable, got {value!r}.')


def calibrate(
    make_fresh_accountant: Callable[[], accountant_lib.RdpAccountant],
    make_event: Callable[[float], dp_accounting.DpEvent],
    target_epsilon: float,
    target_delta: float,
    parameter: Parameter,
) -> CalibrationResult:
  """The least noise whose event meets (target_epsilon, target_delta).

  Args:
    make_fresh_accountant: () -> a new `RdpAccountant` (its adversary,
      neighbouring relation and orders are the calibration's).
    make_event: x -> the DpEvent of every release with the parameter at x
      (rounds and sampling included: `rounds_event`). Deterministic and
      monotone in x; a ValueError refuses x (unsafe).
    target_epsilon: > 0.
    target_delta: in (0, 1).
    parameter: the `Parameter` searched.

  Returns:
    A `CalibrationResult`.

  Raises:
    TypeError / ValueError: bad arguments, or no value in range meets the
      target (the message says what to change, and quotes the last value
      `make_event` refused).
  """
  _check_callables(make_fresh_accountant, make_event)
  if not isinstance(parameter, Parameter):
    raise TypeError('parameter must be a calibration.Parameter '
                    "(Parameter.noise('noise_multiplier'), ...), got "
                    f'{parameter!r}.')
  target_epsilon = checks.positive(target_epsilon, 'target_epsilon')
  target_delta = checks.probability(target_delta,
                                    'target_delta',
                                    allow_one=False)
  first = _fresh(make_fresh_accountant)
  refused = []

  def event_at(x) -> dp_accounting.DpEvent:
    event = make_event(x)
    if not isinstance(event, dp_accounting.DpEvent):
      raise TypeError(f'make_event must return a dp_accounting.DpEvent, got '
                      f'{type(event).__name__} from make_event({x!r}).')
    return event

  def eps(x) -> float:
    try:
      return _fresh(make_fresh_accountant).compose(
          event_at(x)).get_epsilon(target_delta)
    except ValueError as e:  # a configuration that cannot fit is unsafe
      refused.append(f'{parameter.name}={x:.6g}: {e}')
      return math.inf

  def search(eps_fn, rtol=None):
    try:
      return least_noise(eps_fn, parameter.low, parameter.high,
                         parameter.epsilon_increases, target_epsilon,
                         parameter.discrete, parameter.name, rtol)
    except ValueError as e:
      detail = f' Last refusal: {refused[-1]}' if refused else ''
      raise ValueError(f'{e}{detail}') from e

  if isinstance(first, pld_accountant.PldAccountant):
    value, at_limit, composed = _pld_search(first, event_at, target_epsilon,
                                            target_delta, parameter, refused,
                                            search)
    event = event_at(value)
    first = composed or _fresh(make_fresh_accountant).compose(event)
    epsilon, order = first.get_epsilon_and_optimal_order(target_delta)
    bound = first.bound_used(target_delta)
  else:
    value, at_limit = search(eps)
    event = event_at(value)
    epsilon, order = first.compose(event).get_epsilon_and_optimal_order(
        target_delta)
    bound = 'RDP'
  return CalibrationResult(parameter=parameter.name,
                           value=value,
                           epsilon=epsilon,
                           order=order,
                           target_epsilon=target_epsilon,
                           target_delta=target_delta,
                           at_limit=at_limit,
                           event=event,
                           neighboring_relation=first.neighboring_relation,
                           adversary=first.adversary,
                           bound=bound)


# The PLD search (`_pld_search`): a first search on a loss grid this many
# times coarser (pessimistic as well: each value it tries has a valid
# epsilon, ~8x cheaper), stopped within COARSE_RTOL of the target; then the
# accountant's own grid from there, stopped within FINE_RTOL.
COARSE_FACTOR = 10.0
# RDP's search goes first for a cPBM release whose l2 budget (in
# coordinates) times this is at most its dimension (`_rdp_expected_smaller`).
RDP_FIRST_FACTOR = 4.0
COARSE_RTOL = 2e-3
FINE_RTOL = 1e-4
# Where a search's less-noisy end is a refused configuration (the factory
# cannot fit it: inf), the least noise is the refusal's edge, located to
# this relative width of the parameter (`_regula_falsi`).
REFUSED_XTOL = 1e-6


def _pld_search(first, event_at, target_epsilon, target_delta, parameter,
                refused, search):
  """(value, at_limit, accountant composed at value or None): the least
  noise of what `first` reports.

  The least noise of min(PLD, RDP) (what a `PldAccountant` reports) is the
  less noisy of the least noise of each bound alone: both fall as the noise
  grows, so min(PLD, RDP)(x) <= target iff PLD(x) <= target or
  RDP(x) <= target. The PLD's is searched coarse then fine
  (`COARSE_FACTOR`); RDP's only if RDP meets the target at the PLD's
  value (else RDP needs more noise and cannot be the less noisy). Where
  RDP is expected to win (`_rdp_expected_smaller`, a rule on the event)
  the order is reversed: RDP's search first, the PLD's only if the PLD
  meets the target at RDP's value. The order changes the work, never the
  value returned.
  """

  def eps_of(make):
    memo = {}

    def eps(x):
      if x not in memo:
        try:
          memo[x] = make().compose(event_at(x)).get_epsilon(target_delta)
        except ValueError as e:  # a configuration that cannot fit
          refused.append(f'{parameter.name}={x:.6g}: {e}')
          memo[x] = math.inf
      return memo[x]

    return eps

  fine = eps_of(first.pld_only)
  if first.uses_rdp and _rdp_expected_smaller(event_at, parameter,
                                              first.neighboring_relation):
    try:
      x_rdp = search(eps_of(first.rdp_only))
    except ValueError:  # RDP meets the target nowhere: the PLD alone
      return _pld_least_noise(fine, eps_of, first, parameter, target_epsilon,
                              search) + (None,)
    check = first.compose(event_at(x_rdp[0]))
    if check.pld_epsilon(target_delta) > target_epsilon:
      return x_rdp + (check,)
    try:
      x_pld = _pld_least_noise(fine, eps_of, first, parameter, target_epsilon,
                               search)
    except ValueError:
      return x_rdp + (check,)
    return (x_rdp +
            (check,) if _less_noisy(x_rdp[0], x_pld[0], parameter) else x_pld +
            (None,))
  x_pld = None
  try:
    x_pld = _pld_least_noise(fine, eps_of, first, parameter, target_epsilon,
                             search)
  except ValueError:
    if not first.uses_rdp:
      raise
  else:
    if not first.uses_rdp:
      return x_pld + (None,)
  if x_pld is not None:
    check = first.compose(event_at(x_pld[0]))
    if (check.rdp_accountant.get_epsilon(target_delta) > target_epsilon or
        _at_edge(event_at, x_pld[0], parameter)):
      return x_pld + (check,)
  # RDP meets the target at the PLD's value (or the PLD nowhere): the
  # least noise of RDP alone, with `least_noise`'s default search (the
  # value an RdpAccountant's calibration gives).
  x_rdp = search(eps_of(first.rdp_only))
  if x_pld is None:
    return x_rdp + (None,)
  return (x_rdp +
          (None,) if _less_noisy(x_rdp[0], x_pld[0], parameter) else x_pld +
          (check,))


def _at_edge(event_at, x, parameter) -> bool:
  """Whether nothing less noisy than x is in reach (x is the range's end,
  or refused REFUSED_XTOL relative past it; 1 past it for an integer): a
  second bound's least noise is then x too, within that width."""
  up = parameter.epsilon_increases
  if x == (parameter.high if up else parameter.low):
    return True
  step = 1 if parameter.discrete else REFUSED_XTOL * (abs(x) or 1.0)
  beyond = min(max(x + step if up else x - step, parameter.low), parameter.high)
  try:
    event_at(beyond)
  except ValueError:
    return True
  return False


def _less_noisy(x, y, parameter) -> bool:
  """Whether the parameter at x adds less noise than at y."""
  return x > y if parameter.epsilon_increases else x < y


def _bisect_integers(eps, safe, unsafe, target):
  """The integer next to `unsafe` on the safe side: bisection between an
  integer `safe` (eps <= target) and `unsafe` (eps > target)."""
  while abs(unsafe - safe) > 1:
    mid = (safe + unsafe) // 2
    if eps(mid) <= target:
      safe = mid
    else:
      unsafe = mid
  return safe


def _pld_least_noise(fine, eps_of, first, parameter, target_epsilon, search):
  """(value, at_limit): the PLD's least noise, coarse grid then fine."""
  try:
    coarse = eps_of(lambda: first.pld_only(COARSE_FACTOR))
    x_c, limit_c = search(coarse, COARSE_RTOL)
    return _refine(fine, x_c, limit_c, parameter, target_epsilon, FINE_RTOL)
  except ValueError:
    # The coarse grid reaches the target nowhere (or its answer did not
    # refine): the accountant's own grid, from scratch.
    return search(fine, FINE_RTOL)


def _rdp_expected_smaller(event_at, parameter, relation) -> bool:
  """Whether the release holds a cPBM event whose l2 promise binds.

  The PLD of a cPBM release composes the one-coordinate worst case over
  every coordinate a client may move (D of them); the l2-aware RDP curve
  (`pbm_rdp.l2_rdp`) charges the squared l2 budget S = L^2 (4 L^2
  replace-one) in units of one coordinate's full shift. In the Gaussian
  regime epsilon grows like the square root of what is charged, and the
  conversion from RDP costs up to ~2x in epsilon, so RDP is expected to be
  the smaller bound when 4 S <= D, and its search goes first (its
  constants are costly, tens of seconds per theta at hundreds of clients,
  so it should not be evaluated at values only the PLD's search visits).
  The structure of the event does not depend on the parameter: it is read
  at the most-noise end of the range.
  """
  x = parameter.low if parameter.epsilon_increases else parameter.high
  try:
    event = event_at(x)
  except ValueError:
    return False
  replace = events.as_relation(relation) == events.Relation.REPLACE_ONE
  pending = [event]
  while pending:
    event = pending.pop()
    if isinstance(event, events.PoissonBinomialDpEvent):
      bound = event.l2_bound
      if bound is not None and math.isfinite(float(bound)):
        dimension = event.dimension
        if replace and event.replace_one_dimension is not None:
          dimension = event.replace_one_dimension
        budget = float(bound)**2 * (4.0 if replace else 1.0)
        if RDP_FIRST_FACTOR * budget <= dimension:
          return True
    pending.extend(getattr(event, 'events', None) or [])
    inner = getattr(event, 'event', None)
    if isinstance(inner, dp_accounting.DpEvent):
      pending.append(inner)
  return False


def _refine(eps, x0, at_limit, parameter, target, rtol):
  """`least_noise` at a finer grid from x0, the coarse grid's answer: the
  two grids' epsilons differ by a fraction of a percent, so the bracket
  is found a small step from x0 (growing 4x per step) and closed by
  `_regula_falsi`. Raises ValueError if the bracket reaches a range end
  that does not meet the target."""
  lo, hi = parameter.low, parameter.high
  up = parameter.epsilon_increases  # x grows towards less noise
  least_noise_end = hi if up else lo
  most_noise_end = lo if up else hi
  e0 = eps(x0)
  if parameter.discrete:
    direction = 1 if up else -1
    x0 = int(x0)
    if e0 <= target:
      safe, stride = x0, 1
      while safe != least_noise_end:
        x = safe + direction * stride
        x = min(x, hi) if up else max(x, lo)
        if eps(x) > target:
          unsafe = x
          break
        safe, stride = x, stride * 2
      else:
        return safe, True
    else:
      unsafe, stride = x0, 1
      while True:
        if unsafe == most_noise_end:
          raise ValueError(f'{parameter.name}: no value meets the target')
        x = unsafe - direction * stride
        x = max(x, lo) if up else min(x, hi)
        if eps(x) <= target:
          safe = x
          break
        unsafe, stride = x, stride * 2
    return _bisect_integers(eps, safe, unsafe, target), True
  width = hi - lo if math.isfinite(hi - lo) else 1.0

  def moved(x, step, sign):
    """x moved by `step` (relative, or of the range's width from x <= 0)
    upwards (sign 1) or downwards, kept in the range."""
    x = (x * math.exp(sign * step) if x > 0 else x + sign * step * width)
    return min(max(x, lo), hi)

  towards_less_noise = 1 if up else -1
  if e0 <= target:
    if at_limit and x0 == least_noise_end:
      return x0, True
    if e0 >= (1.0 - rtol) * target:
      return x0, False
    safe, e_safe = x0, e0
    step = max(1e-5, 2.0 * math.log(target / e0) if e0 > 0 else 1e-3)
    for _ in range(200):
      x = moved(safe, step, towards_less_noise)
      e = eps(x)
      if e > target:
        unsafe, e_unsafe = x, e
        break
      if x == least_noise_end:
        return x, True
      safe, e_safe, step = x, e, step * 4.0
    else:
      raise ValueError(f'{parameter.name}: no bracket found')
  else:
    unsafe, e_unsafe = x0, e0
    step = max(1e-5, 2.0 * math.log(e0 / target) if e0 < math.inf else 1e-2)
    for _ in range(200):
      if unsafe == most_noise_end:
        raise ValueError(f'{parameter.name}: no value meets the target')
      x = moved(unsafe, step, -towards_less_noise)
      e = eps(x)
      if e <= target:
        safe, e_safe = x, e
        break
      unsafe, e_unsafe, step = x, e, step * 4.0
    else:
      raise ValueError(f'{parameter.name}: no bracket found')
  return _regula_falsi(eps, safe, unsafe, target, rtol, e_safe, e_unsafe), False


def calibrate_gaussian(
    target_epsilon: float,
    target_delta: float,
    rounds: int = 1,
    adversary: str = 'server',
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
) -> CalibrationResult:
  """The least noise multiplier z of `rounds` unsampled central Gaussians
  (`dp_accounting.GaussianDpEvent(z)`, noise stddev z C for an l2 bound C)
  meeting the target against `adversary` (`calibrate` over z >= 1e-6)."""
  rounds = checks.integer(rounds, 'rounds', 1)
  return calibrate(
      lambda: pld_accountant.tightest(adversary, neighboring_relation),
      lambda z: rounds_event(dp_accounting.GaussianDpEvent(z), rounds),
      target_epsilon, target_delta, Parameter.noise('noise_multiplier'))


def least_noise(
    eps: Callable[[float], float],
    lo: float,
    hi: float,
    increasing: bool,
    target_epsilon: float,
    discrete: bool = False,
    name: str = 'parameter',
    rtol: Optional[float] = None,
    xtol: float = 1e-12,
):
  """The least-noise x in [lo, hi] with eps(x) <= target_epsilon.

  The search behind `calibrate`, for any monotone eps(x) (e.g. the epsilon of
  an aggregation factory built with noise x, whose sensitivity itself
  depends on x).

  Args:
    eps: x -> epsilon, monotone in x.
    lo, hi: the range of x (hi may be inf when eps decreases in x).
    increasing: True if eps grows with x (x = theta, num_trials), False if
      it shrinks (x = a noise multiplier or stddev).
    target_epsilon: > 0.
    discrete: x is an integer.
    name: the parameter's name, for error messages.
    rtol: None (default): brentq to the root, then bisection until eps is
      within 0.1% below the target. A float: regula falsi in log x (Illinois,
      `_regula_falsi`), stopped as soon as eps is within rtol below the
      target (fewer evaluations: the PLD searches of `calibrate`), or when
      the bracket is narrower than xtol relative (a step function of x).

  Returns:
    (x, at_limit): eps(x) <= target_epsilon always; within 0.1% (or rtol)
    of the target for continuous x strictly inside the range; at_limit says
    that x is a range end where the target is not binding, or integral.

  Raises:
    ValueError: if no x in range meets the target (the message says the
      best epsilon reachable).
  """
  # safe(x): eps(x) <= target. Larger x is safer iff eps decreases in x.
  if increasing:
    e_lo = eps(lo)
    if e_lo > target_epsilon:
      raise ValueError(
          f'target_epsilon={target_epsilon:g} is unreachable: even '
          f'{name}={lo:g} (the least private end of its range is the other '
          f'one) gives epsilon {e_lo:.4g}. Raise the target, or change the '
          'fixed parameters (fewer rounds, more clients, a smaller '
          'sampling rate).')
    safe, unsafe, e_unsafe = lo, hi, eps(hi)
    if e_unsafe <= target_epsilon:
      return hi, True
  else:
    unsafe = lo
    e_unsafe = eps(unsafe)
    if e_unsafe <= target_epsilon:
      return unsafe, True
    safe = max(2.0 * unsafe, 1.0)
    while (e := eps(safe)) > target_epsilon:
      unsafe, e_unsafe, safe = safe, e, safe * 4.0
      if safe > _MAX_NOISE:
        raise ValueError(
            f'target_epsilon={target_epsilon:g} is unreachable: even '
            f'{name}={_MAX_NOISE:g} gives epsilon {eps(safe):.4g} (a '
            'configuration whose epsilon does not fall with the noise, e.g. '
            'a non-private event, or rounding-dominated sensitivity).')

  if discrete:
    return _bisect_integers(eps, int(safe), int(unsafe), target_epsilon), True

  if rtol is not None:
    return _regula_falsi(eps, safe, unsafe, target_epsilon, rtol,
                         xtol=xtol), False

  def gap(x):
    # Capped so that inf (a refused configuration) keeps brentq's bracket.
    return min(eps(x), 2.0 * target_epsilon) - target_epsilon

  root = optimize.brentq(gap,
                         min(safe, unsafe),
                         max(safe, unsafe),
                         xtol=1e-12,
                         rtol=1e-10)
  # brentq may land just past the root: step back towards `safe` by
  # geometrically growing amounts, then bisect [safe, unsafe] until eps is
  # within 0.1% below the target.
  e = eps(root)
  if e <= target_epsilon:
    safe, e_safe = root, e  # e_unsafe: the bracket's, above
  else:
    unsafe, e_unsafe = root, e
    step = 1e-12 * abs(safe - root)
    while True:
      x = root + math.copysign(step, safe - root)
      if (x - safe) * (root - safe) <= 0:  # Overshot: `safe` itself.
        x = safe
      e = eps(x)
      if e <= target_epsilon:
        safe, e_safe = x, e
        break
      unsafe, e_unsafe, step = x, e, step * 4.0
  for _ in range(200):
    if e_safe >= (1 - 1e-3) * target_epsilon:
      break
    tol = REFUSED_XTOL if e_unsafe == math.inf else xtol  # inf: refused
    if abs(unsafe - safe) <= tol * max(abs(safe), abs(unsafe)):
      break
    x = 0.5 * (safe + unsafe)
    e = eps(x)
    if e <= target_epsilon:
      safe, e_safe = x, e
    else:
      unsafe, e_unsafe = x, e
  return safe, False


def _regula_falsi(eps,
                  safe,
                  unsafe,
                  target,
                  rtol,
                  e_safe=None,
                  e_unsafe=None,
                  xtol=1e-12):
  """x between `safe` (eps <= target) and `unsafe` (eps > target) with
  (1 - rtol) target <= eps(x) <= target, or the safe end of a bracket of
  relative width xtol.

  The Illinois variant of regula falsi (Dowell & Jarratt 1971, BIT 11) on
  g(u) = log eps - log target, u = log x (eps is close to a power of the
  noise or theta, so g is nearly linear in u and two or three steps
  usually suffice); bisection where g is not finite (inf: a refused
  value; 0). Every step keeps a bracket [safe, unsafe], so the result is
  safe whatever the interpolation does.

  Where the unsafe end is refused (eps = inf), the bracket closes on
  where the configuration stops fitting, not on an epsilon: the search
  then probes from the safe end at REFUSED_XTOL / 2 (relative), growing
  4x a probe, then bisects, and stops once the bracket is REFUSED_XTOL
  narrow (at a huge target the least noise is the refusal's edge, which 40
  bisection steps to xtol only re-located).
  """
  use_log = safe > 0 and unsafe > 0
  to_u = math.log if use_log else float
  from_u = math.exp if use_log else float

  def g(e):
    if e is None or not 0.0 < e < math.inf:
      return None
    return math.log(e) - math.log(target)

  u_s, u_u = to_u(safe), to_u(unsafe)
  if e_safe is None:
    e_safe = eps(safe)
  g_s = g(e_safe)
  g_u = g(e_unsafe)
  refused = e_unsafe == math.inf
  gallop = 0.5 * REFUSED_XTOL  # the next probe's distance (relative)
  last = 0  # which end moved last (+1 safe, -1 unsafe): Illinois halving
  for _ in range(200):
    if e_safe >= (1.0 - rtol) * target:
      break
    tol = max(xtol, REFUSED_XTOL) if refused else xtol
    width = abs(from_u(u_u) - safe)
    if width <= tol * max(abs(safe), abs(from_u(u_u))):
      break
    if refused and gallop * 4.0 < 0.5:
      # The edge is often next to the safe end (a coarser grid's answer):
      # probes at 4x growing distances from it before bisecting.
      x_u = from_u(u_u)
      step = gallop * max(abs(safe), abs(x_u))
      gallop *= 4.0
      if step < 0.5 * width:
        u = to_u(safe + math.copysign(step, x_u - safe))
      else:
        gallop, u = 1.0, 0.5 * (u_s + u_u)
    elif g_s is not None and g_u is not None and g_u != g_s:
      u = u_s + (u_u - u_s) * g_s / (g_s - g_u)
      # Stay strictly inside: at least 1/64 of the bracket from either end.
      w = u_u - u_s
      lo, hi = sorted((u_s + w / 64.0, u_u - w / 64.0))
      u = min(max(u, lo), hi)
    else:
      u = 0.5 * (u_s + u_u)
    x = from_u(u)
    e = eps(x)
    if e <= target:
      u_s, safe, e_safe, g_s = u, x, e, g(e)
      if last == 1 and g_u is not None:
        g_u *= 0.5
      last = 1
    else:
      u_u, g_u, refused = u, g(e), e == math.inf
      if last == -1 and g_s is not None:
        g_s *= 0.5
      last = -1
  return safe


@dataclasses.dataclass(frozen=True)
class SplitBudget:
  """What `split_budget` chose.

  Attributes:
    results: the calibrators' results, in order.
    events: their events, in order.
    standalone_epsilons: eps of each event alone at `delta` (the shares
      the weights fix: proportional to the weights while no release is at
      the end of its range).
    scale: s, the sum of the standalone targets the calibrators got.
    epsilon: eps of the composition at `delta` (<= target_epsilon).
    delta: the delta.
    event: ComposedDpEvent(events).
    at_limit: True if the composition stays below the target because every
      release is at the least-noise end of its range.
    adversary, neighboring_relation: what `epsilon` holds for.
  """

  results: tuple
  events: tuple
  standalone_epsilons: tuple
  scale: float
  epsilon: float
  delta: float
  event: dp_accounting.DpEvent
  at_limit: bool
  adversary: str
  neighboring_relation: dp_accounting.NeighboringRelation


def _least_reachable_scale(parts, lo: float, hi: float) -> float:
  """lo, or the least scale in (lo, hi] at which every calibrator succeeds.

  A calibrator raises ValueError when its share is below the least epsilon
  it can reach (e.g. fixed theta and num_trials >= 1: even one trial costs
  something), which can happen at the bracket's low end while the target
  itself is reachable. Reachability is monotone in the scale (more budget,
  never fewer options), so bisection finds the least reachable scale (to a
  relative 1e-4, rounded up); if even hi is unreachable, the calibrator's
  own error is raised.
  """

  def reachable(scale):
    try:
      parts(scale)
    except ValueError:
      return False
    return True

  if reachable(lo):
    return lo
  parts(hi)  # raises the calibrator's error if even hi is out of reach
  return search_lib.boundary(reachable, hi, lo, 1e-4)


def split_budget(
    calibrators: Sequence[Callable[[float], Any]],
    weights: Sequence[float],
    target_epsilon: float,
    target_delta: float,
    adversary: str = 'server',
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
    orders: Optional[Sequence[float]] = None,
) -> SplitBudget:
  """Calibrates k releases so that their composition meets one budget.

  Release i is calibrated alone to eps_i = s w_i / sum(w) at target_delta
  by `calibrators[i](eps_i)`, which returns (result, event) -- e.g. a
  `CalibratedFactory` and its event. The scale s is the largest (to 0.1%
  of epsilon or 1e-4 of s) for which the composition of the k events has
  eps <= target_epsilon at target_delta (composition is sub-additive in practice, so s is
  usually a little above the target: the split uses the whole budget
  rather than the sum of the parts). The weights fix the *ratio of the
  standalone epsilons*, e.g. (1, 10) for the frequency paper's "about
  10:1" between a quantile phase and a frequency phase.

  Args:
    calibrators: one function per release: eps_i -> (result, DpEvent);
      monotone (more budget, a less noisy release) and deterministic. A
      calibrator that cannot reach eps_i raises ValueError.
    weights: positive shares, one per release.
    target_epsilon, target_delta: the budget of the composition.
    adversary, neighboring_relation, orders: of the accountant.

  Returns:
    A `SplitBudget`.

  Raises:
    ValueError: bad arguments, or a share that no calibrator can reach.
  """
  calibrators = list(calibrators)
  weights = checks.real_sequence(weights, 'weights', low=0.0, low_open=True)
  if not calibrators or len(calibrators) != len(weights):
    raise ValueError(f'need one weight per calibrator, got {len(weights)} '
                     f'weights for {len(calibrators)} calibrators.')
  for c in calibrators:
    if not callable(c):
      raise TypeError(f'calibrators must be callable, got {c!r}.')
  target_epsilon = checks.positive(target_epsilon, 'target_epsilon')
  target_delta = checks.probability(target_delta,
                                    'target_delta',
                                    allow_one=False)
  adversary = accountant_lib.as_adversary(adversary)
  shares = [w / sum(weights) for w in weights]
  cache = {}

  def parts(scale):
    key = float(scale)
    if key not in cache:
      out = [c(scale * share) for c, share in zip(calibrators, shares)]
      event = dp_accounting.ComposedDpEvent([e for _, e in out])
      eps = pld_accountant.epsilon(event, target_delta, adversary,
                                   neighboring_relation, orders)[0]
      cache[key] = (out, event, eps)
    return cache[key]

  def eps(scale):
    return parts(scale)[2]

  # Composition is at most about the sum of the parts, so the answer lies
  # around the target; the search widens the bracket if needed.
  lo, hi = target_epsilon / 4.0, target_epsilon * 8.0
  lo = _least_reachable_scale(parts, lo, hi)
  while eps(hi) <= target_epsilon and hi < target_epsilon * 1e4:
    if eps(2.0 * hi) == eps(hi):  # every release at its end: no gain
      break
    hi *= 2.0
  # Each step calibrates every release: stop once the composition is within
  # 0.1% of the target, or the scale within 1e-4 (a calibrated integer makes
  # eps a step function of the scale).
  scale, at_limit = least_noise(eps,
                                lo,
                                hi,
                                True,
                                target_epsilon,
                                name='the budget scale',
                                rtol=1e-3,
                                xtol=1e-4)
  out, event, epsilon = parts(scale)
  standalone = tuple(
      pld_accountant.epsilon(e, target_delta, adversary, neighboring_relation,
                             orders)[0] for _, e in out)
  return SplitBudget(results=tuple(r for r, _ in out),
                     events=tuple(e for _, e in out),
                     standalone_epsilons=standalone,
                     scale=scale,
                     epsilon=epsilon,
                     delta=target_delta,
                     event=event,
                     at_limit=at_limit,
                     adversary=adversary,
                     neighboring_relation=neighboring_relation)
