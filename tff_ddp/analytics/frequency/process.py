"""Federated frequency estimation processes: TFFE, MFFE, fixed clip, baselines.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): Algorithms 1-3 (cPBM over Kashin's representation),
Section 3.3 (OcPBM: clip at the eq. 5 quantile), Algorithms 4-6 (TFFE: the
quantile by the Haar histogram, then OcPBM), Algorithm 7 and App. D (MFFE),
Section 5.2 (baselines). The public entry points: `frequency_parameters(
protocol, ...)` and `build_frequency_process(protocol=...)` for 'two_phase',
'multi_round', 'fixed', 'normalize', 'sample' (PROTOCOLS, NEIGHBOURS);
the math is `frequency.clipping`, the protocols `two_phase`, `multi_round`
and `single_release` (their shared pieces `setting`).

The protocols, the neighbouring relation, the accounting (`disjoint_rounds`)
and what a round releases: docs/notes/frequency_protocols.md.
"""

import dataclasses
import inspect
from typing import Any, Dict

import tensorflow_federated as tff

from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics import budget
from tff_ddp.analytics.frequency import setting as setting_lib
# The protocols' modules in the order of PROTOCOLS (each class registers
# its name when defined).
from tff_ddp.analytics.frequency import two_phase
from tff_ddp.analytics.frequency import multi_round
from tff_ddp.analytics.frequency import single_release  # pylint: disable=unused-import  # registers the protocols

FrequencyParameters = setting_lib.FrequencyParameters
TwoPhaseComputations = two_phase.TwoPhaseComputations
protocol_class = setting_lib.protocol_class
norm_message = two_phase.norm_message
indicator_message = multi_round.indicator_message
NEIGHBOURS = setting_lib.NEIGHBOURS
DTYPES = setting_lib.DTYPES
DEFAULT_NUM_TRIALS = setting_lib.DEFAULT_NUM_TRIALS
DEFAULT_BUDGET_FRACTION = setting_lib.DEFAULT_BUDGET_FRACTION
CLIP_RANGE = setting_lib.CLIP_RANGE
MAX_LEARNING_RATE = multi_round.MAX_LEARNING_RATE
PROTOCOLS = setting_lib.protocol_names()
# frequency_parameters' arguments that make the `FrequencySetting` (the
# calibration's three make its `calibration`).
_CALIBRATION_ARGUMENTS = ('calibrate', 'num_trials', 'theta')
_SETTING_ARGUMENTS = ('divisor', 'adversary', 'value_dtype', 'seed',
                      'kashin_options')


def frequency_parameters(protocol: str, dim: int,
                         expected_clients_per_round: int, epsilon: float,
                         delta: float, **options) -> FrequencyParameters:
  """Calibrates a frequency protocol to (epsilon, delta) (module docstring).

  The protocol's name is mapped to its class (`protocol_class`) and the
  class's builder, `calibrate`, gets the arguments that apply to it; the
  result is that class (`TwoPhaseParameters`, ...; all
  `FrequencyParameters`).

  Args:
    protocol: one of PROTOCOLS.
    dim, expected_clients_per_round, epsilon, delta: of the
      `FrequencySetting` (see it), with **options' divisor, adversary,
      value_dtype, seed and kashin_options.
    **options: also `calibrate` ('theta', default: the largest theta <= 1/4
      that meets the budget for the given m, `CalibrateTheta`; or
      'num_trials': the most trials for the given theta,
      `CalibrateNumTrials`) with `num_trials` (m, default 30) or `theta`;
      and the protocol's own arguments, those of its class's `calibrate`:
      'two_phase': max_items, num_bins, quantile_num_trials,
      budget_fraction, target_quantile; 'multi_round': rounds, clip,
      total_clients, disjoint_rounds, learning_rate, indicator_num_trials,
      budget_fraction, target_quantile; 'fixed': clip; 'sample':
      sample_items. Another protocol's argument is a ValueError naming the
      protocols it applies to, unless it is None (not given).

  Warns:
    budget.UnderspentBudgetWarning: the result spends less than the epsilon
      given because theta stopped at 1/4; it names the calibration that
      spends it (`tff_ddp.analytics.budget`). The result is unchanged.

  Raises:
    TypeError / ValueError: bad arguments, or a target the accountant
      cannot meet (the message says why).
  """
  parameters_class = setting_lib.protocol_class(protocol)
  calibration = setting_lib.calibration_from_arguments(
      **{k: options.pop(k) for k in _CALIBRATION_ARGUMENTS if k in options})
  setting = setting_lib.FrequencySetting(
      dim, expected_clients_per_round, epsilon, delta, calibration,
      **{k: options.pop(k) for k in _SETTING_ARGUMENTS if k in options})
  arguments = _protocol_arguments(parameters_class, options)
  params = parameters_class.calibrate(setting, **arguments)
  budget.warn_if_underspent(
      params, setting, lambda: parameters_class.calibrate(
          dataclasses.replace(setting,
                              calibration=setting_lib.CalibrateNumTrials(
                                  budget.MAX_THETA)), **arguments),
      f'frequency_parameters({protocol!r}, ...)')
  return params


def _builder_arguments(parameters_class) -> Dict[str, Any]:
  """{name: default} of the arguments a protocol's builder takes beside the
  setting; a required one's default is None."""
  parameters = inspect.signature(parameters_class.calibrate).parameters
  return {
      name: None if p.default is p.empty else p.default
      for name, p in parameters.items()
      if p.kind is p.KEYWORD_ONLY
  }


def _protocol_arguments(parameters_class, options) -> Dict[str, Any]:
  """The options for `parameters_class.calibrate`.

  None means "not given" for an argument whose default is None and for
  another protocol's argument; any other value of another protocol's
  argument is refused naming the protocols it applies to, and an argument
  of no protocol is Python's TypeError.
  """
  own = _builder_arguments(parameters_class)
  for name, value in options.items():
    if name in own:
      continue
    applies = tuple(c.protocol
                    for c in setting_lib.protocol_classes()
                    if name in _builder_arguments(c))
    if not applies:
      raise TypeError('frequency_parameters() got an unexpected keyword '
                      f'argument {name!r}')
    if value is None:
      continue
    raise ValueError(f'{name} does not apply to protocol='
                     f'{parameters_class.protocol!r} (only to {applies}).')
  kept = {
      name: value
      for name, value in options.items()
      if name in own and not (value is None and own[name] is None)
  }
  signature = inspect.signature(parameters_class.calibrate).parameters
  for name in own:
    if signature[name].default is signature[name].empty and (name not in kept):
      raise ValueError(
          f'protocol={parameters_class.protocol!r} needs {name} (see '
          f'{parameters_class.__name__}.calibrate).')
  return kept


def build_frequency_process(protocol: str,
                            dim: int,
                            expected_clients_per_round: int,
                            epsilon: float,
                            delta: float,
                            *,
                            on_wrap: str = 'raise',
                            **kwargs) -> tff.templates.MeasuredProcess:
  """A frequency-estimation process calibrated to (epsilon, delta).

  Arguments as for `frequency_parameters`, and `on_wrap` ('raise' or
  'flag': a round with more clients than the rings hold;
  docs/notes/frequency_protocols.md, section on process.py, "Rounds the
  process does not answer normally"). `next(state, x)` with x one
  `value_dtype` [d] vector per client returns the estimate of sum_i x_i
  (float64 [d]; 'multi_round': of all rounds so far) and the measurements
  of docs/notes/frequency_protocols.md, section on process.py, "What a
  round releases". See `build_frequency_process_from_parameters`.
  """
  on_wrap = secure_sum.check_on_wrap(on_wrap)
  return build_frequency_process_from_parameters(frequency_parameters(
      protocol, dim, expected_clients_per_round, epsilon, delta, **kwargs),
                                                 on_wrap=on_wrap)


def build_frequency_process_from_parameters(
    params: FrequencyParameters,
    *,
    on_wrap: str = 'raise') -> tff.templates.MeasuredProcess:
  """The process of calibrated `params` (module docstring; `on_wrap` as
  for `build_frequency_process`): `params.build_process`."""
  if not isinstance(params, FrequencyParameters):
    raise TypeError('params must be FrequencyParameters (from '
                    f'frequency_parameters), got {type(params).__name__}.')
  return params.build_process(secure_sum.check_on_wrap(on_wrap))


def two_phase_computations(params: FrequencyParameters,
                           *,
                           on_wrap: str = 'raise') -> TwoPhaseComputations:
  """TFFE as two federated computations, and their composition.

  * initialize() -> state (SERVER): OrderedDict(quantile, frequency).
  * estimate_clip(state, x) -> (quantile state, clip, measurements):
    phase 1 (one secure sum).
  * estimate_frequencies(frequency state, x, clip) -> (frequency state,
    estimate, measurements): phase 2 (one secure sum).
  * next(state, x): both, as the process's `next`.

  Running the phases separately is the same protocol when the frequency
  state is unchanged in between (the phase-1 norms use the frame of the
  frequency aggregator's coming round). Each phase refuses (on_wrap=
  'raise') or flags a round with more clients than the rings hold; their
  Python calls raise `RoundRefusedError` and return statuses as str.
  """
  if not isinstance(params, two_phase.TwoPhaseParameters):
    raise ValueError('two_phase_computations needs the parameters of '
                     f'protocol={two_phase.TwoPhaseParameters.protocol!r}.')
  return two_phase.two_phase_computations(params,
                                          secure_sum.check_on_wrap(on_wrap))


def describe(params: FrequencyParameters) -> str:
  """One line: the protocol, its parameters and its epsilon (adversary)."""
  return params.describe()
