"""TFFE (Algorithm 6): its parameters, its TFF computations, its simulation.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper), Algorithms 4-6 and Section 3.3: a private clip C-hat
(the Haar quantile process on the clients' representation norms), then
OcPBM with it. `TwoPhaseParameters` (its builder `calibrate`), its process
(`two_phase_process`, `two_phase_computations`: the pieces of
`computations`) and `simulate`, one distribution-exact run (the pieces of
`simulation`).
"""

import collections
import dataclasses
import math
from typing import ClassVar, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import calibration as calibration_lib
from tff_ddp.accounting import event_io
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import computations
from tff_ddp.analytics.frequency import setting as setting_lib
from tff_ddp.analytics.frequency import simulation as fs
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import process as quantiles_lib
from tff_ddp.analytics.quantiles import simulation
from tff_ddp.utils import checks
from tff_ddp.utils import rounds as rounds_lib
from tff_ddp.utils import tensors

# TFFE phase 1's ring: 2^18 bits (the paper's), or the least that holds
# one trial per user when there are more users (their number is public by
# protocol): `quantile_bits`.
_QUANTILE_BITS = 18


def quantile_bits(num_clients: int) -> int:
  """Phase 1's ring bits for `num_clients` users: 18, or the least b with
  2^b > n (cPBM needs n m < 2^b with m >= 1) above 2^18 - 1 users, where
  18 bits were refused ("use bits >= 19")."""
  return max(_QUANTILE_BITS, int(num_clients).bit_length())


@dataclasses.dataclass(frozen=True)
class TwoPhaseParameters(setting_lib.FrequencyParameters):
  """TFFE (Algorithm 6): a private clip C-hat, then OcPBM with it.

  `next(state, x)` runs both phases on the same clients. Phase 1
  (Algorithms 4-5): each client computes ||y_i||_2 of the Kashin
  representation that phase 2 will use (the frame of the frequency
  aggregator's coming round, `secure_sum.round_seed`); the Haar quantile
  process (2^b bins over [0, B], B = K max_items -- the paper's choice, K
  the Kashin level, since ||y|| <= K ||x||_2 <= K ||x||_1) estimates its
  `target_quantile` (default eq. 5's 1 - sqrt(D / (4 m n theta^2)),
  Algorithm 5 normalising by the public count n; a user without data
  (||y_i|| = 0) sends no bin, `norm_message`) ->
  C-hat. If the quantile round fails (status not 'ok': too few clients)
  C-hat = B. Phase 2: OcPBM (Section 3.3) with C = C-hat. Event:
  Composed([phase 1, phase 2]) with the measured client counts
  (Proposition 4 composes the same two releases). C_median (Table 2) is
  this protocol with target_quantile=0.5.

  Attributes (beside `FrequencyParameters`'):
    target_quantile: gamma*.
    quantile: the phase-1 `QuantileParameters`.
    num_bins, upper_bound: the phase-1 histogram: 2^b bins over [0, B].
    budget: the `SplitBudget` between the two phases.
  """

  target_quantile: float
  quantile: qc.QuantileParameters
  num_bins: int
  upper_bound: float
  budget: calibration_lib.SplitBudget

  protocol: ClassVar[str] = 'two_phase'
  scaled: ClassVar[bool] = True

  @classmethod
  def calibrate(
      cls,
      setting: setting_lib.FrequencySetting,
      *,
      max_items: float,
      num_bins: int = 64,
      quantile_num_trials: Optional[int] = None,
      budget_fraction: float = setting_lib.DEFAULT_BUDGET_FRACTION,
      target_quantile: Optional[float] = None) -> 'TwoPhaseParameters':
    """Calibrates TFFE to the setting's (epsilon, delta).

    Args:
      setting: a `setting_lib.FrequencySetting`.
      max_items: the public bound on ||x_i||_1 (the most items a user
        holds); the histogram covers [0, K max_items].
      num_bins: 2^b Haar bins (the paper: 64).
      quantile_num_trials: m' of phase 1 (default: the most the 2^18 ring
        holds); theta' is calibrated.
      budget_fraction: rho in (0, 1): phase 1 gets standalone epsilon
        rho s, the frequency release (1 - rho) s, s chosen so that the
        composition meets the budget (`split_budget`). The paper's ~10:1
        is rho = 1/11.
      target_quantile: gamma* (default eq. 5); 0.5 for C_median.
    """
    budget_fraction = setting_lib.checked_budget_fraction(budget_fraction)
    target_quantile = setting_lib.checked_target_quantile(target_quantile)
    max_items = checks.positive(max_items, 'max_items')
    level = setting.level
    upper = level * max_items
    if not setting_lib.CLIP_RANGE[0] <= upper <= setting_lib.CLIP_RANGE[1]:
      # The histogram's range [0, K max_items] in float64 and float32 (the
      # norms are float32 on the clients).
      raise ValueError(
          f'max_items must make the histogram range [0, K max_items] (K = '
          f'{level:.4g}, the Kashin level) fit in [1e-30, 1e30], got '
          f'max_items={max_items!r}.')
    encoding = hg.Haar(num_bins)  # Algorithm 4's encoding, validated
    quantile_trials = checks.optional_integer(quantile_num_trials,
                                              'quantile_num_trials', 1)
    n = setting.expected_clients_per_round

    def phase_one(eps):
      try:
        params = qc.quantile_parameters(
            encoding, 'poisson_binomial', encoding.num_bins,
            qc.QuantileSetting(n,
                               eps,
                               setting.delta,
                               bits=quantile_bits(n),
                               adversary=setting.adversary,
                               num_trials=quantile_trials,
                               seed=setting.seed))
      except ValueError as e:
        if quantile_trials is None:
          raise
        # Its message says num_trials: the quantile process's argument.
        raise ValueError(
            f'quantile_num_trials={quantile_trials}: {e}') from None
      return params, params.factory.dp_event(params.value_type)

    budget = setting.split(phase_one, budget_fraction)
    first, frequency = budget.results
    fields = setting.release_fields(frequency)
    if target_quantile is None:
      target_quantile = fq.optimal_quantile(fields['effective_dim'],
                                            fields['num_trials'], n,
                                            fields['theta'])
    return cls(**fields,
               epsilon=budget.epsilon,
               round_event=budget.event,
               event=budget.event,
               target_quantile=target_quantile,
               quantile=first,
               num_bins=encoding.num_bins,
               upper_bound=upper,
               budget=budget)

  @property
  def total_clients(self) -> int:
    """n of eq. 5: the round's clients."""
    return self.expected_clients_per_round

  def build_process(self, on_wrap):
    return two_phase_process(self, on_wrap)

  def _more_capacities(self):
    return [self.quantile.ring_capacity().capacity]

  def _describe_parts(self):
    return [
        f"phase 1 Haar {self.num_bins} bins over "
        f"[0, {self.upper_bound:.4g}] theta'={self.quantile.noise.theta:.4f} "
        f"m'={self.quantile.noise.num_trials}, target quantile "
        f'{self.target_quantile:.4f}'
    ]


TwoPhaseComputations = collections.namedtuple(
    'TwoPhaseComputations',
    ['initialize', 'estimate_clip', 'estimate_frequencies', 'next'])


def norm_message(norm, finite=True):
  """TFFE phase 1's client value: ||y||, NaN (no bin) when ||y|| = 0.

  ||y|| = 0 exactly when the user holds no items (x = 0; Kashin's
  representation of 0 is 0). Such a user is the neighbouring relation's
  "no data" and must send phase 1's zero message, so its norm is NaN (the
  quantile process encodes NaN as zeros). The 'exact' CDF (divided by the
  public n) then leaves those users out: C-hat sits at level target + (the
  fraction without data) among all n norms. Counting the missing mass
  n - (noisy total) at norm 0 would remove that bias by post-processing,
  but adds the noisy total's noise to every CDF value; on Table 2's data
  (<= 0.04% without data) it widened the level's spread from 0.012 to
  0.014 for a bias of <= 0.0004 (docs/notes/neighbouring_relation.md), so
  it is not done. Non-finite clients are NaN too.
  """
  norm = tf.convert_to_tensor(norm, tf.float64)
  keep = tf.logical_and(finite, norm > 0)
  return tf.cast(tf.where(keep, norm, np.nan), tf.float32)


def _norm_computation(params, seed_type):
  encoder = params.encoder()

  @tff.tensorflow.computation(params.value_type, seed_type)
  def norm_fn(x, seed):
    x = computations.as_float64(x)
    finite = computations.all_finite(x)
    y = encoder.encode(tf.where(finite, x, tf.zeros_like(x)), seed)
    # A non-finite client, and a client with no data (x = 0, the
    # neighbouring relation's "no data"), is in no bin: NaN, which the
    # quantile process encodes as the zero message (`quantiles.process`'s
    # module docstring).
    return norm_message(tensors.overflow_safe_norm(y), finite)

  return norm_fn


def _two_phase(params, on_wrap):
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  quantile_process = quantiles_lib.build_quantile_process_from_parameters(
      params.quantile,
      0.0,
      params.upper_bound, [params.target_quantile],
      quantiles_lib.QuantileEstimation(count='exact'),
      on_wrap='flag')
  f_state_type = aggregator.initialize.type_signature.result.member
  upper = float(params.upper_bound)
  target = float(params.target_quantile)

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(
        collections.OrderedDict(quantile=quantile_process.initialize(),
                                frequency=aggregator.initialize()))

  state_type = initialize.type_signature.result
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  seed_type = seed_fn.type_signature.result
  norm_fn = _norm_computation(params, seed_type)
  q_result_type = quantile_process.next.type_signature.result.result.member
  q_meas_type = (
      quantile_process.next.type_signature.result.measurements.member)

  @tff.tensorflow.computation(q_result_type, q_meas_type)
  def clip_fn(values, measurements):
    _, values, measurements = computations.checked(
        ring, on_wrap, measurements['aggregator']['participating_clients'],
        values, measurements)
    ok = tf.equal(measurements['status'], 'ok')
    c = values[0]
    usable = ok & tf.math.is_finite(c) & (c > 0)
    clip = tf.where(usable, c, tf.constant(upper, tf.float64))
    out = collections.OrderedDict(clip=clip,
                                  clip_fallback=tf.logical_not(usable),
                                  target_quantile=tf.constant(
                                      target, tf.float64),
                                  quantile=measurements)
    return clip, out

  @tff.federated_computation(state_type,
                             tff.FederatedType(params.value_type, tff.CLIENTS))
  def estimate_clip(state, x):
    seed = tff.federated_map(
        seed_fn,
        tff.federated_map(computations.selector(state_type.member, 'frequency'),
                          state))
    norms = tff.federated_map(norm_fn, (x, tff.federated_broadcast(seed)))
    q_state = tff.federated_map(
        computations.selector(state_type.member, 'quantile'), state)
    output = quantile_process.next(q_state, norms)
    clip_and_meas = tff.federated_map(clip_fn,
                                      (output.result, output.measurements))
    clip = tff.federated_map(
        computations.selector(clip_and_meas.type_signature.member, 0),
        clip_and_meas)
    measurements = tff.federated_map(
        computations.selector(clip_and_meas.type_signature.member, 1),
        clip_and_meas)
    return output.state, clip, measurements

  frequency_phase = _scaled_release(params, aggregator, ring, on_wrap)

  @tff.federated_computation(tff.FederatedType(f_state_type, tff.SERVER),
                             tff.FederatedType(params.value_type, tff.CLIENTS),
                             tff.FederatedType(np.float64, tff.SERVER))
  def estimate_frequencies(f_state, x, clip):
    return frequency_phase(f_state, x, clip)

  phase_one_meas_type = estimate_clip.type_signature.result[2].member
  f_meas_type = estimate_frequencies.type_signature.result[2].member

  @tff.tensorflow.computation(phase_one_meas_type, f_meas_type, f_state_type)
  def measure_fn(phase_one, phase_two, f_state):
    n = tf.cast(phase_two['frequency']['participating_clients'], tf.int64)
    may_wrap = ring.may_wrap(n) | tf.equal(phase_one['quantile']['status'],
                                           'sum_may_wrap')
    return collections.OrderedDict(
        status=computations.status_text(computations.status_code(n, may_wrap)),
        clip=phase_one['clip'],
        clip_fallback=phase_one['clip_fallback'],
        target_quantile=phase_one['target_quantile'],
        within_budget=f_state['round'] < 1,
        dp_event=event_io.composed_structure([
            phase_one['quantile']['aggregator']['dp_event'],
            phase_two['frequency']['dp_event']
        ]),
        quantile=phase_one['quantile'],
        frequency=phase_two['frequency'])

  @tff.federated_computation(state_type,
                             tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    q_state, clip, phase_one = estimate_clip(state, x)
    f_state = tff.federated_map(
        computations.selector(state_type.member, 'frequency'), state)
    new_f_state, estimate, phase_two = estimate_frequencies(f_state, x, clip)
    measurements = tff.federated_map(measure_fn,
                                     (phase_one, phase_two, f_state))
    new_state = tff.federated_zip(
        collections.OrderedDict(quantile=q_state, frequency=new_f_state))
    return tff.templates.MeasuredProcessOutput(new_state, estimate,
                                               measurements)

  return TwoPhaseComputations(initialize, estimate_clip, estimate_frequencies,
                              next_fn)


def _scaled_release(params, aggregator, ring, on_wrap):
  """(f_state, x, clip) -> (state, estimate, measurements): OcPBM with a
  server-side clip, by scaling (`frequency.computations`' module
  docstring), refusing or flagging a round above `ring`. A federated
  function to call inside a federated computation."""

  @tff.tensorflow.computation(params.value_type, np.float64)
  def scale_fn(x, clip):
    return computations.as_float64(x) / clip

  meas_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(params.aggregated_type, np.float64, meas_type)
  def rescale_fn(scaled_sum, clip, measurements):
    _, scaled_sum = computations.checked(ring, on_wrap,
                                         measurements['participating_clients'],
                                         scaled_sum)
    return scaled_sum * clip

  @tff.tensorflow.computation(meas_type, np.float64)
  def measure_fn(measurements, clip):
    return collections.OrderedDict(clip=clip, frequency=measurements)

  def phase(f_state, x, clip):
    scaled = tff.federated_map(scale_fn, (x, tff.federated_broadcast(clip)))
    output = aggregator.next(f_state, scaled)
    estimate = tff.federated_map(rescale_fn,
                                 (output.result, clip, output.measurements))
    measurements = tff.federated_map(measure_fn, (output.measurements, clip))
    return output.state, estimate, measurements

  return phase


def two_phase_process(params, on_wrap):
  """TFFE's process (`TwoPhaseParameters`)."""
  phases = _two_phase(params, on_wrap)
  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(phases.initialize, phases.next))


def two_phase_computations(params, on_wrap) -> TwoPhaseComputations:
  """TFFE's phases as user-facing computations (`frequency.process.
  two_phase_computations`)."""
  return TwoPhaseComputations(
      *[rounds_lib.user_facing(c) for c in _two_phase(params, on_wrap)])


def quantile_phase(qparams,
                   norms,
                   upper: float,
                   target: float,
                   rng,
                   count: str = 'exact',
                   min_total_stddevs: float = 2.0,
                   on_wrap: str = 'raise'):
  """(C-hat or None, status) of TFFE's phase 1 on the clients' norms
  (status 'sum_may_wrap' and no C-hat for a round above the ring's
  capacity under on_wrap='flag'; refused under 'raise')."""
  values = np.asarray(norms, np.float32).astype(np.float64)
  n = values.size
  encoding = qparams.encoding
  b = encoding.num_bins
  codes = simulation.encodings(encoding, values, 0.0, upper)
  # A user without data (norm 0) sends the zero message
  # (`norm_message`).
  codes = np.where((values > 0)[:, None], codes, 0)
  noisy = simulation.noisy_sum('poisson_binomial',
                               codes,
                               qparams,
                               seed=int(rng.integers(0, 2**62)),
                               on_wrap=on_wrap)
  if n > 0 and qparams.ring_capacity().may_wrap(n):
    return None, 'sum_may_wrap'  # the process's fallback: C-hat = B
  cdf = encoding.cdf(noisy, n if hg.exact_count(count) else None)
  total = float(encoding.estimated_total(noisy))
  # The process's status rule (quantiles.py, server_estimate).
  stddev = (qparams.aggregator_mechanism().noise_stddev(1) *
            encoding.total_norm * math.sqrt(n))
  if n == 0:
    return None, 'no_clients'
  if total < min_total_stddevs * stddev or total <= 0:
    return None, 'too_few_values'
  value = float(hg.quantile_values(cdf, [target], 0.0, upper, b).numpy()[0])
  return value, 'ok'


def simulate(params,
             x,
             rng,
             target: Optional[float] = None,
             on_wrap: str = 'raise') -> fs.Round:
  """One TFFE run (`frequency.process` 'two_phase') on counts x [n, d]."""
  fs.check_protocol(params, TwoPhaseParameters)
  wraps = fs.ring_wraps(params, 'frequency.two_phase.simulate', len(x), on_wrap)
  seed = fs.round_seed(rng)
  y = fs.representations(params.encoder(), x, seed)
  norms = fs.norms_of(y)
  target = params.target_quantile if target is None else target
  clip, status = quantile_phase(params.quantile,
                                norms,
                                params.upper_bound,
                                target,
                                rng,
                                on_wrap='flag')
  if clip is None:
    clip = params.upper_bound
  estimate = fs.pbm_sum(params.mechanism(),
                        y,
                        rng,
                        seed,
                        clip,
                        norms,
                        on_wrap='flag')
  return fs.Round(estimate, clip, 'sum_may_wrap' if wraps else status)
