"""Writes every Bazel BUILD file of the repository from its source tree.

    python scripts/build_files.py            # `make build-files`: write them
    python scripts/build_files.py --check    # exit 1 and print a diff if a
                                             # committed BUILD file differs

The BUILD files are an output: nothing in them is typed by hand. Add, move or
delete a module, change its imports, mark a test slow, then run
`make build-files` and commit what it wrote. The output depends only on the
source tree and the tables below (never on the BUILD files already there), and
its order is fixed (sorted), so running it twice, or on two branches that
each added a module, gives the same files. tff_ddp_tests/build_test.py checks
that the committed files equal what this script generates.

What is generated (the layout TensorFlow Federated uses):

- One package per directory with .py files under SOURCE_ROOTS, plus the root
  (ROOT_EXPORTS, ROOT_ALIASES), requirements/ (its files exported) and
  colabs/ (a `notebooks` filegroup). The rules are Bazel's native py_library,
  py_binary and py_test (no rules_python: Debian's bazel-bootstrap 4.2.3
  builds them offline, docs/notes/bazel.md).
- One target per module, named after it (`__init__.py` after its package):
  a `py_test` for each `*_test.py` under tff_ddp_tests/, a `py_binary` for
  each script of SCRIPT_DIRS whose name does not start with `_` and for each
  `__main__.py` (named in BINARY_NAMES), a `py_library` for everything else.
- `deps` = the module's imports, found with `ast` at any depth (lazy imports
  in functions count): `from tff_ddp.x import y` / `import tff_ddp.x.y` ->
  //tff_ddp/x:y; `from tff_ddp.x import Name` (not a module) -> //tff_ddp/x;
  a third-party module -> no dep (it comes from the interpreter's
  site-packages: //bazel:python3 runs the project's .venv), but it must map
  through THIRD_PARTY to a distribution pinned in requirements/lock.txt; the
  standard library needs nothing; in SCRIPT_DIRS a bare `import _common`
  of a sibling file -> its target. Imports no import statement shows:
  * `importlib.import_module('literal')`, or with a computed name when the
    same function first tests the name with `in` / `not in` against a
    module-level tuple of string constants (a *name table*; tff_ddp/
    __init__.py loads its subpackages this way, accounting/event_io.py its
    event classes): every entry of the table counts. Any other computed
    import is a problem.
  * `[sys.executable, '-c', CODE]` with CODE a string constant or a
    module-level name bound to one: CODE's imports count.
    `[sys.executable, '-m', 'pkg']` imports pkg, and puts the py_binary of
    pkg/__main__.py in `data`.
  * RUNS_NOTEBOOKS: a test that executes the notebooks of a directory gets
    their code cells' imports as deps and their filegroup as data.
- `py_test`: `size` "medium", "large" with `tags = ["slow"]` when the module
  uses `pytest.mark.slow` (or builds its classes with the fuzz suite's
  `test_classes`), or what TEST_SIZES says. Its rule is the `py_test` of
  //bazel:pytest.bzl: Bazel runs TEST_MAIN, which runs the module under
  pytest with the conftest (TFF's test context, the end of the workers),
  slow tests included; TEST_CONFTEST is among its deps.
- `testonly = True` for every non-test target under tff_ddp_tests/ and for
  any target that depends on a testonly one.
- `default_visibility` from VISIBILITY; a dependency on a target its
  package does not see is a problem, as is a dependency cycle.
- TARGET_NOTES: per module, a comment above its target and attributes that
  no import shows (data a test runs by path, tags such as "local").

A problem (an import that resolves to nothing, an unpinned distribution, a
cycle, ...) is printed with the file, the line
and what to do, and no file is written. Bazel itself is not needed to
generate them; every generated file is checked to parse as Python, of which
Starlark BUILD files are a subset, and `make bazel-test` builds and runs the
core's tests with them (scripts/install_bazel.sh installs Bazel).
"""

import argparse
import ast
import dataclasses
import difflib
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

# Directories whose .py files are all in BUILD targets.
SOURCE_ROOTS = ('tff_ddp', 'tff_ddp_tests', 'benchmarks', 'scripts')
# Top-level packages importable by their dotted name.
INTERNAL_PACKAGES = ('tff_ddp', 'tff_ddp_tests')
# Directories of scripts run as `python DIR/x.py`: siblings import by name.
SCRIPT_DIRS = ('benchmarks', 'scripts')
# Directories with no BUILD targets: the tests of the tooling (pytest runs
# them, `make test-tooling`; they are not the library's suite).
NOT_BUILT = ('scripts/tests',)
# The test tree: its `*_test.py` files are py_tests (pytest.ini's
# python_files), its other modules testonly.
TEST_ROOT = 'tff_ddp_tests'
# The `main` of every py_test (exported: each test package's py_test names
# it) and the rule that runs it (//bazel:pytest.bzl).
TEST_MAIN = 'tff_ddp_tests/pytest_main.py'
# What pytest imports for every test module: a dep of every py_test.
TEST_CONFTEST = 'tff_ddp_tests/conftest.py'
TEST_RULE = 'load("//bazel:pytest.bzl", "py_test")'
NOTEBOOK_DIR = 'colabs'
REQUIREMENTS_DIR = 'requirements'
LOCK_FILE = 'requirements/lock.txt'
BUILD_NAME = 'BUILD'
# The directory of the hand-kept Bazel files (toolchain, offline stand-ins).
HAND_KEPT = 'bazel'

# Top-level import name (or dotted prefix) -> PyPI distribution, as pinned in
# requirements/lock.txt. The longest matching prefix wins.
THIRD_PARTY = {
    'absl': 'absl-py',
    'attr': 'attrs',
    'dp_accounting': 'dp-accounting',
    'google.protobuf': 'protobuf',
    'grpc': 'grpcio',
    'hypothesis': 'hypothesis',
    'ipykernel': 'ipykernel',
    'jax': 'jax',
    'jupyter_client': 'jupyter-client',
    'matplotlib': 'matplotlib',
    'mpmath': 'mpmath',
    'nbclient': 'nbclient',
    'nbformat': 'nbformat',
    'numpy': 'numpy',
    'PIL': 'pillow',
    'portpicker': 'portpicker',
    'pytest': 'pytest',
    'scipy': 'scipy',
    'sklearn': 'scikit-learn',
    'tensorflow': 'tensorflow',
    'tensorflow_federated': 'tensorflow-federated',
    'tensorflow_model_optimization': 'tensorflow-model-optimization',
    'tensorflow_privacy': 'tensorflow-privacy',
    'tensorflow_probability': 'tensorflow-probability',
    'tqdm': 'tqdm',
    'tree': 'dm-tree',
}

# Test modules that execute every notebook of a directory (in a kernel).
RUNS_NOTEBOOKS = {
    'tff_ddp_tests/colabs_test.py': 'colabs',
}

# py_binary names of `__main__.py` files (default: <package>_main).
BINARY_NAMES = {
    'tff_ddp/cli/__main__.py': 'tff-ddp',
}

# Sizes of test modules that are neither "medium" nor "large" (slow).
TEST_SIZES = {
    'tff_ddp_tests/colabs_test.py': 'enormous',
    'tff_ddp_tests/utils/checks_test.py': 'small',
}

PUBLIC = '//visibility:public'
# Package -> default_visibility (entry, or (entry, comment)); a package not
# listed takes its nearest listed parent's.
VISIBILITY = {
    '': (PUBLIC,),
    'benchmarks': (
        ('//visibility:private', 'Scripts: no other package depends on them.'),
    ),
    'tff_ddp_tests': ('//tff_ddp_tests:__subpackages__',),
}

# The root package's files for other packages, and its aliases (name -> the
# module whose target it points at).
ROOT_EXPORTS = ('README.md', 'pytest.ini', 'setup.py')
ROOT_ALIASES = {'tff-ddp': 'tff_ddp/cli/__main__.py'}

# Package comments, printed above package().
PACKAGE_NOTES = {
    '':
        """Root package of tff_ddp. The library is //tff_ddp (its subpackages load
lazily, as TFF's do); the tests are under //tff_ddp_tests.""",
    'benchmarks':
        """`bazel run //benchmarks:<name>` runs what `make bench` runs with
`python benchmarks/<name>.py`; siblings import `_common` by its bare name
(the script's own directory is first on sys.path in both cases).""",
    'colabs':
        """The tutorials; tff_ddp_tests:colabs_test runs each one's code cells.""",
    'requirements':
        """The pinned Python dependencies. Bazel's py rules take them from the
interpreter (//bazel:python3 runs .venv, which `make setup` installs from
lock.txt); the BUILD files name only tff_ddp's own targets as deps.""",
    'tff_ddp_tests':
        """Tests mirror tff_ddp/: one py_test per test module, run under
pytest (//bazel:pytest.bzl, pytest_main.py: every test, slow ones too).
Sizes (Bazel's timeouts 300 s / 900 s / 3600 s): "medium" by default,
"large" with tags = ["slow"] for a module with @pytest.mark.slow tests,
"enormous" for colabs_test. `bazel test --test_tag_filters=-slow //...` is
`make test-fast`.""",
}

# Per module: `comment` above its target, and attributes no import shows
# (`data`: labels it runs or reads at test time; `tags`).
TARGET_NOTES = {
    'tff_ddp/__init__.py':
        dict(comment="""\
__init__.py imports nothing at load time: it loads the names of its
_SUBPACKAGES table on first attribute access (importlib.import_module), so
`import tff_ddp` is fast and `tff_ddp.aggregators...` works. Those are its
deps (scripts/build_files.py reads the table)."""),
    'tff_ddp/cli/__main__.py':
        dict(comment="""\
The `tff-ddp` command (setup.py's console script tff_ddp.cli:console_main;
`python -m tff_ddp.cli` runs the same file). //:tff-ddp is an alias."""),
    'tff_ddp_tests/build_test.py':
        dict(comment="""\
Generates every BUILD file in memory (scripts/build_files.py, loaded by path
through :script_module) and reads the source tree through the real path of
the checkout, so it runs unsandboxed ("local").""",
             data=('//scripts:build_files.py',),
             tags=('local',)),
    'tff_ddp_tests/accounting/cross_version_test.py':
        dict(comment="""\
Holds the epsilons to the reference it reads beside it (made on
dp-accounting 0.4.3; `--write` rewrites it).""",
             data=(':cross_version_epsilons.json',)),
    'tff_ddp_tests/cli_test.py':
        dict(comment="""\
Runs `python -m tff_ddp.cli` (the binary is its data)."""),
    'tff_ddp_tests/colabs_test.py':
        dict(comment="""\
Runs each notebook's code cells in a kernel (up to 600 s each) through
scripts/run_colabs.py: their imports are its deps.""",
             data=('//scripts:run_colabs.py',)),
    'tff_ddp_tests/docs_test.py':
        dict(comment="""\
Runs the code blocks of README.md and docs/*.md (read through the checkout's
real path, with `make demo` and the tff-ddp command among them), so it runs
unsandboxed ("local").""",
             data=('//:README.md',),
             tags=('local',)),
    'scripts/build_files.py':
        dict(comment="""\
Writes every BUILD file from the imports: `make build-files`."""),
    'scripts/design_metrics.py':
        dict(comment="""\
Prints the design metrics of issue 33 (benchmarks/RESULTS.md records them)."""),
    'scripts/flake_hunt.py':
        dict(comment="""\
Runs test modules many times, each in a fresh pytest process, and lists
every test that failed even once: `python scripts/flake_hunt.py --repeat
20 [--run-slow] PATH ...`. It starts `python -m pytest` as a subprocess."""),
    'scripts/run_colabs.py':
        dict(comment="""\
Executes the notebooks in colabs/: `python scripts/run_colabs.py --check`
(or --write to save their outputs)."""),
    'scripts/suite_profile.py':
        dict(comment="""\
CPU and wall seconds per test module, each run in its own pytest process
(`python scripts/suite_profile.py measure`), and the tables of
benchmarks/RESULTS.md; writes tff_ddp_tests/module_costs.json."""),
}

GENERATED = (
    '# Generated by scripts/build_files.py (`make build-files`) from the '
    'source tree;\n# do not edit: change the imports, or that '
    "script's tables.")
SLOW_SIZES = ('large', 'enormous')
ALL_SIZES = ('small', 'medium') + SLOW_SIZES

# ----------------------------------------------------------------------------
# Labels, requirements, problems.


@dataclasses.dataclass(frozen=True, order=True)
class Label:
  """A target or a source file: package directory ('' for the root), name."""
  package: str
  name: str

  def render(self, from_package: Optional[str] = None) -> str:
    if self.package == from_package:
      return f':{self.name}'
    if self.package and self.name == os.path.basename(self.package):
      return f'//{self.package}'
    return f'//{self.package}:{self.name}'

  def __str__(self):
    return self.render()


@dataclasses.dataclass(frozen=True, order=True)
class Requirement:
  dist: str

  def render(self, from_package: Optional[str] = None) -> str:
    del from_package
    return f'requirement("{self.dist}")'

  def __str__(self):
    return self.render()


Dep = Union[Label, Requirement]


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
  path: str
  line: int
  message: str

  def __str__(self):
    return f'{self.path}:{self.line}: {self.message}'


def normalize_dist(name: str) -> str:
  """PEP 503 normalisation, as pip compares distribution names."""
  return re.sub(r'[-_.]+', '-', name).lower()


def parse_label(text: str, package: str) -> Label:
  """Label from `//pkg`, `//pkg:x`, `:x` (relative to `package`)."""
  if text.startswith('//'):
    body = text[2:]
    if ':' in body:
      pkg, name = body.split(':', 1)
    else:
      pkg, name = body, os.path.basename(body)
    return Label(pkg, name)
  return Label(package, text.lstrip(':'))


def _dep_order(package: str):
  # buildifier's order: ':x' labels, then '//' labels, then requirement().
  def key(dep):
    if isinstance(dep, Requirement):
      return (2, normalize_dist(dep.dist), '')
    return (0 if dep.package == package else 1, dep.package, dep.name)

  return key


# ----------------------------------------------------------------------------
# Imports of a module, read with `ast` (never imported).


@dataclasses.dataclass(frozen=True)
class Import:
  line: int
  module: str  # absolute dotted name
  names: Tuple[str, ...] = ()  # `from module import names`
  how: str = 'import'  # 'import', 'dynamic', 'child', 'child -m', 'notebook'


class _Unreadable(Exception):
  pass


def _string_value(node, names):
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if isinstance(node, ast.Name) and node.id in names:
    return names[node.id]
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    return _string_value(node.left, names) + _string_value(node.right, names)
  raise _Unreadable()


def _module_strings(tree) -> Dict[str, str]:
  """Module-level NAME = <string constant, or a sum of them>."""
  found = {}
  for stmt in tree.body:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
        isinstance(stmt.targets[0], ast.Name)):
      try:
        found[stmt.targets[0].id] = _string_value(stmt.value, found)
      except _Unreadable:
        pass
  return found


def _name_tables(tree) -> Dict[str, Tuple[str, ...]]:
  """Module-level NAME = ('a', 'b', ...): tuples/lists of string constants."""
  tables = {}
  for stmt in tree.body:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
        isinstance(stmt.targets[0], ast.Name) and
        isinstance(stmt.value,
                   (ast.Tuple, ast.List)) and stmt.value.elts and all(
                       isinstance(e, ast.Constant) and isinstance(e.value, str)
                       for e in stmt.value.elts)):
      tables[stmt.targets[0].id] = tuple(e.value for e in stmt.value.elts)
  return tables


def _dynamic_import(call, function, tables) -> Optional[List[str]]:
  """Modules an importlib.import_module(...) call can load; None if unknown."""
  if len(call.args) != 1 or call.keywords:
    return None
  arg = call.args[0]
  if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
    return [arg.value]
  prefix, suffix, variable = '', '', None
  if isinstance(arg, ast.Name):
    variable = arg.id
  elif isinstance(arg, ast.JoinedStr):
    holes = [v for v in arg.values if isinstance(v, ast.FormattedValue)]
    if (len(holes) == 1 and isinstance(holes[0].value, ast.Name) and
        holes[0].conversion == -1 and holes[0].format_spec is None):
      i = arg.values.index(holes[0])
      prefix = ''.join(v.value for v in arg.values[:i])
      suffix = ''.join(v.value for v in arg.values[i + 1:])
      variable = holes[0].value.id
  if variable is None or function is None:
    return None
  for node in ast.walk(function):
    if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and
        node.left.id == variable and len(node.ops) == 1 and
        isinstance(node.ops[0], (ast.In, ast.NotIn)) and
        isinstance(node.comparators[0], ast.Name) and
        node.comparators[0].id in tables):
      return [prefix + e + suffix for e in tables[node.comparators[0].id]]
  return None


def _import_of(node, package: str, at: int, how: str) -> List[Import]:
  """The Import(s) of an `import` / `from ... import` statement node."""
  if isinstance(node, ast.Import):
    return [Import(at, alias.name, (), how) for alias in node.names]
  if node.level:
    base = package.split('.') if package else []
    base = base[:len(base) - (node.level - 1)]
    module = '.'.join(base + ([node.module] if node.module else []))
  else:
    module = node.module
  return [Import(at, module, tuple(a.name for a in node.names), how)]


def _statement_imports(tree, package: str, line: int, how: str):
  found = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      found += _import_of(node, package, line, how)
  return found


def _is_sys_executable(node):
  return (isinstance(node, ast.Attribute) and node.attr == 'executable' and
          isinstance(node.value, ast.Name) and node.value.id == 'sys')


def notebook_code(path: str) -> str:
  """The code cells of a notebook, IPython magics and shell lines blanked."""
  with open(path, encoding='utf-8') as f:
    notebook = json.load(f)
  lines = []
  for cell in notebook.get('cells', []):
    if cell.get('cell_type') != 'code':
      continue
    source = cell.get('source', '')
    source = ''.join(source) if isinstance(source, list) else source
    lines.extend('' if text.lstrip().startswith(('%', '!')) else text
                 for text in source.splitlines())
    lines.append('')
  return '\n'.join(lines)


def module_imports(root: str,
                   path: str,
                   tree=None) -> Tuple[List[Import], List[Problem]]:
  """Every import of the module at `path` (relative to root)."""
  if tree is None:
    tree, problem = _parse(root, path)
    if problem:
      return [], [problem]
  package = '.'.join(p for p in os.path.dirname(path).split('/') if p)
  imports, problems, parents = [], [], None
  tables, strings = _name_tables(tree), _module_strings(tree)
  for node in ast.walk(tree):  # one pass over the module
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      imports += _import_of(node, package, node.lineno, 'import')
    elif (isinstance(node, ast.Call) and
          isinstance(node.func, ast.Attribute) and
          node.func.attr == 'import_module' and
          isinstance(node.func.value, ast.Name) and
          node.func.value.id == 'importlib'):
      if parents is None:
        parents = {
            child: n for n in ast.walk(tree)
            for child in ast.iter_child_nodes(n)
        }
      function = node
      while function in parents and not isinstance(
          function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = parents[function]
      if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = None
      modules = _dynamic_import(node, function, tables)
      if modules is None:
        problems.append(
            Problem(
                path, node.lineno,
                'importlib.import_module() with a name that cannot be read: use '
                'a literal, or test the name against a module-level tuple of '
                'module names (`if name in _TABLE:`) in the same function'))
      else:
        imports.extend(Import(node.lineno, m, (), 'dynamic') for m in modules)
    elif isinstance(node, (ast.List, ast.Tuple)):
      elts = node.elts
      for i in range(len(elts) - 2):
        if not (_is_sys_executable(elts[i]) and isinstance(
            elts[i + 1], ast.Constant) and elts[i + 1].value in ('-c', '-m')):
          continue
        try:
          text = _string_value(elts[i + 2], strings)
        except _Unreadable:
          problems.append(
              Problem(
                  path, node.lineno,
                  f'`{elts[i + 1].value}` with an argument that cannot be read: '
                  'use a string constant (or a module-level name bound to one)')
          )
          continue
        if elts[i + 1].value == '-m':
          imports.append(Import(node.lineno, text, (), 'child -m'))
          continue
        try:
          child = ast.parse(text)
        except SyntaxError as e:
          problems.append(
              Problem(path, node.lineno,
                      f'the code for `-c` does not parse: {e}'))
          continue
        imports.extend(_statement_imports(child, '', node.lineno, 'child'))
  return imports, problems


def _parse(root, path):
  with open(os.path.join(root, path), encoding='utf-8') as f:
    source = f.read()
  try:
    return ast.parse(source, filename=path), None
  except SyntaxError as e:
    return None, Problem(path, e.lineno or 0, f'does not parse: {e.msg}')


def is_slow(tree) -> bool:
  """Whether a test module marks anything @pytest.mark.slow."""
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and node.attr == 'slow' and
        isinstance(node.value, ast.Attribute) and node.value.attr == 'mark' and
        isinstance(node.value.value, ast.Name) and
        node.value.value.id == 'pytest'):
      return True
    # tff_ddp_tests.fuzz.strategies.test_classes returns a slow-marked class.
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
        node.func.attr == 'test_classes'):
      return True
  return False


def lost_marks(tree) -> List[int]:
  """Lines of pytest marks above a @parameterized decorator: the generated
  methods do not carry them, so the mark is silently lost."""
  lines = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      names = [ast.unparse(d) for d in node.decorator_list]
      for i, text in enumerate(names):
        if text.startswith('pytest.mark.') and any(
            later.startswith('parameterized.') for later in names[i + 1:]):
          lines.append(node.decorator_list[i].lineno)
  return lines


def _defined_names(tree) -> Optional[Set[str]]:
  """Top-level names a module defines; None if it may define any."""
  names = set()
  for stmt in tree.body:
    nodes = ast.walk(stmt) if isinstance(stmt, (ast.If, ast.Try)) else [stmt]
    for node in nodes:
      if isinstance(node,
                    (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
      elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names.update(a.asname or a.name.split('.')[0] for a in node.names)
      elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node,
                                             ast.Assign) else [node.target]
        for target in targets:
          names.update(
              n.id for n in ast.walk(target) if isinstance(n, ast.Name))
  # A module __getattr__ (lazy names) or a star import defines any name.
  return None if '__getattr__' in names or '*' in names else names


# ----------------------------------------------------------------------------
# The model: packages and targets derived from the tree.


@dataclasses.dataclass
class Target:
  kind: str
  name: str
  package: str
  src: str = ''  # the module's file name in the package
  deps: Set[Dep] = dataclasses.field(default_factory=set)
  data: Set[Label] = dataclasses.field(default_factory=set)
  size: Optional[str] = None
  tags: Tuple[str, ...] = ()
  testonly: bool = False
  main: Optional[str] = None
  comment: Optional[str] = None
  files: Tuple[str, ...] = ()  # filegroup srcs / exports_files

  @property
  def label(self) -> Label:
    return Label(self.package, self.name)


def _walk(root, top):
  for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
    relative = os.path.relpath(dirpath, root)
    dirnames[:] = sorted(
        d for d in dirnames
        if not d.startswith(('.', '__pycache__', 'bazel-')) and
        os.path.normpath(os.path.join(relative, d)) not in NOT_BUILT)
    yield relative, sorted(filenames)


class Tree:
  """The modules of `root` and the targets generated for them."""

  def __init__(self, root: str):
    self.root = root
    self.problems: List[Problem] = []
    self.py_files: List[str] = []
    self.modules: Dict[str, str] = {}  # dotted name -> file
    for top in SOURCE_ROOTS:
      if not os.path.isdir(os.path.join(root, top)):
        continue
      for dirpath, filenames in _walk(root, top):
        for name in filenames:
          if not name.endswith('.py'):
            continue
          path = os.path.join(dirpath, name)
          self.py_files.append(path)
          if top in INTERNAL_PACKAGES:
            dotted = dirpath.replace('/', '.')
            if name != '__init__.py':
              dotted += '.' + name[:-3]
            self.modules[dotted] = path
    self.trees = {}
    for path in self.py_files:
      tree, problem = _parse(root, path)
      if problem:
        self.problems.append(problem)
      self.trees[path] = tree
    self.notebooks = sorted(
        name for name in (os.listdir(os.path.join(root, NOTEBOOK_DIR)) if os.
                          path.isdir(os.path.join(root, NOTEBOOK_DIR)) else ())
        if name.endswith('.ipynb'))
    self.lock = self._read_lock()
    self.targets: Dict[Label, Target] = {}
    self.by_file: Dict[str, Target] = {}
    self._make_targets()

  def _read_lock(self) -> Set[str]:
    path = os.path.join(self.root, LOCK_FILE)
    found = set()
    if os.path.exists(path):
      with open(path, encoding='utf-8') as f:
        for line in f:
          match = re.match(r'^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[.*\])?\s*==',
                           line)
          if match:
            found.add(normalize_dist(match.group(1)))
    return found

  # -- targets ---------------------------------------------------------------

  def label_of(self, path: str) -> Label:
    package, name = os.path.split(path)
    if name == '__init__.py':
      return Label(package, os.path.basename(package))
    if name == '__main__.py':
      return Label(package,
                   BINARY_NAMES.get(path,
                                    os.path.basename(package) + '_main'))
    return Label(package, name[:-3])

  def _kind(self, path: str) -> str:
    package, name = os.path.split(path)
    top = package.split('/')[0]
    if top == TEST_ROOT and name.endswith('_test.py'):
      return 'py_test'
    if name == '__main__.py' or (package in SCRIPT_DIRS and
                                 not name.startswith('_')):
      return 'py_binary'
    return 'py_library'

  def _make_targets(self):
    for path in self.py_files:
      label = self.label_of(path)
      notes = TARGET_NOTES.get(path, {})
      target = Target(self._kind(path),
                      label.name,
                      label.package,
                      src=os.path.basename(path),
                      comment=notes.get('comment'),
                      tags=tuple(notes.get('tags', ())))
      if target.kind == 'py_binary' and target.src != f'{target.name}.py':
        target.main = target.src
      if label in self.targets:
        self.problems.append(
            Problem(
                path, 0, f'its target name "{label.name}" is taken by '
                f'{self.targets[label].src}: rename one of them'))
      self.targets[label] = target
      self.by_file[path] = target
    if self.notebooks:
      self.targets[Label(NOTEBOOK_DIR,
                         'notebooks')] = Target('filegroup',
                                                'notebooks',
                                                NOTEBOOK_DIR,
                                                files=tuple(self.notebooks))
    for path, target in self.by_file.items():
      self._fill(path, target)
    self._testonly()
    self._check_graph()

  def _fill(self, path: str, target: Target):
    tree = self.trees.get(path)
    if tree is None:
      return
    imports, problems = module_imports(self.root, path, tree)
    self.problems.extend(problems)
    if path in RUNS_NOTEBOOKS:
      directory = RUNS_NOTEBOOKS[path]
      for name in self.notebooks if directory == NOTEBOOK_DIR else ():
        notebook = os.path.join(directory, name)
        try:
          child = ast.parse(notebook_code(os.path.join(self.root, notebook)))
        except (SyntaxError, ValueError) as e:
          self.problems.append(
              Problem(notebook, 0, f'code cells do not parse: {e}'))
          continue
        imports.extend(_statement_imports(child, '', 0, 'notebook'))
      target.data.add(Label(NOTEBOOK_DIR, 'notebooks'))
    for imp in imports:
      for item in self._resolve(imp, path):
        if isinstance(item, Problem):
          self.problems.append(item)
        elif isinstance(item, Requirement):
          target.deps.add(item)
        else:
          kind, file = item
          label = self.by_file[file].label if file in self.by_file else (
              self.label_of(file))
          if file == path:
            continue
          (target.data if kind == 'data' else target.deps).add(label)
    notes = TARGET_NOTES.get(path, {})
    for text in notes.get('data', ()):
      target.data.add(parse_label(text, target.package))
    if target.kind == 'py_test':
      self._test_attributes(path, tree, target)

  def _test_attributes(self, path, tree, target):
    for line in lost_marks(tree):
      self.problems.append(
          Problem(
              path, line, 'a pytest mark above a @parameterized decorator is '
              'lost (the generated tests do not carry it): mark the class '
              'instead'))
    if path != TEST_CONFTEST and TEST_CONFTEST in self.by_file:
      target.deps.add(self.by_file[TEST_CONFTEST].label)
    slow = is_slow(tree)
    target.size = TEST_SIZES.get(path, 'large' if slow else 'medium')
    if slow:
      target.tags = tuple(sorted(set(target.tags) | {'slow'}))
      if target.size not in SLOW_SIZES:
        self.problems.append(
            Problem(
                path, 0, f'has slow tests but TEST_SIZES gives it size '
                f'"{target.size}": use "large" or "enormous" (Bazel runs the '
                'slow tests too)'))
    if target.size not in ALL_SIZES:
      self.problems.append(
          Problem(path, 0, f'size "{target.size}" is not '
                  f'one of {ALL_SIZES}'))

  def _resolve(self, imp: Import, path: str):
    """Requirement / ('dep'|'data', file) / Problem items for one import."""
    module, top = imp.module, imp.module.split('.')[0]
    directory = os.path.dirname(path)
    if directory in SCRIPT_DIRS and os.path.isfile(
        os.path.join(self.root, directory, top + '.py')):
      return [('dep', os.path.join(directory, top + '.py'))]
    if top in INTERNAL_PACKAGES:
      items = []
      if imp.how == 'child -m':
        main = self.modules.get(module + '.__main__')
        if main:
          items.append(('data', main))
      if not imp.names:
        if module in self.modules:
          items.append(('dep', self.modules[module]))
        else:
          items.append(
              Problem(
                  path, imp.line, f'imports {module}, which has '
                  f'no file ({module.replace(".", "/")}.py)'))
        return items
      for name in imp.names:
        sub = f'{module}.{name}'
        if sub in self.modules:
          items.append(('dep', self.modules[sub]))
        elif module in self.modules:
          tree = self.trees.get(self.modules[module])
          defined = _defined_names(tree) if tree else None
          if defined is not None and name not in defined:
            items.append(
                Problem(
                    path, imp.line, f'imports {sub}: there is no '
                    f'{sub.replace(".", "/")}.py and {self.modules[module]} '
                    f'defines no name {name!r}'))
          items.append(('dep', self.modules[module]))
        else:
          items.append(
              Problem(
                  path, imp.line, f'imports {sub}, but there is no {module} '
                  f'module (no {module.replace(".", "/")}.py or '
                  f'{module.replace(".", "/")}/__init__.py)'))
      return items
    if top in sys.stdlib_module_names or top == '__future__':
      return []
    prefix = module
    while prefix:
      if prefix in THIRD_PARTY:
        dist = THIRD_PARTY[prefix]
        if self.lock and normalize_dist(dist) not in self.lock:
          return [
              Problem(
                  path, imp.line, f'imports {module} from '
                  f'{dist}, which is not pinned in {LOCK_FILE}: add '
                  'it to requirements/requirements.in and re-lock '
                  '(make lock)')
          ]
        return [Requirement(dist)]
      prefix = prefix.rpartition('.')[0]
    return [
        Problem(
            path, imp.line,
            f'imports {module!r} ({imp.how}), which is neither tff_ddp / '
            'tff_ddp_tests, nor the standard library, nor in THIRD_PARTY: add '
            f"'{top}': '<its PyPI distribution>' to THIRD_PARTY in "
            'scripts/build_files.py and pin the distribution in '
            'requirements/requirements.in and requirements/lock.txt')
    ]

  def _testonly(self):
    for target in self.targets.values():
      if target.package.split('/')[0] == TEST_ROOT and (target.kind
                                                        != 'py_test'):
        target.testonly = True
    changed = True
    while changed:  # a target that needs a testonly one is testonly
      changed = False
      for target in self.targets.values():
        if target.kind == 'py_test' or target.testonly:
          continue
        if any(
            isinstance(d, Label) and d in self.targets and
            self.targets[d].testonly for d in target.deps | target.data):
          target.testonly = changed = True

  def _check_graph(self):
    for target in sorted(self.targets.values(), key=lambda t: t.label):
      where = os.path.join(target.package, target.src or BUILD_NAME)
      for dep in sorted(target.deps | target.data, key=str):
        if isinstance(dep, Requirement):
          continue
        if dep not in self.targets and not os.path.isfile(
            os.path.join(self.root, dep.package, dep.name)):
          self.problems.append(
              Problem(
                  where, 0, f'needs {dep}, which is neither a generated target '
                  'nor a file (TARGET_NOTES?)'))
        elif dep.package != target.package and not _visible(
            visibility(dep.package), dep.package, target.package):
          self.problems.append(
              Problem(
                  where, 0,
                  f'needs {dep}, which //{target.package} cannot see: '
                  f'add "//{target.package}:__pkg__" to VISIBILITY['
                  f'{dep.package!r}] in scripts/build_files.py (or do not '
                  'depend on it)'))
    self.problems.extend(self._cycles())

  def _cycles(self) -> List[Problem]:
    graph = {
        label:
            sorted(d
                   for d in t.deps
                   if isinstance(d, Label) and d in self.targets)
        for label, t in self.targets.items()
    }
    problems, state, stack = [], {}, []

    def visit(node):
      state[node] = 1
      stack.append(node)
      for nxt in graph[node]:
        if state.get(nxt) == 1:
          cycle = stack[stack.index(nxt):] + [nxt]
          target = self.targets[node]
          problems.append(
              Problem(
                  os.path.join(target.package, target.src), 0,
                  'dependency cycle (Bazel refuses it; Python tolerates it): ' +
                  ' -> '.join(f'//{c.package}:{c.name}' for c in cycle)))
        elif nxt not in state:
          visit(nxt)
      stack.pop()
      state[node] = 2

    for node in sorted(graph):
      if node not in state:
        visit(node)
    return problems


def visibility(package: str) -> Tuple:
  while package not in VISIBILITY:
    package = os.path.dirname(package)
  return VISIBILITY[package]


def _visible(entries, package: str, from_package: str) -> bool:
  for entry in entries:
    entry = entry[0] if isinstance(entry, tuple) else entry
    if entry == PUBLIC:
      return True
    label = parse_label(entry, package)
    if label.name == '__pkg__' and label.package == from_package:
      return True
    if label.name == '__subpackages__' and (
        not label.package or from_package == label.package or
        from_package.startswith(label.package + '/')):
      return True
  return False


# ----------------------------------------------------------------------------
# Rendering.


def _comment(text: Optional[str], indent: str = '') -> List[str]:
  return [f'{indent}# {line}'.rstrip() for line in text.splitlines()
         ] if (text) else []


def _string_list(attr: str, items: Sequence[str], always_block=False):
  quoted = [
      item if item.startswith('requirement(') else f'"{item}"' for item in items
  ]
  if len(quoted) == 1 and not always_block:
    return [f'    {attr} = [{quoted[0]}],']
  return [f'    {attr} = ['] + [f'        {q},' for q in quoted] + ['    ],']


def _render_target(target: Target) -> List[str]:
  lines = _comment(target.comment)
  lines.append(f'{target.kind}(')
  lines.append(f'    name = "{target.name}",')
  if target.size:
    lines.append(f'    size = "{target.size}",')
  lines += _string_list('srcs', list(target.files) or [target.src])
  if target.main:
    lines.append(f'    main = "{target.main}",')
  if target.data:
    lines += _string_list('data', [
        d.render(target.package)
        for d in sorted(target.data, key=_dep_order(target.package))
    ])
  if target.tags:
    lines += _string_list('tags', sorted(target.tags))
  if target.testonly:
    lines.append('    testonly = True,')
  # Bazel's native py rules: third-party packages come from the
  # interpreter's site-packages (//bazel:python3), so only tff_ddp's own
  # targets are deps; the generator still checks they are pinned.
  deps = [d for d in target.deps if isinstance(d, Label)]
  if deps:
    lines += _string_list('deps', [
        d.render(target.package)
        for d in sorted(deps, key=_dep_order(target.package))
    ],
                          always_block=True)
  lines.append(')')
  return lines


def _target_order(target: Target):
  # The package's own __init__ first, then by file name.
  return (target.src != '__init__.py', target.src or target.name)


def _render_package(package: str,
                    targets: List[Target],
                    exports: Sequence[str],
                    aliases=()) -> str:
  lines = [GENERATED, '']
  if any(target.kind == 'py_test' for target in targets):
    lines += [TEST_RULE, '']
  lines += _comment(PACKAGE_NOTES.get(package))
  entries = visibility(package)
  if len(entries) == 1 and not isinstance(entries[0], tuple):
    lines.append(f'package(default_visibility = ["{entries[0]}"])')
  else:
    lines.append('package(default_visibility = [')
    for entry in entries:
      text, note = entry if isinstance(entry, tuple) else (entry, None)
      lines.append(f'    "{text}",' + (f'  # {note}' if note else ''))
    lines.append('])')
  lines += ['', 'licenses(["notice"])']
  if exports:
    lines += ['', 'exports_files([']
    lines += [f'    "{name}",' for name in sorted(exports)]
    lines.append('])')
  for name, label in aliases:
    lines += [
        '', 'alias(', f'    name = "{name}",',
        f'    actual = "{label.render(package)}",', ')'
    ]
  for target in sorted(targets, key=_target_order):
    lines.append('')
    lines += _render_target(target)
  return '\n'.join(lines) + '\n'


def generate(
    root: str,
    tree: Optional['Tree'] = None) -> Tuple[Dict[str, str], List[Problem]]:
  """{BUILD path: text} for the whole repository, and its problems."""
  tree = tree or Tree(root)
  problems = list(tree.problems)
  packages: Dict[str, List[Target]] = {}
  for target in tree.targets.values():
    packages.setdefault(target.package, []).append(target)
  # Files that targets of other packages name as data are exported.
  exports: Dict[str, Set[str]] = {}
  for target in tree.targets.values():
    for label in target.data:
      if label not in tree.targets and label.package != target.package:
        exports.setdefault(label.package, set()).add(label.name)
  exports.setdefault('', set()).update(ROOT_EXPORTS)
  if any(t.kind == 'py_test' for t in tree.targets.values()):
    if TEST_MAIN in tree.by_file:
      package, name = os.path.split(TEST_MAIN)
      exports.setdefault(package, set()).add(name)
    else:
      problems.append(
          Problem(TEST_MAIN, 0, 'is missing: every py_test '
                  'runs it (//bazel:pytest.bzl)'))
  requirements = os.path.join(root, REQUIREMENTS_DIR)
  if os.path.isdir(requirements):
    exports.setdefault(REQUIREMENTS_DIR, set()).update(
        n for n in os.listdir(requirements)
        if n != BUILD_NAME and os.path.isfile(os.path.join(requirements, n)))
  for package, names in exports.items():
    for name in names:
      if not os.path.isfile(os.path.join(root, package, name)):
        problems.append(
            Problem(os.path.join(package, BUILD_NAME), 0,
                    f'exports {name}, which does not exist'))
  aliases = []
  for name, path in sorted(ROOT_ALIASES.items()):
    if path in tree.by_file:
      aliases.append((name, tree.by_file[path].label))
    else:
      problems.append(
          Problem(BUILD_NAME, 0, f'alias "{name}" points at '
                  f'{path}, which is not a module'))
  files = {}
  for package in sorted(set(packages) | set(exports)):
    path = os.path.join(package, BUILD_NAME) if package else BUILD_NAME
    files[path] = _render_package(package, packages.get(package, []),
                                  sorted(exports.get(package, ())),
                                  aliases if package == '' else ())
  for path, text in files.items():
    problems.extend(check_starlark(path, text))
  return files, sorted(set(problems))


def check_starlark(path: str, text: str) -> List[Problem]:
  """A BUILD file parses as Python and holds only calls at the top level."""
  try:
    tree = ast.parse(text, filename=path)
  except SyntaxError as e:
    return [
        Problem(path, e.lineno or 0, f'generated text does not parse: '
                f'{e.msg}')
    ]
  return [
      Problem(path, stmt.lineno, 'generated a statement that is not a '
              'rule call')
      for stmt in tree.body
      if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call))
  ]


def committed(root: str) -> Dict[str, str]:
  """{path: text} of the BUILD files in the tree (outside .venv etc.).

  bazel/ is hand-kept (HAND_KEPT): the Python toolchain and the offline
  stand-ins for the repositories Bazel 4 would download.
  """
  found = {}
  for dirpath, filenames in _walk(root, '.'):
    if dirpath.split('/')[0] in ('.venv', 'venv', 'node_modules', 'build',
                                 HAND_KEPT):
      continue
    for name in filenames:
      if name in (BUILD_NAME, BUILD_NAME + '.bazel'):
        path = os.path.normpath(os.path.join(dirpath, name))
        with open(os.path.join(root, path), encoding='utf-8') as f:
          found[path] = f.read()
  return found


def differences(root: str, files: Dict[str, str]) -> List[str]:
  """A unified diff per BUILD file that differs from `files`."""
  have = committed(root)
  diffs = []
  for path in sorted(set(have) | set(files)):
    old, new = have.get(path), files.get(path)
    if old == new:
      continue
    if new is None:
      diffs.append(f'{path}: not generated (no module in its directory, or '
                   'a BUILD.bazel): delete it\n')
      continue
    diffs.append(''.join(
        difflib.unified_diff((old or '').splitlines(keepends=True),
                             new.splitlines(keepends=True), f'a/{path}',
                             f'b/{path}')))
  return diffs


def write(root: str, files: Dict[str, str]) -> List[str]:
  """Writes `files`, deletes stale BUILD files; the paths it changed."""
  changed = []
  have = committed(root)
  for path, text in files.items():
    if have.get(path) != text:
      with open(os.path.join(root, path), 'w', encoding='utf-8') as f:
        f.write(text)
      changed.append(path)
  for path in sorted(set(have) - set(files)):
    os.remove(os.path.join(root, path))
    changed.append(path)
  return changed


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='scripts/build_files.py',
                                   description=__doc__.split('\n\n', 1)[0])
  parser.add_argument('--root',
                      default=os.path.dirname(
                          os.path.dirname(os.path.realpath(__file__))),
                      help='repository (default: %(default)s)')
  parser.add_argument('--check',
                      action='store_true',
                      help='write nothing; exit 1 if a BUILD file differs')
  args = parser.parse_args(argv)
  files, problems = generate(args.root)
  if problems:
    for problem in problems:
      print(problem)
    print(f'\n{len(problems)} problem(s); no BUILD file written.')
    return 1
  if args.check:
    diffs = differences(args.root, files)
    if diffs:
      print(''.join(diffs))
      print(f'{len(diffs)} BUILD file(s) differ from what the tree '
            'generates: run `make build-files` and commit them.')
      return 1
    print(f'{len(files)} BUILD files, all as generated.')
    return 0
  changed = write(args.root, files)
  for path in changed:
    print(f'wrote {path}' if path in files else f'deleted {path}')
  print(f'{len(files)} BUILD files, {len(changed)} changed.')
  return 0


if __name__ == '__main__':
  sys.exit(main())
