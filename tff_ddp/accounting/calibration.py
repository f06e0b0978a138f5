"""Calibrate one noise parameter of a mechanism to a target (eps, delta).

`calibrate` takes a mechanism name, its fixed parameters, the free parameter,
rounds, sampling scheme, adversary and target, and returns the least noise
that meets the target, found by bracketed root finding (scipy's brentq on
eps(x) - target, then a step onto the safe side), as a `CalibrationResult`.

Free parameters and their direction ("least noise"):

| mechanism | parameter        | eps grows when it | range           |
|-----------|------------------|-------------------|-----------------|
| gaussian  | noise_multiplier | decreases         | (0, inf)        |
| ddg       | local_stddev     | decreases         | [1/2, inf)      |
| ddg       | noise_multiplier | decreases         | local_stddev = z l2 / sqrt(n) >= 1/2 |
| skellam   | local_stddev     | decreases         | (0, inf)        |
| skellam   | noise_multiplier | decreases         | local_stddev = z l2 / sqrt(n) |
| cpbm      | theta            | increases         | [2^-40, 1/4]    |
| cpbm      | num_trials       | increases         | integers >= 1   |

Guarantee: the returned eps never exceeds the target. For continuous
parameters whose optimum lies strictly inside the range, it is within 1% of
the target (we stop at 0.1%). At a range end (theta = 1/4 already meets the
target) or for the integer num_trials, eps can be further below; the result
says which (`at_limit`).

`split_budget` calibrates several releases at once: each gets a share of
one (epsilon, delta) budget, and their composition meets it.

Sampling ('none', 'poisson', 'without-replacement', 'self') and the
adversary ('server', 'release') decide what sampling buys; see
`tff_ddp.accounting.accountant` for every case. Relation: zero-out
(ADD_OR_REMOVE_ONE) unless given; every search goes through
`accountant.epsilon`, so under REPLACE_ONE a Gaussian is calibrated against
its replace-one curve 2 alpha / z^2 (twice the add/remove noise multiplier
for an unsampled release) and the DDG's events carry the noise sampler's TV
distance exactly as the factories' do (`mechanism_event`).
"""

import collections.abc
import dataclasses
import math
from typing import Any, Callable, Dict, Optional, Sequence

import dp_accounting
from scipy import optimize

from tff_ddp.accounting import accountant as accountant_lib
from tff_ddp.accounting import events
from tff_ddp.utils import checks

MECHANISM_PARAMETERS = {
    'gaussian': ('noise_multiplier',),
    'ddg': ('local_stddev', 'noise_multiplier'),
    'skellam': ('local_stddev', 'noise_multiplier'),
    'cpbm': ('theta', 'num_trials'),
}
SAMPLINGS = ('none', 'poisson', 'without-replacement', 'self')
# (required, optional) keywords of `mechanism_event`; for 'ddg',
# noise_multiplier stands in for local_stddev.
_EVENT_PARAMETERS = {
    'gaussian': (('noise_multiplier',), ()),
    'ddg': (('l2_sensitivity', 'num_clients', 'dimension', 'noise_multiplier'),
            ('local_stddev', 'l1_sensitivity', 'noise_sampler')),
    'skellam': (('l2_sensitivity', 'num_clients', 'dimension',
                 'noise_multiplier'),
                ('local_stddev', 'l1_sensitivity', 'noise_sampler')),
    'cpbm': (('theta', 'num_trials', 'num_clients', 'dimension'), ()),
}
NeighborRel = dp_accounting.NeighboringRelation
# Upper end of the search for a noise parameter that decreases eps.
_MAX_NOISE = 1e12


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
  """What `calibrate` chose and what it costs.

  Attributes:
    mechanism: 'gaussian', 'ddg' or 'cpbm'.
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
  """

  mechanism: str
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


def _check_names(mechanism: str, params, what: str = '') -> None:
  """TypeError naming what `params` lacks or has too much for the event."""
  what = what or f'mechanism_event({mechanism!r})'
  allowed = _EVENT_PARAMETERS[mechanism]
  unknown = sorted(set(params) - set(allowed[0]) - set(allowed[1]))
  missing = [name for name in allowed[0] if params.get(name) is None]
  if mechanism in ('ddg', 'skellam') and params.get(
      'local_stddev') is not None:
    missing = [name for name in missing if name != 'noise_multiplier']
  if unknown or missing:
    raise TypeError(
        f'{what} needs {", ".join(allowed[0])}'
        + (f' and takes {", ".join(allowed[1])}' if allowed[1] else '')
        + (f'; missing {", ".join(missing)}' if missing else '')
        + (f'; unknown {", ".join(unknown)}' if unknown else '') + '.')


def mechanism_event(mechanism: str, **params) -> dp_accounting.DpEvent:
  """One unsampled release of `mechanism` with keyword `params`.

  'gaussian': noise_multiplier. 'ddg': l2_sensitivity, num_clients,
  dimension and local_stddev (or noise_multiplier, the central noise /
  l2_sensitivity: local_stddev = z Delta_2 / sqrt(n)), optional
  l1_sensitivity and noise_sampler ('table', the factories' default, or
  'exact'): the event carries the sampler's per-sample TV distance as a
  factory's event does (`distributed_discrete_gaussian.
  resolve_noise_sampler`). 'skellam': the keywords of 'ddg',
  local_stddev the standard deviation of each client's Skellam noise
  (variance local_stddev^2; TFF's `scaled_local_stddev`), the sampler
  resolved at the Poisson mean local_stddev^2 / 2
  (`distributed_skellam.resolve_noise_sampler`). 'cpbm': theta,
  num_trials, num_clients, dimension.
  """
  mechanism = checks.choice(mechanism, 'mechanism',
                            tuple(MECHANISM_PARAMETERS))
  _check_names(mechanism, params)
  if mechanism == 'gaussian':
    return dp_accounting.GaussianDpEvent(
        checks.positive(params['noise_multiplier'], 'noise_multiplier'))
  if mechanism in ('ddg', 'skellam'):
    n = checks.integer(params['num_clients'], 'num_clients', 1)
    l2 = checks.positive(params['l2_sensitivity'], 'l2_sensitivity')
    # The mechanism's own noise split and sampler choice (one home).
    from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism  # pylint: disable=g-import-not-at-top
    local = params.get('local_stddev')
    if local is None:
      local = ddg_mechanism.local_stddev(
          checks.positive(params['noise_multiplier'], 'noise_multiplier'),
          l2, n)
    dimension = checks.integer(params['dimension'], 'dimension', 1)
    l1 = checks.optional_positive(params.get('l1_sensitivity'),
                                  'l1_sensitivity')
    if mechanism == 'skellam':
      from tff_ddp.mechanisms import distributed_skellam as skellam_mechanism  # pylint: disable=g-import-not-at-top
      local = checks.positive(local, 'local_stddev')
      sampler = skellam_mechanism.resolve_noise_sampler(
          params.get('noise_sampler', 'table'), local * local / 2)
      return events.DistributedSkellamDpEvent(
          l2_sensitivity=l2, local_variance=local * local, num_clients=n,
          dimension=dimension, l1_sensitivity=l1,
          sampler_tv_distance=ddg_mechanism.sampler_tv_distance(sampler)
          or None)
    local = checks.real(local, 'local_stddev', low=0.5)
    sampler = ddg_mechanism.resolve_noise_sampler(
        params.get('noise_sampler', 'table'), local)
    return events.DistributedDiscreteGaussianDpEvent(
        l2_sensitivity=l2, local_stddev=local, num_clients=n,
        dimension=dimension, l1_sensitivity=l1,
        sampler_tv_distance=ddg_mechanism.sampler_tv_distance(sampler)
        or None)
  return events.PoissonBinomialDpEvent(
      theta=checks.real(params['theta'], 'theta', 0.0, 0.25, low_open=True),
      num_trials=checks.integer(params['num_trials'], 'num_trials', 1),
      num_clients=checks.integer(params['num_clients'], 'num_clients', 1),
      dimension=checks.integer(params['dimension'], 'dimension', 1))


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
  sampling = checks.choice(sampling, 'sampling', SAMPLINGS)
  if sampling in ('poisson', 'self'):
    if rate is None:
      if sample_size is None or population is None:
        raise ValueError(f'{sampling} sampling needs rate, or sample_size and '
                         'population.')
      population = checks.integer(population, 'population', 1)
      rate = checks.integer(sample_size, 'sample_size', 1,
                            population) / population
    rate = checks.probability(rate, 'rate')
    event = (dp_accounting.PoissonSampledDpEvent(rate, event)
             if sampling == 'poisson' else
             events.SelfSampledDpEvent(rate, event))
  elif sampling == 'without-replacement':
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


def _range(mechanism, parameter, params):
  """(lo, hi, eps_increases_with_x, discrete) for the free parameter."""
  if parameter == 'theta':
    return 2.0**-40, 0.25, True, False
  if parameter == 'num_trials':
    return 1, 2**31 - 1, True, True
  if mechanism == 'ddg' and parameter == 'local_stddev':
    return 0.5, math.inf, False, False
  if mechanism == 'ddg':  # noise_multiplier, local_stddev >= 1/2
    n = checks.integer(params['num_clients'], 'num_clients', 1)
    lo = 0.5 * math.sqrt(n) / checks.positive(params['l2_sensitivity'],
                                              'l2_sensitivity')
    return lo, math.inf, False, False
  return 1e-6, math.inf, False, False


def calibrate(
    mechanism: str,
    parameter: str,
    params: Dict[str, Any],
    target_epsilon: float,
    target_delta: float,
    rounds: int = 1,
    sampling: str = 'none',
    rate: Optional[float] = None,
    sample_size: Optional[int] = None,
    population: Optional[int] = None,
    orders: Optional[Sequence[float]] = None,
    adversary: str = 'server',
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
) -> CalibrationResult:
  """The least noise for `mechanism` that meets (target_epsilon, delta).

  Args:
    mechanism: 'gaussian', 'ddg' or 'cpbm'.
    parameter: the free parameter (table in the module docstring).
    params: the mechanism's other parameters, as for `mechanism_event`
      (l2_sensitivity, num_clients, dimension, ... ; the free one is ignored).
    target_epsilon: > 0.
    target_delta: in (0, 1).
    rounds, sampling, rate, sample_size, population: as for `rounds_event`.
    orders: RDP orders (default: `tff_ddp.accounting.orders`).
    adversary: 'server' (default) or 'release'.
    neighboring_relation: default ADD_OR_REMOVE_ONE (zero-out).

  Returns:
    A `CalibrationResult`.

  Raises:
    TypeError / ValueError: bad arguments, or no value in range meets the
      target (the message says what to change).
  """
  mechanism = checks.choice(mechanism, 'mechanism',
                            tuple(MECHANISM_PARAMETERS))
  parameter = checks.choice(parameter, f'parameter of {mechanism}',
                            MECHANISM_PARAMETERS[mechanism])
  target_epsilon = checks.positive(target_epsilon, 'target_epsilon')
  target_delta = checks.real(target_delta, 'target_delta', 0.0, 1.0,
                             low_open=True, high_open=True)
  adversary = checks.choice(adversary, 'adversary',
                            accountant_lib.ADVERSARIES)
  if not isinstance(params, collections.abc.Mapping):
    raise TypeError(f'params must be a mapping of the mechanism\'s other '
                    f'parameters, got {params!r} ({type(params).__name__}).')
  params = dict(params)
  params.pop(parameter, None)
  if mechanism in ('ddg', 'skellam'):
    params.pop('local_stddev' if parameter == 'noise_multiplier'
               else 'noise_multiplier', None)

  def make_event(x) -> dp_accounting.DpEvent:
    one = mechanism_event(mechanism, **{**params, parameter: x})
    return rounds_event(one, rounds, sampling, rate, sample_size, population)

  def eps(x) -> float:
    return accountant_lib.epsilon(make_event(x), target_delta, adversary,
                                  neighboring_relation, orders)[0]

  # Names first (a clear TypeError, not a KeyError from the range).
  _check_names(mechanism, {**params, parameter: 1.0},
               f'params (with {parameter}) of {mechanism!r}')
  lo, hi, increasing, discrete = _range(mechanism, parameter, params)
  make_event(hi if increasing else max(lo, 1.0) * 2.0)  # argument errors now
  value, at_limit = least_noise(eps, lo, hi, increasing, target_epsilon,
                                discrete=discrete, name=parameter)
  event = make_event(value)
  epsilon, order = accountant_lib.epsilon(event, target_delta, adversary,
                                          neighboring_relation, orders)
  return CalibrationResult(
      mechanism=mechanism, parameter=parameter, value=value, epsilon=epsilon,
      order=order, target_epsilon=target_epsilon, target_delta=target_delta,
      at_limit=at_limit, event=event,
      neighboring_relation=neighboring_relation, adversary=adversary)


def least_noise(
    eps: Callable[[float], float],
    lo: float,
    hi: float,
    increasing: bool,
    target_epsilon: float,
    discrete: bool = False,
    name: str = 'parameter',
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

  Returns:
    (x, at_limit): eps(x) <= target_epsilon always; within 0.1% of the
    target for continuous x strictly inside the range; at_limit says that x
    is a range end where the target is not binding, or integral.

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
    if eps(hi) <= target_epsilon:
      return hi, True
    safe, unsafe = lo, hi
  else:
    unsafe = lo
    if eps(unsafe) <= target_epsilon:
      return unsafe, True
    safe = max(2.0 * unsafe, 1.0)
    while eps(safe) > target_epsilon:
      unsafe, safe = safe, safe * 4.0
      if safe > _MAX_NOISE:
        raise ValueError(
            f'target_epsilon={target_epsilon:g} is unreachable: even '
            f'{name}={_MAX_NOISE:g} gives epsilon {eps(safe):.4g} (a '
            'configuration whose epsilon does not fall with the noise, e.g. '
            'a non-private event, or rounding-dominated sensitivity).')

  if discrete:
    safe, unsafe = int(safe), int(unsafe)
    while abs(unsafe - safe) > 1:
      mid = (safe + unsafe) // 2
      if eps(mid) <= target_epsilon:
        safe = mid
      else:
        unsafe = mid
    return safe, True

  def gap(x):
    # Capped so that inf (a refused configuration) keeps brentq's bracket.
    return min(eps(x), 2.0 * target_epsilon) - target_epsilon

  root = optimize.brentq(gap, min(safe, unsafe), max(safe, unsafe),
                         xtol=1e-12, rtol=1e-10)
  # brentq may land just past the root: step back towards `safe` by
  # geometrically growing amounts, then bisect [safe, unsafe] until eps is
  # within 0.1% below the target.
  e = eps(root)
  if e <= target_epsilon:
    safe, e_safe = root, e
  else:
    unsafe = root
    step = 1e-12 * abs(safe - root)
    while True:
      x = root + math.copysign(step, safe - root)
      if (x - safe) * (root - safe) <= 0:  # Overshot: `safe` itself.
        x = safe
      e = eps(x)
      if e <= target_epsilon:
        safe, e_safe = x, e
        break
      unsafe, step = x, step * 4.0
  for _ in range(200):
    if e_safe >= (1 - 1e-3) * target_epsilon:
      break
    x = 0.5 * (safe + unsafe)
    e = eps(x)
    if e <= target_epsilon:
      safe, e_safe = x, e
    else:
      unsafe = x
  return safe, False


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
  bad, good = lo, hi
  while good - bad > 1e-4 * good:
    mid = 0.5 * (bad + good)
    if reachable(mid):
      good = mid
    else:
      bad = mid
  return good


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
  `CalibratedFactory` and its event. The scale s is the largest for which
  the composition of the k events has eps <= target_epsilon at
  target_delta (RDP composition is sub-additive in practice, so s is
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
  target_delta = checks.real(target_delta, 'target_delta', 0.0, 1.0,
                             low_open=True, high_open=True)
  adversary = checks.choice(adversary, 'adversary',
                            accountant_lib.ADVERSARIES)
  shares = [w / sum(weights) for w in weights]
  cache = {}

  def parts(scale):
    key = float(scale)
    if key not in cache:
      out = [c(scale * share) for c, share in zip(calibrators, shares)]
      event = dp_accounting.ComposedDpEvent([e for _, e in out])
      eps = accountant_lib.epsilon(event, target_delta, adversary,
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
  scale, at_limit = least_noise(eps, lo, hi, True, target_epsilon,
                                name='the budget scale')
  out, event, epsilon = parts(scale)
  standalone = tuple(
      accountant_lib.epsilon(e, target_delta, adversary,
                             neighboring_relation, orders)[0]
      for _, e in out)
  return SplitBudget(
      results=tuple(r for r, _ in out), events=tuple(e for _, e in out),
      standalone_epsilons=standalone, scale=scale, epsilon=epsilon,
      delta=target_delta, event=event, at_limit=at_limit,
      adversary=adversary, neighboring_relation=neighboring_relation)
