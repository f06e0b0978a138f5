"""Test harness: TFF test execution context once per session, slow marker,
and the end of every worker process this test session started.

Parallel runs (`make test`: pytest-xdist, `-n 2 --dist loadfile`). Each
xdist worker is a pytest session of its own: its `pytest_sessionstart`
installs its own TFF test context and its `pytest_sessionfinish` ends the
`worker_binary` processes it started. The controller runs no test, so it
imports no TFF. Whole modules go to one worker (module-level shared
processes and traced functions are built once), the costliest first
(`module_costs.json`, see `_by_module_cost`), so that no long module starts
last while the other worker idles.
"""

import json
import os

import pytest

from tff_ddp.utils import processes


def pytest_addoption(parser):
  parser.addoption(
      '--run-slow', action='store_true', default=False,
      help='also run the tests marked slow (CI and `make test` do)')


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: statistical or end-to-end tests taking > ~5 s')


def _is_xdist_controller(config) -> bool:
  """Whether this process only hands tests to xdist workers (runs none)."""
  return (not hasattr(config, 'workerinput')
          and config.getoption('dist', 'no') != 'no')


# Measured cost of each test module: the seconds it adds to a worker of a
# `--run-slow` suite run (its tests' wall time in suite runs, or their CPU
# time for a module changed since), written by `scripts/suite_profile.py
# costs`.
_COSTS = os.path.join(os.path.dirname(__file__), 'module_costs.json')


def _by_module_cost(items):
  """`items` with whole modules ordered by cost, costliest first.

  xdist's `loadfile` scheduling (with --no-loadscope-reorder) hands modules
  out in collection order to whichever worker is free: longest first keeps
  the two workers' finishing times close (a long module handed out last
  would run alone). A module missing from the table (new) counts as the
  costliest, so it is never the straggler. The order within a module is
  kept.
  """
  try:
    with open(_COSTS) as f:
      costs = json.load(f)['modules']
  except (OSError, ValueError, KeyError):
    return items
  unknown = max(costs.values(), default=0.0) + 1.0
  first = {}
  for index, item in enumerate(items):
    first.setdefault(item.nodeid.split('::', 1)[0], index)
  return sorted(items, key=lambda item: (
      -costs.get(item.nodeid.split('::', 1)[0], unknown),
      first[item.nodeid.split('::', 1)[0]]))


def pytest_collection_modifyitems(config, items):
  if hasattr(config, 'workerinput'):
    items[:] = _by_module_cost(items)
  if config.getoption('--run-slow'):
    return
  skip = pytest.mark.skip(reason='slow: run with --run-slow (make test does)')
  for item in items:
    if 'slow' in item.keywords:
      item.add_marker(skip)


def pytest_sessionstart(session):
  if _is_xdist_controller(session.config):
    return
  # Imported here so that collecting pure-math tests does not pay for TFF
  # twice; set once, as TFF's own tests do per binary.
  processes.use_test_context()


@pytest.fixture(autouse=True)
def tff_test_context():
  """Puts the test context back before a test if something dropped it.

  The CLI ends its TFF workers by dropping TFF's contexts
  (`processes.release_tff`, in `cli.common.run`); a test that runs a
  command in this process leaves no context for the tests after it, which
  then fail with "No default context installed" depending on the order.
  """
  import sys  # pylint: disable=g-import-not-at-top
  if 'tensorflow_federated' in sys.modules:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.context_stack import runtime_error_context  # pylint: disable=g-import-not-at-top
    if isinstance(tff.framework.get_context_stack().current,
                  runtime_error_context.RuntimeErrorContext):
      processes.use_test_context()
  yield


def pytest_sessionfinish(session, exitstatus):
  del exitstatus
  if _is_xdist_controller(session.config):
    # Its children are the xdist workers, each of which ends its own TFF
    # workers in its own pytest_sessionfinish.
    return
  ended = processes.release_tff()
  if ended:
    print(f'\n[tff_ddp] ended {len(ended)} worker process(es) started by '
          f'this test session: {ended}')
