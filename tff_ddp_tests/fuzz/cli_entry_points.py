"""The fuzz entry points of the tff-ddp command: generated argv for every
subcommand.

`privacy` runs in full (pure math). `demo`, `quantiles` and `frequency` run
up to the point where they would start TFF's execution context or, above
their engines' client threshold, the batched rounds (every argument and
configuration check happens before): that call is replaced by a sentinel
(`_WouldRun`), so a case is 'documented' when the command would
run a configuration the reference check accepts. `superquantile` runs up to
the tracing of its learning process (`tff_ddp.learning.processes._trace`,
after the library validated the model, the optimizers and the calibrated
privacy), replaced by the same sentinel. Their full runs, including user
errors after TFF started (one line, exit status 2, no ServiceManager
traceback), are in cli_test.

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_cli_test.py and a row of
bad_inputs.py.
"""

import contextlib
import io
import math
import re
from unittest import mock

from hypothesis import strategies as st
import tensorflow_federated as tff

from tff_ddp import cli
from tff_ddp.analytics.frequency import rounds as frequency_rounds
from tff_ddp.analytics.quantiles import rounds as quantile_rounds
from tff_ddp.cli import quantiles as cli_quantiles
from tff_ddp.learning import processes as learning_processes
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
  with mock.patch.object(
      tff.backends.test,
      'set_sync_test_cpp_execution_context', _refuse_tff), mock.patch.object(
          learning_processes, '_trace',
          lambda *a, **k: _refuse_tff()), mock.patch.object(
              quantile_rounds, 'run_round',
              lambda *a, **k: _refuse_tff()), mock.patch.object(
                  frequency_rounds, 'run', lambda *a, **k: _refuse_tff()):
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


# The flags included: privacy's factory settings (--noise-
# multiplier relative to the clip with --bits, --l2-clip, --beta,
# --modclip-prob, --noise-sampler), quantiles' --lower and --noise-seed.
# Flags naming files (--values, --items, --domain, --output, --plot) are
# left to cli_test and cli_data_files_test: generated text would write or
# read files in the working directory.
_FLAGS = {
    'privacy':
        ('--mechanism', '--noise-multiplier', '--bits', '--l2-clip', '--beta',
         '--modclip-prob', '--l2-sensitivity', '--l1-sensitivity',
         '--local-stddev', '--noise-sampler', '--theta', '--num-trials',
         '--num-clients', '--dimension', '--rounds', '--sampling', '--rate',
         '--population', '--clients-per-round', '--delta', '--adversary',
         '--target-epsilon', '--calibrate'),
    'demo': ('--clients', '--dim', '--rounds', '--bits', '--noise-multiplier',
             '--l2-clip', '--delta', '--seed'),
    'quantiles':
        ('--methods', '--mechanisms', '--clients', '--bins', '--epsilon',
         '--delta', '--distribution', '--lower', '--upper', '--repetitions',
         '--quantiles', '--bits', '--seed', '--noise-seed'),
}
_CHOICES = {
    '--mechanism': ['gaussian', 'ddg', 'skellam', 'cpbm', 'laplace'],
    '--noise-sampler': ['table', 'exact', 'x'],
    '--sampling': ['none', 'poisson', 'without-replacement', 'self', 'x'],
    '--adversary': ['server', 'release', 'both'],
    '--calibrate': [
        'noise_multiplier', 'local_stddev', 'theta', 'num_trials', 'x'
    ],
    '--methods': ['flat', 'tree', 'haar', 'hierarchical', 'x'],
    '--mechanisms': ['discrete_gaussian', 'poisson_binomial', 'x'],
    '--distribution': ['uniform', 'chi2', 'x'],
}
_NAMES = tuple(
    sorted(
        {f for flags in _FLAGS.values() for f in flags} |
        {f[2:].replace('-', '_') for flags in _FLAGS.values() for f in flags} |
        {
            '--bogus', 'command', 'epsilon', 'target_epsilon', 'upper',
            'clients', 'l2_clip', 'noise_multiplier'
        }))


def _numbers():
  return st.one_of(fz.floats().map(repr),
                   fz.ints().map(str),
                   st.sampled_from(['1', '0.5', '10', '1e-5', '16', '2']))


def _value(flag):
  choices = _CHOICES.get(flag)
  values = [_numbers(), st.text(max_size=4)]
  if choices:
    values = [st.sampled_from(choices)] * 3 + values
  return st.one_of(*values)


@st.composite
def argvs(draw):
  command = draw(
      st.sampled_from(['privacy', 'privacy', 'demo', 'quantiles', 'nothing']))
  flags = _FLAGS.get(command, ('--bogus',))
  argv = [command]
  if command == 'privacy':
    argv += ['--mechanism', draw(_value('--mechanism'))]
    if draw(st.booleans()):
      argv += ['--delta', draw(_value('--delta'))]
  if command == 'demo':  # small and fast unless a flag says otherwise
    argv += ['--clients', '4', '--dim', '8', '--rounds', '1']
  for flag in draw(st.lists(st.sampled_from(flags + ('--bogus',)), max_size=4)):
    argv += [flag, draw(_value(flag))]
  if command == 'quantiles':
    argv = _within_tff_engine(argv)
  return dict(argv=argv)


# The largest --clients the quantiles command accepts.
_MAX_CLIENTS = 2**29


def _within_tff_engine(argv):
  """argv with a `--clients` above the TFF engine's range (AUTO_TFF_CLIENTS)
  lowered to it. Above it `quantiles` is a batched run at up to 10^6 rows,
  whose calibration alone (tree and Haar DDG histograms by their privacy
  loss distributions) takes ~7 s of CPU and ~1 GiB each at 10^6 clients:
  the scale of benchmarks/user_data_scale.py and cli_test, not of a
  generated case. Refused counts (0, negative, non-integer, above
  _MAX_CLIENTS) stay as generated."""
  out = list(argv)
  for i, arg in enumerate(out[:-1]):
    if arg == '--clients':
      try:
        value = float(out[i + 1])
      except ValueError:
        continue
      if math.isfinite(value) and value == int(value) and (
          cli_quantiles.AUTO_TFF_CLIENTS < value <= _MAX_CLIENTS):
        out[i + 1] = str(cli_quantiles.AUTO_TFF_CLIENTS)
  return out


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
  if argv[0] == 'quantiles' and not (
      math.isfinite(_flag_value(argv, '--upper', 10.0)) and
      math.isfinite(_flag_value(argv, '--lower', 0.0))):
    return 'would run with a non-finite range'
  return None


_P = ['privacy', '--delta', '1e-5']
ENTRY_POINTS = [
    fz.EntryPoint(
        name='cli.main',
        call=_main,
        baseline=dict(argv=['privacy']),
        check=_check,
        cases=argvs(),
        names=_NAMES,
        max_examples=25,
        # `quantiles` calibrates up to 6 configurations cold before it would
        # run (3 encodings x 2 mechanisms, each by its privacy loss
        # distribution since the DDG histograms carry l0 and l_inf bounds):
        # 10 s of CPU alone for `--clients 1`, up to ~3.5x that under a
        # loaded suite (a case of 22 s alone took 79 s there); a hang shows.
        budget=40.0,
        examples=[
            ('flag of another mechanism',
             dict(argv=_P + ['--mechanism', 'ddg', '--theta', '0.1']),
             'clear_error'),
            ('demo --l2-clip 1e300', dict(argv=['demo', '--l2-clip', '1e300']),
             'clear_error'),
            ('demo --l2-clip 1e300 --noise-multiplier 1e300',
             dict(argv=[
                 'demo', '--l2-clip', '1e300', '--noise-multiplier', '1e300'
             ]), 'clear_error'),
            ('quantiles cPBM bits 30, 4 clients',
             dict(argv=[
                 'quantiles', '--mechanisms', 'poisson_binomial', '--bits',
                 '30', '--clients', '4'
             ]), 'documented'),
            ('privacy unreachable target',
             dict(argv=_P + [
                 '--mechanism', 'cpbm', '--num-clients', '10', '--dimension',
                 '4', '--target-epsilon', '1e-9', '--calibrate', 'num_trials',
                 '--theta', '0.25'
             ]), 'clear_error'),
            ('privacy ddg 1e9 clients',
             dict(argv=_P + [
                 '--mechanism', 'ddg', '--l2-sensitivity', '10',
                 '--local-stddev', '10', '--num-clients', '1000000000',
                 '--dimension', '100'
             ]), 'documented'),
            # z is the factory's (relative to the clip),
            # with its --bits; without them the command refuses.
            ('privacy ddg factory z and bits',
             dict(argv=_P + [
                 '--mechanism', 'ddg', '--noise-multiplier', '3', '--bits',
                 '12', '--num-clients', '20', '--dimension', '10000'
             ]), 'documented'),
            ('privacy skellam factory z, exact sampler',
             dict(argv=_P + [
                 '--mechanism', 'skellam', '--noise-multiplier', '1.2',
                 '--bits', '16', '--num-clients', '20', '--dimension', '1000',
                 '--noise-sampler', 'exact'
             ]), 'documented'),
            ('privacy ddg z without bits',
             dict(argv=_P + [
                 '--mechanism', 'ddg', '--noise-multiplier', '3',
                 '--num-clients', '20', '--dimension', '10000'
             ]), 'clear_error'),
            ('quantiles --noise-seed (reproducible, not private)',
             dict(argv=['quantiles', '--noise-seed', '3']), 'documented'),
            ('privacy delta nan',
             dict(argv=[
                 'privacy', '--mechanism', 'gaussian', '--noise-multiplier',
                 '1', '--delta', 'nan'
             ]), 'clear_error'),
        ]),
]

# ----------------------------------------------------------------------------
# frequency and superquantile.

_NEW_FLAGS = {
    'frequency': ('--protocols', '--data', '--dim', '--clients', '--epsilon',
                  '--delta', '--num-trials', '--bins', '--budget-fraction',
                  '--clip', '--sample-items', '--rounds', '--max-items',
                  '--disjoint-rounds', '--divisor', '--seed'),
    'superquantile': ('--algorithm', '--rounds', '--clients', '--tail-fraction',
                      '--epsilon', '--delta', '--budget-ratio', '--clip',
                      '--loss-bound', '--bins', '--histogram', '--adversary',
                      '--no-privacy', '--learning-rate', '--seed'),
}
_NEW_CHOICES = {
    '--protocols': [
        'two_phase', 'multi_round', 'fixed', 'normalize', 'sample', 'x'
    ],
    '--data': ['iid', 'heterogeneous', 'docstrings', 'x'],
    '--divisor': ['l2', 'linf', 'x'],
    '--algorithm': ['deltafl', 'fedavg', 'x'],
    '--histogram': ['flat', 'tree', 'hierarchical', 'haar', 'x'],
    '--adversary': ['server', 'release', 'both'],
}
_NO_VALUE = ('--no-privacy', '--disjoint-rounds')
_NEW_NAMES = tuple(
    sorted(
        {f for flags in _NEW_FLAGS.values() for f in flags} | {
            f[2:].replace('-', '_')
            for flags in _NEW_FLAGS.values()
            for f in flags
        }
        # the library's names of what the flags set, and the quantities its
        # refusals are about
        | {
            '--bogus', 'command', 'dim', 'clients', 'num_clients', 'rounds',
            'target_epsilon', 'target_delta', 'l2_clip', 'num_bins', 'theta',
            'max_items', 'budget_fraction', 'sample_items', 'tail_fraction',
            'loss_upper_bound', 'learning_rate', 'noise_multiplier', 'method',
            'histogram', 'population', 'clients_per_round', 'num_trials',
            'epsilon', 'delta', 'expected_clients_per_round'
        }))


def _new_value(flag):
  choices = _NEW_CHOICES.get(flag)
  values = [_numbers(), st.text(max_size=4)]
  if choices:
    values = [st.sampled_from(choices)] * 3 + values
  return st.one_of(*values)


@st.composite
def new_argvs(draw):
  command = draw(st.sampled_from(['frequency', 'superquantile', 'frequency']))
  argv = [command]
  if command == 'frequency':  # small unless a flag says otherwise
    argv += ['--dim', '8']
  else:
    argv += ['--rounds', '2', '--clients', '20']
  for flag in draw(
      st.lists(st.sampled_from(_NEW_FLAGS[command] + ('--bogus',)),
               max_size=4)):
    argv += [flag] if flag in _NO_VALUE else [flag, draw(_new_value(flag))]
  return dict(argv=argv)


def _check_new(_kwargs, result):
  status, _ = result
  return None if status == 'would run' else f'status {status}'


NEW_ENTRY_POINTS = [
    fz.EntryPoint(
        name='cli.main (frequency, superquantile)',
        call=_main,
        baseline=dict(argv=['frequency', '--dim', '8']),
        check=_check_new,
        cases=new_argvs(),
        names=_NEW_NAMES,
        max_examples=6,
        budget=20.0,
        examples=[
            ('frequency --rounds (default 4) checked without multi_round',
             dict(argv=[
                 'frequency', '--clients', '3', '--dim', '8', '--protocols',
                 'fixed', '--clip', '1'
             ]), 'documented'),
            ('frequency 10^6 clients x 4096 items (a 49 GB dataset)',
             dict(argv=['frequency', '--clients', '1000000', '--dim', '4096']),
             'clear_error'),
            # The rounds compose unless the user states
            # the assumption.
            ('frequency multi_round --disjoint-rounds',
             dict(argv=[
                 'frequency', '--dim', '8', '--protocols', 'multi_round',
                 '--disjoint-rounds', '--rounds', '2', '--clients', '100'
             ]), 'documented'),
            ('frequency fixed without --clip',
             dict(argv=['frequency', '--protocols', 'fixed']), 'clear_error'),
            ('superquantile --clip 1e300 (float32 updates of +-inf)',
             dict(argv=['superquantile', '--rounds', '2', '--clip', '1e300']),
             'clear_error'),
            ('superquantile --no-privacy',
             dict(argv=['superquantile', '--no-privacy', '--rounds', '1']),
             'documented'),
        ]),
]
ENTRY_POINTS.extend(NEW_ENTRY_POINTS)
