"""`pip install .` gives a working core: the README's core example runs from
the installed package, not from this checkout.

The package is built and installed (without dependencies: those of this
lane are the ones `setup.py` asks for) into a temporary directory with uv
(which `make setup` installs beside pip), and the README's core example runs
from another directory with only that installation of tff_ddp on its path.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import pytest

from tff_ddp_tests import conftest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_core_example() -> str:
  """The README's Python block marked `<!-- doctest: core -->`."""
  with open(os.path.join(_ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  after = text[text.index('<!-- doctest: core -->'):]
  return re.search(r'```python\n(.*?)```', after, re.S).group(1)


@pytest.mark.slow  # builds the package: ~30 s
@pytest.mark.skipif(conftest.has_tff(),
                    reason='the core lane (make '
                    'test-core: today\'s stack, no TFF) checks the install')
class InstalledCoreTest(absltest.TestCase):

  def test_readme_core_example_runs_from_the_installed_package(self):
    uv = shutil.which('uv', path=os.path.dirname(sys.executable))
    self.assertIsNotNone(uv, 'uv is installed by make setup')
    with tempfile.TemporaryDirectory() as tmp:
      target = os.path.join(tmp, 'site')
      subprocess.run([
          uv, 'pip', 'install', '--quiet', '--no-deps', '--python',
          sys.executable, '--target', target, _ROOT
      ],
                     check=True,
                     capture_output=True,
                     text=True,
                     timeout=600)
      installed = sorted(os.listdir(os.path.join(target, 'tff_ddp')))
      for package in ('accounting', 'encoders', 'mechanisms', 'utils'):
        self.assertIn(package, installed)
      self.assertFalse(os.path.exists(os.path.join(target, 'tff_ddp_tests')))
      script = os.path.join(tmp, 'example.py')
      with open(script, 'w', encoding='utf-8') as f:
        f.write('import tff_ddp\n'
                'print("from", tff_ddp.__file__)\n' + readme_core_example())
      result = subprocess.run([sys.executable, script],
                              cwd=tmp,
                              capture_output=True,
                              text=True,
                              timeout=600,
                              check=False,
                              env=dict(os.environ,
                                       PYTHONPATH=target,
                                       TF_CPP_MIN_LOG_LEVEL='3'))
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    lines = result.stdout.splitlines()
    self.assertEqual(lines[0],
                     f'from {os.path.join(target, "tff_ddp", "__init__.py")}')
    self.assertRegex(lines[-1], r'^epsilon after 3 rounds: 10\.00 ')
