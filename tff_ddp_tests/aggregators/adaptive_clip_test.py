"""Private adaptive clipping (auto_l2_clip=True) of the DDG sum factory.

TFF's own auto-tuning case (clip multiplied by exp(2/3) when two of three
clients are clipped), the state and measurements, the composed round event
(value + indicator) through `extract_dp_event`, the count-stddev-0 warning
and NonPrivateDpEvent, refusals, and the indicator's privacy curve against
brute force (exact Renyi divergences of the discrete-Gaussian-noised sum).
"""

import math
import warnings

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import scipy.special
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.accounting import events
from tff_ddp.aggregators import adaptive_clip
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import Request
from tff_ddp_tests import ddg_factories

_DIM = 99


def _onehot(value):
  x = np.zeros([_DIM], np.float32)
  x[0] = value
  return x


def _factory(**kwargs):
  args = dict(noise_multiplier=0.0,
              expected_clients_per_round=3,
              bits=20,
              l2_clip=1.0,
              auto_l2_clip=True,
              auto_l2_target_quantile=1.0,
              auto_l2_lr=1.0,
              auto_l2_clip_count_stddev=0.0)
  args.update(kwargs)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', UserWarning)
    return DiscreteGaussianSumFactory.from_tff_arguments(**args)


def _object_factory(**kwargs):
  """`_factory`'s configuration, adaptive clipping handed as the object."""
  args = dict(noise_multiplier=0.0,
              expected_clients_per_round=3,
              bits=20,
              l2_clip=1.0,
              adaptive_clipping=adaptive_clip.AdaptiveClipping(
                  target_quantile=1.0, learning_rate=1.0, count_stddev=0.0))
  args.update(kwargs)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', UserWarning)
    return ddg_factories.make(**args)


class AutoTuningTest(tf.test.TestCase, parameterized.TestCase):

  def test_tff_auto_tuning_case(self):
    # TFF 0.87's distributed_dp_test.test_auto_tuning: target quantile 1,
    # lr 1, no noise; norms 0.5, 1.5, 2.0 against clip 1: one third below,
    # so C <- C exp(-(1/3 - 1)) = C exp(2/3).
    process = _factory().create(tff.TensorType(np.float32, [_DIM]))
    state = process.initialize()
    self.assertEqual(state['l2_clip'], 1.0)
    data = [_onehot(v) for v in (0.5, 1.5, 2.0)]
    output = process.next(state, data)
    self.assertAllClose(output.result, _onehot(2.5), atol=1e-4)
    new_clip = math.exp(2 / 3)
    self.assertAllClose(output.state['l2_clip'], new_clip)
    m = output.measurements
    self.assertEqual(m['l2_clip'], 1.0)
    self.assertAllClose(m['next_l2_clip'], new_clip)
    self.assertAllClose(m['below_clip_fraction'], 1 / 3)
    # The next round clips at the new clip.
    output = process.next(output.state, data)
    self.assertAllClose(output.result,
                        _onehot(0.5 + 1.5 + min(new_clip, 2.0)),
                        atol=1e-4)
    self.assertAllClose(output.measurements['l2_clip'], new_clip)
    # 2.0 is still above exp(2/3) = 1.95: two thirds below, C <- C exp(1/3).
    self.assertAllClose(output.measurements['below_clip_fraction'], 2 / 3)
    self.assertAllClose(output.state['l2_clip'], new_clip * math.exp(1 / 3))

  def test_state_of_the_other_clipping_is_refused_in_one_line(self):
    value_type = tff.TensorType(np.float32, [_DIM])
    adaptive = _factory().create(value_type)
    fixed = DiscreteGaussianSumFactory.from_tff_arguments(
        noise_multiplier=0.0,
        expected_clients_per_round=3,
        bits=20,
        l2_clip=1.0).create(value_type)
    data = [_onehot(v) for v in (0.5, 1.5, 2.0)]
    for process, other, says in (
        (fixed, adaptive, 'clips at a fixed l2_clip and got the state of an '
         'adaptive-clipping process'),
        (adaptive, fixed, 'clips at an adaptive clip and got the state of a '
         'process with a fixed l2_clip')):
      with self.subTest(says), self.assertRaises(TypeError) as raised:
        process.next(other.initialize(), data)
      message = str(raised.exception)
      self.assertIn(says, message)
      self.assertIn('pass the state of its own initialize()', message)
      self.assertNotIn('\n', message)

  def test_measurements_release_only_public_numbers(self):
    process = _factory(noise_multiplier=1.0,
                       auto_l2_clip_count_stddev=2.0,
                       count_noise_multiplier=1.0).create(
                           tff.TensorType(np.float32, [_DIM]))
    names = {
        n for n, _ in tff.structure.iter_elements(
            process.next.type_signature.result.measurements.member)
    }
    # Configuration, the public clip trajectory (functions of noisy sums),
    # the count of the secure sum, the noised flag counts, the event.
    self.assertEqual(
        names, {
            'l2_clip', 'next_l2_clip', 'below_clip_fraction', 'scale_factor',
            'scaled_local_stddev', 'bits', 'output_dimension', 'padded_dim',
            'scaled_inflated_l2', 'participating_clients', 'actual_num_clients',
            'sum_may_wrap', 'noised_counts', 'dp_event'
        })
    tff.test.assert_not_contains_unsecure_aggregation(process.next)

  def test_clip_shrinks_towards_lower_target(self):
    # target 0.5, lr 1: all three below -> C exp(-(1 - 0.5)).
    process = _factory(auto_l2_target_quantile=0.5).create(
        tff.TensorType(np.float32, [_DIM]))
    output = process.next(process.initialize(),
                          [_onehot(v) for v in (0.1, 0.2, 0.3)])
    self.assertAllClose(output.state['l2_clip'], math.exp(-0.5))

  def test_count_stddev_zero_warns_and_is_not_private(self):
    with self.assertWarnsRegex(UserWarning, 'NOT differentially private'):
      factory = DiscreteGaussianSumFactory.from_tff_arguments(
          noise_multiplier=1.0,
          expected_clients_per_round=20,
          bits=20,
          l2_clip=1.0,
          auto_l2_clip=True,
          auto_l2_clip_count_stddev=0.0)
    value_type = tff.TensorType(np.float32, [8])
    self.assertIsInstance(factory.dp_event(value_type),
                          dp_accounting.NonPrivateDpEvent)
    process = factory.create(value_type)
    output = process.next(process.initialize(), [np.ones(8, np.float32)] * 2)
    event = accounting.extract_dp_event(output.measurements)
    self.assertIsInstance(event, dp_accounting.NonPrivateDpEvent)
    accountant = accounting.RdpAccountant()
    accountant.compose(event)
    self.assertEqual(accountant.get_epsilon(1e-5), math.inf)

  def test_composed_event_round_trips_and_is_clip_free(self):
    factory = _factory(noise_multiplier=1.0,
                       expected_clients_per_round=4,
                       auto_l2_clip_count_stddev=2.0,
                       auto_l2_target_quantile=0.5,
                       seed=3)
    value_type = tff.TensorType(np.float32, [_DIM])
    planned = factory.dp_event(value_type, num_clients=3)
    self.assertIsInstance(planned, dp_accounting.ComposedDpEvent)
    value_event, indicator_event = planned.events
    self.assertIsInstance(indicator_event,
                          events.DistributedDiscreteGaussianDpEvent)
    self.assertEqual(indicator_event.dimension, 1)
    process = factory.create(value_type)
    state = process.initialize()
    data = [_onehot(v) for v in (0.5, 3.0, 9.0)]
    clips = []
    for _ in range(2):
      output = process.next(state, data)
      clips.append(float(output.measurements['l2_clip']))
      event = accounting.extract_dp_event(output.measurements)
      # The event does not depend on the clip (scale invariance).
      self.assertEqual(event, planned)
      state = output.state
    self.assertNotEqual(clips[0], clips[1])
    # The indicator's event costs something: epsilon(value + indicator) >
    # epsilon(value).
    both = accounting.RdpAccountant()
    both.compose(planned)
    value_only = accounting.RdpAccountant()
    value_only.compose(value_event)
    self.assertGreater(both.get_epsilon(1e-5), value_only.get_epsilon(1e-5))

  @pytest.mark.slow  # ~12 s of CPU: 200 rounds of 4 clients (sized below)
  def test_indicator_noise_has_the_configured_stddev(self):
    # 4 clients, 2 below the clip and 2 above: sum b = 0, so
    # b_bar - 1/2 = noise / n with noise ~ N_Z-sum of stddev sigma_b (the
    # discrete Gaussian's variance is just below its parameter for scale
    # >= 1). sigma_b = 0.4, n = 4: stddev 0.1, the clamp at +-1/2 is 5 of
    # them away. R = 200 rounds (fixed test seed, new round seed each):
    # the sample stddev's relative standard error is 1/sqrt(2(R-1)) = 5%,
    # so 20% is 4 standard errors; the mean's is 0.1/sqrt(200) = 0.007,
    # so 0.03 is 4 of them.
    n, sigma_b, rounds = 4, 0.4, 200
    factory = _factory(noise_multiplier=0.5,
                       expected_clients_per_round=n,
                       auto_l2_clip_count_stddev=sigma_b,
                       auto_l2_target_quantile=0.5,
                       seed=11)
    protocol = factory.round_protocol(tff.TensorType(np.float32, [_DIM]))
    data = [_onehot(v) for v in (0.5, 0.7, 1.5, 2.0)]
    clip = tf.constant(1.0, tf.float64)

    @tf.function
    def one_round(seed):
      parts = [protocol.client(x, seed, clip) for x in data]
      summed = {key: tf.add_n([p[key] for p in parts]) for key in parts[0]}
      _, measurements, _ = protocol.server(summed, seed, clip)
      return measurements['below_clip_fraction']

    below = np.array([
        float(one_round(tf.constant([r, 99], tf.int64))) for r in range(rounds)
    ])
    self.assertLess(abs(below.mean() - 0.5), 0.03)
    self.assertAllClose(below.std(ddof=1), sigma_b / n, rtol=0.2)

  def test_noise_split_matches_tff(self):
    # TFF's adaptive_clip_noise_params: z_v = (z^-2 - (2 sigma_b)^-2)^-1/2.
    z, n = 1.0, 100
    sigma_b = 0.05 * n  # TFF's default
    factory = _factory(noise_multiplier=z,
                       expected_clients_per_round=n,
                       auto_l2_clip_count_stddev=None)
    mechanism = factory.mechanism(tff.TensorType(np.float32, [_DIM]))
    expected = (z**-2 - (2 * sigma_b)**-2)**-0.5
    self.assertAllClose(mechanism.noise_multiplier, expected)
    self.assertEqual(mechanism.l2_clip, 1.0)  # the unit-clip mechanism
    self.assertIn('noise_multiplier=1.0,', repr(factory))
    indicator = adaptive_clip.indicator_mechanism(factory._adaptive)  # pylint: disable=protected-access  # tests a private part
    # The central noise of the decoded sum of 2b is 2 sigma_b.
    self.assertAllClose(indicator.noise_stddev(), 2 * sigma_b)

  @parameterized.named_parameters(
      ('low_count_stddev',
       dict(noise_multiplier=1.0, auto_l2_clip_count_stddev=0.5), ValueError,
       'auto_l2_clip_count_stddev'),
      ('granularity', dict(granularity=0.01), ValueError, 'granularity',
       _object_factory),
      ('linf_clip', dict(linf_clip=1.0), ValueError, 'linf_clip',
       _object_factory),
      ('tff_granularity', dict(granularity=0.01), TypeError, 'granularity'),
      ('sampling', dict(client_sampling_rate=0.5), ValueError,
       'client_sampling_rate'),
      ('clip_range', dict(l2_clip=1e13), ValueError, 'l2_clip'),
      ('lr', dict(auto_l2_lr=0.0), ValueError, 'auto_l2_lr'),
  )
  def test_refusals(self, kwargs, error, message, build=_factory):
    with self.assertRaisesRegex(error, message):
      build(**kwargs)

  def test_output_range_checked_over_the_clip_range(self):
    # float16 cannot hold the sum at the largest clip the state may reach.
    with self.assertRaisesRegex(ValueError, 'float16'):
      _factory().create(tff.TensorType(np.float16, [4]))

  def test_nonfinite_client_sends_the_null_indicator(self):
    process = _factory(auto_l2_target_quantile=0.5).create(
        tff.TensorType(np.float32, [_DIM]))
    bad = _onehot(np.nan)
    output = process.next(process.initialize(),
                          [_onehot(0.5), _onehot(2.0), bad])
    # sum of 2b = +1 - 1 + 0 = 0 -> b_bar = 0 / 3 + 1/2.
    self.assertAllClose(output.measurements['below_clip_fraction'], 0.5)
    self.assertAllClose(output.result, _onehot(1.5), atol=1e-4)

  def test_zero_value_sends_the_null_indicator(self):
    """The zero-out neighbour (input replaced by zeros) sends 0 in every key.

    The event's indicator sensitivity is 1 (2b against the null message 0);
    a zero vector sending +1 (its norm is below any clip) would differ from
    a client above the clip (-1) by 2. Checked on `client_split` for inputs
    above, at and below the clip, and end to end.
    """
    config = adaptive_clip.AdaptiveClip(initial_clip=1.0,
                                        target_quantile=0.5,
                                        learning_rate=0.2,
                                        count_stddev=1.0,
                                        expected_clients=3)
    clip = tf.constant(1.0, tf.float64)
    _, null = adaptive_clip.client_split(config, tf.zeros([_DIM], tf.float64),
                                         clip)
    self.assertAllEqual(null, [0.0])
    for value in (0.5, 1.0, 2.0, -3.0):
      _, indicator = adaptive_clip.client_split(
          config, tf.constant(_onehot(value), tf.float64), clip)
      self.assertAllEqual(tf.abs(indicator - null), [1.0])
    process = _factory(auto_l2_target_quantile=0.5).create(
        tff.TensorType(np.float32, [_DIM]))
    output = process.next(
        process.initialize(),
        [_onehot(0.5), _onehot(2.0), _onehot(0.0)])
    # sum of 2b = +1 - 1 + 0 = 0 -> b_bar = 0 / 3 + 1/2 (with +1 for the
    # zero client it would be 1/3 + 1/2).
    self.assertAllClose(output.measurements['below_clip_fraction'], 0.5)


def _log_convolve(log_a, log_b):
  """log of the convolution of two PMFs given as logs (exact in the tails,
  where a linear-space convolution would leave float rounding dust)."""
  out = np.full(len(log_a) + len(log_b) - 1, -np.inf)
  for i, value in enumerate(log_a):
    out[i:i + len(log_b)] = np.logaddexp(out[i:i + len(log_b)], value + log_b)
  return out


def _discrete_gaussian_sum_log_pmf(scale, n, half_width):
  """log PMF of the sum of n N_Z(0, scale^2), on [-half_width, half_width].

  Each share is truncated to [-half_width, half_width] (mass beyond is below
  exp(-half_width^2 / (2 scale^2)), negligible for the widths used).
  """
  support = np.arange(-half_width, half_width + 1)
  log_single = -support.astype(np.float64)**2 / (2 * scale * scale)
  log_single -= scipy.special.logsumexp(log_single)
  log_pmf = log_single
  for _ in range(n - 1):
    log_pmf = _log_convolve(log_pmf, log_single)
  centre = (len(log_pmf) - 1) // 2
  return support, log_pmf[centre - half_width:centre + half_width + 1]


def _renyi(log_p, log_q, orders):
  """D_alpha(P || Q) on a common support (terms where both are > 0)."""
  ok = np.isfinite(log_p) & np.isfinite(log_q)
  log_p, log_q = log_p[ok], log_q[ok]
  return np.array([
      scipy.special.logsumexp(a * log_p + (1 - a) * log_q) / (a - 1)
      for a in orders
  ])


class AdaptiveClippingObjectTest(parameterized.TestCase):
  """Adaptive clipping handed as an object is what TFF's keywords build.

  A factory's rounds, event and ring are functions of the resolved
  `AdaptiveClip` alone (`secure_sum`), so equal resolved configurations and
  equal events are the property; the rounds themselves are tested above.
  """

  def test_keywords_and_object_resolve_to_one_configuration(self):
    common = dict(noise_multiplier=1.0,
                  expected_clients_per_round=100,
                  bits=20,
                  l2_clip=0.1)
    keywords = DiscreteGaussianSumFactory.from_tff_arguments(
        **common,
        auto_l2_clip=True,
        auto_l2_target_quantile=0.3,
        auto_l2_lr=0.1,
        auto_l2_clip_count_stddev=7.0)
    handed = ddg_factories.make(
        **common,
        adaptive_clipping=adaptive_clip.AdaptiveClipping(target_quantile=0.3,
                                                         learning_rate=0.1,
                                                         count_stddev=7.0))
    # pylint: disable=protected-access  # tests a private part
    self.assertEqual(keywords._adaptive, handed._adaptive)
    self.assertEqual(handed._adaptive.initial_clip, 0.1)
    value_type = tff.TensorType(np.float32, [_DIM])
    self.assertEqual(keywords.dp_event(value_type), handed.dp_event(value_type))
    self.assertIn('adaptive_clipping=AdaptiveClipping(target_quantile=0.3',
                  repr(handed))
    # TFF's defaults: 0.5, 0.2 and a count stddev of 0.05 n.
    default = ddg_factories.make(
        **common, adaptive_clipping=adaptive_clip.AdaptiveClipping())
    tff_default = DiscreteGaussianSumFactory.from_tff_arguments(
        **common, auto_l2_clip=True)
    self.assertEqual(default._adaptive, tff_default._adaptive)
    self.assertEqual(default._adaptive.count_stddev, 5.0)

  def test_ddp_secure_aggregator_takes_the_object(self):
    from tff_ddp import learning
    # pylint: disable=protected-access  # tests a private part
    tff_default = learning.ddp_secure_aggregator(1.0, 100)
    handed = learning.ddp_secure_aggregator(
        1.0, 100, adaptive_clipping=adaptive_clip.AdaptiveClipping(0.5, 0.2))
    self.assertEqual(tff_default._adaptive, handed._adaptive)
    self.assertEqual(handed._adaptive.zeroing_multiplier, 10.0)
    other = learning.ddp_secure_aggregator(
        1.0,
        100,
        zeroing=False,
        adaptive_clipping=(adaptive_clip.AdaptiveClipping(0.9,
                                                          0.05,
                                                          count_stddev=3.0)))
    self.assertEqual(
        (other._adaptive.target_quantile, other._adaptive.learning_rate,
         other._adaptive.count_stddev, other._adaptive.zeroing_multiplier,
         other._adaptive.initial_clip), (0.9, 0.05, 3.0, None, 0.1))
    with self.assertRaisesRegex(TypeError, 'AdaptiveClipping'):
      learning.ddp_secure_aggregator(1.0, 100, adaptive_clipping=0.5)

  def test_refusals(self):
    # TFF's keywords through from_tff_arguments, the object through the
    # constructor: one way each.
    with self.assertRaisesRegex(TypeError, 'adaptive_clipping'):
      _factory(adaptive_clipping=adaptive_clip.AdaptiveClipping())
    with self.assertRaisesRegex(TypeError, 'AdaptiveClipping'):
      _object_factory(adaptive_clipping=dict(target_quantile=0.5))
    for kwargs, name in ((dict(target_quantile=1.5), 'target_quantile'),
                         (dict(learning_rate=0.0), 'learning_rate'),
                         (dict(count_stddev=-1.0), 'count_stddev'),
                         (dict(zeroing_multiplier=0.0), 'zeroing_multiplier')):
      with self.assertRaisesRegex(ValueError, name):
        adaptive_clip.AdaptiveClipping(**kwargs)
    # The count stddev's refusal names the object's field.
    with self.assertRaisesRegex(ValueError,
                                r'adaptive_clipping\.count_stddev > 0\.5'):
      DiscreteGaussianSumFactory(
          Request(l2_clip=1.0,
                  noise_multiplier=1.0,
                  expected_clients_per_round=5,
                  bits=16),
          adaptive_clipping=adaptive_clip.AdaptiveClipping())


class IndicatorBruteForceTest(parameterized.TestCase):
  """The indicator's accounted curve is never below the exact divergence.

  Each client sends c * m with m in {-1, 0, +1} (2b, or 0 for the null
  message) plus N_Z(0, s^2) noise; the server sees the sum of n clients. The
  pair for zero-out is (message c m, message 0) with the other clients'
  messages fixed (a shift, so only the noise sum matters): P = the noise
  sum shifted by c m, Q = the noise sum. Replace-one: shifted by 2c.
  """

  @parameterized.named_parameters(('coarse_n3', 0.4, 3), ('unit_n3', 2.0, 3),
                                  ('n5', 0.3, 5), ('n2', 1.0, 2))
  def test_curve_above_exact_divergence(self, count_stddev, n):
    config = adaptive_clip.AdaptiveClip(initial_clip=1.0,
                                        target_quantile=0.5,
                                        learning_rate=0.2,
                                        count_stddev=count_stddev,
                                        expected_clients=n)
    mechanism = adaptive_clip.indicator_mechanism(config)
    event = mechanism.dp_event(n)
    scaling = round(1.0 / mechanism.gamma)
    self.assertEqual(event.l2_sensitivity, scaling)
    s = mechanism.scaled_local_stddev
    half_width = int(math.ceil(60 * math.sqrt(n) * s)) + 4 * scaling
    support, log_q = _discrete_gaussian_sum_log_pmf(s, n, half_width)
    del support
    for relation, shifts in (
        (dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
         (1, -1)), (dp_accounting.NeighboringRelation.REPLACE_ONE, (2, -2))):
      accountant = accounting.RdpAccountant(neighboring_relation=relation)
      accountant.compose(event)
      orders = accountant.orders
      orders = orders[orders <= 64]
      curve = accountant.rdp[:len(orders)]
      for shift in shifts:
        log_p = np.roll(log_q, shift * scaling)
        # np.roll wraps the far tail around: drop the wrapped entries.
        if shift > 0:
          log_p[:shift * scaling] = -np.inf
        else:
          log_p[shift * scaling:] = -np.inf
        for pair in ((log_p, log_q), (log_q, log_p)):
          brute = _renyi(pair[0], pair[1], orders)
          self.assertTrue(np.all(curve >= brute * (1 - 1e-9)),
                          (relation, shift, curve, brute))
          # Not vacuous: the curve is within a small factor of the truth
          # at order 2 (the DDG bound is near-tight for s >= 1).
          self.assertLess(curve[0], 3 * brute[0] + 1e-3)
