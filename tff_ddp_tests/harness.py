"""One `main()` for every test module, so each runs on its own as pytest does.

`python tff_ddp_tests/<path>_test.py` (and the Bazel `py_test` targets, which
run exactly that) sets TFF's C++ test execution context -- needed for the
secure sum -- runs every test of the module, slow ones included, and ends the
TFF workers it started when the interpreter exits.

`python tff_ddp_tests/<path>_test.py --list` prints the id of every test the
module would run (`Class.method`, one a line, then a count) and runs none;
tff_ddp_tests/build_test.py compares that list with what pytest collects.

TensorFlow and TFF are imported only when the module uses them: a module that
needs neither (tff_ddp_tests/utils/checks_test.py) runs under absltest in a
second instead of paying TFF's import. The TFF test context is installed
whenever TFF is imported, before or during the tests, so a test that imports
TFF lazily still gets it.
"""

import importlib.abc
import importlib.util
import sys

LIST_FLAG = '--list'
LISTED = 'harness: listed {} tests, ran none'


def run_cli(argv):
  """(exit status, stdout, stderr) of `tff-ddp argv` run in this process
  (the CLI tests' one way to run a command: `tff_ddp.cli.run_captured`)."""
  from tff_ddp import cli  # pylint: disable=g-import-not-at-top
  return cli.run_captured(argv)


def main():
  if LIST_FLAG in sys.argv[1:]:
    sys.argv.remove(LIST_FLAG)
    _print_tests(sys.modules['__main__'])
    return
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
  if 'tensorflow_federated' in sys.modules:
    _set_test_context()
  else:
    sys.meta_path.insert(0, _TestContextOnTffImport())
  processes.end_workers_at_exit()
  if 'tensorflow' in sys.modules:
    sys.modules['tensorflow'].test.main()
  else:
    # What tf.test.main runs, less TensorFlow's benchmark flags.
    from absl.testing import absltest  # pylint: disable=g-import-not-at-top
    absltest.main()


def _set_test_context():
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
  processes.use_test_context()


class _TestContextOnTffImport(importlib.abc.MetaPathFinder):
  """Sets the TFF test context right after `tensorflow_federated` imports.

  Importing TFF installs its local C++ context (no secure intrinsics); this
  replaces it at once, as main() does for a module that imported TFF itself.
  """

  def find_spec(self, fullname, path, target=None):
    del path, target
    if fullname != 'tensorflow_federated':
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(fullname)
    if spec is None or spec.loader is None:
      return spec
    exec_module = spec.loader.exec_module

    def exec_then_set_context(module):
      exec_module(module)
      _set_test_context()

    spec.loader.exec_module = exec_then_set_context
    return spec


def _print_tests(module):
  """Prints the ids the test runner would run (absltest's loader), no run."""
  from absl.testing import absltest  # pylint: disable=g-import-not-at-top
  suite = absltest.TestLoader().loadTestsFromModule(module)
  ids = []

  def walk(test):
    if hasattr(test, '__iter__'):
      for t in test:
        walk(t)
    else:
      # '__main__.Class.method (parameters)' -> 'Class.method'.
      ids.append(test.id().split(' ', 1)[0].split('.', 1)[1])

  walk(suite)
  for test_id in ids:
    print(test_id)
  print(LISTED.format(len(ids)))
