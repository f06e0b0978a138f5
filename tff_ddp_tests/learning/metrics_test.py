"""Client metrics of TFF's learning builders: withheld, or noised and
accounted; one event per round; FedAvg on neighbouring datasets."""

import collections
import math
import warnings

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp import learning
from tff_ddp.accounting import event_io
from tff_ddp.learning import aggregator
from tff_ddp.learning import metrics as metrics_lib

_FEATURES = 4
# A fixed initial model: every build starts from the same weights, so the
# clients of two processes compute the same metrics in their first round.
_W0 = np.array([[0.5, -0.25], [0.1, 0.3], [-0.4, 0.2], [0.05, -0.1]],
               np.float32)


def _model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(_FEATURES,)),
      tf.keras.layers.Dense(
          2, kernel_initializer=tf.keras.initializers.Constant(_W0))
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=(tf.TensorSpec([None, _FEATURES],
                                tf.float32), tf.TensorSpec([None, 1],
                                                           tf.int32)),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def _dataset(client, num_examples):
  rng = np.random.default_rng(client)
  x = rng.normal(size=[num_examples, _FEATURES]).astype(np.float32)
  y = rng.integers(0, 2, size=[num_examples, 1]).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)


def _finalizers():
  with tf.Graph().as_default():
    return _model_fn().metric_finalizers()


def _quiet(fn, *args, **kwargs):
  """fn(...) without the seed= warning (tests use seed= on purpose)."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', UserWarning)
    return fn(*args, **kwargs)


# Keras' unfinalized metrics of this model: loss = [sum of batch losses x
# batch size, examples], num_examples, num_batches: k = 4 coordinates.
_BOUNDS = collections.OrderedDict(loss=[30.0, 6], num_examples=6, num_batches=3)
_K = 4


class ArgumentsTest(tf.test.TestCase):

  def test_refusals_name_the_argument(self):
    cases = [
        (dict(metric_bounds={}), TypeError, 'metric_bounds'),
        (dict(metric_bounds=[('loss', 1.0)]), TypeError, 'metric_bounds'),
        (dict(metric_bounds={'loss': -1.0}), ValueError,
         r"metric_bounds\['loss'\]"),
        (dict(metric_bounds={'loss': [1.0, math.inf]}), ValueError,
         r"metric_bounds\['loss'\]\[1\]"),
        (dict(metric_bounds={'dp_event': 1.0}), ValueError, 'dp_event'),
        (dict(noise_multiplier=0.0), ValueError, 'noise_multiplier'),
        (dict(expected_clients_per_round=0), ValueError,
         'expected_clients_per_round'),
        (dict(bits=40), ValueError, 'bits'),
    ]
    for change, error, message in cases:
      args = dict(noise_multiplier=1.0,
                  expected_clients_per_round=4,
                  metric_bounds=_BOUNDS)
      args.update(change)
      with self.assertRaisesRegex(error, message, msg=str(change)):
        learning.noised_metrics(**args)

  def test_metric_names_and_tensor_counts_are_checked(self):
    with self.assertRaisesRegex(ValueError, r"\['accuracy'\].*num_batches"):
      learning.noised_metrics(1.0, 4, {'accuracy': 1.0})(_finalizers())
    with self.assertRaisesRegex(TypeError, 'metric_finalizers'):
      learning.withhold_metrics({'loss': 3})
    # loss has two unfinalized tensors: three bounds are refused at tracing.
    aggregate = learning.noised_metrics(1.0, 4, {'loss': [1.0, 2.0, 3.0]})(
        _finalizers())
    metrics_type = tff.FederatedType(_unfinalized_type(), tff.CLIENTS)
    with self.assertRaisesRegex(ValueError, r"metric_bounds\['loss'\] has 3"):
      tff.federated_computation(lambda m: aggregate(m), metrics_type)  # pylint: disable=unnecessary-lambda  # TFF traces a Python function, not a computation

  def test_noise_stddevs_and_repr(self):
    noised = learning.noised_metrics(2.0, 4, _BOUNDS, seed=3)
    stddevs = noised.noise_stddevs(_K)
    # z sqrt(k) b: 2 * 2 * b.
    self.assertEqual(stddevs['loss'], [120.0, 24.0])
    self.assertEqual(stddevs['num_batches'], [12.0])
    self.assertIn('noise_multiplier=2.0', repr(noised))
    self.assertIn('seed=3', repr(noised))


def _unfinalized_type():
  with tf.Graph().as_default():
    model = _model_fn()
    metrics = model.report_local_unfinalized_metrics()
    return tff.types.tensorflow_to_type(
        tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype),
                              metrics))


class LayoutTest(tf.test.TestCase):

  def test_normalise_and_restore_invert_each_other(self):
    layout = metrics_lib._Layout(  # pylint: disable=protected-access  # tests a private part
        tff.types.to_type(
            collections.OrderedDict(loss=[np.float32, np.float32],
                                    num_examples=[np.int64],
                                    num_batches=[np.int64])),
        metrics_lib._metric_bounds(  # pylint: disable=protected-access  # tests a private part
            {
                'loss': [30.0, 6],
                'num_examples': 6
            }),
        _finalizers())
    self.assertEqual(layout.dim, 3)  # num_batches withheld
    np.testing.assert_array_equal(layout.bounds, [30.0, 6.0, 6.0])
    metrics = collections.OrderedDict(loss=[tf.constant(4.5),
                                            tf.constant(3.0)],
                                      num_examples=[tf.constant(3, tf.int64)],
                                      num_batches=[tf.constant(2, tf.int64)])
    flat = layout.normalise(metrics)
    np.testing.assert_allclose(flat, [0.15, 0.5, 0.5])
    restored = layout.restore(flat)
    self.assertEqual(list(restored), ['loss', 'num_examples'])
    self.assertAllClose(restored['loss'], [4.5, 3.0])
    self.assertEqual(restored['num_examples'][0].dtype, tf.int64)
    self.assertEqual(int(restored['num_examples'][0]), 3)


class EmptyClientTest(tf.test.TestCase):

  def test_a_client_without_examples_sends_zeros(self):
    """The neighbour 'a client's examples removed' is the zero-out pair
    the metrics' event is accounted for: TFF's client update on an empty
    dataset reports all-zero unfinalized Keras metrics."""
    from tensorflow_federated.python.learning.templates import model_delta_client_work
    update = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        _model_fn,
        weighting=tff.learning.ClientWeighting.UNIFORM,
        loop_implementation=tff.learning.LoopImplementation.DATASET_REDUCE)
    weights = tff.learning.models.ModelWeights(
        trainable=[tf.constant(_W0), tf.zeros([2])], non_trainable=[])
    result, unfinalized = update(tff.learning.optimizers.build_sgdm(0.1),
                                 weights, _dataset(0, 0))
    for leaf in tf.nest.flatten(unfinalized):
      self.assertEqual(float(leaf), 0.0)
    for leaf in tf.nest.flatten(result.update):
      self.assertAllEqual(leaf, tf.zeros_like(leaf))


def _run_alone(metrics_aggregator, client_metrics):
  """The aggregator's computation on these clients' unfinalized metrics."""
  aggregate = metrics_aggregator(_finalizers())
  comp = tff.federated_computation(
      lambda m: aggregate(m),  # pylint: disable=unnecessary-lambda  # TFF traces a Python function, not a computation
      tff.FederatedType(_unfinalized_type(), tff.CLIENTS))
  return comp(client_metrics)


def _client_metrics(loss_sum, examples, batches):
  return collections.OrderedDict(
      loss=[np.float32(loss_sum), np.float32(examples)],
      num_examples=[np.int64(examples)],
      num_batches=[np.int64(batches)])


class AggregatorsTest(tf.test.TestCase):

  def test_withheld_releases_nothing(self):
    out = _run_alone(learning.withhold_metrics,
                     [_client_metrics(4.0, 6, 3)] * 3)
    self.assertEqual(len(out), 0)

  def test_noised_metrics_are_noisy_sums_with_their_event(self):
    """The finalized metrics are the finalizers of noisy sums within the
    noise's stddev, and the round's dp_event is the planning event with the
    3 clients measured.

    Tolerance: the sum of a coordinate of bound b has central noise
    z sqrt(k) b (z = 1, k = 4: 2 b) plus the DDG's conditional rounding,
    at most gamma per client (gamma ~ 1e-5 b here); 6 stddevs. The seed
    fixes the draw."""
    clients = [
        _client_metrics(4.0, 6, 3),
        _client_metrics(3.0, 5, 3),
        _client_metrics(6.0, 6, 3)
    ]
    noised = _quiet(learning.noised_metrics, 1.0, 3, _BOUNDS, seed=5)
    out = _run_alone(noised, clients)
    sd = noised.noise_stddevs(_K)
    self.assertLess(abs(out['num_examples'] - 17), 6 * sd['num_examples'][0])
    self.assertLess(abs(out['num_batches'] - 9), 6 * sd['num_batches'][0])
    self.assertNotEqual(out['num_examples'], 17)  # not the exact count
    self.assertEqual(out['secure_sum_measurements']['participating_clients'], 3)
    event = accounting.extract_dp_event(out)
    self.assertEqual(event, noised.dp_event(_K, num_clients=3))
    self.assertIsInstance(event, accounting.DistributedDiscreteGaussianDpEvent)
    self.assertEqual(event.dimension, _K)

  def test_out_of_bound_values_are_clipped(self):
    """A client's coordinate beyond its bound counts as the bound: with
    one client of 1000 examples (bound 6) the noisy count is within the
    noise of 6 (z = 0.01: stddev 0.01 * 2 * 6 = 0.12; 6 stddevs)."""
    noised = _quiet(learning.noised_metrics, 0.01, 1, _BOUNDS, seed=6)
    out = _run_alone(noised, [_client_metrics(10.0, 1000, 3)])
    self.assertLess(abs(out['num_examples'] - 6), 6 * 0.12 + 1)


class RoundDpEventTest(tf.test.TestCase):
  """round_dp_event on the layouts of TFF's and tff_ddp's processes."""

  def _event(self, event):

    @tff.tensorflow.computation
    def measured():
      return event_io.event_structure(event)

    return measured()

  def test_exact_client_metrics_are_refused(self):
    ddg = accounting.DistributedDiscreteGaussianDpEvent(2.0, 1.0, 4, 8)
    metrics = collections.OrderedDict(
        distributor=(),
        client_work=collections.OrderedDict(train=collections.OrderedDict(
            loss=1.03, num_examples=24, num_batches=12)),
        aggregator=collections.OrderedDict(l2_clip=0.1,
                                           dp_event=self._event(ddg)),
        finalizer=collections.OrderedDict(update_non_finite=0))
    with self.assertRaisesRegex(ValueError,
                                'client_work/train/num_examples.*withhold'):
      learning.round_dp_event(metrics)
    # Withheld: only the model aggregator's event.
    metrics['client_work'] = collections.OrderedDict(
        train=collections.OrderedDict())
    self.assertEqual(learning.round_dp_event(metrics), ddg)
    # Noised: both, composed.
    other = accounting.DistributedDiscreteGaussianDpEvent(3.0, 1.0, 4, 4)
    metrics['client_work']['train'] = collections.OrderedDict(
        loss=1.0, dp_event=self._event(other))
    self.assertEqual(learning.round_dp_event(metrics),
                     dp_accounting.ComposedDpEvent([other, ddg]))
    # A model aggregator without an event.
    metrics['aggregator'] = collections.OrderedDict(mean_value=())
    with self.assertRaisesRegex(ValueError, 'ddp_secure_aggregator'):
      learning.round_dp_event(metrics)
    with self.assertRaisesRegex(TypeError, 'metrics'):
      learning.round_dp_event(3.0)


def _leaves(value, path=''):
  """path -> numpy leaf of a nested structure (mappings, namedtuples,
  lists)."""
  mapping = event_io.as_mapping(value)
  if mapping is not None:
    out = {}
    for key, v in mapping.items():
      out.update(_leaves(v, f'{path}/{key}'))
    return out
  if isinstance(value, (list, tuple)):
    out = {}
    for i, v in enumerate(value):
      out.update(_leaves(v, f'{path}/{i}'))
    return out
  return {path: np.asarray(value)}


def _differing(a, b):
  la, lb = _leaves(a), _leaves(b)
  assert la.keys() == lb.keys()
  return sorted(p for p in la if not np.array_equal(la[p], lb[p]))


# What may differ between neighbours: releases of noised, accounted secure
# sums and functions of them (the factories' documentation): the model and
# the clip (the DDG mean and the noisy clip count of ddp_secure_aggregator),
# the noised client metrics.
_NOISED = ('/state/global_model_weights/', '/state/aggregator/l2_clip',
           '/metrics/aggregator/l2_clip', '/metrics/aggregator/scale_factor',
           '/metrics/aggregator/below_clip_fraction',
           '/metrics/aggregator/next_l2_clip',
           '/metrics/client_work/train/loss',
           '/metrics/client_work/train/num_examples',
           '/metrics/client_work/train/num_batches')


@pytest.mark.slow
class FedAvgNeighboursTest(tf.test.TestCase):
  """TFF's FedAvg with tff_ddp's model and metrics aggregators on
  neighbouring datasets: 4 clients of 6 examples, or the last with none
  (its examples removed; it still takes part, as the server sees)."""

  def _build(self, metrics_aggregator):
    model_aggregator = _quiet(aggregator.DdpMeanFactory,
                              0.3,
                              4,
                              20,
                              True,
                              'hd',
                              seed=11)
    return tff.learning.algorithms.build_unweighted_fed_avg(
        _model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=model_aggregator,
        metrics_aggregator=metrics_aggregator)

  def _rounds(self, process, last_client_examples, rounds):
    data = [_dataset(c, 6) for c in range(3)
           ] + [_dataset(3, last_client_examples)]
    state, outputs = process.initialize(), []
    for _ in range(rounds):
      output = process.next(state, data)
      state = output.state
      outputs.append(output)
    return outputs

  def test_every_leaf_that_differs_is_noised_and_accounted(self):
    # The control: TFF's default metrics aggregator sends exact sums (a
    # non-secure federated_sum), and this comparison catches it.
    control = self._build(tff.learning.metrics.sum_then_finalize)
    with self.assertRaises(AssertionError):
      tff.test.assert_not_contains_unsecure_aggregation(control.next)
    (whole,), (removed,) = (self._rounds(control, n, 1) for n in (6, 0))
    exact = {}
    for path in _differing({'metrics': whole.metrics},
                           {'metrics': removed.metrics}):
      if path.startswith('/metrics/client_work/'):
        exact[path] = (_leaves(whole.metrics, '/metrics')[path],
                       _leaves(removed.metrics, '/metrics')[path])
    self.assertEqual(
        {
            p: tuple(int(v) for v in pair)
            for p, pair in exact.items()
            if not p.endswith('loss')
        }, {
            '/metrics/client_work/train/num_examples': (24, 18),
            '/metrics/client_work/train/num_batches': (12, 9)
        })
    self.assertIn('/metrics/client_work/train/loss', exact)
    with self.assertRaisesRegex(ValueError, 'num_examples'):
      learning.round_dp_event(whole.metrics)

    # Withheld: nothing leaves the clients but the model's secure sum.
    tff.test.assert_not_contains_unsecure_aggregation(
        self._build(learning.withhold_metrics).next)

    noised = _quiet(learning.noised_metrics, 2.0, 4, _BOUNDS, seed=12)
    process = self._build(noised)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    ours = [self._rounds(process, n, 2) for n in (6, 0)]
    accountant = accounting.RdpAccountant(adversary='server')
    for t in range(2):
      a, b = ours[0][t], ours[1][t]
      differing = _differing({
          'metrics': a.metrics,
          'state': a.state
      }, {
          'metrics': b.metrics,
          'state': b.state
      })
      self.assertNotEmpty(differing)
      for path in differing:
        self.assertTrue(path.startswith(_NOISED), f'round {t}: {path}')
      # No exact pair of the control's reaches the server (its first
      # round ran the same clients from the same model).
      leaves = (_leaves(a.metrics, '/metrics'), _leaves(b.metrics, '/metrics'))
      for path in leaves[0]:
        for pair in exact.values():
          self.assertFalse(
              np.array_equal(leaves[0][path], pair[0]) and
              np.array_equal(leaves[1][path], pair[1]),
              f'round {t}: {path} is the exact {pair}')
      # One event per round: the noised metrics' and the model's.
      event = learning.round_dp_event(a.metrics)
      self.assertEqual(event, learning.round_dp_event(b.metrics))
      self.assertEqual(
          event,
          dp_accounting.ComposedDpEvent(
              [noised.dp_event(_K, num_clients=4),
               process_event(a.metrics)]))
      accountant.compose(event)
    # The metrics' cost is counted: more than the model's alone.
    model_only = accounting.RdpAccountant(adversary='server')
    model_only.compose(process_event(ours[0][0].metrics), 2)
    self.assertGreater(accountant.get_epsilon(1e-5),
                       model_only.get_epsilon(1e-5))
    self.assertTrue(math.isfinite(accountant.get_epsilon(1e-5)))


class OtherBuildersTest(tf.test.TestCase):
  """What docs/learning.md says of TFF's other learning builders."""

  def test_weighted_fed_avg_refuses_the_unweighted_aggregator(self):
    # A weighted mean sums the clients' weights (example counts) at the
    # server; TFF's type check refuses our unweighted factory first.
    with self.assertRaisesRegex(TypeError, 'WeightedAggregationFactory'):
      tff.learning.algorithms.build_weighted_fed_avg(
          _model_fn,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
          model_aggregator=learning.ddp_secure_aggregator(0.3, 4),
          metrics_aggregator=learning.withhold_metrics)

  def test_dropped_weights_are_refused_at_build_time(self):
    # TFF's wrapper ignores the weights: a builder that weights the clients
    # (FedAvg's default NUM_EXAMPLES, FedSGD's example counts) would average
    # uniformly without a word.
    weighted = tff.aggregators.as_weighted_aggregator(
        learning.ddp_secure_aggregator(0.3, 4))
    sgd = tff.learning.optimizers.build_sgdm(0.1)
    builds = {
        'NUM_EXAMPLES':
            lambda: tff.learning.algorithms.build_weighted_fed_avg(
                _model_fn,
                client_optimizer_fn=sgd,
                model_aggregator=weighted,
                metrics_aggregator=learning.withhold_metrics),
        "example counts":
            lambda: tff.learning.algorithms.build_fed_sgd(
                _model_fn,
                model_aggregator=weighted,
                metrics_aggregator=learning.withhold_metrics),
    }
    for how, build in builds.items():
      with self.subTest(how), self.assertRaises(ValueError) as raised:
        build()
      message = str(raised.exception)
      self.assertIn(how, message)
      self.assertIn('client_weighting=tff.learning.ClientWeighting.UNIFORM',
                    message)
      self.assertIn('as_uniform_weighted_aggregator', message)
      self.assertNotIn('\n', message)

  def test_uniform_weighting_stated_builds(self):
    # Outside a TFF builder (the user's own create) TFF's wrapper is fine.
    weighted = tff.aggregators.as_weighted_aggregator(
        learning.ddp_secure_aggregator(0.3, 4))
    process = weighted.create(tff.TensorType(np.float32, [3]),
                              tff.TensorType(np.float32))
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    with self.assertRaisesRegex(TypeError, 'UnweightedAggregationFactory'):
      learning.as_uniform_weighted_aggregator(tff.aggregators.MeanFactory())
    self.assertEqual(
        repr(
            learning.as_uniform_weighted_aggregator(
                learning.ddp_secure_aggregator(0.3, 4))),
        'as_uniform_weighted_aggregator(ddp_secure_aggregator('
        'noise_multiplier=0.3, expected_clients_per_round=4, bits=20, '
        "zeroing=True, rotation_type='hd'))")

  @pytest.mark.slow
  def test_uniform_weighted_fed_avg_and_fed_sgd_aggregate_securely(self):
    """With the weights ignored (as_weighted_aggregator) and the metrics
    withheld, nothing of the clients' reaches the server but secure sums
    (TFF's structural check of the whole round)."""
    weighted = tff.aggregators.as_weighted_aggregator(
        learning.ddp_secure_aggregator(0.3, 4))
    fed_avg = tff.learning.algorithms.build_weighted_fed_avg(
        _model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
        model_aggregator=weighted,
        metrics_aggregator=learning.withhold_metrics)
    fed_sgd = tff.learning.algorithms.build_fed_sgd(
        _model_fn,
        model_aggregator=(learning.as_uniform_weighted_aggregator(
            learning.ddp_secure_aggregator(0.3, 4))),
        metrics_aggregator=learning.withhold_metrics)
    for process in (fed_avg, fed_sgd):
      tff.test.assert_not_contains_unsecure_aggregation(process.next)


def process_event(metrics):
  """The model aggregator's event of a round."""
  return accounting.extract_dp_event(metrics['aggregator'])
