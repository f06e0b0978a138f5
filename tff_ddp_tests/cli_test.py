"""The tff-ddp command: help, one-line errors, the privacy report, the jobs."""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import parameterized
import numpy as np
import pytest

from tff_ddp import cli
from tff_ddp.cli import demo
from tff_ddp.cli import frequency as frequency_cli
from tff_ddp.cli import quantiles as quantiles_cli
from tff_ddp.cli import superquantile as superquantile_cli

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_run = cli.run_captured


class HelpTest(parameterized.TestCase):

  @parameterized.parameters(([],), (['demo'],), (['privacy'],),
                            (['quantiles'],), (['frequency'],),
                            (['superquantile'],), (['train'],))
  def test_help(self, argv):
    code, out, _ = _run(argv + ['--help'])
    self.assertEqual(code, 0)
    self.assertIn('usage: tff-ddp', out)
    if argv:  # every default is shown
      self.assertIn('(default:', out)

  def test_every_option_of_every_command_shows_its_default(self):
    # argparse shows defaults only for options with a help text; every
    # option here says its default, or that it is required.
    parser = cli.build_parser()
    commands, = [
        a for a in parser._actions  # pylint: disable=protected-access  # argparse's help entries have no public API
        if isinstance(a, argparse._SubParsersAction)
    ]  # pylint: disable=protected-access  # argparse's help entries have no public API
    self.assertContainsSubset(
        {'demo', 'privacy', 'quantiles', 'frequency', 'superquantile'},
        commands.choices)
    for name, command in commands.choices.items():
      for action in command._actions:  # pylint: disable=protected-access  # argparse's help entries have no public API
        if isinstance(action, argparse._HelpAction):  # pylint: disable=protected-access  # argparse's help entries have no public API
          continue
        # The entry format_help prints for the option.
        formatter = command._get_formatter()  # pylint: disable=protected-access  # argparse's help entries have no public API
        entry = ' '.join(formatter._format_action(action).split())  # pylint: disable=protected-access  # argparse's help entries have no public API
        with self.subTest(command=name, option=action.option_strings):
          # '(default: X)', a default said in words ('default: all'), or
          # '(required...'.
          self.assertRegex(entry, r'default: [^)]|\(required')


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class ErrorTest(parameterized.TestCase):

  @parameterized.parameters(
      (['demo', '--bits', '31'], '--bits must be an integer in [1, 30]'),
      (['demo', '--delta', '2'], '--delta must be a number in (0, 1)'),
      (['demo', '--delta', 'nan'], '--delta must be'),
      (['demo', '--clients', '0'], '--clients must be an integer >= 1'),
      (['demo', '--clients', '2.5'], '--clients must be an integer'),
      (['demo', '--bits', '2'], 'Use bits >= '),
      (['demo', '--noise-multiplier', '1e-300', '--clients', '10'
       ], 'sigma/gamma'),
      (['quantiles', '--quantiles', '1.5'], '--quantiles must be'),
      (['quantiles', '--epsilon', '0'], '--epsilon must be'),
      (['quantiles', '--methods', 'tree', '--bins', '24'], 'power of two'),
      (['quantiles', '--clients', '5000', '--bits', '8'], 'bits >='),
      (['frequency', '--protocols', 'fixed', '--clients', '20'
       ], 'fixed needs --clip'),
      (['frequency', '--protocols', 'ocpbm'], 'invalid choice'),
      (['frequency', '--budget-fraction', '1'], '--budget-fraction must be'),
      (['frequency', '--clients', '10', '--epsilon', '0.1'
       ], 'no interior minimum'),
      (['frequency', '--data', 'sentiment140'], 'invalid choice'),
      (['privacy', '--mechanism', 'ddg', '--theta', '0.1', '--delta', '1e-5'
       ], '--theta do(es) not apply to --mechanism ddg'),
      (['superquantile', '--tail-fraction', '0'], '--tail-fraction must be'),
      (['superquantile', '--clients', '3000'], '--clients must be'),
      (['superquantile', '--histogram', 'tree', '--bins', '24'
       ], 'power of two'),
      # Every client every round: no amplification, and no noise fits in
      # the 18-bit ring of 2500 clients' histograms.
      ([
          'superquantile', '--rounds', '1', '--epsilon', '1e-6', '--clients',
          '2500'
      ], 'unreachable'),
      ([
          'privacy', '--mechanism', 'cpbm', '--theta', '0.3', '--num-trials',
          '16', '--num-clients', '10', '--dimension', '4', '--delta', '1e-5'
      ], '--theta must be a number in (0, 0.25]'),
      ([
          'privacy', '--mechanism', 'ddg', '--l2-sensitivity', '10',
          '--num-clients', '10', '--dimension', '4', '--delta', '1e-5'
      ], 'needs --local-stddev'),
      ([
          'privacy', '--mechanism', 'gaussian', '--noise-multiplier', '1',
          '--delta', '1e-5', '--sampling', 'poisson'
      ], 'needs --rate'),
      ([
          'privacy', '--mechanism', 'gaussian', '--noise-multiplier', '1',
          '--delta', '1e-5', '--rate', '0.1'
      ], 'need --sampling'),
      ([
          'privacy', '--mechanism', 'gaussian', '--noise-multiplier', '1',
          '--delta', '2'
      ], '--delta must be a number in (0, 1)'),
      ([
          'privacy', '--mechanism', 'cpbm', '--num-clients', '10',
          '--dimension', '4', '--delta', '1e-5', '--target-epsilon', '1e-9',
          '--calibrate', 'num_trials', '--theta', '0.25'
      ], 'unreachable'),
      ([
          'privacy', '--mechanism', 'cpbm', '--num-trials', '16',
          '--num-clients', '10', '--dimension', '4', '--delta', '1e-5',
          '--target-epsilon', '1', '--calibrate', 'num_trials', '--theta',
          '0.25'
      ], 'is what --target-epsilon calibrates'),
  )
  def test_user_errors_are_one_line_with_status_2(self, argv, message):
    code, _, err = _run(argv)
    self.assertEqual(code, 2)
    lines = err.strip().splitlines()
    self.assertLen(lines, 1, err)
    self.assertIn('error:', lines[0])
    self.assertIn(message, lines[0])


class RingTest(parameterized.TestCase):

  def test_the_ring_is_sized_for_the_clients(self):
    # 10^6 values were refused with "bits=18 is too
    # small ... use bits >= 25"; the number of clients is public, so the
    # command sizes the ring itself unless --bits is given.
    from tff_ddp.analytics.quantiles import encodings as hg
    encodings = [hg.encoding('tree', 32)]
    bits, configurations = quantiles_cli.configure(encodings,
                                                   ['discrete_gaussian'], 32,
                                                   10**6, 1.0, 1e-7)
    self.assertEqual(bits, 25)
    self.assertLen(configurations, 1)
    self.assertEqual(
        quantiles_cli.configure(encodings, ['discrete_gaussian'], 32, 200, 1.0,
                                1e-5)[0], 18)
    with self.assertRaisesRegex(ValueError, 'use bits >= 25'):
      quantiles_cli.configure(encodings, ['discrete_gaussian'],
                              32,
                              10**6,
                              1.0,
                              1e-7,
                              bits=18)


class EngineTest(parameterized.TestCase):
  """Which engine runs, and the report says which."""

  def _quantile_lines(self, n, **kwargs):
    lines = []
    values = np.random.default_rng(1).uniform(0, 10, n)
    quantiles_cli.run(methods=('flat',),
                      mechanisms=('discrete_gaussian',),
                      num_bins=8,
                      epsilon=2.0,
                      values=values,
                      print_fn=lines.append,
                      **kwargs)
    return lines

  def test_quantiles_batched_engine_says_so(self):
    lines = self._quantile_lines(2000,
                                 engine='batched',
                                 progress=lambda *a: None)
    self.assertIn('distributed rows: batched rounds', '\n'.join(lines))

  def test_quantiles_auto_engine_batches_above_the_threshold(self):
    with mock.patch.object(quantiles_cli, 'AUTO_TFF_CLIENTS', 100):
      text = '\n'.join(self._quantile_lines(200, progress=lambda *a: None))
    self.assertIn('distributed rows: batched rounds', text)
    self.assertNotIn("TFF's process", text)

  def test_frequency_batched_engine_says_so(self):
    lines = []
    counts = np.random.default_rng(2).poisson(0.5, (300, 5))
    rows = frequency_cli.run(protocols=('normalize',),
                             counts=counts,
                             epsilon=8.0,
                             print_fn=lines.append,
                             engine='batched',
                             progress=lambda *a: None)
    self.assertIn('engine: batched rounds for normalize', '\n'.join(lines))
    self.assertLen(rows[0].estimate, 5)

  def test_progress_lines_go_to_stderr(self):
    with mock.patch.object(quantiles_cli.common.ProgressLines,
                           '__init__',
                           return_value=None) as init, mock.patch.object(
                               quantiles_cli.common.ProgressLines,
                               '__call__') as call:
      self._quantile_lines(500, engine='batched')
    init.assert_called_once_with('quantiles')
    self.assertEqual(call.call_args[0][1:], (500, 500))


class PrivacyTest(parameterized.TestCase):

  def test_both_adversaries_are_labelled(self):
    code, out, _ = _run([
        'privacy', '--mechanism', 'ddg', '--l2-sensitivity', '1000',
        '--local-stddev', '200', '--num-clients', '100', '--dimension', '65536',
        '--rounds', '1000', '--sampling', 'without-replacement', '--population',
        '10000', '--delta', '1e-6'
    ])
    self.assertEqual(code, 0)
    self.assertIn('epsilon against the server (runs the protocol): 11.507', out)
    self.assertIn('epsilon against readers of the release: 4.0212', out)
    self.assertIn('zero-out', out)
    self.assertIn(
        'WBK19',
        out.replace('Wang, Balle &\nKasiviswanathan',
                    'WBK19').replace('Wang, Balle & Kasiviswanathan', 'WBK19'))

  def test_skellam(self):
    # TFF's Skellam run, accounted from its measurements. At this noise
    # (central stddev 3x the l2 sensitivity) the Skellam's excess over the
    # Gaussian term is ~1e-7: the same epsilon as the DDG to 6 digits.
    common = [
        '--l2-sensitivity', '1000', '--local-stddev', '300', '--num-clients',
        '100', '--dimension', '65536', '--delta', '1e-6'
    ]
    code, out, _ = _run(['privacy', '--mechanism', 'skellam'] + common)
    self.assertEqual(code, 0)
    self.assertIn('epsilon against the server (runs the protocol): 1.56055',
                  out)
    _, ddg, _ = _run(['privacy', '--mechanism', 'ddg'] + common)
    self.assertEqual(out.splitlines()[0], ddg.splitlines()[0])
    code, out, _ = _run([
        'privacy', '--mechanism', 'skellam', '--l2-sensitivity', '1000',
        '--num-clients', '100', '--dimension', '65536', '--delta', '1e-6'
    ])
    self.assertNotEqual(code, 0)

  def test_one_adversary_and_self_sampling(self):
    code, out, _ = _run([
        'privacy', '--mechanism', 'ddg', '--l2-sensitivity', '1000',
        '--local-stddev', '200', '--num-clients', '100', '--dimension', '65536',
        '--rounds', '1000', '--sampling', 'self', '--rate', '0.01', '--delta',
        '1e-6', '--adversary', 'server'
    ])
    self.assertEqual(code, 0)
    self.assertIn('against the server (runs the protocol): 1.0528', out)
    self.assertNotIn('release:', out)

  def test_calibration(self):
    code, out, _ = _run([
        'privacy', '--mechanism', 'ddg', '--l2-sensitivity', '1000',
        '--num-clients', '100', '--dimension', '65536', '--rounds', '100',
        '--sampling', 'without-replacement', '--population', '10000', '--delta',
        '1e-6', '--target-epsilon', '3'
    ])
    self.assertEqual(code, 0)
    self.assertIn('local-stddev:', out)
    self.assertIn('calibrated to epsilon 3 against the server', out)

  def test_gaussian_is_central(self):
    code, out, _ = _run([
        'privacy', '--mechanism', 'gaussian', '--noise-multiplier', '1.1',
        '--rounds', '100', '--sampling', 'poisson', '--rate', '0.01', '--delta',
        '1e-5'
    ])
    self.assertEqual(code, 0)
    self.assertIn('add/remove (central Gaussian)', out)
    self.assertIn('protects only against readers of the release', out)
    # The server adds the noise: infinite against it, as `train
    # --mechanism gaussian` prints.
    self.assertRegex(out, r'against the server \(runs the protocol\): inf ')
    code, _, err = _run([
        'privacy', '--mechanism', 'gaussian', '--delta', '1e-5',
        '--target-epsilon', '2', '--adversary', 'server'
    ])
    self.assertEqual(code, 2)
    self.assertIn('calibrate against the release', err)

  # (d, n, bits, z): settings where reading z against the inflated
  # sensitivity would print 0.49x / 0.83x the factory's epsilon.
  @parameterized.parameters(('ddg', 10**4, 20, 12, 3.0),
                            ('ddg', 1000, 50, 16, 1.2),
                            ('skellam', 10**4, 20, 12, 3.0))
  def test_noise_multiplier_is_the_factorys(self, mechanism, d, n, bits, z):
    import tensorflow_federated as tff
    from tff_ddp import accounting
    from tff_ddp import aggregators
    factory = {
        'ddg': aggregators.DiscreteGaussianSumFactory,
        'skellam': aggregators.SkellamSumFactory,
    }[mechanism].from_tff_arguments(noise_multiplier=z,
                                    expected_clients_per_round=n,
                                    bits=bits,
                                    l2_clip=0.3)
    value_type = tff.TensorType(np.float32, [d])
    expected = accounting.RdpAccountant().compose(factory.dp_event(value_type),
                                                  10).get_epsilon(1e-5)
    code, out, err = _run([
        'privacy', '--mechanism', mechanism, '--noise-multiplier',
        str(z), '--bits',
        str(bits), '--num-clients',
        str(n), '--dimension',
        str(d), '--l2-clip', '0.3', '--rounds', '10', '--delta', '1e-5',
        '--adversary', 'server'
    ])
    self.assertEqual(code, 0, err)
    printed = float(out.split('(runs the protocol): ')[1].split()[0])
    self.assertAlmostEqual(printed, expected, delta=1e-5 * expected)
    # The run's measured numbers, printed, give the same epsilon.
    mechanism_built = factory.mechanism(value_type)
    self.assertIn(f'padded_dim {mechanism_built.output_dim}', out)
    code, measured, _ = _run([
        'privacy', '--mechanism', mechanism, '--l2-sensitivity',
        repr(mechanism_built.l2_sensitivity), '--local-stddev',
        repr(mechanism_built.scaled_local_stddev), '--num-clients',
        str(n), '--dimension',
        str(mechanism_built.output_dim), '--rounds', '10', '--delta', '1e-5',
        '--adversary', 'server'
    ])
    self.assertEqual(code, 0)
    self.assertIn(f'(runs the protocol): {printed:.6g} ', measured)

  def test_factory_and_measured_flags_do_not_mix(self):
    code, _, err = _run([
        'privacy', '--mechanism', 'ddg', '--l2-sensitivity', '303',
        '--noise-multiplier', '3', '--num-clients', '20', '--dimension',
        '16384', '--delta', '1e-5'
    ])
    self.assertEqual(code, 2)
    self.assertIn('relative to the l2 clip', err)
    code, out, _ = _run([
        'privacy', '--mechanism', 'ddg', '--bits', '16', '--num-clients', '100',
        '--dimension', '1000', '--delta', '1e-5', '--target-epsilon', '3'
    ])
    self.assertEqual(code, 0)
    self.assertIn('noise-multiplier: ', out)
    self.assertIn("the factory's run: noise multiplier", out)


@pytest.mark.slow
class JobsTest(parameterized.TestCase):

  def test_small_demo_runs_and_reports(self):
    lines = []
    rows = demo.run(num_clients=4,
                    dim=16,
                    rounds=2,
                    bits=(16,),
                    noise_multiplier=1.0,
                    print_fn=lines.append)
    self.assertLen(rows, 3)
    # pylint: disable-next=unbalanced-tuple-unpacking  # the rows appended by print_fn, their count asserted above
    ddg_row, gauss_row, plain_row = rows
    self.assertEqual((ddg_row.bits, ddg_row.adversary), (16, 'server'))
    self.assertEqual(gauss_row.adversary, 'release')
    # eps of the DDG (zero-out) and of the Gaussian (add/remove) with the
    # same central noise are close when tau is negligible.
    self.assertAlmostEqual(ddg_row.epsilon / gauss_row.epsilon, 1.0, delta=0.1)
    self.assertLess(plain_row.mse, 1e-10)
    self.assertGreater(ddg_row.mse, 0)
    self.assertFalse(ddg_row.wrapped)
    self.assertIn('DDG (distributed, SecAgg)', lines[0])

  def test_small_quantile_experiment_runs_and_reports(self):
    lines = []
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder)
    output = os.path.join(folder, 'q.json')
    picture = os.path.join(folder, 'q.png')
    rows = quantiles_cli.run(methods=('flat', 'haar'),
                             mechanisms=('discrete_gaussian',),
                             num_clients=64,
                             num_bins=16,
                             epsilon=4.0,
                             repetitions=2,
                             print_fn=lines.append,
                             output=output,
                             plot=picture)
    # The estimates in a file, with what they cost; a
    # picture; lines that fit a terminal.
    with open(output, encoding='utf-8') as f:
      records = json.load(f)
    self.assertLen(records, 4 * 5)  # rows x levels
    self.assertEqual([
        r['estimate']
        for r in records
        if r['method'] == 'haar' and r['mechanism'] == 'discrete_gaussian'
    ], list(rows[2].last_estimates))
    self.assertEqual({r['adversary'] for r in records}, {'server', 'release'})
    self.assertTrue(
        all(r['private'] and r['epsilon'] <= 4.0 + 1e-9 and r['delta'] == 1e-5
            for r in records))
    self.assertNotIn('true', ' '.join(records[0]))
    with open(picture, 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    self.assertLessEqual(max(map(len, lines)), 79)
    self.assertEqual([(r.method, r.mechanism) for r in rows],
                     [('flat', 'discrete_gaussian'),
                      ('flat', 'central gaussian'),
                      ('haar', 'discrete_gaussian'),
                      ('haar', 'central gaussian')])
    for row in rows:
      self.assertLessEqual(row.epsilon, 4.0 + 1e-9)
      self.assertLen(row.last_estimates, 5)
      # 64 uniform values, 16 bins, eps 4: the worst error of eq. 3 is a
      # bin's mass (1/16) plus noise; far below 0.5 (random estimates).
      self.assertLess(row.worst_error, 0.5)
    header = next(line for line in lines if line.startswith('method'))
    self.assertIn('worst err (eq.3)', header)

  def test_central_rows_draw_fresh_noise_unless_seeded(self):
    # The central rows drew their noise from seed + 7919
    # (r + 1), with seed 0 under --values: identical on every run, yet
    # labelled DP. Two runs on the same values now add different noise; a
    # --noise-seed run repeats itself and says it is not private.
    from tff_ddp.analytics.quantiles import simulation
    noisy = []
    original = simulation.noisy_sum

    def recording(*args, **kwargs):
      noisy.append(original(*args, **kwargs))
      return noisy[-1]

    values = np.random.default_rng(0).uniform(0, 10, 40)
    runs = []
    with mock.patch.object(simulation, 'noisy_sum', recording):
      for noise_seed in (None, None, 5):
        lines = []
        quantiles_cli.run(methods=('flat',),
                          mechanisms=('discrete_gaussian',),
                          num_bins=8,
                          epsilon=2.0,
                          repetitions=1,
                          values=values,
                          print_fn=lines.append,
                          noise_seed=noise_seed)
        runs.append(lines)
    self.assertLen(noisy, 3)
    # Continuous Gaussian noise: equal sums from fresh draws have
    # probability 0.
    self.assertFalse(np.array_equal(noisy[0], noisy[1]))
    # The seeded run's noise is the seed's (repetition 0): reproducible.
    from tff_ddp.analytics.quantiles import encodings as hg
    encoding = hg.encoding('flat', 8)
    codes = simulation.encodings(encoding, values, 0.0, 10.0)
    np.testing.assert_array_equal(
        noisy[2],
        original('central',
                 codes,
                 central_z=simulation.central_noise_multiplier(2.0, 1e-5),
                 l2_sensitivity=encoding.l2,
                 seed=[5, 0]))
    for lines in runs[:2]:
      self.assertNotIn('NOT PRIVATE', '\n'.join(lines))
    for lines in runs[2:]:
      self.assertTrue(lines[0].startswith('NOT PRIVATE'), lines[0])

  def test_small_superquantile_run_prints_every_round(self):
    lines = []
    summary = superquantile_cli.run(rounds=2,
                                    clients=12,
                                    epsilon=20.0,
                                    print_fn=lines.append)
    self.assertIn('DP-Delta-FL on B.3', lines[0])
    # The header wraps at 79 columns (it was ~240).
    self.assertLessEqual(max(map(len, lines)), 79)
    start = lines.index(next(l for l in lines if l.startswith('round')))
    self.assertIn('against the server', ' '.join(lines[:start]))
    self.assertEqual(lines[start].split(),
                     ['round', 'loss', 'threshold', 'epsilon', 'seconds'])
    epsilons = []
    for line, number in zip(lines[start + 1:start + 3], (1, 2)):
      fields = line.split()
      self.assertEqual(int(fields[0]), number)
      epsilons.append(float(fields[3]))
    # The running epsilon (RDP) grows; the calibration's bound is RDP here
    # (the update has no smaller PLD), so it ends at the target.
    self.assertLess(epsilons[0], epsilons[1])
    self.assertEqual(summary['bound'], 'RDP')
    self.assertLessEqual(epsilons[1], 20.0 + 1e-4)
    self.assertGreater(epsilons[1], 20.0 * 0.99)
    # The run's epsilon by the tightest accountant, its bound named.
    end = ' '.join(l.strip() for l in lines[start + 3:-1])
    self.assertTrue(
        end.startswith(
            f'epsilon of the 2 rounds = {summary["epsilon"]:.4f} at delta '),
        end)
    self.assertIn(
        '(target 20; the running column is RDP): against the '
        'server, zero-out neighbours; bound: RDP', end)
    self.assertLessEqual(summary['epsilon'], 20.0)
    self.assertIn('90th percentile', lines[-1])
    self.assertTrue(0 <= summary['p90'] <= 100)

  def test_small_frequency_experiment_runs_and_reports(self):
    lines = []
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder)
    output = os.path.join(folder, 'f.csv')
    picture = os.path.join(folder, 'f.svg')
    rows = frequency_cli.run(protocols=('two_phase', 'multi_round',
                                        'normalize'),
                             dim=5,
                             num_clients=120,
                             epsilon=8.0,
                             rounds=2,
                             print_fn=lines.append,
                             output=output,
                             plot=picture)
    # The estimated frequencies printed and written, with
    # their noise bound and epsilon; a picture; lines that fit a terminal.
    with open(output, encoding='utf-8') as f:
      records = list(csv.DictReader(f))
    self.assertLen(records, 3 * 5)
    self.assertEqual(list(records[0]), [
        'protocol', 'item', 'estimate', 'noise_sd', 'clip', 'epsilon', 'delta',
        'adversary', 'clients', 'private'
    ])
    normalize = [
        float(r['estimate']) for r in records if r['protocol'] == 'normalize'
    ]
    np.testing.assert_allclose(normalize, rows[2].estimate, rtol=1e-12)
    start = lines.index(
        next(l for l in lines if l.startswith('estimated counts')))
    self.assertEqual(lines[start + 2].split()[0], '0')  # item 0's row
    with open(picture, encoding='utf-8') as f:
      self.assertIn('<svg', f.read(2000))
    self.assertLessEqual(max(map(len, lines)), 79)
    self.assertEqual([r.protocol for r in rows],
                     ['two_phase', 'multi_round', 'normalize'])
    for row in rows:
      self.assertLessEqual(row.epsilon, 8.0 + 1e-9)
    # Normalize estimates the mean of unit vectors: its error is about
    # ||x_bar|| - 1 (x_bar of 100 items over 5 Zipf items: norm ~ 57).
    self.assertGreater(rows[2].error, 40.0)
    self.assertLess(rows[0].error, rows[2].error)
    self.assertIn('against the server', lines[1])
    self.assertTrue(any('two_phase chose C-hat' in l for l in lines))
    # Delta min(1e-5, N^-1.1), not the paper's 1e-4 ~ 1/N;
    # multi_round's rounds composed unless the user opts in to the
    # assumption that nobody repeats, which is then printed.
    self.assertIn('at delta = 1e-05 against the server', lines[1])
    self.assertIn('multi_round: 2 rounds composed', lines)
    lines = []
    rows = frequency_cli.run(protocols=('multi_round',),
                             dim=3,
                             num_clients=40,
                             epsilon=8.0,
                             rounds=2,
                             disjoint_rounds=True,
                             delta=0.1,
                             print_fn=lines.append)
    self.assertTrue(
        lines[0].startswith('warning: --delta 0.1 is not well '
                            'below 1/N = 1/40'), lines[0])
    self.assertTrue(
        any(
            l.startswith('multi_round: ASSUMED (--disjoint-'
                         'rounds, not checked)') for l in lines))

  def test_command_output_is_clean(self):
    # A user error after TFF has started, and a small run: no TF C++ log
    # lines, no ServiceManager traceback, the right exit status.
    env = dict(os.environ)
    env.pop('TF_CPP_MIN_LOG_LEVEL', None)
    runs = (([
        'demo', '--clients', '4', '--dim', '8', '--rounds', '1', '--bits', '16'
    ], 0), (['demo', '--l2-clip', '1e300', '--noise-multiplier', '1e300'], 2))
    for argv, status in runs:
      result = subprocess.run([sys.executable, '-m', 'tff_ddp.cli'] + argv,
                              cwd=_ROOT,
                              env=env,
                              capture_output=True,
                              text=True,
                              timeout=600,
                              check=False)
      self.assertEqual(result.returncode, status, result.stderr[-2000:])
      for noise in ('cuda', 'cuDNN', 'TensorRT', 'ServiceManager', 'Traceback'):
        self.assertNotIn(noise, result.stderr)
      if status == 2:
        self.assertLen(result.stderr.strip().splitlines(), 1)
