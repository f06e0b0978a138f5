"""`tff-ddp train`: accounting per adversary, resume, errors, and two-round
runs of both tasks through the command line on generated databases."""

import contextlib
import csv
import dataclasses
import json
import math
import os
import re
import shutil
import tempfile
import types

from absl.testing import parameterized
import dp_accounting
import pytest
import tensorflow as tf

from tff_ddp import accounting
from tff_ddp import cli
from tff_ddp.accounting import pld_accountant
from tff_ddp.experiments import generated_databases
from tff_ddp.experiments import train_mechanisms
from tff_ddp.experiments import training
from tff_ddp.utils import deltas


def _folder(test) -> str:
  folder = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, folder, ignore_errors=True)
  return folder


def _run(argv):
  """(exit status, stdout lines, stderr) of `tff-ddp` in this process.

  Output goes to temporary files, not StringIO: the TFF worker the command
  starts inherits the process's stdout, which needs a file descriptor.
  """
  with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        code = cli.main(argv)
      except SystemExit as e:
        code = e.code
    out.seek(0)
    err.seek(0)
    return code, out.read().splitlines(), err.read()


def _ddg_event(num_clients=100, dimension=2**20):
  return accounting.DistributedDiscreteGaussianDpEvent(l2_sensitivity=8000.0,
                                                       local_stddev=3200.0,
                                                       num_clients=num_clients,
                                                       dimension=dimension)


class LedgerTest(parameterized.TestCase):
  """Each adversary's epsilon is the accountant's on the sampled events."""

  def test_distributed_mechanism_composes_sampled_events(self):
    ledger = train_mechanisms.Ledger(train_mechanisms.mechanism('ddg'),
                                     population=3400,
                                     delta=1 / 3400)
    for _ in range(5):
      ledger.compose(_ddg_event(), 100)
    for adversary in ('server', 'release'):
      expected = accounting.RdpAccountant(adversary=adversary).compose(
          dp_accounting.SampledWithoutReplacementDpEvent(
              3400, 100, _ddg_event()), 5).get_epsilon(1 / 3400)
      self.assertAlmostEqual(ledger.epsilon(adversary), expected)
    # Cohorts of 100 of 3400 at z = 4: the release's amplification is real
    # (0.27 vs 0.75); the server, which drew them, gets the known-sample
    # mixture only.
    self.assertLess(ledger.epsilon('release'), 0.5 * ledger.epsilon('server'))

  def test_central_gaussian_is_not_private_against_the_server(self):
    ledger = train_mechanisms.Ledger(train_mechanisms.mechanism('gaussian'),
                                     1000, 1e-5)
    ledger.compose(dp_accounting.GaussianDpEvent(1.0), 10)
    self.assertEqual(ledger.epsilon('server'), math.inf)
    expected = accounting.RdpAccountant(adversary='release').compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            1000, 10, dp_accounting.GaussianDpEvent(1.0))).get_epsilon(1e-5)
    self.assertAlmostEqual(ledger.epsilon('release'), expected)

  def test_tightest_is_the_pld_accountant_on_the_same_events(self):
    ledger = train_mechanisms.Ledger(train_mechanisms.mechanism('gaussian'), 6,
                                     1e-5)
    for z in (1.0, 1.0, 2.0, 1.0):
      ledger.compose(dp_accounting.GaussianDpEvent(z), 3)
    final = ledger.tightest('release')
    expected = pld_accountant.PldAccountant(adversary='release')
    for z in (1.0, 1.0, 2.0, 1.0):
      expected.compose(
          dp_accounting.SampledWithoutReplacementDpEvent(
              6, 3, dp_accounting.GaussianDpEvent(z)))
    self.assertAlmostEqual(final.epsilon,
                           expected.get_epsilon(1e-5),
                           delta=1e-3)
    self.assertEqual(final.bound, expected.bound_used(1e-5))
    self.assertEqual(final.bound, 'PLD')
    self.assertEqual(final.adversary, 'release')
    self.assertIn(
        'against the release, zero-out neighbours; bound: '
        'privacy loss distribution', final.description)
    # The running epsilon (RDP) beside it, and larger here.
    self.assertEqual(final.rdp_epsilon, ledger.epsilon('release'))
    self.assertLess(final.epsilon, final.rdp_epsilon)
    server = ledger.tightest('server')
    self.assertEqual(server.epsilon, math.inf)
    self.assertIsNone(server.bound)
    self.assertIn('against the server', server.description)

  def test_calibrated_rounds_end_at_most_the_target(self):
    # A central Gaussian's planning event needs no model: the calibration
    # and the ledger without TFF.
    config = training.TrainConfig(task='emnist',
                                  mechanism='gaussian',
                                  data_dir='-',
                                  output_dir='-',
                                  target_epsilon=6.0,
                                  rounds=2,
                                  clients_per_round=3).resolved(
                                      training.paper_tasks.EMNIST_TASK)
    setup = training.Setup(config, training.paper_tasks.EMNIST_TASK,
                           train_mechanisms.mechanism('gaussian'), None,
                           types.SimpleNamespace(population=6), 1e-5, 1)
    calibrated = training.calibrate_noise(setup, None)
    self.assertEqual(calibrated.calibration.bound, 'PLD')
    ledger = train_mechanisms.Ledger(setup.mechanism, 6, 1e-5)
    for _ in range(2):
      ledger.compose(setup.mechanism.planning_event(calibrated.config, None), 3)
    final = ledger.tightest('release')
    self.assertLessEqual(final.epsilon, 6.0)
    self.assertGreater(final.epsilon, 6.0 * 0.999)
    self.assertEqual(final.bound, 'PLD')
    # The running epsilon (RDP) of the same rounds is above the target: RDP
    # alone would have needed more noise than z.
    self.assertGreater(final.rdp_epsilon, 6.0)

  def test_no_privacy(self):
    ledger = train_mechanisms.Ledger(train_mechanisms.mechanism('none'), 10,
                                     1e-5)
    self.assertEqual(ledger.epsilon('release'), math.inf)
    ledger.compose(None, 3)
    self.assertEqual(ledger.epsilon('server'), math.inf)

  def test_event_json_round_trip(self):
    event = dp_accounting.ComposedDpEvent(
        [_ddg_event(7, 1024),
         dp_accounting.GaussianDpEvent(2.0)])
    text = json.dumps(train_mechanisms.event_to_json(event))
    self.assertEqual(train_mechanisms.event_from_json(json.loads(text)), event)

  def test_cohorts_are_fixed_per_round_and_without_replacement(self):
    ids = [f'c{i}' for i in range(50)]
    first = training.cohort(ids, 20, seed=3, round_number=7)
    self.assertLen(set(first), 20)
    self.assertEqual(first, training.cohort(ids, 20, 3, 7))
    self.assertNotEqual(first, training.cohort(ids, 20, 3, 8))

  def test_modclip_probability_is_the_two_sided_normal_tail(self):
    # P(|N(0,1)| > 4) = 6.334e-5 (the paper's k = 4).
    self.assertAlmostEqual(train_mechanisms.modclip_probability(4.0),
                           6.334248e-5,
                           delta=1e-10)


class CohortSeedTest(tf.test.TestCase):
  """The cohorts' seed is secret unless given, and survives a resume."""

  def _config(self, folder, **kwargs):
    return training.TrainConfig(task='emnist',
                                mechanism='none',
                                data_dir=folder,
                                output_dir=folder,
                                **kwargs)

  def test_secret_seed_is_drawn_once_and_kept(self):
    first, second = _folder(self), _folder(self)
    seed = training.cohort_seed(self._config(first))
    path = os.path.join(first, training.COHORT_SEED_FILE)
    self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
    self.assertEqual(training.cohort_seed(self._config(first, resume=True)),
                     seed)
    # 128 fresh bits per run: two runs share a seed with probability 2^-128.
    self.assertNotEqual(training.cohort_seed(self._config(second)), seed)

  def test_given_seed_and_missing_secret(self):
    folder = _folder(self)
    self.assertEqual(training.cohort_seed(self._config(folder, cohort_seed=7)),
                     7)
    self.assertFalse(
        os.path.exists(os.path.join(folder, training.COHORT_SEED_FILE)))
    with self.assertRaisesRegex(ValueError, 'secret cohort seed'):
      training.cohort_seed(self._config(folder, resume=True))


@pytest.mark.slow  # a Keras model per run (~3 s each)
class DeltaTest(tf.test.TestCase):
  """delta defaults to min(1e-5, N^-1.1); a larger one is warned about."""

  def test_default_and_warning(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder, 30, 2, 1)
    lines = []
    for name, delta in (('default', None), ('given', 1 / 30)):
      setup = training.prepare(
          training.TrainConfig(task='emnist',
                               mechanism='none',
                               data_dir=folder,
                               output_dir=os.path.join(folder, name),
                               delta=delta,
                               clients_per_round=10))
      training._print_header(lines.append, setup, setup.dimension)  # pylint: disable=protected-access  # tests a private part
      if delta is None:
        # 30 clients: it was 1/30 = 0.033.
        self.assertEqual(setup.delta, 1e-5)
        self.assertIsNone(setup.delta_warning)
      else:
        self.assertEqual(setup.delta, 1 / 30)
        self.assertIn('--delta 0.0333 is not well below 1/N = 1/30',
                      setup.delta_warning)
    warnings = [l for l in lines if l.startswith('warning: ')]
    self.assertLen(warnings, 1)


@pytest.mark.slow  # ~5 s quiet, 18 s at load 19: three Keras models, DDG parameters
class CalibrationTest(tf.test.TestCase):
  """--target-epsilon: the least noise whose rounds meet the target."""

  def test_least_noise_meets_the_target(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder, 6, 2, 1)
    found = {}
    for name, bits in (('gaussian', 16), ('ddg', 20), ('ddg', 12)):
      setup = training.prepare(
          training.TrainConfig(task='emnist',
                               mechanism=name,
                               bits=bits,
                               data_dir=folder,
                               output_dir=os.path.join(folder, f'{name}{bits}'),
                               target_epsilon=20.0,
                               rounds=10,
                               clients_per_round=3))
      value_type, _ = training.update_type(setup.task, setup.data)

      def epsilon(z, setup=setup, value_type=value_type):
        ledger = train_mechanisms.Ledger(setup.mechanism, 6, setup.delta)
        config = dataclasses.replace(setup.config, noise_multiplier=z)
        for _ in range(10):
          ledger.compose(setup.mechanism.planning_event(config, value_type), 3)
        return ledger.tightest('release')

      z = setup.config.noise_multiplier
      self.assertLessEqual(epsilon(z).epsilon, 20.0)
      self.assertGreater(epsilon(0.99 * z).epsilon, 20.0)
      self.assertEqual(epsilon(z).bound, setup.calibration.bound)
      found[(name, bits)] = z, epsilon
    # Figure 2's effect: 12 bits' rounding inflates the DDG's sensitivity,
    # so the same epsilon needs more noise; 20 bits match the Gaussian by
    # RDP (the DDG's bound here: its update has no PLD). The Gaussian's
    # tightest bound is its PLD, which needs less noise.
    z_ddg, ddg_epsilon = found[('ddg', 20)]
    z_gaussian, gaussian_epsilon = found[('gaussian', 16)]
    self.assertGreater(found[('ddg', 12)][0], 1.05 * z_ddg)
    self.assertEqual(ddg_epsilon(z_ddg).bound, 'RDP')
    self.assertAllClose(gaussian_epsilon(z_ddg).rdp_epsilon, 20.0, rtol=0.01)
    self.assertEqual(gaussian_epsilon(z_gaussian).bound, 'PLD')
    self.assertLess(z_gaussian, z_ddg)


class CommandErrorTest(parameterized.TestCase):
  """User errors before any training: one line, status 2."""

  def test_choices_are_the_librarys(self):
    # The parser lists them without importing the library (TF).
    from tff_ddp.cli import train as train_cli
    self.assertEqual(
        train_cli._MECHANISMS,  # pylint: disable=protected-access  # tests a private part
        tuple(train_mechanisms.MECHANISMS))
    self.assertEqual(train_cli._TASKS, tuple(training.paper_tasks.TASKS))  # pylint: disable=protected-access  # tests a private part

  def test_missing_database(self):
    folder = _folder(self)
    code, _, err = _run([
        'train', '--task', 'stackoverflow', '--mechanism', 'ddg',
        '--noise-multiplier', '1', '--data-dir', folder, '--output-dir',
        os.path.join(folder, 'o')
    ])
    self.assertEqual(code, 2)
    self.assertEqual(len(err.splitlines()), 1)
    self.assertIn(
        f'no Stack Overflow database {folder}/stackoverflow.sqlite'
        ': put TFF\'s stackoverflow.sqlite there', err)

  def test_wrong_schema(self):
    folder = _folder(self)
    with open(os.path.join(folder, 'emnist_all.sqlite'), 'wb') as f:
      f.write(b'\0' * 4096)
    code, _, err = _run([
        'train', '--task', 'emnist', '--mechanism', 'none', '--data-dir',
        folder, '--output-dir',
        os.path.join(folder, 'o')
    ])
    self.assertEqual(code, 2)
    self.assertEqual(len(err.splitlines()), 1)
    self.assertIn('emnist_all.sqlite is not an SQLite database', err)

  def test_stackoverflow_vocabulary_from_the_data_is_opt_in(self):
    # Without --vocab-file the vocabulary was counted from
    # the private training split, without noise, by default.
    folder = _folder(self)
    generated_databases.write_stackoverflow(folder,
                                            num_clients=3,
                                            train_sentences=2)
    code, _, err = _run([
        'train', '--task', 'stackoverflow', '--mechanism', 'none', '--data-dir',
        folder, '--output-dir',
        os.path.join(folder, 'o')
    ])
    self.assertEqual(code, 2)
    self.assertEqual(len(err.splitlines()), 1)
    self.assertIn('needs --vocab-file (a public word list', err)
    self.assertIn('--vocab-from-training-data', err)

  @parameterized.parameters(
      (['--mechanism', 'ddg'], 'needs --noise-multiplier'),
      (['--mechanism', 'none', '--noise-multiplier', '1'
       ], 'drop --noise-multiplier'),
      (['--mechanism', 'ddg', '--noise-multiplier', '1', '--resume'
       ], 'holds no run'),
      (['--mechanism', 'gaussian', '--noise-multiplier', '0'
       ], '--noise-multiplier must be'),
      ([
          '--mechanism', 'ddg', '--noise-multiplier', '1', '--target-epsilon',
          '3'
      ], 'one of them'),
      ([
          '--mechanism', 'gaussian', '--target-epsilon', '3',
          '--calibrate-against', 'server'
      ], 'not private against the server'),
      ([
          '--mechanism', 'gaussian', '--noise-multiplier', '1',
          '--noise-sampler', 'exact'
      ], '--noise-sampler is for --mechanism ddg'),
  )
  def test_settings(self, argv, message):
    folder = _folder(self)
    code, _, err = _run([
        'train', '--task', 'emnist', '--data-dir', folder, '--output-dir',
        os.path.join(folder, 'o')
    ] + argv)
    self.assertEqual(code, 2)
    self.assertEqual(len(err.splitlines()), 1)
    self.assertIn(message, err)


def _report(lines):
  """The printed report as one text: wrapped lines (79 columns
  item 9) joined again."""
  return ' '.join(line.strip() for line in lines)


def _rows(lines):
  """The per-round rows of the report: (round, accuracy, eps server, eps
  release)."""
  start = next(i for i, line in enumerate(lines)
               if line.split()[:2] == ['round', 'accuracy'])
  rows = []
  for line in lines[start + 1:]:
    fields = line.split()
    if not fields or not fields[0].isdigit():
      break
    rows.append((int(fields[0]), None if fields[1] == '-' else float(fields[1]),
                 float(fields[2]), float(fields[3])))
  return rows


@pytest.mark.slow  # end to end with the paper's model sizes
class TrainCommandTest(tf.test.TestCase):
  """Two rounds of each task through `tff-ddp train`, TFF's loaders reading
  generated databases (3 of 6 clients per round; the paper's models)."""

  def _check_run(self, lines, out, rounds, dimension, first=1):
    """Rows `first`..`rounds` printed, all rounds in the files."""
    rows = _rows(lines)
    self.assertEqual([r[0] for r in rows], list(range(first, rounds + 1)))
    for _, accuracy, server, release in rows:
      if accuracy is not None:
        self.assertBetween(accuracy, 0.0, 1.0)
      self.assertTrue(math.isfinite(server))
      self.assertLessEqual(release, server + 1e-9)
    with open(os.path.join(out, 'metrics.csv'), encoding='utf-8') as f:
      table = list(csv.DictReader(f))
    self.assertEqual([int(r['round']) for r in table],
                     list(range(1, rounds + 1)))
    # Composition grows epsilon; the file has what was printed.
    server = [float(r['epsilon_server']) for r in table]
    self.assertEqual(server, sorted(server))
    self.assertLess(server[0], server[-1])
    self.assertAlmostEqual(server[-1], rows[-1][2], delta=1e-3 * server[-1])
    with open(os.path.join(out, 'events.jsonl'), encoding='utf-8') as f:
      events = [json.loads(line) for line in f]
    # Each round's event: the measured 3 clients, the padded dimension.
    for record in events:
      event = train_mechanisms.event_from_json(record['event'])
      self.assertEqual(event.num_clients, 3)
      self.assertEqual(event.dimension, dimension)
    return rows, events

  def test_emnist_two_rounds_then_resume(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder,
                                     num_clients=6,
                                     train_examples=8,
                                     test_examples=2)
    out = os.path.join(folder, 'run')
    argv = [
        'train', '--task', 'emnist', '--mechanism', 'ddg', '--bits', '16',
        '--noise-multiplier', '1', '--rounds', '2', '--clients-per-round', '3',
        '--data-dir', folder, '--output-dir', out, '--eval-every', '1',
        '--checkpoint-every', '1'
    ]
    code, lines, err = _run(argv)
    self.assertEqual(code, 0, err)
    self.assertIn('Federated EMNIST-62', lines[0])
    self.assertLessEqual(max(map(len, lines)), 79)
    # Delta was 1/N = 0.17 here, without a word.
    self.assertIn('delta = 1e-05 (min(1e-5, N^-1.1), N = 6)', _report(lines))
    self.assertIn('d = 1,018,174 parameters', _report(lines))
    self.assertIn('NOT the amplification by sampling the paper relies on',
                  _report(lines))
    self._check_run(lines, out, 2, 2**20)
    self.assertTrue(os.path.isdir(os.path.join(out, 'checkpoints', 'round_2')))
    # The same command again: the run is there, resume it or move on.
    code, _, err = _run(argv)
    self.assertEqual(code, 2)
    self.assertIn('pass --resume', err)
    # Resumed for a third round: the ledger holds all three events. The
    # folder written another way (trailing '/', relative) is the same run
    # (it was refused as 'other settings').
    relative = os.path.relpath(out) + '/'
    self.assertNotEqual(relative.rstrip('/'), out)
    resumed = list(argv)
    resumed[argv.index('--rounds') + 1] = '3'
    resumed[argv.index('--output-dir') + 1] = relative
    code, lines, err = _run(resumed + ['--resume'])
    self.assertEqual(code, 0, err)
    self.assertIn('resumed after round 2', _report(lines))
    resumed, events = self._check_run(lines, out, 3, 2**20, first=3)
    self.assertLen(events, 3)
    ledger = train_mechanisms.Ledger(train_mechanisms.mechanism('ddg'), 6,
                                     deltas.default_delta(6))
    for record in events:
      ledger.compose(train_mechanisms.event_from_json(record['event']), 3)
    self.assertAlmostEqual(resumed[-1][2], ledger.epsilon('server'), places=3)
    self.assertAlmostEqual(resumed[-1][3], ledger.epsilon('release'), places=3)

  def test_calibrated_run_ends_at_most_the_target(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder,
                                     num_clients=6,
                                     train_examples=4,
                                     test_examples=1)
    out = os.path.join(folder, 'run')
    code, lines, err = _run([
        'train', '--task', 'emnist', '--mechanism', 'gaussian',
        '--target-epsilon', '6', '--rounds', '2', '--clients-per-round', '3',
        '--data-dir', folder, '--output-dir', out, '--eval-every', '0'
    ])
    self.assertEqual(code, 0, err)
    self.assertLessEqual(max(map(len, lines)), 79)
    report = _report(lines)
    self.assertIn(
        'zero-out neighbours, bound: privacy loss distribution '
        '(the tightest accountant)', report)
    self.assertIn(
        'the running epsilon of the rounds so far, by RDP (an '
        'upper bound)', report)
    found = re.search(
        r'eps\(release\) = ([0-9.]+) \(target 6\): against the release, '
        r'zero-out neighbours; bound: privacy loss distribution .*?; '
        r'running RDP ([0-9.]+)', report)
    self.assertIsNotNone(found, report)
    printed, running = float(found.group(1)), float(found.group(2))
    self.assertIn(
        'eps(server) = inf: against the server, zero-out '
        'neighbours; not private', report)
    # The events the run recorded, composed here by the tightest
    # accountant one round at a time.
    with open(os.path.join(out, 'events.jsonl'), encoding='utf-8') as f:
      records = [json.loads(line) for line in f]
    self.assertLen(records, 2)
    expected = pld_accountant.tightest('release')
    for record in records:
      expected.compose(
          dp_accounting.SampledWithoutReplacementDpEvent(
              6, record['cohort'],
              train_mechanisms.event_from_json(record['event'])))
    epsilon, bound = expected.get_epsilon_and_bound(deltas.default_delta(6))
    self.assertEqual(bound, 'PLD')
    with open(os.path.join(out, 'metrics.json'), encoding='utf-8') as f:
      final = json.load(f)['final']
    self.assertAlmostEqual(final['release']['epsilon'], epsilon, delta=1e-3)
    self.assertEqual(final['release']['bound'], 'PLD')
    self.assertEqual(final['server']['epsilon'], 'inf')
    self.assertLessEqual(final['release']['epsilon'], 6.0)
    self.assertAlmostEqual(printed,
                           final['release']['epsilon'],
                           delta=1e-3 * printed)
    # The last running epsilon (RDP) is the one beside it, above 6 here.
    self.assertEqual(running, _rows(lines)[-1][3])
    self.assertGreater(running, 6.0)

  def test_stackoverflow_two_rounds_with_a_10k_vocabulary(self):
    folder = _folder(self)
    generated_databases.write_stackoverflow(folder,
                                            num_clients=6,
                                            train_sentences=6)
    words = os.path.join(folder, 'words.txt')
    with open(words, 'w', encoding='utf-8') as f:  # the generator's words first
      f.write(''.join(f'w{i} {10**6 - i}\n' for i in range(10000)))
    out = os.path.join(folder, 'run')
    code, lines, err = _run([
        'train', '--task', 'stackoverflow', '--mechanism', 'ddg',
        '--noise-multiplier', '1', '--rounds', '2', '--clients-per-round', '3',
        '--data-dir', folder, '--output-dir', out, '--vocab-file', words,
        '--eval-every', '2'
    ])
    self.assertEqual(code, 0, err)
    report = _report(lines)
    self.assertIn('the first 10000 words of', report)
    self.assertIn('d = 4,050,748 parameters', report)
    # 6 users: min(1e-5, 6^-1.1) (it was the paper's 1e-6).
    self.assertIn('delta = 1e-05 (min(1e-5, N^-1.1), N = 6)', report)
    rows, _ = self._check_run(lines, out, 2, 2**22)
    self.assertIsNone(rows[0][1])  # evaluated every 2 rounds
    self.assertIsNotNone(rows[1][1])


@pytest.mark.slow  # two TFF processes
class MechanismRoundTest(tf.test.TestCase):
  """What each --mechanism's round releases and accounts (a small model:
  the property does not depend on its size)."""

  def test_round_events(self):
    import tensorflow_federated as tff
    from tff_ddp import learning
    spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None],
                                                                tf.int32))

    def model_fn():
      return tff.learning.models.from_keras_model(
          tf.keras.Sequential([
              tf.keras.layers.InputLayer(input_shape=(4,)),
              tf.keras.layers.Dense(3)
          ]),
          input_spec=spec,
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    data = [
        tf.data.Dataset.from_tensor_slices(
            (tf.ones([5, 4]) * i, tf.constant([0, 1, 2, 0, 1]))).batch(5)
        for i in range(3)
    ]
    config = training.TrainConfig(task='emnist',
                                  mechanism='-',
                                  data_dir='-',
                                  output_dir='-',
                                  noise_multiplier=2.0,
                                  clients_per_round=3).resolved(
                                      training.paper_tasks.EMNIST_TASK)
    found = {}
    for name in ('ddg', 'gaussian'):
      chosen = train_mechanisms.mechanism(name)
      process = tff.learning.algorithms.build_unweighted_fed_avg(
          model_fn,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
          model_aggregator=chosen.aggregator(config),
          metrics_aggregator=learning.withhold_metrics)
      output = process.next(process.initialize(), data)
      # No client metric reaches the server, whatever the mechanism.
      self.assertEmpty(output.metrics['client_work']['train'])
      found[name] = chosen.round_event(output, output.state)
    self.assertIsInstance(found['ddg'],
                          accounting.DistributedDiscreteGaussianDpEvent)
    self.assertEqual(found['ddg'].num_clients, 3)  # measured
    # TFF's central Gaussian: the event its DP factory keeps in its state.
    self.assertEqual(found['gaussian'], dp_accounting.GaussianDpEvent(2.0))
