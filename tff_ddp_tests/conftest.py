"""Test harness: TFF test execution context once per session, slow marker,
and the end of every worker process this test session started.

pytest is the one runner: `make test`, a single module
(`pytest tff_ddp_tests/<path>_test.py`) and Bazel's py_tests
(pytest_main.py, one module a process, slow tests included) all run
through this file.

Parallel runs (`make test`: pytest-xdist, `-n 2 --dist loadfile`). Each
xdist worker is a pytest session of its own: it installs its own TFF test
context (when it imports TFF) and its `pytest_sessionfinish` ends the
`worker_binary` processes it started. The controller runs no test, so it
imports no TFF. Whole modules go to one worker (module-level shared
processes and traced functions are built once), the costliest first
(`module_costs.json`, see `_by_module_cost`), so that no long module starts
last while the other worker idles.
"""

import importlib.abc
import importlib.util
import json
import os
import sys

import pytest

from tff_ddp.utils import processes

# The test modules of the framework-free core (tff_ddp.mechanisms, .encoders,
# .accounting and the utils they use), relative to this directory: a
# directory ends with '/'. Both lanes run them; `--core` (the core lane,
# `make test-core`: Python 3.12, no TFF) runs only these. They import
# neither TFF nor TF Privacy nor tff_ddp's TFF layer (layers_test checks);
# what of the core only TFF can check is in
# aggregators/core_in_tff_test.py.
CORE_TESTS = (
    'accounting/',
    'encoders/',
    'mechanisms/',
    'utils/checks_test.py',
    'utils/deltas_test.py',
    'utils/entropy_test.py',
    'utils/search_test.py',
    'utils/stack_test.py',
    'utils/tensors_test.py',
    'fuzz/fuzz_accounting_test.py',
    'fuzz/fuzz_encoders_test.py',
    'fuzz/fuzz_mechanisms_test.py',
    'fuzz/fuzz_utils_test.py',
    'fuzz/strategies_test.py',
    'colabs_test.py',
    'docs_test.py',
    'layers_test.py',
    'packaging_test.py',
)
_HERE = os.path.dirname(os.path.abspath(__file__))


def is_core_test(path) -> bool:
  """Whether the test module at `path` is one of CORE_TESTS."""
  relative = os.path.relpath(os.path.abspath(str(path)), _HERE)
  relative = relative.replace(os.sep, '/')
  return any(
      relative == entry or (entry.endswith('/') and relative.startswith(entry))
      for entry in CORE_TESTS)


def has_tff() -> bool:
  return importlib.util.find_spec('tensorflow_federated') is not None


def pytest_addoption(parser):
  parser.addoption(
      '--run-slow',
      action='store_true',
      default=False,
      help='also run the tests marked slow (CI and `make test` do)')
  parser.addoption(
      '--core',
      action='store_true',
      default=False,
      help='run only the tests of the framework-free core (CORE_TESTS; '
      '`make test-core` does, without TFF installed)')


def pytest_ignore_collect(collection_path, config):
  if not config.getoption('--core') or collection_path.is_dir():
    return None
  if collection_path.name.endswith(
      '_test.py') and not is_core_test(collection_path):
    return True
  return None


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: statistical or end-to-end tests taking > ~5 s')


def _is_xdist_controller(config) -> bool:
  """Whether this process only hands tests to xdist workers (runs none)."""
  return (not hasattr(config, 'workerinput') and
          config.getoption('dist', 'no') != 'no')


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
    with open(_COSTS, encoding='utf-8') as f:
      costs = json.load(f)['modules']
  except (OSError, ValueError, KeyError):
    return items
  unknown = max(costs.values(), default=0.0) + 1.0
  first = {}
  for index, item in enumerate(items):
    first.setdefault(item.nodeid.split('::', 1)[0], index)
  return sorted(items,
                key=lambda item:
                (-costs.get(item.nodeid.split('::', 1)[0], unknown), first[
                    item.nodeid.split('::', 1)[0]]))


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
  if _is_xdist_controller(session.config) or not has_tff():
    return
  # Set once, as TFF's own tests do per binary (the core lane has no TFF),
  # when TFF is imported: a session whose tests never import it (the core's
  # modules under Bazel, one module a process) does not pay its import.
  if 'tensorflow_federated' in sys.modules:
    processes.use_test_context()
  else:
    sys.meta_path.insert(
        0, AfterImport('tensorflow_federated', processes.use_test_context))


class AfterImport(importlib.abc.MetaPathFinder):
  """Calls `then()` right after the module `name` is imported (executed).

  For TFF: importing it installs its local C++ context (no secure
  intrinsics); `then` replaces it at once by the test context.

  A `find_spec` alone is not an import: the TFF layer's
  `requires.require_tff` calls `importlib.util.find_spec(name)`, which
  consults this finder, before any import. So the finder leaves
  `sys.meta_path` only when the module is executed. (It used to leave on
  its first `find_spec`: a test module importing `tff_ddp.analytics` before
  `tensorflow_federated` left TFF's own context in place for the rest of
  its process, and a later module's secure sums failed with
  MissingContextError, docs/notes/suite_time.md.)
  """

  def __init__(self, name, then):
    self._name = name
    self._then = then

  def find_spec(self, fullname, path, target=None):
    if fullname != self._name:
      return None
    spec = None
    for finder in list(sys.meta_path):  # the search this finder precedes
      find = getattr(finder, 'find_spec', None)
      if finder is self or find is None:
        continue
      spec = find(fullname, path, target)
      if spec is not None:
        break
    if spec is None or spec.loader is None:
      return spec
    exec_module = spec.loader.exec_module

    def exec_then(module):
      if self in sys.meta_path:
        sys.meta_path.remove(self)
      exec_module(module)
      self._then()

    spec.loader.exec_module = exec_then
    return spec


@pytest.fixture(autouse=True)
def tff_test_context():
  """Puts the test context back before a test if something dropped it.

  The CLI ends its TFF workers by dropping TFF's contexts
  (`processes.release_tff`, in `cli.common.run`); a test that runs a
  command in this process leaves no context for the tests after it, which
  then fail with "No default context installed" depending on the order.
  """
  if 'tensorflow_federated' in sys.modules:
    import tensorflow_federated as tff
    from tensorflow_federated.python.core.impl.context_stack import runtime_error_context
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
