"""scripts/suite_profile.py measures what it says, and conftest.py hands the
xdist workers the costliest modules first.

Each function is checked on small synthetic inputs whose answers are known
by hand; `measure_module` once end to end on a generated test module whose
test spends CPU in a child process (the cost of a module includes what it
starts, as TFF's workers are). No TensorFlow: a few seconds.
"""

import json
import os
import tempfile
import textwrap
import types

from absl.testing import absltest

from tff_ddp_tests import conftest
from tff_ddp_tests import script_module

suite_profile = script_module.load('scripts/suite_profile.py')


class CountAssertsTest(absltest.TestCase):

  def test_counts_each_kind_once(self):
    source = textwrap.dedent('''
        import numpy as np
        import pytest

        def helper():
          assert 1 == 1                          # 1: statement

        class T:
          def test_a(self):
            self.assertEqual(1, 1)               # 2
            self.assertRaisesRegex(ValueError)   # 3
            np.testing.assert_allclose(1, 1)     # 4
            with pytest.raises(ValueError):      # 5
              pass
            self.fail('no')                      # 6
            self.failureException                # an attribute, no call
            helper()                             # a call of a helper
            assertion_count = len([])            # not a call of assert*
    ''')
    self.assertEqual(suite_profile.count_asserts(source), 6)

  def test_counts_the_repository(self):
    counted = suite_profile.asserts()
    self.assertIn('tff_ddp_tests/build_test.py', counted)
    self.assertGreater(counted['tff_ddp_tests/build_test.py'], 10)


class JunitTest(absltest.TestCase):

  def test_modules_and_seconds(self):
    with tempfile.TemporaryDirectory() as root:
      os.makedirs(os.path.join(root, 'tff_ddp_tests', 'sub'))
      for path in ('tff_ddp_tests/a_test.py', 'tff_ddp_tests/sub/b_test.py'):
        open(os.path.join(root, path), 'w', encoding='utf-8').close()
      self.assertEqual(
          suite_profile.module_of('tff_ddp_tests.sub.b_test.BTest', root),
          'tff_ddp_tests/sub/b_test.py')
      self.assertEqual(suite_profile.module_of('tff_ddp_tests.a_test', root),
                       'tff_ddp_tests/a_test.py')
      junit = os.path.join(root, 'junit.xml')
      with open(junit, 'w', encoding='utf-8') as f:
        f.write('<testsuites><testsuite>'
                '<testcase classname="tff_ddp_tests.a_test.ATest" name="t1" '
                'time="1.5"/>'
                '<testcase classname="tff_ddp_tests.a_test.ATest" name="t2" '
                'time="2.25"><skipped/></testcase>'
                '<testcase classname="tff_ddp_tests.sub.b_test.BTest" name="t" '
                'time="4"/>'
                '</testsuite></testsuites>')
      self.assertEqual(
          suite_profile.junit_modules(junit, root), {
              'tff_ddp_tests/a_test.py': {
                  'wall': 3.75,
                  'tests': 2
              },
              'tff_ddp_tests/sub/b_test.py': {
                  'wall': 4.0,
                  'tests': 1
              }
          })


class TableTest(absltest.TestCase):

  def test_before_and_after(self):
    before = {
        'modules': {
            'tff_ddp_tests/a_test.py': {
                'cpu': 100.0,
                'passed': 3
            },
            'tff_ddp_tests/b_test.py': {
                'cpu': 10.0,
                'passed': 1,
                'skipped': 1
            },
            'tff_ddp_tests/c_test.py': {
                'cpu': 5.0,
                'passed': 2
            }
        }
    }
    after = {
        'modules': {
            'tff_ddp_tests/a_test.py': {
                'cpu': 40.0,
                'passed': 3
            },
            'tff_ddp_tests/b_test.py': {
                'cpu': 10.0,
                'passed': 2
            },
            'tff_ddp_tests/c_test.py': {
                'cpu': 6.0,
                'passed': 2
            }
        }
    }
    self.assertEqual(
        suite_profile.table(before, after, top=2).splitlines(), [
            '| module | tests | CPU s before | CPU s after | ratio |',
            '|---|---|---|---|---|', '| a_test.py | 3 | 100 | 40 | 0.40 |',
            '| b_test.py | 2 | 10 | 10 | 1.00 |',
            '| 1 other modules | 2 | 5 | 6 | 1.20 |',
            '| **all** | 7 | 115 | 56 | 0.49 |'
        ])
    self.assertEqual(
        suite_profile.table(before, top=5).splitlines()[2:], [
            '| a_test.py | 3 | 100 |', '| b_test.py | 2 | 10 |',
            '| c_test.py | 2 | 5 |', '| **all** | 7 | 115 |'
        ])


class CostsTest(absltest.TestCase):

  def test_median_of_runs_and_overrides(self):
    # What a module adds to a worker: a junit entry's wall, a measure
    # entry's CPU less what no test accounts for (the import); the median
    # over runs; an override replaces it; never 0 (conftest's table).
    runs = [{
        'modules': {
            'a_test.py': {
                'wall': 10.0
            },
            'b_test.py': {
                'wall': 0.001
            }
        }
    }, {
        'modules': {
            'a_test.py': {
                'wall': 30.0
            }
        }
    }, {
        'modules': {
            'a_test.py': {
                'wall': 11.0
            },
            'c_test.py': {
                'wall': 4.0
            }
        }
    }]
    override = {'modules': {'c_test.py': {'cpu': 20.0, 'outside_tests': 15.5}}}
    self.assertEqual(suite_profile.costs_of(runs, [override]), {
        'a_test.py': 11.0,
        'b_test.py': 0.01,
        'c_test.py': 4.5
    })
    self.assertEqual(suite_profile.costs_of(runs[:2]), {
        'a_test.py': 20.0,
        'b_test.py': 0.01
    })


class MeasureTest(absltest.TestCase):

  def test_cpu_of_the_children_is_counted(self):
    # The test burns >= 0.5 s of CPU in a child Python, which pytest reaps:
    # the module's cost must include it (wait4 of the pytest process).
    module = textwrap.dedent('''
        import subprocess, sys

        def test_child_spends_cpu():
          subprocess.run([sys.executable, '-c',
                          'import time\\n'
                          'end = time.process_time() + 0.5\\n'
                          'while time.process_time() < end: pass'],
                         check=True)

        def test_fails():
          assert False
    ''')
    with tempfile.TemporaryDirectory() as directory:
      path = os.path.join(directory, 'child_cpu_test.py')
      with open(path, 'w', encoding='utf-8') as f:
        f.write(module)
      entry = suite_profile.measure_module(path, run_slow=False)
    self.assertGreaterEqual(entry['cpu'], 0.5, msg=entry)
    self.assertGreaterEqual(entry['wall'], 0.5, msg=entry)
    self.assertEqual((entry['passed'], entry['failed'], entry['status']),
                     (1, 1, 1),
                     msg=entry)
    self.assertEqual(
        [name for name, _ in entry['slowest']],
        ['child_cpu_test::test_child_spends_cpu', 'child_cpu_test::test_fails'])
    # Per test (the plugin): the child's CPU is the first test's.
    (first, seconds), (second, _) = entry['slowest_cpu']
    self.assertEqual((first, second), ('test_child_spends_cpu', 'test_fails'))
    self.assertGreaterEqual(seconds, 0.5)
    self.assertGreaterEqual(entry['outside_tests'], 0.0)
    self.assertLessEqual(seconds, entry['cpu'])


def _items(*nodeids):
  return [types.SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


class CostOrderTest(absltest.TestCase):

  def _order(self, costs, items):
    with tempfile.TemporaryDirectory() as directory:
      path = os.path.join(directory, 'costs.json')
      with open(path, 'w', encoding='utf-8') as f:
        json.dump({'modules': costs}, f)
      saved, conftest._COSTS = conftest._COSTS, path  # pylint: disable=protected-access  # resets private state between cases
      try:
        return [item.nodeid for item in conftest._by_module_cost(items)]  # pylint: disable=protected-access  # tests a private part
      finally:
        conftest._COSTS = saved  # pylint: disable=protected-access  # resets private state between cases

  def test_costliest_module_first_and_order_within_kept(self):
    items = _items('a_test.py::A::t2', 'a_test.py::A::t1', 'b_test.py::t',
                   'c_test.py::C::t', 'a_test.py::B::t')
    self.assertEqual(
        self._order({
            'a_test.py': 1.0,
            'b_test.py': 30.0,
            'c_test.py': 2.0
        }, items), [
            'b_test.py::t', 'c_test.py::C::t', 'a_test.py::A::t2',
            'a_test.py::A::t1', 'a_test.py::B::t'
        ])

  def test_unknown_module_counts_as_costliest(self):
    items = _items('a_test.py::t', 'new_test.py::t', 'b_test.py::t')
    self.assertEqual(self._order({
        'a_test.py': 1.0,
        'b_test.py': 30.0
    }, items), ['new_test.py::t', 'b_test.py::t', 'a_test.py::t'])

  def test_without_a_table_the_order_is_kept(self):
    items = _items('a_test.py::t', 'b_test.py::t')
    saved, conftest._COSTS = conftest._COSTS, '/nonexistent/costs.json'  # pylint: disable=protected-access  # resets private state between cases
    try:
      self.assertEqual(conftest._by_module_cost(items), items)  # pylint: disable=protected-access  # tests a private part
    finally:
      conftest._COSTS = saved  # pylint: disable=protected-access  # resets private state between cases

  def test_committed_table_names_test_modules(self):
    with open(conftest._COSTS, encoding='utf-8') as f:  # pylint: disable=protected-access  # resets private state between cases
      costs = json.load(f)['modules']
    self.assertNotEmpty(costs)
    present = set(suite_profile.test_modules())
    for module, seconds in costs.items():
      self.assertRegex(module, r'^tff_ddp_tests/.*_test\.py$')
      self.assertGreater(seconds, 0.0, msg=module)
      # A deleted or renamed module's entry would only mislead the order.
      self.assertIn(module,
                    present,
                    msg='module_costs.json names a module '
                    'that is gone: rewrite it (suite_profile.py costs)')
