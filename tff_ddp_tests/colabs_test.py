"""Every notebook in colabs/ runs top to bottom (its code cells, in order)."""

import json
import os
import subprocess
import sys

from absl.testing import parameterized
import pytest

from tff_ddp_tests import harness

_COLABS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'colabs')
_NOTEBOOKS = sorted(f for f in os.listdir(_COLABS) if f.endswith('.ipynb'))
# Runs after the notebook's own cells, so a notebook that forgets to end its
# TFF workers cannot leak them.
_EPILOGUE = ("\nfrom tff_ddp.utils import processes\n"
             "processes.release_tff()\n")


def _code(path):
  with open(path) as f:
    notebook = json.load(f)
  return '\n'.join(''.join(cell['source']) for cell in notebook['cells']
                   if cell['cell_type'] == 'code')


class FoundTest(parameterized.TestCase):

  def test_found(self):
    self.assertIn('federated_quantiles.ipynb', _NOTEBOOKS)
    self.assertIn('distributed_discrete_gaussian.ipynb', _NOTEBOOKS)


@pytest.mark.slow
class ColabsTest(parameterized.TestCase):

  @parameterized.parameters(*_NOTEBOOKS)
  def test_runs(self, name):
    # A separate interpreter: notebooks set their own execution context and
    # end their own workers, which must not touch this test session's.
    result = subprocess.run(
        [sys.executable, '-c', _code(os.path.join(_COLABS, name)) +
         _EPILOGUE], capture_output=True, text=True, timeout=600,
        check=False)
    self.assertEqual(result.returncode, 0,
                     msg=f'{name} failed:\n{result.stderr[-3000:]}')


if __name__ == '__main__':
  harness.main()
