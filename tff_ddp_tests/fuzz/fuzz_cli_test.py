"""Fuzz tests of the tff-ddp command: generated argv for every subcommand.

`privacy` runs in full (pure math). `demo` and `quantiles` run up to the
point where they would start TFF's execution context (every argument and
configuration check happens before): that call is replaced by a sentinel
(`_WouldRun`), so a case is 'documented' when the command would run a
configuration the reference check accepts. Their full runs, including user
errors after TFF started (one line, exit status 2, no ServiceManager
traceback), are in cli_test.
"""

import contextlib
import io
import math
import re
from unittest import mock

from absl.testing import parameterized
from hypothesis import strategies as st
import pytest
import tensorflow_federated as tff

from tff_ddp import cli
from tff_ddp_tests import harness
from tff_ddp_tests.fuzz import strategies as fz


class _WouldRun(BaseException):
  """Raised where the command would start TFF (not caught by the CLI)."""


class _CliError(ValueError):
  """Exit status 2 with one stderr line: a clear error if it names a flag."""


def _refuse_tff():
  raise _WouldRun()


def _main(argv):
  """(status, stdout) of cli.main(argv); status 2 with one line -> error."""
  out, err = io.StringIO(), io.StringIO()
  with mock.patch.object(tff.backends.test,
                         'set_sync_test_cpp_execution_context', _refuse_tff):
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        status = cli.main(argv)
      except SystemExit as e:
        status = e.code
      except _WouldRun:
        status = 'would run'
  lines = err.getvalue().strip().splitlines()
  if status == 2:
    if len(lines) != 1 or not lines[0].startswith('tff-ddp'):
      raise RuntimeError(f'status 2 with stderr {err.getvalue()!r}')
    raise _CliError(lines[0])
  if lines:
    raise RuntimeError(f'status {status} with stderr {err.getvalue()!r}')
  return status, out.getvalue()


_FLAGS = {
    'privacy': ('--mechanism', '--noise-multiplier', '--l2-sensitivity',
                '--l1-sensitivity', '--local-stddev', '--theta',
                '--num-trials', '--num-clients', '--dimension', '--rounds',
                '--sampling', '--rate', '--population',
                '--clients-per-round', '--delta', '--adversary',
                '--target-epsilon', '--calibrate'),
    'demo': ('--clients', '--dim', '--rounds', '--bits',
             '--noise-multiplier', '--l2-clip', '--delta', '--seed'),
    'quantiles': ('--methods', '--mechanisms', '--clients', '--bins',
                  '--epsilon', '--delta', '--distribution', '--upper',
                  '--repetitions', '--quantiles', '--bits', '--seed'),
}
_CHOICES = {
    '--mechanism': ['gaussian', 'ddg', 'cpbm', 'laplace'],
    '--sampling': ['none', 'poisson', 'without-replacement', 'self', 'x'],
    '--adversary': ['server', 'release', 'both'],
    '--calibrate': ['noise_multiplier', 'local_stddev', 'theta',
                    'num_trials', 'x'],
    '--methods': ['flat', 'tree', 'haar', 'hierarchical', 'x'],
    '--mechanisms': ['discrete_gaussian', 'poisson_binomial', 'x'],
    '--distribution': ['uniform', 'chi2', 'x'],
}
_NAMES = tuple(sorted({f for flags in _FLAGS.values() for f in flags}
                      | {f[2:].replace('-', '_')
                         for flags in _FLAGS.values() for f in flags}
                      | {'--bogus', 'command', 'epsilon', 'target_epsilon',
                         'upper', 'clients', 'l2_clip', 'noise_multiplier'}))


def _numbers():
  return st.one_of(fz.floats().map(repr), fz.ints().map(str),
                   st.sampled_from(['1', '0.5', '10', '1e-5', '16', '2']))


def _value(flag):
  choices = _CHOICES.get(flag)
  values = [_numbers(), st.text(max_size=4)]
  if choices:
    values = [st.sampled_from(choices)] * 3 + values
  return st.one_of(*values)


@st.composite
def argvs(draw):
  command = draw(st.sampled_from(['privacy', 'privacy', 'demo', 'quantiles',
                                  'nothing']))
  flags = _FLAGS.get(command, ('--bogus',))
  argv = [command]
  if command == 'privacy':
    argv += ['--mechanism', draw(_value('--mechanism'))]
    if draw(st.booleans()):
      argv += ['--delta', draw(_value('--delta'))]
  if command == 'demo':  # small and fast unless a flag says otherwise
    argv += ['--clients', '4', '--dim', '8', '--rounds', '1']
  for flag in draw(st.lists(st.sampled_from(flags + ('--bogus',)),
                            max_size=4)):
    argv += [flag, draw(_value(flag))]
  return dict(argv=argv)


def _flag_value(argv, flag, default):
  values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
  return float(values[-1]) if values else default


def _check(kwargs, result):
  argv = kwargs['argv']
  status, out = result
  if argv[0] == 'privacy':
    if status != 0:
      return f'status {status}'
    epsilons = re.findall(r'epsilon against [^:]*: (\S+)', out)
    if not epsilons:
      return 'no epsilon printed'
    return fz.first_error(*(fz.epsilon_ok(float(e)) for e in epsilons))
  if status != 'would run':
    return f'status {status}'
  if argv[0] == 'demo':
    clip = _flag_value(argv, '--l2-clip', 1.0)
    z = _flag_value(argv, '--noise-multiplier', 1.0)
    clients = _flag_value(argv, '--clients', 100)
    if not (clip >= 1e-30 and clip * max(clients, z, 1) <= 1e30):
      return 'would run with float32 data/sums out of range'
  if argv[0] == 'quantiles' and not math.isfinite(
      _flag_value(argv, '--upper', 10.0)):
    return 'would run with a non-finite range'
  return None


_P = ['privacy', '--delta', '1e-5']
ENTRY_POINTS = [
    fz.EntryPoint(
        name='cli.main', call=_main, baseline=dict(argv=['privacy']),
        check=_check, cases=argvs(), names=_NAMES, max_examples=25,
        budget=20.0,
        examples=[
            ('flag of another mechanism', dict(argv=_P + [
                '--mechanism', 'ddg', '--theta', '0.1']), 'clear_error'),
            ('demo --l2-clip 1e300', dict(argv=[
                'demo', '--l2-clip', '1e300']), 'clear_error'),
            ('demo --l2-clip 1e300 --noise-multiplier 1e300', dict(argv=[
                'demo', '--l2-clip', '1e300', '--noise-multiplier',
                '1e300']), 'clear_error'),
            ('quantiles cPBM bits 30, 4 clients', dict(argv=[
                'quantiles', '--mechanisms', 'poisson_binomial', '--bits',
                '30', '--clients', '4']), 'documented'),
            ('privacy unreachable target', dict(argv=_P + [
                '--mechanism', 'cpbm', '--num-clients', '10', '--dimension',
                '4', '--target-epsilon', '1e-9', '--calibrate',
                'num_trials', '--theta', '0.25']), 'clear_error'),
            ('privacy ddg 1e9 clients', dict(argv=_P + [
                '--mechanism', 'ddg', '--l2-sensitivity', '10',
                '--local-stddev', '10', '--num-clients', '1000000000',
                '--dimension', '100']), 'documented'),
            ('privacy delta nan', dict(argv=[
                'privacy', '--mechanism', 'gaussian', '--noise-multiplier',
                '1', '--delta', 'nan']), 'clear_error'),
        ]),
]


class FuzzCliTest(parameterized.TestCase):

  @parameterized.named_parameters((e.test_name, e) for e in ENTRY_POINTS)
  def test_generated(self, entry):
    fz.assert_generated(entry)

  @parameterized.named_parameters((e.test_name, e) for e in ENTRY_POINTS)
  def test_handwritten(self, entry):
    fz.assert_examples(entry)


@pytest.mark.slow
class SlowFuzzCliTest(parameterized.TestCase):

  @parameterized.named_parameters((e.test_name, e) for e in ENTRY_POINTS)
  def test_generated(self, entry):
    fz.assert_generated(entry, slow=True)


if __name__ == '__main__':
  harness.main()
