"""Ending the TFF worker processes that this Python process started.

Executing a TFF computation in the C++ test context starts `worker_binary`
subprocesses that outlive Python and keep the parent's stdout/stderr open, so
`pytest | tail` or a CI script would wait for ever. We end exactly the
descendants of the current process, found by process id through /proc, never
by name (other runs on the same machine are left alone).

Large calls. TFF 0.87's `worker_binary` overflows a gRPC server thread's
stack in a frame under `SequenceExecutor::CreateStruct` (symbolised from the
binary; the recursion depth grows with the number of client values, which
we infer from the crash appearing only near 10^5 values). With glibc's
default 8 MiB thread stacks the worker died with SIGSEGV in 3 of the 10
rounds of 10^5 clients we ran (the test context then
restarts the worker and repeats the call, so the result is right but the
round takes up to twice as long). `raise_worker_stack_limit()` raises this
process's soft RLIMIT_STACK, which the workers it starts afterwards inherit
as their default thread stack size (256 MiB of address space per thread,
reserved, not used).
"""

import atexit
import contextlib
import os
import resource
import signal
import time
from typing import List


# Default thread stack of the worker_binary processes started after
# `raise_worker_stack_limit()` (see the module docstring).
WORKER_STACK_BYTES = 256 * 2**20
# The command name of TFF's worker processes.
WORKER_COMMAND = 'worker_binary'
# /proc states of a process that has ended: zombie, dead ('' when gone).
_ENDED = ('Z', 'X')
_TFF_MODULE = 'tensorflow_federated'


def raise_worker_stack_limit(stack_bytes: int = WORKER_STACK_BYTES) -> int:
  """Raises the soft RLIMIT_STACK to `stack_bytes` (never lowers it).

  Call before the first TFF computation (the test context starts its worker
  then) or before `workers.local_workers`; workers already running keep
  their stacks. Capped at the hard limit. Returns the soft limit now in
  force (resource.RLIM_INFINITY for unlimited).
  """
  soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
  if soft == resource.RLIM_INFINITY or soft >= stack_bytes:
    return soft
  target = stack_bytes if hard == resource.RLIM_INFINITY else min(
      stack_bytes, hard)
  if target > soft:
    resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
  return resource.getrlimit(resource.RLIMIT_STACK)[0]


def _proc_stats():
  """(pid, fields of /proc/pid/stat after the command name) per process:
  fields[0] the state, [1] the parent, [3] the session."""
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat', 'rb') as f:
        stat = f.read().decode('utf-8', 'replace')
    except OSError:
      continue
    # The command name is in parentheses and may contain spaces.
    yield int(entry), stat[stat.rfind(')') + 2:].split()


def _children_map() -> dict:
  children = {}
  for pid, fields in _proc_stats():
    children.setdefault(int(fields[1]), []).append(pid)
  return children


def descendant_pids(pid: int = None) -> List[int]:
  """Process ids of all living descendants of `pid` (default: this process)."""
  if pid is None:
    pid = os.getpid()
  if not os.path.isdir('/proc'):
    return []
  children = _children_map()
  found, stack = [], [pid]
  while stack:
    for child in children.get(stack.pop(), []):
      found.append(child)
      stack.append(child)
  return found


def session_pids(sid: int) -> List[int]:
  """Process ids of the living processes of session `sid`.

  A process started with `start_new_session=True` (as Jupyter starts its
  kernels) leads a session whose id is its pid; its descendants stay in it
  (unless they start sessions of their own) also after it died and they
  were re-parented, when `descendant_pids` no longer finds them.
  """
  if not os.path.isdir('/proc'):
    return []
  return [pid for pid, fields in _proc_stats()
          if int(fields[3]) == sid and fields[0] not in _ENDED]


def _state(pid: int) -> str:
  """The /proc state letter of `pid` ('Z' zombie, 'X' dead), '' if gone."""
  try:
    with open(f'/proc/{pid}/stat', 'rb') as f:
      stat = f.read().decode('utf-8', 'replace')
  except OSError:
    return ''
  return stat[stat.rfind(')') + 2:].split()[0]


def has_exited(pid: int) -> bool:
  """Whether `pid` no longer runs: gone, or a zombie awaiting its reaper."""
  state = _state(pid)
  return not state or state in _ENDED


def _command(pid: int) -> str:
  try:
    with open(f'/proc/{pid}/comm') as f:
      return f.read().strip()
  except OSError:
    return ''


def _terminate(pids: List[int], timeout: float, reap: bool) -> None:
  """SIGTERM, wait until exited (zombie or gone), SIGKILL the rest.

  SIGTERM, not SIGINT: a process started in the background by a
  non-interactive shell (`cmd &`, nohup, many CI runners) inherits SIGINT
  *ignored*, and so do the workers it starts. With reap=False our exited
  children stay zombies, so that whoever holds their `Popen` (TFF's
  ServiceManager) can still signal and wait for them without error.
  """
  for pid in pids:
    try:
      os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
      pass

  def exited(pid):
    if reap:
      try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
          return True
      except ChildProcessError:
        pass
    return has_exited(pid)

  deadline = time.monotonic() + timeout
  alive = list(pids)
  while alive and time.monotonic() < deadline:
    alive = [pid for pid in alive if not exited(pid)]
    if alive:
      time.sleep(0.05)
  for pid in alive:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  if reap:
    for pid in alive:
      try:
        os.waitpid(pid, 0)
      except ChildProcessError:
        pass


def end_descendants(timeout: float = 5.0) -> List[int]:
  """Terminates (then kills) every descendant of this process; returns pids."""
  pids = descendant_pids()
  _terminate(pids, timeout, reap=True)
  return pids


def end_workers(timeout: float = 5.0) -> List[int]:
  """Ends the TFF worker processes this Python process started; returns pids.

  Call it when a script is done with TFF (or use `ending_workers()` /
  `end_workers_at_exit()`): TFF's `worker_binary` children outlive Python
  and keep its stdout/stderr open, so `python script.py | tail` would never
  finish. Only descendants of this process are touched, by process id.
  """
  return end_descendants(timeout)


@contextlib.contextmanager
def ending_workers():
  """`with ending_workers(): ...` ends this process's TFF workers on exit."""
  try:
    yield
  finally:
    end_workers()


_AT_EXIT = []


def end_workers_at_exit():
  """Registers `end_workers` to run when the interpreter exits (idempotent)."""
  if not _AT_EXIT:
    atexit.register(release_tff)
    _AT_EXIT.append(True)


def drop_tff_contexts():
  """Replaces TFF's execution contexts by none, while Python is alive.

  The contexts own TFF's `ServiceManager`s, whose `__del__` ends the
  `worker_binary` they started (SIGINT, then wait; the workers are ended
  here first, see below). Run during interpreter
  shutdown that `__del__` fails ("'NoneType' object has no attribute
  'Popen'") and the worker outlives Python, holding its stdout open; run
  here, it works. tff_ddp registers this at exit when its aggregators are
  imported (`register_tff_cleanup`), so scripts end their TFF workers
  without doing anything.
  """
  import gc  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  if _TFF_MODULE in sys.modules:
    # That `__del__` ends its worker with SIGINT and then waits for it: a
    # worker that inherited SIGINT ignored (background runs) would never
    # exit and the wait would hang for ever. So the workers are ended
    # first, with SIGTERM, and left as zombies for `__del__` to reap.
    workers = [pid for pid in descendant_pids()
               if _command(pid) == WORKER_COMMAND]
    _terminate(workers, 5.0, reap=False)
    from tensorflow_federated.python.core.impl.context_stack import set_default_context  # pylint: disable=g-import-not-at-top
    set_default_context.set_no_default_context()
    gc.collect()
    for pid in workers:  # any the contexts did not own
      try:
        os.waitpid(pid, os.WNOHANG)
      except ChildProcessError:
        pass


def use_test_context():
  """Installs TFF's sync C++ test execution context, without hanging.

  Installing a context drops the previous one, whose `ServiceManager`
  `__del__` sends its `worker_binary` SIGINT and waits for it. A worker that
  inherited SIGINT *ignored* -- any process started with `cmd &` by a
  non-interactive shell, as scripts and CI runners do -- never exits, and
  that wait hangs for ever (seen: a fresh-clone `make test` started that
  way hung in the CLI tests, where each command installs the context
  again). So the current contexts are dropped first by `drop_tff_contexts`
  (workers ended with SIGTERM, by pid), then the test context is installed.
  The worker it starts gets the thread stacks of `raise_worker_stack_limit`
  (a 10^5-client call crashed workers with the default 8 MiB; the test
  context then restarts the worker and repeats the call, right but up to
  twice as slow). tff_ddp's CLI and test harness install contexts only
  through here.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  raise_worker_stack_limit()
  drop_tff_contexts()
  tff.backends.test.set_sync_test_cpp_execution_context()


_CLEANUP = []


def register_tff_cleanup():
  """Registers `drop_tff_contexts` at interpreter exit (idempotent)."""
  if not _CLEANUP:
    atexit.register(drop_tff_contexts)
    _CLEANUP.append(True)


def release_tff() -> List[int]:
  """Drops TFF's execution contexts, then ends this process's TFF workers.

  TFF's contexts hold `ServiceManager` objects whose `__del__` fails with
  "'NoneType' object has no attribute 'Popen'" when it first runs during
  interpreter shutdown; dropping them while the interpreter is alive
  avoids that traceback. Returns the pids ended.
  """
  drop_tff_contexts()
  return end_workers()
