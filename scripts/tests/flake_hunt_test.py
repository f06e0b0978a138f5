"""scripts/flake_hunt.py: repetitions in fresh pytest processes, every
failure counted, nothing retried (`make test-tooling`)."""

import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
from tff_ddp.utils import processes
from tff_ddp_tests import script_module

_HUNT = os.path.join(script_module.ROOT, 'scripts', 'flake_hunt.py')

# A test that fails on every other run (a counter file beside it), one that
# always passes and one that always fails.
_TESTS = '''
import os
_COUNTER = os.path.join(os.path.dirname(__file__), 'counter')

def test_passes():
  assert True

def test_every_other_run():
  runs = int(open(_COUNTER).read()) if os.path.exists(_COUNTER) else 0
  open(_COUNTER, 'w').write(str(runs + 1))
  assert runs % 2 == 0, f'run {runs + 1} of an intermittent test'

def test_always_fails():
  assert 1 == 2, 'never equal'
'''


def _hunt(directory, *args):
  """Runs flake_hunt.py from `directory` with `args`; its CompletedProcess."""
  return subprocess.run([sys.executable, _HUNT, *args],
                        capture_output=True,
                        text=True,
                        timeout=300,
                        check=False,
                        cwd=directory)


def _write_module(directory, text):
  """Writes `text` as sample_test.py in `directory`; returns its path."""
  path = os.path.join(directory, 'sample_test.py')
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text)
  return path


class FlakeHuntTest(absltest.TestCase):

  def test_counts_each_failure_over_repetitions(self):
    with tempfile.TemporaryDirectory() as directory:
      path = _write_module(directory, _TESTS)
      log = os.path.join(directory, 'hunt.jsonl')
      result = _hunt(directory, '--repeat', '3', '--log', log, path)
      with open(log, encoding='utf-8') as f:
        logged = f.read().splitlines()
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    out = result.stdout
    self.assertIn('run 1/3: 2 passed, 1 failed, 0 skipped', out)
    self.assertIn('run 2/3: 1 passed, 2 failed, 0 skipped', out)
    self.assertIn('run 3/3: 2 passed, 1 failed, 0 skipped', out)
    # pytest names the module relative to a root that depends on where the
    # repository and the temporary directory are ('sample_test' or
    # 'tmpXXXX.sample_test'), so only the module and test name are checked.
    self.assertRegex(out, r'\n  3/3  (\S+\.)?sample_test::test_always_fails\n')
    self.assertRegex(out,
                     r'\n  1/3  (\S+\.)?sample_test::test_every_other_run\n')
    self.assertIn('run 2 of an intermittent test', out)
    self.assertNotIn('test_passes', out.split('failed at least once')[1])
    self.assertLen(logged, 3)

  def test_says_so_when_nothing_failed(self):
    with tempfile.TemporaryDirectory() as directory:
      path = _write_module(directory, 'def test_passes():\n  assert True\n')
      result = _hunt(directory, '--repeat', '2', path)
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn('run 2/2: 1 passed, 0 failed, 0 skipped', result.stdout)
    self.assertIn('no test failed', result.stdout)


class FlakeHuntTimeoutTest(absltest.TestCase):

  def test_a_hung_repetition_is_ended_with_what_it_started(self):
    # The timeout must leave pytest time to start and reach the test (a
    # second or two; 60 s under any load CI has had), else no child exists.
    with tempfile.TemporaryDirectory() as directory:
      pid_file = os.path.join(directory, 'child.pid')
      path = _write_module(
          directory, '\n'.join([
              'import subprocess, time', 'def test_hangs():',
              "  child = subprocess.Popen(['sleep', '600'])",
              f'  open({pid_file!r}, "w").write(str(child.pid))',
              '  time.sleep(600)', ''
          ]))
      result = _hunt(directory, '--repeat', '1', '--timeout', '60', path)
      with open(pid_file, encoding='utf-8') as f:
        child = int(f.read())
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    self.assertIn('  1/1  <timeout>', result.stdout)
    self.assertIn('timed out after 60 s', result.stdout)
    self.assertTrue(processes.has_exited(child),
                    msg=f'sleep {child} left running')
