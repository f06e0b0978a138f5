"""Federated frequency estimation processes: TFFE, MFFE, fixed clip, baselines.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): Algorithms 1-3 (cPBM over Kashin's representation),
Section 3.3 (OcPBM: clip at the eq. 5 quantile), Algorithms 4-6 (TFFE: the
quantile by the Haar histogram, then OcPBM), Algorithm 7 and App. D (MFFE),
Section 5.2 (baselines). The math is `tff_ddp.analytics.frequency`; the
protocols are classes of `frequency_protocols` (one per protocol, with its
builder `calibrate`), their TFF computations `frequency_computations`.
Budgets are calibrated by `tff_ddp.aggregators.calibrated` and split by
`tff_ddp.accounting.calibration.split_budget`; every event is the
aggregators' own, composed.

This module is the public entry point: `frequency_parameters(protocol,
...)` maps the protocol's name to its class once (PROTOCOLS) and calls the
class's builder with the arguments that apply to it; the class travels
from there. Protocols (`build_frequency_process(protocol=...)`):

* 'two_phase' (TFFE, Algorithm 6; `TwoPhaseParameters`): the clip C-hat
  from a private quantile of the clients' representation norms, then
  OcPBM, in one `next`. `two_phase_computations` gives the two phases as
  separate computations (the CLI runs them one after the other to report
  progress per phase).
* 'multi_round' (MFFE, Algorithm 7 and App. D; `MultiRoundParameters`):
  each `next(state, x)` is one round on a batch of clients with the current
  clip, updated from a private indicator; the result is the running
  estimate of sum_i x_i over all rounds so far.
* 'fixed' (`FixedClipParameters`): cPBM with the given clip C (Algorithm 3
  as published).
* 'normalize', 'sample' (`NormalizeParameters`, `SampleParameters`): the
  Table 2 baselines on the same aggregator (see `tff_ddp.analytics.
  frequency`): x / ||x||_2 with C = 1; k items drawn without replacement
  (private client randomness) with C = k. C_median is 'two_phase' with
  target_quantile=0.5; the central and local Gaussian baselines need a
  trusted server or no secure sum and are simulated
  (`frequency_simulation`).

Neighbouring relation (`NEIGHBOURS`): one user's data removed -- the user
still takes part in the secure sums (participation is public by protocol),
holds no items (x = 0) and its noise shares stay in the sums. "No data"
sends the zero message of every release: zeros to the frequency cPBM
(x / C = 0), no bin in phase 1 (norm NaN), indicator 0. So every pair
(a user's messages, no data) is a zero-out pair of each release, and the
zero-out curve of each event (`tff_ddp.accounting.pbm_rdp`) is exact for
it -- checked by brute force over every message on small inputs
(tff_ddp_tests/analytics/neighbour_test.py). (Before, no data sent -1 to
the indicator and bin 0 to phase 1: replace-one pairs costed as zero-out.)

Accounting. Every epsilon is against the named adversary ('server' by
default: it runs the protocol, sees who takes part and the secure sums'
outputs), for that relation. 'two_phase' and the single-release protocols
cover one `next` (`within_budget` turns False after it). 'multi_round'
states its assumption with `disjoint_rounds`:

* False (the default): users may take part in several rounds; the
  budget covers R rounds composed (`rounds` times the round's event).
* True (opt-in; the paper's, App. D): every user takes part in one round only, the
  batches are fixed independently of the data, and the server does not
  learn more than the secure sums' outputs and who took part. A user's
  data then enters one round's release; later rounds depend on it only
  through that round's output (C^(r+1) is computed from it), which is
  post-processing together with other users' independent releases, so the
  whole run is as private as one round (parallel composition, adaptive
  version; the tests check it by brute force on small cases). The budget
  is spent per round -- and covers the R rounds only because nobody comes
  back. A user in two rounds voids it, and the library cannot check it.

Either way each round's measurements carry that round's event, so an
accountant of the actual participation can compose them.

What a round releases: the estimate and the clip (functions of the noisy
sums and of public configuration), the sub-processes' measurements
(configuration, the public client counts, the noisy quantile CDF, their
events), the top-level `dp_event` of the round, `within_budget`, `status`
(from the public count and the configuration). Nothing per client.

Rounds the process does not answer normally (`status`, one of
`quantiles.STATUSES`; a str from a Python call of `next`):

* more clients than the secure sums hold (`FrequencyParameters.
  ring_capacity()`: the rings are sized for expected_clients_per_round):
  with on_wrap='raise' (the default) `next` raises
  `tff_ddp.utils.rounds.RoundRefusedError` (state untouched) saying to
  raise expected_clients_per_round; with on_wrap='flag' the estimate is
  returned with status 'sum_may_wrap' (never 'ok');
* no clients: status 'no_clients' (the estimate is the noise-free zero);
* non-finite client values: the client sends the zero message of every
  release, its "no data" (counted in the public n, in no bin, indicator
  0). How many did so is not released. A round in which no valid client
  remains shows it only through noised quantities: TFFE's phase-1 quantile
  then reports 'too_few_values' from its noisy total (and the clip falls
  back to B, `clip_fallback`); the single-release protocols and MFFE
  release no count of valid clients (their estimate is then noise).
"""

import dataclasses
import inspect
from typing import Any, Dict

import tensorflow_federated as tff

from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics import budget
from tff_ddp.analytics import frequency_computations as computations
from tff_ddp.analytics import frequency_protocols as protocols

FrequencyParameters = protocols.FrequencyParameters
TwoPhaseComputations = computations.TwoPhaseComputations
protocol_class = protocols.protocol_class
norm_message = computations.norm_message
indicator_message = computations.indicator_message
NEIGHBOURS = protocols.NEIGHBOURS
DTYPES = protocols.DTYPES
DEFAULT_NUM_TRIALS = protocols.DEFAULT_NUM_TRIALS
DEFAULT_BUDGET_FRACTION = protocols.DEFAULT_BUDGET_FRACTION
CLIP_RANGE = protocols.CLIP_RANGE
MAX_LEARNING_RATE = protocols.MAX_LEARNING_RATE
PROTOCOLS = protocols.protocol_names()
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
  parameters_class = protocols.protocol_class(protocol)
  calibration = protocols.calibration_from_arguments(
      **{k: options.pop(k) for k in _CALIBRATION_ARGUMENTS if k in options})
  setting = protocols.FrequencySetting(
      dim, expected_clients_per_round, epsilon, delta, calibration,
      **{k: options.pop(k) for k in _SETTING_ARGUMENTS if k in options})
  arguments = _protocol_arguments(parameters_class, options)
  params = parameters_class.calibrate(setting, **arguments)
  budget.warn_if_underspent(
      params, setting,
      lambda: parameters_class.calibrate(dataclasses.replace(
          setting, calibration=protocols.CalibrateNumTrials(budget.MAX_THETA)),
                                         **arguments),
      f'frequency_parameters({protocol!r}, ...)')
  return params


def _builder_arguments(parameters_class) -> Dict[str, Any]:
  """{name: default} of the arguments a protocol's builder takes beside the
  setting; a required one's default is None."""
  parameters = inspect.signature(parameters_class.calibrate).parameters
  return {name: None if p.default is p.empty else p.default
          for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY}


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
    applies = tuple(c.protocol for c in protocols.protocol_classes()
                    if name in _builder_arguments(c))
    if not applies:
      raise TypeError('frequency_parameters() got an unexpected keyword '
                      f'argument {name!r}')
    if value is None:
      continue
    raise ValueError(f'{name} does not apply to protocol='
                     f'{parameters_class.protocol!r} (only to {applies}).')
  kept = {name: value for name, value in options.items()
          if name in own and not (value is None and own[name] is None)}
  signature = inspect.signature(parameters_class.calibrate).parameters
  for name in own:
    if signature[name].default is signature[name].empty and (
        name not in kept):
      raise ValueError(
          f'protocol={parameters_class.protocol!r} needs {name} (see '
          f'{parameters_class.__name__}.calibrate).')
  return kept


def build_frequency_process(protocol: str, dim: int,
                            expected_clients_per_round: int, epsilon: float,
                            delta: float, *, on_wrap: str = 'raise',
                            **kwargs) -> tff.templates.MeasuredProcess:
  """A frequency-estimation process calibrated to (epsilon, delta).

  Arguments as for `frequency_parameters`, and `on_wrap` ('raise' or
  'flag': a round with more clients than the rings hold; module
  docstring). `next(state, x)` with x one `value_dtype` [d] vector per
  client returns the estimate of sum_i x_i (float64 [d]; 'multi_round': of
  all rounds so far) and the measurements of the module docstring. See
  `build_frequency_process_from_parameters`.
  """
  on_wrap = secure_sum.check_on_wrap(on_wrap)
  return build_frequency_process_from_parameters(frequency_parameters(
      protocol, dim, expected_clients_per_round, epsilon, delta, **kwargs),
                                                 on_wrap=on_wrap)


def build_frequency_process_from_parameters(
    params: FrequencyParameters, *, on_wrap: str = 'raise'
) -> tff.templates.MeasuredProcess:
  """The process of calibrated `params` (module docstring; `on_wrap` as
  for `build_frequency_process`): `params.build_process`."""
  if not isinstance(params, FrequencyParameters):
    raise TypeError('params must be FrequencyParameters (from '
                    f'frequency_parameters), got {type(params).__name__}.')
  return params.build_process(secure_sum.check_on_wrap(on_wrap))


def two_phase_computations(params: FrequencyParameters, *,
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
  if not isinstance(params, protocols.TwoPhaseParameters):
    raise ValueError('two_phase_computations needs the parameters of '
                     f'protocol={protocols.TwoPhaseParameters.protocol!r}.')
  return computations.two_phase_computations(
      params, secure_sum.check_on_wrap(on_wrap))


def describe(params: FrequencyParameters) -> str:
  """One line: the protocol, its parameters and its epsilon (adversary)."""
  return params.describe()
