"""ddp_secure_aggregator: TFF's signature, zeroing, the clip, the mean, FedAvg."""

import inspect
import math
import warnings

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp import learning
from tff_ddp.aggregators import adaptive_clip
from tff_ddp.aggregators import discrete_gaussian
from tff_ddp.learning import aggregator
from tff_ddp_tests.learning import models


def _exact(**kwargs):
  """noise_multiplier 0 (count stddev 0 by TFF's default): exact numbers."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', UserWarning)
    return learning.ddp_secure_aggregator(0.0, 3, **kwargs)


def _vector(norm):
  x = np.zeros([4], np.float32)
  x[1] = norm
  return x


class DdpSecureAggregatorTest(tf.test.TestCase):

  def test_signature_and_defaults_are_tffs(self):
    ours = inspect.signature(learning.ddp_secure_aggregator)
    theirs = inspect.signature(tff.learning.ddp_secure_aggregator)
    # TFF's parameters in TFF's order, then our keyword-only `mechanism`
    # and `adaptive_clipping` (the object TFF's fixed
    # configuration is an instance of).
    self.assertEqual(
        list(ours.parameters)[:len(theirs.parameters)], list(theirs.parameters))
    self.assertEqual(
        list(ours.parameters)[len(theirs.parameters):],
        ['mechanism', 'adaptive_clipping'])
    for extra in ('mechanism', 'adaptive_clipping'):
      self.assertEqual(ours.parameters[extra].kind,
                       inspect.Parameter.KEYWORD_ONLY)
    for name, parameter in theirs.parameters.items():
      self.assertEqual(ours.parameters[name].default, parameter.default, name)

  def test_no_from_tff_arguments(self):
    # Its signature is TFF's ddp_secure_aggregator's, not the sum's.
    factory_class = type(learning.ddp_secure_aggregator(1.0, 100))
    with self.assertRaisesRegex(TypeError, 'ddp_secure_aggregator'):
      factory_class.from_tff_arguments(1.0, 100, 20, 0.1)
    factory = learning.ddp_secure_aggregator(1.0, 100)
    self.assertIsInstance(factory, tff.aggregators.UnweightedAggregationFactory)
    mechanism = factory.mechanism(tff.TensorType(np.float32, [8]))
    self.assertEqual(mechanism.bits, 20)
    # TFF's noise split with count stddev 0.05 * 100 = 5.
    self.assertAllClose(mechanism.noise_multiplier, (1.0 - (2 * 5.0)**-2)**-0.5)
    self.assertIn('zeroing=True', repr(factory))

  def test_zeroing_clip_and_mean(self):
    # Initial clip 0.1; zeroing threshold 10 * 0.1 + 1 = 2.
    process = _exact().create(tff.TensorType(np.float32, [4]))
    state = process.initialize()
    self.assertAllClose(state['l2_clip'], aggregator.INITIAL_L2_CLIP)
    data = [_vector(0.05), _vector(0.5), _vector(100.0)]
    output = process.next(state, data)
    # Mean over the 3 clients of the secure sum: (0.05 + 0.1 + 0) / 3.
    self.assertAllClose(output.result, _vector(0.15 / 3), atol=1e-5)
    m = output.measurements
    self.assertEqual(m['participating_clients'], 3)
    # Indicators +1, -1 and 0 (zeroed): b_bar = 1/2 = target: clip kept.
    self.assertAllClose(m['below_clip_fraction'], 0.5)
    self.assertAllClose(output.state['l2_clip'], 0.1)

  def test_without_zeroing_the_large_update_is_clipped(self):
    process = _exact(zeroing=False).create(tff.TensorType(np.float32, [4]))
    output = process.next(
        process.initialize(),
        [_vector(0.05), _vector(0.5),
         _vector(100.0)])
    self.assertAllClose(output.result, _vector(0.25 / 3), atol=1e-5)
    # One of three below: C <- 0.1 exp(-0.2 (1/3 - 1/2)).
    self.assertAllClose(output.state['l2_clip'], 0.1 * math.exp(0.2 / 6))

  def test_skellam_sum_is_accounted(self):
    factory = learning.ddp_secure_aggregator(1.0,
                                             100,
                                             mechanism='distributed_skellam')
    value_type = tff.TensorType(np.float32, [4])
    self.assertEqual(factory.mechanism(value_type).name, 'distributed_skellam')
    event = factory.dp_event(value_type)
    self.assertIn('DistributedSkellamDpEvent', repr(event))
    eps, _ = accounting.epsilon(event, 1e-5)
    self.assertTrue(math.isfinite(eps))
    self.assertIn("mechanism='distributed_skellam'", repr(factory))
    process = factory.create(value_type)
    output = process.next(process.initialize(), [_vector(0.05)] * 3)
    self.assertEqual(output.measurements['participating_clients'], 3)

  def test_refusals(self):
    with self.assertRaisesRegex(ValueError, 'rotation_type'):
      learning.ddp_secure_aggregator(1.0, 100, rotation_type='fft')
    self.assertEqual(
        repr(
            learning.ddp_secure_aggregator(1.0, 100,
                                           rotation_type='dft').mechanism(
                                               tff.TensorType(np.float32,
                                                              [3])).encoder),
        'RandomizedDft(dim=3)')
    with self.assertRaisesRegex(TypeError, 'zeroing'):
      learning.ddp_secure_aggregator(1.0, 100, zeroing='yes')
    with self.assertRaisesRegex(TypeError, 'floating point'):
      learning.ddp_secure_aggregator(1.0,
                                     100).create(tff.TensorType(np.int32, [4]))


class MessagesTest(tf.test.TestCase):
  """Errors and warnings name the parameters the caller of
  ddp_secure_aggregator set (its signature has no count stddev)."""

  def test_too_few_clients_names_the_parameters_set(self):
    # TFF's rule: count stddev 0.05 n > z / 2, i.e. n > 10 z. At z = 1:
    # n = 10 fails (0.5 is not > 0.5), n = 11 works; n = 5 is the issue's.
    for n in (5, 10):
      with self.assertRaises(ValueError) as caught:
        learning.ddp_secure_aggregator(1.0, n)
      message = str(caught.exception)
      self.assertNotIn('auto_l2_clip_count_stddev', message)
      self.assertIn('ddp_secure_aggregator', message)
      self.assertIn('noise_multiplier=1.0', message)
      self.assertIn(f'expected_clients_per_round={n}', message)
      self.assertIn('expected_clients_per_round >= 11', message)
      self.assertIn('noise_multiplier < ' + f'{0.1 * n:g}', message)
    with warnings.catch_warnings():  # value noise raised: a warning
      warnings.simplefilter('ignore', UserWarning)
      learning.ddp_secure_aggregator(1.0, 11)
      # The suggested fixes are the boundary: z < 0.1 n passes.
      learning.ddp_secure_aggregator(0.49, 5)
    # The factory that has the parameter offers it as a third fix.
    with self.assertRaisesRegex(ValueError,
                                r'auto_l2_clip_count_stddev > 0\.5'):
      discrete_gaussian.DiscreteGaussianSumFactory.from_tff_arguments(
          1.0, 5, 16, 1.0, auto_l2_clip=True)

  def test_least_clients_is_the_boundary(self):
    for z in (0.05, 0.35, 1.0, 2.5, 7.0, 1e-3):
      n = adaptive_clip.min_clients_for_default_count_stddev(z)
      self.assertLess(z, 2 * 0.05 * n, z)
      if n > 1:
        self.assertGreaterEqual(z, 2 * 0.05 * (n - 1), z)

  def test_zero_noise_warns_under_noise_multiplier(self):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      factory = learning.ddp_secure_aggregator(0.0, 5)
    messages = [
        str(w.message) for w in caught if issubclass(w.category, UserWarning)
    ]
    self.assertLen(messages, 1)
    self.assertIn('ddp_secure_aggregator(noise_multiplier=0)', messages[0])
    self.assertIn('NOT differentially private', messages[0])
    self.assertNotIn('auto_l2_clip_count_stddev', messages[0])
    eps, _ = accounting.epsilon(
        factory.dp_event(tff.TensorType(np.float32, [4])), 1e-5)
    self.assertEqual(eps, math.inf)


@pytest.mark.slow
class FedAvgTest(tf.test.TestCase):

  def test_model_aggregator_of_unweighted_fed_avg(self):
    # Count stddev 0.05 * 4 = 0.2 > noise_multiplier / 2.
    factory = learning.ddp_secure_aggregator(0.3, 4)
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        models.dense_model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=factory)
    data = models.ones_dataset()
    state = process.initialize()
    accountant = accounting.RdpAccountant(adversary='server')
    clips = []
    for _ in range(2):
      output = process.next(state, [data] * 4)
      state = output.state
      metrics = output.metrics['aggregator']
      self.assertEqual(metrics['participating_clients'], 4)
      clips.append(float(metrics['l2_clip']))
      event = accounting.extract_dp_event(metrics)
      self.assertIsInstance(event, dp_accounting.ComposedDpEvent)
      accountant.compose(event)
    self.assertAllClose(clips[0], aggregator.INITIAL_L2_CLIP)
    epsilon = accountant.get_epsilon(1e-5)
    self.assertTrue(0 < epsilon < math.inf, epsilon)
