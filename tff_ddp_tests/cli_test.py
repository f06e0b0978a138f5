"""The tff-ddp command: help for every subcommand, and the main job."""

import contextlib
import io

from absl.testing import parameterized
import pytest

from tff_ddp import cli
from tff_ddp import demo


class CliTest(parameterized.TestCase):

  @parameterized.parameters(([],), (['demo'],), (['privacy'],))
  def test_help(self, argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as e:
      cli.main(argv + ['--help'])
    self.assertEqual(e.exception.code, 0)
    self.assertIn('usage: tff-ddp', out.getvalue())

  @parameterized.parameters(
      (['demo', '--bits', '31'], '--bits must be in'),
      (['demo', '--delta', '2'], '--delta must be in'),
      (['demo', '--clients', '0'], 'must be >= 1'))
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


if __name__ == '__main__':
  pytest.main([__file__])
