"""Factories calibrated to a target (eps, delta)."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.accounting import calibration
from tff_ddp.accounting import events
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory

_VECTOR = tff.TensorType(np.float32, [100])
_DDG = dict(expected_clients_per_round=50,
            bits=16,
            l2_clip=1.0,
            beta=math.exp(-0.5))
_PBM = dict(expected_clients_per_round=50, l2_clip=1.0, encoder='hadamard')


def _eps(factory, rounds=1, sampling='none', rate=None, adversary='server'):
  event = calibration.rounds_event(factory.dp_event(_VECTOR), rounds, sampling,
                                   rate)
  return accounting.epsilon(event, 1e-5, adversary)[0]


class CalibratedTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((1.0, 1, 'none', None, 'server'),
                            (3.0, 100, 'poisson', 0.1, 'server'),
                            (3.0, 100, 'self', 0.1, 'release'))
  def test_ddg_meets_target_within_one_percent(self, target, rounds, sampling,
                                               rate, adversary):
    result = calibrated.discrete_gaussian(_VECTOR,
                                          target,
                                          1e-5,
                                          rounds=rounds,
                                          sampling=sampling,
                                          rate=rate,
                                          adversary=adversary,
                                          **_DDG)
    self.assertIsInstance(result.factory, DiscreteGaussianSumFactory)
    self.assertEqual(result.adversary, adversary)
    eps = _eps(result.factory, rounds, sampling, rate, adversary)
    self.assertAlmostEqual(eps, result.epsilon)
    self.assertLessEqual(eps, target)
    self.assertGreater(eps, 0.99 * target)
    # A little less noise breaks the target.
    less = DiscreteGaussianSumFactory.from_tff_arguments(noise_multiplier=0.98 *
                                                         result.value,
                                                         **_DDG)
    self.assertGreater(_eps(less, rounds, sampling, rate, adversary), target)
    self.assertFalse(result.at_limit)

  def test_factory_self_sampling_is_in_its_event(self):
    # client_sampling_rate makes the factory's own event a SelfSampled one:
    # calibrated with sampling='none', amplified against the server.
    plain = calibrated.discrete_gaussian(_VECTOR, 2.0, 1e-5, rounds=100, **_DDG)
    sampled = calibrated.discrete_gaussian(_VECTOR,
                                           2.0,
                                           1e-5,
                                           rounds=100,
                                           client_sampling_rate=0.1,
                                           **_DDG)
    self.assertIsInstance(sampled.event.event, events.SelfSampledDpEvent)
    self.assertLess(sampled.value, 0.5 * plain.value)

  def test_pbm_theta_and_num_trials(self):
    by_theta = calibrated.poisson_binomial(_VECTOR,
                                           2.0,
                                           1e-5,
                                           parameter='theta',
                                           num_trials=64,
                                           **_PBM)
    self.assertIsInstance(by_theta.factory, PoissonBinomialSumFactory)
    self.assertLessEqual(_eps(by_theta.factory), 2.0)
    self.assertGreater(_eps(by_theta.factory), 0.99 * 2.0)
    by_trials = calibrated.poisson_binomial(_VECTOR,
                                            2.0,
                                            1e-5,
                                            parameter='num_trials',
                                            theta=0.01,
                                            **_PBM)
    m = by_trials.value
    self.assertIsInstance(m, int)
    self.assertLessEqual(_eps(by_trials.factory), 2.0)
    one_more = PoissonBinomialSumFactory(theta=0.01, num_trials=m + 1, **_PBM)
    self.assertGreater(_eps(one_more), 2.0)

  def test_pbm_theta_at_limit(self):
    result = calibrated.poisson_binomial(_VECTOR,
                                         1e4,
                                         1e-5,
                                         num_trials=1,
                                         **_PBM)
    self.assertEqual(result.value, 0.25)
    self.assertTrue(result.at_limit)

  def test_event_is_the_composed_sampled_one(self):
    result = calibrated.discrete_gaussian(_VECTOR,
                                          2.0,
                                          1e-5,
                                          rounds=10,
                                          sampling='poisson',
                                          rate=0.5,
                                          **_DDG)
    self.assertIsInstance(result.event, dp_accounting.SelfComposedDpEvent)
    self.assertEqual(result.event.count, 10)
    self.assertIsInstance(result.event.event,
                          dp_accounting.PoissonSampledDpEvent)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      calibrated.discrete_gaussian(_VECTOR,
                                   1.0,
                                   1e-5,
                                   noise_multiplier=1.0,
                                   **_DDG)
    with self.assertRaisesRegex(ValueError, 'bits'):
      calibrated.discrete_gaussian(_VECTOR, 1.0, 1e-5, **{**_DDG, 'bits': 40})
    with self.assertRaisesRegex(ValueError, 'adversary'):
      calibrated.discrete_gaussian(_VECTOR,
                                   1.0,
                                   1e-5,
                                   adversary='analyst',
                                   **_DDG)
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      calibrated.poisson_binomial(_VECTOR,
                                  1e-6,
                                  1e-5,
                                  parameter='num_trials',
                                  theta=0.25,
                                  **_PBM)
    with self.assertRaisesRegex(ValueError, 'parameter'):
      calibrated.poisson_binomial(_VECTOR,
                                  1.0,
                                  1e-5,
                                  parameter='m',
                                  num_trials=4,
                                  **_PBM)
    with self.assertRaisesRegex(ValueError, 'theta is what'):
      calibrated.poisson_binomial(_VECTOR,
                                  1.0,
                                  1e-5,
                                  theta=0.1,
                                  num_trials=4,
                                  **_PBM)
    with self.assertRaisesRegex(ValueError, 'rate'):
      calibrated.discrete_gaussian(_VECTOR,
                                   1.0,
                                   1e-5,
                                   sampling='poisson',
                                   rate=2.0,
                                   **_DDG)
    with self.assertRaisesRegex(ValueError, 'target_epsilon'):
      calibrated.discrete_gaussian(_VECTOR, -1.0, 1e-5, **_DDG)
