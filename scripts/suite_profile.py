"""Where the test suite's time goes: CPU and wall seconds per test module.

  python scripts/suite_profile.py measure [--fast] [--out FILE.json] [PATH ...]
  python scripts/suite_profile.py junit JUNIT.xml [--out FILE.json]
  python scripts/suite_profile.py table BEFORE.json [AFTER.json] [--top N]
  python scripts/suite_profile.py asserts [--out FILE.json]
  python scripts/suite_profile.py costs FILE.json ... [--override FILE.json]

`measure` runs each test module (default: every *_test.py under
tff_ddp_tests) in a pytest process of its own, `--run-slow` unless --fast,
one after the other, and records the user+sys CPU seconds of that process
and everything it waited for -- TensorFlow's threads, TFF's `worker_binary`
processes (the test session ends and reaps them), the Pythons a test starts
-- with its wall seconds and outcome counts. That is the module's whole
cost, setup included (TFF import, context start, tracing): what a module
adds to a suite run of either kind. CPU seconds do not grow when other work
shares the machine, so they rank modules reliably on a busy machine; wall
seconds do not.

`junit` sums a suite run's JUnit XML (`pytest --junitxml`) per module: wall
seconds per test (setup, call and teardown), the run's own view.

`table` prints the markdown table of benchmarks/RESULTS.md (modules by cost,
the top N and the rest summed), comparing two measurements when given two.

`asserts` counts the assertion calls in each test module (`assert`
statements, `self.assert*`, `np.testing.assert_*`, `pytest.raises`, ...,
counted in the source with `ast`): issue 36 requires that the count not
fall when tests are made cheaper.

`costs` writes tff_ddp_tests/module_costs.json: the order in which
conftest.py hands modules to the xdist workers (costliest first), from what
each module adds to a worker (`in_suite_seconds`: its tests' wall seconds
in `junit` files of suite runs, the median over them, or its CPU seconds
inside the tests in a `measure` file, for modules changed since). The TFF workers each measured module starts are ended by its own
pytest session (conftest.py); this script starts nothing else.
"""

import argparse
import ast
import collections
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from xml.etree import ElementTree

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTS = 'tff_ddp_tests'
_COSTS = os.path.join(_ROOT, _TESTS, 'module_costs.json')


def test_modules(root=_ROOT):
  """Every test module's path relative to `root`, sorted."""
  found = []
  for directory, _, files in os.walk(os.path.join(root, _TESTS)):
    for name in files:
      if name.endswith('_test.py'):
        found.append(os.path.relpath(os.path.join(directory, name), root))
  return sorted(found)


def _counts(junit_path, slowest=10):
  """(outcome counts, the `slowest` tests as [id, wall seconds])."""
  counts = collections.Counter()
  times = []
  tree = ElementTree.parse(junit_path)
  for case in tree.iter('testcase'):
    outcome = 'passed'
    for child in case:
      if child.tag in ('failure', 'error'):
        outcome = 'failed'
      elif child.tag == 'skipped':
        outcome = 'skipped'
    counts[outcome] += 1
    times.append([
        f'{case.get("classname", "").rsplit(".", 1)[-1]}::'
        f'{case.get("name")}',
        round(float(case.get('time', 0)), 2)
    ])
  return counts, sorted(times, key=lambda t: -t[1])[:slowest]


# ----------------------------------------------------------------------------
# The pytest plugin of `measure` (`-p suite_profile`): CPU seconds per test.
# Active only when _CPU_OUT names the file to write.

_CPU_OUT = 'SUITE_PROFILE_CPU_OUT'
_TICKS = os.sysconf('SC_CLK_TCK')
_PER_TEST = {}


def _descendants_cpu():
  """CPU seconds of this process's living descendants (and of the
  children they reaped): TFF's worker_binary, kernels, Pythons started."""
  stats = {}
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      try:
        with open(f'/proc/{entry}/stat', 'rb') as f:
          stat = f.read().decode('utf-8', 'replace')
      except OSError:
        continue
      stats[int(entry)] = stat[stat.rfind(')') + 2:].split()
  children = collections.defaultdict(list)
  for pid, fields in stats.items():
    children[int(fields[1])].append(pid)
  total, stack = 0, [os.getpid()]
  while stack:
    for child in children.get(stack.pop(), []):
      fields = stats[child]
      total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
      stack.append(child)
  return total / _TICKS


def cpu_now():
  """This process's CPU seconds, its reaped children's, its living
  descendants'."""
  import resource
  own = resource.getrusage(resource.RUSAGE_SELF)
  reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
  return (own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime +
          _descendants_cpu())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument  # pytest's hook signature
  """Times each test (setup, call, teardown) in CPU seconds."""
  enabled = bool(os.environ.get(_CPU_OUT))
  start = cpu_now() if enabled else 0.0
  yield
  if enabled:
    _PER_TEST[item.nodeid] = round(cpu_now() - start, 3)


def pytest_sessionfinish(session, exitstatus):  # pylint: disable=unused-argument  # pytest's hook signature
  out = os.environ.get(_CPU_OUT)
  if out:
    with open(out, 'w', encoding='utf-8') as f:
      json.dump({'tests': _PER_TEST, 'total': round(cpu_now(), 3)}, f)


def measure_module(path, run_slow=True, python=sys.executable):
  """Runs one module in its own pytest process; returns its costs."""
  with tempfile.TemporaryDirectory() as directory:
    junit = os.path.join(directory, 'junit.xml')
    cpu_out = os.path.join(directory, 'cpu.json')
    argv = [
        python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p',
        'suite_profile', f'--junitxml={junit}'
    ] + (['--run-slow'] if run_slow else []) + [path]
    env = dict(os.environ)
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    env[_CPU_OUT] = cpu_out
    env['PYTHONPATH'] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__))] +
        [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
    start = time.monotonic()
    with open(os.devnull, 'w', encoding='utf-8') as devnull:
      child = subprocess.Popen(argv,
                               cwd=_ROOT,
                               env=env,
                               stdout=devnull,
                               stderr=devnull)
      # wait4: the child's CPU plus that of every descendant it reaped.
      _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    counts, slowest = _counts(junit) if os.path.exists(junit) else ({}, [])
    per_test = {}
    if os.path.exists(cpu_out):
      with open(cpu_out, encoding='utf-8') as f:
        per_test = json.load(f)['tests']
  cpu = usage.ru_utime + usage.ru_stime
  top = sorted(per_test.items(), key=lambda t: -t[1])[:10]
  return {
      'cpu':
          round(cpu, 2),
      'wall':
          round(wall, 2),
      'status':
          child.returncode,
      'passed':
          counts.get('passed', 0),
      'skipped':
          counts.get('skipped', 0),
      'failed':
          counts.get('failed', 0),
      # What no test accounts for: the import of the module (TFF's),
      # the session's context start and the workers' end.
      'outside_tests':
          round(cpu - sum(per_test.values()), 2),
      'slowest':
          slowest,
      'slowest_cpu':
          [[nodeid.split('::', 1)[1], seconds] for nodeid, seconds in top]
  }


def _header(extra):
  return dict(extra,
              date=datetime.datetime.now(
                  datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
              load=' '.join(f'{x:.2f}' for x in os.getloadavg()),
              cores=os.cpu_count(),
              commit=_commit())


def _commit():
  try:
    return subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                          cwd=_ROOT,
                          capture_output=True,
                          text=True,
                          check=False).stdout.strip()
  except OSError:
    return ''


def module_of(classname, root=_ROOT):
  """The module path of a JUnit classname ('pkg.mod_test.Class')."""
  parts = classname.split('.')
  for end in range(len(parts), 0, -1):
    path = os.path.join(*parts[:end]) + '.py'
    if os.path.exists(os.path.join(root, path)):
      return path
  return classname


def junit_modules(junit_path, root=_ROOT):
  """{module: {'wall': seconds, 'tests': n}} from a JUnit XML file."""
  modules = {}
  for case in ElementTree.parse(junit_path).iter('testcase'):
    module = module_of(case.get('classname', ''), root)
    entry = modules.setdefault(module, {'wall': 0.0, 'tests': 0})
    entry['wall'] = round(entry['wall'] + float(case.get('time', 0)), 3)
    entry['tests'] += 1
  return modules


_ASSERT_CALL = re.compile(r'^(assert|fail$|raises$)')


def count_asserts(source):
  """Assertion statements and calls in `source` (a test module's text)."""
  count = 0
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Assert):
      count += 1
    elif isinstance(node, ast.Call):
      func = node.func
      name = (func.attr if isinstance(func, ast.Attribute) else
              func.id if isinstance(func, ast.Name) else '')
      if _ASSERT_CALL.search(name):
        count += 1
  return count


def asserts(root=_ROOT):
  """{module: assertion count} over every test module and test helper."""
  counted = {}
  for directory, _, files in os.walk(os.path.join(root, _TESTS)):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(directory, name)
        with open(path, encoding='utf-8') as f:
          counted[os.path.relpath(path, root)] = count_asserts(f.read())
  return dict(sorted(counted.items()))


def _key(entry):
  return entry.get('cpu', entry.get('wall', 0.0))


def table(before, after=None, top=15):
  """Markdown rows: modules by cost in `before` (or `after`), top N."""
  b = before['modules']
  a = after['modules'] if after else {}
  field = 'cpu' if all('cpu' in v for v in b.values()) else 'wall'
  ranked = sorted(set(b) | set(a),
                  key=lambda m: -max(_key(b.get(m, {})), _key(a.get(m, {}))))
  unit = 'CPU s' if field == 'cpu' else 'wall s'
  if after:
    lines = [
        f'| module | tests | {unit} before | {unit} after | ratio |',
        '|---|---|---|---|---|'
    ]
  else:
    lines = [f'| module | tests | {unit} |', '|---|---|---|']

  def row(name, tests, x, y):
    if not after:
      return f'| {name} | {tests} | {x:.0f} |'
    ratio = f'{y / x:.2f}' if x else '-'
    return f'| {name} | {tests} | {x:.0f} | {y:.0f} | {ratio} |'

  def tests_of(entry):
    if 'tests' in entry:
      return entry['tests']
    return entry.get('passed', 0) + entry.get('skipped', 0) + entry.get(
        'failed', 0)

  rest = [0, 0.0, 0.0]
  for index, module in enumerate(ranked):
    x = b.get(module, {}).get(field, 0.0)
    y = a.get(module, {}).get(field, 0.0)
    tests = tests_of(a.get(module) or b.get(module))
    if index < top:
      lines.append(row(module.replace(_TESTS + '/', ''), tests, x, y))
    else:
      rest[0] += tests
      rest[1] += x
      rest[2] += y
  if len(ranked) > top:
    lines.append(
        row(f'{len(ranked) - top} other modules', rest[0], rest[1], rest[2]))
  total_b = sum(v.get(field, 0.0) for v in b.values())
  total_a = sum(v.get(field, 0.0) for v in a.values())
  lines.append(
      row('**all**', sum(tests_of(v) for v in (a or b).values()), total_b,
          total_a))
  return '\n'.join(lines)


def in_suite_seconds(entry):
  """What a module adds to a worker of a suite run, from one file's entry.

  A `measure` entry: its CPU seconds inside the tests (`cpu` less
  `outside_tests`, which is the TFF import and context start a suite's
  worker pays once, not per module). A `junit` entry: its wall seconds in
  that run (setup, call and teardown of its tests, which is the same thing
  on a quiet machine: a worker runs one test at a time).
  """
  if 'cpu' in entry:
    return entry['cpu'] - entry.get('outside_tests', 0.0)
  return entry['wall']


def costs_of(files, overrides=()):
  """{module: seconds}: the median over `files` of `in_suite_seconds`,
  replaced by `overrides`' value (later files win) for the modules those
  hold (modules changed since `files` were measured). At least 0.01 s."""
  runs = collections.defaultdict(list)
  for measured in files:
    for module, entry in measured['modules'].items():
      runs[module].append(in_suite_seconds(entry))
  costs = {m: statistics.median(v) for m, v in runs.items()}
  for measured in overrides:
    for module, entry in measured['modules'].items():
      costs[module] = in_suite_seconds(entry)
  return {m: round(max(0.01, v), 2) for m, v in sorted(costs.items())}


def write_costs(files, overrides=(), path=_COSTS):
  """Writes module_costs.json (see `costs_of`) for the modules that exist."""
  present = set(test_modules())
  costs = {m: v for m, v in costs_of(files, overrides).items() if m in present}
  dates = sorted({
      m.get('date', '')[:10]
      for m in list(files) + list(overrides)
      if m.get('date')
  })
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(
        {
            'about': 'Seconds each test module adds to a suite worker: '
                     'median wall of its tests over suite runs (JUnit), '
                     'or its CPU inside the tests when run alone '
                     '(`measure`) for modules changed since '
                     f'(scripts/suite_profile.py costs; {len(files)} '
                     f'runs, {len(overrides)} override(s), '
                     f'{", ".join(dates)}). conftest.py hands the '
                     'costliest to xdist first.',
            'modules': costs
        },
        f,
        indent=1)
    f.write('\n')


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n\n', maxsplit=1)[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest='command', required=True)
  m = sub.add_parser('measure', help='CPU and wall per module, one by one')
  m.add_argument('paths', nargs='*')
  m.add_argument('--fast', action='store_true', help='without --run-slow')
  m.add_argument('--out')
  m.add_argument('--resume',
                 action='store_true',
                 help='keep the modules --out already holds, measure the rest')
  j = sub.add_parser('junit', help='wall per module from a JUnit XML file')
  j.add_argument('junit')
  j.add_argument('--out')
  t = sub.add_parser('table', help='markdown table of one or two files')
  t.add_argument('before')
  t.add_argument('after', nargs='?')
  t.add_argument('--top', type=int, default=15)
  c = sub.add_parser('asserts', help='assertion count per test module')
  c.add_argument('--out')
  k = sub.add_parser('costs', help='write tff_ddp_tests/module_costs.json')
  k.add_argument('measured',
                 nargs='+',
                 help='junit or measure files: the median per module')
  k.add_argument('--override',
                 action='append',
                 default=[],
                 help='a measure or junit file whose modules replace the '
                 'median (modules changed since); repeatable')
  args = parser.parse_args(argv)

  if args.command == 'table':
    with open(args.before, encoding='utf-8') as f:
      before = json.load(f)
    after = None
    if args.after:
      with open(args.after, encoding='utf-8') as f:
        after = json.load(f)
    print(table(before, after, args.top))
    return 0
  if args.command == 'costs':

    def load(path):
      with open(path, encoding='utf-8') as f:
        return json.load(f)

    write_costs([load(p) for p in args.measured],
                [load(p) for p in args.override])
    return 0
  if args.command == 'asserts':
    counted = asserts()
    result = _header({'total': sum(counted.values()), 'modules': counted})
    print(f'{result["total"]} assertions in {len(counted)} files')
  elif args.command == 'junit':
    modules = junit_modules(args.junit)
    result = _header({'source': args.junit, 'modules': modules})
    print(table(result))
  else:
    paths = args.paths or test_modules()
    result = _header({'run_slow': not args.fast, 'modules': {}})
    if args.resume and args.out and os.path.exists(args.out):
      with open(args.out, encoding='utf-8') as f:
        result['modules'] = json.load(f)['modules']
    for path in paths:
      if path in result['modules']:
        continue
      entry = measure_module(path, run_slow=not args.fast)
      result['modules'][path] = entry
      print(
          f'{path}: {entry["cpu"]:.1f} s CPU, {entry["wall"]:.1f} s wall, '
          f'{entry["passed"]} passed, {entry["skipped"]} skipped, '
          f'{entry["failed"]} failed (load {os.getloadavg()[0]:.1f})',
          flush=True)
      if args.out:  # after each module, so that a long run can be read
        with open(args.out, 'w', encoding='utf-8') as f:
          json.dump(result, f, indent=1)
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
