"""Calibrate one noise parameter of a mechanism to a target (eps, delta).

`calibrate` takes a mechanism name, its fixed parameters, the free parameter,
rounds, sampling scheme and target, and returns the least noise that meets
the target, found by bracketed root finding (scipy's brentq on
eps(x) - target, then a step onto the safe side), as a `CalibrationResult`.

Free parameters and their direction ("least noise"):

| mechanism | parameter        | eps grows when it | range           |
|-----------|------------------|-------------------|-----------------|
| gaussian  | noise_multiplier | decreases         | (0, inf)        |
| ddg       | local_stddev     | decreases         | [1/2, inf)      |
| ddg       | noise_multiplier | decreases         | local_stddev = z l2 / sqrt(n) >= 1/2 |
| cpbm      | theta            | increases         | (0, 1/4]        |
| cpbm      | num_trials       | increases         | integers >= 1   |

Guarantee: the returned eps never exceeds the target. For continuous
parameters whose optimum lies strictly inside the range, it is within 1% of
the target (we stop at 0.1%). At a range end (theta = 1/4 already meets the
target) or for the integer num_trials, eps can be further below; the result
says which (`at_limit`).

Sampling: 'none', 'poisson' (rate q; zero-out, ADD_OR_REMOVE_ONE accountant)
or 'without-replacement' (sample_size of population; REPLACE_ONE); see
accountant.py for what each number means.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, Optional, Sequence

import dp_accounting
from scipy import optimize

from tff_ddp.accounting import accountant as accountant_lib
from tff_ddp.accounting import events

MECHANISM_PARAMETERS = {
    'gaussian': ('noise_multiplier',),
    'ddg': ('local_stddev', 'noise_multiplier'),
    'cpbm': ('theta', 'num_trials'),
}
SAMPLINGS = ('none', 'poisson', 'without-replacement')


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


def mechanism_event(mechanism: str, **params) -> dp_accounting.DpEvent:
  """One unsampled release of `mechanism` with keyword `params`."""
  if mechanism == 'gaussian':
    return dp_accounting.GaussianDpEvent(params['noise_multiplier'])
  if mechanism == 'ddg':
    local = params.get('local_stddev')
    if local is None:
      local = (params['noise_multiplier'] * params['l2_sensitivity']
               / math.sqrt(params['num_clients']))
    return events.DistributedDiscreteGaussianDpEvent(
        l2_sensitivity=params['l2_sensitivity'], local_stddev=local,
        num_clients=params['num_clients'], dimension=params['dimension'],
        l1_sensitivity=params.get('l1_sensitivity'))
  if mechanism == 'cpbm':
    return events.PoissonBinomialDpEvent(
        theta=params['theta'], num_trials=params['num_trials'],
        num_clients=params['num_clients'], dimension=params['dimension'])
  raise ValueError(f'mechanism must be one of {sorted(MECHANISM_PARAMETERS)}, '
                   f'got {mechanism!r}.')


def rounds_event(
    event: dp_accounting.DpEvent,
    rounds: int = 1,
    sampling: str = 'none',
    rate: Optional[float] = None,
    sample_size: Optional[int] = None,
    population: Optional[int] = None,
) -> dp_accounting.DpEvent:
  """`rounds` compositions of `event` under the given sampling scheme.

  'poisson' takes `rate`, or `sample_size` / `population`;
  'without-replacement' takes `sample_size` and `population`.
  """
  if int(rounds) != rounds or rounds < 1:
    raise ValueError(f'rounds must be an integer >= 1, got {rounds}.')
  if sampling == 'poisson':
    if rate is None:
      if not sample_size or not population:
        raise ValueError('poisson sampling needs rate, or sample_size and '
                         'population.')
      rate = sample_size / population
    if not 0 < rate <= 1:
      raise ValueError(f'rate must be in (0, 1], got {rate}.')
    event = dp_accounting.PoissonSampledDpEvent(rate, event)
  elif sampling == 'without-replacement':
    if (not sample_size or not population
        or not 1 <= sample_size <= population):
      raise ValueError(
          'without-replacement sampling needs 1 <= sample_size <= population,'
          f' got {sample_size} of {population}.')
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population, sample_size, event)
  elif sampling != 'none':
    raise ValueError(f'sampling must be one of {SAMPLINGS}, got {sampling!r}.')
  if rounds > 1:
    event = dp_accounting.SelfComposedDpEvent(event, int(rounds))
  return event


def relation_for(sampling: str) -> dp_accounting.NeighboringRelation:
  """The accountant relation a sampling scheme needs (see accountant.py)."""
  if sampling == 'without-replacement':
    return dp_accounting.NeighboringRelation.REPLACE_ONE
  return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def epsilon_of(
    event: dp_accounting.DpEvent, target_delta: float,
    relation: dp_accounting.NeighboringRelation =
    dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    orders: Optional[Sequence[float]] = None,
):
  """(eps, order) of `event` at `target_delta` with our RdpAccountant."""
  acc = accountant_lib.RdpAccountant(orders, relation)
  acc.compose(event)
  eps, order = acc.get_epsilon_and_optimal_order(target_delta)
  return float(eps), float(order)


def _range(mechanism, parameter, params):
  """(lo, hi, eps_increases_with_x, discrete) for the free parameter."""
  if parameter == 'theta':
    return 1e-9, 0.25, True, False
  if parameter == 'num_trials':
    return 1, 2**31 - 1, True, True
  if mechanism == 'ddg' and parameter == 'local_stddev':
    return 0.5, math.inf, False, False
  if mechanism == 'ddg':  # noise_multiplier, local_stddev >= 1/2
    lo = 0.5 * math.sqrt(params['num_clients']) / params['l2_sensitivity']
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
    orders: RDP orders; dp-accounting's defaults if None.

  Returns:
    A `CalibrationResult`.

  Raises:
    ValueError: on bad arguments, or if no value in range meets the target.
  """
  if mechanism not in MECHANISM_PARAMETERS:
    raise ValueError(f'mechanism must be one of '
                     f'{sorted(MECHANISM_PARAMETERS)}, got {mechanism!r}.')
  if parameter not in MECHANISM_PARAMETERS[mechanism]:
    raise ValueError(f'parameter of {mechanism} must be one of '
                     f'{MECHANISM_PARAMETERS[mechanism]}, got {parameter!r}.')
  if not 0 < target_epsilon < math.inf:
    raise ValueError(
        f'target_epsilon must be a finite number > 0, got {target_epsilon}.')
  if not 0 < target_delta < 1:
    raise ValueError(f'target_delta must be in (0, 1), got {target_delta}.')
  relation = relation_for(sampling)
  params = dict(params)
  if mechanism == 'ddg':
    params.pop('local_stddev' if parameter == 'noise_multiplier'
               else 'noise_multiplier', None)

  def make_event(x) -> dp_accounting.DpEvent:
    one = mechanism_event(mechanism, **{**params, parameter: x})
    return rounds_event(one, rounds, sampling, rate, sample_size, population)

  def eps(x) -> float:
    return epsilon_of(make_event(x), target_delta, relation, orders)[0]

  lo, hi, increasing, discrete = _range(mechanism, parameter, params)
  value, at_limit = least_noise(eps, lo, hi, increasing, target_epsilon,
                                discrete=discrete, name=parameter)
  return _result(mechanism, parameter, value, make_event, target_epsilon,
                 target_delta, relation, orders, at_limit=at_limit)


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
    ValueError: if no x in range meets the target.
  """
  # safe(x): eps(x) <= target. Larger x is safer iff eps decreases in x.
  if increasing:
    if eps(lo) > target_epsilon:
      raise ValueError(
          f'{name}={lo} (its smallest value) gives eps={eps(lo):.4g} > '
          f'target {target_epsilon}; the target is unreachable.')
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
      if safe > 1e12:
        raise ValueError(f'no {name} <= 1e12 meets the target.')

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
    e = eps(x)
    return min(e, 1e6) - target_epsilon

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


def _result(mechanism, parameter, value, make_event, target_epsilon,
            target_delta, relation, orders, at_limit):
  event = make_event(value)
  eps, order = epsilon_of(event, target_delta, relation, orders)
  return CalibrationResult(
      mechanism=mechanism, parameter=parameter, value=value, epsilon=eps,
      order=order, target_epsilon=target_epsilon, target_delta=target_delta,
      at_limit=at_limit, event=event, neighboring_relation=relation)
