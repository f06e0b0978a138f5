"""DiscreteGaussianSumFactory and PoissonBinomialSumFactory, one test.

Both factories are the generic skeleton (secure_sum_test.py) around a
mechanism; what is tested here is each mechanism inside TFF: the estimate is
the clipped sum within its noise, the measurements are the configuration and
the public count, the measured event is the planning event, structures and
dtypes survive, bad inputs are refused, and the factories work inside
FedAvg. Processes are built once per class (tracing costs ~2 s each).
"""

import collections
import math
import warnings

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.accounting import events
from tff_ddp.aggregators import AdaptiveClipping
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.aggregators import SkellamSumFactory
from tff_ddp.encoders import hadamard
from tff_ddp_tests import ddg_factories
from tff_ddp_tests.learning import models

_VECTOR = tff.TensorType(np.float32, [20])
_NESTED = collections.OrderedDict(a=tff.TensorType(np.float32, [2, 3]),
                                  b=tff.TensorType(np.float64, [5]))
MECHANISMS = ('ddg', 'cpbm')


def _factory(kind, **kwargs):
  """'ddg': the constructor (a Request of the Request's keywords);
  'ddg_tff': `from_tff_arguments`; 'cpbm'."""
  if kind in ('ddg', 'ddg_tff'):
    args = dict(noise_multiplier=1.0,
                expected_clients_per_round=3,
                bits=16,
                l2_clip=10.0,
                beta=math.exp(-0.5))
    args.update(kwargs)
    if kind == 'ddg_tff':
      return DiscreteGaussianSumFactory.from_tff_arguments(**args)
    return ddg_factories.make(**args)
  args = dict(l2_clip=10.0,
              theta=0.25,
              num_trials=32,
              expected_clients_per_round=3)
  args.update(kwargs)
  return PoissonBinomialSumFactory(**args)


def _noise_bound(factory, value_type, n):
  """A bound on the stddev of each decoded coordinate's error.

  DDG: central noise z c plus rounding gamma / 2 per client. cPBM: eq. (3),
  n C^2 / (4 m theta^2); the decode (a Parseval frame or the inverse
  rotation) maps per-coordinate variance v to at most v per output.
  """
  mechanism = factory.mechanism(value_type)
  if isinstance(factory, DiscreteGaussianSumFactory):
    return math.sqrt(mechanism.noise_stddev(n)**2 + n * mechanism.gamma**2)
  return mechanism.noise_stddev(n)


_CACHE = {}


def _process(mechanism, value_type=_VECTOR, **kwargs):
  key = (mechanism, repr(value_type), tuple(sorted(kwargs.items())))
  if key not in _CACHE:
    factory = _factory(mechanism, **kwargs)
    _CACHE[key] = factory, factory.create(value_type)
  return _CACHE[key]


class ComputationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(mechanism=MECHANISMS, value_type=['vector', 'nested'])
  def test_type_signature_and_secure_only(self, mechanism, value_type):
    value_type = tff.types.to_type({
        'vector': _VECTOR,
        'nested': _NESTED
    }[value_type])
    _, process = _process(mechanism, value_type, seed=1)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    result_type = process.next.type_signature.result.result
    self.assertTrue(result_type.member.is_equivalent_to(value_type))
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    tff.test.assert_contains_secure_aggregation(process.next)

  @parameterized.parameters(*MECHANISMS)
  def test_measurements_release_only_public_numbers(self, mechanism):
    _, process = _process(mechanism, seed=1)
    names = {
        n for n, _ in tff.structure.iter_elements(
            process.next.type_signature.result.measurements.member)
    }
    public = {
        'ddg': {
            'l2_clip', 'scale_factor', 'scaled_local_stddev', 'bits',
            'output_dimension', 'padded_dim', 'scaled_inflated_l2'
        },
        'cpbm': {
            'l2_clip', 'theta', 'coordinate_bound', 'num_trials', 'modulus',
            'output_dimension'
        }
    }[mechanism]
    self.assertEqual(
        names, public | {
            'participating_clients', 'actual_num_clients', 'sum_may_wrap',
            'dp_event'
        })

  @parameterized.product(mechanism=MECHANISMS,
                         case=[('int', tff.TensorType(np.bool_, [3]),
                                'integers or floats'),
                               ('unknown_shape',
                                tff.TensorType(np.float32, [None]), 'shape')])
  def test_bad_value_type(self, mechanism, case):
    _, value_type, message = case
    with self.assertRaisesRegex(TypeError, message):
      _factory(mechanism).create(value_type)

  @parameterized.named_parameters(
      ('ddg_encoder', 'ddg', dict(encoder='dense'), ValueError, 'encoder'),
      ('ddg_options', 'ddg', dict(encoder='hadamard',
                                  iterations=3), ValueError, 'kashin'),
      ('ddg_bits', 'ddg', dict(bits=31), ValueError, 'bits'),
      ('ddg_noise_array', 'ddg', dict(noise_multiplier=np.array([1.0])),
       TypeError, 'noise_multiplier'),
      ('ddg_clients_bool', 'ddg', dict(expected_clients_per_round=True),
       TypeError, 'expected_clients_per_round'),
      ('ddg_mechanism', 'ddg', dict(mechanism='distributed_gauss'), ValueError,
       'distributed_skellam'),
      ('ddg_rotation', 'ddg_tff', dict(rotation_type='fft'), ValueError,
       'rotation_type'),
      ('ddg_adaptive_clip_linf', 'ddg',
       dict(adaptive_clipping=AdaptiveClipping(),
            linf_clip=1.0), ValueError, 'linf_clip'),
      # One way per thing: TFF's keywords only through from_tff_arguments,
      # ours only through the constructor; each names the other.
      ('ddg_tff_auto_clip_linf', 'ddg_tff',
       dict(auto_l2_clip=True,
            linf_clip=1.0), TypeError, r"\['linf_clip'\].*Request"),
      ('ddg_tff_encoder', 'ddg_tff', dict(encoder='kashin'), TypeError,
       r"\['encoder'\].*Request"),
      ('ddg_rotation_type_in_constructor', 'ddg', dict(rotation_type='hd'),
       TypeError, r"\['rotation_type'\].*from_tff_arguments"),
      ('ddg_auto_l2_clip_in_constructor', 'ddg', dict(auto_l2_clip=True),
       TypeError, r"\['auto_l2_clip'\].*from_tff_arguments"),
      ('ddg_request_type', 'ddg_request', None, TypeError,
       'tff_ddp.aggregators.Request'),
      ('ddg_sampler', 'ddg', dict(noise_sampler='fast'), ValueError,
       'noise_sampler'),
      ('cpbm_theta', 'cpbm', dict(theta=0.3), ValueError, 'theta'),
      ('cpbm_trials', 'cpbm', dict(num_trials=0), ValueError, 'num_trials'),
      ('cpbm_clip', 'cpbm', dict(l2_clip=-1.0), ValueError, 'l2_clip'),
      ('cpbm_encoder', 'cpbm', dict(encoder='dense'), ValueError, 'encoder'),
      ('cpbm_overflow', 'cpbm', dict(num_trials=2**29), ValueError,
       'num_trials must be'),
      ('cpbm_divisor', 'cpbm', dict(divisor='l1'), ValueError, 'divisor'),
      ('cpbm_linf_needs_level', 'cpbm', dict(
          divisor='linf', encoder='hadamard'), ValueError, 'kashin'),
      ('cpbm_tff_keyword', 'cpbm', dict(rotation_type='hd'), TypeError,
       'unexpected keyword'),
      # The cPBM factory's keywords go to the round or to the encoder; an
      # unknown one names both lists.
      ('cpbm_unknown_keyword', 'cpbm', dict(sampling_rate=0.5), TypeError,
       r"\['sampling_rate'\].*'client_sampling_rate'.*'redundancy'"),
      ('cpbm_round_keyword_checked', 'cpbm', dict(on_wrap='wrap'), ValueError,
       'on_wrap'),
  )
  def test_bad_arguments(self, mechanism, kwargs, error, message):
    with self.assertRaisesRegex(error, message):
      if mechanism == 'ddg_request':  # TFF's keywords' order, as a tuple
        DiscreteGaussianSumFactory((1.0, 3, 16, 10.0))
      else:
        _factory(mechanism, **kwargs)

  @parameterized.product(
      mechanism=MECHANISMS,
      case=[('huge_clip', dict(l2_clip=1e300), 'largest float32'),
            ('huge_noise', dict(l2_clip=1.0,
                                noise_multiplier=1e300), 'largest float32'),
            ('tiny_clip', dict(l2_clip=1e-300), 'smallest normal float32')])
  def test_output_dtype_range(self, mechanism, case):
    # Before: +-inf or all zeros in the float32 result, silently.
    _, kwargs, message = case
    if mechanism == 'cpbm' and 'noise_multiplier' in kwargs:
      # cPBM's noise is C / (theta sqrt(m)): C = 1e27 alone fits float32
      # (bound ~5e28), with theta = 1e-12 it does not.
      kwargs = dict(l2_clip=1e27, theta=1e-12)
      self.assertLess(
          _factory(mechanism,
                   l2_clip=1e27).mechanism(_VECTOR).output_range()[1],
          np.finfo(np.float32).max)
    factory = _factory(mechanism, **kwargs)
    with self.assertRaisesRegex(ValueError, message):
      factory.create(_VECTOR)
    with self.assertRaisesRegex(ValueError, message):
      factory.check_value_type(_NESTED)  # its float32 leaf
    # float64 holds these magnitudes: the same factory works there.
    float64 = tff.TensorType(np.float64, [20])
    clip, bound = factory.check_value_type(float64).output_range()
    self.assertBetween(bound, 0.0, np.finfo(np.float64).max)
    self.assertGreaterEqual(clip, np.finfo(np.float64).tiny)

  @parameterized.product(mechanism=MECHANISMS,
                         encoder=('hadamard', 'kashin', 'none'))
  def test_output_bound_holds_for_every_extreme_ring(self, mechanism, encoder):
    # Brute force over every ring vector of extreme residues (each centred
    # coordinate at -M/2 + 1 or M/2, and cPBM's window ends): no decoded
    # coordinate exceeds output_range's bound, and for the rotation and the
    # identity the bound is attained within the ring's granularity (it is
    # not loose).
    factory = _factory(mechanism, encoder=encoder)
    value_type = tff.TensorType(np.float64, [3])
    m = factory.mechanism(value_type)
    _, bound = m.output_range()
    d = m.encoder.output_dim
    self.assertLessEqual(d, 8)
    modulus = m.secure_moduli()['encoded']
    n = m.expected_clients_per_round
    if mechanism == 'ddg':
      ends = [modulus // 2 + 1, modulus // 2]  # centred -M/2 + 1 and M/2
    else:
      low = (n * m.num_trials) // 2 - modulus // 2 + 1
      ends = [low % modulus, (low + modulus - 1) % modulus]
    seed = tf.constant([3, 4], tf.int64)
    patterns = np.array(np.meshgrid(*[ends] * d)).reshape(d, -1).T
    largest = 0.0
    for pattern in patterns:
      decoded, _ = m.server_decode({'encoded': tf.constant(pattern, tf.int64)},
                                   tf.constant(n, tf.int64), seed)
      largest = max(largest, float(np.max(np.abs(decoded.numpy()))))
    self.assertLessEqual(largest, bound * (1 + 1e-12))
    if encoder in ('hadamard', 'none'):  # gains sqrt(D) and 1 attained
      self.assertGreater(largest, bound * (1 - 2.0 / modulus) - 1e-9 * bound)

  @parameterized.named_parameters(
      # Integer counts summed exactly (identity, granularity 1): the sum of a
      # 2^16 ring reaches 2^15, beyond int8 / int16 (was saturated at 127 /
      # 32767 silently); int32 holds it.
      ('int8', np.int8, 'largest int8'),
      ('int16', np.int16, 'largest int16'),
      ('uint32', np.uint32, 'signed dtype'),  # the noisy sum can be < 0
      ('int32', np.int32, None),
  )
  def test_integer_value_types(self, dtype, message):
    factory = _factory('ddg',
                       encoder='none',
                       granularity=1.0,
                       l2_clip=4.0,
                       linf_clip=1.0)
    value_type = tff.TensorType(dtype, [4])
    if message is None:
      clip, bound = factory.check_value_type(value_type).output_range()
      self.assertEqual(bound, 2.0**15)  # gamma M / 2, identity: no sqrt(D)
      self.assertEqual(clip, 4.0)
      return
    with self.assertRaisesRegex(ValueError, message):
      factory.create(value_type)

  def test_tff_keywords(self):
    factory = _factory('ddg_tff',
                       mechanism='distributed_dgauss',
                       rotation_type='hd')
    self.assertIsInstance(factory.encoder(_VECTOR), hadamard.RandomizedHadamard)
    self.assertIn("encoder='hadamard'", repr(factory))

  @parameterized.parameters(*MECHANISMS)
  def test_planning_event(self, mechanism):
    factory = _factory(mechanism)
    event = factory.dp_event(_VECTOR)
    output_dim = factory.encoder(_VECTOR).output_dim
    self.assertEqual(event.num_clients, 3)
    self.assertEqual(event.dimension, output_dim)
    self.assertEqual(factory.dp_event(_VECTOR, num_clients=7).num_clients, 7)
    accountant = accounting.RdpAccountant()
    accountant.compose(event, 2)
    self.assertTrue(math.isfinite(accountant.get_epsilon(1e-5)))
    if mechanism == 'ddg':
      mech = factory.mechanism(_VECTOR)
      self.assertIsInstance(event, events.DistributedDiscreteGaussianDpEvent)
      self.assertEqual(output_dim, 32)
      self.assertAlmostEqual(event.local_stddev, mech.scaled_local_stddev)
      self.assertAlmostEqual(event.l2_sensitivity,
                             math.sqrt(mech.norm_threshold))
      self.assertIsInstance(
          _factory('ddg', noise_multiplier=0.0).dp_event(_VECTOR),
          dp_accounting.NonPrivateDpEvent)
    else:
      self.assertIsInstance(event, events.PoissonBinomialDpEvent)
      self.assertEqual((event.theta, event.num_trials), (0.25, 32))
      self.assertEqual(factory.mechanism(_VECTOR).modulus, 128)  # > 3 * 32


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*MECHANISMS)
  def test_sum_is_close_and_measurements_explain_the_round(self, mechanism):
    factory, process = _process(mechanism, seed=1)
    rng = np.random.default_rng(0)
    clients = [rng.normal(size=20).astype(np.float32) for _ in range(3)]
    clients[2] *= 100  # norm ~ 450 > l2_clip = 10: clipped.
    output = process.next(process.initialize(), clients)
    m = output.measurements
    self.assertEqual(m['participating_clients'], 3)
    self.assertFalse(m['sum_may_wrap'])
    self.assertEqual(output.state['round'], 1)
    self.assertEqual(accounting.extract_dp_event(m), factory.dp_event(_VECTOR))
    bound = _noise_bound(factory, _VECTOR, 3)
    if mechanism == 'ddg':
      clipped = clients[2] * (10.0 / np.linalg.norm(clients[2]))
      expected = clients[0] + clients[1] + clipped
      self.assertAllLess(np.abs(output.result - expected), 6 * bound)
      self.assertEqual(m['bits'], 16)
      self.assertEqual(m['output_dimension'], 32)
      self.assertAllClose(m['scale_factor'],
                          factory.mechanism(_VECTOR).scale_factor)
    else:
      # The clipped client's representation has norm C = 10: the residual
      # beyond the first two clients has norm <= 10 plus noise.
      residual = output.result - clients[0] - clients[1]
      self.assertLess(np.linalg.norm(residual),
                      10.0 + 6 * bound * math.sqrt(20))

  @parameterized.parameters(*MECHANISMS)
  def test_unbiased_over_rounds(self, mechanism):
    # Mean over R rounds of (estimate - sum) over 20 coordinates has stddev
    # <= bound / sqrt(20 R); 5 standard errors.
    kwargs = dict(
        seed=3) if mechanism == 'ddg' else dict(seed=3, encoder='hadamard')
    factory, process = _process(mechanism, **kwargs)
    clients = [np.full(20, 0.5, np.float32) * (i + 1) for i in range(3)]
    state = process.initialize()
    errors = []
    rounds = 10
    for _ in range(rounds):
      output = process.next(state, clients)
      state = output.state
      errors.append(output.result - 3.0)
    bound = _noise_bound(factory, _VECTOR, 3)
    self.assertLess(abs(np.mean(errors)), 5 * bound / math.sqrt(20 * rounds))

  @parameterized.parameters(*MECHANISMS)
  def test_nested_structure_and_dtypes(self, mechanism):
    kwargs = (dict(noise_multiplier=0.0, bits=24, seed=0) if mechanism == 'ddg'
              else dict(seed=0, num_trials=4096, l2_clip=4.0))
    factory, process = _process(mechanism, _NESTED, **kwargs)
    value = collections.OrderedDict(a=np.ones([2, 3], np.float32),
                                    b=np.arange(5, dtype=np.float64) / 10)
    output = process.next(process.initialize(), [value, value])
    self.assertEqual(output.result['a'].dtype, np.float32)
    self.assertEqual(output.result['b'].dtype, np.float64)
    # DDG without noise: rounding only. cPBM: stddev per coordinate
    # <= sqrt(2 * 16 / (4 * 4096)) / 0.25 = 0.18; 5.5 stddevs.
    atol = 1e-3 if mechanism == 'ddg' else 1.0
    self.assertAllClose(output.result['a'], 2 * value['a'], atol=atol)
    self.assertAllClose(output.result['b'], 2 * value['b'], atol=atol)
    del factory

  @parameterized.parameters(*MECHANISMS)
  def test_nonfinite_and_huge_clients(self, mechanism):
    # NaN / inf clients contribute zeros; a client with a 1e200 coordinate
    # (its float32 value is inf, so float64 values are used) is clipped to
    # its direction, not turned into zeros.
    value_type = tff.TensorType(np.float64, [20])
    # Four clients: the ring is sized for them (a round above its capacity
    # is refused, round_refusal_test.py).
    kwargs = (dict(
        noise_multiplier=0.0, bits=24, seed=0, expected_clients_per_round=4)
              if mechanism == 'ddg' else dict(seed=0,
                                              num_trials=4096,
                                              l2_clip=2.0,
                                              encoder='hadamard',
                                              expected_clients_per_round=4))
    factory, process = _process(mechanism, value_type, **kwargs)
    good = np.full(20, 0.25)
    bad = good.copy()
    bad[3] = np.nan
    worse = np.full(20, np.inf)
    huge = np.zeros(20)
    huge[5] = 1e200
    output = process.next(process.initialize(), [good, bad, worse, huge])
    self.assertEqual(output.measurements['participating_clients'], 4)
    self.assertTrue(np.all(np.isfinite(output.result)))
    clip = 10.0 if mechanism == 'ddg' else 2.0
    expected = good + clip * np.eye(20)[5]
    atol = 1e-3 if mechanism == 'ddg' else 6 * _noise_bound(
        factory, value_type, 4)
    self.assertAllClose(output.result, expected, atol=atol)

  @parameterized.parameters(*MECHANISMS)
  def test_more_clients_than_the_ring_is_flagged(self, mechanism):
    # on_wrap='flag' (opt-in): the round is returned, flagged; the default
    # refuses it (round_refusal_test.py).
    kwargs = (dict(seed=0, expected_clients_per_round=2) if mechanism == 'ddg'
              else dict(seed=0, num_trials=4, expected_clients_per_round=2))
    kwargs['on_wrap'] = 'flag'
    _, process = _process(mechanism, **kwargs)
    output = process.next(process.initialize(), [np.zeros(20, np.float32)] * 5)
    self.assertTrue(output.measurements['sum_may_wrap'])
    self.assertEqual(output.measurements['participating_clients'], 5)
    self.assertEqual(
        accounting.extract_dp_event(output.measurements).num_clients, 5)

  @parameterized.parameters(*MECHANISMS)
  def test_seeded_runs_repeat_and_rounds_differ(self, mechanism):
    clients = [np.full(20, 0.1, np.float32)] * 2
    outputs = []
    for _ in range(2):
      process = _factory(mechanism, seed=7).create(_VECTOR)
      state = process.initialize()
      first = process.next(state, clients)
      second = process.next(first.state, clients)
      outputs.append((first.result, second.result))
    self.assertAllEqual(outputs[0][0], outputs[1][0])
    self.assertNotAllEqual(outputs[0][0], outputs[0][1])

  @parameterized.parameters(*MECHANISMS)
  def test_default_noise_seeds_differ_between_clients(self, mechanism):
    # Two clients with zero inputs. DDG: the integer sum is y1 + y2; cPBM:
    # S = Z1 + Z2 with Z_i ~ Bin(m, 1/2). A shared noise seed would make the
    # two equal and every coordinate of the sum even; independent seeds make
    # about half of them odd.
    value_type = tff.TensorType(np.float64, [64])
    kwargs = (dict(noise_multiplier=5.0, expected_clients_per_round=2)
              if mechanism == 'ddg' else dict(encoder='hadamard',
                                              expected_clients_per_round=2,
                                              num_trials=8,
                                              l2_clip=1.0))
    factory = _factory(mechanism, **kwargs)
    mech = factory.mechanism(value_type)
    process = factory.create(value_type)
    tf.random.set_seed(0)  # a global TF seed must not align client seeds
    zero = np.zeros(64, np.float64)
    state = process.initialize()
    output = process.next(state, [zero, zero])
    round_seed = tf.random.experimental.stateless_fold_in(
        state['public_seed'], state['round'])
    y = hadamard.RandomizedHadamard(64).encode(tf.constant(output.result),
                                               round_seed).numpy()
    if mechanism == 'ddg':
      integers = np.round(y / mech.gamma)
    else:  # result = decode(C / (m theta) (S - m)): recover S.
      integers = np.round(y * 8 * 0.25 / 1.0 + 8)
    odd = np.mean(np.mod(integers, 2) == 1)
    # Binomial(64, 1/2) parity count: 0.5 +- 5 * 0.0625.
    self.assertGreater(odd, 0.5 - 5 * 0.0625)


class NoiseSamplerTest(tf.test.TestCase):

  def test_both_mechanisms_take_noise_sampler(self):
    # 'table' by default (its TV on the event), 'exact' on request, for the
    # DDG and the Skellam alike; SkellamSumFactory under its own name too.
    args = dict(noise_multiplier=1.0,
                expected_clients_per_round=5,
                bits=16,
                l2_clip=1.0)
    for mechanism in ('distributed_dgauss', 'distributed_skellam'):
      for sampler, tv in (('table', 2.0**-231), ('exact', None)):
        kwargs = {} if sampler == 'table' else dict(noise_sampler=sampler)
        factory = ddg_factories.make(mechanism=mechanism, **kwargs, **args)
        self.assertEqual(factory.mechanism(_VECTOR).noise_sampler, sampler)
        self.assertEqual(factory.dp_event(_VECTOR).sampler_tv_distance, tv)
    self.assertEqual(
        ddg_factories.make(SkellamSumFactory, noise_sampler='exact',
                           **args).mechanism(_VECTOR).noise_sampler, 'exact')
    with self.assertRaisesRegex(TypeError, 'mechanism='):
      ddg_factories.make(SkellamSumFactory,
                         mechanism='distributed_dgauss',
                         **args)
    with self.assertRaisesRegex(TypeError, 'mechanism='):
      SkellamSumFactory.from_tff_arguments(mechanism='distributed_dgauss',
                                           **args)


class DdgSpecificTest(tf.test.TestCase):

  def test_kashin_encoder(self):
    factory = _factory('ddg', seed=2, encoder='kashin', noise_multiplier=0.01)
    process = factory.create(_VECTOR)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    mech = factory.mechanism(_VECTOR)
    encoder = factory.encoder(_VECTOR)
    self.assertGreater(encoder.output_dim, 20)
    self.assertEqual(mech.output_dim, encoder.output_dim)
    self.assertEqual(factory.dp_event(_VECTOR).dimension, encoder.output_dim)
    rng = np.random.default_rng(1)
    # Unit-norm inputs: the representations' norms (<= level) stay inside
    # the clip, so the expected sum is exact.
    clients = [
        v / np.linalg.norm(v)
        for v in (rng.normal(size=20).astype(np.float32) for _ in range(3))
    ]
    self.assertLess(encoder.level, 10.0)
    output = process.next(process.initialize(), clients)
    m = output.measurements
    self.assertEqual(m['output_dimension'], encoder.output_dim)
    self.assertEqual(m['dp_event']['dimension'], encoder.output_dim)
    # Central noise stddev 0.01 * 10 = 0.1, rounding gamma / 2 per client.
    tolerance = 6 * math.sqrt(0.1**2 + 3 * mech.gamma**2)
    self.assertAllLess(np.abs(output.result - np.sum(clients, axis=0)),
                       tolerance)

  def test_integer_counts_with_integer_scaling(self):
    # The quantile paper's setting: integer count vectors, c = 1/gamma = 100,
    # no rotation: no rounding, no sensitivity inflation; only the noise
    # separates the result from the sum. Central stddev 0.05.
    value_type = tff.TensorType(np.int32, [8])
    factory = _factory('ddg',
                       encoder='none',
                       granularity=0.01,
                       linf_clip=1.0,
                       l2_clip=1.0,
                       noise_multiplier=0.05,
                       seed=4)
    mech = factory.mechanism(value_type)
    self.assertTrue(mech.integer_inputs)
    self.assertEqual(mech.norm_threshold, 100**2)
    self.assertAlmostEqual(mech.scale_factor, 100.0)
    self.assertAlmostEqual(mech.scaled_local_stddev, 0.05 * 100 / math.sqrt(3))
    # A float value type is rounded, so the bound is inflated.
    self.assertGreater(
        factory.mechanism(tff.TensorType(np.float32, [8])).norm_threshold,
        100**2)
    process = factory.create(value_type)
    clients = [np.eye(8, dtype=np.int32)[i] for i in (1, 1, 5)]
    output = process.next(process.initialize(), clients)
    self.assertEqual(output.result.dtype, np.int32)
    expected = np.zeros(8)
    expected[1], expected[5] = 2, 1
    self.assertAllLess(np.abs(output.result - expected), 1)  # 20 stddevs

  def test_granularity_checks_the_ring(self):
    value_type = tff.TensorType(np.float32, [8])
    # n (c + 1) = 3 * 1001 > 2^12 / 2: refused, with the bits that fit.
    with self.assertRaisesRegex(ValueError, 'bits >= 1[3-9]'):
      _factory('ddg',
               encoder='none',
               granularity=0.001,
               bits=12,
               noise_multiplier=0.05).mechanism(value_type)
    with self.assertRaisesRegex(ValueError, 'granularity'):
      _factory('ddg', encoder='none', granularity=-1.0)


class ZeroNoiseTest(tf.test.TestCase):
  """noise_multiplier=0 says so, under that name (it used to be silent
  without auto_l2_clip: an exact sum with only an infinite epsilon to
  show for it)."""

  def test_warns_naming_noise_multiplier(self):
    for factory_class in (DiscreteGaussianSumFactory, SkellamSumFactory):
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        factory = factory_class.from_tff_arguments(0.0, 3, 16, 1.0)
      messages = [
          str(w.message) for w in caught if issubclass(w.category, UserWarning)
      ]
      self.assertLen(messages, 1)
      self.assertIn(f'{factory_class.__name__}(noise_multiplier=0)',
                    messages[0])
      self.assertIn('NOT differentially private', messages[0])
      self.assertIsInstance(factory.dp_event(_VECTOR),
                            dp_accounting.NonPrivateDpEvent)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      DiscreteGaussianSumFactory.from_tff_arguments(1e-3, 3, 16, 1.0)
    self.assertEmpty(
        [w for w in caught if 'noise_multiplier=0' in str(w.message)])


@pytest.mark.slow
class FedAvgIntegrationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*MECHANISMS)
  def test_model_aggregator_in_unweighted_fed_avg(self, mechanism):
    factory = _factory(mechanism, expected_clients_per_round=2, l2_clip=1.0)
    learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
        models.dense_model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=factory)
    data = models.ones_dataset()
    state = learning_process.initialize()
    output = learning_process.next(state, [data, data])
    aggregator = output.metrics['aggregator']
    self.assertEqual(aggregator['participating_clients'], 2)
    event = accounting.extract_dp_event(aggregator)
    self.assertEqual(event.num_clients, 2)
