"""The Bazel BUILD files are what scripts/build_files.py generates.

The BUILD files are an output of scripts/build_files.py (`make
build-files`): it derives every target, its deps and attributes from the
modules' imports (read with `ast`, nothing imported). This test regenerates
them in memory and requires the committed files to be exactly that, with no
problem reported (an import resolving to nothing, an unpinned distribution,
a cycle, an invisible dependency). It costs no TFF import. The generator's
rules are in its docstring; GeneratorTest shows each rule and each problem
on a small synthetic tree. `make bazel-test` builds and runs them.

Bazel runs each py_test through tff_ddp_tests/pytest_main.py (pytest, the
conftest, slow tests included); DirectRunTest runs a cheap module that way.
"""

import ast
import configparser
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import parameterized

from tff_ddp_tests import script_module

_ROOT = script_module.ROOT
_GENERATOR = os.path.join(_ROOT, 'scripts', 'build_files.py')
# The cheap module run through Bazel's entry: no TensorFlow import.
_CHEAP_TEST = 'tff_ddp_tests/utils/checks_test.py'
# What a BUILD file may call at its top level.
_BUILD_CALLS = {
    'load', 'package', 'licenses', 'exports_files', 'alias', 'filegroup',
    'py_library', 'py_binary', 'py_test'
}

build_files = script_module.load('scripts/build_files.py')


def _env():
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(
      [_ROOT] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  return env


def _run(args, timeout=600):
  return subprocess.run([sys.executable] + args,
                        cwd=_ROOT,
                        env=_env(),
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        check=False)


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
    self.assertEmpty(
        diffs, '\n' + ''.join(diffs)[:6000] + '\nRun `make '
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
        self.assertIn(stmt.value.func.id, _BUILD_CALLS, f'{path}:{stmt.lineno}')

  def test_generator_sees_the_tree(self):
    # A generator that found no module would pass the comparison vacuously.
    self.assertGreater(len(self.tree.py_files), 100)
    tests = [t for t in self.tree.targets.values() if t.kind == 'py_test']
    self.assertGreater(len(tests), 30)
    for path in ('tff_ddp/cli/__main__.py', 'tff_ddp_tests/conftest.py',
                 'tff_ddp_tests/pytest_main.py', 'tff_ddp_tests/build_test.py',
                 'tff_ddp_tests/fuzz/strategies.py', 'benchmarks/_common.py',
                 'scripts/build_files.py'):
      self.assertIn(path, self.tree.by_file)
    self.assertEqual(self.tree.by_file['tff_ddp/cli/__main__.py'].label,
                     build_files.Label('tff_ddp/cli', 'tff-ddp'))
    aggregators = self.tree.targets[build_files.Label('tff_ddp/aggregators',
                                                      'aggregators')]
    self.assertIn(
        build_files.Requirement('tensorflow-federated'),
        set().union(*(self.tree.targets[d].deps for d in aggregators.deps)))

  def test_every_module_pytest_collects_is_a_py_test(self):
    # pytest.ini's own pattern, applied to the test tree.
    config = configparser.ConfigParser()
    config.read(os.path.join(_ROOT, 'pytest.ini'))
    patterns = config['pytest']['python_files'].split()
    roots = config['pytest']['testpaths'].split()
    found = []
    for top in roots:
      for dirpath, _, filenames in os.walk(os.path.join(_ROOT, top)):
        found += [
            os.path.relpath(os.path.join(dirpath, n), _ROOT)
            for n in filenames
            if any(fnmatch.fnmatch(n, p) for p in patterns)
        ]
    self.assertGreater(len(found), 30)
    for path in found:
      target = self.tree.by_file[path]
      self.assertEqual(target.kind, 'py_test', path)
      build = self.files[os.path.join(target.package, 'BUILD')]
      self.assertIn(f'srcs = ["{os.path.basename(path)}"]', build, path)

  def test_lazy_subpackages_are_deps_of_the_package(self):
    # The table the generator reads from the source is the one Python uses.
    import tff_ddp
    labels = {
        self.tree.label_of(self.tree.modules[f'tff_ddp.{name}'])
        for name in tff_ddp._SUBPACKAGES
    }  # pylint: disable=protected-access  # tests a private part
    package = self.tree.targets[build_files.Label('tff_ddp', 'tff_ddp')]
    self.assertEqual(
        {d for d in package.deps if isinstance(d, build_files.Label)}, labels)

  def test_third_party_distributions_are_pinned(self):
    self.assertIn('tensorflow-federated', self.tree.lock)
    used = {
        build_files.normalize_dist(d) for d in build_files.THIRD_PARTY.values()
    }
    self.assertEmpty(used - self.tree.lock)


class DirectRunTest(parameterized.TestCase):
  """Bazel's entry runs a module's tests under pytest and exits 0."""

  def test_cheap_module_runs_its_tests(self):
    result = _run([build_files.TEST_MAIN, _CHEAP_TEST], timeout=300)
    self.assertEqual(result.returncode, 0, result.stdout[-3000:])
    summary = result.stdout.strip().splitlines()[-1]
    self.assertRegex(summary, r'^\d+ passed in ', result.stdout[-3000:])
    self.assertGreater(int(re.match(r'\d+', summary).group()), 10)


# ----------------------------------------------------------------------------
# The generator on a small synthetic repository.

_CLEAN_TREE = {
    'README.md':
        '',
    'pytest.ini':
        '',
    'setup.py':
        '',
    'requirements/lock.txt':
        'absl-py==1.4.0\nnumpy==1.25.2\nscipy==1.9.3\n'
        'pytest==7.4.0\n',
    'tff_ddp/__init__.py':
        '',
    'tff_ddp/cli/__init__.py':
        'def main():\n  return 0\n',
    'tff_ddp/cli/__main__.py':
        'from tff_ddp import cli\ncli.main()\n',
    'tff_ddp/a/__init__.py':
        'from tff_ddp.a.x import f\n',
    'tff_ddp/a/x.py':
        '''
        import numpy as np

        from tff_ddp.a import y


        def f():
          from tff_ddp.a import z  # a lazy import counts
          return np.zeros(y.N + z.M)
        ''',
    'tff_ddp/a/y.py':
        'N = 1\n',
    'tff_ddp/a/z.py':
        'M = 2\n',
    'tff_ddp_tests/__init__.py':
        '',
    'tff_ddp_tests/pytest_main.py':
        'import pytest\n',
    'tff_ddp_tests/a_test.py':
        '''
        from absl.testing import absltest

        from tff_ddp.a import x


        class ATest(absltest.TestCase):

          def test_f(self):
            self.assertLen(x.f(), 3)
        ''',
    'benchmarks/_common.py':
        'import numpy\n',
    'benchmarks/bench.py':
        'import _common\nfrom tff_ddp.a import y\n',
}
_CLEAN_TREE = {
    path: textwrap.dedent(text).lstrip('\n')
    for path, text in _CLEAN_TREE.items()
}

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

exports_files([
    "pytest_main.py",
])

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
        "//tff_ddp/a:x",
    ],
)

py_library(
    name = "pytest_main",
    srcs = ["pytest_main.py"],
    testonly = True,
)
'''


def _write_tree(root, files):
  for path, text in files.items():
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, 'w', encoding='utf-8') as f:
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
        'tff_ddp/a/BUILD', 'tff_ddp/cli/BUILD', 'tff_ddp_tests/BUILD'
    ])
    self.assertEqual(files['tff_ddp/a/BUILD'], _EXPECTED_A)
    self.assertIn('\n' + build_files.TEST_RULE + '\n',
                  files['tff_ddp_tests/BUILD'])
    self.assertNotIn('load(', files['tff_ddp/a/BUILD'])
    self.assertTrue(files['tff_ddp_tests/BUILD'].endswith(_EXPECTED_TESTS_TAIL),
                    files['tff_ddp_tests/BUILD'])
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
    with open(os.path.join(root, 'tff_ddp/a/BUILD'), 'a',
              encoding='utf-8') as f:
      f.write('\npy_library(name = "extra", srcs = ["y.py"])\n')
    os.makedirs(os.path.join(root, 'tff_ddp/gone'))
    with open(os.path.join(root, 'tff_ddp/gone/BUILD'), 'w',
              encoding='utf-8') as f:
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
      ('new_module', _add('tff_ddp/a/w.py', 'from tff_ddp.a import y\n'),
       'tff_ddp/a/BUILD', 'py_library(\n    name = "w",\n    srcs = ["w.py"],'
       '\n    deps = [\n        ":y",\n    ],\n)'),
      ('new_package', _add('tff_ddp/b/__init__.py', 'import scipy\n'),
       'tff_ddp/b/BUILD', 'name = "b",\n    srcs = ["__init__.py"],\n)'),
      ('name_not_module', _add('tff_ddp/a/w.py', 'from tff_ddp.a import f\n'),
       'tff_ddp/a/BUILD', 'name = "w",\n    srcs = ["w.py"],\n'
       '    deps = [\n        ":a",'),
      ('slow_test', _SLOW_A_TEST, 'tff_ddp_tests/BUILD',
       'size = "large",\n    srcs = ["a_test.py"],\n'
       '    tags = ["slow"],'),
      ('name_table',
       _add(
           'tff_ddp/__init__.py', '''
            import importlib
            _SUB = ('a', 'cli')


            def __getattr__(name):
              if name in _SUB:
                return importlib.import_module(f'tff_ddp.{name}')
            '''), 'tff_ddp/BUILD', 'deps = [\n        "//tff_ddp/a",\n'
       '        "//tff_ddp/cli",\n    ],'),
      ('child_code',
       _replace(
           'tff_ddp_tests/a_test.py', 'import absltest\n',
           'import absltest\nimport sys\n'
           '_CODE = "from tff_ddp.a import y"\n'
           'RUN = [sys.executable, "-c", _CODE]\n'), 'tff_ddp_tests/BUILD',
       '"//tff_ddp/a:x",\n        "//tff_ddp/a:y",'),
      ('child_module',
       _replace(
           'tff_ddp_tests/a_test.py', 'import absltest\n',
           'import absltest\nimport sys\n'
           'RUN = [sys.executable, "-m", "tff_ddp.cli"]\n'),
       'tff_ddp_tests/BUILD', 'data = ["//tff_ddp/cli:tff-ddp"],'),
      ('script_sibling', lambda files: None, 'benchmarks/BUILD',
       'py_binary(\n    name = "bench",\n'
       '    srcs = ["bench.py"],\n    deps = [\n        ":_common",\n'
       '        "//tff_ddp/a:y",\n    ],'),
      ('conftest_dep', _add('tff_ddp_tests/conftest.py', 'import pytest\n'),
       'tff_ddp_tests/BUILD', 'deps = [\n        ":conftest",\n'
       '        "//tff_ddp/a:x",\n    ],'),
      # No package outside the test tree sees its libraries (VISIBILITY);
      # one that is let see them gets testonly on what depends on them.
      ('testonly_spreads',
       _add('benchmarks/bench.py', 'from tff_ddp_tests.fuzz import s\n'),
       'benchmarks/BUILD', 'testonly = True,\n    deps = [\n'
       '        "//tff_ddp_tests/fuzz:s",', {
           'tff_ddp_tests/fuzz': ('//benchmarks:__pkg__',)
       }),
  )
  def test_derives(self, edit, build, text, visibility=None):
    with mock.patch.dict(build_files.VISIBILITY, visibility or {}):
      files, problems = self._generate(
          edit, _add('tff_ddp_tests/fuzz/__init__.py', ''),
          _add('tff_ddp_tests/fuzz/s.py', 'S = 1\n'))
    self.assertEmpty(problems, '\n'.join(map(str, problems)))
    self.assertIn(text, files[build])

  @parameterized.named_parameters(
      ('unknown_distribution', _add(
          'tff_ddp/a/y.py',
          'import left_pad\nN = 1\n'), "'left_pad': '<its PyPI distribution>'"),
      ('unpinned_distribution',
       _replace('requirements/lock.txt', 'numpy==1.25.2\n',
                ''), 'not pinned in requirements/lock.txt'),
      ('missing_module',
       _add('tff_ddp/a/y.py', 'from tff_ddp.b import frequency\nN = 1\n'),
       'imports tff_ddp.b.frequency, but there is no tff_ddp.b module'),
      ('missing_name',
       _add('tff_ddp/a/y.py', 'from tff_ddp.a import frequency\nN = 1\n'),
       'there is no tff_ddp/a/frequency.py and tff_ddp/a/__init__.py '
       "defines no name 'frequency'"),
      ('dynamic_import',
       _add(
           'tff_ddp/a/y.py', '''
            import importlib
            N = 1


            def g(n):
              return importlib.import_module(n)
            '''), 'module-level tuple of module names'),
      ('unreadable_child_code',
       _replace(
           'tff_ddp_tests/a_test.py', 'import absltest\n',
           'import absltest\nimport sys\n'
           'RUN = [sys.executable, "-c", "".join(["x"])]\n'),
       'use a string constant'),
      ('module_syntax_error', _add(
          'tff_ddp/a/y.py', 'N = (\n'), 'tff_ddp/a/y.py:1: does not parse'),
      ('no_test_main', _remove('tff_ddp_tests/pytest_main.py'),
       'tff_ddp_tests/pytest_main.py:0: is missing: every py_test runs it'),
      ('lost_mark',
       _replace(
           'tff_ddp_tests/a_test.py', '  def test_f',
           '  @pytest.mark.slow\n  @parameterized.parameters(1)\n'
           '  def test_f'), 'mark the class instead'),
      ('invisible',
       _add('benchmarks/bench.py', 'from tff_ddp_tests import pytest_main\n'),
       'needs //tff_ddp_tests:pytest_main, which //benchmarks cannot see'),
      ('cycle', _add('tff_ddp/a/y.py', 'from tff_ddp.a import x\nN = 1\n'),
       '//tff_ddp/a:y -> //tff_ddp/a:x -> //tff_ddp/a:y'),
      ('removed_alias_target', _remove('tff_ddp/cli/__main__.py'),
       'alias "tff-ddp" points at tff_ddp/cli/__main__.py'),
  )
  def test_reports(self, edit, text):
    _, problems = self._generate(edit)
    self.assertNotEmpty([p for p in problems if text in str(p)],
                        f'no problem saying {text!r} among:\n' +
                        '\n'.join(map(str, problems)))

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
    with open(os.path.join(root, 'tff_ddp/a/BUILD'), encoding='utf-8') as f:
      self.assertNotIn('"w"', f.read())
