"""The programs the signal and thread tests run, and how they run them.

SCRIPT is a README-style script (TFF's own
`set_sync_test_cpp_execution_context()`, a loop of DDG rounds) and DEMO the
argv of `tff-ddp demo`; `run_and_signal` runs one in a session of its own
and sends it SIGINT (to its process group, as a terminal's Ctrl-C), SIGTERM
or SIGHUP (to it) at one of PHASES. THREADS_SCRIPT runs two quantile
processes in two threads, with no context, one installed in the main
thread, and one per thread (`run_threads_script`).

signals_test.py runs a few of these cases; tff_ddp_tests/fuzz/bad_inputs.py
runs every signal at every phase.
"""

import os
import signal
import subprocess
import sys
import threading
import time

from tff_ddp.utils import processes

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What a user writes (README's first example, in a loop).
SCRIPT = '''
import numpy as np
import tensorflow_federated as tff
import tff_ddp
tff.backends.test.set_sync_test_cpp_execution_context()
factory = tff_ddp.aggregators.DiscreteGaussianSumFactory.from_tff_arguments(
    noise_multiplier=1.0, expected_clients_per_round=10, bits=16,
    l2_clip=1.0)
process = factory.create(tff.TensorType(np.float32, [64]))
clients = [np.full(64, 0.1, np.float32)] * 10
print('built', flush=True)
state = process.initialize()
for r in range(100000):
  print('round', r, flush=True)
  state = process.next(state, clients).state
'''

# signal -> (how it is sent: to the process group or the process)
SENT_TO_GROUP = {'SIGINT': True, 'SIGTERM': False, 'SIGHUP': False}
# The phases at which a signal is sent: while Python imports TensorFlow
# and TFF (2 s after the start), as TFF's worker appears, during the rounds
# (after round 3 is printed, or the worker has run for 3 s).
PHASES = ('import', 'worker start-up', 'rounds')
# `tff-ddp demo`, long enough to be interrupted.
DEMO = [
    '-m', 'tff_ddp.cli', 'demo', '--clients', '10', '--dim', '64', '--rounds',
    '10000', '--bits', '16'
]


def _worker_children(pid):
  return [
      p for p in processes.descendant_pids(pid)
      if processes._command(p) == processes.WORKER_COMMAND
  ]  # pylint: disable=protected-access  # tests a private part


def _signals_as_in_a_terminal():
  """In the child before exec: the signals sent here at their default.

  A run started in the background of a non-interactive shell (`cmd &`,
  `nohup`) inherits SIGINT and SIGHUP ignored, and Python keeps an ignored
  SIGINT ignored: the script would not see the Ctrl-C or hang-up a
  terminal sends, and would run on (what these tests would report as a
  hang).
  """
  for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(signum, signal.SIG_DFL)


def run_and_signal(signame: str,
                   phase: str,
                   timeout: float = 900.0,
                   argv=('-c', SCRIPT)):
  """Runs `python argv` (SCRIPT), sends `signame` at `phase`; returns (what
  happened, the processes of its session left, its exit status, whether
  its output pipe closed)."""
  started = time.monotonic()
  worker_since = None
  # pylint: disable-next=subprocess-popen-preexec-fn  # the child's own session, before any thread starts
  child = subprocess.Popen([sys.executable, *argv],
                           cwd=ROOT,
                           stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL,
                           start_new_session=True,
                           preexec_fn=_signals_as_in_a_terminal,
                           env=dict(os.environ,
                                    PYTHONPATH=ROOT,
                                    TF_CPP_MIN_LOG_LEVEL='3'))
  lines = []
  closed = threading.Event()

  def read():
    for line in child.stdout:
      lines.append(line.decode())
    closed.set()

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  deadline = time.monotonic() + timeout
  sent = None
  while time.monotonic() < deadline and child.poll() is None:
    if phase == 'import':
      ready = time.monotonic() - started > 2.0
    elif phase == 'worker start-up':
      ready = bool(_worker_children(child.pid))
    else:
      if worker_since is None and _worker_children(child.pid):
        worker_since = time.monotonic()
      ready = (any(l.startswith('round 3') for l in lines) or
               (worker_since is not None and
                time.monotonic() - worker_since > 3))
    if ready:
      sent = time.monotonic()
      signum = getattr(signal, signame)
      if SENT_TO_GROUP[signame]:
        os.killpg(child.pid, signum)
      else:
        os.kill(child.pid, signum)
      break
    time.sleep(0.001 if phase == 'worker start-up' else 0.02)
  try:
    # A hang detector, not a speed test: a run that ends takes seconds on a
    # quiet machine, but past a minute when 10 processes share 2 cores (TF's
    # and TFF's shutdown then get a fifth of a core); one that hangs never
    # ends.
    status = child.wait(timeout=300)
  except subprocess.TimeoutExpired:
    status = None
  closed.wait(timeout=10)
  left = processes.session_pids(child.pid)
  for pid in left:  # the test's own clean-up, by pid
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  if child.poll() is None:
    child.kill()
    child.wait()
  what = (f'not sent (the phase was not reached; status {status})'
          if sent is None else
          f'sent after {len([l for l in lines if l.startswith("round")])} '
          'round(s)')
  return what, left, status, closed.is_set()


THREADS_SCRIPT = '''
import threading
import numpy as np
import tensorflow_federated as tff
from tff_ddp.analytics import quantiles
from tff_ddp.utils import processes, rounds
results = {}

def work(i):
  try:
    if mode == 'each':
      processes.use_test_context()
    p = quantiles.build_quantile_process(
        'tree', 'discrete_gaussian', 0.0, 10.0, 16, [0.5],
        quantiles.QuantileSetting(30, 2.0, 1e-6))
    state = p.initialize()
    for _ in range(2):
      state = p.next(state, [np.float32(i + 1)] * 30).state
    results[i] = 'ok'
  except rounds.MissingContextError as e:
    results[i] = 'advice: ' + ('per thread' in str(e)
                               and 'use_test_context()' in str(e)) * 'yes'
  except Exception as e:
    results[i] = type(e).__name__ + ': ' + str(e)[:200]

# No context, then one installed in the main thread, then one per thread.
for mode in ('none', 'main', 'each'):
  if mode == 'main':
    processes.use_test_context()
  results.clear()
  threads = [threading.Thread(target=work, args=(i,), daemon=True)
             for i in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(150)
  print(mode, 'alive', sum(t.is_alive() for t in threads), flush=True)
  print(mode, 'results', sorted(results.values()), flush=True)
'''


def run_threads_script(timeout: float) -> subprocess.CompletedProcess:
  """Runs THREADS_SCRIPT in a Python of its own; its output is text."""
  return subprocess.run([sys.executable, '-c', THREADS_SCRIPT],
                        check=False,
                        cwd=ROOT,
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        env=dict(os.environ,
                                 PYTHONPATH=ROOT,
                                 TF_CPP_MIN_LOG_LEVEL='3'))
