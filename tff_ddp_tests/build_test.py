"""The Bazel BUILD files describe the code as it is.

`bazel test` cannot run here (Debian's bazel-bootstrap needs the network), so
this test is the check: tff_ddp_tests/build_check.py parses every BUILD file
with `ast` (never executing it) and compares it with the modules and their
imports; `python -m tff_ddp_tests.build_check` prints the same problems with
what to write. Each check is shown failing on a small synthetic tree.

How the imports that no import statement shows are counted:
- tff_ddp/__init__.py loads its subpackages lazily, by name, from its
  `_SUBPACKAGES` table (`importlib.import_module(f'tff_ddp.{name}')` after
  `if name in _SUBPACKAGES`). The checker reads that table from the source
  (a module-level tuple of strings that the importing function tests the name
  against), so //tff_ddp depends on every entry; test_lazy_subpackages below
  checks the table it reads is the one Python sees.
- Code a test runs in a child interpreter (`sys.executable, '-c', CODE` with
  CODE a string constant, the notebooks that colabs_test runs) counts as
  imported by that test; `python -m tff_ddp.cli` needs the py_binary in data.

Executed directly, every test module runs harness.main(): the default suite
runs tff_ddp_tests/utils/checks_test.py that way (it needs no TensorFlow, so
it takes a second) and compares the count of tests it ran with pytest's
collection of the file; the slow class lists every py_test module's tests
through its own `__main__` (harness.main --list) and compares them with
pytest's collection, test by test.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import parameterized
import pytest

from tff_ddp_tests import build_check
from tff_ddp_tests import harness

_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# The cheap module run directly in the default suite: no TensorFlow import.
_CHEAP_TEST = 'tff_ddp_tests/utils/checks_test.py'

# Problem kinds of build_check, by the check they belong to here.
_LISTING = ('unlisted', 'no-build', 'missing-src', 'listed-twice', 'glob',
            'src')
_DEPS = ('missing-dep', 'extra-dep', 'unknown-import', 'dynamic-import',
         'child-code', 'requirement', 'missing-data')
_TEST_MODULES = ('harness', 'size', 'tags')
_BAZEL = ('load', 'label', 'visibility', 'testonly', 'cycle', 'layout',
          'syntax', 'duplicate')


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
  return collected, result.stdout


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


def _problems_of(kinds, problems):
  return [p for p in problems if p.kind in kinds]


class RepositoryTest(parameterized.TestCase):
  """The repository's BUILD files, checked."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.problems = build_check.check(_ROOT)

  def _assert_none(self, kinds):
    found = _problems_of(kinds, self.problems)
    if found:
      self.fail('\n' + '\n'.join(map(str, found)) +
                '\n(python -m tff_ddp_tests.build_check lists them all)')

  def test_every_module_listed_once(self):
    self._assert_none(_LISTING)

  def test_deps_equal_imports(self):
    self._assert_none(_DEPS)

  def test_test_modules_end_with_harness_main_and_are_sized(self):
    self._assert_none(_TEST_MODULES)

  def test_bazel_consistency(self):
    self._assert_none(_BAZEL)

  def test_every_problem_kind_is_checked_above(self):
    kinds = {p.kind for p in self.problems}
    self.assertEmpty(kinds - set(_LISTING + _DEPS + _TEST_MODULES + _BAZEL))

  def test_checker_sees_the_tree(self):
    # A checker that found no BUILD file or module would pass vacuously.
    repo = build_check.Repository(_ROOT)
    self.assertIn('tff_ddp/aggregators', repo.builds)
    self.assertIn('tff_ddp_tests/fuzz', repo.builds)
    self.assertGreater(len(repo.py_files), 100)
    tests = [t for t in repo.targets.values() if t.kind == 'py_test']
    self.assertGreater(len(tests), 30)
    self.assertIn(build_check.Label('tff_ddp/cli', 'tff-ddp'), repo.targets)
    for path in ('tff_ddp_tests/conftest.py', 'tff_ddp_tests/harness.py',
                 'tff_ddp/cli/__main__.py', 'tff_ddp_tests/fuzz/strategies.py',
                 'tff_ddp_tests/build_test.py'):
      self.assertIsNotNone(repo.owner(path), path)

  def test_lazy_subpackages(self):
    # The table the checker reads from the source is the one Python uses.
    import tff_ddp  # pylint: disable=g-import-not-at-top
    imports, problems = build_check.module_imports(_ROOT,
                                                   'tff_ddp/__init__.py')
    self.assertEmpty(problems)
    lazy = {i.module for i in imports if i.how == 'dynamic'}
    self.assertEqual(lazy, {f'tff_ddp.{n}' for n in tff_ddp._SUBPACKAGES})  # pylint: disable=protected-access
    target = build_check.Repository(_ROOT).targets[
        build_check.Label('tff_ddp', 'tff_ddp')]
    self.assertIn('//tff_ddp/aggregators', target.attrs['deps'])

  def test_third_party_distributions_are_pinned(self):
    repo = build_check.Repository(_ROOT)
    self.assertIn('tensorflow-federated', repo.lock)
    used = {build_check.normalize_dist(d)
            for d in build_check.THIRD_PARTY.values()}
    self.assertEmpty(used - repo.lock)


class DirectRunTest(parameterized.TestCase):
  """A test module executed directly runs all its tests and exits 0."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.collected = _pytest_collected([_CHEAP_TEST])[0][_CHEAP_TEST]

  def test_cheap_module_runs_its_tests(self):
    result = _run([_CHEAP_TEST], timeout=300)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    ran = re.findall(r'^Ran (\d+) tests? in ', result.stderr, re.MULTILINE)
    self.assertLen(ran, 1, result.stderr[-3000:])
    self.assertRegex(result.stderr, r'\nOK\b')
    self.assertGreater(len(self.collected), 10)
    self.assertEqual(int(ran[0]), len(self.collected))

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
    collected, _ = _pytest_collected(['x_test.py'], rootdir=root)
    self.assertEqual(collected['x_test.py'], {'XTest.test_method',
                                              'test_function'})
    mismatch = _listing_mismatch('x_test.py', result.stdout.splitlines(),
                                 collected['x_test.py'])
    self.assertIn("would not run ['test_function']", mismatch)


@pytest.mark.slow
class EveryTestModuleTest(parameterized.TestCase):
  """Each py_test module's own __main__ lists exactly pytest's tests."""

  def test_every_module_lists_what_pytest_collects(self):
    repo = build_check.Repository(_ROOT)
    paths = sorted(
        os.path.join(t.package, t.srcs[0]) for t in repo.targets.values()
        if t.kind == 'py_test' and t.srcs)
    self.assertGreater(len(paths), 30)
    # Modules without harness.main are reported by test_test_modules_...;
    # running their own __main__ would run (not list) their tests.
    runnable = [p for p in paths if build_check.ends_with_harness_main(
        os.path.join(_ROOT, p))]
    result = _run(['-m', 'tff_ddp_tests.build_check', '--list-tests']
                  + runnable, timeout=1800)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    listed = json.loads(result.stdout.splitlines()[-1])
    collected, _ = _pytest_collected(runnable)
    mismatches = [_listing_mismatch(p, listed[p], collected[p])
                  for p in runnable]
    self.assertEmpty([m for m in mismatches if m], '\n'.join(
        m for m in mismatches if m))


# ----------------------------------------------------------------------------
# The checks fail when they should: a small synthetic repository.

_CLEAN_TREE = {
    'requirements/lock.txt': 'absl-py==1.4.0\nnumpy==1.25.2\nscipy==1.9.3\n',
    'tff_ddp/__init__.py': '',
    'tff_ddp/BUILD': '''
        load("@rules_python//python:defs.bzl", "py_library")

        package(default_visibility = ["//visibility:public"])

        py_library(
            name = "tff_ddp",
            srcs = ["__init__.py"],
        )
        ''',
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
    'tff_ddp/a/BUILD': '''
        load("@rules_python//python:defs.bzl", "py_library")
        load("@pypi//:requirements.bzl", "requirement")

        package(default_visibility = ["//visibility:public"])

        py_library(
            name = "a",
            srcs = ["__init__.py"],
            deps = [":x"],
        )

        py_library(
            name = "x",
            srcs = ["x.py"],
            deps = [
                ":y",
                ":z",
                requirement("numpy"),
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
        ''',
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
    'tff_ddp_tests/BUILD': '''
        load("@rules_python//python:defs.bzl", "py_library", "py_test")
        load("@pypi//:requirements.bzl", "requirement")

        py_library(
            name = "tff_ddp_tests",
            srcs = ["__init__.py"],
            testonly = True,
        )

        py_library(
            name = "harness",
            srcs = ["harness.py"],
            testonly = True,
        )

        py_test(
            name = "a_test",
            size = "small",
            srcs = ["a_test.py"],
            deps = [
                ":harness",
                "//tff_ddp/a:x",
                requirement("absl-py"),
            ],
        )
        ''',
}
_CLEAN_TREE = {path: textwrap.dedent(text).lstrip('\n')
               for path, text in _CLEAN_TREE.items()}


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
    files[path] = text
  return edit


def _remove(path):
  def edit(files):
    del files[path]
  return edit


class CheckerFailsTest(parameterized.TestCase):
  """Each check on a tree that breaks it (and passes on the clean tree)."""

  def _problems(self, *edits):
    files = dict(_CLEAN_TREE)
    for edit in edits:
      edit(files)
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    _write_tree(root, files)
    return build_check.check(root)

  def test_clean_tree_passes(self):
    self.assertEmpty(self._problems())

  @parameterized.named_parameters(
      ('missing_src',
       _replace('tff_ddp/a/BUILD', '"y.py"', '"y.py", "gone.py"'),
       'missing-src', 'lists gone.py, which does not exist'),
      ('removed_module',
       _remove('tff_ddp/a/z.py'),
       'missing-src', 'lists z.py'),
      ('missing_dep',
       _replace('tff_ddp/a/BUILD', '        ":y",\n', ''),
       'missing-dep', 'add to deps: ":y"'),
      ('missing_lazy_dep',
       _replace('tff_ddp/a/BUILD', '        ":z",\n', ''),
       'missing-dep', 'add to deps: ":z"'),
      ('missing_requirement',
       _replace('tff_ddp/a/BUILD', '        requirement("numpy"),\n', ''),
       'missing-dep', 'add to deps: requirement("numpy")'),
      ('extra_dep',
       _replace('tff_ddp/a/BUILD', '":y",', '":y",\n        "//tff_ddp",'),
       'extra-dep', 'remove: "//tff_ddp"'),
      ('extra_requirement',
       _replace('tff_ddp/a/BUILD', 'requirement("numpy"),',
                'requirement("numpy"), requirement("scipy"),'),
       'extra-dep', 'remove: requirement("scipy")'),
      ('unlisted_file',
       _add('tff_ddp/a/w.py', 'from tff_ddp.a import y\n'),
       'unlisted', 'tff_ddp/a/w.py is in no target; add:'),
      ('unlisted_test',
       _add('tff_ddp_tests/b_test.py',
            _CLEAN_TREE['tff_ddp_tests/a_test.py']),
       'unlisted', 'py_test('),
      ('no_build_file',
       _add('tff_ddp/b/__init__.py', 'import numpy\n'),
       'no-build', 'create tff_ddp/b/BUILD'),
      ('listed_twice',
       _replace('tff_ddp/a/BUILD', 'srcs = ["z.py"]', 'srcs = ["y.py"]'),
       'listed-twice', 'y.py is in the srcs of "y", "z"'),
      ('glob',
       _replace('tff_ddp/a/BUILD', 'srcs = ["z.py"]',
                'srcs = glob(["z*.py"])'),
       'glob', 'list every file explicitly'),
      ('unknown_import',
       _add('tff_ddp/a/y.py', 'import left_pad\nN = 1\n'),
       'unknown-import', "'left_pad': '<its PyPI distribution>'"),
      ('unknown_import_in_unlisted_file',
       _add('tff_ddp/a/w.py', 'import left_pad\n'),
       'unknown-import', "'left_pad': '<its PyPI distribution>'"),
      ('missing_internal_module',
       _add('tff_ddp/a/y.py', 'from tff_ddp.a import frequency\nN = 1\n'),
       'unknown-import', 'imports tff_ddp.a.frequency: there is no '
       'tff_ddp/a/frequency.py'),
      ('unpinned_distribution',
       _replace('requirements/lock.txt', 'numpy==1.25.2\n', ''),
       'requirement', 'not pinned'),
      ('dynamic_import',
       _add('tff_ddp/a/y.py',
            'import importlib\nN = 1\n'
            'def g(n):\n  return importlib.import_module(n)\n'),
       'dynamic-import', 'module-level tuple of module names'),
      ('name_table',
       _add('tff_ddp/__init__.py',
            'import importlib\n_SUB = ("a",)\n'
            'def __getattr__(n):\n  if n in _SUB:\n'
            '    return importlib.import_module(f"tff_ddp.{n}")\n'),
       'missing-dep', '"//tff_ddp/a"'),
      ('child_code',
       _add('tff_ddp_tests/a_test.py',
            _CLEAN_TREE['tff_ddp_tests/a_test.py'].replace(
                'import absltest\n',
                'import absltest\nimport subprocess, sys\n'
                '_CODE = "from tff_ddp.a import y"\n'
                'RUN = [sys.executable, "-c", _CODE]\n')),
       'missing-dep', '"//tff_ddp/a:y"'),
      ('no_harness_main',
       _replace('tff_ddp_tests/a_test.py', 'harness.main()',
                'absltest.main()'),
       'harness', 'must end with'),
      ('slow_untagged',
       _replace('tff_ddp_tests/a_test.py', 'class ATest',
                'import pytest\n\n@pytest.mark.slow\nclass ATest'),
       'tags', 'add tags = ["slow"]'),
      ('lost_mark',
       _replace('tff_ddp_tests/a_test.py', '  def test_f',
                '  @pytest.mark.slow\n  @parameterized.parameters(1)\n'
                '  def test_f'),
       'tags', 'mark the class instead'),
      ('no_size',
       _replace('tff_ddp_tests/BUILD', 'size = "small",', ''),
       'size', 'needs size'),
      ('test_named_wrong',
       _replace('tff_ddp_tests/BUILD', 'name = "a_test"', 'name = "a"'),
       'layout', 'name it "a_test"'),
      ('not_loaded',
       _replace('tff_ddp/BUILD', 'load(', '# load('),
       'load', 'py_library is used but not loaded'),
      ('invisible',
       _replace('tff_ddp/a/BUILD', '//visibility:public',
                '//visibility:private'),
       'visibility', '"//tff_ddp/a:x" is not visible to //tff_ddp_tests'),
      ('cycle',
       _replace('tff_ddp/a/BUILD', 'srcs = ["y.py"],',
                'srcs = ["y.py"],\n    deps = [":x"],'),
       'cycle', '//tff_ddp/a:x -> //tff_ddp/a:y -> //tff_ddp/a:x'),
  )
  def test_fails(self, edit, kind, text):
    problems = self._problems(edit)
    matching = [p for p in problems if p.kind == kind and text in p.message]
    self.assertNotEmpty(
        matching, f'no [{kind}] problem saying {text!r} among:\n'
        + '\n'.join(map(str, problems)))

  def test_suggestion_is_a_valid_target(self):
    # The snippet printed for an unlisted module, pasted, fixes the tree.
    problems = self._problems(_add('tff_ddp/a/w.py',
                                   'import numpy\nfrom tff_ddp.a import y\n'))
    (unlisted,) = [p for p in problems if p.kind == 'unlisted']
    snippet = textwrap.dedent(unlisted.message.split('add:\n', 1)[1])
    self.assertIn('":y"', snippet)
    self.assertIn('requirement("numpy")', snippet)
    fixed = self._problems(
        _add('tff_ddp/a/w.py', 'import numpy\nfrom tff_ddp.a import y\n'),
        lambda files: files.__setitem__(
            'tff_ddp/a/BUILD', files['tff_ddp/a/BUILD'] + '\n' + snippet
            + '\n'))
    self.assertEmpty(fixed)

  def test_command_reports_and_exits_1(self):
    files = dict(_CLEAN_TREE)
    _replace('tff_ddp/a/BUILD', '        ":y",\n', '')(files)
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    _write_tree(root, files)
    result = _run(['-m', 'tff_ddp_tests.build_check', '--root', root])
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn('tff_ddp/a/BUILD:', result.stdout)
    self.assertIn('add to deps: ":y"', result.stdout)


if __name__ == '__main__':
  harness.main()
