"""Delta-FL and its baselines as `tff.learning.templates.LearningProcess`es.

Papers: "Federated Learning with Superquantile Aggregation for Heterogeneous
Data" (Delta-FL; Algorithms 1 and 3, Sections 4 and 7) and "Private Federated
Quantiles" / the federated DP quantiles paper (Section 5 and Appendix B:
Algorithm 4, DP-Delta-FL; Claim 13). The weighting math is
`tff_ddp.learning.weighting`, the privacy configuration and accounting
`tff_ddp.learning.privacy`; here it is placed in TFF. Every process has
TFF's FedAvg shape (it replaces `tff.learning.algorithms.
build_unweighted_fed_avg`): `build_superquantile_fl` (DP-Delta-FL with
`privacy=PrivacyConfig`), `build_dp_fedavg`, `build_baseline`.

One round step by step, self-sampling, the non-private processes, the
metrics, several thresholds: docs/notes/deltafl.md.
"""

import collections
import dataclasses
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import event_io
from tff_ddp.analytics.quantiles import process as quantiles_lib
from tff_ddp.learning import privacy as privacy_lib
from tff_ddp.learning import weighting
from tff_ddp.utils import checks

DEFAULT_SERVER_OPTIMIZER_FN = lambda: tff.learning.optimizers.build_sgdm(  # pylint: disable=invalid-name  # a constant that holds a function
    learning_rate=1.0)


@dataclasses.dataclass(frozen=True)
class _Spec:
  """What a builder resolved: the objective (`weighting.Objective`) and,
  for the DP processes, the privacy configuration."""

  objective: weighting.Objective
  privacy: Optional[privacy_lib.PrivacyConfig] = None


def build_superquantile_fl(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    tail_fraction: float,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    *,
    privacy: Optional[privacy_lib.PrivacyConfig] = None,
    reweighting: str = 'threshold',
) -> tff.learning.templates.LearningProcess:
  """Delta-FL (minimises the (1 - theta)-superquantile of client losses).

  Args:
    model_fn: a no-arg callable returning a new
      `tff.learning.models.VariableModel` (as for TFF's FedAvg).
    tail_fraction: theta in (0, 1]: the fraction of worst-off clients whose
      mean loss is minimised (theta = 1 is FedAvg).
    client_optimizer_fn: a `tff.learning.optimizers.Optimizer` for local
      training (TFF 0.87's convention: an optimizer, not a function).
    server_optimizer_fn: likewise for the server (default SGD, lr 1).
    privacy: a `tff_ddp.learning.PrivacyConfig` (with
      quantile_noise_multiplier set; `tff_ddp.learning.calibrate`) for
      DP-Delta-FL; None for the non-private Delta-FL (NOT private: the
      server ranks the clients' losses).
    reweighting: non-private only: 'threshold' (Algorithm 1 with the exact
      quantile) or 'exact' (Algorithm 3, the fractional boundary weight).
      DP-Delta-FL always thresholds at the DP quantile (Algorithm 4).

  Returns:
    A `tff.learning.templates.LearningProcess` (its round, state and
    metrics: docs/notes/deltafl.md, section on processes.py).
  """
  theta = weighting.check_tail_fraction(tail_fraction)
  exact = checks.member(reweighting, 'reweighting',
                        weighting.Reweighting) is weighting.Reweighting.EXACT
  if privacy is not None:
    _check_privacy(privacy)
    if not privacy.has_quantile:
      raise ValueError('DP-Delta-FL needs privacy.quantile_noise_multiplier '
                       '(the loss histogram\'s noise); calibrate with a '
                       'budget_ratio, or use build_dp_fedavg.')
    if exact:
      raise ValueError("reweighting='exact' ranks the clients' losses at the "
                       'server: non-private only (privacy=None).')
  return _build(model_fn, client_optimizer_fn, server_optimizer_fn,
                _Spec(weighting.Superquantile(theta, exact), privacy))


def build_dp_fedavg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    *,
    privacy: privacy_lib.PrivacyConfig,
) -> tff.learning.templates.LearningProcess:
  """DP-FedAvg: the mean of the clients' clipped updates with the DDG.

  The same skeleton, aggregator and accountant as DP-Delta-FL, with every
  client in the tail (the sum divided by the public count n).
  `privacy.quantile_noise_multiplier` must be None.
  """
  _check_privacy(privacy)
  if privacy.has_quantile:
    raise ValueError('DP-FedAvg releases no loss histogram: '
                     'quantile_noise_multiplier must be None.')
  return _build(model_fn, client_optimizer_fn, server_optimizer_fn,
                _Spec(weighting.FedAvg(), privacy))


def build_baseline(
    objective,
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    *,
    seed: Optional[int] = None,
    **parameters,
) -> tff.learning.templates.LearningProcess:
  """A non-private baseline of Table 2 on the same skeleton (NOT private).

  Args:
    objective: 'fedavg', 'fedavg_sub' (needs tail_fraction), 'fedprox'
      (needs proximal_strength mu > 0: local loss + mu/2 ||w - w_0||^2),
      'qffl' (needs q > 0 and lipschitz L = 1 / client learning rate),
      'tilted' (needs tilt t > 0) or 'superquantile' (needs tail_fraction;
      Algorithm 3, the same as build_superquantile_fl(reweighting='exact'));
      or a `weighting.Objective` itself (`weighting.Tilted(tilt=1.0)`).
    model_fn, client_optimizer_fn, server_optimizer_fn: as for FedAvg.
    seed: fedavg_sub's random choice of clients (tests; default: fresh
      entropy); ignored by the other objectives.
    **parameters: the objective's (tail_fraction, proximal_strength, q,
      lipschitz, tilt); one it does not take is refused.
  """
  # The baselines' superquantile is Algorithm 3; the seed is fedavg_sub's.
  spec = _Spec(
      weighting.objective(objective,
                          defaults=dict(exact=True, seed=checks.seed(seed)),
                          **parameters))
  return _build(model_fn, client_optimizer_fn, server_optimizer_fn, spec)


def _check_privacy(privacy):
  if not isinstance(privacy, privacy_lib.PrivacyConfig):
    raise TypeError('privacy must be a tff_ddp.learning.PrivacyConfig (or '
                    f'None), got {type(privacy).__name__}.')


# ---------------------------------------------------------------------------
# Client work


def _num_examples(output):
  if output.num_examples is not None:
    return tf.cast(output.num_examples, tf.int64)
  return tf.shape(output.predictions, out_type=tf.int64)[0]


def private_loss(loss, num_examples):
  """The loss a DP-Delta-FL client sends to the histogram: NaN (no bin, the
  zero message) when it has no examples, else its loss.

  A client whose examples are removed -- the neighbouring relation of the
  DP processes (`tff_ddp.learning.privacy`) -- has no loss; its mean loss
  would read 0 (an empty mean), a bin, and the pair (bin 0, another bin) is
  replace-one, not the zero-out pair the histogram's event is accounted
  for. Its update is zero (no training steps).
  """
  loss = tf.convert_to_tensor(loss, tf.float32)
  return tf.where(
      tf.convert_to_tensor(num_examples, tf.int64) > 0, loss,
      tf.constant(np.nan, tf.float32))


def _client_update_fn(model_fn, optimizer, proximal_strength):
  """tf.function (weights, data) -> OrderedDict(loss, update, sq_norm,
  finite): the loss at the initial weights, then local training."""
  model = model_fn()
  weights = tff.learning.models.ModelWeights.from_model(model)

  @tf.function
  def update_fn(initial_weights, data):
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)

    def evaluate(state, batch):
      total, count = state
      output = model.forward_pass(batch, training=False)
      n = _num_examples(output)
      return (total + tf.cast(output.loss, tf.float64) * tf.cast(n, tf.float64),
              count + n)

    total, count = data.reduce(
        (tf.constant(0.0, tf.float64), tf.constant(0, tf.int64)), evaluate)
    loss = tf.math.divide_no_nan(total, tf.cast(count, tf.float64))

    trainable = tuple(tf.nest.flatten(weights.trainable))
    start = tuple(tf.nest.flatten(initial_weights.trainable))
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)

    def train(optimizer_state, batch):
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, trainable)
      if proximal_strength > 0:
        gradients = tuple(g + proximal_strength * (w - w0)
                          for g, w, w0 in zip(gradients, trainable, start))
      optimizer_state, updated = optimizer.next(optimizer_state, trainable,
                                                gradients)
      for variable, value in zip(trainable, updated):
        variable.assign(value)
      return optimizer_state

    data.reduce(optimizer.initialize(specs), train)
    update = tf.nest.map_structure(tf.subtract, initial_weights.trainable,
                                   weights.trainable)
    flat = tf.nest.flatten(update)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(u)) for u in flat])
    update = tf.nest.map_structure(
        lambda u: tf.where(finite, u, tf.zeros_like(u)), update)
    sq_norm = tf.add_n([
        tf.reduce_sum(tf.square(tf.cast(u, tf.float64)))
        for u in tf.nest.flatten(update)
    ])
    return collections.OrderedDict(loss=tf.cast(loss, tf.float32),
                                   update=update,
                                   sq_norm=sq_norm,
                                   finite=finite,
                                   num_examples=count)

  return update_fn


def _model_types(model_fn):
  model = privacy_lib.build_model(model_fn)
  element_type = tff.types.tensorflow_to_type(model.input_spec)
  weights_type = tff.learning.models.weights_type_from_model(model)
  return tff.SequenceType(element_type), weights_type


def _check_optimizer(optimizer, name):
  if not isinstance(optimizer, tff.learning.optimizers.Optimizer):
    raise TypeError(f'{name} must be a tff.learning.optimizers.Optimizer '
                    f'(TFF 0.87 takes optimizers, not functions), got '
                    f'{optimizer!r}.')
  return optimizer


# ---------------------------------------------------------------------------
# The skeleton


def _build(model_fn, client_optimizer, server_optimizer, spec: _Spec):
  """Validates the model and optimizers, then traces the process."""
  client_optimizer = _check_optimizer(client_optimizer, 'client_optimizer_fn')
  # `is None`, not `or`: a falsy non-optimizer (0, '') is an error, not the
  # default, and an array has no truth value.
  server_optimizer = _check_optimizer(
      DEFAULT_SERVER_OPTIMIZER_FN()
      if server_optimizer is None else server_optimizer, 'server_optimizer_fn')
  data_type, weights_type = _model_types(model_fn)
  if spec.privacy is not None:
    # Clips and noise whose sum the update's float dtype cannot hold (+-inf
    # updates, a model of NaN) are refused here, before tracing.
    spec.privacy.update_factory().check_value_type(weights_type.trainable)
  return _trace(model_fn, client_optimizer, server_optimizer, spec, data_type,
                weights_type)


def _trace(model_fn, client_optimizer, server_optimizer, spec: _Spec, data_type,
           weights_type):
  """The LearningProcess of validated arguments (TFF tracing)."""
  update_type = weights_type.trainable

  @tff.tensorflow.computation
  def initial_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer, weights_type)
  mu = spec.objective.proximal_strength

  @tff.tensorflow.computation(weights_type, data_type)
  def client_train(weights, data):
    return _client_update_fn(model_fn, client_optimizer, mu)(weights, data)

  if spec.privacy is None:
    parts = _non_private_parts(spec, client_train, update_type)
  else:
    parts = _private_parts(spec, client_train, update_type)
  client_init, aggregator_init, round_fn = parts

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(
        tff.learning.templates.LearningAlgorithmState(
            tff.federated_eval(initial_weights_fn, tff.SERVER),
            distributor.initialize(), client_init(), aggregator_init(),
            finalizer.initialize()))

  state_type = init_fn.type_signature.result

  @tff.federated_computation(state_type,
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, data):
    distributed = distributor.next(state.distributor,
                                   state.global_model_weights)
    (client_state, aggregator_state, update, client_metrics, aggregator_metrics,
     privacy_metrics) = round_fn(state.client_work, state.aggregator,
                                 distributed.result, data)
    finalized = finalizer.next(state.finalizer, state.global_model_weights,
                               update)
    new_state = tff.federated_zip(
        tff.learning.templates.LearningAlgorithmState(finalized.result,
                                                      distributed.state,
                                                      client_state,
                                                      aggregator_state,
                                                      finalized.state))
    metrics = tff.federated_zip(
        collections.OrderedDict(distributor=distributed.measurements,
                                client_work=client_metrics,
                                aggregator=aggregator_metrics,
                                finalizer=finalized.measurements,
                                privacy=privacy_metrics,
                                dp_event=_select(privacy_metrics, 'dp_event')))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  member = state_type.member

  @tff.tensorflow.computation(member)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(member, member.global_model_weights)
  def set_model_weights(state, model_weights):
    return tff.learning.templates.LearningAlgorithmState(
        model_weights, state.distributor, state.client_work, state.aggregator,
        state.finalizer)

  return tff.learning.templates.LearningProcess(init_fn, next_fn,
                                                get_model_weights,
                                                set_model_weights)


def _non_private_event_metrics():
  """The privacy metrics of a non-private round: infinite epsilon."""
  import dp_accounting
  inf = tf.constant(np.inf, tf.float64)
  return collections.OrderedDict(dp_event=event_io.event_structure(
      dp_accounting.NonPrivateDpEvent()),
                                 round_epsilon=inf,
                                 epsilon=inf,
                                 delta=tf.constant(0.0, tf.float64),
                                 adversary=tf.constant('not private'))


def _non_private_parts(spec, client_train, update_type):
  """Ranking / weighting in the clear (NOT private): the objective's keys,
  server parameters and client scalars (`weighting.Objective`)."""
  del update_type
  objective = spec.objective
  client_out_type = client_train.type_signature.result

  @tff.tensorflow.computation
  def client_init():
    return ()

  @tff.tensorflow.computation
  def round_init():
    return collections.OrderedDict(round=tf.constant(0, tf.int64))

  @tff.federated_computation
  def client_init_federated():
    return tff.federated_eval(client_init, tff.SERVER)

  @tff.federated_computation
  def aggregator_init():
    return tff.federated_eval(round_init, tff.SERVER)

  round_type = round_init.type_signature.result

  @tff.tensorflow.computation(client_out_type, round_type)
  def key_fn(out, round_state):
    return objective.key(out['loss'], round_state['round'])

  @tff.tensorflow.computation
  def empty_keys():
    return tf.zeros([0], tf.float64)

  keys_type = tff.TensorType(np.float64, [None])

  @tff.tensorflow.computation(keys_type, np.float64)
  def accumulate(keys, key):
    return tf.concat([keys, tf.reshape(key, [1])], 0)

  @tff.tensorflow.computation(keys_type, keys_type)
  def merge(a, b):
    return tf.concat([a, b], 0)

  @tff.tensorflow.computation(keys_type)
  def server_parameters(keys):
    return objective.server_parameters(keys)

  params_type = server_parameters.type_signature.result

  def weighted(out, key, params):
    """The client's (a u, a, h) of the objective (module table of
    `weighting`); a client with a non-finite update weighs 0."""
    finite = tf.cast(out['finite'], tf.float64)
    a, h = objective.scalars(out['loss'], out['sq_norm'], key, params)
    a, h = a * finite, h * finite
    return collections.OrderedDict(update=tf.nest.map_structure(
        lambda u: u * tf.cast(a, u.dtype), out['update']),
                                   a=a,
                                   h=h,
                                   loss=tf.cast(out['loss'], tf.float64),
                                   clients=tf.constant(1.0, tf.float64),
                                   weighted_clients=tf.cast(a > 0, tf.float64))

  if objective.ranks:

    @tff.tensorflow.computation(client_out_type, np.float64, params_type)
    def client_weighted(out, key, params):
      return weighted(out, key, params)
  else:

    @tff.tensorflow.computation(client_out_type)
    def client_weighted(out):
      return weighted(out, None, None)

  summed_type = client_weighted.type_signature.result

  @tff.tensorflow.computation(summed_type, params_type, round_type)
  def server_update(summed, params, round_state):
    update = tf.nest.map_structure(
        lambda u: u / tf.cast(tf.maximum(summed['h'], 1e-300), u.dtype),
        summed['update'])
    update = tf.nest.map_structure(
        lambda u: tf.where(summed['h'] > 0, u, tf.zeros_like(u)), update)
    train = collections.OrderedDict(loss=tf.math.divide_no_nan(
        summed['loss'], summed['clients']),
                                    num_clients=tf.cast(summed['clients'],
                                                        tf.int64))
    client_metrics = collections.OrderedDict(train=train)
    if objective.reports_tail:
      client_metrics['tail'] = collections.OrderedDict(
          threshold=params['tau'],
          tail_count=tf.cast(summed['weighted_clients'], tf.int64),
          boundary_weight=params['at'])
    new_round = collections.OrderedDict(round=round_state['round'] + 1)
    return update, client_metrics, new_round, _non_private_event_metrics()

  @tff.tensorflow.computation
  def no_parameters():
    return collections.OrderedDict(tau=tf.constant(0.0, tf.float64),
                                   above=tf.constant(0.0, tf.float64),
                                   at=tf.constant(0.0, tf.float64))

  def round_fn(client_state, aggregator_state, weights, data):
    out = tff.federated_map(client_train, (weights, data))
    if objective.ranks:
      keys = tff.federated_map(key_fn,
                               (out, tff.federated_broadcast(aggregator_state)))
      gathered = tff.federated_aggregate(
          keys, empty_keys(), accumulate, merge,
          tff.tensorflow.computation(lambda k: k, keys_type))
      params = tff.federated_map(server_parameters, gathered)
      contributions = tff.federated_map(
          client_weighted, (out, keys, tff.federated_broadcast(params)))
    else:
      params = tff.federated_eval(no_parameters, tff.SERVER)
      contributions = tff.federated_map(client_weighted, out)
    summed = tff.federated_sum(contributions)
    update, client_metrics, new_round, privacy_metrics = (_unzip4(
        tff.federated_map(server_update, (summed, params, aggregator_state))))
    return (client_state, new_round, update, client_metrics,
            tff.federated_value(collections.OrderedDict(),
                                tff.SERVER), privacy_metrics)

  return client_init_federated, aggregator_init, round_fn


def _select(value, key):
  """value[key] of a SERVER structure, at the SERVER."""
  member = value.type_signature.member

  def pick(x):
    return x[key]

  return tff.federated_map(tff.tensorflow.computation(pick, member), value)


def _unzip4(value):
  """Four SERVER values from a SERVER 4-tuple."""
  return tuple(_select(value, i) for i in range(4))


def _private_parts(spec, client_train, update_type):
  """DP-Delta-FL and DP-FedAvg (docs/notes/deltafl.md, steps 2a-2c)."""
  config = spec.privacy
  client_out_type = client_train.type_signature.result
  aggregator = config.update_factory().create(update_type)
  quantile = config.quantile_parameters()
  accountant_init, account = _accounting(config, update_type, quantile)
  tail = (_PrivateTail(config, spec.objective.tail_fraction, quantile,
                       client_out_type)
          if spec.objective.reports_tail else None)

  @tff.federated_computation
  def client_init():
    if tail is not None:
      return tff.federated_zip(
          collections.OrderedDict(quantile=tail.process.initialize()))
    return tff.federated_value(collections.OrderedDict(), tff.SERVER)

  @tff.federated_computation
  def aggregator_init():
    return tff.federated_zip(
        collections.OrderedDict(model_update=aggregator.initialize(),
                                accountant=tff.federated_eval(
                                    accountant_init, tff.SERVER)))

  @tff.tensorflow.computation(client_out_type)
  def whole_update(out):
    return out['update']

  summed_type = aggregator.next.type_signature.result.result.member
  measurement_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(summed_type, measurement_type)
  def mean_update(summed, measurements):
    n = tf.cast(measurements['participating_clients'], tf.float64)
    return _normalise(summed, config.expected_contributors(n))

  @tff.tensorflow.computation(measurement_type)
  def count_of(measurements):
    return tf.cast(measurements['participating_clients'], tf.int64)

  @tff.tensorflow.computation
  def no_loss():
    return collections.OrderedDict(train=collections.OrderedDict(
        loss=tf.constant(np.nan, tf.float64)))

  def round_fn(client_state, aggregator_state, weights, data):
    out = tff.federated_map(client_train, (weights, data))
    if tail is not None:
      values, read, new_client_state = tail.values(client_state, out)
    else:
      values = tff.federated_map(whole_update, out)
      new_client_state = client_state
    aggregated = aggregator.next(aggregator_state['model_update'], values)
    if tail is not None:
      update, client_metrics = tail.update_and_metrics(aggregated.result, read,
                                                       summed_type)
    else:
      update = tff.federated_map(mean_update,
                                 (aggregated.result, aggregated.measurements))
      client_metrics = tff.federated_eval(no_loss, tff.SERVER)
    n = tff.federated_map(count_of, aggregated.measurements)
    accounted = tff.federated_map(account, (aggregator_state['accountant'], n))
    new_accountant = tff.federated_map(
        tff.tensorflow.computation(lambda x: x[0],
                                   account.type_signature.result), accounted)
    privacy_metrics = tff.federated_map(
        tff.tensorflow.computation(lambda x: x[1],
                                   account.type_signature.result), accounted)
    new_aggregator_state = tff.federated_zip(
        collections.OrderedDict(model_update=aggregated.state,
                                accountant=new_accountant))
    return (new_client_state, new_aggregator_state, update, client_metrics,
            aggregated.measurements, privacy_metrics)

  return client_init, aggregator_init, round_fn


def _normalise(summed, normaliser):
  """The summed update divided by max(normaliser, 1) (TF)."""
  return tf.nest.map_structure(
      lambda u: u / tf.cast(tf.maximum(normaliser, 1.0), u.dtype), summed)


def _accounting(config, update_type, quantile):
  """(accountant_init, account): the DP processes' in-graph accountant
  (`running.TabulatedAccountant` of the round's event) and its privacy
  metrics for a round of n clients."""
  accountant = config.tabulated_accountant(update_type)
  planning_event = config.round_event(update_type, quantile=quantile)
  overrides = ('num_clients', 'sample_size')
  delta = config.delta

  @tff.tensorflow.computation
  def accountant_init():
    return collections.OrderedDict(
        (k, tf.constant(v)) for k, v in accountant.initial_state().items())

  accountant_type = accountant_init.type_signature.result

  @tff.tensorflow.computation(accountant_type, np.int64)
  def account(state, n):
    new_state = accountant.compose(state, n)
    counts = {name: n for name in overrides}
    metrics = collections.OrderedDict(
        dp_event=event_io.event_structure(planning_event, counts),
        round_epsilon=accountant.epsilon(
            accountant.compose(accountant.initial_state(), n), delta),
        epsilon=accountant.epsilon(new_state, delta),
        delta=tf.constant(delta, tf.float64),
        adversary=tf.constant(config.adversary.value))
    return new_state, metrics

  return accountant_init, account


class _PrivateTail:
  """DP-Delta-FL's steps 2a-2c (docs/notes/deltafl.md): the losses' quantile
  process, the tail read from its noisy CDF, the tail's update and its
  division by the private tail count."""

  def __init__(self, config, theta, quantile, client_out_type):
    upper, num_bins = config.loss_upper_bound, config.num_bins
    self.process = quantiles_lib.build_quantile_process_from_parameters(
        quantile, 0.0, upper, [1.0 - theta],
        quantiles_lib.QuantileEstimation(count=config.count,
                                         estimator='paper',
                                         min_total_stddevs=0.0))
    next_type = self.process.next.type_signature.result

    @tff.tensorflow.computation(client_out_type)
    def loss_of(out):
      return private_loss(out['loss'], out['num_examples'])

    @tff.tensorflow.computation(next_type.result.member,
                                next_type.measurements.member)
    def read_tail(result, measurements):
      """The bin k, Q, the private tail count; all from the noisy sum."""
      del result  # the CDF's eq. 1 bin is the estimate's (tested)
      return weighting.private_tail(
          measurements['cdf'], measurements['noisy_total'],
          config.expected_contributors(
              tf.cast(measurements['aggregator']['participating_clients'],
                      tf.float64)), theta, upper, num_bins, config.exact_count,
          config.histogram_tail_count)

    @tff.tensorflow.computation(client_out_type, np.int64)
    def tail_update(out, k):
      in_tail = weighting.in_tail(out['loss'], k, upper, num_bins)
      return tf.nest.map_structure(
          lambda u: tf.where(in_tail, u, tf.zeros_like(u)), out['update'])

    self._loss_of, self._read_tail = loss_of, read_tail
    self._tail_update = tail_update
    self.tail_type = read_tail.type_signature.result

  def _field(self, tail, name):
    return tff.federated_map(
        tff.tensorflow.computation(lambda t: t[name], self.tail_type), tail)

  def values(self, client_state, out):
    """(the clients' tail updates, (the tail, k, the quantile round's
    output), the new client state), in a federated computation."""
    q_out = self.process.next(client_state['quantile'],
                              tff.federated_map(self._loss_of, out))
    tail = tff.federated_map(self._read_tail,
                             (q_out.result, q_out.measurements))
    k = self._field(tail, 'bin')
    values = tff.federated_map(self._tail_update,
                               (out, tff.federated_broadcast(k)))
    new_client_state = tff.federated_zip(
        collections.OrderedDict(quantile=q_out.state))
    return values, (tail, k, q_out), new_client_state

  def update_and_metrics(self, summed, read, summed_type):
    """(the summed update / the tail count, the client metrics)."""
    tail, k, q_out = read

    @tff.tensorflow.computation(summed_type, self.tail_type)
    def tail_mean_update(summed, tail):
      return _normalise(summed, tail['tail_count'])

    update = tff.federated_map(tail_mean_update, (summed, tail))
    metrics = tff.federated_zip(
        collections.OrderedDict(
            train=tff.federated_zip(
                collections.OrderedDict(loss=self._field(tail, 'loss'))),
            tail=tff.federated_zip(
                collections.OrderedDict(
                    threshold=self._field(tail, 'threshold'),
                    bin=k,
                    tail_count=self._field(tail, 'tail_count'),
                    histogram_tail_count=self._field(tail,
                                                     'histogram_tail_count'),
                    fallback=self._field(tail, 'fallback'),
                    quantile=q_out.measurements))))
    return update, metrics
