"""Bad inputs: what each public entry point and each first-day mistake gets.

Two batteries:

* **Entry points** (tff_ddp_tests/fuzz/*_entry_points.py): for every
  entry point of the fuzz tests, the same derandomized hypothesis cases as
  the default test suite (or `--factor` times as many; the slow suite's
  volume is 10) and the hand-written cases, each call classified
  (tff_ddp_tests/fuzz/strategies.py):

    clear error   TypeError / ValueError naming an argument
    documented    a result the entry point's reference check accepts
    unclear       another exception, or a message naming no argument
    hang          over the entry point's time budget
    memory        peak RSS grew by more than 1 GiB during the call
    silent wrong  a result the reference check rejects

* **A user's own data** (issue 43): the files spreadsheets and pipes
  write (a byte-order mark, CRLF, quoted fields, gzip, standard input)
  through `--values` / `--items`, a damaged row or an out-of-range label
  deep in a training database, two processes in two threads, and SIGINT /
  SIGTERM / SIGHUP at every phase (importing, TFF's worker start-up, the
  rounds) of a README-style script and of `tff-ddp demo`: the run ends and
  nothing of it is left (its session is empty, its output pipe closes).

* **First day** (issue 32): the mistakes a new user made after the
  arguments were accepted -- a ring sized for fewer clients, non-finite
  values, TFF's FedAvg metrics, epsilons that disagreed, a forgotten
  context, an empty round, bytes statuses, messages naming parameters the
  call does not have, a budget left unspent, bad data files on the command
  line, --help without defaults -- each run for real, with what the user
  gets printed beside the documented policy (docs/errors.md) and checked.

Test tooling beside the fuzz suite's tables (not a test module: pytest does
not collect it). Usage, from the repository's root:
  .venv/bin/python -m tff_ddp_tests.fuzz.bad_inputs [--factor 10]
      [--no-entry-points-battery] [--no-first-day-battery]
      [--no-own-data-battery]
It prints a header line (command, date UTC, seconds, load, cores), then a
Markdown table a battery, and exits 1 when any case failed its check.
"""

import argparse
import collections
import dataclasses
import datetime
import math
import os
import re
import shlex
import sys
import tempfile
import time
from typing import List, Sequence, Tuple
import warnings

import numpy as np

from tff_ddp.utils import processes
from tff_ddp_tests.fuzz import accounting_entry_points
from tff_ddp_tests.fuzz import aggregators_entry_points
from tff_ddp_tests.fuzz import analytics_entry_points
from tff_ddp_tests.fuzz import cli_entry_points
from tff_ddp_tests.fuzz import encoders_entry_points
from tff_ddp_tests.fuzz import frequency_entry_points
from tff_ddp_tests.fuzz import learning_entry_points
from tff_ddp_tests.fuzz import mechanisms_entry_points
from tff_ddp_tests.fuzz import utils_entry_points
from tff_ddp_tests.fuzz import strategies as fz

MODULES = (mechanisms_entry_points, encoders_entry_points,
           accounting_entry_points, aggregators_entry_points,
           analytics_entry_points, frequency_entry_points,
           learning_entry_points, cli_entry_points, utils_entry_points)
COLUMNS = ('clear_error', 'documented', 'unclear_error', 'hang', 'memory',
           'silent_wrong')
HEADERS = ('clear error', 'documented', 'unclear', 'hang', 'memory',
           'silent wrong')


@dataclasses.dataclass
class Table:
  """Rows (dicts) printed as a Markdown table under `title`, then `notes`
  (text columns flush left, numbers flush right); a failed check
  (`failed=True`) makes the run exit 1."""
  title: str
  columns: Sequence[Tuple[str, str]]  # (key, header)
  rows: List[dict] = dataclasses.field(default_factory=list)
  notes: List[str] = dataclasses.field(default_factory=list)
  failed: bool = False

  def add(self, **row):
    self.rows.append(row)

  def lines(self) -> List[str]:
    cells = [[
        h for _, h in self.columns
    ]] + [[str(row[key]) for key, _ in self.columns] for row in self.rows]
    cells = [[c.replace('|', r'\|') for c in r] for r in cells]  # Markdown
    widths = [max(map(len, column)) for column in zip(*cells)]
    justify = [
        str.rjust if all(isinstance(row[key], int)
                         for row in self.rows) else str.ljust
        for key, _ in self.columns
    ]
    text = [
        '| ' + ' | '.join(j(c, w)
                          for j, c, w in zip(justify, r, widths)) + ' |'
        for r in cells
    ]
    text.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    return [self.title] + text + self.notes


def classify_entry(entry, factor):
  counts = collections.Counter()
  problems = []

  def record(kwargs, outcome, source):
    counts[outcome.kind] += 1
    counts[source] += 1
    if outcome.kind not in fz.ACCEPTED:
      problems.append(f'{entry.name} [{source}] {kwargs!r:.200}: {outcome}')

  fz.run_generated(entry,
                   lambda kw, o: record(kw, o, 'generated'),
                   max_examples=entry.max_examples * factor)
  for _, kwargs, _ in entry.examples + entry.slow_examples:
    kwargs = fz.example_kwargs(entry, kwargs)
    record(kwargs, fz.classify(entry, kwargs), 'hand-written')
  return counts, problems


def entry_points(factor: int) -> Table:
  table = Table('Entry points (the fuzz suite\'s cases)',
                [('entry', 'entry point'), ('generated', 'gen'),
                 ('hand-written', 'hand')] + list(zip(COLUMNS, HEADERS)))
  problems, total = [], collections.Counter()
  for module in MODULES:
    for entry in module.ENTRY_POINTS:
      counts, found = classify_entry(entry, factor)
      table.add(
          entry=entry.name,
          **{k: counts[k] for k in ('generated', 'hand-written') + COLUMNS})
      problems += found
      total.update(counts)
  table.add(entry='total',
            **{k: total[k] for k in ('generated', 'hand-written') + COLUMNS})
  table.notes.append(
      f'\n{len(table.rows) - 1} entry points, {total["generated"]} generated '
      f'and {total["hand-written"]} hand-written inputs')
  table.notes += problems
  table.failed = bool(problems)
  return table


# -- First day ---------------------------------------------------------------


def _first_line(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f'{type(error).__name__}: {text[0] if text else ""}'


def _call(fn):
  """(result, error, [warning texts of tff_ddp]) of fn()."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    try:
      result, error = fn(), None
    except Exception as e:  # pylint: disable=broad-except  # reports whatever the code raised
      result, error = None, e
  texts = [
      str(w.message) for w in caught if issubclass(w.category, UserWarning) and
      'site-packages' not in w.filename
  ]  # not TF's or TFF's
  return result, error, texts


def _quantile_process(**kwargs):
  from tff_ddp.analytics import quantiles
  return quantiles.build_quantile_process(
      'flat', 'discrete_gaussian', 0.0, 20.0, 32, [0.25, 0.5, 0.75],
      quantiles.QuantileSetting(20, 2.0, 1e-6),
      quantiles.QuantileEstimation(estimator='interpolate'), **kwargs)


def _ddg(n=100, **kwargs):
  import tensorflow_federated as tff
  from tff_ddp import aggregators
  args = dict(noise_multiplier=1.0,
              expected_clients_per_round=n,
              bits=16,
              l2_clip=1.0)
  args.update(kwargs)
  factory = aggregators.DiscreteGaussianSumFactory.from_tff_arguments(**args)
  return factory, factory.create(tff.TensorType(np.float32, [8]))


def wrap_quantiles():
  values = np.random.default_rng(0).lognormal(size=2000).astype(np.float32)
  process = _quantile_process()
  _, error, _ = _call(lambda: process.next(process.initialize(), list(values)))
  flagged = _quantile_process(on_wrap='flag')
  out = flagged.next(flagged.initialize(), list(values))
  got = (f'{_first_line(error)[:150]}... / on_wrap=\'flag\': status '
         f'{out.measurements["status"]!r}')
  return got, (type(error).__name__ == 'RoundRefusedError' and
               out.measurements['status'] == 'sum_may_wrap')


def wrap_factory():
  _, process = _ddg(100)
  clients = [np.full(8, 0.1, np.float32)] * 1000
  _, error, _ = _call(lambda: process.next(process.initialize(), clients))
  return (_first_line(error)[:200] + '...',
          type(error).__name__ == 'RoundRefusedError' and
          'expected_clients_per_round >= 1000' in str(error))


def nan_clients():
  _, process = _ddg(10, count_noise_multiplier=1.0, bits=30)
  out = process.next(process.initialize(),
                     [np.full(8, np.nan, np.float32)] * 10)
  m = out.measurements
  counts = m.get('noised_counts', {})
  got = (f'result = noise (|sum| {np.abs(out.result).max():.2f}); '
         f'noised_counts[nonfinite] {float(counts.get("nonfinite", -1)):.1f} '
         f'of {m["participating_clients"]} clients; exact count withheld')
  return got, ('nonfinite' in counts and 'debug_counts' not in m and
               abs(float(counts['nonfinite']) - 10) < 6)


def inf_quantiles():
  from tff_ddp.analytics import quantiles
  process = quantiles.build_quantile_process(
      'flat', 'discrete_gaussian', 0.0, 20.0, 32, [0.5, 0.99],
      quantiles.QuantileSetting(200, 2.0, 1e-6),
      quantiles.QuantileEstimation(estimator='interpolate'))
  out = process.next(process.initialize(), [np.float32(np.inf)] * 200)
  result = np.asarray(out.result)
  return (f'estimates {np.round(result, 2).tolist()} (range [0, 20], top '
          f'bin [19.375, 20]), status {out.measurements["status"]!r}',
          bool(np.all(result >= 19.375 - 0.625)))  # within a bin of the top


def _fedavg(metrics_aggregator):
  import tensorflow_federated as tff
  from tff_ddp import learning
  from tff_ddp.learning import tasks
  model_fn = tasks.keras_model_fn(lambda: tasks.linear_keras_model((4,), 2),
                                  (4,))
  kwargs = {} if metrics_aggregator is None else dict(
      metrics_aggregator=metrics_aggregator)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=learning.ddp_secure_aggregator(
          noise_multiplier=1.0, expected_clients_per_round=20),
      **kwargs)
  clients = tasks.ClientArrays(np.ones([20, 6, 4], np.float32),
                               np.zeros([20, 6], np.int32))
  return process.next(process.initialize(),
                      clients.datasets(range(20), batch_size=3))


def fedavg_default_metrics():
  from tff_ddp import learning
  output = _fedavg(None)
  exact = output.metrics['client_work']['train']['num_examples']
  _, error, _ = _call(lambda: learning.round_dp_event(output.metrics))
  return (f'num_examples {exact} reaches the server exact; round_dp_event: '
          f'{_first_line(error)[:160]}...', error is not None)


def fedavg_withheld_metrics():
  from tff_ddp import learning
  output = _fedavg(learning.withhold_metrics)
  event = learning.round_dp_event(output.metrics)
  train = output.metrics['client_work']['train']
  return (f'client_work/train = {dict(train)}; round event '
          f'{type(event).__name__}', not train)


def replace_one_gaussian():
  import dp_accounting
  from tff_ddp import accounting
  acc = accounting.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  eps = acc.compose(dp_accounting.GaussianDpEvent(2.0)).get_epsilon(1e-5)
  return f'epsilon {eps:.3f} (2 alpha / z^2)', abs(eps - 4.729) < 0.01


def release_vs_server():
  import dp_accounting
  from tff_ddp import accounting
  event = dp_accounting.SampledWithoutReplacementDpEvent(
      1000, 50, dp_accounting.GaussianDpEvent(1.0))
  eps = {
      a:
          accounting.RdpAccountant(adversary=a).compose(event,
                                                        100).get_epsilon(1e-5)
      for a in ('server', 'release')
  }
  return (f'server {eps["server"]:.2f}, release {eps["release"]:.2f}',
          eps['release'] <= eps['server'])


def table_sampler_cli_vs_python():
  import tensorflow_federated as tff
  from tff_ddp import accounting
  from tff_ddp import aggregators
  value_type = tff.TensorType(np.float32, [16384])
  factory = aggregators.DiscreteGaussianSumFactory.from_tff_arguments(
      1.0, 50, 20, 1.0)
  python = accounting.RdpAccountant().compose(factory.dp_event(value_type),
                                              50).get_epsilon(1e-5)
  mech = factory.mechanism(value_type)
  code, out, _ = _cli([
      'privacy', '--mechanism', 'ddg', '--l2-sensitivity',
      repr(mech.l2_sensitivity), '--local-stddev',
      repr(mech.scaled_local_stddev), '--num-clients', '50', '--dimension',
      str(mech.output_dim), '--rounds', '50', '--delta', '1e-5', '--adversary',
      'server'
  ])
  cli = float(
      out.split('epsilon against the server (runs the protocol): ')[1].split()
      [0]) if code == 0 else float('nan')
  same = (python == cli) or (math.isfinite(python) and math.isfinite(cli) and
                             abs(python - cli) < 1e-3 * python)
  return (f'Python {python:.4g}, tff-ddp privacy {cli:.4g} (the table '
          "sampler's term: issue 34)", same)


def forgotten_context():
  import tensorflow_federated as tff
  _, process = _ddg(10)
  processes.drop_tff_contexts()
  tff.backends.native.set_sync_local_cpp_execution_context()
  try:
    _, error, _ = _call(lambda: process.next(process.initialize(),
                                             [np.zeros(8, np.float32)] * 3))
  finally:
    processes.use_test_context()
  return (_first_line(error)[:200] + '...',
          type(error).__name__ == 'MissingContextError')


def empty_round():
  from tff_ddp import accounting
  _, process = _ddg(10)
  out = process.next(process.initialize(), [])
  event = accounting.extract_dp_event(out.measurements)
  eps = accounting.RdpAccountant().compose(event).get_epsilon(1e-5)
  quantile = _quantile_process()
  status = quantile.next(quantile.initialize(), []).measurements['status']
  return (f'event {type(event).__name__}, epsilon {eps:g}; quantile status '
          f'{status!r}', type(event).__name__ == 'NoOpDpEvent' and eps == 0 and
          status == 'no_clients')


def status_as_str():
  from tff_ddp.analytics import quantiles
  process = quantiles.build_quantile_process(
      'flat', 'discrete_gaussian', 0.0, 20.0, 32, [0.5],
      quantiles.QuantileSetting(200, 2.0, 1e-6))
  values = np.random.default_rng(1).uniform(0, 20, 200).astype(np.float32)
  status = process.next(process.initialize(),
                        list(values)).measurements['status']
  return (f"{status!r}: == 'ok' {status == 'ok'}, == b'ok' "
          f"{status == b'ok'}, a str: {isinstance(status, str)}",
          status == 'ok' and status == b'ok' and isinstance(status, str))


def aggregator_message():
  from tff_ddp import learning
  _, error, _ = _call(lambda: learning.ddp_secure_aggregator(1.0, 5))
  return (_first_line(error)[:160] + '...',
          'auto_l2_clip_count_stddev' not in str(error) and
          'expected_clients_per_round=5' in str(error))


def zero_noise():
  from tff_ddp import learning
  texts = (_call(lambda: _ddg(10, noise_multiplier=0.0))[2] +
           _call(lambda: learning.ddp_secure_aggregator(0.0, 20))[2])
  return (' / '.join(t[:70] + '...' for t in texts), len(texts) == 2 and
          all('(noise_multiplier=0)' in t for t in texts))


def unspent_budget():
  from tff_ddp.analytics.frequency import process as fp
  params, _, texts = _call(
      lambda: fp.frequency_parameters('normalize', 20, 500, 2.0, 1e-5))
  return (f'theta {params.theta}, epsilon {params.epsilon:.3f} of 2; '
          f'warning: ...{texts[0][-150:] if texts else "none"}',
          len(texts) == 1 and "calibrate='num_trials'" in texts[0])


def _cli(argv):
  from tff_ddp import cli
  return cli.run_captured(argv)


def bad_files():
  got, ok = [], True
  with tempfile.TemporaryDirectory() as tmp:

    def write(name, text):
      path = os.path.join(tmp, name)
      with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
      return path

    cases = (('quantiles', '--values', os.path.join(tmp, 'missing.csv')),
             ('quantiles', '--values',
              write('empty.csv', '')), ('quantiles', '--values',
                                        write('text.csv', '1\n2\nmany\n')),
             ('quantiles', '--values', write('wide.csv', 'a,1,2\n')),
             ('quantiles', '--values', write('twice.csv', 'a,1\nb,2\na,3\n')),
             ('frequency', '--items', write('one.csv', 'u1\n'), '--domain',
              write('domain.txt',
                    'a\n')), ('frequency', '--items',
                              write('none.csv', 'client_id,item\n'), '--domain',
                              write('domain2.txt',
                                    'a\n')), ('frequency', '--items',
                                              write('nodomain.csv', 'u1,a\n')))
    for argv in cases:
      code, _, err = _cli(list(argv))
      # (In this process, TFF contexts of the scenarios above can print
      # "Exception ignored in ... ServiceManager.__del__" to stderr when the
      # command releases them; a command run on its own has none.)
      lines = [
          line for line in err.strip().splitlines()
          if line.startswith('tff-ddp ')
      ]
      ok &= code == 2 and len(lines) == 1
      got.append(lines[-1].split(': error: ', 1)[-1].
                 replace(tmp + '/', '') if lines else f'status {code}')
  return ' / '.join(got), ok


def help_defaults():
  from tff_ddp import cli
  parser = cli.build_parser()
  commands, = [
      a for a in parser._actions  # pylint: disable=protected-access  # argparse's help entries have no public API
      if isinstance(a, argparse._SubParsersAction)
  ]  # pylint: disable=protected-access  # argparse's help entries have no public API
  missing = []
  for name, command in commands.choices.items():
    for action in command._actions:  # pylint: disable=protected-access  # argparse's help entries have no public API
      if isinstance(action, argparse._HelpAction):  # pylint: disable=protected-access  # argparse's help entries have no public API
        continue
      entry = command._get_formatter()._format_action(action)  # pylint: disable=protected-access  # argparse's help entries have no public API
      if not re.search(r'default: [^)]|\(required', ' '.join(entry.split())):
        missing.append(f'{name} {action.option_strings[0]}')
  return (f'{len(missing)} options without their default' +
          (f': {", ".join(missing)}' if missing else ''), not missing)


# (issue item, the mistake, the policy of docs/errors.md, the scenario)
FIRST_DAY = (
    ('1', 'quantiles: 2000 clients, ring sized for 20',
     'refused (RoundRefusedError); on_wrap=\'flag\' never ok', wrap_quantiles),
    ('1', 'DDG sum: 1000 clients, sized for 100', 'refused, names the fix',
     wrap_factory),
    ('2', 'every client sends NaN (DDG sum)',
     'sent as zeros; count noised (count_noise_multiplier)', nan_clients),
    ('2', 'quantiles: every value +inf', 'clipped into the top bin',
     inf_quantiles),
    ('3', "FedAvg with TFF's default metrics_aggregator",
     'round_dp_event refuses the exact metrics', fedavg_default_metrics),
    ('3', 'FedAvg with withhold_metrics', 'no client metric released',
     fedavg_withheld_metrics),
    ('4', 'GaussianDpEvent(2.0), REPLACE_ONE, delta 1e-5',
     '2 alpha / z^2: 4.73', replace_one_gaussian),
    ('4', 'cohorts 50 of 1000, 100 rounds, z = 1', 'release <= server',
     release_vs_server),
    ('4', 'DDG table sampler, 50 rounds (n 50, d 16384)',
     'Python and CLI print one number', table_sampler_cli_vs_python),
    ('5', 'no set_sync_test_cpp_execution_context()',
     'MissingContextError naming the call', forgotten_context),
    ('5', 'an empty client list', 'NoOpDpEvent; status no_clients',
     empty_round),
    ('5', "status == 'ok'", 'a str (and equal to bytes)', status_as_str),
    ('5', 'ddp_secure_aggregator(1.0, 5)', 'names its own parameters',
     aggregator_message),
    ('5', 'noise_multiplier=0', 'warns under noise_multiplier', zero_noise),
    ('5', "'normalize': theta capped at 1/4, epsilon 2",
     'warns, offers the calibration that spends it', unspent_budget),
    ('6', 'tff-ddp --values / --items: bad files', 'one line, exit status 2',
     bad_files),
    ('7', 'tff-ddp COMMAND --help', 'every default shown', help_defaults),
)


def first_day() -> Table:
  table = Table('First-day mistakes (issue 32)',
                [('item', 'issue 32'), ('mistake', 'mistake'),
                 ('policy', 'policy (docs/errors.md)'), ('got', 'what it gets'),
                 ('ok', 'as documented')])
  for item, mistake, policy, scenario in FIRST_DAY:
    try:
      got, ok = scenario()
    except Exception as e:  # pylint: disable=broad-except  # reports whatever the code raised
      got, ok = f'the scenario failed: {_first_line(e)}', False
    table.add(item=item,
              mistake=mistake,
              policy=policy,
              got=' '.join(str(got).split()),
              ok='yes' if ok else 'NO')
    table.failed |= not ok
  return table


# -- A user's own data (issue 43) --------------------------------------------


def _file_forms():
  """(case, got, ok) of each file form through both readers and the CLI's
  refusal path."""
  import gzip
  import io
  from unittest import mock
  from tff_ddp.cli import data_files
  values = b'client_id,value\r\n"c1",4\r\nc2, 5\r\n'
  items = b'client_id,item\r\n"u1",a\r\nu2,"b"\r\nu1,b\r\n'
  forms = {
      'BOM': lambda b: b'\xef\xbb\xbf' + b.replace(b'\r\n', b'\n'),
      'CRLF': lambda b: b,
      'quoted': lambda b: b.replace(b'c2', b'"c2"').replace(b'u2', b'"u2"'),
      'gzip': lambda b: gzip.compress(b'\xef\xbb\xbf' + b)
  }
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name, form in forms.items():
      got = []
      for kind, data in (('values', values), ('items', items)):
        path = os.path.join(tmp, f'{name}-{kind}.csv')
        with open(path, 'wb') as f:
          f.write(form(data))
        try:
          if kind == 'values':
            result = data_files.read_values(path).tolist()
            ok = result == [4.0, 5.0]
          else:
            read = data_files.read_items(path, 100, ['a', 'b'])
            result = (read.clients, read.counts.tolist())
            ok = result == (['u1', 'u2'], [[1.0, 1.0], [0.0, 1.0]])
        except Exception as e:  # pylint: disable=broad-except  # reports whatever the code raised
          result, ok = _first_line(e), False
        got.append((f'{kind} {result}', ok))
      rows.append(
          (name, ' / '.join(g for g, _ in got), all(ok for _, ok in got)))
    stdin = io.TextIOWrapper(
        io.BufferedReader(
            io.BytesIO(gzip.compress(b'\xef\xbb\xbfvalue\n1\n2.5\n'))))
    with mock.patch.object(sys, 'stdin', stdin):
      result = data_files.read_values('-').tolist()
    rows.append(('stdin (gzip, BOM)', f'values {result}', result == [1.0, 2.5]))
  return rows


def _deep_database_rows():
  from tff_ddp.experiments import databases
  from tff_ddp_tests.experiments import bad_rows
  rows = []
  for fault, name in zip(bad_rows.FAULTS, ('damaged row', 'label 70')):
    with tempfile.TemporaryDirectory() as tmp:
      _, rowid = bad_rows.write_emnist_with_bad_row(tmp, fault, 50, 30, 2)
      _, error, _ = _call(lambda: databases.check(databases.EMNIST, tmp))
      got = (_first_line(error).replace(tmp +
                                        '/', '')[:160] if error else 'accepted')
      rows.append((f'EMNIST, {name} at row {rowid} of 1600', got,
                   type(error).__name__ == 'DatabaseError' and
                   f'row {rowid}' in str(error)))
  return rows


def _threads():
  from tff_ddp_tests.utils import signal_scripts
  result = signal_scripts.run_threads_script(timeout=600)
  rows = []
  for mode, expected, what in (('none', "['advice: yes', 'advice: yes']",
                                'no context anywhere'),
                               ('main', "['ok', 'ok']",
                                'use_test_context() in the main thread'),
                               ('each', "['ok', 'ok']",
                                'use_test_context() in each thread')):
    line = next((l for l in result.stdout.splitlines()
                 if l.startswith(f'{mode} results')), 'no result')
    alive = f'{mode} alive 0' in result.stdout
    rows.append(
        (f'two quantile processes in two threads, {what}',
         line[len(mode) + 1:] + ('' if alive else '; a thread hung'), alive and
         line.endswith(expected)))
  return rows


def _signals():
  from tff_ddp_tests.utils import signal_scripts
  rows = []
  for program, argv in (('script', ('-c', signal_scripts.SCRIPT)),
                        ('tff-ddp demo', tuple(signal_scripts.DEMO))):
    for signame in ('SIGINT', 'SIGTERM', 'SIGHUP'):
      for phase in signal_scripts.PHASES:
        what, left, status, closed = signal_scripts.run_and_signal(signame,
                                                                   phase,
                                                                   argv=argv)
        ok = (what.startswith('sent') and status not in (None, 0) and
              not left and closed)
        rows.append((f'{program}: {signame} at {phase}',
                     f'{what}; exit status {status}; left {left or "none"}; '
                     f'output {"closed" if closed else "HELD OPEN"}', ok))
  return rows


def own_data() -> Table:
  table = Table('A user\'s own data (issue 43)', [('case', 'case (issue 43)'),
                                                  ('got', 'what it gets'),
                                                  ('ok', 'as documented')])
  for part in (_file_forms, _deep_database_rows, _threads, _signals):
    try:
      found = part()
    except Exception as e:  # pylint: disable=broad-except  # reports whatever the code raised
      found = [(part.__name__, f'the scenario failed: {_first_line(e)}', False)]
    for case, got, ok in found:
      table.add(case=case,
                got=' '.join(str(got).split()),
                ok='yes' if ok else 'NO')
      table.failed |= not ok
  return table


def run(factor=1,
        entry_points_battery=True,
        first_day_battery=True,
        own_data_battery=True):
  tables = []
  if own_data_battery:
    tables.append(own_data())
  if first_day_battery:
    tables.append(first_day())
  if entry_points_battery:
    tables.append(entry_points(factor))
  return tables


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--factor',
                      type=int,
                      default=1,
                      help='generated cases: this many times the default '
                      "suite's (the slow suite: 10; default: 1)")
  for name, what in (('entry_points_battery', "the fuzz suite's entry points"),
                     ('first_day_battery',
                      'the first-day mistakes of issue 32'),
                     ('own_data_battery',
                      "a user's own data, threads and signals (issue 43)")):
    parser.add_argument('--no-' + name.replace('_', '-'),
                        dest=name,
                        action='store_false',
                        help='skip ' + what)
  argv = sys.argv[1:] if argv is None else list(argv)
  args = parser.parse_args(argv)
  started = time.time()
  processes.end_workers_at_exit()
  try:
    processes.use_test_context()
    tables = run(**vars(args))
  finally:
    processes.release_tff()
  date = datetime.datetime.fromtimestamp(started, datetime.timezone.utc)
  load = ' '.join(f'{x:.2f}' for x in os.getloadavg())
  command = shlex.join(['python', '-m', 'tff_ddp_tests.fuzz.bad_inputs'] + argv)
  print(f'\n# {command} | '
        f'{date:%Y-%m-%d %H:%M UTC} | {time.time() - started:.0f} s | '
        f'load {load} | {os.cpu_count()} cores')
  for table in tables:
    print('\n'.join([''] + table.lines()))
  return 1 if any(table.failed for table in tables) else 0


if __name__ == '__main__':
  sys.exit(main())
