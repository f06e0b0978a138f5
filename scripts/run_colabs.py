"""Executes the tutorials in colabs/ with this repository's .venv as kernel.

  .venv/bin/python scripts/run_colabs.py --check            # every notebook
  .venv/bin/python scripts/run_colabs.py --write colabs/federated_quantiles.ipynb

--check runs every code cell in order and fails (exit status 1) on the first
cell that raises, times out or kills its kernel; the files are left alone. A
failure is reported in one screen (`failure_report`): the cell's index, the
first lines of its source, the exception and the last frames of its
traceback. --write does the same and saves
the outputs (text and PNG images) into the .ipynb, so a reader sees them
without running anything; a notebook that fails is not written.

The kernel is the interpreter given by --python (default: .venv/bin/python
of this repository, as `make setup` creates it, else this interpreter),
started through a kernel spec of this script's own: a `python3` spec
installed elsewhere (in ~/.local, by another environment) cannot take its
place. The repository root is put first on the kernel's PYTHONPATH, so the
notebooks import this checkout's tff_ddp. The TFF worker processes a
notebook starts are ended by process id when its kernel shuts down, also
when a cell failed before the notebook's own `release_tff()`.
"""

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLABS = os.path.join(_ROOT, 'colabs')
_KERNEL_NAME = 'tff_ddp_venv'
# The failure report (`failure_report`) fits one screen: this many source
# lines of the failed cell, lines of the exception message, traceback frames
# (the innermost ones) and lines per frame.
SOURCE_LINES = 6
MESSAGE_LINES = 12
LAST_FRAMES = 4
FRAME_LINES = 8
_ANSI = re.compile(r'\x1b\[[0-9;]*m')
# What TensorFlow 2.16+'s native code writes to stderr before its logging is
# initialised, whatever TF_CPP_MIN_LOG_LEVEL says (absl's pre-init lines,
# "I0000 00:00:... cudart_stub.cc:31] Could not find cuda drivers ..."):
# noise of the stack, not the tutorial's output; not saved.
NATIVE_LOG = re.compile(
    r'^(WARNING: All log messages before absl::InitializeLog\(\) is called '
    r'are written to STDERR|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ '
    r'\S+:\d+\] .*)$')


def notebooks(paths=None):
  """The notebooks to run: `paths`, or every colabs/*.ipynb, sorted."""
  if paths:
    return [os.path.abspath(p) for p in paths]
  return sorted(
      os.path.join(COLABS, f)
      for f in os.listdir(COLABS)
      if f.endswith('.ipynb'))


def default_python():
  venv = os.path.join(_ROOT, '.venv', 'bin', 'python')
  return venv if os.access(venv, os.X_OK) else sys.executable


def _descendants(pid):
  """Living descendants of the kernel `pid`, by process id: its process tree
  and its session (Jupyter starts a kernel as a session leader; a dead
  kernel's TFF workers are re-parented but stay in that session)."""
  sys.path.insert(0, _ROOT)
  from tff_ddp.utils import processes
  found = set(processes.descendant_pids(pid))
  found.update(processes.session_pids(pid))
  found.discard(pid)
  return sorted(found)


def _end(pids, timeout=5.0):
  """SIGTERM, then SIGKILL, each pid still alive (never by name)."""
  for pid in pids:
    try:
      os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
      pass
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and any(
      os.path.exists(f'/proc/{p}') for p in pids):
    time.sleep(0.05)
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass


def _client_class():
  import nbclient

  class Client(nbclient.NotebookClient):
    """Ends the kernel's descendants (TFF workers) with the kernel."""

    kernel_pid = None

    def remember_kernel(self):
      """Notes the kernel's pid while it runs (called at each cell's start):
      once it died, the manager no longer knows it."""
      provisioner = getattr(self.km, 'provisioner', None)
      self.kernel_pid = getattr(provisioner, 'pid', None) or self.kernel_pid

    async def _async_cleanup_kernel(self):
      self.remember_kernel()
      pid = self.kernel_pid
      leftovers = _descendants(pid) if pid else []
      try:
        await super()._async_cleanup_kernel()
      finally:
        _end(leftovers)

  return Client


def _kernel_manager(python, spec_dir):
  """A kernel manager whose kernel is `python` (a private kernel spec)."""
  from jupyter_client import kernelspec
  from jupyter_client import manager
  os.makedirs(os.path.join(spec_dir, _KERNEL_NAME), exist_ok=True)
  path = os.environ.get('PYTHONPATH')
  with open(os.path.join(spec_dir, _KERNEL_NAME, 'kernel.json'),
            'w',
            encoding='utf-8') as f:
    json.dump(
        {
            'argv':
                [python, '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
            'display_name': 'tff_ddp (.venv)',
            'language': 'python',
            'env': {
                'PYTHONPATH': _ROOT + (os.pathsep + path if path else '')
            },
        }, f)
  specs = kernelspec.KernelSpecManager(kernel_dirs=[spec_dir])
  # The asynchronous manager, not KernelManager: nbclient waits for a
  # cell's output with get_msg(timeout=None) and watches the kernel's
  # liveness in another task of the same event loop; a blocking client's
  # get_msg never yields to that task, so a kernel that died mid-cell hung
  # the run for ever (seen in CI-sized runs; `DeadKernelTest`).
  return manager.AsyncKernelManager(kernel_name=_KERNEL_NAME,
                                    kernel_spec_manager=specs)


def _clip(lines, limit, what):
  """The first `limit` of `lines`, and a line saying how many were left out."""
  if len(lines) <= limit:
    return lines
  return lines[:limit] + [f'... ({len(lines) - limit} more {what})']


def failure_report(nb,
                   cell_index,
                   ename=None,
                   evalue=None,
                   traceback=None,
                   timeout=None):
  """One screen on the cell that failed (or timed out) in `nb`.

  Args:
    nb: the executed notebook (nbformat), its outputs as execution left them.
    cell_index: the index of the failed cell in nb.cells (every cell counts,
      markdown included, as Jupyter numbers them from 0).
    ename, evalue, traceback: the error as the kernel reported it (name,
      message, IPython's traceback: a list of frames, colour codes allowed);
      when not given, read from the cell's error output.
    timeout: seconds, if the cell timed out rather than raised.

  Returns:
    The cell's index (and its rank among the code cells), its first
    SOURCE_LINES source lines, the exception with at most MESSAGE_LINES
    lines of message, and the last LAST_FRAMES frames of the traceback
    (FRAME_LINES lines each), without colour codes.
  """
  cell = nb.cells[cell_index]
  code_rank = sum(1 for c in nb.cells[:cell_index] if c.cell_type == 'code')
  for output in cell.get('outputs', []):
    if output.get('output_type') == 'error':
      ename = ename or output.get('ename')
      evalue = evalue if evalue is not None else output.get('evalue')
      traceback = traceback or output.get('traceback')
  lines = [
      f'cell {cell_index} (code cell {code_rank}, '
      f'execution count {cell.get("execution_count")}) ' +
      (f'timed out after {timeout:g} s'
       if timeout is not None else f'raised {ename}') + ':'
  ]
  source = cell.source.splitlines()
  lines += ['  | ' + line for line in _clip(source, SOURCE_LINES, 'lines')]
  if timeout is None:
    message = _ANSI.sub('', evalue or '').strip().splitlines() or ['']
    message = _clip(message, MESSAGE_LINES, 'lines of message')
    lines.append(f'{ename}: {message[0]}')
    lines += ['  ' + line for line in message[1:]]
    # IPython's traceback: a separator, one entry per frame (several lines
    # each), and the exception line last; keep the innermost frames.
    frames = [_ANSI.sub('', f).strip('\n') for f in (traceback or [])]
    frames = [
        f for f in frames if f.strip() and not set(f.strip()) <= set('-') and
        not f.startswith(f'{ename}:')
    ]
    if frames:
      kept = frames[-LAST_FRAMES:]
      lines.append(f'last {len(kept)} of {len(frames)} frames:')
      for frame in kept:
        lines += [
            '  ' + line
            for line in _clip(frame.splitlines(), FRAME_LINES, 'lines')
        ]
  return '\n'.join(lines)


def run(path, python, write, timeout):
  """Executes one notebook; returns (seconds, error message or None)."""
  import nbclient
  import nbformat
  nb = nbformat.read(path, as_version=4)
  kernelspec_metadata = nb.metadata.get('kernelspec')
  spec_dir = tempfile.mkdtemp(prefix='tff_ddp_kernel_')
  start = time.monotonic()
  try:
    current = []  # the index of the cell being executed

    def on_cell_start(cell, cell_index):
      del cell
      current.append(cell_index)
      client.remember_kernel()

    client = _client_class()(nb,
                             km=_kernel_manager(python, spec_dir),
                             timeout=timeout,
                             kernel_name=_KERNEL_NAME,
                             record_timing=False,
                             on_cell_start=on_cell_start,
                             resources={
                                 'metadata': {
                                     'path': os.path.dirname(path)
                                 }
                             })
    try:
      client.execute()
    except nbclient.exceptions.CellExecutionError as e:
      return time.monotonic() - start, failure_report(nb,
                                                      current[-1],
                                                      ename=e.ename,
                                                      evalue=e.evalue)
    except nbclient.exceptions.CellTimeoutError:
      return time.monotonic() - start, failure_report(nb,
                                                      current[-1],
                                                      timeout=timeout)
    except nbclient.exceptions.DeadKernelError:
      return time.monotonic() - start, failure_report(
          nb,
          current[-1],
          ename='DeadKernelError',
          evalue='the kernel process died while running this cell '
          '(a crash or an exit in native code: no Python traceback)')
    finally:
      # execute() leaves a kernel it did not create running. The base
      # class's synchronous _cleanup_kernel wraps *its* coroutine, not the
      # override above, so the kernel's workers are ended here as well --
      # also those of a kernel that died (re-parented, still in its
      # session).
      client.remember_kernel()
      leftovers = (_descendants(client.kernel_pid) if client.kernel_pid else [])
      try:
        if client.km is not None and client.km.has_kernel:
          client._cleanup_kernel()  # pylint: disable=protected-access  # nbclient has no public kernel cleanup
      finally:
        _end(leftovers)
  finally:
    shutil.rmtree(spec_dir, ignore_errors=True)
  seconds = time.monotonic() - start
  if write:
    _drop_native_log_lines(nb)
    # Keep the notebook's own kernel name (what a reader's Jupyter offers),
    # not this script's private one.
    if kernelspec_metadata is not None:
      nb.metadata['kernelspec'] = kernelspec_metadata
    nbformat.validate(nb)
    nbformat.write(nb, path)
  return seconds, None


def _drop_native_log_lines(nb):
  """Removes NATIVE_LOG lines from the notebook's stderr outputs (and the
  outputs they leave empty)."""
  for cell in nb.cells:
    kept = []
    for output in cell.get('outputs', []):
      if output.get('output_type') == 'stream' and output.get(
          'name') == 'stderr':
        lines = output['text'].splitlines(keepends=True)
        output['text'] = ''.join(
            line for line in lines if not NATIVE_LOG.match(line.rstrip('\n')))
        if not output['text']:
          continue
      kept.append(output)
    if 'outputs' in cell:
      cell['outputs'] = kept


def _terminated(signum, frame):
  del frame
  raise SystemExit(128 + signum)


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n\n', maxsplit=1)[0],
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  mode = parser.add_mutually_exclusive_group(required=True)
  mode.add_argument('--write',
                    action='store_true',
                    help='execute and save the outputs into the notebooks')
  mode.add_argument('--check',
                    action='store_true',
                    help='execute only; fail on any cell error')
  parser.add_argument('notebooks',
                      nargs='*',
                      help='notebooks to run (default: every colabs/*.ipynb)')
  parser.add_argument('--python',
                      default=default_python(),
                      help='the kernel\'s interpreter')
  parser.add_argument('--timeout',
                      type=float,
                      default=900.0,
                      help='seconds one cell may take')
  args = parser.parse_args(argv)
  # SIGTERM (timeout(1), CI ending a job) unwinds like Ctrl-C, so that the
  # kernel and its TFF workers are ended by `run`'s cleanup, not orphaned.
  # While a notebook executes, nbclient's own handler takes SIGTERM and
  # calls `_async_cleanup_kernel` (the override above) instead; it leaves
  # that handler installed on its event loop afterwards, so this one acts
  # until the first notebook starts.
  signal.signal(signal.SIGTERM, _terminated)
  paths = notebooks(args.notebooks)
  if not paths:
    parser.error(f'no notebooks in {COLABS}')
  failed = []
  for path in paths:
    name = os.path.relpath(path, _ROOT)
    print(f'{name}: running with {args.python} ...', flush=True)
    seconds, error = run(path, args.python, args.write, args.timeout)
    if error is None:
      print(
          f'{name}: ok in {seconds:.0f} s'
          f'{" (outputs written)" if args.write else ""}',
          flush=True)
    else:
      failed.append(name)
      print(f'{name}: FAILED after {seconds:.0f} s\n{error}', flush=True)
  if failed:
    print(
        f'{len(failed)} of {len(paths)} notebook(s) failed: '
        f'{", ".join(failed)}',
        file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
