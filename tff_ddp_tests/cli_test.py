"""The tff-ddp command: help for every subcommand, and the main job."""

import contextlib
import io

from absl.testing import parameterized
import pytest

from tff_ddp import cli
from tff_ddp import demo


class CliTest(parameterized.TestCase):

  @parameterized.parameters(([],), (['demo'],), (['privacy'],),
                            (['quantiles'],))
  def test_help(self, argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as e:
      cli.main(argv + ['--help'])
    self.assertEqual(e.exception.code, 0)
    self.assertIn('usage: tff-ddp', out.getvalue())

  @parameterized.parameters(
      (['demo', '--bits', '31'], '--bits must be in'),
      (['demo', '--delta', '2'], '--delta must be in'),
      (['demo', '--clients', '0'], 'must be >= 1'),
      (['quantiles', '--quantiles', '1.5'], '--quantiles must be in'),
      (['quantiles', '--epsilon', '0'], '--epsilon must be > 0'),
      (['quantiles', '--methods', 'tree', '--bins', '24'], 'power of two'),
      (['quantiles', '--clients', '5000', '--bits', '8'], 'bits >='))
  def test_demo_bad_arguments_give_one_line_errors(self, argv, message):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
      cli.main(argv)
    self.assertEqual(e.exception.code, 2)
    self.assertIn(message, err.getvalue())


@pytest.mark.slow
class DemoTest(parameterized.TestCase):

  def test_small_demo_runs_and_reports(self):
    lines = []
    rows = demo.run(num_clients=4, dim=16, rounds=2, bits=(16,),
                    noise_multiplier=1.0, print_fn=lines.append)
    self.assertLen(rows, 3)
    ddg_row, gauss_row, plain_row = rows
    self.assertEqual(ddg_row.bits, 16)
    # eps of the DDG (zero-out) and of the Gaussian (add/remove) with the
    # same central noise are close when tau is negligible.
    self.assertAlmostEqual(ddg_row.epsilon / gauss_row.epsilon, 1.0, delta=0.1)
    self.assertLess(plain_row.mse, 1e-10)
    self.assertGreater(ddg_row.mse, 0)
    self.assertIn('DDG (distributed, SecAgg)', lines[0])


@pytest.mark.slow
class QuantilesTest(parameterized.TestCase):

  def test_small_experiment_runs_and_reports(self):
    from tff_ddp.analytics import experiment  # pylint: disable=g-import-not-at-top
    lines = []
    rows = experiment.run(methods=('flat', 'haar'),
                          mechanisms=('discrete_gaussian',), num_clients=16,
                          num_bins=16, epsilon=4.0, repetitions=2,
                          print_fn=lines.append)
    self.assertEqual([(r.method, r.mechanism) for r in rows],
                     [('flat', 'discrete_gaussian'),
                      ('flat', 'central gaussian'),
                      ('haar', 'discrete_gaussian'),
                      ('haar', 'central gaussian')])
    for row in rows:
      self.assertGreaterEqual(row.worst_error, 0.0)
      self.assertLessEqual(row.worst_error, 1.0)
      self.assertLessEqual(row.epsilon, 4.0 + 1e-9)
      self.assertLen(row.last_estimates, 5)
    self.assertIn('worst err (eq.3)', lines[1])


if __name__ == '__main__':
  pytest.main([__file__])
