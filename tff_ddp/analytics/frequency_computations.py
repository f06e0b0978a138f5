"""The TFF computations of the frequency protocols (`frequency_protocols`).

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): Algorithm 6 (TFFE), Algorithm 7 (MFFE), Algorithm 3
(one cPBM release). Each builder takes a protocol's parameters (duck-typed:
this module does not import `frequency_protocols`, whose classes call it)
and returns a `MeasuredProcess` (or TFFE's phases); the pieces are the
library's, composed:

* the frequency release is `PoissonBinomialSumFactory` (Kashin encoder) --
  one secure sum;
* TFFE's first phase is the Haar quantile process of
  `tff_ddp.analytics.quantiles.process` (cPBM over the Haar coefficients)
  on the clients' representation norms -- a second secure sum;
* MFFE's indicator is a second `PoissonBinomialSumFactory` on one
  coordinate.

A data-dependent clip C (TFFE's C-hat, MFFE's C^(r)) is applied by scaling
(`_scaled_release`): clients send x / C to a cPBM aggregator built with
l2_clip = 1 and the server multiplies the decoded sum by C. Kashin's
representation is positively homogeneous (its truncation levels scale with
||x||), so the representation of x / C is y / C, its clip to 1 is
clip_C(y) / C, and the Bernoulli probabilities 1/2 + theta y'[k] are those
of Algorithm 3 with clip C: the same distribution, from an aggregator whose
configuration is public and fixed. (Its `l2_clip` measurement therefore
says 1; the clip in use is the process's `clip` measurement.) The privacy
event does not depend on C (Lemma 2).

Every builder refuses (on_wrap='raise') or flags (on_wrap='flag') a round
with more clients than the parameters' `ring_capacity()`.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import event_io
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import process as quantiles_lib
from tff_ddp.utils import rounds as rounds_lib
from tff_ddp.utils import tensors

TwoPhaseComputations = collections.namedtuple(
    'TwoPhaseComputations',
    ['initialize', 'estimate_clip', 'estimate_frequencies', 'next'])


def _selector(struct_type, name):
  return tff.tensorflow.computation(lambda s: s[name], struct_type)


def _float64(x):
  return tf.cast(x, tf.float64)


def _finite(x):
  return tf.reduce_all(tf.math.is_finite(x))


def _status(n, may_wrap):
  """The frequency round's status code (an index into STATUSES)."""
  statuses = quantiles_lib.STATUSES

  def code(name):
    return tf.constant(statuses.index(name), tf.int32)

  return tf.where(tf.equal(n, 0), code('no_clients'),
                  tf.where(may_wrap, code('sum_may_wrap'), code('ok')))


def _status_text(code):
  return tf.gather(tf.constant(list(quantiles_lib.STATUSES)), code)


def _checked(ring, on_wrap, n, *values):
  """`values` gated by the refusal of a round above `ring` (`on_wrap`, an
  OnWrap, RAISE), and whether the round's sums may wrap."""
  n = tf.cast(n, tf.int64)
  may_wrap = ring.may_wrap(n)
  if on_wrap is not secure_sum.OnWrap.RAISE:
    return (may_wrap,) + values
  with tf.control_dependencies([ring.assertion(n)]):
    return (tf.identity(may_wrap),) + tf.nest.map_structure(tf.identity, values)


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
  0.014 for a bias of <= 0.0004 (benchmarks/RESULTS.md, "Neighbouring
  relation"), so it is not done. Non-finite clients are NaN too.
  """
  norm = tf.convert_to_tensor(norm, tf.float64)
  keep = tf.logical_and(finite, norm > 0)
  return tf.cast(tf.where(keep, norm, np.nan), tf.float32)


def indicator_message(norm, clip, finite=True):
  """MFFE's indicator: +1 if ||y|| > C, -1 if 0 < ||y|| <= C, 0 if ||y|| = 0.

  0 is the zero message of "no data" (x = 0, so y = 0), the neighbouring
  relation's neighbour: every pair (user's message, 0) is a zero-out pair
  of the indicator's cPBM, which the zero-out curve covers. (The paper's
  +-1 sends -1 for no data; its pair with +1 is replace-one, about 4x the
  RDP.) Non-finite clients send 0 too.
  """
  norm = tf.convert_to_tensor(norm, tf.float64)
  sign = tf.where(norm > clip, tf.constant(1.0, tf.float64),
                  tf.constant(-1.0, tf.float64))
  keep = tf.logical_and(finite, norm > 0)
  return tf.where(keep, sign, tf.constant(0.0, tf.float64))


def _norm_computation(params, seed_type):
  encoder = params.encoder()

  @tff.tensorflow.computation(params.value_type, seed_type)
  def norm_fn(x, seed):
    x = _float64(x)
    finite = _finite(x)
    y = encoder.encode(tf.where(finite, x, tf.zeros_like(x)), seed)
    # A non-finite client, and a client with no data (x = 0, the
    # neighbouring relation's "no data"), is in no bin: NaN, which the
    # quantile process encodes as the zero message (module docstring).
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
    _, values, measurements = _checked(
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
        tff.federated_map(_selector(state_type.member, 'frequency'), state))
    norms = tff.federated_map(norm_fn, (x, tff.federated_broadcast(seed)))
    q_state = tff.federated_map(_selector(state_type.member, 'quantile'), state)
    output = quantile_process.next(q_state, norms)
    clip_and_meas = tff.federated_map(clip_fn,
                                      (output.result, output.measurements))
    clip = tff.federated_map(_selector(clip_and_meas.type_signature.member, 0),
                             clip_and_meas)
    measurements = tff.federated_map(
        _selector(clip_and_meas.type_signature.member, 1), clip_and_meas)
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
        status=_status_text(_status(n, may_wrap)),
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
    f_state = tff.federated_map(_selector(state_type.member, 'frequency'),
                                state)
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
  server-side clip, by scaling (module docstring), refusing or flagging a
  round above `ring`. A federated function to call inside a federated
  computation."""

  @tff.tensorflow.computation(params.value_type, np.float64)
  def scale_fn(x, clip):
    return _float64(x) / clip

  meas_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(params.aggregated_type, np.float64, meas_type)
  def rescale_fn(scaled_sum, clip, measurements):
    _, scaled_sum = _checked(ring, on_wrap,
                             measurements['participating_clients'], scaled_sum)
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
  computations = _two_phase(params, on_wrap)
  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(computations.initialize, computations.next))


def two_phase_computations(params, on_wrap) -> TwoPhaseComputations:
  """TFFE's phases as user-facing computations (`frequency_process.
  two_phase_computations`)."""
  return TwoPhaseComputations(
      *[rounds_lib.user_facing(c) for c in _two_phase(params, on_wrap)])


def multi_round_process(params, on_wrap):
  """MFFE's process (`MultiRoundParameters`)."""
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  indicator_type = tff.TensorType(np.float64, [1])
  indicator = params.indicator_factory.create(indicator_type)
  f_state_type = aggregator.initialize.type_signature.result.member
  dim = params.dim
  initial_clip = float(params.clip)
  target = float(params.target_quantile)
  eta = float(params.learning_rate)
  rounds = int(params.rounds)
  encoder = params.encoder()

  @tff.tensorflow.computation
  def server_init():
    return collections.OrderedDict(clip=tf.constant(initial_clip, tf.float64),
                                   estimate=tf.zeros([dim], tf.float64),
                                   clients=tf.constant(0, tf.int64))

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(
        collections.OrderedDict(frequency=aggregator.initialize(),
                                indicator=indicator.initialize(),
                                server=tff.federated_eval(
                                    server_init, tff.SERVER)))

  state_type = initialize.type_signature.result
  server_type = state_type.member['server']
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  seed_type = seed_fn.type_signature.result

  @tff.tensorflow.computation(params.value_type, seed_type, np.float64)
  def client_fn(x, seed, clip):
    x = _float64(x)
    finite = _finite(x)
    y = encoder.encode(tf.where(finite, x, tf.zeros_like(x)), seed)
    sign = indicator_message(tensors.overflow_safe_norm(y), clip, finite)
    return collections.OrderedDict(scaled=x / clip, indicator=sign[None])

  client_type = client_fn.type_signature.result
  f_meas_type = aggregator.next.type_signature.result.measurements.member
  i_meas_type = indicator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(server_type, params.aggregated_type,
                              indicator_type, f_meas_type, i_meas_type,
                              f_state_type)
  def server_fn(server, scaled_sum, indicator_sum, f_meas, i_meas, f_state):
    count = tf.cast(f_meas['participating_clients'], tf.int64)
    may_wrap, server, scaled_sum, indicator_sum = _checked(
        ring, on_wrap, count, server, scaled_sum, indicator_sum)
    clip = server['clip']
    n = tf.cast(count, tf.float64)
    round_estimate = scaled_sum * clip
    above = tf.clip_by_value(
        (tf.math.divide_no_nan(indicator_sum[0], n) + 1.0) / 2.0, 0.0, 1.0)
    level = 1.0 - above
    # No clients: nothing learnt, C unchanged.
    new_clip = tf.where(n > 0, clip * tf.exp(-eta * (level - target)), clip)
    new_server = collections.OrderedDict(
        clip=new_clip,
        estimate=server['estimate'] + round_estimate,
        clients=server['clients'] + tf.cast(n, tf.int64))
    measurements = collections.OrderedDict(
        status=_status_text(_status(count, may_wrap)),
        clip=clip,
        next_clip=new_clip,
        quantile_level=level,
        target_quantile=tf.constant(target, tf.float64),
        round_estimate=round_estimate,
        clients_so_far=new_server['clients'],
        within_budget=f_state['round'] < rounds,
        dp_event=event_io.composed_structure(
            [f_meas['dp_event'], i_meas['dp_event']]),
        frequency=f_meas,
        indicator=i_meas)
    return new_server, new_server['estimate'], measurements

  @tff.federated_computation(state_type,
                             tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    member = state_type.member
    f_state = tff.federated_map(_selector(member, 'frequency'), state)
    i_state = tff.federated_map(_selector(member, 'indicator'), state)
    server = tff.federated_map(_selector(member, 'server'), state)
    clip = tff.federated_map(_selector(server_type, 'clip'), server)
    seed = tff.federated_map(seed_fn, f_state)
    sent = tff.federated_map(
        client_fn,
        (x, tff.federated_broadcast(seed), tff.federated_broadcast(clip)))
    f_out = aggregator.next(
        f_state, tff.federated_map(_selector(client_type, 'scaled'), sent))
    i_out = indicator.next(
        i_state, tff.federated_map(_selector(client_type, 'indicator'), sent))
    new_server, estimate, measurements = _unzip3(
        tff.federated_map(server_fn,
                          (server, f_out.result, i_out.result,
                           f_out.measurements, i_out.measurements, f_state)))
    new_state = tff.federated_zip(
        collections.OrderedDict(frequency=f_out.state,
                                indicator=i_out.state,
                                server=new_server))
    return tff.templates.MeasuredProcessOutput(new_state, estimate,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(initialize, next_fn))


def _unzip3(value):
  member = value.type_signature.member
  return tuple(tff.federated_map(_selector(member, i), value) for i in range(3))


def client_step(params, seed_type):
  """The client step of a single-release protocol as a TFF computation:
  (x, round seed) -> `params.client_values(x, round seed)`."""

  @tff.tensorflow.computation(params.value_type, seed_type)
  def prepare(x, round_seed):
    return params.client_values(x, round_seed)

  return prepare


def single_release_process(params, on_wrap):
  """The process of one cPBM release of `params.client_values` at the
  clip `params.clip` (`SingleReleaseParameters`)."""
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  f_state_type = aggregator.initialize.type_signature.result.member
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  prepare = client_step(params, seed_fn.type_signature.result)
  clip = float(params.clip)
  meas_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(meas_type, f_state_type)
  def measure_fn(measurements, f_state):
    count = measurements['participating_clients']
    may_wrap, measurements = _checked(ring, on_wrap, count, measurements)
    return collections.OrderedDict(status=_status_text(
        _status(tf.cast(count, tf.int64), may_wrap)),
                                   clip=tf.constant(clip, tf.float64),
                                   within_budget=f_state['round'] < 1,
                                   dp_event=measurements['dp_event'],
                                   frequency=measurements)

  @tff.federated_computation
  def initialize():
    return aggregator.initialize()

  @tff.federated_computation(initialize.type_signature.result,
                             tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    seed = tff.federated_map(seed_fn, state)
    prepared = tff.federated_map(prepare, (x, tff.federated_broadcast(seed)))
    output = aggregator.next(state, prepared)
    measurements = tff.federated_map(measure_fn, (output.measurements, state))
    return tff.templates.MeasuredProcessOutput(output.state, output.result,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(initialize, next_fn))
