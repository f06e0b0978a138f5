"""PoissonBinomialSumFactory: computation (types) and execution tests."""

import collections
import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import RdpAccountant
from tff_ddp.accounting import events
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.encoders import hadamard

_VECTOR = tff.TensorType(np.float32, [20])
_NESTED = collections.OrderedDict(
    a=tff.TensorType(np.float32, [2, 3]), b=tff.TensorType(np.float64, [5]))


def _factory(**kwargs):
  args = dict(l2_clip=10.0, theta=0.25, num_trials=32,
              expected_clients_per_round=3)
  args.update(kwargs)
  return PoissonBinomialSumFactory(**args)


class ComputationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('vector_kashin', _VECTOR, 'kashin'), ('nested_kashin', _NESTED, 'kashin'),
      ('vector_hadamard', _VECTOR, 'hadamard'))
  def test_type_signature_and_secure_only(self, value_type, encoder):
    value_type = tff.types.to_type(value_type)
    process = _factory(encoder=encoder).create(value_type)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    result_type = process.next.type_signature.result.result
    self.assertTrue(result_type.member.is_equivalent_to(value_type))
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    tff.test.assert_contains_secure_aggregation(process.next)

  def test_measurement_names(self):
    process = _factory().create(_VECTOR)
    names = {n for n, _ in tff.structure.iter_elements(
        process.next.type_signature.result.measurements.member)}
    self.assertEqual(names, {
        'l2_clip', 'theta', 'coordinate_bound', 'num_trials', 'modulus', 'output_dimension',
        'participating_clients', 'nonfinite_clients', 'clipped_clients',
        'inexact_encodings', 'clipped_fraction', 'sum_may_wrap', 'dp_event'})

  @parameterized.named_parameters(
      ('int', tff.TensorType(np.int32, [3]), 'float'),
      ('unknown_shape', tff.TensorType(np.float32, [None]), 'shape'),
  )
  def test_bad_value_type(self, value_type, message):
    with self.assertRaisesRegex(TypeError, message):
      _factory().create(value_type)

  @parameterized.named_parameters(
      ('theta', dict(theta=0.3), 'theta'),
      ('trials', dict(num_trials=0), 'num_trials'),
      ('clip', dict(l2_clip=-1.0), 'l2_clip'),
      ('encoder', dict(encoder='dense'), 'encoder'),
      ('options_for_hadamard', dict(encoder='hadamard', iterations=3),
       'kashin'),
      ('overflow', dict(num_trials=2**29), 'num_trials <='),
      ('scaling', dict(scaling='l1'), 'scaling'),
      ('linf_needs_kashin', dict(scaling='linf', encoder='hadamard'),
       'kashin'),
  )
  def test_bad_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _factory(**kwargs)

  def test_dp_event_and_accountant(self):
    factory = _factory()
    event = factory.dp_event(_VECTOR)
    encoder = factory.encoder(_VECTOR)
    self.assertIsInstance(event, events.PoissonBinomialDpEvent)
    self.assertEqual((event.theta, event.num_trials, event.num_clients,
                      event.dimension),
                     (0.25, 32, 3, encoder.output_dim))
    self.assertGreater(encoder.output_dim, 20)
    accountant = RdpAccountant()
    accountant.compose(event, 2)
    self.assertTrue(math.isfinite(accountant.get_epsilon(1e-5)))
    self.assertEqual(factory.parameters(_VECTOR).modulus, 128)  # > 3 * 32


class ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters('kashin', 'hadamard')
  def test_sum_is_close_and_measurements_explain_the_round(self, encoder):
    factory = _factory(seed=1, encoder=encoder, num_trials=256)
    process = factory.create(_VECTOR)
    params = factory.parameters(_VECTOR)
    rng = np.random.default_rng(0)
    clients = [rng.normal(size=20).astype(np.float32) for _ in range(3)]
    clients[2] *= 100  # norm ~ 450 > l2_clip = 10: clipped.
    output = process.next(process.initialize(), clients)
    m = output.measurements
    self.assertEqual(m['participating_clients'], 3)
    self.assertEqual(m['clipped_clients'], 1)
    self.assertAllClose(m['clipped_fraction'], 1 / 3)
    self.assertEqual(m['nonfinite_clients'], 0)
    self.assertEqual(m['inexact_encodings'], 0)
    self.assertFalse(m['sum_may_wrap'])
    self.assertEqual(m['modulus'], params.modulus)
    self.assertEqual(m['output_dimension'], params.output_dim)
    self.assertEqual(m['dp_event']['num_clients'], 3)
    self.assertEqual(output.state['round'], 1)
    # The clipped client's representation has norm C = 10; the others are
    # far below. Per representation coordinate the estimate has stddev
    # <= sqrt(n C^2 / (4 m theta^2)) = 2.17; the decode is a contraction
    # (Parseval frame), so every output coordinate's stddev is at most that.
    # The signal: the first two clients exactly, plus the clipped client's
    # decoded representation, which has norm <= 10.
    expected = clients[0] + clients[1]
    bound = params.sum_stddev_bound(3)
    residual = output.result - expected
    self.assertLess(np.linalg.norm(residual),
                    10.0 + 6 * bound * math.sqrt(20))

  def test_unbiased_over_rounds(self):
    # Inputs well inside the clip: E[result] = sum. Mean over R rounds and
    # 20 coordinates has stddev <= bound / sqrt(20 R).
    factory = _factory(seed=3, encoder='hadamard')
    process = factory.create(_VECTOR)
    clients = [np.full(20, 0.5, np.float32) * (i + 1) for i in range(3)]
    expected = np.full(20, 3.0)
    state = process.initialize()
    errors = []
    rounds = 10
    for _ in range(rounds):
      output = process.next(state, clients)
      state = output.state
      errors.append(output.result - expected)
    bound = factory.parameters(_VECTOR).sum_stddev_bound(3)
    self.assertLess(abs(np.mean(errors)),
                    5 * bound / math.sqrt(20 * rounds))

  def test_nested_structure_and_dtypes(self):
    process = _factory(seed=0, num_trials=4096, l2_clip=4.0).create(_NESTED)
    value = collections.OrderedDict(a=np.ones([2, 3], np.float32),
                                    b=np.arange(5, dtype=np.float64) / 10)
    output = process.next(process.initialize(), [value, value])
    self.assertEqual(output.result['a'].dtype, np.float32)
    self.assertEqual(output.result['b'].dtype, np.float64)
    # stddev per coordinate <= sqrt(2 * 16 / (4 * 4096 / 16)) = 0.18.
    self.assertAllClose(output.result['a'], 2 * value['a'], atol=1.0)
    self.assertAllClose(output.result['b'], 2 * value['b'], atol=1.0)

  def test_nonfinite_client_is_counted_and_ignored(self):
    process = _factory(seed=0, num_trials=4096, l2_clip=2.0).create(_VECTOR)
    good = np.full(20, 0.25, np.float32)
    bad = good.copy()
    bad[3] = np.nan
    worse = np.full(20, np.inf, np.float32)
    output = process.next(process.initialize(), [good, bad, worse])
    self.assertEqual(output.measurements['nonfinite_clients'], 2)
    self.assertEqual(output.measurements['participating_clients'], 3)
    self.assertTrue(np.all(np.isfinite(output.result)))
    # stddev per coordinate <= sqrt(3 * 4 / (4 * 4096 / 16)) = 0.11.
    self.assertAllClose(output.result, good, atol=0.6)

  def test_more_clients_than_the_ring_is_flagged(self):
    factory = _factory(seed=0, num_trials=4, expected_clients_per_round=2)
    process = factory.create(_VECTOR)
    self.assertEqual(factory.parameters(_VECTOR).modulus, 16)
    clients = [np.zeros(20, np.float32)] * 5  # 5 * 4 = 20 >= 16
    output = process.next(process.initialize(), clients)
    self.assertTrue(output.measurements['sum_may_wrap'])
    self.assertEqual(output.measurements['participating_clients'], 5)

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
    # Two clients with zero inputs: S = Z_1 + Z_2 with Z_i ~ Bin(m, 1/2).
    # A shared noise seed would make Z_1 = Z_2 and every S even;
    # independent seeds make about half of them odd.
    value_type = tff.TensorType(np.float64, [64])
    factory = _factory(encoder='hadamard', expected_clients_per_round=2,
                       num_trials=8, l2_clip=1.0)
    process = factory.create(value_type)
    tf.random.set_seed(0)  # a global TF seed must not align client seeds
    zero = np.zeros(64, np.float64)
    state = process.initialize()
    output = process.next(state, [zero, zero])
    round_seed = tf.random.experimental.stateless_fold_in(
        state['rotation_seed'], state['round'])
    # result = decode(C / (m theta) (S - m)): recover S.
    y = hadamard.RandomizedHadamard(64).encode(
        tf.constant(output.result), round_seed).numpy()
    sums = np.round(y * 8 * 0.25 / 1.0 + 8).astype(np.int64)
    odd = np.mean(np.mod(sums, 2) == 1)
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
    self.assertEqual(aggregator['inexact_encodings'], 0)


if __name__ == '__main__':
  tf.test.main()
