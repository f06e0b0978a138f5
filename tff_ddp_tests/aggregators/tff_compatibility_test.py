"""DiscreteGaussianSumFactory.from_tff_arguments as a drop-in for TFF's
DistributedDpSumFactory.

The cases of TFF 0.87's tests of `distributed_dp.DistributedDpSumFactory`
(computation: types and argument errors; execution: sums and noise), run
against our factory's `from_tff_arguments` with TFF's argument names. Where we differ on purpose,
the difference is asserted here rather than skipped:

* `mechanism` defaults to 'distributed_dgauss' here (TFF:
  'distributed_skellam'); 'distributed_skellam' draws Skellam noise from a
  certified alias table (`tff_ddp.mechanisms.skellam_table`; the exact
  `poisson` sampler with noise_sampler='exact') and is accounted by the
  Skellam RDP.
  `rotation_type='dft'` is the randomized DFT of `tff_ddp.encoders.dft`
  (complex phases rather than TFF's real signs).
* `bits` goes up to 30 (TFF stops at 22): bits=25 is accepted.
* `auto_l2_clip=True` is private and accounted (the clip count is noised
  and its event composed into the round's; TFF's is not accounted); the
  state then holds `l2_clip`. Its cases are in `adaptive_clip_test`.
* Measurements use float64 / int64 (TFF: float32 / int32) and carry
  `dp_event` instead of `dp_query_metrics`; the state is one flat structure
  instead of TFF's nested factory states.
* Plain `tff.StructType` values (named or not) are accepted.
"""

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

_STRUCT = [(np.float32, (2, 2)), np.float32]
_NESTED = collections.OrderedDict(a=[np.float32, [(np.float32, (2, 2, 1))]],
                                  b=(np.float32, (3,)))


def _nested_value(value):
  return collections.OrderedDict(
      a=[np.array(value, np.float32), [np.full([2, 2, 1], value, np.float32)]],
      b=np.full([3], value, np.float32))


def _factory(**kwargs):
  args = dict(noise_multiplier=0.5,
              expected_clients_per_round=100,
              bits=16,
              l2_clip=0.1)
  args.update(kwargs)
  return DiscreteGaussianSumFactory.from_tff_arguments(**args)


def _names(struct_type):
  return {n for n, _ in tff.structure.iter_elements(struct_type)}


_TFF_MEASUREMENTS = ('l2_clip', 'scale_factor', 'scaled_inflated_l2',
                     'scaled_local_stddev', 'actual_num_clients', 'padded_dim')


class ComputationTest(tf.test.TestCase, parameterized.TestCase):

  def test_takes_tffs_keywords_and_defaults(self):
    # TFF's signature: its first eight parameters are from_tff_arguments'
    # named ones, in order, with TFF's defaults except mechanism and
    # rotation_type (ours on purpose, module docstring); the other four are
    # its **options, with TFF's defaults.
    import inspect
    from tff_ddp.aggregators import discrete_gaussian
    theirs = list(
        inspect.signature(tff.aggregators.distributed_dp.DistributedDpSumFactory
                         ).parameters.values())
    ours = [
        p for p in inspect.signature(
            DiscreteGaussianSumFactory.from_tff_arguments).parameters.values()
        if p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    self.assertEqual([p.name for p in ours], [p.name for p in theirs[:8]])
    for mine, tffs in zip(ours, theirs[:8]):
      if mine.name not in ('mechanism', 'rotation_type'):
        self.assertEqual(mine.default, tffs.default, mine.name)
    self.assertEqual(discrete_gaussian.TFF_ADAPTIVE_KEYWORDS,
                     {p.name: p.default for p in theirs[8:]})
    every = dict(noise_multiplier=0.5,
                 expected_clients_per_round=100,
                 bits=16,
                 l2_clip=0.1,
                 modclip_prob=1e-4,
                 beta=0.0,
                 mechanism='distributed_skellam',
                 rotation_type='dft',
                 auto_l2_clip=True,
                 auto_l2_target_quantile=0.5,
                 auto_l2_lr=0.2,
                 auto_l2_clip_count_stddev=None)
    self.assertEqual(set(every), {p.name for p in theirs})
    factory = DiscreteGaussianSumFactory.from_tff_arguments(**every)
    from tff_ddp.mechanisms import base
    self.assertEqual(
        factory.mechanism(tff.TensorType(np.float32, [8])).name,
        base.Kind.SKELLAM)

  @parameterized.product(
      value_type=[np.int64, np.float32, _STRUCT, _NESTED],
      mechanism=['distributed_dgauss', 'distributed_skellam'])
  def test_type_properties(self, value_type, mechanism):
    factory = _factory(mechanism=mechanism)
    self.assertIsInstance(factory, tff.aggregators.UnweightedAggregationFactory)
    value_type = tff.types.to_type(value_type)
    process = factory.create(value_type)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    next_type = process.next.type_signature
    self.assertTrue(
        next_type.parameter.value.is_equivalent_to(
            tff.FederatedType(value_type, tff.CLIENTS)))
    self.assertTrue(
        next_type.result.result.is_equivalent_to(
            tff.FederatedType(value_type, tff.SERVER)))
    measurements = next_type.result.measurements.member
    names = _names(measurements)
    # TFF's measurement names are all there (dtypes: float64 / int64).
    for name in _TFF_MEASUREMENTS:
      self.assertIn(name, names)
    self.assertEqual(measurements['l2_clip'], tff.TensorType(np.float64))
    self.assertEqual(measurements['actual_num_clients'],
                     tff.TensorType(np.int64))
    self.assertIn('dp_event', names)
    self.assertNotIn('dp_query_metrics', names)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)

  def test_intentional_differences(self):
    value_type = tff.TensorType(np.float32, [4])
    self.assertEqual(_factory().mechanism(value_type).name,
                     'distributed_discrete_gaussian')
    self.assertIsInstance(
        _factory(mechanism='distributed_skellam').dp_event(value_type),
        events.DistributedSkellamDpEvent)
    self.assertEqual(
        repr(
            _factory(rotation_type='dft').mechanism(
                tff.TensorType(np.float32, [5])).encoder),
        'RandomizedDft(dim=5)')
    self.assertEqual(
        _factory(bits=25, expected_clients_per_round=10).mechanism(
            tff.TensorType(np.float32, [4])).bits, 25)
    process = _factory().create(tff.TensorType(np.float32, [4]))
    self.assertEqual(_names(process.initialize.type_signature.result.member),
                     {'round', 'public_seed'})
    process = _factory(auto_l2_clip=True).create(tff.TensorType(
        np.float32, [4]))
    self.assertEqual(_names(process.initialize.type_signature.result.member),
                     {'round', 'public_seed', 'l2_clip'})
    self.assertIsInstance(
        _factory(auto_l2_clip=True).dp_event(tff.TensorType(np.float32, [4])),
        dp_accounting.ComposedDpEvent)

  @parameterized.named_parameters(('negative', -1, ValueError),
                                  ('string', 'string', TypeError),
                                  ('array', np.array([1.0]), TypeError))
  def test_noise_mult_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(noise_multiplier=value)

  @parameterized.named_parameters(
      ('negative', -1, ValueError), ('zero', 0, ValueError),
      ('float', 3.14, TypeError), ('string', 'string', TypeError),
      ('array', np.array([1, 2]), TypeError))
  def test_num_clients_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(expected_clients_per_round=value)

  @parameterized.named_parameters(
      ('negative', -1, ValueError), ('zero', 0, ValueError),
      ('float', 3.14, TypeError), ('too_large', 31, ValueError),
      ('string', 'string', TypeError), ('array', np.array([1, 2]), TypeError))
  def test_bits_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(bits=value)

  @parameterized.named_parameters(
      ('negative', -1.0, ValueError), ('zero', 0.0, ValueError),
      ('string', 'string', TypeError), ('array', np.array([1, 2]), TypeError))
  def test_l2_clip_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(l2_clip=value)

  @parameterized.named_parameters(
      ('negative', -1, ValueError), ('zero', 0, ValueError),
      ('one', 1, ValueError), ('string', 'string', TypeError),
      ('array', np.array([1, 2]), TypeError))
  def test_modclip_prob_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(modclip_prob=value)

  @parameterized.named_parameters(
      ('negative', -1, ValueError), ('one', 1, ValueError),
      ('string', 'string', TypeError), ('array', np.array([1, 2]), TypeError))
  def test_beta_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(beta=value)

  @parameterized.named_parameters(('int', -1, TypeError),
                                  ('invalid_option', 'gaussian', ValueError),
                                  ('struct', ['distributed_dgauss'], TypeError))
  def test_mechanism_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(mechanism=value)

  @parameterized.parameters('ddg', 'discrete_gaussian',
                            'distributed_discrete_gaussian', 'skellam')
  def test_other_entry_points_names_fail_naming_tff_keywords(self, value):
    # The CLI's and the quantile processes' names for the same mechanisms
    # are theirs: here the error names TFF's keywords.
    with self.assertRaisesRegex(
        ValueError, r"mechanism must be one of \('distributed_dgauss', "
        r"'distributed_skellam'\)"):
      _factory(mechanism=value)

  def test_mechanism_resolved_once_to_its_kind(self):
    # TFF's keyword and the mechanism's Kind (what inner calls pass on)
    # give the same factory.
    from tff_ddp.mechanisms import base
    value_type = tff.TensorType(np.float32, [8])
    for keyword, kind in (('distributed_dgauss', base.Kind.DISCRETE_GAUSSIAN),
                          ('distributed_skellam', base.Kind.SKELLAM)):
      by_keyword, by_kind = (_factory(mechanism=keyword),
                             _factory(mechanism=kind))
      self.assertEqual(by_keyword.dp_event(value_type),
                       by_kind.dp_event(value_type))
      self.assertEqual(repr(by_keyword), repr(by_kind))
      self.assertEqual(by_keyword.mechanism(value_type).name, kind)

  @parameterized.named_parameters(('int', -1, TypeError),
                                  ('invalid_option', 'my_flat', ValueError),
                                  ('struct', ['hd'], TypeError))
  def test_rotation_type_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(rotation_type=value)

  @parameterized.named_parameters(('int', -1, TypeError),
                                  ('string', 'string', TypeError),
                                  ('struct', [True], TypeError))
  def test_auto_l2_clip_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(auto_l2_clip=value)

  @parameterized.named_parameters(('string', 'string', TypeError),
                                  ('too_large', 1.1, ValueError),
                                  ('too_small', -0.1, ValueError))
  def test_auto_l2_target_quantile_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(auto_l2_clip=True, auto_l2_target_quantile=value)

  @parameterized.named_parameters(('string', 'string', TypeError),
                                  ('zero', 0, ValueError))
  def test_auto_l2_lr_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(auto_l2_clip=True, auto_l2_lr=value)

  @parameterized.named_parameters(('string', 'string', TypeError),
                                  ('negative', -1, ValueError))
  def test_auto_l2_clip_count_stddev_raise_on(self, value, error):
    with self.assertRaises(error):
      _factory(auto_l2_clip=True, auto_l2_clip_count_stddev=value)

  @parameterized.named_parameters(
      ('sequence', tff.SequenceType(np.int32)),
      ('function', tff.FunctionType(np.int32, np.int32)),
      ('nested_sequence', [[[tff.SequenceType(np.int32)]]]))
  def test_tff_value_types_raise_on(self, value_type):
    with self.assertRaisesRegex(TypeError, 'Expected `value_type` to be'):
      _factory().create(tff.types.to_type(value_type))

  def test_plain_struct_is_accepted(self):
    # TFF refuses [('a', np.int32)]; we accept named and unnamed structs.
    process = _factory().create(tff.types.to_type([('a', np.int32)]))
    tff.test.assert_not_contains_unsecure_aggregation(process.next)

  @parameterized.named_parameters(('bool', np.bool_), ('string', np.str_),
                                  ('string_nested', [np.str_, [np.str_]]))
  def test_component_tensor_dtypes_raise_on(self, value_type):
    with self.assertRaisesRegex(TypeError, 'must all be integers or floats'):
      _factory().create(tff.types.to_type(value_type))


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(name=['scalar', 'rank_2', 'struct', 'int64'],
                         beta=[0.0, math.exp(-0.5)],
                         rotation=['hd', 'dft'],
                         mechanism=['distributed_dgauss'])
  def test_sum(self, name, beta, rotation, mechanism):
    self._check_sum(name, beta, rotation, mechanism)

  @parameterized.parameters(('scalar', 0.0, 'hd'),
                            ('struct', math.exp(-0.5), 'dft'))
  def test_sum_skellam(self, name, beta, rotation):
    self._check_sum(name, beta, rotation, 'distributed_skellam')

  def _check_sum(self, name, beta, rotation, mechanism):
    if name == 'scalar':
      value_type, values, expected = np.float32, [-1.0, 2.0, 3.0], 4.0
    elif name == 'rank_2':
      value_type = (np.float32, [2, 2])
      values = [[[1.0, 2.0], [1.0, 2.0]], [[2.0, 1.0], [2.0, 1.0]]]
      expected = [[3.0, 3.0], [3.0, 3.0]]
    elif name == 'int64':
      value_type, values, expected = (np.int64, [3]), [[1, 2, 3],
                                                       [4, 5, 6]], [5, 7, 9]
    else:
      value_type = _NESTED
      values = [_nested_value(i) for i in (-1, -2)]
      expected = _nested_value(-3)
    factory = _factory(noise_multiplier=0,
                       expected_clients_per_round=len(values),
                       rotation_type=rotation,
                       bits=20,
                       l2_clip=10.0,
                       beta=beta,
                       mechanism=mechanism)
    process = factory.create(tff.types.to_type(value_type))
    state = process.initialize()
    for _ in range(2):
      output = process.next(state, values)
      state = output.state
      # Rounding errors only (no noise).
      self.assertAllClose(output.result, expected, atol=1e-3)

  @parameterized.product(
      rotation=['hd', 'dft'],
      mechanism=['distributed_dgauss', 'distributed_skellam'])
  def test_noisy_sum(self, rotation, mechanism):
    # 12 rounds of two clients, noise multiplier 5, clip 1: the result's
    # stddev is 5 (plus rounding, negligible at 20 bits); the standard error
    # of a stddev estimate from N draws is about sigma / sqrt(2N - 2), so
    # rtol = 4 / sqrt(22) keeps a false failure below 0.01%.
    noise_multiplier, clip, rounds = 5.0, 1.0, 12
    factory = _factory(l2_clip=clip,
                       noise_multiplier=noise_multiplier,
                       expected_clients_per_round=2,
                       bits=20,
                       rotation_type=rotation,
                       mechanism=mechanism)
    process = factory.create(tff.TensorType(np.float32))
    state = process.initialize()
    outputs = []
    for _ in range(rounds):
      output = process.next(state, [1.0, 1.0])
      outputs.append(output.result)
      state = output.state
    self.assertAllClose(np.std(outputs, ddof=1),
                        noise_multiplier * clip,
                        rtol=4 / math.sqrt(2 * rounds - 2),
                        atol=0)
