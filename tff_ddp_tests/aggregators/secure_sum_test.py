"""The generic factory with a toy mechanism: placement, releases, sampling.

The toy mechanism sums round(x) mod 2^16 with no noise, so every number the
process returns can be predicted exactly; what is tested here is the
skeleton every real mechanism shares: types and the secure-sum-only
placement, what the measurements release under each flag policy, the
measured DP event, self-sampling coins and the noise-seed sources.
"""

import collections
import dataclasses
import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.accounting import events
from tff_ddp.aggregators import discrete_gaussian
from tff_ddp.aggregators import secure_sum
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base

_MODULUS = 2**16


@dataclasses.dataclass(frozen=True)
class RoundingMechanism:
  """Sums round(x) exactly (no noise); flags: any negative / any > 100."""

  dim: int
  expected_clients_per_round: int = 3

  name = 'rounding'
  flag_names = ('negative', 'large')

  @property
  def encoder(self):
    return registry.Identity(self.dim)

  def secure_moduli(self):
    return {'encoded': _MODULUS}

  def public_measurements(self):
    return {'modulus': np.int64(_MODULUS), 'label': 0.5}

  def client_encode(self, x, round_seed, noise_seed):
    del round_seed, noise_seed
    rounded = tf.cast(tf.round(x), tf.int64)
    return ({
        'encoded': base.ring_residue(rounded, _MODULUS)
    }, base.flag_vector([tf.reduce_any(x < 0),
                         tf.reduce_any(tf.abs(x) > 100)]))

  def server_decode(self, summed, num_clients, round_seed):
    del round_seed
    return (tf.cast(base.centre(summed['encoded'], _MODULUS), tf.float64), {
        'seen': num_clients
    })

  def output_range(self):
    # A client keeps |round(x)| < M/2 (wrapped otherwise); the centred sum
    # is in (-M/2, M/2].
    return _MODULUS / 2, _MODULUS / 2

  def max_clients(self):
    # The ring holds the exact sum while every coordinate's sum stays in
    # (-M/2, M/2]: true for up to 256 of this module's clients (|x| <= 500,
    # and at most one large coordinate per client set).
    return 256

  def dp_event(self, num_clients=None):
    return events.DistributedDiscreteGaussianDpEvent(
        l2_sensitivity=1.0,
        local_stddev=1.0,
        num_clients=num_clients or self.expected_clients_per_round,
        dimension=self.dim)


def _factory(**kwargs):
  return secure_sum.MechanismSumFactory(
      lambda spec: RoundingMechanism(spec.dim), **kwargs)


_VECTOR = tff.TensorType(np.float32, [4])


def _names(process):
  return {
      n for n, _ in tff.structure.iter_elements(
          process.next.type_signature.result.measurements.member)
  }


class PlacementTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('vector', _VECTOR),
      ('nested',
       collections.OrderedDict(a=tff.TensorType(np.float32, [2, 3]),
                               b=tff.TensorType(np.float64, [5]))),
      ('integers', tff.TensorType(np.int32, [3])),
      ('struct_type',
       tff.StructType(
           [tff.TensorType(np.float32, [2]),
            tff.TensorType(np.int64, [1])])),
      ('scalar', tff.TensorType(np.float32)),
  )
  def test_types_and_secure_only(self, value_type):
    value_type = tff.types.to_type(value_type)
    process = _factory().create(value_type)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    result = process.next.type_signature.result.result
    self.assertTrue(result.member.is_equivalent_to(value_type))
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    tff.test.assert_contains_secure_aggregation(process.next)

  def test_struct_type_values_run(self):
    value_type = tff.StructType(
        [tff.TensorType(np.float32, [2]),
         tff.TensorType(np.int64, [1])])
    process = _factory().create(value_type)
    values = [[np.array([1.0, 2.0], np.float32),
               np.array([3], np.int64)],
              [np.array([-1.0, 0.0], np.float32),
               np.array([4], np.int64)]]
    output = process.next(process.initialize(), values)
    self.assertAllClose(output.result[0], [0.0, 2.0])
    self.assertAllEqual(output.result[1], [7])
    self.assertEqual(output.result[1].dtype, np.int64)

  @parameterized.named_parameters(
      ('string', tff.TensorType(np.str_, [3]), 'integers or floats'),
      ('bool', tff.TensorType(np.bool_, [3]), 'integers or floats'),
      ('unknown_shape', tff.TensorType(np.float32, [None]), 'shape'),
      ('federated', tff.FederatedType(np.float32, tff.CLIENTS), 'tensor'),
      ('empty', tff.TensorType(np.float32, [0]), 'no elements'),
      ('not_a_type', 'float32 please', 'value_type'),
  )
  def test_bad_value_types(self, value_type, message):
    with self.assertRaisesRegex(TypeError, message):
      _factory().create(value_type)

  def test_dp_event_refuses_what_the_accountant_refuses(self):
    # num_clients above the accountant's 2^62 gave an event the accountant
    # then refused (found by the fuzz test).
    factory = _factory()
    with self.assertRaisesRegex(
        ValueError, 'num_clients must be an integer '
        r'in \[0, 4611686018427387904\]'):
      factory.dp_event(_VECTOR, 2**63 - 1)
    factory.dp_event(_VECTOR, 2**62)

  def test_huge_value_types_are_counted_exactly(self):
    # 2^63 and 2^64 elements: an int64 product wrapped (read as "no
    # elements") or overflowed (found by the fuzz test); counted exactly,
    # they are refused as too large for one client encoding.
    factory = discrete_gaussian.DiscreteGaussianSumFactory.from_tff_arguments(
        noise_multiplier=1.0,
        expected_clients_per_round=10,
        bits=16,
        l2_clip=1.0)
    for shape, dim in (([2**63], 2**63), ([2**64], 2**64), ([2**32,
                                                             2**32], 2**64)):
      with self.assertRaisesRegex(ValueError, f'dim={dim} .*split the value'):
        factory.create(tff.TensorType(np.float32, shape))

  @parameterized.named_parameters(
      ('rate_zero', dict(client_sampling_rate=0.0), ValueError),
      ('rate_big', dict(client_sampling_rate=1.5), ValueError),
      ('rate_tiny', dict(client_sampling_rate=1e-30), ValueError),
      ('rate_string', dict(client_sampling_rate='0.5'), TypeError),
      ('count_noise', dict(count_noise_multiplier=-1.0), ValueError),
      ('debug_int', dict(debug_measurements=1), TypeError),
      ('both', dict(debug_measurements=True,
                    count_noise_multiplier=1.0), ValueError),
      ('entropy', dict(entropy=3), TypeError),
      ('seed', dict(seed=-1), ValueError),
      ('seed_float', dict(seed=1.5), TypeError),
  )
  def test_bad_options(self, kwargs, error):
    with self.assertRaises(error):
      _factory(**kwargs)
    with self.assertRaises(TypeError):
      secure_sum.MechanismSumFactory('not callable')

  def test_count_noise_outside_its_range(self):
    # The counts' integer scaling 1/sigma must fit 30 bits; a denormal
    # multiplier made it inf (OverflowError, found by the fuzz test).
    for z in (5e-324, 1e-12):
      with self.assertRaisesRegex(
          ValueError, 'count_noise_multiplier=.* is '
          'too small.* Use count_noise_multiplier >='):
        secure_sum.count_mechanism(('negative', 'large'), z, 10)
    secure_sum.count_mechanism(('negative', 'large'), 1e-6, 10)
    # Too large: the refusal names the count's multiplier, not the ring's
    # bits the user never set (found by the fuzz test).
    with self.assertRaisesRegex(
        ValueError, 'count_noise_multiplier=.* is '
        'too large.* Use count_noise_multiplier <='):
      secure_sum.count_mechanism(('negative', 'large'), 2.0**30, 10)
    secure_sum.count_mechanism(('negative', 'large'), 1e6, 10)


class ReleaseTest(tf.test.TestCase):
  """What each flag policy releases, and the event that says what it costs."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.clients = [
        np.array([1.2, -3.0, 0.0, 2.0], np.float32),
        np.array([1.0, 1.0, 1.0, 500.0], np.float32),
        np.array([0.4, 0.0, 0.0, 0.0], np.float32)
    ]

  def test_default_withholds_flags(self):
    factory = _factory()
    process = factory.create(_VECTOR)
    names = _names(process)
    self.assertNotIn('debug_counts', names)
    self.assertNotIn('noised_counts', names)
    # Not even sent: the secure sum carries the participant count only.
    secure = process.next.type_signature.parameter
    del secure
    output = process.next(process.initialize(), self.clients)
    m = output.measurements
    self.assertAllClose(output.result, [2.0, -2.0, 1.0, 502.0])  # rounded
    self.assertEqual(m['participating_clients'], 3)
    self.assertEqual(m['actual_num_clients'], 3)
    self.assertEqual(m['seen'], 3)
    self.assertEqual(m['modulus'], _MODULUS)
    self.assertEqual(m['label'], 0.5)
    event = accounting.extract_dp_event(m)
    self.assertEqual(event, factory.dp_event(_VECTOR))
    self.assertEqual(output.state['round'], 1)

  def test_measured_event_uses_the_measured_count(self):
    factory = _factory()
    process = factory.create(_VECTOR)
    output = process.next(process.initialize(), self.clients[:2])
    self.assertEqual(accounting.extract_dp_event(output.measurements),
                     factory.dp_event(_VECTOR, num_clients=2))
    self.assertEqual(factory.dp_event(_VECTOR).num_clients, 3)

  def test_debug_releases_exact_counts_and_is_not_private(self):
    with self.assertWarnsRegex(UserWarning, 'NOT differentially private'):
      factory = _factory(debug_measurements=True)
    process = factory.create(_VECTOR)
    m = process.next(process.initialize(), self.clients).measurements
    self.assertEqual(dict(m['debug_counts']), {'negative': 1, 'large': 1})
    event = accounting.extract_dp_event(m)
    self.assertIsInstance(event, dp_accounting.NonPrivateDpEvent)
    self.assertEqual(accounting.epsilon(event, 1e-5)[0], math.inf)

  def test_noised_counts_are_accounted(self):
    factory = _factory(count_noise_multiplier=0.5)
    process = factory.create(_VECTOR)
    m = process.next(process.initialize(), self.clients).measurements
    self.assertEqual(set(m['noised_counts']), {'negative', 'large'})
    event = accounting.extract_dp_event(m)
    self.assertIsInstance(event, dp_accounting.ComposedDpEvent)
    main, counts = event.events
    self.assertEqual(main, RoundingMechanism(4).dp_event(3))
    # Flags are integers of l2 norm <= sqrt(2), scaled by c; the central
    # noise in count units is 0.5 * sqrt(2).
    mechanism = secure_sum.count_mechanism(('a', 'b'), 0.5, 3)
    self.assertEqual(counts, mechanism.dp_event(3))
    self.assertAlmostEqual(mechanism.noise_stddev(), 0.5 * math.sqrt(2))
    self.assertGreaterEqual(counts.local_stddev, 1.0)
    self.assertEqual(event, factory.dp_event(_VECTOR))
    # The noisy counts estimate the true ones (1, 1) within 6 stddevs.
    self.assertAllClose(
        [m['noised_counts']['negative'], m['noised_counts']['large']],
        [1.0, 1.0],
        atol=6 * 0.5 * math.sqrt(2) + 1e-9)


class RoundSeedTest(tf.test.TestCase):

  def test_round_seed_is_the_seed_the_round_encodes_with(self):
    # A coarse Kashin frame (one step, little redundancy): ||y|| depends on
    # the frame by far more than 1e-6. With the representation's norm
    # computed from round_seed(state), a clip 1e-6 above it clips nothing
    # and one 1e-6 below it clips the client (exact debug counts), in the
    # first and in a later round.
    from tff_ddp.aggregators import poisson_binomial
    x = np.array([3.0, -1.0, 0.5, 2.0, 0.0, 1.5, -2.5, 1.0])
    value_type = tff.TensorType(np.float64, [8])
    options = dict(redundancy=0.5, iterations=1, delta=1.0, eta=0.5)
    encoder = registry.make_encoder('kashin', 8, **options)
    for rounds_before in (0, 2):
      for factor, expected in ((1 + 1e-6, 0), (1 - 1e-6, 1)):
        probe = poisson_binomial.PoissonBinomialSumFactory(1.0,
                                                           0.25,
                                                           4,
                                                           1,
                                                           seed=7,
                                                           **options)
        state = probe.create(value_type).initialize()
        state['round'] = np.int64(rounds_before)
        seed = secure_sum.round_seed({
            k: tf.constant(v) for k, v in state.items()
        })
        norm = np.linalg.norm(encoder.encode(tf.constant(x), seed))
        with self.assertWarnsRegex(UserWarning, 'NOT differentially'):
          factory = poisson_binomial.PoissonBinomialSumFactory(
              norm * factor,
              0.25,
              4,
              1,
              seed=7,
              debug_measurements=True,
              **options)
        process = factory.create(value_type)
        m = process.next(state, [x]).measurements
        self.assertEqual(m['debug_counts']['clipped'], expected,
                         (rounds_before, factor))


class ClientPreprocessingTest(tf.test.TestCase):

  def test_equals_create_after_a_client_map(self):
    # The same seeded factory (tests-only deterministic noise): the fused
    # client call and create() after a separate federated_map give the same
    # sum, measurements and event, bit for bit.

    def one_hot(x):
      return tf.one_hot(tf.cast(x, tf.int32), 8, dtype=tf.float32)

    value_type = tff.TensorType(np.float32, [8])
    with self.assertWarnsRegex(UserWarning, 'tests only'):
      factory = discrete_gaussian.DiscreteGaussianSumFactory.from_tff_arguments(
          1.0, 3, 16, 1.0, seed=11)
    fused = factory.create_with_client_preprocessing(value_type, np.float32,
                                                     one_hot)
    plain = factory.create(value_type)
    self.assertEqual(str(fused.next.type_signature.parameter[1]),
                     '{float32}@CLIENTS')
    raw = [np.float32(v) for v in (1.0, 5.0, 5.0)]

    @tff.tensorflow.computation(np.float32)
    def encode(x):
      return one_hot(x)

    @tff.federated_computation(plain.next.type_signature.parameter[0],
                               tff.FederatedType(np.float32, tff.CLIENTS))
    def mapped_next(state, values):
      return plain.next(state, tff.federated_map(encode, values))

    a = fused.next(fused.initialize(), raw)
    b = mapped_next(plain.initialize(), raw)
    self.assertAllEqual(a.result, b.result)
    self.assertEqual(str(a.measurements), str(b.measurements))
    self.assertAllClose(a.result, [0, 1, 0, 0, 0, 2, 0, 0], atol=8.0)


class SamplingTest(tf.test.TestCase):

  def test_self_sampling_keeps_the_right_fraction(self):
    # 200 clients, client i holds e_i: the result marks who was kept.
    n, q = 200, 0.3
    value_type = tff.TensorType(np.float32, [n])
    factory = _factory(client_sampling_rate=q)
    process = factory.create(value_type)
    clients = list(np.eye(n, dtype=np.float32))
    output = process.next(process.initialize(), clients)
    kept = np.asarray(output.result)
    self.assertTrue(set(np.unique(kept)) <= {0.0, 1.0})
    # Binomial(200, 0.3): mean 60, stddev 6.5; 5 stddevs.
    self.assertLess(abs(kept.sum() - n * q), 5 * math.sqrt(n * q * (1 - q)))
    m = output.measurements
    self.assertEqual(m['participating_clients'], n)
    self.assertEqual(m['client_sampling_rate'], q)
    event = accounting.extract_dp_event(m)
    self.assertIsInstance(event, events.SelfSampledDpEvent)
    self.assertEqual(event.sampling_probability, q)
    self.assertEqual(event.event.num_clients, n)

  def test_coin_probability_is_exact(self):
    self.assertEqual(secure_sum.effective_rate(0.3), 0.3)
    self.assertEqual(secure_sum.coin_threshold(0.5), 2**61)
    tiny = 3e-10
    self.assertLessEqual(secure_sum.effective_rate(tiny), tiny)
    self.assertGreater(secure_sum.effective_rate(tiny), tiny * (1 - 1e-9))

  def test_entropy_hook_is_used(self):
    # A constant "device entropy" gives every client the same coin: all or
    # nothing (never do this; it shows the hook reaches the coins).
    factory = _factory(client_sampling_rate=0.5,
                       entropy=lambda: tf.constant([12, 34], tf.int64))
    process = factory.create(tff.TensorType(np.float32, [8]))
    clients = list(np.eye(8, dtype=np.float32))
    state = process.initialize()
    results = []
    for _ in range(6):
      output = process.next(state, clients)
      state = output.state
      results.append(float(np.sum(output.result)))
    self.assertTrue(set(results) <= {0.0, 8.0}, results)
