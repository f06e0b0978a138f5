"""The Bazel BUILD files are what scripts/build_files.py generates.

RepositoryTest regenerates them in memory (no TFF import) and requires the
committed files to be exactly that, with no problem reported (an import of
nothing, an unpinned distribution, a cycle, an invisible dependency, a
BUILD statement that is not a rule call); GeneratorTest shows each rule and
each problem on a small synthetic tree. `make bazel-test` builds them; Bazel
runs each py_test through tff_ddp_tests/pytest_main.py, which
test_pytest_main_runs_a_module runs on a cheap module.
"""

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

build_files = script_module.load('scripts/build_files.py')
Label = build_files.Label


def _run(args, timeout=600):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env['PYTHONPATH'] = os.pathsep.join(
      [_ROOT] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
  return subprocess.run([sys.executable] + args,
                        cwd=_ROOT,
                        env=env,
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

  def test_committed_build_files_are_the_generated_ones(self):
    self.assertEmpty(self.problems, '\n' + '\n'.join(self.problems))
    diffs = build_files.differences(_ROOT, self.files)
    self.assertEmpty(
        diffs, '\n' + ''.join(diffs)[:6000] + '\nRun `make '
        'build-files` and commit the BUILD files it writes.')

  def test_generator_sees_the_tree(self):
    # A generator that found no module would pass the comparison vacuously.
    self.assertGreater(len(self.tree.trees), 100)
    self.assertIn('tff_ddp/aggregators/BUILD', self.files)
    tests = [t for t in self.tree.targets.values() if t.kind == 'py_test']
    self.assertGreater(len(tests), 30)
    for path in ('tff_ddp/cli/__main__.py', 'tff_ddp_tests/conftest.py',
                 'tff_ddp_tests/pytest_main.py', 'tff_ddp_tests/build_test.py',
                 'tff_ddp_tests/fuzz/strategies.py', 'benchmarks/_common.py',
                 'scripts/build_files.py'):
      self.assertIn(path, self.tree.by_file)
    self.assertEqual(self.tree.by_file['tff_ddp/cli/__main__.py'].label,
                     Label('tff_ddp/cli', 'tff-ddp'))
    aggregators = self.tree.targets[Label('tff_ddp/aggregators', 'aggregators')]
    self.assertIn(
        'tensorflow-federated',
        set().union(*(self.tree.targets[d].dists for d in aggregators.deps)))
    # Every distribution THIRD_PARTY names is pinned.
    self.assertIn('tensorflow-federated', self.tree.lock)
    self.assertEmpty({
        build_files.normalize_dist(d) for d in build_files.THIRD_PARTY.values()
    } - self.tree.lock)

  def test_every_module_pytest_collects_is_a_py_test(self):
    config = configparser.ConfigParser()
    config.read(os.path.join(_ROOT, 'pytest.ini'))
    patterns = config['pytest']['python_files'].split()
    found = [
        os.path.relpath(os.path.join(directory, name), _ROOT)
        for top in config['pytest']['testpaths'].split()
        for directory, _, names in os.walk(os.path.join(_ROOT, top))
        for name in names
        if any(fnmatch.fnmatch(name, p) for p in patterns)
    ]
    self.assertGreater(len(found), 30)
    for path in found:
      target = self.tree.by_file[path]
      self.assertEqual(target.kind, 'py_test', path)
      build = self.files[os.path.join(target.label.package, 'BUILD')]
      self.assertIn(f'srcs = ["{os.path.basename(path)}"]', build, path)

  def test_lazy_subpackages_are_deps_of_the_package(self):
    # The table the generator reads from the source is the one Python uses.
    import tff_ddp
    labels = {
        self.tree.by_file[self.tree.modules[f'tff_ddp.{name}']].label
        for name in tff_ddp._SUBPACKAGES
    }  # pylint: disable=protected-access  # tests a private part
    package = self.tree.targets[Label('tff_ddp', 'tff_ddp')]
    self.assertEqual(package.deps, labels)

  def test_pytest_main_runs_a_module(self):
    # Bazel's entry runs a module's tests under pytest and exits 0 (a cheap
    # module: no TensorFlow import).
    result = _run([build_files.TEST_MAIN, 'tff_ddp_tests/utils/checks_test.py'],
                  300)
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
        'absl-py==1.4.0\nnumpy==1.25.2\nscipy==1.9.3\npytest==7.4.0\n',
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

# What the clean tree generates for two of its packages.
_EXPECTED_A = build_files.GENERATED + '''

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
package(default_visibility = ["//tff_ddp_tests:__subpackages__"])

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

_A_TEST = 'tff_ddp_tests/a_test.py'


def _sys_run(code):  # an edit of a_test.py: a line that runs a child python
  return (_A_TEST, ('import absltest\n',
                    f'import absltest\nimport sys\n{code}'))


def _write_tree(root, files):
  for path, text in files.items():
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), 'w', encoding='utf-8') as f:
      f.write(textwrap.dedent(text).lstrip('\n'))


class GeneratorTest(parameterized.TestCase):
  """Each rule of scripts/build_files.py, and each problem it reports."""

  def _tree(self, *edits):
    """The clean tree, each edit (path, text | None (delete) | (old, new))."""
    files = {p: textwrap.dedent(t).lstrip('\n') for p, t in _CLEAN_TREE.items()}
    for path, edit in edits:
      if edit is None:
        del files[path]
      elif isinstance(edit, tuple):
        self.assertIn(edit[0], files[path])
        files[path] = files[path].replace(*edit)
      else:
        files[path] = edit
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    _write_tree(root, files)
    return root

  def test_clean_tree_generates_these_files(self):
    files, problems = build_files.generate(self._tree())
    self.assertEmpty(problems, '\n'.join(problems))
    self.assertEqual(sorted(files), [
        'BUILD', 'benchmarks/BUILD', 'requirements/BUILD', 'tff_ddp/BUILD',
        'tff_ddp/a/BUILD', 'tff_ddp/cli/BUILD', 'tff_ddp_tests/BUILD'
    ])
    self.assertEqual(files['tff_ddp/a/BUILD'], _EXPECTED_A)
    tests = files['tff_ddp_tests/BUILD']  # its comment between the two
    self.assertTrue(
        tests.startswith(build_files.GENERATED + '\n\n' +
                         build_files.TEST_RULE + '\n'), tests)
    self.assertTrue(tests.endswith(_EXPECTED_TESTS_TAIL), tests)
    self.assertIn('actual = "//tff_ddp/cli:tff-ddp"', files['BUILD'])
    self.assertIn('"lock.txt"', files['requirements/BUILD'])

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
    _write_tree(root, {'tff_ddp/gone/BUILD': 'py_library(name = "gone")\n'})
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
      ('new_module', 'tff_ddp/a/BUILD',
       'py_library(\n    name = "w",\n    srcs = ["w.py"],\n    deps = [\n'
       '        ":y",\n    ],\n)',
       ('tff_ddp/a/w.py', 'from tff_ddp.a import y')),
      ('new_package', 'tff_ddp/b/BUILD',
       'name = "b",\n    srcs = ["__init__.py"],\n)',
       ('tff_ddp/b/__init__.py', 'import scipy\n')),
      ('name_not_module', 'tff_ddp/a/BUILD',
       'name = "w",\n    srcs = ["w.py"],\n    deps = [\n        ":a",',
       ('tff_ddp/a/w.py', 'from tff_ddp.a import f\n')),
      ('slow_test', 'tff_ddp_tests/BUILD',
       'size = "large",\n    srcs = ["a_test.py"],\n    tags = ["slow"],',
       (_A_TEST,
        ('class ATest', 'import pytest\n\n\n@pytest.mark.slow\nclass ATest'))),
      ('name_table', 'tff_ddp/BUILD',
       'deps = [\n        "//tff_ddp/a",\n        "//tff_ddp/cli",\n    ],',
       ('tff_ddp/__init__.py', '''
            import importlib
            _SUB = ('a', 'cli')


            def __getattr__(name):
              if name in _SUB:
                return importlib.import_module(f'tff_ddp.{name}')
            ''')),
      ('child_code', 'tff_ddp_tests/BUILD',
       '"//tff_ddp/a:x",\n        "//tff_ddp/a:y",',
       _sys_run('_CODE = "from tff_ddp.a import y"\n'
                'RUN = [sys.executable, "-c", _CODE]\n')),
      ('child_module', 'tff_ddp_tests/BUILD',
       'data = ["//tff_ddp/cli:tff-ddp"],',
       _sys_run('RUN = [sys.executable, "-m", "tff_ddp.cli"]\n')),
      ('script_sibling', 'benchmarks/BUILD',
       'py_binary(\n    name = "bench",\n    srcs = ["bench.py"],\n'
       '    deps = [\n        ":_common",\n        "//tff_ddp/a:y",\n    ],'),
      ('conftest_dep', 'tff_ddp_tests/BUILD',
       'deps = [\n        ":conftest",\n        "//tff_ddp/a:x",\n    ],',
       ('tff_ddp_tests/conftest.py', 'import pytest\n')),
      # No package outside the test tree sees its libraries (VISIBILITY);
      # one that is let see them gets testonly on what depends on them.
      ('testonly_spreads', 'benchmarks/BUILD',
       'testonly = True,\n    deps = [\n        "//tff_ddp_tests/fuzz:s",',
       ('benchmarks/bench.py', 'from tff_ddp_tests.fuzz import s\n')),
  )
  def test_derives(self, build, text, *edits):
    seen = {
        'tff_ddp_tests/fuzz':
            ('//benchmarks:__pkg__', '//tff_ddp_tests:__subpackages__')
    }
    with mock.patch.dict(build_files.VISIBILITY, seen):
      files, problems = build_files.generate(
          self._tree(('tff_ddp_tests/fuzz/__init__.py', ''),
                     ('tff_ddp_tests/fuzz/s.py', 'S = 1\n'), *edits))
    self.assertEmpty(problems, '\n'.join(problems))
    self.assertIn(text, files[build])

  @parameterized.named_parameters(
      ('unknown_distribution', "'left_pad': '<its PyPI distribution>'",
       ('tff_ddp/a/y.py', 'import left_pad\nN = 1\n')),
      ('unpinned_distribution', 'not pinned in requirements/lock.txt',
       ('requirements/lock.txt', ('numpy==1.25.2\n', ''))),
      ('missing_module',
       'imports tff_ddp.b.frequency, but there is no tff_ddp.b module',
       ('tff_ddp/a/y.py', 'from tff_ddp.b import frequency\nN = 1\n')),
      ('missing_name', 'there is no tff_ddp/a/frequency.py and '
       "tff_ddp/a/__init__.py defines no name 'frequency'",
       ('tff_ddp/a/y.py', 'from tff_ddp.a import frequency\nN = 1\n')),
      ('dynamic_import', 'module-level tuple of module names',
       ('tff_ddp/a/y.py', '''
            import importlib
            N = 1


            def g(n):
              return importlib.import_module(n)
            ''')),
      ('unreadable_child_code', 'use a string constant',
       _sys_run('RUN = [sys.executable, "-c", "".join(["x"])]\n')),
      ('module_syntax_error', 'tff_ddp/a/y.py:1: does not parse',
       ('tff_ddp/a/y.py', 'N = (\n')),
      ('no_test_main',
       'tff_ddp_tests/pytest_main.py:0: is missing: every py_test runs it',
       ('tff_ddp_tests/pytest_main.py', None)),
      ('lost_mark', 'mark the class instead',
       (_A_TEST, ('  def test_f', '  @pytest.mark.slow\n'
                  '  @parameterized.parameters(1)\n  def test_f'))),
      ('invisible',
       'needs //tff_ddp_tests:pytest_main, which //benchmarks cannot see',
       ('benchmarks/bench.py', 'from tff_ddp_tests import pytest_main\n')),
      ('cycle', '//tff_ddp/a:y -> //tff_ddp/a:x -> //tff_ddp/a:y',
       ('tff_ddp/a/y.py', 'from tff_ddp.a import x\nN = 1\n')),
      ('removed_alias_target',
       'alias "tff-ddp" points at tff_ddp/cli/__main__.py',
       ('tff_ddp/cli/__main__.py', None)),
  )
  def test_reports(self, text, *edits):
    _, problems = build_files.generate(self._tree(*edits))
    self.assertNotEmpty([p for p in problems if text in p],
                        f'no problem saying {text!r} among:\n' +
                        '\n'.join(problems))

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
