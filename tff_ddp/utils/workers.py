"""Running TFF computations on several `worker_binary` processes.

  with local_workers(num_workers=2) as w:      # start, install, end by pid
    output = process.next(state, client_values)
  with remote_workers(['hostA:8000', 'hostB:8000'], call_timeout=600):
    ...                                        # workers started elsewhere

TFF 0.87 has no multi-worker C++ stack in Python; the clients of each call
are split over the workers by `MergeableCompExecutionContext` (one
aggregation per computation; secure sums replaced by their insecure bodies,
exact for power-of-two moduli <= 2^31). A dead local worker raises
`WorkerDiedError`; `call_timeout` bounds calls on remote ones.

Secure sums, parallelism, failures, limits, how workers are started:
docs/notes/workers.md.
"""

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.utils.workers')

# pylint: disable=wrong-import-position  # after require_tff's clear error
import asyncio
import atexit
import contextlib
import dataclasses
import inspect
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Callable, List, Optional, Sequence

import grpc
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import async_utils
from tensorflow_federated.python.core.impl.executors import cardinalities_utils

from tff_ddp.utils import processes

# Same limits as TFF's local C++ factory (2 GB messages).
_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
# The state of a listening socket in /proc/net/tcp (TCP_LISTEN, hex).
_TCP_LISTEN = '0A'
_CHANNEL_OPTIONS = [
    ('grpc.max_message_length', _MAX_MESSAGE_BYTES),
    ('grpc.max_receive_message_length', _MAX_MESSAGE_BYTES),
    ('grpc.max_send_message_length', _MAX_MESSAGE_BYTES),
]


def worker_binary_path() -> str:
  """The `worker_binary` shipped in the tensorflow_federated wheel."""
  path = os.path.join(os.path.dirname(tff.__file__), 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise RuntimeError(f'No TFF worker binary at {path}.')
  return path


def free_loopback_port() -> int:
  """A port free on 127.0.0.1 right now (the worker binds it a bit later)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


# ----------------------------------------------------------------- compiling


def _secure_to_native(comp):
  """The test backend's compile step: secure intrinsics -> plain + mod."""
  comp = tff.backends.test.replace_secure_intrinsics_with_bodies(comp)
  return tff.backends.native.desugar_and_transform_to_native(comp)


def _secure_to_mergeable(comp):
  """Secure intrinsics -> plain bodies, then split on the one aggregation."""
  replaced = tff.backends.test.replace_secure_intrinsics_with_bodies(comp)
  # The replacement rebuilds the computation from its proto, which drops the
  # Python containers of the result type (e.g. MeasuredProcessOutput); the
  # mergeable context restores the result container from the compiled form's
  # type, so put the original type back.
  replaced = tff.framework.ConcreteComputation.with_type(
      replaced, comp.type_signature)
  return tff.backends.native.compile_to_mergeable_comp_form(replaced)


# ------------------------------------------------------------------ contexts


class WorkerDiedError(RuntimeError):
  """A local worker exited while a computation was running on it."""


class _ThreadedContext(tff.framework.AsyncContext):
  """Runs an async context on its own event-loop thread.

  `RemoteExecutor` blocks inside its coroutines; one thread per worker lets
  the workers compute at the same time. TFF's `AsyncExecutionContext` retries
  gRPC UNAVAILABLE for ever (backing off to 30 s), so a dead worker would hang
  the caller: with `is_alive` the call is cancelled and raises
  `WorkerDiedError` once the worker is gone; `timeout` (seconds) bounds every
  call, for remote workers whose process we cannot see.
  """

  def __init__(self,
               inner: tff.framework.AsyncContext,
               target: str,
               is_alive: Optional[Callable[[], bool]] = None,
               timeout: Optional[float] = None):
    self._inner = inner
    self._runner = async_utils.AsyncThreadRunner()
    self._is_alive = is_alive
    self._timeout = timeout
    self.target = target
    # Bookkeeping, e.g. to check that the clients were spread: number of
    # invocations and the CLIENTS cardinality of each invocation's argument.
    self.invocations = 0
    self.clients_per_invocation: List[int] = []
    # (monotonic start, wall seconds, CLIENTS cardinality or None) per call.
    self.timeline: List[tuple] = []

  async def invoke(self, comp, arg):
    if asyncio.iscoroutine(arg):
      arg = await arg
    self.invocations += 1
    num_clients = None
    if arg is not None:
      cards = cardinalities_utils.infer_cardinalities(
          arg, comp.type_signature.parameter)
      num_clients = cards.get(tff.CLIENTS)
      if num_clients is not None:
        self.clients_per_invocation.append(num_clients)
    # The runner's loop runs the inner call; we poll it so that a dead worker
    # or a timeout can cancel it (cancellation reaches the retry sleep).
    loop = self._runner._event_loop  # pylint: disable=protected-access  # TFF's runner keeps its loop private
    inner_future = asyncio.run_coroutine_threadsafe(
        self._inner.invoke(comp, arg), loop)
    waiter = asyncio.wrap_future(inner_future)
    start = time.monotonic()
    while True:
      done, _ = await asyncio.wait({waiter}, timeout=0.5)
      if done:
        self.timeline.append((start, time.monotonic() - start, num_clients))
        return waiter.result()
      if self._is_alive is not None and not self._is_alive():
        inner_future.cancel()
        raise WorkerDiedError(f'worker {self.target} exited during a call.')
      if self._timeout is not None and time.monotonic() - start > self._timeout:
        inner_future.cancel()
        raise TimeoutError(
            f'call on worker {self.target} exceeded {self._timeout} s.')


def create_remote_async_context(
    target: str,
    *,
    default_num_clients: int = 0,
    stream_structs: bool = False,
    channel: Optional[grpc.Channel] = None,
) -> tff.framework.AsyncContext:
  """An async context executing on the worker at `target` ('host:port').

  Secure intrinsics are compiled to their plain bodies, as in the test
  context.
  """
  if channel is None:
    channel = grpc.insecure_channel(target, _CHANNEL_OPTIONS)
  stub = tff.framework.RemoteExecutorGrpcStub(channel)

  def stack_fn(cardinalities):
    if cardinalities.get(tff.CLIENTS) is None:
      cardinalities[tff.CLIENTS] = default_num_clients
    executor = tff.framework.RemoteExecutor(stub, stream_structs=stream_structs)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.AsyncExecutionContext(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(stack_fn),
      compiler_fn=_secure_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result,
  )


def create_multi_worker_context(
    targets: Sequence[str],
    *,
    default_num_clients: int = 0,
    stream_structs: bool = False,
    num_subrounds: Optional[int] = None,
    liveness: Optional[Sequence[Callable[[], bool]]] = None,
    call_timeout: Optional[float] = None,
    threaded: bool = True,
) -> tff.framework.MergeableCompExecutionContext:
  """A sync context spreading each call's clients over the workers.

  Args:
    targets: 'host:port' of running `worker_binary` processes (any host).
    default_num_clients: CLIENTS cardinality per worker when a call has no
      CLIENTS-placed argument.
    stream_structs: passed to `tff.framework.RemoteExecutor`.
    num_subrounds: slices per call (default: one per worker); more slices
      than workers are run one after another on the free workers.
    liveness: optional, one `() -> bool` per target; a call on a worker whose
      check fails raises `WorkerDiedError` instead of retrying for ever.
    call_timeout: optional bound (s) on every call on a worker.
    threaded: one event-loop thread per worker (default). False puts the
      remote contexts straight into the mergeable context, as TFF would:
      the workers then run one after another (for comparison only; no
      liveness checks, no timeout, no bookkeeping).
  """
  liveness = list(liveness) if liveness is not None else [None] * len(targets)
  if len(liveness) != len(targets):
    raise ValueError('need one liveness check per target.')
  remote = [
      create_remote_async_context(t,
                                  default_num_clients=default_num_clients,
                                  stream_structs=stream_structs)
      for t in targets
  ]
  if threaded:
    inner = [
        _ThreadedContext(r, t, alive, call_timeout)
        for r, t, alive in zip(remote, targets, liveness)
    ]
  else:
    inner = remote
  context = tff.framework.MergeableCompExecutionContext(
      async_contexts=inner,
      compiler_fn=_secure_to_mergeable,
      transform_result=tff.tensorflow.transform_result,
      num_subrounds=num_subrounds,
  )
  context.worker_contexts = inner  # for inspection (targets, clients seen)
  return context


# ----------------------------------------------------------------- processes


@dataclasses.dataclass
class Worker:
  process: subprocess.Popen
  port: int
  log_path: str

  @property
  def pid(self) -> int:
    return self.process.pid

  @property
  def target(self) -> str:
    return f'127.0.0.1:{self.port}'


def _listening_inodes(port: int) -> set:
  """Socket inodes of TCP sockets listening on `port` (any address)."""
  inodes = set()
  for table in ('/proc/net/tcp', '/proc/net/tcp6'):
    try:
      with open(table, encoding='ascii') as f:
        next(f)
        for line in f:
          fields = line.split()
          local, state, inode = fields[1], fields[3], fields[9]
          if state == _TCP_LISTEN and int(local.rsplit(':', 1)[1], 16) == port:
            inodes.add(inode)
    except OSError:
      pass
  return inodes


def _socket_inodes(pid: int) -> set:
  inodes = set()
  try:
    for fd in os.listdir(f'/proc/{pid}/fd'):
      try:
        link = os.readlink(f'/proc/{pid}/fd/{fd}')
      except OSError:
        continue
      if link.startswith('socket:['):
        inodes.add(link[8:-1])
  except OSError:
    pass
  return inodes


def owns_port(worker: 'Worker') -> Optional[bool]:
  """Whether the worker is the only listener on its port (None: unknown).

  gRPC listens with SO_REUSEPORT, so a second `worker_binary` on a taken
  port does not fail: both listen and the kernel spreads connections over
  them. Checked through /proc (Linux); None where /proc is unavailable.
  """
  if not os.path.isdir('/proc/net'):
    return None
  listening = _listening_inodes(worker.port)
  return bool(listening) and listening <= _socket_inodes(worker.pid)


def _log_tail(path: str, n: int = 2000) -> str:
  try:
    with open(path, 'rb') as f:
      data = f.read()
    return data[-n:].decode('utf-8', 'replace')
  except OSError:
    return ''


def start_worker(
    port: int,
    log_path: str,
    max_concurrent_computation_calls: int = -1,
    extra_flags: Sequence[str] = (),
    die_with_parent: bool = True,
    cpus: Optional[str] = None,
) -> Worker:
  """Starts one `worker_binary` on `port`, output to `log_path`.

  With `die_with_parent` (Linux, util-linux `setpriv`), the worker gets
  SIGTERM if the thread that started it dies, so a Python process killed
  hard (SIGKILL, os._exit) leaves no orphan; `setpriv` execs the binary, so
  the pid is the worker's. Start workers from a thread that outlives them
  (normally the main thread). `cpus` (e.g. '0' or '0-1') pins the worker
  with `taskset -c` (also an exec: same pid).
  """
  processes.raise_worker_stack_limit()  # inherited by the worker
  prefix = []
  if die_with_parent and shutil.which('setpriv'):
    prefix = [shutil.which('setpriv'), '--pdeathsig', 'TERM', '--']
  if cpus is not None:
    if not shutil.which('taskset'):
      raise RuntimeError('cpus= needs taskset (util-linux).')
    prefix += [shutil.which('taskset'), '-c', str(cpus)]
  args = prefix + [
      worker_binary_path(),
      f'--port={port}',
      f'--max_concurrent_computation_calls={max_concurrent_computation_calls}',
      *extra_flags,
  ]
  with open(log_path, 'wb') as log:
    log.write((' '.join(args) + '\n').encode())
    log.flush()
    process = subprocess.Popen(  # pylint: disable=consider-using-with  # the worker outlives this call
        args,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        close_fds=True)
  return Worker(process, port, log_path)


def wait_ready(worker: Worker, timeout: float = 60.0) -> None:
  """Blocks until the worker's gRPC service accepts connections.

  Raises RuntimeError (with the log tail) if the worker exits first, e.g.
  because another process took its port, or TimeoutError.
  """
  deadline = time.monotonic() + timeout
  channel = grpc.insecure_channel(worker.target)
  try:
    future = grpc.channel_ready_future(channel)
    while True:
      if worker.process.poll() is not None:
        raise RuntimeError(
            f'worker_binary (pid {worker.pid}, port {worker.port}) exited '
            f'with {worker.process.returncode}:\n{_log_tail(worker.log_path)}')
      try:
        future.result(timeout=0.25)
        return
      except grpc.FutureTimeoutError:
        if time.monotonic() > deadline:
          raise TimeoutError(
              f'worker_binary pid {worker.pid} not ready on port '
              f'{worker.port} after {timeout} s') from None
  finally:
    channel.close()


def end_workers(workers: Sequence[Worker], timeout: float = 10.0) -> List[int]:
  """SIGTERM each worker by pid, wait (reaping), SIGKILL the rest.

  Returns the pids that were still alive and signalled.
  """
  signalled = []
  for w in workers:
    if w.process.poll() is None:
      try:
        os.kill(w.pid, signal.SIGTERM)
        signalled.append(w.pid)
      except ProcessLookupError:
        pass
  deadline = time.monotonic() + timeout
  for w in workers:
    try:
      w.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      try:
        os.kill(w.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      w.process.wait()
  return signalled


def start_workers(
    num_workers: int,
    *,
    max_concurrent_computation_calls: int = -1,
    log_dir: Optional[str] = None,
    ready_timeout: float = 60.0,
    port_attempts: int = 3,
    die_with_parent: bool = True,
    cpu_sets: Optional[Sequence[str]] = None,
) -> List[Worker]:
  """Starts `num_workers` workers on free loopback ports; all ready.

  A worker that dies before becoming ready, or that shares its port with
  another listener (port taken between picking and binding; gRPC's
  SO_REUSEPORT makes that silent), is restarted on another port, up to
  `port_attempts` times. On any
  failure every worker started here is ended before raising. `cpu_sets`:
  optional taskset CPU list per worker, e.g. ['0', '1'].
  """
  if num_workers < 1:
    raise ValueError(f'num_workers must be >= 1, got {num_workers}.')
  if cpu_sets is not None and len(cpu_sets) != num_workers:
    raise ValueError('need one cpu set per worker.')
  log_dir = log_dir or tempfile.mkdtemp(prefix='tff_workers_')
  workers: List[Worker] = []
  try:
    for i in range(num_workers):
      for attempt in range(port_attempts):
        port = free_loopback_port()
        w = start_worker(port,
                         os.path.join(log_dir, f'worker{i}_{port}.log'),
                         max_concurrent_computation_calls,
                         die_with_parent=die_with_parent,
                         cpus=None if cpu_sets is None else cpu_sets[i])
        workers.append(w)
        try:
          wait_ready(w, ready_timeout)
          if owns_port(w) is False:
            raise RuntimeError(
                f'port {port} is shared with another process (SO_REUSEPORT)')
          break
        except RuntimeError:
          workers.remove(w)
          end_workers([w])
          if attempt == port_attempts - 1:
            raise
  except BaseException:
    end_workers(workers)
    raise
  return workers


@contextlib.contextmanager
def local_workers(
    num_workers: int = 2,
    *,
    max_concurrent_computation_calls: int = -1,
    keep_logs: bool = False,
    die_with_parent: bool = True,
    cpu_sets: Optional[Sequence[str]] = None,
    **context_options,
):
  """Starts N local workers and installs a multi-worker context.

  `**context_options` are `create_multi_worker_context`'s (default_num_clients,
  stream_structs, num_subrounds, call_timeout, threaded); the liveness
  checks are the workers' own.

  Yields a `LocalWorkers` handle (`.workers`, `.pids`, `.targets`,
  `.context`, `.log_dir`). The context is installed on this thread's TFF
  context stack; on exit, even on exceptions, it is popped (the previous
  context is current again) and every worker is ended by pid (SIGTERM, wait,
  SIGKILL). The workers' logs (in `.log_dir`) are deleted unless
`keep_logs` or a worker exited by itself.

  Example:
    with local_workers(num_workers=2) as w:
      result = process.next(state, client_values)   # clients over 2 workers
  """
  # Python's own error for a keyword the context does not take, before
  # anything is started.
  inspect.signature(create_multi_worker_context).bind([], **context_options)
  log_dir = tempfile.mkdtemp(prefix='tff_workers_')
  workers: List[Worker] = []

  def _atexit_end():  # if the interpreter exits inside the block
    end_workers(workers)

  atexit.register(_atexit_end)
  try:
    workers = start_workers(
        num_workers,
        max_concurrent_computation_calls=max_concurrent_computation_calls,
        log_dir=log_dir,
        die_with_parent=die_with_parent,
        cpu_sets=cpu_sets)
    context = create_multi_worker_context(
        [w.target for w in workers],
        liveness=[(lambda p=w.process: p.poll() is None) for w in workers],
        **context_options)
    # Pushed on this thread's context stack and popped on exit, so the
    # previous context (default or installed) is current again afterwards.
    with tff.framework.get_context_stack().install(context):
      yield LocalWorkers(workers, context, log_dir)
  finally:
    # Logs are kept when a worker had exited by itself (or failed to start).
    crashed = not workers or any(w.process.poll() is not None for w in workers)
    end_workers(workers)
    atexit.unregister(_atexit_end)
    if not keep_logs and not crashed:
      shutil.rmtree(log_dir, ignore_errors=True)


@contextlib.contextmanager
def remote_workers(
    targets: Sequence[str],
    *,
    ready_timeout: float = 60.0,
    default_num_clients: int = 0,
    num_subrounds: Optional[int] = None,
    stream_structs: bool = False,
    call_timeout: Optional[float] = None,
):
  """Installs a multi-worker context on workers started elsewhere.

  `targets` are 'host:port' of `worker_binary --port=PORT` processes (on this
  or other machines); nothing is started or ended here. Waits until every
  target accepts connections, then installs the context until exit. With no
  process to watch, a lost worker makes TFF retry for ever: set
  `call_timeout` (seconds) to bound each call.
  """
  for target in targets:
    channel = grpc.insecure_channel(target)
    try:
      grpc.channel_ready_future(channel).result(timeout=ready_timeout)
    except grpc.FutureTimeoutError:
      raise TimeoutError(f'worker {target} not reachable after '
                         f'{ready_timeout} s') from None
    finally:
      channel.close()
  context = create_multi_worker_context(targets,
                                        default_num_clients=default_num_clients,
                                        stream_structs=stream_structs,
                                        num_subrounds=num_subrounds,
                                        call_timeout=call_timeout)
  with tff.framework.get_context_stack().install(context):
    yield context


def targets_from_env(var: str = 'TFF_DDP_WORKERS') -> List[str]:
  """'host1:port1,host2:port2' from an environment variable ([] if unset)."""
  return [t.strip() for t in os.environ.get(var, '').split(',') if t.strip()]


@dataclasses.dataclass
class LocalWorkers:
  workers: List[Worker]
  context: tff.framework.MergeableCompExecutionContext
  log_dir: str

  @property
  def pids(self) -> List[int]:
    return [w.pid for w in self.workers]

  @property
  def targets(self) -> List[str]:
    return [w.target for w in self.workers]

  @property
  def clients_per_worker(self) -> List[List[int]]:
    """CLIENTS cardinality of each call's slice, per worker (threaded)."""
    return [
        list(getattr(c, 'clients_per_invocation', []))
        for c in self.context.worker_contexts
    ]
