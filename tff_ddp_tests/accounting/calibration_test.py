"""Tests of noise calibration and the `privacy` CLI."""

import argparse
import contextlib
import io

from absl.testing import parameterized
import pytest

from tff_ddp.accounting import calibration
from tff_ddp.accounting import cli

DDG = dict(l2_sensitivity=1000.0, num_clients=100, dimension=2**16)
PBM = dict(num_clients=1000, dimension=64)


class CalibrateTest(parameterized.TestCase):

  @parameterized.parameters(
      ('ddg', 'local_stddev', DDG, 'poisson', 1000),
      ('ddg', 'noise_multiplier', DDG, 'without-replacement', 100),
      ('ddg', 'local_stddev', DDG, 'none', 10),
      ('cpbm', 'theta', dict(num_trials=16, **PBM), 'none', 1),
      ('cpbm', 'theta', dict(num_trials=16, **PBM), 'poisson', 5),
  )
  def test_reaches_target_within_one_percent(self, mech, param, params,
                                             sampling, rounds):
    for target in (0.5, 2.0, 8.0):
      r = calibration.calibrate(
          mech, param, params, target, 1e-5, rounds=rounds, sampling=sampling,
          rate=0.01, sample_size=100, population=10000)
      if r.at_limit:  # theta = 1/4 is not enough to spend the budget.
        self.assertEqual(r.value, 0.25)
        self.assertLessEqual(r.epsilon, target)
        continue
      self.assertLessEqual(r.epsilon, target)
      self.assertGreaterEqual(r.epsilon, 0.99 * target)
      eps, _ = calibration.epsilon_of(r.event, 1e-5, r.neighboring_relation)
      self.assertEqual(eps, r.epsilon)

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
    over = calibration.epsilon_of(calibration.mechanism_event(
        'cpbm', theta=0.1, num_trials=r.value + 1, **PBM), 1e-5)[0]
    self.assertGreater(over, 5.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'parameter of gaussian'):
      calibration.calibrate('gaussian', 'theta', {}, 1.0, 1e-5)
    with self.assertRaisesRegex(ValueError, 'target_delta'):
      calibration.calibrate('gaussian', 'noise_multiplier', {}, 1.0, 2.0)


def _parser():
  parser = argparse.ArgumentParser(prog='tff-ddp')
  cli.register(parser.add_subparsers())
  return parser


def _run(argv):
  args = _parser().parse_args(argv.split())
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    code = args.func(args)
  return code, out.getvalue()


class CliTest(parameterized.TestCase):

  def test_gaussian_epsilon(self):
    code, out = _run('privacy --mechanism gaussian --noise-multiplier 1.1 '
                     '--rounds 100 --sampling poisson --rate 0.01 '
                     '--delta 1e-5')
    self.assertEqual(code, 0)
    self.assertIn('epsilon:', out)
    self.assertIn('best RDP order:', out)

  def test_ddg_calibration(self):
    code, out = _run('privacy --mechanism ddg --l2-sensitivity 1000 '
                     '--num-clients 100 --dimension 65536 --rounds 100 '
                     '--sampling without-replacement --population 10000 '
                     '--delta 1e-6 --target-epsilon 3')
    self.assertEqual(code, 0)
    self.assertIn('local-stddev:', out)

  def test_cpbm_epsilon(self):
    code, out = _run('privacy --mechanism cpbm --theta 0.1 --num-trials 16 '
                     '--num-clients 1000 --dimension 64 --delta 1e-5')
    self.assertEqual(code, 0)
    self.assertIn('zero-out', out)

  @parameterized.parameters(
      ('--mechanism cpbm --theta 0.3 --num-trials 16 --num-clients 10 '
       '--dimension 4 --delta 1e-5', 'in (0, 0.25]'),
      ('--mechanism ddg --l2-sensitivity 10 --num-clients 10 --dimension 4 '
       '--delta 1e-5', '--local-stddev'),
      ('--mechanism gaussian --noise-multiplier 1 --delta 1e-5 '
       '--sampling poisson', '--rate in (0, 1]'),
      ('--mechanism gaussian --noise-multiplier 1 --delta 2', 'in (0, 1)'),
  )
  def test_bad_parameter_is_one_line_error(self, argv, message):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
      _run('privacy ' + argv)
    self.assertEqual(cm.exception.code, 2)
    last = err.getvalue().strip().splitlines()[-1]
    self.assertIn('error:', last)
    self.assertIn(message, last)
