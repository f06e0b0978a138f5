"""Ending the TFF worker processes that this Python process started.

Executing a TFF computation in the C++ test context starts `worker_binary`
subprocesses that outlive Python and keep the parent's stdout/stderr open.
We end exactly the descendants of the current process, found by process id
through /proc, never by name (`end_workers`, `end_descendants`,
`release_tff`). `raise_worker_stack_limit()` gives the workers larger
thread stacks (TFF 0.87's worker overflows one near 10^5 client values);
`guard_worker_starts()` and `end_run_on_signals()` keep workers from
outliving Ctrl-C, SIGTERM or SIGHUP and from hanging a start-up;
`use_test_context()` shares one context across threads.

Large calls, signals, workers that die before they are ready, threads:
docs/notes/worker_crashes.md.
"""

import atexit
import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from typing import Callable, List, Optional

# Default thread stack of the worker_binary processes started after
# `raise_worker_stack_limit()`: address space reserved, not used (why:
# docs/notes/worker_crashes.md, "Large calls").
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
  return [
      pid for pid, fields in _proc_stats()
      if int(fields[3]) == sid and fields[0] not in _ENDED
  ]


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
    with open(f'/proc/{pid}/comm', encoding='utf-8') as f:
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


# ---------------------------------------------------------------------------
# Workers started through TFF's executor factory: recorded, bounded waits,
# none started once the process is ending.

# Guards the three below: a start and the end of the run exclude each other.
_STARTS = threading.RLock()
_STARTED_PIDS = []
_ENDING = []  # [True] once the process is ending (no more workers start)
# Seconds `WorkerPopen.wait()` waits after TFF's SIGINT before SIGTERM, and
# after SIGTERM before SIGKILL.
WORKER_WAIT_SECONDS = 5.0
_TFF_EXECUTOR_FACTORY = ('tensorflow_federated.python.core.impl.'
                         'executor_stacks.executor_factory')


class WorkerEndingError(RuntimeError):
  """TFF tried to start a worker while this process is ending."""


class WorkerExitedError(RuntimeError):
  """TFF's worker exited before it was ready.

  Raised from TFF's readiness poll, which would otherwise wait for ever
  (docs/notes/worker_crashes.md, "A worker that dies before it is ready").
  """


# The worker each thread started last: the one its `get_stub` waits for.
_LAST_STARTED = threading.local()


class _WorkerPopenMeta(type):
  """`isinstance(p, WorkerPopen)` holds for every `subprocess.Popen`: TFF's
  `ServiceManager.__del__` checks its process with the `Popen` of its
  module (ours once guarded), also for a worker started before."""

  def __instancecheck__(cls, instance):
    return isinstance(instance, subprocess.Popen)


class WorkerPopen(subprocess.Popen, metaclass=_WorkerPopenMeta):
  """`subprocess.Popen` for TFF's workers (docs/notes/worker_crashes.md,
  "Signals and the end of a run"): records the pid, refuses to start while
  the process ends, bounds `wait()`."""

  def __init__(self, *args, **kwargs):
    with _STARTS:
      if _ENDING:
        raise WorkerEndingError(
            'tff_ddp: this process is ending (a signal or exit): TFF\'s '
            'worker is not started again.')
      super().__init__(*args, **kwargs)
      _STARTED_PIDS.append(self.pid)
    _LAST_STARTED.popen = self

  def wait(self, timeout=None):
    if timeout is not None:
      return super().wait(timeout)
    # TFF's __del__ sends SIGINT and waits without a bound: a worker that
    # inherited SIGINT ignored (background runs) never ends.
    for action in (None, self.terminate, self.kill):
      if action is not None:
        action()
      try:
        return super().wait(None if action == self.kill else  # pylint: disable=comparison-with-callable  # a fresh bound method each time: == not is
                            WORKER_WAIT_SECONDS)
      except subprocess.TimeoutExpired:
        continue
    return self.returncode


class _GuardedSubprocess:
  """The `subprocess` module as TFF's executor factory sees it, with
  `Popen` = `WorkerPopen`."""

  Popen = WorkerPopen

  def __getattr__(self, name):
    return getattr(subprocess, name)


class _GuardedTime:
  """The `time` module as TFF's executor factory sees it: its only use
  is `get_stub`'s readiness poll, whose `sleep` raises `WorkerExitedError`
  once the worker this thread started last has exited."""

  def sleep(self, seconds):
    popen = getattr(_LAST_STARTED, 'popen', None)
    # has_exited, not poll(): the exited worker stays a zombie for TFF,
    # which signals and waits for it before starting the next one.
    if popen is not None and has_exited(popen.pid):
      raise WorkerExitedError(
          f'tff_ddp: TFF\'s worker_binary (pid {popen.pid}) exited before '
          'it was ready (a Ctrl-C or other signal, or a crash); TFF would '
          'wait for it for ever.')
    time.sleep(seconds)

  def __getattr__(self, name):
    return getattr(time, name)


def guard_worker_starts() -> bool:
  """Routes the workers TFF starts through `WorkerPopen`, and makes TFF's
  wait for a worker's readiness end when that worker has exited
  (idempotent).

  Returns whether TFF's executor factory is guarded (False before TFF is
  imported: call again after).
  """
  import sys
  module = sys.modules.get(_TFF_EXECUTOR_FACTORY)
  if module is None:
    return False
  if not isinstance(getattr(module, 'subprocess', None), _GuardedSubprocess):
    module.subprocess = _GuardedSubprocess()
  if not isinstance(getattr(module, 'time', None), _GuardedTime):
    module.time = _GuardedTime()
  return True


def _worker_pids() -> List[int]:
  """The living TFF workers of this process: recorded, or descendants
  named `worker_binary`."""
  with _STARTS:
    recorded = [pid for pid in _STARTED_PIDS if not has_exited(pid)]
  mine = set(descendant_pids())
  found = [pid for pid in mine if _command(pid) == WORKER_COMMAND]
  # A recorded pid that is no longer our child was reused: not ours.
  return sorted(set(found) | {pid for pid in recorded if pid in mine})


def end_run_workers(timeout: float = 5.0) -> List[int]:
  """The process is ending: no worker starts from now on, and every worker
  it started is ended (SIGTERM, then SIGKILL), also one TFF started while
  this ran. Returns the pids ended."""
  with _STARTS:
    _ENDING[:] = [True]
  ended = []
  for _ in range(3):  # one already forking when the flag was set
    pids = [pid for pid in _worker_pids() if pid not in ended]
    if not pids:
      break
    _terminate(pids, timeout, reap=False)
    ended += pids
  return ended


_SIGNALS = ('SIGTERM', 'SIGHUP')


def end_run_on_signals(
    before: Optional[Callable[[int], None]] = None) -> List[str]:
  """SIGTERM and SIGHUP end every worker, then the process (idempotent).

  Only signals whose action is the default (terminate without clean-up)
  are taken: a handler of the user's, or SIG_IGN (nohup's SIGHUP), is left
  alone; and only from the main thread (Python's rule). The handler ends
  the workers (`end_run_workers`), calls `before(signum)` if given (the
  CLI's last line), and ends the process by the same signal, so its exit
  status is what `timeout` and shells expect. SIGINT keeps Python's
  KeyboardInterrupt: the exit clean-up ends the workers, and none starts
  after it (`guard_worker_starts`). Returns the names of the signals
  taken.
  """
  if threading.current_thread() is not threading.main_thread():
    return []
  taken = []
  for name in _SIGNALS:
    signum = getattr(signal, name, None)
    if signum is None:
      continue
    current = signal.getsignal(signum)
    if current is signal.SIG_DFL or current is _on_signal:
      signal.signal(signum, _on_signal)
      taken.append(name)
  if before is not None:
    _BEFORE[:] = [before]
  return taken


# The CLI's last words before a signal ends it (`end_run_on_signals`).
_BEFORE = []


def _on_signal(signum, frame):
  del frame
  end_run_workers()
  for before in _BEFORE:
    try:
      before(signum)
    except Exception:  # pylint: disable=broad-except  # one failing hook must not stop the others
      pass
  signal.signal(signum, signal.SIG_DFL)
  os.kill(os.getpid(), signum)


# ---------------------------------------------------------------------------
# Threads share the context of use_test_context().

_SHARED_CONTEXT = []
# The `_SharedContext` every other thread's stack starts with.
_THREAD_DEFAULT = []


def _share_context_with_threads(context) -> None:
  """Every thread that has not installed a context of its own runs on
  `context` (TFF's stack starts each thread with none).

  The threads' stacks hold a `_SharedContext` that forwards to the context
  of the moment, not the context itself: when the main thread drops it
  (`drop_tff_contexts`), no thread keeps it (and its worker) alive.
  """
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  _SHARED_CONTEXT[:] = [context]
  cls = context_stack_impl.ContextStackImpl
  if getattr(cls.__init__, '_tff_ddp_shared', False):
    return
  original = cls.__init__
  _THREAD_DEFAULT[:] = [_shared_context_class()()]

  def init(self, default_context):
    original(self, default_context)
    if threading.current_thread() is not threading.main_thread():
      self._stack[0] = _THREAD_DEFAULT[0]  # pylint: disable=protected-access  # TFF's context stack

  init._tff_ddp_shared = True  # pylint: disable=protected-access  # marks our own patch
  cls.__init__ = init


def _shared_context_class():
  from tensorflow_federated.python.core.impl.context_stack import context_base
  from tensorflow_federated.python.core.impl.context_stack import runtime_error_context

  class _SharedContext(context_base.SyncContext):
    """A thread's default: the context `use_test_context()` installed last
    in the main thread, or TFF's "No default context installed"."""

    def invoke(self, comp, arg):
      current = (_SHARED_CONTEXT[0] if _SHARED_CONTEXT else
                 runtime_error_context.RuntimeErrorContext())
      return current.invoke(comp, arg)

  return _SharedContext


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
    atexit.register(_release_at_exit)
    _AT_EXIT.append(True)


def _release_at_exit():
  """At interpreter exit: no worker starts any more, every one ends."""
  end_run_workers()
  release_tff()


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
  import gc
  import sys
  if _TFF_MODULE in sys.modules:
    # That `__del__` ends its worker with SIGINT and then waits for it: a
    # worker that inherited SIGINT ignored (background runs) would never
    # exit and the wait would hang for ever. So the workers are ended
    # first, with SIGTERM, and left as zombies for `__del__` to reap.
    workers = [
        pid for pid in descendant_pids() if _command(pid) == WORKER_COMMAND
    ]
    _terminate(workers, 5.0, reap=False)
    from tensorflow_federated.python.core.impl.context_stack import set_default_context
    set_default_context.set_no_default_context()
    _SHARED_CONTEXT[:] = []  # threads have no context either
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
  import tensorflow_federated as tff
  register_tff_cleanup()
  if threading.current_thread() is not threading.main_thread():
    # Another thread's: the shared context, or a new one for this thread
    # (no other thread's worker is ended).
    if _SHARED_CONTEXT:
      tff.framework.get_context_stack().set_default_context(_THREAD_DEFAULT[0])
      return
    tff.backends.test.set_sync_test_cpp_execution_context()
    _share_context_with_threads(tff.framework.get_context_stack().current)
    return
  raise_worker_stack_limit()
  drop_tff_contexts()
  tff.backends.test.set_sync_test_cpp_execution_context()
  _share_context_with_threads(tff.framework.get_context_stack().current)


_CLEANUP = []


def register_tff_cleanup():
  """Registers the end of this process's TFF workers at interpreter exit,
  on SIGTERM and SIGHUP (`end_run_on_signals`), and guards TFF's worker
  starts (`guard_worker_starts`) (idempotent)."""
  guard_worker_starts()
  if not _CLEANUP:
    atexit.register(_drop_at_exit)
    end_run_on_signals()
    _CLEANUP.append(True)


def _drop_at_exit():
  end_run_workers()
  drop_tff_contexts()


def release_tff() -> List[int]:
  """Drops TFF's execution contexts, then ends this process's TFF workers.

  TFF's contexts hold `ServiceManager` objects whose `__del__` fails with
  "'NoneType' object has no attribute 'Popen'" when it first runs during
  interpreter shutdown; dropping them while the interpreter is alive
  avoids that traceback. Returns the pids ended.
  """
  drop_tff_contexts()
  return end_workers()
