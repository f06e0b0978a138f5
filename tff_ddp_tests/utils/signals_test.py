"""Signals end the whole run, at every phase, and
threads share the context (item 7).

A README-style script (TFF's own `set_sync_test_cpp_execution_context()`,
a loop of DDG rounds) is run in a session of its own and sent SIGINT (to
its process group, as a terminal's Ctrl-C), SIGTERM (to it, as `timeout`
and `kill`) or SIGHUP (to it, as `kill -HUP`) while TFF starts
its worker or during the rounds. Before, SIGTERM / SIGHUP left the worker
every time and Ctrl-C in 2 of 7 runs (TFF started a worker again while the
interrupt unwound): the worker held the script's pipes, so reading its
output never ended. Now the script ends, nothing of its session is left,
and its output pipe closes.
"""

from absl.testing import parameterized
import pytest

from tff_ddp_tests.utils import signal_scripts


@pytest.mark.slow  # a Python importing TFF per case (~15 s each)
class SignalTest(parameterized.TestCase):

  # Each signal once, start-up where the orphan race was; the full matrix
  # (every signal at every phase) is tff_ddp_tests/fuzz/bad_inputs.py's.
  @parameterized.parameters(('SIGINT', 'worker start-up'),
                            ('SIGTERM', 'worker start-up'),
                            ('SIGHUP', 'rounds'))
  def test_signal_ends_the_run_and_its_workers(self, signame, phase):
    what, left, status, closed = signal_scripts.run_and_signal(signame, phase)
    self.assertStartsWith(what, 'sent')
    self.assertIsNotNone(status, 'the script did not end')
    self.assertNotEqual(status, 0)
    self.assertEmpty(left, f'left running after {signame} at {phase}')
    self.assertTrue(closed, 'a process still holds the script\'s stdout')


@pytest.mark.slow  # a Python importing TFF per case
class ThreadsTest(parameterized.TestCase):
  """Two processes in two threads: with the context installed once in the
  main thread, or in each thread, both run; with none, each gets the
  library's advice (TFF said only "No default context installed")."""

  def test_two_threads(self):
    result = signal_scripts.run_threads_script(timeout=400)
    for mode, expected in (('none', ['advice: yes', 'advice: yes']),
                           ('main', ['ok', 'ok']), ('each', ['ok', 'ok'])):
      self.assertIn(f'{mode} alive 0', result.stdout, result.stderr[-2000:])
      self.assertIn(f'{mode} results {expected!r}', result.stdout,
                    result.stderr[-2000:])
