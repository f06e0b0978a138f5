"""Tests of noise calibration (the `privacy` CLI is tested in cli_test)."""

from absl.testing import parameterized
import dp_accounting
import pytest

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import events
from tff_ddp_tests import harness

DDG = dict(l2_sensitivity=1000.0, num_clients=100, dimension=2**16)
PBM = dict(num_clients=1000, dimension=64)


class CalibrateTest(parameterized.TestCase):

  @parameterized.parameters(
      ('ddg', 'local_stddev', DDG, 'poisson', 1000, 'server'),
      ('ddg', 'noise_multiplier', DDG, 'without-replacement', 100, 'release'),
      ('ddg', 'local_stddev', DDG, 'self', 100, 'server'),
      ('ddg', 'local_stddev', DDG, 'none', 10, 'server'),
      ('skellam', 'local_stddev', DDG, 'none', 10, 'server'),
      ('skellam', 'noise_multiplier', DDG, 'self', 100, 'release'),
      ('cpbm', 'theta', dict(num_trials=16, **PBM), 'none', 1, 'server'),
      ('cpbm', 'theta', dict(num_trials=16, **PBM), 'poisson', 5, 'release'),
  )
  def test_reaches_target_within_one_percent(self, mech, param, params,
                                             sampling, rounds, adversary):
    for target in (0.5, 2.0, 8.0):
      kwargs = (dict(sample_size=100, population=10000)
                if sampling == 'without-replacement' else
                dict(rate=0.01) if sampling != 'none' else {})
      r = calibration.calibrate(
          mech, param, params, target, 1e-5, rounds=rounds, sampling=sampling,
          adversary=adversary, **kwargs)
      if r.at_limit:  # theta = 1/4 is not enough to spend the budget.
        self.assertEqual(r.value, 0.25)
        self.assertLessEqual(r.epsilon, target)
        continue
      self.assertLessEqual(r.epsilon, target)
      self.assertGreaterEqual(r.epsilon, 0.99 * target)
      eps, _ = accountant.epsilon(r.event, 1e-5, adversary,
                                  r.neighboring_relation)
      self.assertEqual(eps, r.epsilon)
      self.assertEqual(r.adversary, adversary)

  @pytest.mark.slow
  def test_gaussian_reaches_target_within_one_percent(self):
    # ~5 s: dp-accounting's fractional-order sampled Gaussian is slow.
    for target in (0.5, 2.0, 8.0):
      r = calibration.calibrate('gaussian', 'noise_multiplier', {}, target,
                                1e-5, rounds=100, sampling='poisson',
                                rate=0.01)
      self.assertLessEqual(r.epsilon, target)
      self.assertGreaterEqual(r.epsilon, 0.99 * target)

  def test_integer_num_trials_is_largest_that_fits(self):
    r = calibration.calibrate('cpbm', 'num_trials', dict(theta=0.1, **PBM),
                              5.0, 1e-5)
    self.assertLessEqual(r.epsilon, 5.0)
    over = accountant.epsilon(calibration.mechanism_event(
        'cpbm', theta=0.1, num_trials=r.value + 1, **PBM), 1e-5)[0]
    self.assertGreater(over, 5.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'parameter of gaussian'):
      calibration.calibrate('gaussian', 'theta', {}, 1.0, 1e-5)
    # Missing fixed parameters: named, before the search range needs them.
    with self.assertRaisesRegex(TypeError, 'missing l2_sensitivity, '
                                'num_clients, dimension'):
      calibration.calibrate('ddg', 'noise_multiplier', {}, 1.0, 1e-5)
    with self.assertRaisesRegex(TypeError, 'num_clients must be an integer'):
      calibration.calibrate('ddg', 'noise_multiplier',
                            dict(l2_sensitivity=1.0, num_clients='10',
                                 dimension=4), 1.0, 1e-5)
    with self.assertRaisesRegex(ValueError, 'target_delta'):
      calibration.calibrate('gaussian', 'noise_multiplier', {}, 1.0, 2.0)
    with self.assertRaisesRegex(ValueError, 'target_epsilon'):
      calibration.calibrate('gaussian', 'noise_multiplier', {},
                            float('nan'), 1e-5)
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      calibration.calibrate('cpbm', 'num_trials',
                            dict(theta=0.25, **PBM), 1e-6, 1e-5)
    with self.assertRaisesRegex(ValueError, 'sampling'):
      calibration.rounds_event(dp_accounting.GaussianDpEvent(1.0),
                               sampling='stratified')
    with self.assertRaisesRegex(ValueError, 'need sampling'):
      calibration.rounds_event(dp_accounting.GaussianDpEvent(1.0), rate=0.1)
    with self.assertRaisesRegex(TypeError, 'rounds'):
      calibration.rounds_event(dp_accounting.GaussianDpEvent(1.0),
                               rounds=2.5)

  def test_rounds_event_shapes(self):
    base = dp_accounting.GaussianDpEvent(1.0)
    self.assertIsInstance(
        calibration.rounds_event(base, 1, 'self', rate=0.1),
        events.SelfSampledDpEvent)
    poisson = calibration.rounds_event(base, 3, 'poisson', sample_size=10,
                                       population=1000)
    self.assertEqual(poisson.event.sampling_probability, 0.01)
    self.assertEqual(poisson.count, 3)



def _gaussian_calibrator(eps, delta=1e-5):
  result = calibration.calibrate('gaussian', 'noise_multiplier', {}, eps,
                                 delta)
  return result, result.event


def _pbm_calibrator(dimension, num_trials):
  def calibrate(eps):
    result = calibration.calibrate(
        'cpbm', 'theta', dict(num_trials=num_trials, num_clients=1000,
                              dimension=dimension), eps, 1e-5)
    return result, result.event
  return calibrate


class SplitBudgetTest(parameterized.TestCase):

  @parameterized.parameters((2.0, (1.0, 10.0)), (0.5, (1.0, 1.0)),
                            (8.0, (3.0, 1.0)))
  def test_gaussians_meet_target_with_the_ratio(self, target, weights):
    split = calibration.split_budget(
        [_gaussian_calibrator, _gaussian_calibrator], weights, target, 1e-5)
    self.assertLessEqual(split.epsilon, target * (1 + 1e-9))
    self.assertGreater(split.epsilon, target * (1 - 2e-3))
    # Each part within calibrate's 0.1% of its share s w_i / sum(w).
    shares = [w / sum(weights) * split.scale for w in weights]
    for eps, share in zip(split.standalone_epsilons, shares):
      self.assertLessEqual(eps, share * (1 + 1e-9))
      self.assertGreater(eps, share * (1 - 2e-3))
    # Independent check: two Gaussians compose to one with z^-2 summed.
    z = sum(r.value**-2 for r in split.results)**-0.5
    self.assertAlmostEqual(
        accountant.epsilon(dp_accounting.GaussianDpEvent(z), 1e-5)[0],
        split.epsilon, places=9)
    # The composition uses the budget better than the sum of the parts.
    self.assertGreater(split.scale, target)

  def test_release_at_its_limit_leaves_the_rest_to_the_other(self):
    # One coordinate, one trial: theta = 1/4 costs ~0.05 at n = 1000, far
    # below its share; the other release takes the rest of the budget.
    split = calibration.split_budget(
        [_pbm_calibrator(1, 1), _pbm_calibrator(64, 16)], [1.0, 1.0], 2.0,
        1e-5)
    limited, other = split.results
    self.assertTrue(limited.at_limit)
    self.assertEqual(limited.value, 0.25)
    self.assertLess(split.standalone_epsilons[0], 0.1)
    self.assertGreater(split.epsilon, 2.0 * (1 - 2e-3))
    self.assertLessEqual(split.epsilon, 2.0 * (1 + 1e-9))
    self.assertFalse(other.at_limit)

  def test_a_release_that_cannot_be_made_that_private(self):
    # cPBM with theta fixed, m calibrated: even m = 1 costs eps_min, so the
    # bracket's low end (target / 4, half of it each) is out of its reach
    # although the target is not; the split must start where it is.
    def pbm(eps):
      result = calibration.calibrate(
          'cpbm', 'num_trials', dict(theta=0.25, num_clients=1000,
                                     dimension=64), eps, 1e-5)
      return result, result.event
    eps_min = accountant.epsilon(calibration.mechanism_event(
        'cpbm', theta=0.25, num_trials=1, num_clients=1000, dimension=64),
                                 1e-5)[0]
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      pbm(0.75 * eps_min)
    target = 3.0 * eps_min
    split = calibration.split_budget([pbm, _gaussian_calibrator], [1.0, 1.0],
                                     target, 1e-5)
    self.assertLessEqual(split.epsilon, target * (1 + 1e-9))
    self.assertGreaterEqual(split.results[0].value, 1)
    self.assertGreaterEqual(split.standalone_epsilons[0], eps_min * (1 - 1e-9))
    # Nothing can reach a target below what m = 1 alone costs.
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      calibration.split_budget([pbm, _gaussian_calibrator], [1.0, 1.0],
                               0.5 * eps_min, 1e-5)

  def test_everything_at_limit(self):
    split = calibration.split_budget(
        [_pbm_calibrator(1, 1), _pbm_calibrator(1, 2)], [1.0, 1.0], 50.0,
        1e-5)
    self.assertTrue(split.at_limit)
    self.assertLess(split.epsilon, 1.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'one weight per calibrator'):
      calibration.split_budget([_gaussian_calibrator], [1.0, 2.0], 1.0, 1e-5)
    with self.assertRaisesRegex(ValueError, 'weights'):
      calibration.split_budget([_gaussian_calibrator], [0.0], 1.0, 1e-5)
    with self.assertRaisesRegex(TypeError, 'callable'):
      calibration.split_budget([1.0], [1.0], 1.0, 1e-5)
    with self.assertRaisesRegex(ValueError, 'target_epsilon'):
      calibration.split_budget([_gaussian_calibrator], [1.0], -1.0, 1e-5)


if __name__ == '__main__':
  harness.main()
