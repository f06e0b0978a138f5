"""Aggregation factories calibrated to a target (epsilon, delta).

`tff_ddp.accounting.calibrate` works on the mechanisms' own parameters (the
scaled local stddev of the DDG, say). A user of an aggregator has a value
type, a number of rounds and a budget, and wants the factory. Here the free
parameter is the factory's (the noise multiplier of
`DiscreteGaussianSumFactory`, theta or num_trials of
`PoissonBinomialSumFactory`) and the event accounted is exactly the one the
factory hands out for the value type, so every dependency of the event on
the parameter (the DDG's scale 1/gamma and rounding-inflated sensitivity both
move with the noise multiplier) is included.

    >>> result = calibrated.discrete_gaussian(
    ...     value_type, target_epsilon=2.0, target_delta=1e-5, rounds=100,
    ...     sampling='poisson', rate=0.01, adversary='server',
    ...     expected_clients_per_round=100, bits=16, l2_clip=1.0)

The result never exceeds the target (see `calibration.calibrate`), for
zero-out neighbours and the named adversary ('server' by default: it sees
the cohorts it samples, so 'poisson' and 'without-replacement' buy only the
known-sample mixture against it; the factory's own `client_sampling_rate`
is amplified against every adversary -- see
`tff_ddp.accounting.accountant`).
"""

import dataclasses
from typing import Any

from tff_ddp.accounting import calibration
from tff_ddp.accounting import pld_accountant
from tff_ddp.aggregators import discrete_gaussian as ddg_factory
from tff_ddp.aggregators import poisson_binomial as pbm_factory
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import poisson_binomial as pbm_mechanism
from tff_ddp.utils import checks


@dataclasses.dataclass(frozen=True)
class CalibratedFactory:
  """A calibrated factory and what it costs.

  Attributes:
    factory: the aggregation factory.
    parameter: name of the calibrated argument.
    value: its value.
    epsilon: eps of all `rounds` rounds at `delta` (<= the target).
    delta: the target delta.
    order: RDP order attaining `epsilon`.
    at_limit: see `calibration.calibrate`.
    event: the DpEvent of all rounds.
    adversary: the adversary `epsilon` holds against.
  """

  factory: Any
  parameter: str
  value: float
  epsilon: float
  delta: float
  order: float
  at_limit: bool
  event: Any
  adversary: str = 'server'


def _calibrate(make_factory, value_type, parameter, target_epsilon,
               target_delta, schedule, adversary) -> CalibratedFactory:
  """`calibration.calibrate` over the factory's own event: x ->
  schedule.of(make_factory(x).dp_event(value_type))."""
  # Argument errors of the factory surface now.
  make_factory(parameter.high if parameter.epsilon_increases else 1.0)
  result = calibration.calibrate(
      lambda: pld_accountant.tightest(adversary=adversary),
      lambda x: schedule.of(make_factory(x).dp_event(value_type)),
      target_epsilon, target_delta, parameter)
  return CalibratedFactory(factory=make_factory(result.value),
                           parameter=parameter.name,
                           value=result.value,
                           epsilon=result.epsilon,
                           delta=result.target_delta,
                           order=result.order,
                           at_limit=result.at_limit,
                           event=result.event,
                           adversary=result.adversary)


# The DDG factory's calibrated parameter (its least value searched).
_NOISE_MULTIPLIER = calibration.Parameter.noise('noise_multiplier', 1e-3)


def _theta_range(factory_kwargs):
  """cPBM's theta: [2^-40, 1/4]."""
  del factory_kwargs
  return calibration.Parameter.signal('theta', pbm_mechanism.MIN_THETA,
                                      pbm_mechanism.MAX_THETA)


def _num_trials_range(factory_kwargs):
  """cPBM's num_trials: from 1 to what the ring and the sampler hold."""
  clients = checks.integer(
      factory_kwargs.get('max_clients_per_round') or
      factory_kwargs.get('expected_clients_per_round', 1),
      'expected_clients_per_round', 1, base.MAX_MODULUS - 1)
  return calibration.Parameter.signal(
      'num_trials',
      1,
      max(1, pbm_mechanism.max_num_trials(clients)),
      discrete=True)


def discrete_gaussian(
    value_type,
    target_epsilon: float,
    target_delta: float,
    rounds=1,
    adversary: str = 'server',
    **kwargs,
) -> CalibratedFactory:
  """The DDG factory with the least noise multiplier meeting the target.

  Args:
    value_type: the values the factory will aggregate.
    target_epsilon, target_delta: the budget for all rounds.
    rounds: the number of rounds, or a `calibration.Rounds` (with their
      sampling).
    adversary: 'server' (default) or 'release', as for
      `tff_ddp.accounting.RdpAccountant`.
    **kwargs: the rounds' sampling (sampling, rate, sample_size,
      population: as for `calibration.rounds_event`) and every other
      `DiscreteGaussianSumFactory.from_tff_arguments` argument
      (expected_clients_per_round, bits, l2_clip, ...), not
      noise_multiplier.

  Raises:
    ValueError: bad arguments, or no noise multiplier fits in `bits` and
      meets the target (raise bits or the budget).
  """
  schedule, factory_kwargs = calibration.Rounds.split(rounds, kwargs)
  if _NOISE_MULTIPLIER.name in factory_kwargs:
    raise ValueError('noise_multiplier is what is calibrated; do not pass it.')

  def make(z):
    return ddg_factory.DiscreteGaussianSumFactory.from_tff_arguments(
        noise_multiplier=z, **factory_kwargs)

  return _calibrate(make, value_type, _NOISE_MULTIPLIER, target_epsilon,
                    target_delta, schedule, adversary)


def poisson_binomial(
    value_type,
    target_epsilon: float,
    target_delta: float,
    parameter: str = 'theta',
    rounds=1,
    adversary: str = 'server',
    **kwargs,
) -> CalibratedFactory:
  """The cPBM factory with the largest theta (or num_trials) meeting the target.

  Args:
    value_type: the values the factory will aggregate.
    target_epsilon, target_delta: the budget for all rounds.
    parameter: 'theta' (in (0, 1/4], num_trials given) or 'num_trials'
      (integer >= 1, theta given).
    rounds, adversary: as for `discrete_gaussian`.
    **kwargs: the rounds' sampling, as for `discrete_gaussian`, and every
      other `PoissonBinomialSumFactory` argument.

  Raises:
    ValueError: bad arguments or an unreachable target.
  """
  schedule, factory_kwargs = calibration.Rounds.split(rounds, kwargs)
  ranges = {'theta': _theta_range, 'num_trials': _num_trials_range}
  parameter = checks.choice(parameter, 'parameter', tuple(ranges))
  if parameter in factory_kwargs:
    raise ValueError(f'{parameter} is what is calibrated; do not pass it.')

  def make(x):
    return pbm_factory.PoissonBinomialSumFactory(**{parameter: x},
                                                 **factory_kwargs)

  searched = ranges[parameter](factory_kwargs)
  return _calibrate(make, value_type, searched, target_epsilon, target_delta,
                    schedule, adversary)
