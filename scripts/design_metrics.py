"""Prints the design metrics of issue 33, read from the source with `ast`.

    python scripts/design_metrics.py            # the table, then the lists
    python scripts/design_metrics.py --json     # the same numbers as JSON

benchmarks/RESULTS.md records the table ("Design metrics"). How each number
is counted (nothing is imported). The code metrics are over the package
tff_ddp/ outside tff_ddp/cli/ (the command line parses strings by nature);
cli/'s own values are printed in rows of their own. With these definitions
the first three reproduce the figures issue 33 gives for the main of its
writing (136, 17, 4).

- string comparisons: every operator of a comparison (`a == b < c` has
  two) that is `==`, `!=`, `in` or `not in` and has a string literal, or a
  tuple / list / set literal of string literals only, on either side
  (`mode == 'tree'`, `method in ('flat', 'haar')`, `'x' in name`). A
  comparison with a named constant (`method in _METHODS`) is not counted:
  the count measures choices spelled as strings where they are decided.
  A `match` statement's string patterns count one per string case.
- long signatures: functions and methods (nested ones included, lambdas
  not) with 10 or more named parameters: positional and keyword-only ones;
  not `*args` / `**kwargs`, and not the `self` / `cls` of a method (the
  first parameter of a function defined directly in a class body, unless
  it is a staticmethod).
- long functions: functions and methods whose `def` line to last line
  (decorators excluded, docstring included) spans more than 150 lines; a
  nested function counts on its own and inside its parent.
- upward imports: import statements at any depth (lazy ones included) in
  tff_ddp/accounting/ whose module is in tff_ddp.mechanisms or
  tff_ddp.aggregators -- the accountant sits beside the mechanisms and
  must not import them (docs/development.md, Layout: nothing imports upward). Issue 33
  says 2 on the main of its writing; this count finds 1 on today's
  (accounting/calibration.py's lazy import of the DDG mechanism).
- line counts: lines of benchmarks/RESULTS.md and README.md (`wc -l`).

Issue 41's metrics (same package, same walk):

- library lines: lines of every module of tff_ddp/, cli/ included.
- periphery lines: every file under scripts/ (the tooling and its tests),
  every BUILD file and WORKSPACE, and tff_ddp_tests/build_test.py (the
  check of the generated BUILD files).
- choice checks below the edge: calls of `checks.choice` (a string
  choice validated) outside cli/.
- version strings: assignments of a string literal to `__version__` in
  tff_ddp/, plus setup.py's `version=` keyword when it is a literal.

`--check` exits 1 when a metric is above its ceiling (`CEILINGS`): the
target where it is met, today's value where it is not (so it only goes
down); `make lint` runs it.
"""

import argparse
import ast
import json
import os
import sys
from typing import Dict, List, Tuple

PACKAGE = 'tff_ddp'
CLI = 'tff_ddp/cli'
ACCOUNTING = 'tff_ddp/accounting'
PERIPHERY = ('scripts',)
PERIPHERY_FILES = ('tff_ddp_tests/build_test.py', 'WORKSPACE')
UPWARD = ('tff_ddp.mechanisms', 'tff_ddp.aggregators')
MAX_PARAMETERS = 10  # a signature with this many or more is listed
MAX_LINES = 150  # a function with more lines is listed
RECORDS = ('benchmarks/RESULTS.md', 'README.md')
# Issue 33's targets, printed beside today's values.
TARGETS = {
    'string comparisons (tff_ddp/ outside cli/)':
        '<= 30',
    'functions with >= 10 parameters (outside cli/)':
        '<= 4, each a TFF-compatible public signature',
    'functions over 150 lines (outside cli/)':
        '0',
    'imports from accounting/ into mechanisms/ or aggregators/':
        '0',
    'benchmarks/RESULTS.md lines':
        '<= 600',
    'README.md lines':
        '<= 300',
    'library lines (tff_ddp/)':
        '<= 23000',
    'periphery lines (scripts/, BUILD files, build_test)':
        '<= 2000',
    'checks.choice calls (outside cli/)':
        '0 below the public edge',
    'version strings':
        '1',
}
# What `--check` holds each metric to: the target where it is met, today's
# value where it is not.
CEILINGS = {
    'string comparisons (tff_ddp/ outside cli/)': 6,
    'functions with >= 10 parameters (outside cli/)': 0,
    'functions over 150 lines (outside cli/)': 0,
    'imports from accounting/ into mechanisms/ or aggregators/': 0,
    'benchmarks/RESULTS.md lines': 617,
    'README.md lines': 300,
    'library lines (tff_ddp/)': 29231,
    'periphery lines (scripts/, BUILD files, build_test)': 7606,
    'checks.choice calls (outside cli/)': 19,
    'version strings': 1,
}
_EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _is_string_literal(node) -> bool:
  if isinstance(node, ast.Constant):
    return isinstance(node.value, str)
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return bool(node.elts) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str)
        for e in node.elts)
  return False


def string_comparisons(tree) -> List[int]:
  """Lines of the string-constant comparisons of a module (one per op)."""
  lines = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      operands = [node.left] + node.comparators
      for i, op in enumerate(node.ops):
        if isinstance(op, _EQUALITY) and (_is_string_literal(operands[i]) or
                                          _is_string_literal(operands[i + 1])):
          lines.append(node.lineno)
    elif isinstance(node, ast.match_case):
      for pattern in ast.walk(node.pattern):
        if isinstance(pattern, ast.MatchValue) and _is_string_literal(
            pattern.value):
          lines.append(pattern.lineno)
  return lines


def _functions(tree):
  """(qualified name, node, is_method) of every def, nested ones included."""
  found = []

  def visit(node, prefix, in_class):
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = prefix + child.name
        found.append((name, child, in_class))
        visit(child, name + '.', False)
      elif isinstance(child, ast.ClassDef):
        visit(child, prefix + child.name + '.', True)
      else:
        visit(child, prefix, in_class)

  visit(tree, '', False)
  return found


def parameter_count(node, is_method: bool) -> int:
  args = node.args
  names = [a.arg for a in args.posonlyargs + args.args]
  count = len(names) + len(args.kwonlyargs)
  static = any(
      isinstance(d, ast.Name) and d.id == 'staticmethod'
      for d in node.decorator_list)
  if is_method and not static and names and names[0] in ('self', 'cls'):
    count -= 1
  return count


def _modules(root: str) -> List[str]:
  paths = []
  for dirpath, dirnames, filenames in os.walk(os.path.join(root, PACKAGE)):
    dirnames[:] = sorted(d for d in dirnames if not d.startswith(('.', '_')))
    paths += [
        os.path.relpath(os.path.join(dirpath, n), root)
        for n in sorted(filenames)
        if n.endswith('.py')
    ]
  return sorted(paths)


def _in(path: str, directory: str) -> bool:
  return path.startswith(directory + '/')


def _line_count(path: str) -> int:
  with open(path, 'rb') as f:
    return f.read().count(b'\n')


def _periphery(root: str) -> List[str]:
  """The files the periphery count covers (see the module docstring)."""
  paths = [p for p in PERIPHERY_FILES if os.path.exists(os.path.join(root, p))]
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if not d.startswith('.'))
    relative = os.path.relpath(dirpath, root)
    top = relative.split(os.sep)[0]
    for name in sorted(filenames):
      if top in PERIPHERY or name == 'BUILD':
        paths.append(os.path.normpath(os.path.join(relative, name)))
  return sorted(p for p in set(paths) if '__pycache__' not in p)


def _is_choice_check(node) -> bool:
  func = node.func if isinstance(node, ast.Call) else None
  return (isinstance(func, ast.Attribute) and func.attr == 'choice' and
          isinstance(func.value, ast.Name) and func.value.id == 'checks')


def _version_strings(tree, setup_py: bool) -> List[int]:
  lines = []
  for node in ast.walk(tree):
    if setup_py:
      if isinstance(node,
                    ast.keyword) and node.arg == 'version' and (isinstance(
                        node.value, ast.Constant)):
        lines.append(node.value.lineno)
    elif isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == '__version__'
        for t in node.targets) and isinstance(node.value, ast.Constant):
      lines.append(node.lineno)
  return lines


def measure(root: str) -> Dict[str, object]:
  """Every metric, with the items behind each count."""
  comparisons: List[Tuple[str, int]] = []
  choices: List[str] = []
  versions: List[str] = []
  library_lines = 0
  cli = {'comparisons': 0, 'signatures': 0, 'long': 0}
  long_signatures, long_functions, upward = [], [], []
  for path in _modules(root):
    with open(os.path.join(root, path), encoding='utf-8') as f:
      source = f.read()
    tree = ast.parse(source, filename=path)
    library_lines += source.count('\n')
    in_cli = _in(path, CLI)
    versions += [f'{path}:{line}' for line in _version_strings(tree, False)]
    if not in_cli:
      choices += [
          f'{path}:{node.lineno}' for node in ast.walk(tree)
          if _is_choice_check(node)
      ]
    lines = string_comparisons(tree)
    if in_cli:
      cli['comparisons'] += len(lines)
    else:
      comparisons += [(path, line) for line in lines]
    for name, node, is_method in _functions(tree):
      count = parameter_count(node, is_method)
      length = node.end_lineno - node.lineno + 1
      where = f'{path}:{node.lineno} {name}'
      if in_cli:
        cli['signatures'] += count >= MAX_PARAMETERS
        cli['long'] += length > MAX_LINES
        continue
      if count >= MAX_PARAMETERS:
        long_signatures.append((where, count))
      if length > MAX_LINES:
        long_functions.append((where, length))
    if _in(path, ACCOUNTING):
      for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.Import):
          modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
          modules = [f'{node.module}.{a.name}' for a in node.names]
        for module in modules:
          if module.startswith(tuple(u + '.' for u in UPWARD)) or (module
                                                                   in UPWARD):
            upward.append(f'{path}:{node.lineno} imports {module}')
  setup_path = os.path.join(root, 'setup.py')
  if os.path.exists(setup_path):
    with open(setup_path, encoding='utf-8') as f:
      versions += [
          f'setup.py:{line}'
          for line in _version_strings(ast.parse(f.read()), True)
      ]
  by_file: Dict[str, int] = {}
  for path, _ in comparisons:
    by_file[path] = by_file.get(path, 0) + 1
  return {
      'string comparisons (tff_ddp/ outside cli/)':
          len(comparisons),
      'functions with >= 10 parameters (outside cli/)':
          len(long_signatures),
      'functions over 150 lines (outside cli/)':
          len(long_functions),
      'imports from accounting/ into mechanisms/ or aggregators/':
          len(upward),
      'benchmarks/RESULTS.md lines':
          _line_count(os.path.join(root, RECORDS[0])),
      'README.md lines':
          _line_count(os.path.join(root, RECORDS[1])),
      'library lines (tff_ddp/)':
          library_lines,
      'periphery lines (scripts/, BUILD files, build_test)':
          sum(_line_count(os.path.join(root, p)) for p in _periphery(root)),
      'checks.choice calls (outside cli/)':
          len(choices),
      'version strings':
          len(versions),
      'cli/: string comparisons':
          cli['comparisons'],
      'cli/: functions with >= 10 parameters':
          cli['signatures'],
      'cli/: functions over 150 lines':
          cli['long'],
      'lists': {
          'string comparisons by file':
              sorted(by_file.items(), key=lambda item: (-item[1], item[0])),
          'functions with >= 10 parameters (outside cli/)':
              sorted(long_signatures, key=lambda item: (-item[1], item[0])),
          'functions over 150 lines (outside cli/)':
              sorted(long_functions, key=lambda item: (-item[1], item[0])),
          'imports from accounting/ into mechanisms/ or aggregators/':
              upward,
          'checks.choice calls (outside cli/)':
              choices,
          'version strings':
              versions,
      },
  }


def over_ceiling(metrics: Dict[str, object]) -> List[str]:
  """'name: value > ceiling' for every metric above its ceiling."""
  return [
      f'{name}: {metrics[name]} > {ceiling}'
      for name, ceiling in CEILINGS.items()
      if metrics[name] > ceiling
  ]


def render(metrics: Dict[str, object]) -> str:
  lines = [
      '| metric | value | target (issues 33, 41) | ceiling (--check) |',
      '|---|---|---|---|'
  ]
  for name, value in metrics.items():
    if name != 'lists':
      lines.append(f'| {name} | {value} | {TARGETS.get(name, "-")} | '
                   f'{CEILINGS.get(name, "-")} |')
  for name, items in metrics['lists'].items():
    lines += ['', f'{name}:']
    lines += [
        f'  {item[0]}  {item[1]}' if isinstance(item, tuple) else f'  {item}'
        for item in items
    ] or ['  (none)']
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='scripts/design_metrics.py',
                                   description=__doc__.split('\n\n', 1)[0])
  parser.add_argument('--root',
                      default=os.path.dirname(
                          os.path.dirname(os.path.realpath(__file__))),
                      help='repository (default: %(default)s)')
  parser.add_argument('--json',
                      action='store_true',
                      help='print the metrics as JSON')
  parser.add_argument('--check',
                      action='store_true',
                      help='exit 1 if a metric is above its ceiling')
  args = parser.parse_args(argv)
  metrics = measure(args.root)
  if args.check:
    over = over_ceiling(metrics)
    for line in over:
      print(f'design metric above its ceiling: {line}', file=sys.stderr)
    if not over:
      print(f'design metrics: all {len(CEILINGS)} within their ceilings')
    return 1 if over else 0
  print(json.dumps(metrics, indent=1) if args.json else render(metrics))
  return 0


if __name__ == '__main__':
  sys.exit(main())
