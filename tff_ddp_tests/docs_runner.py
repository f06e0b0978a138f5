"""Runs one documentation page's blocks in one process (for docs_test.py).

`python -m tff_ddp_tests.docs_runner STEPS.json RESULTS.json` reads a list of
steps, runs them in order and writes, per step, what it printed and the error
it raised (or None). A step is one of

  {"kind": "python", "code": ..., "fresh": bool}   a Python block
  {"kind": "cli", "argv": [...]}                   `tff-ddp ARGV`, run by
                                                   tff_ddp.cli.main here
  {"kind": "shell", "command": ...}                a shell command (bash),
                                                   from the repository root

Steps may name their `page`: one runner runs several pages (docs_test runs
them all in one process, paying TensorFlow's import once), and each page
starts as in a new process would: in the repository root, with the
environment the runner started with, no namespace from the page before.

A "fresh" Python block runs as a script of its own would: a new `__main__`
namespace, and TFF's default execution context as `import
tensorflow_federated` installs it in a new interpreter (the contexts that
earlier blocks installed are dropped and their workers ended). A block that
is not fresh continues the previous one (same namespace and context). The
`tff-ddp` commands share this process so that a page pays TensorFlow's
import once; `cli.main` is what the console script runs.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _fresh_tff_context():
  """TFF's context as in a new interpreter (if TFF is imported at all)."""
  if 'tensorflow_federated' not in sys.modules:
    return
  import tensorflow_federated as tff
  from tff_ddp.utils import processes
  processes.drop_tff_contexts()
  tff.backends.native.set_sync_local_cpp_execution_context()


def _error(e: BaseException) -> str:
  lines = traceback.format_exception(type(e), e, e.__traceback__)
  return ''.join(lines[-12:])


@contextlib.contextmanager
def _captured(stream: str):
  """sys.stdout or sys.stderr redirected to a real file, read at the end.

  A file, not a StringIO: TFF starts its worker with the current stdout and
  stderr, which need a file descriptor. (What the worker itself prints
  lands there too, as extra lines.)
  """
  with tempfile.TemporaryFile('w+') as f:
    text = []
    with getattr(contextlib, f'redirect_{stream}')(f):
      yield text
    f.flush()
    f.seek(0)
    text.append(f.read())


def run_python(code: str, namespace: dict, label: str):
  error = None
  with _captured('stdout') as out:
    try:
      exec(compile(code, label, 'exec'), namespace)  # pylint: disable=exec-used  # runs the docs' code blocks
    except BaseException as e:  # pylint: disable=broad-except  # reports whatever the code raised
      error = _error(e)
  return out[0], error


def run_cli(argv):
  from tff_ddp import cli
  error = None
  with _captured('stdout') as out, _captured('stderr') as err:
    try:
      code = cli.main(argv)
    except SystemExit as e:
      code = e.code
    except BaseException as e:  # pylint: disable=broad-except  # reports whatever the code raised
      code, error = 1, _error(e)
  if code and error is None:
    error = f'exit status {code}; stderr:\n{err[0][-3000:]}'
  return out[0], error


def run_shell(command: str):
  done = subprocess.run(['bash', '-c', command],
                        cwd=ROOT,
                        capture_output=True,
                        text=True,
                        check=False)
  error = None
  if done.returncode:
    error = (f'exit status {done.returncode}; stderr:\n'
             f'{done.stderr[-3000:]}')
  return done.stdout, error


def main(steps_path: str, results_path: str) -> None:
  os.chdir(ROOT)
  with open(steps_path, encoding='utf-8') as f:
    steps = json.load(f)
  results = []
  namespace = None
  environment = dict(os.environ)
  page = None
  for step in steps:
    if step.get('page') != page:  # a new page: as a new process
      page = step.get('page')
      os.chdir(ROOT)
      os.environ.clear()
      os.environ.update(environment)
      namespace = None
    start = time.perf_counter()
    if step['kind'] == 'python':
      if step['fresh'] or namespace is None:
        _fresh_tff_context()
        namespace = {'__name__': '__main__'}
      out, error = run_python(step['code'], namespace, step['label'])
    elif step['kind'] == 'cli':
      out, error = run_cli(step['argv'])
    else:
      out, error = run_shell(step['command'])
    results.append(
        dict(label=step['label'],
             stdout=out,
             error=error,
             seconds=time.perf_counter() - start))
    with open(results_path, 'w',
              encoding='utf-8') as f:  # what ran so far, if a step hangs
      json.dump(results, f)
  from tff_ddp.utils import processes
  processes.release_tff()


if __name__ == '__main__':
  main(*sys.argv[1:3])
