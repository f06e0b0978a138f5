"""Writes every Bazel BUILD file of the repository from its source tree.

    python scripts/build_files.py            # `make build-files`: write them
    python scripts/build_files.py --check    # exit 1 and print a diff if a
                                             # committed BUILD file differs

The output depends only on the source tree and the tables below, in a fixed
order; tff_ddp_tests/build_test.py holds the committed files to it. Bazel's
native py rules (docs/notes/bazel.md) in TFF's layout: a package per
directory of .py files under SOURCE_ROOTS, plus the root, requirements/ and
colabs/; a target per module, named after it: a py_test for `*_test.py`
under TEST_ROOT, a py_binary for `__main__.py` and the scripts of
SCRIPT_DIRS not named `_*`, else a py_library (testonly under TEST_ROOT and
wherever it depends on a testonly one). Its deps are the tff_ddp /
tff_ddp_tests modules (or sibling scripts) it imports at any depth. A
third-party import is no dep (//bazel:python3 runs .venv) but must map
through THIRD_PARTY to a distribution pinned in LOCK_FILE. Imports no
statement shows are read too: importlib.import_module() of a literal, or of
a name its function tests against a module-level tuple of strings (`if name
in _TABLE:`); `[sys.executable, '-c', CODE]` (CODE's imports) and
`[sys.executable, '-m', MODULE]` (its `__main__` binary as data); the
notebooks' code cells for NOTEBOOK_TEST. A py_test is "medium", or "large"
with tags ["slow"] when it uses pytest.mark.slow (or the fuzz suite's
test_classes), unless TEST_SIZES says. A problem (an import of nothing, an
unpinned distribution, a cycle, a dep its package cannot see, ...) is
printed with what to do, and nothing is written.
"""

import argparse
import ast
import dataclasses
import difflib
import graphlib
import itertools
import json
import os
import re
import sys
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

SOURCE_ROOTS = ('tff_ddp', 'tff_ddp_tests', 'benchmarks', 'scripts')
INTERNAL_PACKAGES = ('tff_ddp', 'tff_ddp_tests')
# Scripts run as `python DIR/x.py`: siblings import each other by name.
SCRIPT_DIRS = ('benchmarks', 'scripts')
# The tooling's tests: pytest runs them (`make test-tooling`), Bazel does not.
NOT_BUILT = ('scripts/tests',)
# Hand-kept Bazel files (toolchain, offline stand-ins) and environments.
NOT_GENERATED = ('bazel', 'venv', 'node_modules', 'build')
TEST_ROOT = 'tff_ddp_tests'
TEST_MAIN = 'tff_ddp_tests/pytest_main.py'
TEST_CONFTEST = 'tff_ddp_tests/conftest.py'
TEST_RULE = 'load("//bazel:pytest.bzl", "py_test")'
NOTEBOOK_DIR = 'colabs'
NOTEBOOK_TEST = 'tff_ddp_tests/colabs_test.py'
REQUIREMENTS_DIR = 'requirements'
LOCK_FILE = 'requirements/lock.txt'
BUILD_CALLS = ('load', 'package', 'licenses', 'exports_files', 'alias',
               'filegroup', 'py_library', 'py_binary', 'py_test')

# Import name (or dotted prefix; the longest wins) -> PyPI distribution.
THIRD_PARTY = {
    'absl': 'absl-py',
    'attr': 'attrs',
    'google.protobuf': 'protobuf',
    'grpc': 'grpcio',
    'PIL': 'pillow',
    'sklearn': 'scikit-learn',
    'tree': 'dm-tree',
}
THIRD_PARTY.update(
    (name, name.replace('_', '-'))
    for name in ('dp_accounting', 'hypothesis', 'ipykernel', 'jax',
                 'jupyter_client', 'matplotlib', 'mpmath', 'nbclient',
                 'nbformat', 'numpy', 'portpicker', 'pytest', 'scipy',
                 'tensorflow', 'tensorflow_federated',
                 'tensorflow_model_optimization', 'tensorflow_privacy',
                 'tensorflow_probability', 'tqdm'))
BINARY_NAMES = {'tff_ddp/cli/__main__.py': 'tff-ddp'}  # else <package>_main
TEST_SIZES = {
    'tff_ddp_tests/colabs_test.py': 'enormous',
    'tff_ddp_tests/utils/checks_test.py': 'small',
}
SLOW_SIZES = ('large', 'enormous')

PUBLIC = '//visibility:public'
_SUBPACKAGES = '//tff_ddp_tests:__subpackages__'
# Package -> default_visibility (`  # ` starts an entry's comment); a package
# not listed takes its nearest listed parent's.
VISIBILITY = {
    '': (PUBLIC,),
    'benchmarks':
        ('//visibility:private  # Scripts: no other package depends on them.',),
    'tff_ddp_tests': (_SUBPACKAGES,),
}
ROOT_EXPORTS = ('README.md', 'pytest.ini', 'setup.py')
ROOT_ALIASES = {'tff-ddp': 'tff_ddp/cli/__main__.py'}

# What no import shows: files a module runs or reads (DATA), tests that read
# the checkout through its real path (UNSANDBOXED: tags = ["local"]).
DATA = {
    'tff_ddp_tests/build_test.py': ('scripts', 'build_files.py'),
    'tff_ddp_tests/accounting/cross_version_test.py':
        ('tff_ddp_tests/accounting', 'cross_version_epsilons.json'),
    'tff_ddp_tests/colabs_test.py': ('scripts', 'run_colabs.py'),
    'tff_ddp_tests/docs_test.py': ('', 'README.md'),
}
UNSANDBOXED = ('tff_ddp_tests/build_test.py', 'tff_ddp_tests/docs_test.py')

# The comment above a package() (key: its BUILD file) or above a target (key:
# its module), each under its `== key` line.
_COMMENTS = re.split(r'^== (.+)\n',
                     '''\
== BUILD
Root package of tff_ddp. The library is //tff_ddp (its subpackages load
lazily, as TFF's do); the tests are under //tff_ddp_tests.
== benchmarks/BUILD
`bazel run //benchmarks:<name>` runs what `make bench` runs with
`python benchmarks/<name>.py`; siblings import `_common` by its bare name
(the script's own directory is first on sys.path in both cases).
== colabs/BUILD
The tutorials; tff_ddp_tests:colabs_test runs each one's code cells.
== requirements/BUILD
The pinned Python dependencies. Bazel's py rules take them from the
interpreter (//bazel:python3 runs .venv, which `make setup` installs from
lock.txt); the BUILD files name only tff_ddp's own targets as deps.
== tff_ddp_tests/BUILD
Tests mirror tff_ddp/: one py_test per test module, run under
pytest (//bazel:pytest.bzl, pytest_main.py: every test, slow ones too).
Sizes (Bazel's timeouts 300 s / 900 s / 3600 s): "medium" by default,
"large" with tags = ["slow"] for a module with @pytest.mark.slow tests,
"enormous" for colabs_test. `bazel test --test_tag_filters=-slow //...` is
`make test-fast`.
== tff_ddp/__init__.py
__init__.py imports nothing at load time: it loads the names of its
_SUBPACKAGES table on first attribute access (importlib.import_module), so
`import tff_ddp` is fast and `tff_ddp.aggregators...` works. Those are its
deps (scripts/build_files.py reads the table).
== tff_ddp/cli/__main__.py
The `tff-ddp` command (setup.py's console script tff_ddp.cli:console_main;
`python -m tff_ddp.cli` runs the same file). //:tff-ddp is an alias.
== tff_ddp_tests/build_test.py
Generates every BUILD file in memory (scripts/build_files.py, loaded by path
through :script_module) and reads the source tree through the real path of
the checkout, so it runs unsandboxed ("local").
== tff_ddp_tests/accounting/cross_version_test.py
Holds the epsilons to the reference it reads beside it (made on
dp-accounting 0.4.3; `--write` rewrites it).
== tff_ddp_tests/cli_test.py
Runs `python -m tff_ddp.cli` (the binary is its data).
== tff_ddp_tests/colabs_test.py
Runs each notebook's code cells in a kernel (up to 600 s each) through
scripts/run_colabs.py: their imports are its deps.
== tff_ddp_tests/docs_test.py
Runs the code blocks of README.md and docs/*.md (read through the checkout's
real path, with `make demo` and the tff-ddp command among them), so it runs
unsandboxed ("local").
== scripts/build_files.py
Writes every BUILD file from the imports: `make build-files`.
== scripts/design_metrics.py
Prints the design metrics of issue 33 (benchmarks/RESULTS.md records them).
== scripts/flake_hunt.py
Runs test modules many times, each in a fresh pytest process, and lists
every test that failed even once: `python scripts/flake_hunt.py --repeat
20 [--run-slow] PATH ...`. It starts `python -m pytest` as a subprocess.
== scripts/run_colabs.py
Executes the notebooks in colabs/: `python scripts/run_colabs.py --check`
(or --write to save their outputs).
== scripts/suite_profile.py
CPU and wall seconds per test module, each run in its own pytest process
(`python scripts/suite_profile.py measure`), and the tables of
benchmarks/RESULTS.md; writes tff_ddp_tests/module_costs.json.
''',
                     flags=re.M)
COMMENTS = dict(zip(_COMMENTS[1::2], _COMMENTS[2::2]))

GENERATED = (
    '# Generated by scripts/build_files.py (`make build-files`) from the '
    'source tree;\n# do not edit: change the imports, or that '
    "script's tables.")


class Label(NamedTuple):
  """A target or a file: package directory ('' for the root), name."""
  package: str
  name: str

  def render(self, here=None) -> str:
    if self.package == here:
      return ':' + self.name
    if self.package and self.name == os.path.basename(self.package):
      return '//' + self.package
    return f'//{self.package}:{self.name}'


NOTEBOOKS = Label(NOTEBOOK_DIR, 'notebooks')


@dataclasses.dataclass
class Target:
  kind: str
  label: Label
  src: str = ''  # the module's file name ('' for a filegroup)
  files: Tuple[str, ...] = ()  # a filegroup's srcs
  deps: Set[Label] = dataclasses.field(default_factory=set)
  data: Set[Label] = dataclasses.field(default_factory=set)
  dists: Set[str] = dataclasses.field(default_factory=set)  # third-party
  tags: Set[str] = dataclasses.field(default_factory=set)
  size: str = ''
  testonly: bool = False


class Import(NamedTuple):
  line: int
  module: str  # absolute dotted name
  names: Tuple[str, ...] = ()  # `from module import names`
  how: str = 'import'  # or 'dynamic', 'child', 'child -m', 'notebook'


def _read(*path: str) -> str:
  with open(os.path.join(*path), encoding='utf-8') as f:
    return f.read()


def normalize_dist(name: str) -> str:
  """PEP 503 normalisation, as pip compares distribution names."""
  return re.sub(r'[-_.]+', '-', name).lower()


# ----------------------------------------------------------------------------
# Reading a module (never importing it).


def _dotted(node) -> str:
  """'a.b.c' for a chain of attributes on a name, else ''."""
  if isinstance(node, ast.Attribute):
    base = _dotted(node.value)
    return base and f'{base}.{node.attr}'
  return node.id if isinstance(node, ast.Name) else ''


def _constants(tree):
  """Module-level names bound to a literal (a string, a tuple of strings)."""
  found = {}
  for stmt in tree.body:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
        isinstance(stmt.targets[0], ast.Name)):
      try:
        found[stmt.targets[0].id] = ast.literal_eval(stmt.value)
      except (ValueError, TypeError, SyntaxError):
        pass
  return found


def _dynamic_import(call, function, tables) -> Optional[List[str]]:
  """The modules importlib.import_module(...) can load; None if unknown."""
  if len(call.args) != 1 or call.keywords:
    return None
  arg, prefix, suffix = call.args[0], '', ''
  if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
    return [arg.value]
  if isinstance(arg, ast.JoinedStr):  # f'prefix{name}suffix'
    holes = [v for v in arg.values if isinstance(v, ast.FormattedValue)]
    if len(holes) != 1 or holes[0].conversion != -1 or holes[0].format_spec:
      return None
    i = arg.values.index(holes[0])
    prefix = ''.join(v.value for v in arg.values[:i])
    suffix = ''.join(v.value for v in arg.values[i + 1:])
    arg = holes[0].value
  if not isinstance(arg, ast.Name) or function is None:
    return None
  for node in ast.walk(function):
    if (isinstance(node, ast.Compare) and _dotted(node.left) == arg.id and
        len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))):
      table = tables.get(_dotted(node.comparators[0]))
      if (isinstance(table, (tuple, list)) and table and
          all(isinstance(e, str) for e in table)):
        return [prefix + e + suffix for e in table]
  return None


def _statement_imports(tree, package: str, line=None, how='import'):
  """The Imports of the import statements of `tree`, at any depth."""
  found = []
  for node in ast.walk(tree):
    at = getattr(node, 'lineno', 0) if line is None else line
    if isinstance(node, ast.Import):
      found += [Import(at, alias.name, (), how) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      module = node.module
      if node.level:  # relative to `package`
        parts = package.split('.') if package else []
        parts = parts[:len(parts) - node.level + 1]
        module = '.'.join(parts + ([node.module] if node.module else []))
      found.append(Import(at, module, tuple(a.name for a in node.names), how))
  return found


def module_imports(tree, path: str) -> Tuple[List[Import], List[str]]:
  """Every import of the module at `path`, and the problems found."""
  imports = _statement_imports(tree, os.path.dirname(path).replace('/', '.'))
  problems, constants, nodes = [], _constants(tree), list(ast.walk(tree))
  dynamic = [
      n for n in nodes if isinstance(n, ast.Call) and
      _dotted(n.func) == 'importlib.import_module'
  ]
  # The innermost function around a node (ast.walk goes outside in).
  function = {
      n: f for f in nodes
      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
      for n in ast.walk(f)
  } if dynamic else {}
  for node in nodes:
    if node in dynamic:
      modules = _dynamic_import(node, function.get(node), constants)
      imports += [Import(node.lineno, m, (), 'dynamic') for m in modules or ()]
      if modules is None:
        problems.append(
            f'{path}:{node.lineno}: importlib.import_module() with a name that '
            'cannot be read: use a literal, or test the name against a '
            'module-level tuple of module names (`if name in _TABLE:`) in '
            'the same function')
    elif isinstance(node, (ast.List, ast.Tuple)):
      for i in range(len(node.elts) - 2):  # [sys.executable, flag, arg, ...]
        flag, arg = node.elts[i + 1], node.elts[i + 2]
        if _dotted(node.elts[i]) != 'sys.executable' or not isinstance(
            flag, ast.Constant) or flag.value not in ('-c', '-m'):
          continue
        where = f'{path}:{node.lineno}:'
        text = constants.get(arg.id) if isinstance(arg, ast.Name) else getattr(
            arg, 'value', None)
        if not isinstance(text, str):
          problems.append(f'{where} `{flag.value}` with an argument that '
                          'cannot be read: use a string constant (or a '
                          'module-level name bound to one)')
        elif flag.value == '-m':
          imports.append(Import(node.lineno, text, (), 'child -m'))
        else:
          try:
            imports += _statement_imports(ast.parse(text), '', node.lineno,
                                          'child')
          except SyntaxError as e:
            problems.append(f'{where} the code for `-c` does not parse: {e}')
  return imports, problems


def notebook_code(path: str) -> str:
  """The code cells of a notebook, IPython magics and shell lines blanked."""
  lines, cells = [], json.loads(_read(path)).get('cells', [])
  for cell in (c for c in cells if c.get('cell_type') == 'code'):
    source = cell.get('source', '')
    for text in (''.join(source)
                 if isinstance(source, list) else source).splitlines():
      lines.append('' if text.lstrip().startswith(('%', '!')) else text)
    lines.append('')
  return '\n'.join(lines)


def is_slow(tree) -> bool:
  """Whether a test module marks anything @pytest.mark.slow."""
  # tff_ddp_tests.fuzz.strategies.test_classes returns a slow-marked class.
  return any(
      _dotted(node) == 'pytest.mark.slow' or isinstance(node, ast.Call) and
      isinstance(node.func, ast.Attribute) and node.func.attr == 'test_classes'
      for node in ast.walk(tree))


def lost_marks(tree) -> List[int]:
  """Lines of pytest marks above a @parameterized decorator: the generated
  methods do not carry them, so the mark is silently lost."""
  lines = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      names = [ast.unparse(d) for d in node.decorator_list]
      lines += [
          node.decorator_list[i].lineno
          for i, text in enumerate(names)
          if text.startswith('pytest.mark.') and any(
              later.startswith('parameterized.') for later in names[i + 1:])
      ]
  return lines


def _defined_names(tree) -> Optional[Set[str]]:
  """Top-level names a module defines; None if it may define any."""
  defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
  names = set()
  for node in itertools.chain.from_iterable(
      [stmt] if isinstance(stmt, defs) else ast.walk(stmt)
      for stmt in tree.body):
    if isinstance(node, defs):
      names.add(node.name)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.add(node.id)
    elif isinstance(node, ast.alias):
      names.add(node.asname or node.name.split('.')[0])
  # A module __getattr__ (lazy names) or a star import defines any name.
  return None if {'__getattr__', '*'} & names else names


# ----------------------------------------------------------------------------
# The targets of a tree.


def _walk(root, top):
  for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
    relative = os.path.relpath(dirpath, root)
    dirnames[:] = sorted(
        d for d in dirnames
        if not d.startswith(('.', '__pycache__', 'bazel-')) and
        os.path.normpath(os.path.join(relative, d)) not in NOT_BUILT)
    yield relative, sorted(filenames)


def visibility(package: str) -> Tuple[str, ...]:
  while package not in VISIBILITY:
    package = os.path.dirname(package)
  return VISIBILITY[package]


def _visible(package: str, from_package: str) -> bool:
  for entry in visibility(package):
    pkg, _, name = entry.split('  # ')[0][2:].partition(':')
    if entry == PUBLIC or (name == '__pkg__' and pkg == from_package) or (
        name == '__subpackages__' and
        (not pkg or (from_package + '/').startswith(pkg + '/'))):
      return True
  return False


class Tree:
  """The modules of `root` and the targets generated for them."""

  def __init__(self, root: str):
    self.root, self.problems = root, []
    self.trees: Dict[str, Optional[ast.Module]] = {}  # None: does not parse
    self.modules: Dict[str, str] = {}  # dotted name -> file
    for top in SOURCE_ROOTS:
      for directory, filenames in _walk(root, top):
        for name in (n for n in filenames if n.endswith('.py')):
          path = os.path.join(directory, name)
          try:
            self.trees[path] = ast.parse(_read(root, path), filename=path)
          except SyntaxError as e:
            self.trees[path] = None
            self.problems.append(
                f'{path}:{e.lineno or 0}: does not parse: {e.msg}')
          if top in INTERNAL_PACKAGES:
            dotted = directory.replace('/', '.')
            if name != '__init__.py':
              dotted += '.' + name[:-3]
            self.modules[dotted] = path
    notebooks = os.path.join(root, NOTEBOOK_DIR)
    found = os.listdir(notebooks) if os.path.isdir(notebooks) else []
    self.notebooks = sorted(n for n in found if n.endswith('.ipynb'))
    lock = os.path.join(root, LOCK_FILE)
    pin = r'^([A-Za-z0-9][A-Za-z0-9._-]*)[ \t]*(?:\[.*\])?[ \t]*=='
    text = _read(lock) if os.path.exists(lock) else ''
    self.lock = {normalize_dist(n) for n in re.findall(pin, text, re.M)}
    self.targets: Dict[Label, Target] = {}
    self.by_file: Dict[str, Target] = {}  # module -> its target
    for path in self.trees:
      target = Target(self._kind(path), self.label_of(path),
                      os.path.basename(path))
      if target.label in self.targets:
        self.problems.append(
            f'{path}:0: its target name "{target.label.name}" is taken by '
            f'{self.targets[target.label].src}: rename one of them')
      self.targets[target.label] = self.by_file[path] = target
    if self.notebooks:
      self.targets[NOTEBOOKS] = Target('filegroup', NOTEBOOKS, '',
                                       tuple(self.notebooks))
    for path, target in self.by_file.items():
      if self.trees[path]:
        self._fill(path, target)
    self._spread_testonly()
    self._check_graph()

  def label_of(self, path: str) -> Label:
    package, name = os.path.split(path)
    if name == '__init__.py':
      return Label(package, os.path.basename(package))
    if name == '__main__.py':
      return Label(package,
                   BINARY_NAMES.get(path,
                                    os.path.basename(package) + '_main'))
    return Label(package, name[:-3])

  @staticmethod
  def _kind(path: str) -> str:
    package, name = os.path.split(path)
    if package.split('/')[0] == TEST_ROOT and name.endswith('_test.py'):
      return 'py_test'
    if name == '__main__.py' or (package in SCRIPT_DIRS and
                                 not name.startswith('_')):
      return 'py_binary'
    return 'py_library'

  def _fill(self, path: str, target: Target):
    tree = self.trees[path]
    imports, problems = module_imports(tree, path)
    self.problems += problems
    if path == NOTEBOOK_TEST:
      for name in self.notebooks:
        notebook = os.path.join(NOTEBOOK_DIR, name)
        try:
          code = ast.parse(notebook_code(os.path.join(self.root, notebook)))
          imports += _statement_imports(code, '', 0, 'notebook')
        except (SyntaxError, ValueError) as e:
          self.problems.append(f'{notebook}:0: code cells do not parse: {e}')
      target.data.add(NOTEBOOKS)
    for imp in imports:
      self._resolve(imp, path, target)
    target.data.update([Label(*DATA[path])] if path in DATA else [])
    target.tags.update(['local'] if path in UNSANDBOXED else [])
    if target.kind != 'py_test':
      return
    self.problems += [
        f'{path}:{line}: a pytest mark above a @parameterized decorator is '
        'lost (the generated tests do not carry it): mark the class instead'
        for line in lost_marks(tree)
    ]
    if TEST_CONFTEST in self.by_file:
      target.deps.add(self.by_file[TEST_CONFTEST].label)
    slow = is_slow(tree)
    target.size = TEST_SIZES.get(path, 'large' if slow else 'medium')
    target.tags.update(['slow'] if slow else [])
    if slow and target.size not in SLOW_SIZES:
      self.problems.append(
          f'{path}:0: has slow tests but TEST_SIZES gives it size '
          f'"{target.size}": use "large" or "enormous" (Bazel runs the slow '
          'tests too)')

  def _resolve(self, imp: Import, path: str, target: Target):
    """Adds what one import needs to `target`, or a problem."""
    module, top = imp.module, imp.module.split('.')[0]
    where, file = f'{path}:{imp.line}: imports', module.replace('.', '/')

    def need(needed, into=target.deps):
      if needed != path:
        into.add(self.by_file[needed].label)

    sibling = os.path.join(os.path.dirname(path), top + '.py')
    if os.path.dirname(path) in SCRIPT_DIRS and sibling in self.by_file:
      need(sibling)
    elif top in INTERNAL_PACKAGES:
      if imp.how == 'child -m' and module + '.__main__' in self.modules:
        need(self.modules[module + '.__main__'], target.data)
      for name in imp.names or [None]:
        if name and f'{module}.{name}' in self.modules:
          need(self.modules[f'{module}.{name}'])
        elif module not in self.modules:
          self.problems.append(
              f'{where} {module}.{name}, but there is no {module} module (no '
              f'{file}.py or {file}/__init__.py)'
              if name else f'{where} {module}, which has no file ({file}.py)')
        else:
          tree = self.trees[self.modules[module]]
          defined = _defined_names(tree) if name and tree else None
          if defined is not None and name not in defined:
            self.problems.append(
                f'{where} {module}.{name}: there is no {file}/{name}.py and '
                f'{self.modules[module]} defines no name {name!r}')
          need(self.modules[module])
    elif top not in sys.stdlib_module_names and top != '__future__':
      prefix = module
      while prefix and prefix not in THIRD_PARTY:
        prefix = prefix.rpartition('.')[0]
      dist = THIRD_PARTY.get(prefix)
      if dist is None:
        self.problems.append(
            f'{where} {module!r} ({imp.how}), which is neither tff_ddp / '
            'tff_ddp_tests, nor the standard library, nor in THIRD_PARTY: add '
            f"'{top}': '<its PyPI distribution>' to THIRD_PARTY in "
            'scripts/build_files.py and pin the distribution in '
            'requirements/requirements.in and requirements/lock.txt')
      elif self.lock and normalize_dist(dist) not in self.lock:
        self.problems.append(
            f'{where} {module} from {dist}, which is not pinned in '
            f'{LOCK_FILE}: add it to requirements/requirements.in and '
            're-lock (make lock)')
      else:
        target.dists.add(dist)

  def _spread_testonly(self):
    for target in self.targets.values():
      target.testonly = target.kind != 'py_test' and (
          target.label.package.split('/')[0] == TEST_ROOT)
    changed = True
    while changed:  # a target that needs a testonly one is testonly
      changed = False
      for target in self.targets.values():
        if target.kind != 'py_test' and not target.testonly and any(
            self.targets[d].testonly
            for d in target.deps | target.data
            if d in self.targets):
          target.testonly = changed = True

  def _check_graph(self):
    for target in sorted(self.targets.values(), key=lambda t: t.label):
      here = target.label.package
      where = os.path.join(here, target.src or 'BUILD') + ':0:'
      for dep in sorted(target.deps | target.data):
        if dep not in self.targets and not os.path.isfile(
            os.path.join(self.root, *dep)):
          self.problems.append(
              f'{where} needs {dep.render()}, which is neither a generated '
              'target nor a file (DATA?)')
        elif dep.package != here and not _visible(dep.package, here):
          self.problems.append(
              f'{where} needs {dep.render()}, which //{here} cannot see: '
              f'add "//{here}:__pkg__" to VISIBILITY[{dep.package!r}] in '
              'scripts/build_files.py (or do not depend on it)')
    try:
      graphlib.TopologicalSorter({
          label: sorted(self.targets[label].deps & set(self.targets))
          for label in sorted(self.targets)
      }).prepare()
    except graphlib.CycleError as e:
      cycle = e.args[1][::-1]  # in the direction of the deps
      self.problems.append(
          f'{os.path.join(cycle[-2].package, self.targets[cycle[-2]].src)}:0: '
          'dependency cycle (Bazel refuses it; Python tolerates it): ' +
          ' -> '.join(f'//{c.package}:{c.name}' for c in cycle))


# ----------------------------------------------------------------------------
# The BUILD files.


def _comment(key: str) -> List[str]:
  return [f'# {line}'.rstrip() for line in COMMENTS.get(key, '').splitlines()]


def _list(attr: str, items, block=False) -> List[str]:
  if len(items) == 1 and not block:
    return [f'    {attr} = ["{items[0]}"],']
  return [f'    {attr} = ['] + [f'        "{i}",' for i in items] + ['    ],']


def _render_target(target: Target) -> List[str]:
  here, name = target.label

  def labels(found):
    return [
        d.render(here)
        for d in sorted(found, key=lambda d: (d.package != here, d))
    ]

  lines = _comment(os.path.join(here, target.src)) if target.src else []
  lines += [f'{target.kind}(', f'    name = "{name}",']
  lines += [f'    size = "{target.size}",'] if target.size else []
  lines += _list('srcs', target.files or [target.src])
  if target.kind == 'py_binary' and target.src != name + '.py':
    lines.append(f'    main = "{target.src}",')
  lines += _list('data', labels(target.data)) if target.data else []
  lines += _list('tags', sorted(target.tags)) if target.tags else []
  lines += ['    testonly = True,'] if target.testonly else []
  lines += _list('deps', labels(target.deps), True) if target.deps else []
  return lines + [')']


def _render_package(package, targets, exports, aliases) -> str:
  lines = [GENERATED, '']
  if any(target.kind == 'py_test' for target in targets):
    lines += [TEST_RULE, '']
  lines += _comment(os.path.join(package, 'BUILD'))
  entries = visibility(package)
  if len(entries) == 1 and '  # ' not in entries[0]:
    lines.append(f'package(default_visibility = ["{entries[0]}"])')
  else:
    lines.append('package(default_visibility = [')
    for entry in entries:
      text, _, note = entry.partition('  # ')
      lines.append(f'    "{text}",' + (f'  # {note}' if note else ''))
    lines.append('])')
  lines += ['', 'licenses(["notice"])']
  if exports:
    lines += ['', 'exports_files(['] + [f'    "{n}",' for n in exports] + ['])']
  for name, label in aliases:
    lines += [
        '', 'alias(', f'    name = "{name}",',
        f'    actual = "{label.render(package)}",', ')'
    ]
  # The package's own __init__ first, then by file name.
  for target in sorted(targets,
                       key=lambda t:
                       (t.src != '__init__.py', t.src or t.label.name)):
    lines += [''] + _render_target(target)
  return '\n'.join(lines) + '\n'


def generate(root: str, tree=None) -> Tuple[Dict[str, str], List[str]]:
  """{BUILD path: text} for the whole repository, and its problems."""
  tree = tree or Tree(root)
  problems = list(tree.problems)
  packages: Dict[str, List[Target]] = {}
  exports: Dict[str, Set[str]] = {'': set(ROOT_EXPORTS)}
  for target in tree.targets.values():
    packages.setdefault(target.label.package, []).append(target)
    # Files that targets of other packages name as data are exported.
    for label in target.data:
      if label not in tree.targets and label.package != target.label.package:
        exports.setdefault(label.package, set()).add(label.name)
  if any(t.kind == 'py_test' for t in tree.targets.values()):
    if TEST_MAIN in tree.by_file:
      exports.setdefault(os.path.dirname(TEST_MAIN),
                         set()).add(os.path.basename(TEST_MAIN))
    else:
      problems.append(f'{TEST_MAIN}:0: is missing: every py_test runs it '
                      '(//bazel:pytest.bzl)')
  requirements = os.path.join(root, REQUIREMENTS_DIR)
  if os.path.isdir(requirements):
    exports.setdefault(REQUIREMENTS_DIR, set()).update(
        n for n in os.listdir(requirements)
        if n != 'BUILD' and os.path.isfile(os.path.join(requirements, n)))
  # The other exports are files by construction (requirements/, TEST_MAIN)
  # or data, which Tree checks.
  problems += [
      f'BUILD:0: exports {name}, which does not exist' for name in ROOT_EXPORTS
      if not os.path.isfile(os.path.join(root, name))
  ]
  aliases = []
  for name, path in sorted(ROOT_ALIASES.items()):
    if path in tree.by_file:
      aliases.append((name, tree.by_file[path].label))
    else:
      problems.append(f'BUILD:0: alias "{name}" points at {path}, which is '
                      'not a module')
  files = {}
  for package in sorted(set(packages) | set(exports)):
    path = os.path.join(package, 'BUILD')
    files[path] = _render_package(package, packages.get(package, []),
                                  sorted(exports.get(package, ())),
                                  aliases if package == '' else ())
    problems += check_starlark(path, files[path])
  return files, sorted(set(problems))


def check_starlark(path: str, text: str) -> List[str]:
  """A BUILD file parses as Python, and calls only BUILD_CALLS at the top."""
  try:
    tree = ast.parse(text, filename=path)
  except SyntaxError as e:
    return [f'{path}:{e.lineno or 0}: generated text does not parse: {e.msg}']
  return [
      f'{path}:{stmt.lineno}: generated a statement that is not a rule call'
      for stmt in tree.body
      if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
              and _dotted(stmt.value.func) in BUILD_CALLS)
  ]


def committed(root: str) -> Dict[str, str]:
  """{path: text} of the BUILD files in the tree (outside NOT_GENERATED)."""
  found = {}
  for directory, filenames in _walk(root, '.'):
    if directory.split('/')[0] not in NOT_GENERATED:
      for name in {'BUILD', 'BUILD.bazel'} & set(filenames):
        path = os.path.normpath(os.path.join(directory, name))
        found[path] = _read(root, path)
  return found


def differences(root: str, files: Dict[str, str]) -> List[str]:
  """A unified diff per BUILD file that differs from `files`."""
  have, diffs = committed(root), []
  for path in sorted(set(have) | set(files)):
    old, new = have.get(path), files.get(path)
    if new is None:
      diffs.append(f'{path}: not generated (no module in its directory, or '
                   'a BUILD.bazel): delete it\n')
    elif old != new:
      diffs.append(''.join(
          difflib.unified_diff((old or '').splitlines(keepends=True),
                               new.splitlines(keepends=True), f'a/{path}',
                               f'b/{path}')))
  return diffs


def write(root: str, files: Dict[str, str]) -> List[str]:
  """Writes `files`, deletes stale BUILD files; the paths it changed."""
  have = committed(root)
  changed = [path for path, text in files.items() if have.get(path) != text]
  for path in changed:
    with open(os.path.join(root, path), 'w', encoding='utf-8') as f:
      f.write(files[path])
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
    print('\n'.join(problems), f'\n{len(problems)} problem(s); no BUILD file '
          'written.',
          sep='\n')
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
