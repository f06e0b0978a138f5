"""Ending TFF workers: by pid, also when SIGINT is ignored (background runs)."""

import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from tff_ddp.utils import processes

_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ignore_sigint():
  # What a non-interactive shell does to `cmd &` (and nohup to SIGHUP):
  # the child, and every worker it starts, inherits SIGINT ignored.
  signal.signal(signal.SIGINT, signal.SIG_IGN)


class TerminateTest(tf.test.TestCase):

  def test_ends_a_child_that_ignores_sigint(self):
    child = subprocess.Popen(  # pylint: disable=subprocess-popen-preexec-fn  # the child needs its own session
        ['sleep', '60'],
        preexec_fn=_ignore_sigint)
    try:
      self.assertIn(child.pid, processes.descendant_pids())
      # (Not end_descendants: that would also end this session's workers.)
      processes._terminate([child.pid], 5.0, reap=True)  # pylint: disable=protected-access  # tests a private part
      # Reaped: gone from /proc.
      self.assertEqual(processes._state(child.pid), '')  # pylint: disable=protected-access  # tests a private part
    finally:
      if child.poll() is None:
        child.kill()

  def test_zombie_left_for_its_owner_when_not_reaping(self):
    child = subprocess.Popen(['sleep', '60'])
    try:
      processes._terminate([child.pid], 5.0, reap=False)  # pylint: disable=protected-access  # tests a private part
      self.assertEqual(processes._state(child.pid), 'Z')  # pylint: disable=protected-access  # tests a private part
      # The Popen owner can still signal and wait (TFF's ServiceManager).
      os.kill(child.pid, signal.SIGINT)
      self.assertEqual(child.wait(timeout=5), -signal.SIGTERM)
    finally:
      if child.poll() is None:
        child.kill()


_STACK_SCRIPT = """
import resource, subprocess
from tff_ddp.utils import processes
soft = processes.raise_worker_stack_limit()
again = processes.raise_worker_stack_limit(4096)  # never lowers
child = subprocess.run(['sh', '-c', 'ulimit -s'], capture_output=True,
                       text=True, check=True).stdout.strip()
print(soft, again, child)
"""


class WorkerExitedTest(tf.test.TestCase):
  """TFF's readiness poll (`time.sleep` in get_stub's loop, guarded) ends
  once the worker it waits for has exited: a Ctrl-C at start-up that
  reached a thread other than the main one hung the script for ever."""

  def test_readiness_poll_ends_when_its_worker_exited(self):
    guarded = processes._GuardedTime()  # pylint: disable=protected-access  # tests a private part
    worker = processes.WorkerPopen(['sleep', '60'])
    try:
      guarded.sleep(0.01)  # alive: TFF keeps waiting
      os.kill(worker.pid, signal.SIGINT)  # the terminal's Ctrl-C
      while not processes.has_exited(worker.pid):
        guarded.sleep(0.01)
      with self.assertRaisesRegex(processes.WorkerExitedError,
                                  f'pid {worker.pid}'):
        guarded.sleep(0.01)
      # Left a zombie: TFF's next get_stub signals and waits for it.
      self.assertEqual(processes._state(worker.pid), 'Z')  # pylint: disable=protected-access  # tests a private part
    finally:
      worker.kill()
      worker.wait()


class StackLimitTest(tf.test.TestCase):

  def test_raises_the_limit_that_workers_inherit(self):
    # Started with the usual 8 MiB soft limit (a shell's `ulimit -s 8192`).
    out = subprocess.run([
        'sh', '-c', f'ulimit -S -s 8192 && exec {sys.executable} -c "$0"',
        _STACK_SCRIPT
    ],
                         capture_output=True,
                         text=True,
                         check=True,
                         cwd=_ROOT,
                         env=dict(os.environ, PYTHONPATH=_ROOT)).stdout.split()
    soft, again, child = int(out[0]), int(out[1]), out[2]
    self.assertEqual(soft, processes.WORKER_STACK_BYTES)
    self.assertEqual(again, soft)
    self.assertEqual(child, str(processes.WORKER_STACK_BYTES // 1024))


# One Python started as a background shell starts `cmd &` from a shell
# with the usual 8 MiB stack limit (`ulimit -s 8192`): SIGINT ignored, and
# every worker it starts inherits that. It is the user script of the three
# tests below, which share its run (each Python that imports TFF costs
# ~15 s of CPU):
# 1. it runs a DDG round in TFF's own test context and prints its worker;
# 2. it installs our test context twice (replacing a context whose worker
#    ignores SIGINT), running a computation after each: prints the sums and
#    each worker's soft stack limit;
# 3. it prints its workers and exits without release_tff(): tff_ddp's exit
#    clean-up must end them.
_BACKGROUND_SCRIPT = '''
import numpy as np, tensorflow_federated as tff
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.utils import processes
tff.backends.test.set_sync_test_cpp_execution_context()
process = DiscreteGaussianSumFactory.from_tff_arguments(
    1.0, 2, 16, 1.0).create(tff.TensorType(np.float32, [4]))
process.next(process.initialize(), [np.ones(4, np.float32)] * 2)
print('first', *processes.descendant_pids(), flush=True)
@tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
def total(values):
  return tff.federated_sum(values)
for _ in range(2):
  processes.use_test_context()
  print('sum', total([1, 2, 3]), flush=True)
  for pid in processes.descendant_pids():
    if processes._command(pid) == 'worker_binary':
      with open(f'/proc/{pid}/limits') as f:
        line = [l for l in f if l.startswith('Max stack size')][0]
      print('worker stack', line.split()[3], flush=True)
print('workers', *processes.descendant_pids(), flush=True)
'''


@pytest.mark.slow
class BackgroundScriptTest(tf.test.TestCase):
  """A script started in the background with the default stack limit (see
  _BACKGROUND_SCRIPT); run once for the class, its tests read its output."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.result = subprocess.run(  # pylint: disable=subprocess-run-check  # the test reads the exit status
        [
            'sh', '-c', f'ulimit -S -s 8192 && exec {sys.executable} -c "$0"',
            _BACKGROUND_SCRIPT
        ],
        preexec_fn=_ignore_sigint,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=_ROOT,
        env=dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL='3'))

  def _lines(self, prefix):
    self.assertEqual(self.result.returncode, 0,
                     self.result.stdout + self.result.stderr[-3000:])
    return [l for l in self.result.stdout.splitlines() if l.startswith(prefix)]

  def test_context_switch_with_sigint_ignored_does_not_hang(self):
    # tff.backends.test.set_sync_test_cpp_execution_context() in place of
    # use_test_context() hangs here for ever: replacing the context makes
    # TFF send SIGINT to a worker that ignores it, then wait (a fresh-clone
    # `make test` started with `cmd &` hung so in cli_test).
    self.assertEqual(self._lines('sum'), ['sum 6', 'sum 6'])
    self.assertNotEmpty(self._lines('first')[0].split()[1:])

  def test_the_test_context_worker_gets_large_stacks(self):
    # A quantile round of 10^5 clients crashed the test context's worker
    # (8 MiB thread stacks, a shell's default) and TFF silently repeated
    # the call; use_test_context() starts it with WORKER_STACK_BYTES.
    stacks = [l.split()[2] for l in self._lines('worker stack')]
    self.assertNotEmpty(stacks, self.result.stdout)
    self.assertEqual(set(stacks), {str(processes.WORKER_STACK_BYTES)})

  def test_script_run_with_sigint_ignored_exits_and_ends_its_worker(self):
    # Before the fix, TFF's ServiceManager.__del__ sent SIGINT to a worker
    # that ignored it and waited for ever: the script hung at exit.
    workers = [int(p) for p in self._lines('workers')[0].split()[1:]]
    workers += [int(p) for p in self._lines('first')[0].split()[1:]]
    self.assertNotEmpty(workers)
    for pid in workers:
      # Gone (or, with pid reuse, no longer a TFF worker).
      try:
        with open(f'/proc/{pid}/comm', encoding='utf-8') as f:
          self.assertNotEqual(f.read().strip(), 'worker_binary')
      except OSError:
        pass
    self.assertNotIn('Exception ignored', self.result.stderr)
