"""`tff-ddp train`: DP-FedAvg on Federated EMNIST / Stack Overflow, as the
DDG paper ran them (Kairouz, Liu & Steinke 2021, Section 6.2).

  tff-ddp train --task emnist --mechanism ddg --bits 16 \\
      --noise-multiplier 1.0 --data-dir ~/tff_data
  tff-ddp train --task stackoverflow --mechanism gaussian \\
      --noise-multiplier 0.5 --data-dir ~/tff_data --vocab-file WORDS

Reads TFF's databases with TFF's own loaders (cache_dir = --data-dir):
emnist_all.sqlite / stackoverflow.sqlite, as TFF downloads them from
https://storage.googleapis.com/tff-datasets-public/ (decompress the .lzma).
Nothing is downloaded. Defaults are the paper's: 100 clients per round
drawn without replacement, 1 local epoch, batch 20 / 16, clip 0.03 / 0.3,
client learning rate 0.032 / 0.5, server learning rate 1 with momentum 0.9,
1500 / 1600 rounds, uniform client weights; delta is min(1e-5, N^-1.1),
well below 1/N (the paper's 1/N for EMNIST is not: a run that publishes
one client's data with probability 1/N meets it).

Stack Overflow's vocabulary: --vocab-file (e.g. TFF's
stackoverflow.word_count), or, opted in with --vocab-from-training-data,
counted from the training split and saved to the output directory (not
covered by epsilon: it is computed from the training data without
noise).

Mechanisms: ddg (distributed discrete Gaussian, secure aggregation),
skellam (distributed Skellam), gaussian (TFF's central Gaussian: the server
adds the noise, so its epsilon holds only against the release), none.

Each round prints the test accuracy (every --eval-every rounds) and the
running epsilon (RDP, an upper bound) against the server that runs the
protocol (it draws the cohorts: no amplification by sampling) and against
readers of the release (cohorts secret: amplified; the paper's kind). After
the last round, the run's epsilon against each: the recorded round events
composed by the tightest accountant (the smaller of the privacy loss
distribution bound and RDP, named), the accountant --target-epsilon
calibrates with. No client metric reaches the server.
Metrics go to --output-dir (metrics.csv, metrics.json, events.jsonl) with
checkpoints; --resume continues an interrupted run.

"""

import os

from tff_ddp.cli import common
from tff_ddp.cli import outputs
from tff_ddp.utils import checks

_TASKS = ('emnist', 'stackoverflow')  # paper_tasks.TASKS (no TF import)
_MECHANISMS = ('ddg', 'skellam', 'gaussian', 'none')  # train_mechanisms'


class _HelpFormatter(common.HelpFormatter):
  """Every default in --help, except None (the task's, said in the help)."""

  def _get_help_string(self, action):
    if action.default is None and not action.required:
      return action.help
    return super()._get_help_string(action)


def default_output_dir(args) -> str:
  """tff_ddp_runs/<task>-<mechanism>[-<bits>bits][-z<z>]-seed<seed>."""
  from tff_ddp.experiments import train_mechanisms
  parts = [args.task, args.mechanism]
  if train_mechanisms.mechanism(args.mechanism).secure_sum:
    parts.append(f'{args.bits}bits')
  if args.noise_multiplier is not None:
    parts.append(f'z{args.noise_multiplier:g}')
  if args.target_epsilon is not None:
    parts.append(f'eps{args.target_epsilon:g}')
  parts.append(f'seed{args.seed}')
  return os.path.join('tff_ddp_runs', '-'.join(parts))


def run(args) -> int:
  # `training.prepare` checks the settings, the output directory and then
  # the database before TensorFlow loads: each error is one line, quickly.
  from tff_ddp.experiments import training
  config = training.TrainConfig(
      task=args.task,
      mechanism=args.mechanism,
      data_dir=args.data_dir,
      output_dir=args.output_dir or default_output_dir(args),
      noise_multiplier=args.noise_multiplier,
      target_epsilon=args.target_epsilon,
      calibrate_against=args.calibrate_against,
      bits=args.bits,
      rounds=args.rounds,
      clients_per_round=args.clients_per_round,
      clip=args.clip,
      client_learning_rate=args.client_lr,
      server_learning_rate=args.server_lr,
      server_momentum=args.server_momentum,
      client_batch_size=args.batch_size,
      client_epochs=args.epochs,
      max_examples_per_client=args.max_examples_per_client,
      delta=args.delta,
      k_stddevs=args.k_stddevs,
      noise_sampler=args.noise_sampler,
      vocab_size=args.vocab_size,
      vocab_file=args.vocab_file,
      vocab_from_training_data=args.vocab_from_training_data,
      eval_every=args.eval_every,
      eval_clients=args.eval_clients,
      checkpoint_every=args.checkpoint_every,
      seed=args.seed,
      cohort_seed=args.cohort_seed,
      resume=args.resume)
  # Report lines wrap at 79 columns.
  training.run(config,
               print_fn=outputs.wrapping(lambda line: print(line, flush=True)),
               progress=common.progress)
  return 0


def add_parser(subparsers):
  p = subparsers.add_parser(
      'train',
      help='DP-FedAvg on EMNIST / Stack Overflow (DDG paper 6.2)',
      description=__doc__,
      formatter_class=_HelpFormatter)
  task_default = ' (default: the task\'s, EMNIST / Stack Overflow: %s)'
  p.add_argument('--task', required=True, choices=_TASKS)
  p.add_argument('--mechanism', required=True, choices=_MECHANISMS)
  p.add_argument('--data-dir',
                 required=True,
                 help='folder holding TFF\'s emnist_all.sqlite / '
                 'stackoverflow.sqlite (the loaders\' cache_dir)')
  p.add_argument('--output-dir',
                 help='metrics and checkpoints (default: '
                 'tff_ddp_runs/<task>-<mechanism>-...-seed<seed>)')
  p.add_argument('--noise-multiplier',
                 type=common.positive('--noise-multiplier'),
                 help='z: central noise stddev / clip (all mechanisms but '
                 'none; default: none, give it or --target-epsilon)')
  p.add_argument('--target-epsilon',
                 type=common.positive('--target-epsilon'),
                 help='instead of --noise-multiplier: the least z whose '
                 '--rounds rounds are (eps, delta)-DP against '
                 '--calibrate-against by the tightest accountant (the '
                 'paper calibrates this way; '
                 'default: none, give it or --noise-multiplier)')
  p.add_argument('--calibrate-against',
                 choices=('release', 'server'),
                 default='release',
                 help='--target-epsilon\'s adversary: '
                 'readers of the release (the paper\'s, amplified by '
                 'sampling) or the server')
  p.add_argument('--bits',
                 type=common.integer('--bits', 1, 30),
                 default=16,
                 help='ddg/skellam: the secure sum\'s modulus is 2^bits')
  p.add_argument('--rounds',
                 type=common.integer('--rounds', 1),
                 help='T' + task_default % '1500 / 1600')
  p.add_argument('--clients-per-round',
                 type=common.integer('--clients-per-round', 1),
                 help='n, drawn uniformly without replacement each round' +
                 task_default % '100')
  p.add_argument('--clip',
                 type=common.positive('--clip'),
                 help='c, l2 clip of a client update' +
                 task_default % '0.03 / 0.3')
  p.add_argument('--client-lr',
                 type=common.positive('--client-lr'),
                 help='client SGD learning rate' + task_default % '0.032 / 0.5')
  p.add_argument('--server-lr',
                 type=common.positive('--server-lr'),
                 help='server learning rate' + task_default % '1')
  p.add_argument('--server-momentum',
                 type=common.converter(
                     lambda v, n: checks.real(v, n, 0.0, 1.0, high_open=True),
                     '--server-momentum'),
                 help='server momentum' + task_default % '0.9')
  p.add_argument('--batch-size',
                 type=common.integer('--batch-size', 1),
                 help='client batch size' + task_default % '20 / 16')
  p.add_argument('--epochs',
                 type=common.integer('--epochs', 1),
                 help='local epochs' + task_default % '1')
  p.add_argument('--max-examples-per-client',
                 type=common.integer('--max-examples-per-client', 1),
                 help='cap on a client\'s examples per round (default: all, '
                 'as the paper\'s code)')
  p.add_argument('--delta',
                 type=common.probability_open('--delta'),
                 help='delta (default: min(1e-5, N^-1.1), well below 1/N for '
                 'N training clients; a larger one is warned about)')
  p.add_argument('--k-stddevs',
                 type=common.positive('--k-stddevs'),
                 default=4.0,
                 help='ddg/skellam: k, the sum coordinate\'s '
                 'stddevs that fit in the ring (the paper\'s 3 or 4)')
  p.add_argument('--noise-sampler',
                 choices=('table', 'exact'),
                 help='ddg/skellam: the noise sampler (default: the '
                 'factories\', table: a certified alias table whose '
                 'per-sample TV distance, < 2^-231, is added to delta; '
                 'exact: none, slower)')
  p.add_argument('--vocab-size',
                 type=common.integer('--vocab-size', 1),
                 default=10000,
                 help='stackoverflow: vocabulary words')
  p.add_argument('--vocab-file',
                 help='stackoverflow: word list ("word [count]" per line, '
                 'e.g. TFF\'s stackoverflow.word_count) (default: none; '
                 'give it or --vocab-from-training-data)')
  p.add_argument('--vocab-from-training-data',
                 action='store_true',
                 help='stackoverflow: count the vocabulary from the training '
                 'split instead: NOT private (no noise, not covered by '
                 'epsilon)')
  p.add_argument('--eval-every',
                 type=common.integer('--eval-every', 0),
                 default=10,
                 help='test accuracy every k rounds and after '
                 'the last (0: never)')
  p.add_argument('--eval-clients',
                 type=common.integer('--eval-clients', 0),
                 help='test clients evaluated, a fixed sample (0: all)' +
                 task_default % 'all / 1000')
  p.add_argument('--checkpoint-every',
                 type=common.integer('--checkpoint-every', 1),
                 default=10,
                 help='checkpoint every k rounds and after the last')
  p.add_argument('--seed',
                 type=common.integer('--seed', 0, 2**32 - 1),
                 default=0,
                 help='model initialization and the test sample '
                 '(never the noise: fresh kernel entropy)')
  p.add_argument('--cohort-seed',
                 type=common.integer('--cohort-seed', 0),
                 help='draw the cohorts from this seed (reproducible, but not '
                 'secret from whoever knows it, which eps(release)\'s '
                 'amplification assumes); default: a secret seed drawn when '
                 'the run starts, kept in --output-dir for --resume')
  p.add_argument('--resume',
                 action='store_true',
                 help='continue the run in --output-dir from its last '
                 'checkpoint')
  p.set_defaults(command='train', body=run)
  return p
