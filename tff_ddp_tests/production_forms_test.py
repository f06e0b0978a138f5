"""Every process compiles to TFF's production forms with the secure sum intact.

MapReduceForm and DistributeAggregateForm are what production runtimes
execute. For every factory and process of the library (and FedAvg with our
aggregator): the client's contribution reaches the server only through
`federated_secure_modular_sum` (MapReduceForm: the plain `federated_aggregate`
and the other secure-sum kinds carry nothing; DistributeAggregateForm: the
client-to-server aggregation contains no unsecure aggregation), and one round
executed from the compiled MapReduceForm equals the process's own round (a
test seed makes both draw the same noise).
"""

import collections

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.aggregators import Request
from tff_ddp.analytics import build_quantile_process
from tff_ddp.analytics import QuantileSetting
from tff_ddp import queries
from tff_ddp_tests.learning import models

_VECTOR = tff.TensorType(np.float32, [8])


def _two_outputs(process):
  """process.next as (state, <result, measurements>): the shape the forms
  accept (TFF's compiler wants a (state, output) pair)."""
  parameter = process.next.type_signature.parameter

  learning = isinstance(process, tff.learning.templates.LearningProcess)

  @tff.federated_computation(parameter)
  def next_fn(arg):
    out = process.next(arg[0], arg[1])
    if learning:  # LearningProcessOutput(state, metrics)
      return out.state, out.metrics
    return out.state, tff.federated_zip(
        collections.OrderedDict(result=out.result,
                                measurements=out.measurements))

  return next_fn


def _is_empty(type_spec):
  return isinstance(type_spec, tff.StructType) and not list(
      tff.structure.iter_elements(type_spec))


def _leaves(type_spec):
  if isinstance(type_spec, tff.StructType):
    for _, element in tff.structure.iter_elements(type_spec):
      yield from _leaves(element)
  else:
    yield type_spec


def _dp_factory(query):
  return tff.aggregators.DifferentiallyPrivateFactory(
      query, record_aggregation_factory=query.record_aggregation_factory())


def _processes():
  """(name, process, client values) for every process of the library."""
  rng = np.random.default_rng(0)
  vectors = [rng.normal(size=8).astype(np.float32) for _ in range(3)]
  return [
      ('ddg',
       DiscreteGaussianSumFactory.from_tff_arguments(1.0, 3, 16, 1.0,
                                                     seed=1).create(_VECTOR),
       vectors),
      ('ddg_kashin',
       DiscreteGaussianSumFactory(Request(l2_clip=1.0,
                                          noise_multiplier=1.0,
                                          expected_clients_per_round=3,
                                          bits=16),
                                  encoder='kashin',
                                  seed=1).create(_VECTOR), vectors),
      ('ddg_self_sampled_noised_counts',
       DiscreteGaussianSumFactory.from_tff_arguments(1.0,
                                                     3,
                                                     16,
                                                     1.0,
                                                     client_sampling_rate=0.5,
                                                     count_noise_multiplier=1.0,
                                                     seed=1).create(_VECTOR),
       vectors),
      ('cpbm', PoissonBinomialSumFactory(1.0, 0.1, 64, 3,
                                         seed=1).create(_VECTOR), vectors),
      ('ddg_query_in_tff_dp_factory',
       _dp_factory(
           queries.DistributedDiscreteGaussianSumQuery(_VECTOR,
                                                       1.0,
                                                       3,
                                                       16,
                                                       1.0,
                                                       seed=1)).create(_VECTOR),
       vectors),
      ('quantiles_flat_ddg',
       build_quantile_process('flat', 'discrete_gaussian', 0.0, 1.0, 16, [0.5],
                              QuantileSetting(8, 2.0, 1e-5, seed=1)),
       list(rng.uniform(size=8).astype(np.float32))),
      ('quantiles_haar_cpbm',
       build_quantile_process('haar', 'poisson_binomial', 0.0, 1.0, 16,
                              [0.25, 0.75], QuantileSetting(8,
                                                            2.0,
                                                            1e-5,
                                                            seed=1)),
       list(rng.uniform(size=8).astype(np.float32))),
  ]


@pytest.mark.slow
class ProductionFormTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cases = {
        name: (process, values) for name, process, values in _processes()
    }

  @parameterized.parameters('ddg', 'ddg_kashin',
                            'ddg_self_sampled_noised_counts', 'cpbm',
                            'ddg_query_in_tff_dp_factory', 'quantiles_flat_ddg',
                            'quantiles_haar_cpbm')
  def test_secure_sum_only_and_one_round_from_the_form(self, name):
    process, values = self.cases[name]
    comp = _two_outputs(process)
    mrf = tff.backends.mapreduce.get_map_reduce_form_for_computation(comp)
    # work returns (federated_aggregate input, secure_sum_bitwidth input,
    # secure_sum_max_input input, secure_modular_sum input).
    work = mrf.work.type_signature.result
    aggregate, bitwidth, max_input, modular = [
        t for _, t in tff.structure.iter_elements(work)
    ]
    self.assertTrue(_is_empty(aggregate), aggregate)
    self.assertTrue(_is_empty(bitwidth), bitwidth)
    self.assertTrue(_is_empty(max_input), max_input)
    self.assertFalse(_is_empty(modular))
    self.assertTrue(all(
        np.dtype(t.dtype) == np.int32 for t in _leaves(modular)))
    daf = tff.backends.mapreduce.get_distribute_aggregate_form_for_computation(
        comp)
    tff.test.assert_not_contains_unsecure_aggregation(
        daf.client_to_server_aggregation)
    tff.test.assert_contains_secure_aggregation(
        daf.client_to_server_aggregation)
    # One round from the compiled form equals the process's own round.
    from_form = tff.backends.mapreduce.get_computation_for_map_reduce_form(mrf)
    state = process.initialize()
    expected = process.next(state, values)
    new_state, output = from_form(state, values)
    self.assertAllClose(output['result'], expected.result)
    self.assertEqual(
        new_state['round'] if 'round' in new_state else 1,
        expected.state['round'] if 'round' in expected.state else 1)


@pytest.mark.slow
class FedAvgFormTest(tf.test.TestCase):

  def test_model_update_goes_only_through_the_secure_sum(self):
    learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
        models.dense_model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=tff.aggregators.UnweightedMeanFactory(
            value_sum_factory=DiscreteGaussianSumFactory.from_tff_arguments(
                1.0, 2, 16, 1.0),
            count_sum_factory=tff.aggregators.SecureSumFactory(1, 0)))
    comp = _two_outputs(learning_process)
    mrf = tff.backends.mapreduce.get_map_reduce_form_for_computation(comp)
    aggregate, _, _, modular = [
        t
        for _, t in tff.structure.iter_elements(mrf.work.type_signature.result)
    ]
    # The model (4 x 2 + 2 = 10 floats) travels only in the secure sum; the
    # plain aggregate carries TFF's training metrics (loss, example counts),
    # a handful of scalars and no tensor of the model's size.
    model_size = 10
    self.assertGreaterEqual(
        sum(int(np.prod(t.shape)) for t in _leaves(modular)), model_size)
    for leaf in _leaves(aggregate):
      self.assertLess(int(np.prod(leaf.shape or (1,))), model_size, leaf)
