"""The TF Privacy DPQuery form: inside TFF's DifferentiallyPrivateFactory,
equal to the factories bit for bit, accounted, and usable without TFF."""

import collections

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import queries
from tff_ddp.accounting import accountant
from tff_ddp.accounting import event_io
from tff_ddp.accounting import events
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.aggregators import SkellamSumFactory

_VECTOR = tff.TensorType(np.float32, [10])
_STRUCT = tff.types.to_type(
    collections.OrderedDict(w=tff.TensorType(np.float32, [3, 2]),
                            b=tff.TensorType(np.float32, [2])))

# (name, query class, factory class, positional arguments after value_type)
_MECHANISMS = [
    ('ddg', queries.DistributedDiscreteGaussianSumQuery,
     DiscreteGaussianSumFactory.from_tff_arguments, (1.0, 5, 16, 1.0)),
    ('skellam', queries.DistributedSkellamSumQuery,
     SkellamSumFactory.from_tff_arguments, (1.0, 5, 16, 1.0)),
    ('cpbm', queries.PoissonBinomialSumQuery, PoissonBinomialSumFactory,
     (1.0, 0.2, 256, 5)),
]


def _dp_process(query, value_type):
  return tff.aggregators.DifferentiallyPrivateFactory(
      query,
      record_aggregation_factory=query.record_aggregation_factory()).create(
          value_type)


def _client_values(value_type, num_clients, seed=0):
  rng = np.random.default_rng(seed)
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  return [
      tf.nest.map_structure(
          lambda s: (0.2 * rng.normal(size=s.shape)).astype(np.float32), specs)
      for _ in range(num_clients)
  ]


@pytest.mark.slow
class InTffDifferentiallyPrivateFactoryTest(tf.test.TestCase,
                                            parameterized.TestCase):

  @parameterized.named_parameters(
      (f'{name}_{shape}', query_cls, factory_cls, args, value_type)
      for name, query_cls, factory_cls, args in _MECHANISMS
      for shape, value_type in (('vector', _VECTOR), ('struct', _STRUCT)))
  def test_equals_the_factory_and_accounts(self, query_cls, factory_cls, args,
                                           value_type):
    values = _client_values(value_type, 4)
    query = query_cls(value_type, *args, seed=11)
    factory = factory_cls(*args, seed=11)
    dp_process = _dp_process(query, value_type)
    ours = factory.create(value_type)
    state = dp_process.initialize()
    with self.assertRaisesRegex(ValueError, 'placeholder'):
      event_io.extract_dp_event(state)
    own_state = ours.initialize()
    for _ in range(2):  # the second round checks the round counter
      out = dp_process.next(state, values)
      own = ours.next(own_state, values)
      state, own_state = out.state, own.state
      # One round code (RoundProtocol): bitwise the same noise and decode.
      tf.nest.map_structure(np.testing.assert_array_equal,
                            tf.nest.flatten(out.result),
                            tf.nest.flatten(own.result))
      metrics = out.measurements['dp_query_metrics']
      for key, value in metrics.items():
        self.assertEqual(value, own.measurements[key], key)
      self.assertEqual(metrics['participating_clients'], 4)
    # The event: TFF's to/from_named_tuple round trip, ours reads it too.
    event = dp_accounting.DpEvent.from_named_tuple(state.dp_event)
    self.assertEqual(event, event_io.extract_dp_event(state))
    expected = event_io.explicit(factory.dp_event(value_type, num_clients=4))
    self.assertEqual(type(event), type(expected))
    for field in expected.__attrs_attrs__:
      self.assertEqual(getattr(event, field.name),
                       getattr(expected, field.name), field.name)
    for adversary in ('server', 'release'):
      self.assertEqual(
          accountant.epsilon(event, 1e-6, adversary=adversary),
          accountant.epsilon(factory.dp_event(value_type, num_clients=4),
                             1e-6,
                             adversary=adversary))

  def test_real_noise_scale_in_float64(self):
    # TF Privacy's query rounds the local scale up to an integer and its
    # event is UnsupportedDpEvent; ours keeps the exact float64 scale.
    query = queries.DistributedDiscreteGaussianSumQuery(_VECTOR,
                                                        1.0,
                                                        5,
                                                        16,
                                                        1.0,
                                                        seed=3)
    process = _dp_process(query, _VECTOR)
    out = process.next(process.initialize(), _client_values(_VECTOR, 5))
    event = event_io.extract_dp_event(out.state)
    self.assertIsInstance(event, events.DistributedDiscreteGaussianDpEvent)
    self.assertEqual(event.local_stddev, query.mechanism.scaled_local_stddev)
    self.assertNotEqual(event.local_stddev, np.ceil(event.local_stddev))
    self.assertEqual(event.num_clients, 5)


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class WithoutTffTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (name, query_cls, args) for name, query_cls, _, args in _MECHANISMS)
  def test_tf_privacy_loop_estimates_the_sum(self, query_cls, args):
    query = query_cls(_VECTOR, *args, seed=5)
    values = _client_values(_VECTOR, 5, seed=1)
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    sample = query.initial_sample_state()
    for value in values:
      sample = query.accumulate_record(params, sample, value)
    result, new_state, event = query.get_noised_result(sample, global_state)
    self.assertEqual(int(new_state['round']), 1)
    self.assertEqual(int(event.num_clients), 5)
    # Per coordinate the error is the decoded noise (stddev at most
    # `noise_stddev(5)`) plus, for DDG, the rounding: each client's rounding
    # vector has l2 norm <= gamma sqrt(d') / 2 in the rotated domain, which
    # the inverse rotation preserves, so <= 5 gamma sqrt(d') / 2 in any
    # coordinate of the sum. No clipping (norms ~0.2 sqrt(10) < l2_clip = 1).
    # 10 coordinates at 6 stddevs fail with probability < 1e-7 (sub-Gaussian
    # tails; the fixed seed makes the run deterministic).
    truth = np.sum(values, axis=0)
    mechanism = query.mechanism
    rounding = 5 * getattr(mechanism, 'gamma', 0.0) * np.sqrt(
        mechanism.output_dim) / 2
    bound = 6.0 * mechanism.noise_stddev(5) + rounding
    self.assertAllLessEqual(np.abs(result.numpy() - truth), bound)
    self.assertEqual(
        int(query.derive_metrics(new_state)['participating_clients']), 5)

  def test_records_are_in_the_ring(self):
    query = queries.DistributedDiscreteGaussianSumQuery(_VECTOR, 1.0, 5, 12,
                                                        1.0)
    params = query.derive_sample_params(query.initial_global_state())
    record = query.preprocess_record(params, np.ones(10, np.float32))
    self.assertEqual(query.modulus, 2**12)
    for tensor in tf.nest.flatten(record):
      self.assertEqual(tensor.dtype, tf.int32)
      self.assertAllInRange(tensor, 0, query.modulus - 1)
    sample = query.initial_sample_state()
    tf.nest.assert_same_structure(sample, record)

  def test_noise_seeds_differ_between_clients(self):
    # Two clients with equal values, no test seed: kernel entropy per
    # record, so their noised records differ (equal with probability
    # < 2^-100 at this scale).
    query = queries.DistributedDiscreteGaussianSumQuery(_VECTOR, 1.0, 5, 20,
                                                        1.0)
    params = query.derive_sample_params(query.initial_global_state())
    value = np.zeros(10, np.float32)
    first = query.preprocess_record(params, value)
    second = query.preprocess_record(params, value)
    self.assertNotAllEqual(first['encoded'], second['encoded'])

  def test_repr_names_the_configuration(self):
    query = queries.PoissonBinomialSumQuery(_VECTOR, 1.0, 0.2, 256, 5)
    self.assertIn('PoissonBinomialSumFactory(', repr(query))
    self.assertIn('theta=0.2', repr(query))


class ArgumentsTest(parameterized.TestCase):

  def test_not_a_factory(self):
    with self.assertRaisesRegex(TypeError, 'tff_ddp.aggregators factory'):
      queries.MechanismSumQuery(tff.aggregators.SumFactory(), _VECTOR)

  def test_bad_value_type(self):
    with self.assertRaises(TypeError):
      queries.DistributedDiscreteGaussianSumQuery('float32', 1.0, 5, 16, 1.0)

  def test_counts_need_one_ring(self):
    with self.assertRaisesRegex(ValueError, 'bits=30'):
      queries.DistributedDiscreteGaussianSumQuery(_VECTOR,
                                                  1.0,
                                                  5,
                                                  16,
                                                  1.0,
                                                  count_noise_multiplier=1.0)
    # In the 2^30 ring the noised counts fit.
    query = queries.DistributedDiscreteGaussianSumQuery(
        _VECTOR, 1.0, 100, 30, 1.0, count_noise_multiplier=1.0)
    self.assertIsInstance(query.planning_event(), dp_accounting.ComposedDpEvent)

  def test_client_count_must_fit_in_the_ring(self):
    # A valid factory configuration (the mechanism accepts it) whose ring
    # 2^12 is below 4 x 1100 expected clients.
    DiscreteGaussianSumFactory.from_tff_arguments(10.0, 1100, 12,
                                                  1.0).mechanism(_VECTOR)
    with self.assertRaisesRegex(ValueError, 'client count'):
      queries.DistributedDiscreteGaussianSumQuery(_VECTOR, 10.0, 1100, 12, 1.0)

  def test_factory_arguments_are_validated(self):
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      queries.DistributedDiscreteGaussianSumQuery(_VECTOR, -1.0, 5, 16, 1.0)


class ExplicitEventTest(parameterized.TestCase):

  def test_explicit_fields_keep_the_epsilon(self):
    ddg = events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=30.0,
                                                    local_stddev=10.5,
                                                    num_clients=7,
                                                    dimension=64)
    pbm = events.PoissonBinomialDpEvent(theta=0.1,
                                        num_trials=16,
                                        num_clients=7,
                                        dimension=64)
    composed = dp_accounting.ComposedDpEvent(
        [ddg, events.SelfSampledDpEvent(0.3, pbm)])
    for event in (ddg, pbm, composed):
      explicit = event_io.explicit(event)
      self.assertNotIn('None', repr(explicit))
      self.assertEqual(accountant.epsilon(explicit, 1e-6),
                       accountant.epsilon(event, 1e-6))
