"""The Bazel BUILD files are what scripts/build_files.py generates.

`bazel test` cannot run here (Bazel is not installed on the development
machines, and Debian's bazel-bootstrap needs the network), so the BUILD files
are an output of scripts/build_files.py (`make build-files`): it derives every
target, its deps and attributes from the modules' imports (read with `ast`,
nothing imported). This test regenerates them in memory and requires the
committed files to be exactly that, with no problem reported (an import
resolving to nothing, a test module without harness.main(), an unpinned
distribution, a cycle, an invisible dependency). It costs no TFF import.
The generator's rules are in its docstring; GeneratorTest shows each rule and
each problem on a small synthetic tree.

Executed directly, every test module runs harness.main(): the default suite
runs tff_ddp_tests/utils/checks_test.py that way (it needs no TensorFlow, so
it takes a second) and compares the count of tests it ran with pytest's
collection of the file; the slow class lists every py_test module's tests
through its own `__main__` (harness.main --list) and compares them with
pytest's collection, test by test.
"""

import ast
import configparser
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import parameterized
import pytest

from tff_ddp_tests import harness
from tff_ddp_tests import script_module

_ROOT = script_module.ROOT
_GENERATOR = os.path.join(_ROOT, 'scripts', 'build_files.py')
# The cheap module run directly in the default suite: no TensorFlow import.
_CHEAP_TEST = 'tff_ddp_tests/utils/checks_test.py'
# What a BUILD file may call at its top level.
_BUILD_CALLS = {'load', 'package', 'licenses', 'exports_files', 'alias',
                'filegroup', 'py_library', 'py_binary', 'py_test'}


build_files = script_module.load('scripts/build_files.py')


def _env():
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(
      [_ROOT] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  return env


def _run(args, timeout=600):
  return subprocess.run([sys.executable] + args, cwd=_ROOT, env=_env(),
                        capture_output=True, text=True, timeout=timeout,
                        check=False)


# Runs each test module given on the command line as __main__ with --list,
# all in this one interpreter (TensorFlow imported once), exactly the path
# `python path --list` takes to harness.main; prints {path: [lines]} as JSON.
_LIST_CODE = '''
import contextlib, io, json, runpy, sys
listed = {}
for path in sys.argv[1:]:
  out, saved = io.StringIO(), sys.argv
  sys.argv = [path, '--list']
  try:
    with contextlib.redirect_stdout(out):
      runpy.run_path(path, run_name='__main__')
  except SystemExit as e:
    out.write(f'\\nexited with {e.code}\\n')
  except Exception as e:
    out.write(f'\\nraised {type(e).__name__}: {e}\\n')
  finally:
    sys.argv = saved
  listed[path] = out.getvalue().splitlines()
print(json.dumps(listed))
'''


def _list_tests(paths):
  result = subprocess.run([sys.executable, '-c', _LIST_CODE] + list(paths),
                          cwd=_ROOT, env=_env(), capture_output=True,
                          text=True, timeout=1800, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.splitlines()[-1])


def _pytest_collected(paths, rootdir=_ROOT):
  """pytest's collection of `paths`: {path: {'Class.method', ...}}.

  --noconftest: conftest.py only adds --run-slow, the marker and the skip of
  slow tests, none of which changes what is collected, and its session start
  would import TFF for nothing.
  """
  result = _run(['-m', 'pytest', '--collect-only', '-q', '--noconftest',
                 '-p', 'no:cacheprovider', f'--rootdir={rootdir}']
                + [os.path.join(rootdir, path) for path in paths])
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  collected = {path: set() for path in paths}
  by_file = {os.path.join(rootdir, path): path for path in paths}
  for line in result.stdout.splitlines():
    parts = line.strip().split('::')
    path = by_file.get(os.path.join(rootdir, parts[0]))
    if path is not None:
      collected[path].add('.'.join(parts[1:]))
  return collected


def _listing_mismatch(path, lines, collected):
  """Why `--list` output `lines` differs from pytest's ids; None if not."""
  if not lines or lines[-1] != harness.LISTED.format(len(lines) - 1):
    return f'{path}: no listing:\n' + '\n'.join(lines[-20:])
  listed = set(lines[:-1])
  if not listed:
    return f'{path}: lists no test'
  if listed != collected:
    return (f'{path}: run directly it would run '
            f'{sorted(listed - collected)[:10]} that pytest does not collect, '
            f'and would not run {sorted(collected - listed)[:10]}')
  return None


class RepositoryTest(parameterized.TestCase):
  """The repository's BUILD files, regenerated and compared."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tree = build_files.Tree(_ROOT)
    cls.files, cls.problems = build_files.generate(_ROOT, cls.tree)

  def test_generator_reports_no_problem(self):
    self.assertEmpty(self.problems, '\n' + '\n'.join(map(str, self.problems)))

  def test_committed_build_files_are_the_generated_ones(self):
    diffs = build_files.differences(_ROOT, self.files)
    self.assertEmpty(diffs, '\n' + ''.join(diffs)[:6000] + '\nRun `make '
                     'build-files` and commit the BUILD files it writes.')

  def test_committed_build_files_parse_as_starlark(self):
    # Starlark BUILD files are a Python subset: each parses, and holds only
    # calls of the rules and functions a BUILD file may use.
    committed = build_files.committed(_ROOT)
    self.assertIn('tff_ddp/aggregators/BUILD', committed)
    for path, text in committed.items():
      tree = ast.parse(text, filename=path)
      for stmt in tree.body:
        self.assertIsInstance(stmt, ast.Expr, f'{path}:{stmt.lineno}')
        self.assertIsInstance(stmt.value, ast.Call, f'{path}:{stmt.lineno}')
        self.assertIn(stmt.value.func.id, _BUILD_CALLS,
                      f'{path}:{stmt.lineno}')

  def test_generator_sees_the_tree(self):
    # A generator that found no module would pass the comparison vacuously.
    self.assertGreater(len(self.tree.py_files), 100)
    tests = [t for t in self.tree.targets.values() if t.kind == 'py_test']
    self.assertGreater(len(tests), 30)
    for path in ('tff_ddp/cli/__main__.py', 'tff_ddp_tests/conftest.py',
                 'tff_ddp_tests/harness.py', 'tff_ddp_tests/build_test.py',
                 'tff_ddp_tests/fuzz/strategies.py', 'benchmarks/_common.py',
                 'scripts/build_files.py'):
      self.assertIn(path, self.tree.by_file)
    self.assertEqual(self.tree.by_file['tff_ddp/cli/__main__.py'].label,
                     build_files.Label('tff_ddp/cli', 'tff-ddp'))
    aggregators = self.tree.targets[build_files.Label('tff_ddp/aggregators',
                                                      'aggregators')]
    self.assertIn(build_files.Requirement('tensorflow-federated'),
                  set().union(*(self.tree.targets[d].deps
                                for d in aggregators.deps)))

  def test_every_module_pytest_collects_is_a_py_test(self):
    # pytest.ini's own pattern, applied to the test tree.
    config = configparser.ConfigParser()
    config.read(os.path.join(_ROOT, 'pytest.ini'))
    patterns = config['pytest']['python_files'].split()
    roots = config['pytest']['testpaths'].split()
    found = []
    for top in roots:
      for dirpath, _, filenames in os.walk(os.path.join(_ROOT, top)):
        found += [os.path.relpath(os.path.join(dirpath, n), _ROOT)
                  for n in filenames
                  if any(fnmatch.fnmatch(n, p) for p in patterns)]
    self.assertGreater(len(found), 30)
    for path in found:
      target = self.tree.by_file[path]
      self.assertEqual(target.kind, 'py_test', path)
      build = self.files[os.path.join(target.package, 'BUILD')]
      self.assertIn(f'srcs = ["{os.path.basename(path)}"]', build, path)

  def test_lazy_subpackages_are_deps_of_the_package(self):
    # The table the generator reads from the source is the one Python uses.
    import tff_ddp  # pylint: disable=g-import-not-at-top
    labels = {self.tree.label_of(self.tree.modules[f'tff_ddp.{name}'])
              for name in tff_ddp._SUBPACKAGES}  # pylint: disable=protected-access
    package = self.tree.targets[build_files.Label('tff_ddp', 'tff_ddp')]
    self.assertEqual({d for d in package.deps
                      if isinstance(d, build_files.Label)}, labels)

  def test_third_party_distributions_are_pinned(self):
    self.assertIn('tensorflow-federated', self.tree.lock)
    used = {build_files.normalize_dist(d)
            for d in build_files.THIRD_PARTY.values()}
    self.assertEmpty(used - self.tree.lock)


class DirectRunTest(parameterized.TestCase):
  """A test module executed directly runs all its tests and exits 0."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.collected = _pytest_collected([_CHEAP_TEST])[_CHEAP_TEST]

  def test_cheap_module_runs_its_tests(self):
    result = _run([_CHEAP_TEST], timeout=300)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    ran = [line for line in result.stderr.splitlines()
           if line.startswith('Ran ')]
    self.assertLen(ran, 1, result.stderr[-3000:])
    self.assertRegex(result.stderr, r'\nOK\b')
    self.assertGreater(len(self.collected), 10)
    self.assertEqual(int(ran[0].split()[1]), len(self.collected))

  def test_list_mode_lists_what_pytest_collects(self):
    result = _run([_CHEAP_TEST, harness.LIST_FLAG], timeout=300)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertNotIn('Ran ', result.stderr)  # listed, not run
    self.assertIsNone(_listing_mismatch(
        _CHEAP_TEST, result.stdout.splitlines(), self.collected))

  def test_list_mode_finds_what_a_direct_run_would_miss(self):
    # A module-level pytest function: pytest runs it, `python module.py`
    # (unittest's loader) would not.
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    _write_tree(root, {'x_test.py': textwrap.dedent('''\
        from absl.testing import absltest
        from tff_ddp_tests import harness


        class XTest(absltest.TestCase):

          def test_method(self):
            pass


        def test_function():
          pass


        if __name__ == '__main__':
          harness.main()
        ''')})
    result = _run([os.path.join(root, 'x_test.py'), harness.LIST_FLAG])
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    collected = _pytest_collected(['x_test.py'], rootdir=root)['x_test.py']
    self.assertEqual(collected, {'XTest.test_method', 'test_function'})
    mismatch = _listing_mismatch('x_test.py', result.stdout.splitlines(),
                                 collected)
    self.assertIn("would not run ['test_function']", mismatch)


@pytest.mark.slow
class EveryTestModuleTest(parameterized.TestCase):
  """Each py_test module's own __main__ lists exactly pytest's tests."""

  def test_every_module_lists_what_pytest_collects(self):
    tree = build_files.Tree(_ROOT)
    paths = sorted(path for path, target in tree.by_file.items()
                   if target.kind == 'py_test')
    self.assertGreater(len(paths), 30)
    listed = _list_tests(paths)
    collected = _pytest_collected(paths)
    mismatches = [_listing_mismatch(p, listed[p], collected[p])
                  for p in paths]
    self.assertEmpty([m for m in mismatches if m], '\n'.join(
        m for m in mismatches if m))


# ----------------------------------------------------------------------------
# The generator on a small synthetic repository.

_CLEAN_TREE = {
    'README.md': '',
    'pytest.ini': '',
    'setup.py': '',
    'requirements/lock.txt': 'absl-py==1.4.0\nnumpy==1.25.2\nscipy==1.9.3\n'
                             'pytest==7.4.0\n',
    'tff_ddp/__init__.py': '',
    'tff_ddp/cli/__init__.py': 'def main():\n  return 0\n',
    'tff_ddp/cli/__main__.py': 'from tff_ddp import cli\ncli.main()\n',
    'tff_ddp/a/__init__.py': 'from tff_ddp.a.x import f\n',
    'tff_ddp/a/x.py': '''
        import numpy as np

        from tff_ddp.a import y


        def f():
          from tff_ddp.a import z  # a lazy import counts
          return np.zeros(y.N + z.M)
        ''',
    'tff_ddp/a/y.py': 'N = 1\n',
    'tff_ddp/a/z.py': 'M = 2\n',
    'tff_ddp_tests/__init__.py': '',
    'tff_ddp_tests/harness.py': 'def main():\n  pass\n',
    'tff_ddp_tests/a_test.py': '''
        from absl.testing import absltest

        from tff_ddp.a import x
        from tff_ddp_tests import harness


        class ATest(absltest.TestCase):

          def test_f(self):
            self.assertLen(x.f(), 3)


        if __name__ == '__main__':
          harness.main()
        ''',
    'benchmarks/_common.py': 'import numpy\n',
    'benchmarks/bench.py': 'import _common\nfrom tff_ddp.a import y\n',
}
_CLEAN_TREE = {path: textwrap.dedent(text).lstrip('\n')
               for path, text in _CLEAN_TREE.items()}

_HEADER = build_files.GENERATED + '\n\n'
# What the clean tree generates for two of its packages, in full.
_EXPECTED_A = _HEADER + '''\
package(default_visibility = ["//visibility:public"])

licenses(["notice"])

py_library(
    name = "a",
    srcs = ["__init__.py"],
    deps = [
        ":x",
    ],
)

py_library(
    name = "x",
    srcs = ["x.py"],
    deps = [
        ":y",
        ":z",
    ],
)

py_library(
    name = "y",
    srcs = ["y.py"],
)

py_library(
    name = "z",
    srcs = ["z.py"],
)
'''
_EXPECTED_TESTS_TAIL = '''\
licenses(["notice"])

py_library(
    name = "tff_ddp_tests",
    srcs = ["__init__.py"],
    testonly = True,
)

py_test(
    name = "a_test",
    size = "medium",
    srcs = ["a_test.py"],
    deps = [
        ":harness",
        "//tff_ddp/a:x",
    ],
)

py_library(
    name = "harness",
    srcs = ["harness.py"],
    testonly = True,
)
'''


def _write_tree(root, files):
  for path, text in files.items():
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, 'w') as f:
      f.write(text)


def _replace(path, old, new):
  def edit(files):
    assert old in files[path], (path, old)
    files[path] = files[path].replace(old, new)
  return edit


def _add(path, text):
  def edit(files):
    files[path] = textwrap.dedent(text).lstrip('\n')
  return edit


def _remove(path):
  def edit(files):
    del files[path]
  return edit


_SLOW_A_TEST = _replace('tff_ddp_tests/a_test.py', 'class ATest',
                        'import pytest\n\n\n@pytest.mark.slow\nclass ATest')


class GeneratorTest(parameterized.TestCase):
  """Each rule of scripts/build_files.py, and each problem it reports."""

  def _tree(self, *edits):
    files = dict(_CLEAN_TREE)
    for edit in edits:
      edit(files)
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    _write_tree(root, files)
    return root

  def _generate(self, *edits):
    return build_files.generate(self._tree(*edits))

  def test_clean_tree_generates_these_files(self):
    files, problems = self._generate()
    self.assertEmpty(problems, '\n'.join(map(str, problems)))
    self.assertEqual(sorted(files), [
        'BUILD', 'benchmarks/BUILD', 'requirements/BUILD', 'tff_ddp/BUILD',
        'tff_ddp/a/BUILD', 'tff_ddp/cli/BUILD', 'tff_ddp_tests/BUILD'])
    self.assertEqual(files['tff_ddp/a/BUILD'], _EXPECTED_A)
    self.assertTrue(files['tff_ddp_tests/BUILD'].endswith(
        _EXPECTED_TESTS_TAIL), files['tff_ddp_tests/BUILD'])
    self.assertIn('"//tff_ddp_tests:__subpackages__"',
                  files['tff_ddp_tests/BUILD'])
    self.assertIn('actual = "//tff_ddp/cli:tff-ddp"', files['BUILD'])
    self.assertIn('"lock.txt"', files['requirements/BUILD'])
    for path, text in files.items():
      self.assertEmpty(build_files.check_starlark(path, text))

  def test_output_depends_on_the_sources_only(self):
    root = self._tree()
    files, _ = build_files.generate(root)
    build_files.write(root, files)
    self.assertEmpty(build_files.differences(root, files))
    self.assertEqual(build_files.generate(root)[0], files)  # idempotent
    # A hand edit and a stale BUILD file do not leak into the output; the
    # comparison names both, and writing restores the generated state.
    with open(os.path.join(root, 'tff_ddp/a/BUILD'), 'a') as f:
      f.write('\npy_library(name = "extra", srcs = ["y.py"])\n')
    os.makedirs(os.path.join(root, 'tff_ddp/gone'))
    with open(os.path.join(root, 'tff_ddp/gone/BUILD'), 'w') as f:
      f.write('py_library(name = "gone", srcs = ["gone.py"])\n')
    self.assertEqual(build_files.generate(root)[0], files)
    diffs = build_files.differences(root, files)
    self.assertLen(diffs, 2)
    self.assertIn('-py_library(name = "extra"', diffs[0])
    self.assertIn('tff_ddp/gone/BUILD: not generated', diffs[1])
    self.assertEqual(build_files.write(root, files),
                     ['tff_ddp/a/BUILD', 'tff_ddp/gone/BUILD'])
    self.assertEmpty(build_files.differences(root, files))
    self.assertFalse(os.path.exists(os.path.join(root, 'tff_ddp/gone/BUILD')))

  @parameterized.named_parameters(
      ('new_module',
       _add('tff_ddp/a/w.py', 'from tff_ddp.a import y\n'),
       'tff_ddp/a/BUILD', 'py_library(\n    name = "w",\n    srcs = ["w.py"],'
       '\n    deps = [\n        ":y",\n    ],\n)'),
      ('new_package',
       _add('tff_ddp/b/__init__.py', 'import scipy\n'),
       'tff_ddp/b/BUILD', 'name = "b",\n    srcs = ["__init__.py"],\n)'),
      ('name_not_module',
       _add('tff_ddp/a/w.py', 'from tff_ddp.a import f\n'),
       'tff_ddp/a/BUILD', 'name = "w",\n    srcs = ["w.py"],\n'
       '    deps = [\n        ":a",'),
      ('slow_test',
       _SLOW_A_TEST,
       'tff_ddp_tests/BUILD', 'size = "large",\n    srcs = ["a_test.py"],\n'
       '    tags = ["slow"],'),
      ('name_table',
       _add('tff_ddp/__init__.py', '''
            import importlib
            _SUB = ('a', 'cli')


            def __getattr__(name):
              if name in _SUB:
                return importlib.import_module(f'tff_ddp.{name}')
            '''),
       'tff_ddp/BUILD', 'deps = [\n        "//tff_ddp/a",\n'
       '        "//tff_ddp/cli",\n    ],'),
      ('child_code',
       _replace('tff_ddp_tests/a_test.py', 'import absltest\n',
                'import absltest\nimport sys\n'
                '_CODE = "from tff_ddp.a import y"\n'
                'RUN = [sys.executable, "-c", _CODE]\n'),
       'tff_ddp_tests/BUILD', '"//tff_ddp/a:x",\n        "//tff_ddp/a:y",'),
      ('child_module',
       _replace('tff_ddp_tests/a_test.py', 'import absltest\n',
                'import absltest\nimport sys\n'
                'RUN = [sys.executable, "-m", "tff_ddp.cli"]\n'),
       'tff_ddp_tests/BUILD', 'data = ["//tff_ddp/cli:tff-ddp"],'),
      ('script_sibling',
       lambda files: None,
       'benchmarks/BUILD', 'py_binary(\n    name = "bench",\n'
       '    srcs = ["bench.py"],\n    deps = [\n        ":_common",\n'
       '        "//tff_ddp/a:y",\n    ],'),
      ('testonly_spreads',
       _add('benchmarks/bench.py', 'from tff_ddp_tests.fuzz import s\n'),
       'benchmarks/BUILD', 'testonly = True,\n    deps = [\n'
       '        "//tff_ddp_tests/fuzz:s",'),
      # harness.run_cli's lazy import of the CLI is a dep of the tests that
      # use run_cli, not of :harness (which every py_test depends on).
      ('caller_deps',
       lambda files: (
           _add('tff_ddp_tests/harness.py', '''
               def main():
                 pass


               def run_cli(argv):
                 from tff_ddp import cli
                 return cli.main(argv)
               ''')(files),
           _replace('tff_ddp_tests/a_test.py', 'class ATest',
                    '_run = harness.run_cli\n\n\nclass ATest')(files)),
       'tff_ddp_tests/BUILD', '":harness",\n        "//tff_ddp/a:x",\n'
       '        "//tff_ddp/cli",\n    ],\n)\n\npy_library(\n'
       '    name = "harness",\n    srcs = ["harness.py"],\n'
       '    testonly = True,\n)'),
  )
  def test_derives(self, edit, build, text):
    files, problems = self._generate(
        edit, _add('tff_ddp_tests/fuzz/__init__.py', ''),
        _add('tff_ddp_tests/fuzz/s.py', 'S = 1\n'))
    self.assertEmpty(problems, '\n'.join(map(str, problems)))
    self.assertIn(text, files[build])

  @parameterized.named_parameters(
      ('unknown_distribution',
       _add('tff_ddp/a/y.py', 'import left_pad\nN = 1\n'),
       "'left_pad': '<its PyPI distribution>'"),
      ('unpinned_distribution',
       _replace('requirements/lock.txt', 'numpy==1.25.2\n', ''),
       'not pinned in requirements/lock.txt'),
      ('missing_module',
       _add('tff_ddp/a/y.py', 'from tff_ddp.b import frequency\nN = 1\n'),
       'imports tff_ddp.b.frequency, but there is no tff_ddp.b module'),
      ('missing_name',
       _add('tff_ddp/a/y.py', 'from tff_ddp.a import frequency\nN = 1\n'),
       'there is no tff_ddp/a/frequency.py and tff_ddp/a/__init__.py '
       "defines no name 'frequency'"),
      ('dynamic_import',
       _add('tff_ddp/a/y.py', '''
            import importlib
            N = 1


            def g(n):
              return importlib.import_module(n)
            '''),
       'module-level tuple of module names'),
      ('unreadable_child_code',
       _replace('tff_ddp_tests/a_test.py', 'import absltest\n',
                'import absltest\nimport sys\n'
                'RUN = [sys.executable, "-c", "".join(["x"])]\n'),
       'use a string constant'),
      ('module_syntax_error',
       _add('tff_ddp/a/y.py', 'N = (\n'),
       'tff_ddp/a/y.py:1: does not parse'),
      ('no_harness_main',
       _replace('tff_ddp_tests/a_test.py', 'harness.main()',
                'absltest.main()'),
       'must end with'),
      ('lost_mark',
       _replace('tff_ddp_tests/a_test.py', '  def test_f',
                '  @pytest.mark.slow\n  @parameterized.parameters(1)\n'
                '  def test_f'),
       'mark the class instead'),
      ('invisible',
       _add('benchmarks/bench.py', 'from tff_ddp_tests import harness\n'),
       'needs //tff_ddp_tests:harness, which //benchmarks cannot see'),
      ('cycle',
       _add('tff_ddp/a/y.py', 'from tff_ddp.a import x\nN = 1\n'),
       '//tff_ddp/a:y -> //tff_ddp/a:x -> //tff_ddp/a:y'),
      ('removed_alias_target',
       _remove('tff_ddp/cli/__main__.py'),
       'alias "tff-ddp" points at tff_ddp/cli/__main__.py'),
  )
  def test_reports(self, edit, text):
    _, problems = self._generate(edit)
    self.assertNotEmpty([p for p in problems if text in str(p)],
                        f'no problem saying {text!r} among:\n'
                        + '\n'.join(map(str, problems)))

  def test_command(self):
    # --check fails on a stale tree and names the fix; writing fixes it; a
    # problem writes nothing.
    root = self._tree()
    check = [_GENERATOR, '--root', root, '--check']
    result = _run(check)
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn('run `make build-files`', result.stdout)
    self.assertEqual(_run([_GENERATOR, '--root', root]).returncode, 0)
    self.assertEqual(_run(check).returncode, 0)
    _write_tree(root, {'tff_ddp/a/w.py': 'import left_pad\n'})
    result = _run([_GENERATOR, '--root', root])
    self.assertEqual(result.returncode, 1)
    self.assertIn('no BUILD file written', result.stdout)
    with open(os.path.join(root, 'tff_ddp/a/BUILD')) as f:
      self.assertNotIn('"w"', f.read())


if __name__ == '__main__':
  harness.main()
