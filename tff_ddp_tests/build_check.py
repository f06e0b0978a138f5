"""Checks that the Bazel BUILD files describe the code as it is.

Bazel cannot build here (Debian's bazel-bootstrap needs the network), so the
BUILD files are checked statically instead. Every BUILD file is parsed with
Python's `ast` -- Starlark BUILD files are a Python subset -- and never
executed. `python -m tff_ddp_tests.build_check` prints every problem found,
each with the file and line and what to write; it exits 1 if there is any.

What is checked (tff_ddp_tests/build_test.py runs it on the repository and on
small synthetic trees that show each check failing):

1. Listing. Every .py file under the source roots (tff_ddp/, tff_ddp_tests/,
   benchmarks/, scripts/) is in the `srcs` of exactly one target of the BUILD
   file of its own directory; every directory with .py files has a BUILD
   file; every listed src exists; no `glob()`. Every notebook of colabs/ is
   listed there too.
2. Layout (TensorFlow Federated's): one module per py_library / py_test /
   py_binary; a py_library or py_test is named after its module, a package's
   `__init__.py` after the package; test modules (`*_test.py`) are py_tests
   and nothing else is.
3. Dependencies. A target's `deps` are exactly the imports of its module: an
   `import` or `from ... import` at any depth (lazy imports in functions
   count), mapped to the target that lists the imported module:
     `import tff_ddp.x.y` / `from tff_ddp.x import y` -> //tff_ddp/x:y
     `from tff_ddp.x import Name` (Name not a module) -> //tff_ddp/x
   (the package's `__init__.py` target), likewise for tff_ddp_tests; a
   third-party top-level module -> `requirement("<distribution>")` through
   THIRD_PARTY below, whose distribution must be pinned in
   requirements/lock.txt; the standard library (`sys.stdlib_module_names`)
   needs nothing. Labels are compared normalised (`:y`, `//pkg:y`, `//pkg`
   for `//pkg:pkg`). Three kinds of import that no import statement shows
   are handled explicitly:
   - `importlib.import_module(...)` with a literal name counts as importing
     it. With a computed name it is resolved only through a *name table*: a
     module-level tuple of string constants that the same function tests the
     variable against with `in` / `not in` before importing. tff_ddp/
     __init__.py loads its subpackages lazily this way (`_SUBPACKAGES`,
     `import_module(f'tff_ddp.{name}')`), so //tff_ddp depends on each of
     them; accounting/event_io.py rebuilds events from `_EVENT_MODULES`. Any
     other computed import is reported.
   - Code run in a child interpreter, `[sys.executable, '-c', CODE]` with
     CODE a string constant or a module-level name bound to one (sums
     included): CODE's imports count. `[sys.executable, '-m', 'pkg']` counts
     as importing pkg, and when pkg/__main__.py belongs to a py_binary that
     binary must be in the target's `data`. Code the checker cannot read
     (built by a function call) must be declared in CHILD_CODE.
   - CHILD_CODE: tff_ddp_tests/colabs_test.py runs the code cells of every
     notebook in colabs/, so their imports are its deps, and the notebooks
     its data.
   In benchmarks/ and scripts/ (run as `python benchmarks/x.py`), a bare
   `import _common` of a sibling file maps to that file's target.
4. Test modules. Every py_test module ends with
   `if __name__ == '__main__':` whose body is `harness.main()` (from
   tff_ddp_tests import harness); a py_test has a `size`; it is tagged
   "slow" exactly when the module uses `pytest.mark.slow`, and then its size
   is "large" or "enormous".
5. Bazel consistency: the py_* rules are loaded from
   @rules_python//python:defs.bzl and `requirement` from
   @pypi//:requirements.bzl; every internal label in deps / data names an
   existing target or file; the target is visible to the one depending on
   it; no dependency cycle among the internal targets.
"""

import argparse
import ast
import collections
import dataclasses
import json
import os
import re
import sys
from typing import Dict, Iterable, List, Optional, Set, Tuple

# Directories whose .py files must all be in BUILD targets.
SOURCE_ROOTS = ('tff_ddp', 'tff_ddp_tests', 'benchmarks', 'scripts')
# Top-level packages importable by their dotted name.
INTERNAL_PACKAGES = ('tff_ddp', 'tff_ddp_tests')
# Directories of scripts run as `python DIR/x.py`: siblings import by name.
SCRIPT_DIRS = ('benchmarks', 'scripts')
# Directories of notebooks, each to be listed in its BUILD file.
NOTEBOOK_DIRS = ('colabs',)
LOCK_FILE = 'requirements/lock.txt'

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

# Modules that run code the checker cannot read from their source: module ->
# notebook directories whose code cells it executes.
CHILD_CODE = {
    'tff_ddp_tests/colabs_test.py': ('colabs',),
}

PY_RULES = ('py_library', 'py_test', 'py_binary')
RULES_PYTHON_DEFS = '@rules_python//python:defs.bzl'
REQUIREMENTS_BZL = '@pypi//:requirements.bzl'
TEST_SIZES = ('small', 'medium', 'large', 'enormous')
SLOW_SIZES = ('large', 'enormous')
BUILD_NAMES = ('BUILD', 'BUILD.bazel')


# ----------------------------------------------------------------------------
# Problems.


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
  path: str
  line: int
  kind: str
  message: str

  def __str__(self):
    return f'{self.path}:{self.line}: [{self.kind}] {self.message}'


# ----------------------------------------------------------------------------
# Labels and requirements.


@dataclasses.dataclass(frozen=True, order=True)
class Label:
  """An internal target: package directory ('' for the root) and name."""
  package: str
  name: str

  def render(self, from_package: str) -> str:
    if self.package == from_package:
      return f':{self.name}'
    if self.package and self.name == os.path.basename(self.package):
      return f'//{self.package}'
    return f'//{self.package}:{self.name}'

  def __str__(self):
    return self.render(from_package=None)


@dataclasses.dataclass(frozen=True, order=True)
class Requirement:
  """requirement("<distribution>"), compared under PEP 503 normalisation."""
  dist: str

  @property
  def key(self):
    return normalize_dist(self.dist)

  def __eq__(self, other):
    return isinstance(other, Requirement) and self.key == other.key

  def __hash__(self):
    return hash(('req', self.key))

  def render(self, from_package: str = None) -> str:
    del from_package
    return f'requirement("{self.dist}")'

  def __str__(self):
    return self.render()


def normalize_dist(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


def parse_label(text: str, package: str):
  """Label from `:x`, `x`, `//pkg`, `//pkg:x`; None for external (@repo)."""
  if text.startswith('@'):
    return None
  if text.startswith('//'):
    body = text[2:]
    if ':' in body:
      pkg, name = body.split(':', 1)
    else:
      pkg, name = body, os.path.basename(body)
    return Label(pkg, name)
  if text.startswith(':'):
    return Label(package, text[1:])
  return Label(package, text)


def _sort_key_for(package):
  # buildifier's order: ':x' labels, then '//' labels, then requirement().
  def key(dep):
    if isinstance(dep, Requirement):
      return (2, dep.key, '')
    return (0 if dep.package == package else 1, dep.package, dep.name)
  return key


def render_deps(deps: Iterable, package: str) -> List[str]:
  return [d.render(package) for d in sorted(deps, key=_sort_key_for(package))]


# ----------------------------------------------------------------------------
# BUILD files, parsed without executing them.


class _Unevaluable(Exception):
  pass


class _Glob(_Unevaluable):
  pass


@dataclasses.dataclass
class Target:
  kind: str
  name: str
  package: str
  build_path: str
  line: int
  attrs: Dict[str, object]

  @property
  def label(self):
    return Label(self.package, self.name)

  def strings(self, attr) -> List[str]:
    value = self.attrs.get(attr, [])
    return [v for v in value if isinstance(v, str)]

  @property
  def srcs(self):
    return self.strings('srcs')


@dataclasses.dataclass
class BuildFile:
  path: str  # relative to the root
  package: str
  targets: List[Target]
  loads: Dict[str, str]  # symbol -> .bzl label
  default_visibility: List[str]
  problems: List[Problem]


def _literal(node):
  """The value of a Starlark literal: str, int, bool, list, requirement()."""
  if isinstance(node, ast.Constant) and isinstance(node.value,
                                                   (str, int, bool)):
    return node.value
  if isinstance(node, (ast.List, ast.Tuple)):
    return [_literal(e) for e in node.elts]
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    left, right = _literal(node.left), _literal(node.right)
    if isinstance(left, list) and isinstance(right, list):
      return left + right
    if isinstance(left, str) and isinstance(right, str):
      return left + right
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
    if node.func.id == 'glob':
      raise _Glob()
    if (node.func.id == 'requirement' and len(node.args) == 1
        and not node.keywords and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)):
      return Requirement(node.args[0].value)
  raise _Unevaluable(ast.dump(node)[:80])


def parse_build(root: str, path: str) -> BuildFile:
  """Parses one BUILD file (path relative to root) into its targets."""
  package = os.path.dirname(path)
  build = BuildFile(path, package, [], {}, ['//visibility:private'], [])
  with open(os.path.join(root, path)) as f:
    source = f.read()
  try:
    tree = ast.parse(source, filename=path)
  except SyntaxError as e:
    build.problems.append(Problem(path, e.lineno or 0, 'syntax', str(e)))
    return build
  for stmt in tree.body:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)):
      build.problems.append(Problem(
          path, stmt.lineno, 'syntax',
          'only rule calls and load() belong in a BUILD file'))
      continue
    call, func = stmt.value, stmt.value.func.id
    if func == 'load':
      try:
        bzl = _literal(call.args[0])
        for arg in call.args[1:]:
          build.loads[_literal(arg)] = bzl
        for kw in call.keywords:
          build.loads[kw.arg] = bzl
      except (_Unevaluable, IndexError):
        build.problems.append(Problem(path, stmt.lineno, 'syntax',
                                      'load() with non-literal arguments'))
      continue
    attrs, bad = {}, False
    for kw in call.keywords:
      try:
        attrs[kw.arg] = _literal(kw.value)
      except _Glob:
        bad = True
        build.problems.append(Problem(
            path, kw.value.lineno, 'glob',
            f'{func}(...) {kw.arg} uses glob(): list every file explicitly '
            '(the checker and reviewers must see each one)'))
      except _Unevaluable:
        bad = True
        build.problems.append(Problem(
            path, kw.value.lineno, 'syntax',
            f'{func}(...) {kw.arg} is not a literal the checker can read '
            '(strings, lists, requirement("x"))'))
    if func == 'package':
      if 'default_visibility' in attrs:
        build.default_visibility = attrs['default_visibility']
      continue
    if func in ('licenses', 'exports_files'):
      if func == 'exports_files' and call.args:
        try:
          files = _literal(call.args[0])
        except _Unevaluable:
          files = []
        build.targets.append(Target(func, '', package, path, stmt.lineno,
                                    {'srcs': files}))
      continue
    if 'name' not in attrs:
      if not bad:
        build.problems.append(Problem(path, stmt.lineno, 'syntax',
                                      f'{func}(...) has no name'))
      continue
    build.targets.append(
        Target(func, attrs['name'], package, path, stmt.lineno, attrs))
  return build


# ----------------------------------------------------------------------------
# Imports of a Python module, without importing it.


@dataclasses.dataclass(frozen=True)
class Import:
  line: int
  module: str  # dotted name, absolute
  names: Tuple[str, ...] = ()  # for `from module import names`
  how: str = 'import'  # 'import', 'dynamic', 'child', 'child -m', 'notebook'


def _module_package(path: str) -> str:
  """Dotted package a module file belongs to (for relative imports)."""
  parts = os.path.dirname(path).split('/')
  return '.'.join(p for p in parts if p)


def _is_sys_executable(node):
  return (isinstance(node, ast.Attribute) and node.attr == 'executable'
          and isinstance(node.value, ast.Name) and node.value.id == 'sys')


def _module_strings(tree) -> Dict[str, str]:
  """Module-level NAME = 'string constant' (adjacent literals are joined)."""
  found = {}
  for stmt in tree.body:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)):
      try:
        value = _string_value(stmt.value, {})
      except _Unevaluable:
        continue
      found[stmt.targets[0].id] = value
  return found


def _string_value(node, names):
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if isinstance(node, ast.Name) and node.id in names:
    return names[node.id]
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    return _string_value(node.left, names) + _string_value(node.right, names)
  raise _Unevaluable()


def _string_parts(node, names) -> Tuple[List[str], bool]:
  """Readable string parts of a `+` chain, and whether some part was not."""
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    left, lbad = _string_parts(node.left, names)
    right, rbad = _string_parts(node.right, names)
    return left + right, lbad or rbad
  try:
    return [_string_value(node, names)], False
  except _Unevaluable:
    return [], True


def _name_tables(tree) -> Dict[str, Tuple[str, ...]]:
  """Module-level NAME = ('a', 'b', ...): tuples/lists of string constants."""
  tables = {}
  for stmt in tree.body:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, (ast.Tuple, ast.List))
        and stmt.value.elts
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                for e in stmt.value.elts)):
      tables[stmt.targets[0].id] = tuple(e.value for e in stmt.value.elts)
  return tables


def _guarding_table(function, variable, tables) -> Optional[str]:
  """The name table that `variable` is tested against (`in` / `not in`)."""
  for node in ast.walk(function):
    if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)
        and node.left.id == variable and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.In, ast.NotIn))
        and isinstance(node.comparators[0], ast.Name)
        and node.comparators[0].id in tables):
      return node.comparators[0].id
  return None


def _dynamic_import(call, function, tables):
  """Modules an importlib.import_module(...) call can load, or None."""
  if len(call.args) != 1:
    return None
  arg = call.args[0]
  if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
    return [arg.value]
  prefix, suffix, variable = '', '', None
  if isinstance(arg, ast.Name):
    variable = arg.id
  elif isinstance(arg, ast.JoinedStr):
    values = arg.values
    holes = [v for v in values if isinstance(v, ast.FormattedValue)]
    if (len(holes) == 1 and isinstance(holes[0].value, ast.Name)
        and holes[0].conversion == -1 and holes[0].format_spec is None):
      i = values.index(holes[0])
      prefix = ''.join(v.value for v in values[:i])
      suffix = ''.join(v.value for v in values[i + 1:])
      variable = holes[0].value.id
  if variable is None or function is None:
    return None
  table = _guarding_table(function, variable, tables)
  if table is None:
    return None
  return [prefix + entry + suffix for entry in tables[table]]


def _parents(tree):
  parents = {}
  for node in ast.walk(tree):
    for child in ast.iter_child_nodes(node):
      parents[child] = node
  return parents


def _enclosing_function(node, parents):
  while node in parents:
    node = parents[node]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      return node
  return None


def statement_imports(tree, package: str, line=None, how='import'):
  """`import` / `from ... import` statements at any depth of `tree`."""
  found = []
  for node in ast.walk(tree):
    at = line if line is not None else getattr(node, 'lineno', 0)
    if isinstance(node, ast.Import):
      for alias in node.names:
        found.append(Import(at, alias.name, (), how))
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.split('.') if package else []
        base = base[:len(base) - (node.level - 1)]
        module = '.'.join(base + ([node.module] if node.module else []))
      else:
        module = node.module
      found.append(Import(at, module, tuple(a.name for a in node.names), how))
  return found


def notebook_code(path: str) -> str:
  """The code cells of a notebook, IPython magics and shell lines dropped."""
  with open(path) as f:
    notebook = json.load(f)
  lines = []
  for cell in notebook.get('cells', []):
    if cell.get('cell_type') != 'code':
      continue
    source = cell.get('source', '')
    source = ''.join(source) if isinstance(source, list) else source
    for text in source.splitlines():
      lines.append('' if text.lstrip().startswith(('%', '!')) else text)
    lines.append('')
  return '\n'.join(lines)


def module_imports(root: str, path: str) -> Tuple[List[Import],
                                                   List[Problem]]:
  """Every import of the module at `path` (relative to root); see docstring."""
  with open(os.path.join(root, path)) as f:
    source = f.read()
  try:
    tree = ast.parse(source, filename=path)
  except SyntaxError as e:
    return [], [Problem(path, e.lineno or 0, 'syntax', str(e))]
  package = _module_package(path)
  imports = statement_imports(tree, package)
  problems = []
  parents = _parents(tree)
  tables = _name_tables(tree)
  strings = _module_strings(tree)
  unreadable_child_code = []
  for node in ast.walk(tree):
    # importlib.import_module(...)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == 'import_module'
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == 'importlib'):
      modules = _dynamic_import(node, _enclosing_function(node, parents),
                                tables)
      if modules is None:
        problems.append(Problem(
            path, node.lineno, 'dynamic-import',
            'importlib.import_module() with a name the checker cannot '
            'resolve: use a literal, or test the name against a module-level '
            'tuple of module names (`if name in _TABLE:`) in the same '
            'function'))
      else:
        imports.extend(Import(node.lineno, m, (), 'dynamic')
                       for m in modules)
    # [sys.executable, '-c', CODE] / [sys.executable, '-m', MODULE]
    if isinstance(node, (ast.List, ast.Tuple)):
      elts = node.elts
      for i in range(len(elts) - 2):
        if not (_is_sys_executable(elts[i])
                and isinstance(elts[i + 1], ast.Constant)):
          continue
        flag, arg = elts[i + 1].value, elts[i + 2]
        if flag == '-m':
          try:
            imports.append(Import(node.lineno, _string_value(arg, strings),
                                  (), 'child -m'))
          except _Unevaluable:
            problems.append(Problem(path, node.lineno, 'child-code',
                                    '`-m` with a module name the checker '
                                    'cannot read: use a literal'))
        elif flag == '-c':
          parts, unreadable = _string_parts(arg, strings)
          for code in parts:
            try:
              child = ast.parse(code)
            except SyntaxError as e:
              problems.append(Problem(path, node.lineno, 'child-code',
                                      f'code for `-c` does not parse: {e}'))
              continue
            imports.extend(statement_imports(child, '', node.lineno,
                                             'child'))
          if unreadable:
            unreadable_child_code.append(node.lineno)
  if unreadable_child_code:
    if path in CHILD_CODE:
      for directory in CHILD_CODE[path]:
        where = os.path.join(root, directory)
        for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:
          if not name.endswith('.ipynb'):
            continue
          notebook = os.path.join(directory, name)
          try:
            child = ast.parse(notebook_code(os.path.join(root, notebook)))
          except (SyntaxError, ValueError) as e:
            problems.append(Problem(notebook, 0, 'syntax',
                                    f'code cells do not parse: {e}'))
            continue
          imports.extend(statement_imports(
              child, '', unreadable_child_code[0], 'notebook'))
    else:
      problems.append(Problem(
          path, unreadable_child_code[0], 'child-code',
          'runs code in a child interpreter (`sys.executable, "-c", ...`) '
          'built by a call the checker cannot read: declare what it runs in '
          'CHILD_CODE in tff_ddp_tests/build_check.py'))
  return imports, problems


# ----------------------------------------------------------------------------
# The repository.


def _walk(root, top):
  for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
    dirnames[:] = sorted(d for d in dirnames
                         if not d.startswith(('.', '__pycache__', 'bazel-')))
    yield os.path.relpath(dirpath, root), sorted(filenames)


def _norm(path):
  return '' if path == '.' else path


class Repository:
  """BUILD files, module files and their owners, read from `root`."""

  def __init__(self, root: str):
    self.root = root
    self.problems: List[Problem] = []
    self.builds: Dict[str, BuildFile] = {}  # package -> BuildFile
    for dirpath, filenames in _walk(root, '.'):
      if dirpath.split('/')[0] in ('.venv', 'venv', 'node_modules'):
        continue
      for build_name in BUILD_NAMES:
        if build_name in filenames:
          build = parse_build(root, os.path.join(_norm(dirpath), build_name)
                              if _norm(dirpath) else build_name)
          self.builds[build.package] = build
          self.problems.extend(build.problems)
          break
    self.targets: Dict[Label, Target] = {}
    for build in self.builds.values():
      for target in build.targets:
        if not target.name:
          continue
        if target.label in self.targets:
          self.problems.append(Problem(
              build.path, target.line, 'duplicate',
              f'two targets are named "{target.name}"'))
        self.targets[target.label] = target
    # Module files and dotted names.
    self.py_files: List[str] = []
    self.modules: Dict[str, str] = {}  # dotted name -> file
    for top in SOURCE_ROOTS:
      if not os.path.isdir(os.path.join(root, top)):
        continue
      for dirpath, filenames in _walk(root, top):
        for name in filenames:
          if name.endswith('.py'):
            path = os.path.join(dirpath, name)
            self.py_files.append(path)
            if top in INTERNAL_PACKAGES:
              dotted = dirpath.replace('/', '.')
              if name != '__init__.py':
                dotted += '.' + name[:-3]
              self.modules[dotted] = path
    self.owners: Dict[str, List[Target]] = collections.defaultdict(list)
    for build in self.builds.values():
      for target in build.targets:
        for src in target.srcs:
          self.owners[os.path.join(build.package, src)].append(target)
    self.lock = self._read_lock()
    self._defined = {}

  def _read_lock(self) -> Set[str]:
    path = os.path.join(self.root, LOCK_FILE)
    if not os.path.exists(path):
      return set()
    found = set()
    with open(path) as f:
      for line in f:
        match = re.match(r'^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[.*\])?\s*==',
                         line)
        if match:
          found.add(normalize_dist(match.group(1)))
    return found

  def defined_names(self, path: str) -> Optional[Set[str]]:
    """Top-level names a module defines; None if it may define any."""
    if path not in self._defined:
      with open(os.path.join(self.root, path)) as f:
        tree = ast.parse(f.read())
      names = set()
      for stmt in tree.body:
        for node in ast.walk(stmt) if isinstance(stmt, (ast.If, ast.Try)) \
            else [stmt]:
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.ClassDef)):
            names.add(node.name)
          elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
              names.add(alias.asname or alias.name.split('.')[0])
          elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [
                node.target]
            for target in targets:
              names.update(n.id for n in ast.walk(target)
                           if isinstance(n, ast.Name))
      # A module __getattr__ (lazy names) or a star import defines any name.
      if '__getattr__' in names or '*' in names:
        names = None
      self._defined[path] = names
    return self._defined[path]

  def owner(self, path: str) -> Optional[Target]:
    owners = [t for t in self.owners.get(path, ())
              if t.kind in PY_RULES]
    return owners[0] if len(owners) == 1 else None

  def conventional_label(self, path: str) -> Label:
    package, name = os.path.split(path)
    if name == '__init__.py':
      return Label(package, os.path.basename(package))
    return Label(package, name[:-3])


# ----------------------------------------------------------------------------
# The checks.


def _expected(repo: Repository, path: str):
  """(deps, data labels, problems) that the module at `path` needs."""
  imports, problems = module_imports(repo.root, path)
  deps, data = set(), set()
  directory = os.path.dirname(path)
  in_script_dir = directory in SCRIPT_DIRS
  for imp in imports:
    for item in _resolve(repo, imp, path, directory, in_script_dir):
      if isinstance(item, Problem):
        problems.append(item)
        continue
      if isinstance(item, Requirement):
        deps.add(item)
        continue
      kind, file = item
      if file == path:
        continue
      owner = repo.owner(file)
      label = owner.label if owner else repo.conventional_label(file)
      if kind == 'data':
        data.add(label)
      else:
        deps.add(label)
  if path in CHILD_CODE:
    for directory in CHILD_CODE[path]:
      build = repo.builds.get(directory)
      for target in build.targets if build else ():
        if any(s.endswith('.ipynb') for s in target.srcs):
          data.add(target.label)
  return deps, data, problems


def _resolve(repo, imp: Import, path, directory, in_script_dir):
  """A list of Requirement / ('dep'|'data', file) / Problem."""
  module = imp.module
  top = module.split('.')[0]
  if in_script_dir and os.path.isfile(
      os.path.join(repo.root, directory, top + '.py')):
    return [('dep', os.path.join(directory, top + '.py'))]
  if top in INTERNAL_PACKAGES:
    files = []
    if imp.how == 'child -m':
      main = repo.modules.get(module + '.__main__')
      if main:
        files.append(('data', main))
    if imp.names:
      for name in imp.names:
        sub = f'{module}.{name}'
        if sub in repo.modules:
          files.append(('dep', repo.modules[sub]))
        elif module in repo.modules:
          defined = repo.defined_names(repo.modules[module])
          if defined is not None and name not in defined:
            files.append(Problem(
                path, imp.line, 'unknown-import',
                f'imports {sub}: there is no {sub.replace(".", "/")}.py and '
                f'{repo.modules[module]} defines no name {name!r}'))
          files.append(('dep', repo.modules[module]))
        else:
          files.append(Problem(
              path, imp.line, 'unknown-import',
              f'imports {sub}, but there is no {module} module (no '
              f'{module.replace(".", "/")}.py or '
              f'{module.replace(".", "/")}/__init__.py)'))
    elif module in repo.modules:
      files.append(('dep', repo.modules[module]))
    else:
      files.append(Problem(path, imp.line, 'unknown-import',
                           f'imports {module}, which has no file '
                           f'({module.replace(".", "/")}.py)'))
    return files
  if top in sys.stdlib_module_names or top == '__future__':
    return []
  prefix = module
  while prefix:
    if prefix in THIRD_PARTY:
      return [Requirement(THIRD_PARTY[prefix])]
    prefix = prefix.rpartition('.')[0]
  return [Problem(
      path, imp.line, 'unknown-import',
      f'imports {module!r} ({imp.how}), which is neither tff_ddp / '
      'tff_ddp_tests, nor the standard library, nor in THIRD_PARTY: add '
      f"'{top}': '<its PyPI distribution>' to THIRD_PARTY in "
      'tff_ddp_tests/build_check.py and pin the distribution in '
      'requirements/requirements.in and requirements/lock.txt')]


def _slow(tree) -> bool:
  """Whether the module marks anything @pytest.mark.slow."""
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and node.attr == 'slow'
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == 'mark'
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == 'pytest'):
      return True
    # tff_ddp_tests.fuzz.strategies.test_classes returns a slow-marked class.
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == 'test_classes'):
      return True
  return False


def ends_with_harness_main(path: str) -> bool:
  """Whether the module file at `path` ends by calling harness.main()."""
  with open(path) as f:
    return _ends_with_harness_main(ast.parse(f.read()))


def _lost_marks(tree) -> List[int]:
  """Lines of pytest marks above a @parameterized decorator (silently lost:
  the generated methods do not carry them)."""
  lines = []
  for node in ast.walk(tree):
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    names = [ast.unparse(d) for d in node.decorator_list]
    for i, text in enumerate(names):
      if text.startswith('pytest.mark.') and any(
          later.startswith('parameterized.') for later in names[i + 1:]):
        lines.append(node.decorator_list[i].lineno)
  return lines


def _ends_with_harness_main(tree) -> bool:
  if not tree.body:
    return False
  last = tree.body[-1]
  if not (isinstance(last, ast.If) and isinstance(last.test, ast.Compare)
          and isinstance(last.test.left, ast.Name)
          and last.test.left.id == '__name__'
          and isinstance(last.test.ops[0], ast.Eq)
          and isinstance(last.test.comparators[0], ast.Constant)
          and last.test.comparators[0].value == '__main__'
          and not last.orelse and len(last.body) == 1):
    return False
  stmt = last.body[0]
  call = stmt.value if isinstance(stmt, ast.Expr) else None
  if not (isinstance(call, ast.Call) and not call.args and not call.keywords
          and isinstance(call.func, ast.Attribute)
          and call.func.attr == 'main'
          and isinstance(call.func.value, ast.Name)
          and call.func.value.id == 'harness'):
    return False
  return any(isinstance(n, ast.ImportFrom) and n.module == 'tff_ddp_tests'
             and any(a.name == 'harness' and a.asname is None
                     for a in n.names)
             for n in tree.body)


def suggest_target(repo: Repository, path: str) -> str:
  """A ready-to-paste BUILD target for the module at `path`."""
  package, name = os.path.split(path)
  deps, data, _ = _expected(repo, path)
  label = repo.conventional_label(path)
  is_test = name.endswith('_test.py') and package.split('/')[0] == (
      'tff_ddp_tests')
  in_script_dir = package in SCRIPT_DIRS and name != '__init__.py'
  main = None
  if is_test:
    kind = 'py_test'
  elif name == '__main__.py':
    # `python -m package`: a binary, named for the command it runs.
    kind, main = 'py_binary', name
    label = Label(package, os.path.basename(package) + '_main')
  elif in_script_dir and not name.startswith('_'):
    kind = 'py_binary'
  else:
    kind = 'py_library'
  lines = [f'{kind}(', f'    name = "{label.name}",']
  if is_test:
    with open(os.path.join(repo.root, path)) as f:
      slow = _slow(ast.parse(f.read()))
    # tff_ddp_tests/BUILD's rule: "medium", "large" for slow modules.
    lines.append(f'    size = "{"large" if slow else "medium"}",')
  lines.append(f'    srcs = ["{name}"],')
  if main:
    lines.append(f'    main = "{main}",')
  if data:
    lines.append('    data = [')
    lines.extend(f'        "{d}",' for d in render_deps(data, package))
    lines.append('    ],')
  if is_test and slow:
    lines.append('    tags = ["slow"],')
  if package.startswith('tff_ddp_tests') and not is_test:
    lines.append('    testonly = True,')
  if deps:
    lines.append('    deps = [')
    for dep in render_deps(deps, package):
      lines.append(f'        {dep},' if dep.startswith('requirement(')
                   else f'        "{dep}",')
    lines.append('    ],')
  lines.append(')')
  return '\n'.join(lines)


def _visible(target: Target, build: BuildFile, from_package: str) -> bool:
  if target.package == from_package:
    return True
  visibility = target.attrs.get('visibility', build.default_visibility)
  for entry in visibility:
    if entry == '//visibility:public':
      return True
    label = parse_label(entry, target.package)
    if label is None:
      continue
    if label.name == '__pkg__' and label.package == from_package:
      return True
    if label.name == '__subpackages__' and (
        not label.package or from_package == label.package
        or from_package.startswith(label.package + '/')):
      return True
  return False


def _indent(text):
  return '\n'.join('        ' + line for line in text.splitlines())


def check(root: str) -> List[Problem]:
  """Every problem of the BUILD files under `root`, sorted by file and line."""
  repo = Repository(root)
  problems = list(repo.problems)

  # 1. Listing: every source file in exactly one target of its own BUILD.
  missing_build = collections.defaultdict(list)
  for path in repo.py_files:
    package = os.path.dirname(path)
    if package not in repo.builds:
      missing_build[package].append(path)
      continue
    owners = [t for t in repo.owners.get(path, []) if t.kind in PY_RULES]
    if not owners:
      problems.extend(_expected(repo, path)[2])
      problems.append(Problem(
          repo.builds[package].path, 0, 'unlisted',
          f'{path} is in no target; add:\n'
          + _indent(suggest_target(repo, path))))
    elif len(owners) > 1:
      problems.append(Problem(
          repo.builds[package].path, owners[1].line, 'listed-twice',
          f'{os.path.basename(path)} is in the srcs of '
          + ', '.join(f'"{t.name}"' for t in owners) + ': keep one'))
  for package, paths in sorted(missing_build.items()):
    for path in paths:
      problems.extend(_expected(repo, path)[2])
    visibility = ('"//tff_ddp_tests:__subpackages__"'
                  if package.startswith('tff_ddp_tests') else
                  '"//visibility:public"')
    snippets = '\n\n'.join(suggest_target(repo, p) for p in paths)
    rules = ', '.join(f'"{r}"' for r in sorted(PY_RULES)
                      if r + '(' in snippets)
    loads = f'load("{RULES_PYTHON_DEFS}", {rules})\n'
    if 'requirement(' in snippets:
      loads += f'load("{REQUIREMENTS_BZL}", "requirement")\n'
    problems.append(Problem(
        package, 0, 'no-build',
        f'{package}/ has .py files but no BUILD file; create {package}/BUILD '
        'with:\n' + _indent(
            loads + f'\npackage(default_visibility = [{visibility}])\n\n'
            + snippets)))
  for directory in NOTEBOOK_DIRS:
    where = os.path.join(root, directory)
    if not os.path.isdir(where):
      continue
    for name in sorted(os.listdir(where)):
      if name.endswith('.ipynb') and not repo.owners.get(
          os.path.join(directory, name)):
        problems.append(Problem(
            repo.builds[directory].path if directory in repo.builds
            else directory, 0, 'unlisted',
            f'notebook {directory}/{name} is in no target: add "{name}" to '
            'the srcs of the notebooks filegroup'))

  for package, build in sorted(repo.builds.items()):
    used = {t.kind for t in build.targets}
    for rule in sorted(used & set(PY_RULES)):
      if build.loads.get(rule) != RULES_PYTHON_DEFS:
        problems.append(Problem(
            build.path, 1, 'load',
            f'{rule} is used but not loaded: add '
            f'load("{RULES_PYTHON_DEFS}", "{rule}")'))
    uses_requirement = any(isinstance(d, Requirement) for t in build.targets
                           for d in t.attrs.get('deps', []))
    if uses_requirement and build.loads.get('requirement') != REQUIREMENTS_BZL:
      problems.append(Problem(
          build.path, 1, 'load',
          'requirement() is used but not loaded: add '
          f'load("{REQUIREMENTS_BZL}", "requirement")'))

    for target in build.targets:
      where = (build.path, target.line)
      # Every listed file exists, in this package.
      for src in target.srcs:
        if '/' in src or ':' in src:
          problems.append(Problem(
              *where, 'src',
              f'"{target.name}" lists {src}: list only files of this '
              'directory (every directory with sources has its own BUILD)'))
        elif not os.path.exists(os.path.join(root, package, src)):
          problems.append(Problem(
              *where, 'missing-src',
              f'"{target.name}" lists {src}, which does not exist in '
              f'{package or "the root"}/: remove it (or restore the file)'))
      if target.kind == 'alias':
        actual = parse_label(str(target.attrs.get('actual', '')), package)
        if actual is not None and actual not in repo.targets:
          problems.append(Problem(*where, 'label',
                                  f'alias "{target.name}": no target '
                                  f'"{actual}"'))
      if target.kind not in PY_RULES:
        _check_data_labels(repo, build, target, problems)
        continue
      srcs = target.srcs
      py_srcs = [s for s in srcs if s.endswith('.py')]
      if len(py_srcs) != len(srcs):
        problems.append(Problem(*where, 'src', f'"{target.name}" lists '
                                'non-Python srcs: use data'))
      top = package.split('/')[0]
      if top in SOURCE_ROOTS and len(py_srcs) != 1:
        problems.append(Problem(
            *where, 'layout',
            f'"{target.name}" has {len(py_srcs)} srcs: one module per '
            'target (split it)'))
        continue
      if not py_srcs:
        continue
      src = py_srcs[0]
      path = os.path.join(package, src)
      if top in SOURCE_ROOTS:
        _check_layout(target, src, package, where, problems)
      if not os.path.exists(os.path.join(root, path)):
        continue

      # 3. deps == imports.
      deps, data, found = _expected(repo, path)
      problems.extend(found)
      actual = set()
      for dep in target.attrs.get('deps', []):
        if isinstance(dep, Requirement):
          actual.add(dep)
        elif isinstance(dep, str):
          label = parse_label(dep, package)
          if label is not None:
            actual.add(label)
      missing, extra = deps - actual, actual - deps
      if missing:
        problems.append(Problem(
            *where, 'missing-dep',
            f'"{target.name}" ({src}) imports what its deps lack; add to '
            'deps: ' + ', '.join(_quote(d, package) for d in sorted(
                missing, key=_sort_key_for(package)))))
      if extra:
        problems.append(Problem(
            *where, 'extra-dep',
            f'"{target.name}" ({src}) does not import these deps; remove: '
            + ', '.join(_quote(d, package) for d in sorted(
                extra, key=_sort_key_for(package)))))
      for dep in sorted(deps, key=_sort_key_for(package)):
        if isinstance(dep, Requirement) and repo.lock and (
            dep.key not in repo.lock):
          problems.append(Problem(
              *where, 'requirement',
              f'{dep} is not pinned in {LOCK_FILE}: add it to '
              'requirements/requirements.in and re-lock (make lock)'))
      actual_data = {parse_label(d, package)
                     for d in target.strings('data')} - {None}
      lacking = data - actual_data
      if lacking:
        problems.append(Problem(
            *where, 'missing-data',
            f'"{target.name}" ({src}) runs these at test time; add to data: '
            + ', '.join(f'"{d.render(package)}"' for d in sorted(lacking))))
      _check_data_labels(repo, build, target, problems)
      for dep in sorted(actual & deps, key=_sort_key_for(package)):
        if isinstance(dep, Label):
          _check_label_target(repo, build, target, dep, problems)

      # 4. Test modules.
      if target.kind == 'py_test':
        _check_test(repo, target, path, where, problems)

  problems.extend(_cycles(repo))
  return sorted(set(problems))


def _quote(dep, package):
  text = dep.render(package)
  return text if isinstance(dep, Requirement) else f'"{text}"'


def _check_layout(target, src, package, where, problems):
  stem = src[:-3]
  is_test_file = src.endswith('_test.py')
  if target.kind == 'py_binary':
    main = target.attrs.get('main', f'{target.name}.py')
    if main != src:
      problems.append(Problem(*where, 'layout',
                              f'py_binary "{target.name}": set main = '
                              f'"{src}"'))
    return
  want = os.path.basename(package) if src == '__init__.py' else stem
  if target.name != want:
    problems.append(Problem(*where, 'layout',
                            f'target "{target.name}" holds {src}: name it '
                            f'"{want}"'))
  if is_test_file and target.kind != 'py_test':
    problems.append(Problem(*where, 'layout',
                            f'{src} is a test module: make "{target.name}" '
                            'a py_test'))
  if target.kind == 'py_test' and not is_test_file:
    problems.append(Problem(*where, 'layout',
                            f'py_test "{target.name}" holds {src}: test '
                            'modules end in _test.py'))


def _check_test(repo, target, path, where, problems):
  with open(os.path.join(repo.root, path)) as f:
    tree = ast.parse(f.read())
  if not _ends_with_harness_main(tree):
    problems.append(Problem(
        path, tree.body[-1].lineno if tree.body else 0, 'harness',
        'a py_test module must end with\n'
        "        if __name__ == '__main__':\n"
        '          harness.main()\n'
        '    (with `from tff_ddp_tests import harness`): Bazel runs the file '
        'directly, and harness.main sets the TFF test context, runs every '
        'test (slow ones too), ends the TFF workers and exits with the '
        'tests\' status'))
  for line in _lost_marks(tree):
    problems.append(Problem(
        path, line, 'tags',
        'a pytest mark above a @parameterized decorator is lost (the '
        'generated tests do not carry it): mark the class instead'))
  size = target.attrs.get('size')
  if size not in TEST_SIZES:
    problems.append(Problem(
        *where, 'size',
        f'py_test "{target.name}" needs size = one of {TEST_SIZES} '
        '(Bazel\'s timeout: 60 s / 300 s / 900 s / 3600 s)'))
  tags = target.strings('tags')
  slow = _slow(tree)
  if slow and 'slow' not in tags:
    problems.append(Problem(
        *where, 'tags',
        f'{os.path.basename(path)} has @pytest.mark.slow tests: add '
        'tags = ["slow"] and size = "large" (or "enormous")'))
  if not slow and 'slow' in tags:
    problems.append(Problem(
        *where, 'tags',
        f'{os.path.basename(path)} has no slow test: remove the "slow" tag'))
  if slow and size in TEST_SIZES and size not in SLOW_SIZES:
    problems.append(Problem(
        *where, 'size',
        f'py_test "{target.name}" runs slow tests when run directly: size '
        f'must be "large" or "enormous", not "{size}"'))


def _check_label_target(repo, build, target, label, problems):
  where = (build.path, target.line)
  dep = repo.targets.get(label)
  if dep is None:
    if label.package not in repo.builds:
      problems.append(Problem(*where, 'label',
                              f'"{label}" names a package with no BUILD'))
    else:
      problems.append(Problem(*where, 'label',
                              f'"{label}": {repo.builds[label.package].path} '
                              f'has no target "{label.name}"'))
    return
  if not _visible(dep, repo.builds[label.package], build.package):
    problems.append(Problem(
        *where, 'visibility',
        f'"{label}" is not visible to //{build.package}: widen its '
        'visibility (or the package\'s default_visibility)'))
  if dep.attrs.get('testonly') and not target.attrs.get('testonly') and (
      target.kind != 'py_test'):
    problems.append(Problem(
        *where, 'testonly',
        f'"{target.name}" depends on testonly "{label}": set testonly = True'))


def _check_data_labels(repo, build, target, problems):
  for text in target.strings('data'):
    label = parse_label(text, build.package)
    if label is None:
      continue
    if label in repo.targets:
      _check_label_target(repo, build, target, label, problems)
    elif not os.path.exists(os.path.join(repo.root, label.package,
                                         label.name)):
      problems.append(Problem(
          build.path, target.line, 'label',
          f'data "{text}" of "{target.name}" is neither a target nor a file'))


def _cycles(repo) -> List[Problem]:
  graph = {}
  for label, target in repo.targets.items():
    graph[label] = [parse_label(d, target.package)
                    for d in target.attrs.get('deps', [])
                    if isinstance(d, str)]
  problems, state, stack = [], {}, []

  def visit(node):
    state[node] = 1
    stack.append(node)
    for nxt in graph.get(node, ()):
      if nxt is None or nxt not in graph:
        continue
      if state.get(nxt) == 1:
        cycle = stack[stack.index(nxt):] + [nxt]
        target = repo.targets[node]
        problems.append(Problem(
            target.build_path, target.line, 'cycle',
            'dependency cycle (Bazel refuses it; Python tolerates it): '
            + ' -> '.join(f'//{c.package}:{c.name}' for c in cycle)))
      elif nxt not in state:
        visit(nxt)
    stack.pop()
    state[node] = 2

  for node in sorted(graph):
    if node not in state:
      visit(node)
  return problems


# ----------------------------------------------------------------------------
# Test modules run as __main__ in list mode (used by build_test's slow test).


def list_tests(paths: List[str]) -> Dict[str, List[str]]:
  """Runs each test module as __main__ with --list; its printed test ids.

  One interpreter for all (TensorFlow is imported once): each module's code
  runs through runpy under the name '__main__' with sys.argv = [path,
  '--list'], exactly the path `python path --list` takes to harness.main.
  """
  import contextlib  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  import runpy  # pylint: disable=g-import-not-at-top
  listed = {}
  for path in paths:
    out = io.StringIO()
    saved = sys.argv
    sys.argv = [path, '--list']
    try:
      with contextlib.redirect_stdout(out):
        runpy.run_path(path, run_name='__main__')
    except SystemExit as e:
      out.write(f'\nexited with {e.code}\n')
    except Exception as e:  # pylint: disable=broad-except
      out.write(f'\nraised {type(e).__name__}: {e}\n')
    finally:
      sys.argv = saved
    listed[path] = out.getvalue().splitlines()
  return listed


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog='python -m tff_ddp_tests.build_check',
      description=__doc__.split('\n\n', 1)[0])
  parser.add_argument('--root', default=os.path.dirname(os.path.dirname(
      os.path.realpath(__file__))), help='repository (default: %(default)s)')
  parser.add_argument('--suggest', metavar='FILE.py', nargs='+',
                      help='print a BUILD target for each module instead')
  parser.add_argument('--list-tests', metavar='FILE_test.py', nargs='+',
                      help='run each module as __main__ with --list (JSON)')
  args = parser.parse_args(argv)
  if args.list_tests:
    print(json.dumps(list_tests(args.list_tests)))
    return 0
  if args.suggest:
    repo = Repository(args.root)
    for path in args.suggest:
      print(suggest_target(repo, os.path.relpath(os.path.abspath(path),
                                                 args.root)))
      print()
    return 0
  problems = check(args.root)
  for problem in problems:
    print(problem)
  if problems:
    print(f'\n{len(problems)} problem(s) in the BUILD files.')
    return 1
  print('BUILD files: every module listed, deps equal imports.')
  return 0


if __name__ == '__main__':
  sys.exit(main())
