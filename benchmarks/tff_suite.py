"""TFF 0.87's own tests of `DistributedDpSumFactory`, run against tff_ddp.

TFF's `distributed_dp_test.py` is not installed with the wheel and is not
copied into this repository; take it from the TensorFlow Federated
repository at tag v0.87.0
(`tensorflow_federated/python/aggregators/distributed_dp_test.py`) and pass
its path:

  .venv/bin/python benchmarks/tff_suite.py --tff-test /path/to/distributed_dp_test.py

The script copies the file to a temporary directory and runs it under
pytest with TFF's `distributed_dp.DistributedDpSumFactory` replaced by
`tff_ddp.aggregators.DiscreteGaussianSumFactory.from_tff_arguments` (the
tests read the attribute at call time, so the substitution is the one line
a user would change), in TFF's C++ test execution context. It prints every test's
outcome, grouped:

- passed;
- failed on TFF's private internals: the test reads `_unpack_state`,
  `_l2_clip`, or compares the type signature of TFF's eight nested
  factories (the state of ours is one flat structure by design);
- failed otherwise (a behavioural difference), with the first line of the
  failure.

`--baseline` runs the unmodified test against TFF's own factory instead.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from xml.etree import ElementTree

import _harness as harness

_CONFTEST = '''
import pytest

from tff_ddp.utils import processes


def pytest_sessionstart(session):
  del session
  import tensorflow_federated as tff
  tff.backends.test.set_sync_test_cpp_execution_context()
  if {substitute}:
    from tensorflow_federated.python.aggregators import distributed_dp
    import tff_ddp.aggregators
    distributed_dp.DistributedDpSumFactory = (
        tff_ddp.aggregators.DiscreteGaussianSumFactory.from_tff_arguments)


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  processes.release_tff()
'''

# What in a failure says that the test read TFF's private internals rather
# than the factory's behaviour.
_INTERNALS = ('_unpack_state', "'_l2_clip'", 'is_equivalent_to',
              'test_type_properties', 'test_auto_l2_builds_estimation_process')

_CLASSES = ('passed', 'failed', 'internals', 'skipped')


def _classify(case):
  """(outcome, first line of the failure) of one junit testcase element."""
  for tag in ('failure', 'error'):
    node = case.find(tag)
    if node is not None:
      text = (node.get('message') or '') + '\n' + (node.text or '')
      first = next((line.strip() for line in text.splitlines() if line.strip()),
                   '')
      name = case.get('name', '')
      if any(marker in text or marker in name for marker in _INTERNALS):
        return 'internals', first
      return 'failed', first
  if case.find('skipped') is not None:
    return 'skipped', ''
  return 'passed', ''


_TITLES = {
    'failed': 'failed (behaviour)',
    'internals': "failed (reads TFF's private internals)",
    'skipped': 'skipped'
}


def run(tff_test, baseline=False, k=None):
  """One row per test that did not pass, grouped by outcome."""
  if not os.path.isfile(tff_test):
    raise harness.UsageError(f'--tff-test: no such file: {tff_test}; pass '
                             "the path of TFF 0.87's distributed_dp_test.py")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with tempfile.TemporaryDirectory() as tmp:
    shutil.copy(tff_test, os.path.join(tmp, 'distributed_dp_test.py'))
    with open(os.path.join(tmp, 'conftest.py'), 'w', encoding='utf-8') as f:
      f.write(_CONFTEST.format(substitute=not baseline))
    report = os.path.join(tmp, 'report.xml')
    command = [
        sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
        '--rootdir', tmp, '-o', 'addopts=', '--junitxml', report,
        'distributed_dp_test.py'
    ]
    if k:
      command += ['-k', k]
    env = dict(os.environ,
               PYTHONPATH=root + os.pathsep + os.environ.get('PYTHONPATH', ''))
    subprocess.run(command,
                   cwd=tmp,
                   env=env,
                   check=False,
                   stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    if not os.path.exists(report):
      sys.exit('pytest wrote no report: run the command by hand to see why:\n' +
               ' '.join(command))
    cases = ElementTree.parse(report).getroot().iter('testcase')
    results = [(c.get('classname', '').split('.')[-1] + '.' + c.get('name'),
                *_classify(c)) for c in cases]

  factory = ("TFF's DistributedDpSumFactory"
             if baseline else 'tff_ddp.aggregators.DiscreteGaussianSumFactory')
  table = harness.Table(
      [('outcome', 'outcome', 's'), ('test', 'test', 's'),
       ('first', 'first line of the failure', 's')],
      title=f'TFF 0.87 distributed_dp_test.py against {factory}')
  for outcome in _TITLES:
    for name, got, first in results:
      if got == outcome:
        table.add(outcome=_TITLES[outcome], test=name, first=first[:150])
  counts = {o: sum(got == o for _, got, _ in results) for o in _CLASSES}
  table.notes.append(f"{counts['passed']} passed, {counts['failed']} failed "
                     f"(behaviour), {counts['internals']} failed "
                     f'(internals), {len(results)} in all')
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               tff_test="path to TFF 0.87's distributed_dp_test.py",
               baseline="run against TFF's own factory (no substitution)",
               k=harness.arg('pytest -k expression', type=str, flags=('-k',)))
