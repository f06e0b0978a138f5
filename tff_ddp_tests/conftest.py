"""Test harness: TFF test execution context once per session, slow marker,
and the end of every worker process this test session started."""

import pytest

from tff_ddp.utils import processes


def pytest_addoption(parser):
  parser.addoption(
      '--run-slow', action='store_true', default=False,
      help='also run the tests marked slow (CI and `make test` do)')


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: statistical or end-to-end tests taking > ~5 s')


def pytest_collection_modifyitems(config, items):
  if config.getoption('--run-slow'):
    return
  skip = pytest.mark.skip(reason='slow: run with --run-slow (make test does)')
  for item in items:
    if 'slow' in item.keywords:
      item.add_marker(skip)


def pytest_sessionstart(session):
  del session
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
  del session, exitstatus
  ended = processes.release_tff()
  if ended:
    print(f'\n[tff_ddp] ended {len(ended)} worker process(es) started by '
          f'this test session: {ended}')
