"""DiscreteGaussianSumFactory: computation (types) and execution tests."""

import collections
import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import events
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.encoders import hadamard

_VECTOR = tff.TensorType(np.float32, [20])
_NESTED = collections.OrderedDict(
    a=tff.TensorType(np.float32, [2, 3]), b=tff.TensorType(np.float64, [5]))


def _factory(**kwargs):
  args = dict(noise_multiplier=1.0, expected_clients_per_round=3, bits=16,
              l2_clip=10.0, beta=math.exp(-0.5))
  args.update(kwargs)
  return DiscreteGaussianSumFactory(**args)


class ComputationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('vector', _VECTOR), ('nested', _NESTED))
  def test_type_signature_and_secure_only(self, value_type):
    value_type = tff.types.to_type(value_type)
    process = _factory().create(value_type)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    result_type = process.next.type_signature.result.result
    self.assertTrue(result_type.member.is_equivalent_to(value_type))
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    tff.test.assert_contains_secure_aggregation(process.next)

  def test_measurement_names(self):
    process = _factory().create(_VECTOR)
    names = {n for n, _ in tff.structure.iter_elements(
        process.next.type_signature.result.measurements.member)}
    for expected in ('l2_clip', 'scale', 'scaled_local_stddev', 'bits',
                     'padded_dimension', 'participating_clients',
                     'nonfinite_clients', 'clipped_clients',
                     'rounding_failures', 'near_boundary_coordinates',
                     'dp_event'):
      self.assertIn(expected, names)

  @parameterized.named_parameters(
      ('int', tff.TensorType(np.int32, [3]), 'float'),
      ('unknown_shape', tff.TensorType(np.float32, [None]), 'shape'),
  )
  def test_bad_value_type(self, value_type, message):
    with self.assertRaisesRegex(TypeError, message):
      _factory().create(value_type)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'rotation'):
      _factory(rotation='dense')
    with self.assertRaisesRegex(ValueError, 'kashin'):
      _factory(rotation='hadamard', iterations=3)
    with self.assertRaisesRegex(ValueError, 'bits'):
      _factory(bits=31)

  def test_dp_event(self):
    factory = _factory()
    event = factory.dp_event(_VECTOR)
    params = factory.parameters(_VECTOR)
    self.assertIsInstance(event, events.DistributedDiscreteGaussianDpEvent)
    self.assertEqual(event.num_clients, 3)
    self.assertEqual(event.dimension, 32)
    self.assertAlmostEqual(event.local_stddev, params.scaled_local_stddev)
    self.assertAlmostEqual(event.l2_sensitivity,
                           math.sqrt(params.norm_threshold))
    self.assertIsInstance(_factory(noise_multiplier=0.0).dp_event(_VECTOR),
                          dp_accounting.NonPrivateDpEvent)


class ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_sum_is_close_and_measurements_explain_the_round(self):
    factory = _factory(seed=1)
    process = factory.create(_VECTOR)
    params = factory.parameters(_VECTOR)
    rng = np.random.default_rng(0)
    clients = [rng.normal(size=20).astype(np.float32) for _ in range(3)]
    clients[2] *= 100  # norm ~ 450 > l2_clip = 10: clipped.
    state = process.initialize()
    output = process.next(state, clients)
    clipped = clients[2] * (10.0 / np.linalg.norm(clients[2]))
    expected = clients[0] + clients[1] + clipped
    # Central noise per coordinate ~ noise_multiplier * l2_clip = 10; the
    # rounding adds gamma/2 per client. Allow 6 standard deviations.
    tolerance = 6 * math.sqrt(10.0**2 + 3 * params.gamma**2)
    self.assertAllLess(np.abs(output.result - expected), tolerance)
    m = output.measurements
    self.assertEqual(m['participating_clients'], 3)
    self.assertEqual(m['clipped_clients'], 1)
    self.assertEqual(m['nonfinite_clients'], 0)
    self.assertEqual(m['rounding_failures'], 0)
    self.assertEqual(m['bits'], 16)
    self.assertEqual(m['padded_dimension'], 32)
    self.assertAllClose(m['scale'], 1 / params.gamma)
    self.assertEqual(m['dp_event']['num_clients'], 3)
    self.assertEqual(output.state['round'], 1)

  def test_kashin_rotation(self):
    factory = _factory(seed=2, rotation='kashin', noise_multiplier=0.01)
    process = factory.create(_VECTOR)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    params = factory.parameters(_VECTOR)
    encoder = factory.encoder(_VECTOR)
    self.assertGreater(encoder.output_dim, 20)
    self.assertEqual(params.padded_dim, encoder.output_dim)
    self.assertEqual(factory.dp_event(_VECTOR).dimension, encoder.output_dim)
    rng = np.random.default_rng(1)
    # Unit-norm inputs: the representations' norms (<= level) stay inside
    # the clip, so the expected sum is exact.
    clients = [v / np.linalg.norm(v) for v in
               (rng.normal(size=20).astype(np.float32) for _ in range(3))]
    self.assertLess(encoder.level, 10.0)
    output = process.next(process.initialize(), clients)
    m = output.measurements
    self.assertEqual(m['clipped_clients'], 0)
    self.assertEqual(m['padded_dimension'], encoder.output_dim)
    self.assertEqual(m['dp_event']['dimension'], encoder.output_dim)
    # The decode U (orthonormal rows) maps noise of variance v per
    # representation coordinate to variance <= v per output coordinate.
    # Central noise stddev 0.01 * 10 = 0.1, rounding gamma / 2 per client.
    tolerance = 6 * math.sqrt(0.1**2 + 3 * params.gamma**2)
    self.assertAllLess(np.abs(output.result - np.sum(clients, axis=0)),
                       tolerance)

  def test_no_rotation_with_integer_scaling(self):
    # The quantile paper's setting: count vectors, c = 1/gamma = 100, no
    # rotation; rounding is exact, so only the noise separates the result
    # from the sum. Central stddev = noise_multiplier * l2_clip = 0.05.
    value_type = tff.TensorType(np.float32, [8])
    factory = _factory(rotation='none', granularity=0.01, linf_clip=1.0,
                       l2_clip=1.0, noise_multiplier=0.05, seed=4)
    params = factory.parameters(value_type)
    self.assertEqual(params.padded_dim, 8)
    self.assertAlmostEqual(params.scale, 100.0)
    self.assertAlmostEqual(params.scaled_local_stddev,
                           0.05 * 100 / math.sqrt(3))
    process = factory.create(value_type)
    clients = [np.eye(8, dtype=np.float32)[i] for i in (1, 1, 5)]
    clients[2] = clients[2] * 3  # coordinate 3 > linf_clip: clipped to 1
    output = process.next(process.initialize(), clients)
    expected = np.zeros(8)
    expected[1], expected[5] = 2, 1
    self.assertAllLess(np.abs(output.result - expected), 6 * 0.05)
    self.assertEqual(output.measurements['clipped_clients'], 1)
    self.assertEqual(output.measurements['rounding_failures'], 0)

  def test_granularity_checks_the_ring(self):
    value_type = tff.TensorType(np.float32, [8])
    # n (c + 1) = 3 * 1001 > 2^12 / 2: refused, with the bits that fit.
    with self.assertRaisesRegex(ValueError, 'bits >= 1[3-9]'):
      _factory(rotation='none', granularity=0.001, bits=12,
               noise_multiplier=0.05).parameters(value_type)
    with self.assertRaisesRegex(ValueError, 'granularity'):
      _factory(rotation='none', granularity=-1.0).parameters(value_type)

  def test_unbiased_over_rounds(self):
    # Mean over R rounds of (estimate - sum) has stddev
    # sqrt(10^2 + rounding) / sqrt(R) per coordinate; test the mean over all
    # 20 coordinates too (stddev / sqrt(20 R)) at 5 standard errors.
    factory = _factory(noise_multiplier=1.0, seed=3)
    process = factory.create(_VECTOR)
    clients = [np.full(20, 0.5, np.float32) * (i + 1) for i in range(3)]
    expected = np.full(20, 3.0)
    state = process.initialize()
    errors = []
    for _ in range(10):
      output = process.next(state, clients)
      state = output.state
      errors.append(output.result - expected)
    se = math.sqrt(10.0**2 + 3 * factory.parameters(_VECTOR).gamma**2)
    self.assertLess(abs(np.mean(errors)), 5 * se / math.sqrt(200))

  def test_nested_structure_and_dtypes(self):
    process = _factory(noise_multiplier=0.0, bits=24, seed=0).create(_NESTED)
    value = collections.OrderedDict(a=np.ones([2, 3], np.float32),
                                    b=np.arange(5, dtype=np.float64) / 10)
    output = process.next(process.initialize(), [value, value])
    self.assertEqual(output.result['a'].dtype, np.float32)
    self.assertEqual(output.result['b'].dtype, np.float64)
    self.assertAllClose(output.result['a'], 2 * value['a'], atol=1e-3)
    self.assertAllClose(output.result['b'], 2 * value['b'], atol=1e-3)

  def test_nonfinite_client_is_counted_and_ignored(self):
    process = _factory(noise_multiplier=0.0, bits=24, seed=0).create(_VECTOR)
    good = np.full(20, 0.25, np.float32)
    bad = good.copy()
    bad[3] = np.nan
    worse = np.full(20, np.inf, np.float32)
    output = process.next(process.initialize(), [good, bad, worse])
    self.assertEqual(output.measurements['nonfinite_clients'], 2)
    self.assertEqual(output.measurements['participating_clients'], 3)
    self.assertTrue(np.all(np.isfinite(output.result)))
    self.assertAllClose(output.result, good, atol=1e-3)

  def test_seeded_runs_repeat_and_rounds_differ(self):
    clients = [np.full(20, 0.1, np.float32)] * 2
    outputs = []
    for _ in range(2):
      process = _factory(seed=7).create(_VECTOR)
      state = process.initialize()
      first = process.next(state, clients)
      second = process.next(first.state, clients)
      outputs.append((first.result, second.result))
    self.assertAllEqual(outputs[0][0], outputs[1][0])
    self.assertNotAllEqual(outputs[0][0], outputs[0][1])

  def test_default_noise_seeds_differ_between_clients(self):
    # Two clients with zero inputs (which round to exactly zero): the integer
    # sum is y1 + y2. A shared noise seed would make y1 = y2 and every
    # coordinate even; independent seeds make about half of them odd.
    value_type = tff.TensorType(np.float64, [64])
    factory = _factory(noise_multiplier=5.0, expected_clients_per_round=2)
    params = factory.parameters(value_type)
    process = factory.create(value_type)
    tf.random.set_seed(0)  # a global TF seed must not align client seeds
    zero = np.zeros(64, np.float64)
    state = process.initialize()
    output = process.next(state, [zero, zero])
    round_seed = tf.random.experimental.stateless_fold_in(
        state['rotation_seed'], state['round'])
    integers = np.round(hadamard.RandomizedHadamard(64).encode(
        tf.constant(output.result / params.gamma), round_seed).numpy())
    odd = np.mean(np.mod(integers, 2) == 1)
    # Binomial(64, 1/2) parity count: 0.5 +- 5 * 0.0625.
    self.assertGreater(odd, 0.5 - 5 * 0.0625)


@pytest.mark.slow
class FedAvgIntegrationTest(tf.test.TestCase):

  def test_model_aggregator_in_unweighted_fed_avg(self):
    def model_fn():
      keras_model = tf.keras.Sequential([
          tf.keras.layers.InputLayer(input_shape=(4,)),
          tf.keras.layers.Dense(2)])
      return tff.learning.models.from_keras_model(
          keras_model,
          input_spec=(tf.TensorSpec([None, 4], tf.float32),
                      tf.TensorSpec([None, 1], tf.int32)),
          loss=tf.keras.losses.SparseCategoricalCrossentropy(
              from_logits=True))

    learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=_factory(expected_clients_per_round=2, l2_clip=1.0))
    data = tf.data.Dataset.from_tensor_slices(
        (np.ones([4, 4], np.float32), np.zeros([4, 1], np.int32))).batch(2)
    state = learning_process.initialize()
    output = learning_process.next(state, [data, data])
    aggregator = output.metrics['aggregator']
    self.assertEqual(aggregator['participating_clients'], 2)
    self.assertEqual(aggregator['nonfinite_clients'], 0)


if __name__ == '__main__':
  tf.test.main()
