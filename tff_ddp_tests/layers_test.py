"""The two layers: the core imports no TFF, the TFF layer says what it needs.

Run by both lanes. The static checks read the sources (any import, lazy
ones included); where TFF is absent (the core lane) the TFF layer's import
is checked to fail with the one line of `tff_ddp.utils.requires`. Beside
them: the benchmarks import no test module.
"""

import ast
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

from tff_ddp.utils import requires
from tff_ddp_tests import conftest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = os.path.join(_ROOT, 'tff_ddp')
_TESTS = os.path.join(_ROOT, 'tff_ddp_tests')

# The framework-free core: packages (directories) and modules.
CORE = ('mechanisms/', 'encoders/', 'accounting/', 'utils/checks.py',
        'utils/deltas.py', 'utils/entropy.py', 'utils/processes.py',
        'utils/requires.py', 'utils/search.py', 'utils/stack.py',
        'utils/tensors.py', 'utils/__init__.py', '__init__.py')
# What the TFF layer is: each of these starts with `requires.require_tff`.
TFF_LAYER = ('aggregators/__init__.py', 'analytics/__init__.py',
             'experiments/__init__.py', 'learning/__init__.py', 'queries.py',
             'utils/rounds.py', 'utils/workers.py')
_TFF_MODULES = ('tensorflow_federated', 'tensorflow_privacy')
# Core modules that may import TFF lazily, inside a function that runs only
# where TFF is in use: processes ends TFF's workers and installs its
# contexts (conftest and the CLI import it on either lane).
_LAZY_TFF = ('utils/processes.py',)
_TFF_LAYER_MODULES = ('tff_ddp.aggregators', 'tff_ddp.analytics',
                      'tff_ddp.experiments', 'tff_ddp.learning',
                      'tff_ddp.queries', 'tff_ddp.cli', 'tff_ddp.audit',
                      'tff_ddp.utils.rounds', 'tff_ddp.utils.workers')

# Imports the modules named in argv where `tensorflow_federated` cannot be
# found (on the core lane it is not installed at all); prints the error of
# each.
_WITHOUT_TFF = """
import sys, importlib.util
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: (
    None if name == 'tensorflow_federated' else real(name, *a))
import tff_ddp.accounting, tff_ddp.mechanisms, tff_ddp.encoders
for name in sys.argv[1:]:
  try:
    __import__(name)
  except ImportError as e:
    print(type(e).__name__, '|', e)
"""

# The CLI where `tensorflow_federated` cannot be found: a federated command
# refused in one line, `privacy` (core only) runs.
_CLI_WITHOUT_TFF = """
import importlib.util
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: (
    None if name == 'tensorflow_federated' else real(name, *a))
from tff_ddp import cli
for argv in (['demo'], ['privacy', '--mechanism', 'gaussian',
                        '--noise-multiplier', '2', '--delta', '1e-5']):
  code, out, err = cli.run_captured(argv)
  print(code, '|', err.strip() or out.strip().splitlines()[-1])
"""


def _python_files(root, entries):
  for entry in entries:
    path = os.path.join(root, entry)
    if entry.endswith('/'):
      for directory, _, names in os.walk(path):
        for name in sorted(names):
          if name.endswith('.py'):
            yield os.path.join(directory, name)
    else:
      yield path


def _imports(path):
  """(line, module, at module level) of every import in the file."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  top = {id(node) for node in tree.body}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name, id(node) in top
    elif isinstance(node, ast.ImportFrom) and node.module:
      names = [node.module] + [f'{node.module}.{a.name}' for a in node.names]
      for name in names:
        yield node.lineno, name, id(node) in top


def _matches(module, prefixes):
  return any(module == p or module.startswith(p + '.') for p in prefixes)


class LayersTest(absltest.TestCase):

  def test_the_core_imports_neither_tff_nor_the_tff_layer(self):
    found = []
    for path in _python_files(_PACKAGE, CORE):
      lazy_tff = os.path.relpath(path, _PACKAGE) in _LAZY_TFF
      for line, module, top in _imports(path):
        if (_matches(module, _TFF_LAYER_MODULES) or
            _matches(module, _TFF_MODULES) and (top or not lazy_tff)):
          found.append(f'{os.path.relpath(path, _ROOT)}:{line} {module}')
    self.assertEmpty(found, 'the core must run without TFF')

  def test_core_tests_import_neither_tff_nor_the_tff_layer(self):
    found, checked = [], 0
    for path in _python_files(_TESTS, ('./',)):
      if not (path.endswith('_test.py') and conftest.is_core_test(path)):
        continue
      checked += 1
      for line, module, _ in _imports(path):
        # The command's package loads without TFF: its `privacy` command is
        # the core's (one_epsilon_test runs it on the core lane).
        if (_matches(module, _TFF_MODULES + _TFF_LAYER_MODULES) and
            module != 'tff_ddp.cli'):
          found.append(f'{os.path.relpath(path, _ROOT)}:{line} {module}')
    self.assertEmpty(found, 'core tests run in the lane without TFF')
    self.assertGreater(checked, len(conftest.CORE_TESTS))  # the walk found them

  def test_benchmarks_import_no_test_module(self):
    # A benchmark measures the library; tooling that runs the tests' cases
    # lives beside them (tff_ddp_tests/fuzz/bad_inputs.py).
    found = [
        f'{os.path.relpath(path, _ROOT)}:{line} {module}'
        for path in _python_files(_ROOT, ('benchmarks/',))
        for line, module, _ in _imports(path)
        if _matches(module, ('tff_ddp_tests',))
    ]
    self.assertEmpty(found, 'benchmarks/ imports a test module')

  def test_every_core_entry_exists(self):
    for entry in CORE + TFF_LAYER:
      self.assertTrue(os.path.exists(os.path.join(_PACKAGE, entry)), entry)
    for entry in conftest.CORE_TESTS:
      self.assertTrue(os.path.exists(os.path.join(_TESTS, entry)), entry)

  def test_the_tff_layer_checks_first(self):
    for entry in TFF_LAYER:
      with open(os.path.join(_PACKAGE, entry), encoding='utf-8') as f:
        tree = ast.parse(f.read())
      calls = [
          n for n in tree.body
          if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and
          ast.unparse(n.value.func) == 'requires.require_tff'
      ]
      self.assertLen(calls, 1, entry)
      # Before any import of TFF or of the TFF layer.
      first = next((n.lineno
                    for n in tree.body
                    if isinstance(n, (ast.Import, ast.ImportFrom)) and any(
                        _matches(m, _TFF_MODULES + _TFF_LAYER_MODULES)
                        for _, m, _ in _imports_of(n))), float('inf'))
      self.assertLess(calls[0].lineno, first, entry)

  def test_without_tff_the_tff_layer_fails_in_one_line(self):
    modules = [
        'tff_ddp.aggregators', 'tff_ddp.analytics', 'tff_ddp.experiments',
        'tff_ddp.learning', 'tff_ddp.queries', 'tff_ddp.utils.rounds',
        'tff_ddp.utils.workers'
    ]
    out = subprocess.run([sys.executable, '-c', _WITHOUT_TFF] + modules,
                         cwd=_ROOT,
                         capture_output=True,
                         text=True,
                         check=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
    lines = out.stdout.splitlines()
    self.assertLen(lines, len(modules), out.stdout + out.stderr)
    for module, line in zip(modules, lines):
      self.assertEqual(
          line, f'MissingTffError | {module} is part of tff_ddp\'s TFF layer '
          f'and needs {requires.NEEDS}; the core (tff_ddp.mechanisms, '
          'tff_ddp.encoders, tff_ddp.accounting) runs without it.')


class AfterImportTest(absltest.TestCase):
  """conftest's hook that installs the TFF test context when TFF imports."""

  def test_a_find_spec_alone_does_not_use_up_the_hook(self):
    """`then` runs once, after the module's import, even when
    `importlib.util.find_spec` (what `requires.require_tff` calls before
    the TFF layer imports TFF) looked for the module first.

    The hook used to leave `sys.meta_path` on the first find_spec: a test
    module importing `tff_ddp.analytics` before `tensorflow_federated` kept
    TFF's own context (no secure sums) for the rest of its process.
    """
    name = 'after_import_probe'  # written below, in a temporary directory
    with tempfile.TemporaryDirectory() as d:
      with open(os.path.join(d, name + '.py'), 'w', encoding='utf-8') as f:
        f.write('IMPORTED = True\n')
      calls = []
      hook = conftest.AfterImport(
          name, lambda: calls.append(sys.modules[name].IMPORTED))
      sys.path.insert(0, d)
      sys.meta_path.insert(0, hook)
      try:
        for _ in range(2):  # require_tff is called by each TFF-layer package
          self.assertIsNotNone(importlib.util.find_spec(name))
        self.assertEmpty(calls)
        self.assertIn(hook, sys.meta_path)
        __import__(name)  # through sys.meta_path, as an import statement
        self.assertEqual(calls, [True])  # after the module ran, once
        self.assertNotIn(hook, sys.meta_path)
      finally:
        if hook in sys.meta_path:
          sys.meta_path.remove(hook)
        sys.path.remove(d)
        sys.modules.pop(name, None)


class CliWithoutTffTest(absltest.TestCase):

  def test_federated_commands_refused_in_one_line_privacy_runs(self):
    out = subprocess.run([sys.executable, '-c', _CLI_WITHOUT_TFF],
                         cwd=_ROOT,
                         capture_output=True,
                         text=True,
                         check=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
    demo, privacy = out.stdout.splitlines()
    self.assertEqual(
        demo, '2 | tff-ddp demo: error: tff-ddp demo is part of tff_ddp\'s '
        f'TFF layer and needs {requires.NEEDS}; the core (tff_ddp.mechanisms, '
        'tff_ddp.encoders, tff_ddp.accounting) runs without it.')
    self.assertTrue(privacy.startswith('0 | '), privacy)


def _imports_of(node):
  if isinstance(node, ast.Import):
    return [(node.lineno, a.name, True) for a in node.names]
  return [(node.lineno, node.module or '', True)]
