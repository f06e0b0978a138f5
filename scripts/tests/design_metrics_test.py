"""scripts/design_metrics.py counts what its docstring says it counts.

The metrics of issue 33 are recorded in benchmarks/RESULTS.md; this checks
each definition on a small synthetic package whose counts are known by
hand, that `--check` fails a metric above its ceiling, and that the script
runs on the repository and holds it to the ceilings.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest

from tff_ddp_tests import script_module

_SCRIPT = os.path.join(script_module.ROOT, 'scripts', 'design_metrics.py')
design_metrics = script_module.load('scripts/design_metrics.py')

_LONG = '\n'.join(f'  x{i} = {i}' for i in range(148))
_PACKAGE = {
    'README.md':
        'one\ntwo\n',
    'benchmarks/RESULTS.md':
        'a\nb\nc\n',
    'tff_ddp/__init__.py':
        "__version__ = '1.0'\n",
    'setup.py':
        "setup(name='p', version='1.0')\n",
    'scripts/tool.py':
        'a = 1\nb = 2\n',
    'scripts/tests/tool_test.py':
        'c = 3\n',
    'tff_ddp/BUILD':
        'py_library()\n',
    'WORKSPACE':
        'w\n',
    # 3 + 2 (a chain of two) + 1 + 2 (match cases) = 8 comparisons.
    'tff_ddp/a.py':
        '''
        NAMES = ('a', 'b')


        def f(x, y, c):
          if x == 'a' or x in ('a', 'b') or 'a' != x:
            pass
          if x in NAMES or x == y or x in (1, 2) or x == ('a', 1):
            pass  # none of these counts
          if y == 'b' == c:
            pass
          if 'z' in x:
            checks.choice(x, 'x', NAMES)  # one choice check
          match x:
            case 'p':
              pass
            case 'q' | 3:
              pass
            case 4:
              pass
        ''',
    'tff_ddp/cli/__init__.py':
        '',
    'tff_ddp/cli/c.py':
        '''
        def run(a, b, c, d, e, f, g, h, i, j):
          checks.choice(a, 'a', ('x',))  # at the edge: not counted
          return a == 'x'
        ''',
    'tff_ddp/b.py':
        '''
        def ten(a, b, c, d, e, f, g, h, i, j):
          pass


        def nine_and_stars(a, b, c, d, e, f, g, h, i, *args, **kwargs):
          pass


        def keyword_only(a, *, b, c, d, e, f, g, h, i, j):
          pass


        class K:

          def method(self, b, c, d, e, f, g, h, i, j):
            pass

          @staticmethod
          def static(a, b, c, d, e, f, g, h, i, j):
            pass


        def long_one():  # 151 lines: def, docstring, 148 lines, return
          """Doc."""
        LONG
          return 1


        def just_150():
        LONG
          return 1
        ''',
    'tff_ddp/accounting/__init__.py':
        '',
    'tff_ddp/accounting/z.py':
        '''
        from tff_ddp.accounting import events


        def g():
          from tff_ddp.mechanisms import m  # lazy: counts
          from tff_ddp import aggregators  # counts
          return m, aggregators, events
        ''',
}


class DefinitionsTest(absltest.TestCase):
  """Each count on a package counted by hand."""

  def test_counts(self):
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    for path, text in _PACKAGE.items():
      full = os.path.join(root, path)
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, 'w', encoding='utf-8') as f:
        f.write(
            textwrap.dedent(text).lstrip('\n').replace('LONG\n', _LONG + '\n'))
    metrics = design_metrics.measure(root)
    lists = metrics['lists']
    self.assertEqual(metrics['string comparisons (tff_ddp/ outside cli/)'], 8,
                     lists['string comparisons by file'])
    self.assertEqual(metrics['cli/: string comparisons'], 1)
    self.assertEqual(
        sorted((where.split()[-1], count) for where, count in
               lists['functions with >= 10 parameters (outside cli/)']),
        [('K.static', 10), ('keyword_only', 10), ('ten', 10)])
    self.assertEqual(metrics['cli/: functions with >= 10 parameters'], 1)
    self.assertEqual(lists['functions over 150 lines (outside cli/)'],
                     [('tff_ddp/b.py:23 long_one', 151)])
    self.assertEqual(
        lists['imports from accounting/ into mechanisms/ or aggregators/'], [
            'tff_ddp/accounting/z.py:5 imports tff_ddp.mechanisms.m',
            'tff_ddp/accounting/z.py:6 imports tff_ddp.aggregators'
        ])
    self.assertEqual(metrics['benchmarks/RESULTS.md lines'], 3)
    self.assertEqual(metrics['README.md lines'], 2)
    self.assertEqual(lists['checks.choice calls (outside cli/)'],
                     ['tff_ddp/a.py:12'])
    self.assertEqual(lists['version strings'],
                     ['tff_ddp/__init__.py:1', 'setup.py:1'])
    # scripts/ 2 + 1 lines; the BUILD file 1 and WORKSPACE 1 apart.
    self.assertEqual(metrics['tooling lines (scripts/, build_test)'], 3)
    self.assertEqual(metrics['build files (BUILD, WORKSPACE)'], 2)
    library = sum(
        textwrap.dedent(text).lstrip('\n').replace('LONG\n', _LONG +
                                                   '\n').count('\n')
        for path, text in _PACKAGE.items()
        if path.startswith('tff_ddp/') and path.endswith('.py'))
    self.assertEqual(metrics['library lines (tff_ddp/)'], library)

  def test_check_names_a_metric_above_its_ceiling(self):
    metrics = dict.fromkeys(design_metrics.CEILINGS, 0)
    self.assertEqual(design_metrics.over_ceiling(metrics), [])
    name = 'version strings'
    metrics[name] = design_metrics.CEILINGS[name] + 1
    self.assertEqual(design_metrics.over_ceiling(metrics),
                     [f'{name}: {metrics[name]} > {metrics[name] - 1}'])


class RepositoryTest(absltest.TestCase):

  def test_runs_on_the_repository(self):
    result = subprocess.run([sys.executable, _SCRIPT],
                            capture_output=True,
                            text=True,
                            timeout=120,
                            check=False)
    self.assertEqual(result.returncode, 0, result.stderr)
    for name in design_metrics.TARGETS:
      self.assertRegex(result.stdout, rf'\| {re.escape(name)} \| \d+ \|')

  def test_the_repository_is_within_the_ceilings(self):
    result = subprocess.run([sys.executable, _SCRIPT, '--check'],
                            capture_output=True,
                            text=True,
                            timeout=120,
                            check=False)
    self.assertEqual(result.returncode, 0, result.stderr)
