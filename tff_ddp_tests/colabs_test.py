"""The tutorials in colabs/: committed with their outputs, and they run.

Every notebook in colabs/ is checked, whoever adds it.

Fast: each notebook was executed top to bottom and saved with its outputs
(`scripts/run_colabs.py --write`), so a reader sees the results without
running anything: it opens with a markdown cell, every code cell has
source and an execution count, the counts are 1, 2, 3, ... in cell order
(one fresh kernel, no cell skipped or run twice), no output is an error, at
least one output is a PNG image, no output carries TensorFlow's C++ log
lines, and the file stays small.

Slow (CI): each notebook is executed again with nbclient on its lane (the
`core_*` ones by `make test-core`, the others by `make test`)
(`scripts/run_colabs.py --check`, this interpreter as the kernel); the test
fails if any cell raises or times out, and its message is the runner's
one-screen report of the failed cell (`FailureReportTest` checks that report
on a tiny failing notebook).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

from absl.testing import parameterized
import pytest

from tff_ddp.utils import processes
from tff_ddp_tests import conftest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLABS = os.path.join(_ROOT, 'colabs')
_RUNNER = os.path.join(_ROOT, 'scripts', 'run_colabs.py')
_NOTEBOOKS = sorted(f for f in os.listdir(_COLABS) if f.endswith('.ipynb'))
# The tutorials that need only the core (no TFF) run on the core lane
# (Python 3.12, Colab's stack), the others on the TFF lane; both lanes check
# every notebook's committed outputs.
CORE_NOTEBOOKS = [name for name in _NOTEBOOKS if name.startswith('core_')]
_TFF_NOTEBOOKS = [name for name in _NOTEBOOKS if name not in CORE_NOTEBOOKS]
_RUNNABLE = _TFF_NOTEBOOKS if conftest.has_tff() else CORE_NOTEBOOKS
# A notebook a browser shows at once; images embedded at modest dpi.
_MAX_BYTES = 1_500_000
# TensorFlow's C++ logging ("2024-01-01 00:00:00.000000: E tensorflow/...",
# "I external/local_xla/...") and the CUDA plugin registration lines.
_CPP_LOG = re.compile(
    r'(^|\n)[^\n]*\b[IWEF] (tensorflow|external|third_party)/|'
    r'Unable to register (cuDNN|cuFFT|cuBLAS)|TF-TRT Warning|'
    r'absl::InitializeLog|(^|\n)[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]')
# One notebook must run in a few minutes on 2 cores; generous for a shared
# machine, and well inside CI's budget.
_RUN_TIMEOUT_SECONDS = 1500


def _load(name):
  with open(os.path.join(_COLABS, name), encoding='utf-8') as f:
    return json.load(f)


def _text(value):
  return ''.join(value) if isinstance(value, list) else value


class FoundTest(parameterized.TestCase):

  def test_found(self):
    self.assertIn('core_mechanisms.ipynb', CORE_NOTEBOOKS)
    self.assertIn('federated_quantiles.ipynb', _NOTEBOOKS)
    self.assertIn('distributed_discrete_gaussian.ipynb', _NOTEBOOKS)
    self.assertIn('federated_frequency.ipynb', _NOTEBOOKS)
    self.assertIn('delta_fl.ipynb', _NOTEBOOKS)


class CommittedOutputsTest(parameterized.TestCase):

  @parameterized.parameters(*_NOTEBOOKS)
  def test_opens_with_what_it_shows(self, name):
    first = _load(name)['cells'][0]
    self.assertEqual(first['cell_type'], 'markdown', msg=name)
    self.assertTrue(_text(first['source']).startswith('# '), msg=name)

  @parameterized.parameters(*_TFF_NOTEBOOKS)
  def test_tff_notebook_says_what_runtime_it_needs(self, name):
    first = _text(_load(name)['cells'][0]['source'])
    for needed in ('**Runtime:**', 'TensorFlow Federated 0.87', 'Python 3.11',
                   'make setup', 'core_mechanisms.ipynb'):
      self.assertIn(needed, first, msg=name)

  @parameterized.parameters(*[(name,) for name in CORE_NOTEBOOKS])
  def test_core_notebook_says_it_needs_only_the_core(self, name):
    first = _text(_load(name)['cells'][0]['source'])
    self.assertIn('Colab', first, msg=name)
    for cell in _load(name)['cells']:
      self.assertNotIn('tensorflow_federated', _text(cell['source']), msg=name)

  @parameterized.parameters(*_NOTEBOOKS)
  def test_every_code_cell_executed_in_order(self, name):
    code = [c for c in _load(name)['cells'] if c['cell_type'] == 'code']
    self.assertNotEmpty(code, msg=name)
    for index, cell in enumerate(code):
      self.assertTrue(_text(cell['source']).strip(),
                      msg=f'{name}: code cell {index} is empty')
    counts = [cell.get('execution_count') for cell in code]
    self.assertEqual(
        counts,
        list(range(1,
                   len(code) + 1)),
        msg=f'{name}: execution counts {counts}; run '
        f'`scripts/run_colabs.py --write colabs/{name}` and commit it')

  @parameterized.parameters(*_NOTEBOOKS)
  def test_no_error_outputs(self, name):
    for cell in _load(name)['cells']:
      for output in cell.get('outputs', []):
        self.assertNotEqual(
            output['output_type'],
            'error',
            msg=f'{name}: {output.get("ename")}: {output.get("evalue")}')

  @parameterized.parameters(*_NOTEBOOKS)
  def test_has_an_image(self, name):
    images = [
        o for c in _load(name)['cells'] for o in c.get('outputs', [])
        if 'image/png' in o.get('data', {})
    ]
    self.assertNotEmpty(images, msg=f'{name} shows no plot')

  @parameterized.parameters(*_NOTEBOOKS)
  def test_no_tensorflow_log_lines(self, name):
    for cell in _load(name)['cells']:
      for output in cell.get('outputs', []):
        if output['output_type'] == 'stream':
          text = _text(output['text'])
          self.assertIsNone(
              _CPP_LOG.search(text),
              msg=f'{name}: TensorFlow C++ log line in an output (set '
              f'TF_CPP_MIN_LOG_LEVEL before importing TF):\n{text[:500]}')

  @parameterized.parameters(*_NOTEBOOKS)
  def test_size(self, name):
    size = os.path.getsize(os.path.join(_COLABS, name))
    self.assertLessEqual(size,
                         _MAX_BYTES,
                         msg=f'{name} is {size} bytes; lower the figure dpi')

  def test_log_pattern_catches_tensorflow_lines(self):
    # The pattern above must match what TensorFlow 2.14 prints, or the test
    # that uses it could not fail.
    for line in (
        '2025-01-01 00:00:00.000001: E tensorflow/compiler/xla/stream_'
        'executor/cuda/cuda_dnn.cc:9342] Unable to register cuDNN factory',
        '2025-01-01 00:00:00.000001: I tensorflow/core/platform/cpu_feature_'
        'guard.cc:182] This TensorFlow binary is optimized',
        '2025-01-01 00:00:00.000001: W tensorflow/compiler/tf2tensorrt/utils/'
        'py_utils.cc:38] TF-TRT Warning: Could not find TensorRT',
        # TensorFlow 2.21 (the core lane), before its logging starts.
        'WARNING: All log messages before absl::InitializeLog() is called '
        'are written to STDERR',
        'I0000 00:00:1795914511.932869    9214 cudart_stub.cc:31] Could not '
        'find cuda drivers on your machine, GPU will not be used.'):
      self.assertIsNotNone(_CPP_LOG.search('output\n' + line), msg=line)
    self.assertIsNone(_CPP_LOG.search('ε = 1.00 against the server\n'))


def _runner_module():
  spec = importlib.util.spec_from_file_location('run_colabs', _RUNNER)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# A tiny notebook whose third cell fails four calls deep, with a source
# longer than the report shows and a message longer than it keeps.
_FAILING_CELLS = [
    ('markdown', '# A notebook that fails'),
    ('code', 'x = 1'),
    ('code', '\n'.join([
        'def first():', '  return second()', 'def second():',
        '  return third()', 'def third():', '  return fourth()',
        'def fourth():',
        "  raise ValueError('the marker message\\n' + '\\n'.join(",
        "      f'detail {i}' for i in range(40)))", 'first()'
    ])),
    ('code', 'print("never reached")'),
]


def _write_failing_notebook(directory):
  import nbformat
  nb = nbformat.v4.new_notebook()
  for kind, source in _FAILING_CELLS:
    nb.cells.append(
        nbformat.v4.new_markdown_cell(source) if kind ==
        'markdown' else nbformat.v4.new_code_cell(source))
  nb.metadata['kernelspec'] = {
      'name': 'python3',
      'language': 'python',
      'display_name': 'Python 3'
  }
  path = os.path.join(directory, 'failing.ipynb')
  nbformat.write(nb, path)
  return path


class FailureReportTest(parameterized.TestCase):
  """run_colabs.py names the failed cell and its traceback in one screen."""

  def _check_report(self, report, runner):
    lines = report.splitlines()
    # One screen: header, source, message, frames; nothing like the
    # notebook's JSON.
    self.assertLessEqual(len(lines), 50, msg=report)
    self.assertNotIn('"cell_type"', report)
    self.assertNotIn('\x1b[', report)
    self.assertIn('cell 2 (code cell 1, execution count 2) raised ValueError',
                  lines[0])
    # The first SOURCE_LINES lines of the source, and how many are left out.
    self.assertEqual(lines[1:1 + runner.SOURCE_LINES], [
        '  | ' + line
        for line in _FAILING_CELLS[2][1].splitlines()[:runner.SOURCE_LINES]
    ])
    self.assertIn('... (4 more lines)', report)
    self.assertIn('ValueError: the marker message', report)
    self.assertIn(f'detail {runner.MESSAGE_LINES - 2}', report)
    self.assertNotIn(f'detail {runner.MESSAGE_LINES - 1}\n', report)
    # The innermost frames: where it was raised, not where it started.
    self.assertRegex(report, r'\nlast 4 of [5-9] frames:\n')
    self.assertIn('in fourth()', report)
    self.assertNotIn('----> 10 first()', report)
    self.assertIn("raise ValueError('the marker message", report)

  def test_report_of_a_failing_notebook(self):
    # The runner end to end, as ExecutionTest calls it, on a failing
    # notebook written to a temporary directory (a kernel of this
    # interpreter, no TensorFlow: a few seconds).
    with tempfile.TemporaryDirectory() as directory:
      path = _write_failing_notebook(directory)
      with open(path, encoding='utf-8') as f:
        before = f.read()
      result = subprocess.run([
          sys.executable, _RUNNER, '--check', '--python', sys.executable, path
      ],
                              capture_output=True,
                              text=True,
                              timeout=300,
                              check=False)
      with open(path, encoding='utf-8') as f:
        self.assertEqual(f.read(), before, msg='--check wrote the notebook')
    self.assertEqual(result.returncode, 1, msg=result.stdout + result.stderr)
    self.assertIn('failing.ipynb: FAILED after', result.stdout)
    report = result.stdout.split('FAILED after', 1)[1].split('\n', 1)[1]
    self._check_report(report.strip('\n'), _runner_module())
    self.assertIn('1 of 1 notebook(s) failed: ', result.stderr)

  def test_report_of_a_timeout(self):
    import nbformat
    runner = _runner_module()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell('# t'),
        nbformat.v4.new_code_cell('import time\ntime.sleep(60)')
    ]
    report = runner.failure_report(nb, 1, timeout=2.0)
    self.assertEqual(report.splitlines(), [
        'cell 1 (code cell 0, execution count None) timed out after 2 s:',
        '  | import time', '  | time.sleep(60)'
    ])


class DeadKernelTest(parameterized.TestCase):
  """A kernel that dies mid-cell is reported, not waited for, and what it
  started is ended (its orphans are found through its session)."""

  def test_dead_kernel_reported_and_its_children_ended(self):
    import nbformat
    with tempfile.TemporaryDirectory() as directory:
      pid_file = os.path.join(directory, 'child.pid')
      nb = nbformat.v4.new_notebook()
      nb.cells = [
          nbformat.v4.new_code_cell('print("first")'),
          # A child of the kernel (as TFF's worker_binary is), then the
          # kernel dies without Python's cleanup.
          nbformat.v4.new_code_cell('\n'.join([
              'import os, subprocess',
              "child = subprocess.Popen(['sleep', '600'])",
              f'open({pid_file!r}, "w").write(str(child.pid))', 'os._exit(1)'
          ])),
          nbformat.v4.new_code_cell('print("never reached")')
      ]
      path = os.path.join(directory, 'dies.ipynb')
      nbformat.write(nb, path)
      # Before the fix the runner waited for the dead kernel's output for
      # ever; 120 s is ~40x what the run takes.
      result = subprocess.run([
          sys.executable, _RUNNER, '--check', '--python', sys.executable, path
      ],
                              capture_output=True,
                              text=True,
                              timeout=120,
                              check=False)
      with open(pid_file, encoding='utf-8') as f:
        child = int(f.read())
    self.assertEqual(result.returncode, 1, msg=result.stdout + result.stderr)
    # The count reaches the runner in the kernel's execute_input message,
    # which the kernel's IO thread sends while the cell runs; os._exit can
    # end the kernel before that message leaves it (CI saw both), so the
    # report says 2 or, honestly, None -- never another count.
    self.assertRegex(
        result.stdout,
        r'cell 1 \(code cell 1, execution count (2|None)\) raised '
        r'DeadKernelError')
    self.assertIn("  | child = subprocess.Popen(['sleep', '600'])",
                  result.stdout)
    # The orphan was re-parented (not a descendant of anything we started
    # any more) and is gone: ended, at most a zombie awaiting its reaper.
    self.assertTrue(processes.has_exited(child),
                    msg=f'sleep {child} left running')


@pytest.mark.slow
class ExecutionTest(parameterized.TestCase):

  @parameterized.parameters(*[(name,) for name in _RUNNABLE])
  def test_runs(self, name):
    # A separate process: the notebook runs in its own kernel, which sets
    # its own execution context; run_colabs.py ends the kernel's TFF
    # workers by process id.
    result = subprocess.run([
        sys.executable, _RUNNER, '--check', '--python', sys.executable,
        os.path.join(_COLABS, name)
    ],
                            capture_output=True,
                            text=True,
                            timeout=_RUN_TIMEOUT_SECONDS,
                            check=False)
    # The runner prints its one-screen report of the failed cell.
    self.assertEqual(
        result.returncode,
        0,
        msg=f'{name} failed:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}')
