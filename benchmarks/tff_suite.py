"""TFF 0.87's own tests of `DistributedDpSumFactory`, run against tff_ddp.

TFF's `distributed_dp_test.py` is not installed with the wheel and is not
copied into this repository; take it from the TensorFlow Federated
repository at tag v0.87.0
(`tensorflow_federated/python/aggregators/distributed_dp_test.py`) and pass
its path:

  .venv/bin/python benchmarks/tff_suite.py --tff-test /path/to/distributed_dp_test.py

The script copies the file to a temporary directory and runs it under
pytest with TFF's `distributed_dp.DistributedDpSumFactory` replaced by
`tff_ddp.aggregators.DiscreteGaussianSumFactory` (the tests read the
attribute at call time, so the substitution is the one line a user would
change), in TFF's C++ test execution context. It prints every test's
outcome, grouped:

- passed;
- failed on TFF's private internals: the test reads `_unpack_state`,
  `_l2_clip`, or compares the type signature of TFF's eight nested
  factories (the state of ours is one flat structure by design);
- failed otherwise (a behavioural difference), with the first line of the
  failure.

`--baseline` runs the unmodified test against TFF's own factory instead.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

import _common  # pylint: disable=unused-import

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
        tff_ddp.aggregators.DiscreteGaussianSumFactory)


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  processes.release_tff()
'''

# What in a failure says that the test read TFF's private internals rather
# than the factory's behaviour.
_INTERNALS = ('_unpack_state', "'_l2_clip'", 'is_equivalent_to',
              'test_type_properties', 'test_auto_l2_builds_estimation_process')


def _classify(case):
  """(outcome, first line of the failure) of one junit testcase element."""
  for tag in ('failure', 'error'):
    node = case.find(tag)
    if node is not None:
      text = (node.get('message') or '') + '\n' + (node.text or '')
      first = next((line.strip() for line in text.splitlines()
                    if line.strip()), '')
      name = case.get('name', '')
      if any(marker in text or marker in name for marker in _INTERNALS):
        return 'internals', first
      return 'failed', first
  if case.find('skipped') is not None:
    return 'skipped', ''
  return 'passed', ''


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  parser.add_argument('--tff-test', required=True,
                      help="path to TFF 0.87's distributed_dp_test.py")
  parser.add_argument('--baseline', action='store_true',
                      help="run against TFF's own factory (no substitution)")
  parser.add_argument('-k', default=None, help='pytest -k expression')
  args = parser.parse_args()
  if not os.path.isfile(args.tff_test):
    parser.error(f'--tff-test: no such file: {args.tff_test}')

  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with tempfile.TemporaryDirectory() as tmp:
    shutil.copy(args.tff_test, os.path.join(tmp, 'distributed_dp_test.py'))
    with open(os.path.join(tmp, 'conftest.py'), 'w') as f:
      f.write(_CONFTEST.format(substitute=not args.baseline))
    report = os.path.join(tmp, 'report.xml')
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
               '--rootdir', tmp, '-o', 'addopts=', '--junitxml', report,
               'distributed_dp_test.py']
    if args.k:
      command += ['-k', args.k]
    env = dict(os.environ, PYTHONPATH=root + os.pathsep +
               os.environ.get('PYTHONPATH', ''))
    subprocess.run(command, cwd=tmp, env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not os.path.exists(report):
      sys.exit('pytest wrote no report: run the command by hand to see why:\n'
               + ' '.join(command))
    cases = ElementTree.parse(report).getroot().iter('testcase')
    results = [(c.get('classname', '').split('.')[-1] + '.' + c.get('name'),
                *_classify(c)) for c in cases]

  factory = ("TFF's DistributedDpSumFactory" if args.baseline
             else 'tff_ddp.aggregators.DiscreteGaussianSumFactory')
  print(f'TFF 0.87 distributed_dp_test.py against {factory}')
  groups = {}
  for name, outcome, first in results:
    groups.setdefault(outcome, []).append((name, first))
  for outcome in ('failed', 'internals', 'skipped'):
    if outcome in groups:
      title = {'failed': 'failed (behaviour)',
               'internals': "failed (reads TFF's private internals)",
               'skipped': 'skipped'}[outcome]
      print(f'\n{title}:')
      for name, first in groups[outcome]:
        print(f'  {name}: {first[:150]}')
  counts = {k: len(v) for k, v in groups.items()}
  print(f"\n{counts.get('passed', 0)} passed, "
        f"{counts.get('failed', 0)} failed (behaviour), "
        f"{counts.get('internals', 0)} failed (internals), "
        f'{len(results)} in all')


if __name__ == '__main__':
  main()
