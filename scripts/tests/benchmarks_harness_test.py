"""benchmarks/_harness.py: declaration -> argparse, header, tables, JSON,
TFF context and clean-up; without TFF (its two calls are replaced)."""

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from unittest import mock

from absl.testing import absltest

from tff_ddp_tests import script_module

# The benchmarks' harness imports its sibling `_common` by its bare name, as
# the benchmark scripts (run from their directory) do.
sys.path.insert(0, os.path.join(script_module.ROOT, 'benchmarks'))
bench = script_module.load('benchmarks/_harness.py')


def _run(clients=100,
         epsilons=(1.0, 2.0),
         name='flat',
         check=False,
         reference=True,
         path=None,
         must: int = 0):
  """A benchmark: one row per epsilon."""
  del name, path
  if must < 0:
    raise bench.UsageError(f'--must must be >= 0, got {must}')
  table = bench.Table(
      [('eps', 'eps', 'g'), ('clients', 'n', 'd'),
       ('ratio', 'n / eps', lambda row: f'{row["clients"] / row["eps"]:.2f}')],
      title=f'reference {reference}',
      notes=[f'must {must}'],
      failed=check)
  for eps in epsilons:
    table.add(eps=eps, clients=clients, mse=float('nan'))
  return table


_ARGS = dict(clients='clients per round',
             epsilons='target epsilons',
             name=bench.arg('a method', choices=['flat', 'tree']),
             check='fail the check',
             reference='the reference rows',
             path=bench.arg('a file', type=str),
             must='a count')


def _main(argv, tff=False):
  """(what run returned, stdout, exit status or None) of bench.main."""
  out = io.StringIO()
  with mock.patch.object(bench.processes, 'use_test_context') as use, \
      mock.patch.object(bench.processes, 'release_tff') as release, \
      contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
      result, status = bench.main(_run, 'doc', tff=tff, argv=argv,
                                  **_ARGS), None
    except SystemExit as e:
      result, status = None, e.code
  return result, out.getvalue(), status, use.call_count, release.call_count


class ParserTest(absltest.TestCase):
  """Each parameter of run becomes one option, typed by its default."""

  def test_options_from_the_signature(self):
    parser = bench.parser_for(_run, 'doc', _ARGS)
    args = vars(
        parser.parse_args([
            '--clients', '7', '--epsilons', '3', '4.5', '--name', 'tree',
            '--check', '--no-reference', '--path', 'x', '--must', '2'
        ]))
    self.assertEqual(
        args,
        dict(clients=7,
             epsilons=[3.0, 4.5],
             name='tree',
             check=True,
             reference=False,
             path='x',
             must=2,
             json=None))
    defaults = vars(parser.parse_args([]))
    self.assertEqual(defaults['epsilons'], (1.0, 2.0))
    self.assertEqual((defaults['check'], defaults['reference']), (False, True))
    with self.assertRaises(SystemExit), \
        contextlib.redirect_stderr(io.StringIO()):
      parser.parse_args(['--name', 'haar'])  # not among the choices

  def test_help_shows_defaults(self):
    text = bench.parser_for(_run, 'doc', _ARGS).format_help()
    self.assertIn('clients per round (default: 100)', text)
    self.assertIn('target epsilons (default: (1.0, 2.0))', text)
    self.assertIn('--no-reference', text)

  def test_declaration_must_match_the_signature(self):
    with self.assertRaisesRegex(TypeError, r"missing \['must'\]"):
      bench.parser_for(_run, 'doc', {
          k: v for k, v in _ARGS.items() if k != 'must'
      })
    with self.assertRaisesRegex(TypeError, r"unknown \['extra'\]"):
      bench.parser_for(_run, 'doc', dict(_ARGS, extra='x'))


class TableTest(absltest.TestCase):

  def test_cells(self):
    """Numbers by their format spec, text flush left, None as '-', a '|'
    escaped for Markdown, and mean_std's 'mean +- std' of a list (ddof as
    asked)."""
    table = bench.Table(
        [('name', 'name', 's'), ('x', 'x', '.2f'),
         ('v', 'v', bench.mean_std('v', 1)),
         ('v', 'v1', bench.mean_std('v', 2, ddof=1, joiner=' ± '))],
        title='T',
        notes=['n'])
    table.add(name='a', x=1.0, v=[1, 3])
    table.add(name='a|b', x=None, v=[2, 2])
    self.assertEqual(table.lines(), [
        'T', '| name |    x |          v |          v1 |',
        '|------|------|------------|-------------|',
        '| a    | 1.00 | 2.0 +- 1.0 | 2.00 ± 1.41 |',
        r'| a\|b |    - | 2.0 +- 0.0 | 2.00 ± 0.00 |', 'n'
    ])


class MainTest(absltest.TestCase):

  def test_header_table_and_json(self):
    """The header line names the command, the date, load and cores; the
    table prints formatted cells; --json holds the raw rows (NaN as
    'nan', tuples as lists) and the same header fields."""
    path = os.path.join(tempfile.mkdtemp(), 'rows.json')
    before = time.time()
    result, out, status, _, _ = _main(
        ['--epsilons', '4', '8', '--clients', '10', '--json', path])
    self.assertIsNone(status)
    self.assertEqual([r['eps'] for r in result.rows], [4.0, 8.0])
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith('# '))
    self.assertIn('--epsilons 4 8 --clients 10 --json', head)
    self.assertRegex(
        head, r'\| \d{4}-\d\d-\d\d \d\d:\d\d UTC \| \d+ s \| '
        r'load [\d.]+ [\d.]+ [\d.]+ \| \d+ cores$')
    self.assertIn('|   4 | 10 |    2.50 |', lines)
    self.assertIn('|   8 | 10 |    1.25 |', lines)
    self.assertEqual(lines[-1], 'must 0')
    with open(path, encoding='utf-8') as f:
      data = json.load(f)
    self.assertEqual(data['parameters']['epsilons'], [4.0, 8.0])
    self.assertEqual(data['cores'], os.cpu_count())
    self.assertLen(data['load'], 3)
    self.assertGreaterEqual(data['seconds'], 0)
    self.assertLessEqual(data['seconds'], time.time() - before + 1)
    self.assertIn('--json', data['command'])
    table, = data['tables']
    self.assertEqual(table['rows'], [
        dict(eps=4.0, clients=10, mse='nan'),
        dict(eps=8.0, clients=10, mse='nan')
    ])
    self.assertEqual(table['columns'][0], ['eps', 'eps', 'g'])
    self.assertIsNone(table['columns'][2][2])  # a function: not in JSON
    self.assertEqual(table['notes'], ['must 0'])

  def test_tff_context_and_clean_up(self):
    """The test context is installed once only when asked for; the
    workers are released after every run, also a failing one."""
    self.assertEqual(_main([], tff=True)[3:], (1, 1))
    self.assertEqual(_main([])[3:], (0, 1))
    with mock.patch.object(bench.processes, 'release_tff') as release, \
        contextlib.redirect_stdout(io.StringIO()):

      def broken(clients=1):
        raise RuntimeError(f'broken at {clients}')

      with self.assertRaisesRegex(RuntimeError, 'broken at 1'):
        bench.main(broken, 'doc', argv=[], clients='n')
    release.assert_called_once()

  def test_usage_error_and_failed_check(self):
    """A UsageError exits 2 with argparse's usage and the message; a
    failed table prints, then exits 1."""
    _, out, status, _, release = _main(['--must', '-1'])
    self.assertEqual((status, release), (2, 1))
    self.assertIn('error: --must must be >= 0, got -1', out)
    _, out, status, _, _ = _main(['--check'])
    self.assertEqual(status, 1)
    self.assertIn('|   1 | 100 |  100.00 |', out.splitlines())


class TimingTest(absltest.TestCase):

  def test_timed(self):
    """Wall and CPU of this process; the workers' CPU from /proc (this
    process stands in for a worker); a changed set of workers is flagged."""
    pids = [[os.getpid()], [os.getpid()]]
    # Spin until both clocks moved 0.05 s. Wall cannot be bounded by CPU
    # here: process_time counts every thread of this process, and threads
    # that earlier tests started (TensorFlow's pools) may run beside the
    # loop, so CPU can exceed wall (CI saw 0.050 s CPU in 0.025 s wall).
    with bench.timed(lambda: pids.pop(0)) as t:
      cpu_end = time.process_time() + 0.05
      wall_end = time.perf_counter() + 0.05
      while time.process_time() < cpu_end or time.perf_counter() < wall_end:
        pass
    self.assertGreaterEqual(t.cpu, 0.05)
    self.assertGreaterEqual(t.wall, 0.05)
    # The clock tick is 1/100 s: the worker CPU is the same 0.05 s, coarser.
    self.assertAlmostEqual(t.workers_cpu, t.cpu, delta=0.03)
    self.assertFalse(t.workers_changed)
    pids = [[os.getpid()], []]
    with bench.timed(lambda: pids.pop(0)) as t:
      pass
    self.assertTrue(t.workers_changed)

  def test_seconds_of(self):
    calls = []
    fake = iter([0.0, 1.0, 10.0, 12.0, 20.0, 27.0])
    with mock.patch.object(bench.time, 'perf_counter', lambda: next(fake)):
      median = bench.seconds_of(lambda: calls.append(1), 3)
    self.assertEqual((median, len(calls)), (2.0, 4))  # 1, 2, 7 + a warm-up
