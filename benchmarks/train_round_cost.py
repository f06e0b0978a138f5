"""`tff-ddp train`'s round at the paper's scale: seconds, CPU and memory.

One process (`tff_ddp.experiments.training.prepare` + `build_process`: what
`tff-ddp train` runs) per mechanism, on a generated database in TFF's
format read by TFF's loader: EMNIST, `clients` clients of `examples`
examples each, all in every round (the paper's n = 100 of ~200 examples:
3400 writers hold 671,585 training examples), the paper's ConvNet (d =
1,018,174, padded to 2^20) and defaults (batch 20, one epoch, clip 0.03);
or Stack Overflow, `clients` users of `examples` sentences, the 10,000-word
vocabulary (the generator's words) and Reddi et al.'s LSTM (d = 4,050,748,
padded to 2^22), batch 16.

After one untimed round per mechanism (the worker's first call), the timed
rounds alternate between the mechanisms (none, gaussian, ddg, none, ...) so
that the machine's load drifts over all of them alike. Per round: wall
seconds, and CPU seconds of this process plus its TFF worker (less
sensitive to other jobs on a shared machine). `aggregation s`: the
mechanism's aggregation process alone (`UnweightedMeanFactory` over the
mechanism, no training) on `clients` random updates of the model's shape,
wall seconds of one call after a warm-up: where the difference goes.
Peak memory: this process's maximum RSS plus the worker's high-water RSS
(VmHWM), an upper bound on the pair's peak, after the rounds (what
training needs) and at the end (the measurements after them hold every
client's random update in Python too).

Targets (issue 35): EMNIST, DDG round <= 1.3x the no-DP round; Stack
Overflow with a 10k vocabulary inside 24 GiB.

  .venv/bin/python benchmarks/train_round_cost.py --task emnist
  .venv/bin/python benchmarks/train_round_cost.py --task stackoverflow \\
      --examples 400 --rounds 1 --mechanisms ddg --no-aggregation
"""

import os
import resource
import sys
import shutil
import tempfile
import time

import _harness as harness
import numpy as np

from tff_ddp.experiments import generated_databases
from tff_ddp.experiments import paper_tasks
from tff_ddp.experiments import training
from tff_ddp.utils import processes

MECHANISMS = ('none', 'gaussian', 'ddg', 'skellam')


def _peak_mib() -> float:
  python_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  worker_kib = 0
  for pid in processes.descendant_pids():
    try:
      with open(f'/proc/{pid}/status', encoding='utf-8') as f:
        worker_kib += sum(
            int(line.split()[1]) for line in f if line.startswith('VmHWM:'))
    except OSError:
      continue
  return (python_kib + worker_kib) / 1024.0


def _database(task, folder, clients, examples, seed):
  if task == 'emnist':
    generated_databases.write_emnist(folder, clients, examples,
                                     max(1, examples // 10), seed)
    return None
  generated_databases.write_stackoverflow(folder, clients, examples,
                                          max(1, examples // 10), 2,
                                          paper_tasks.VOCABULARY_SIZE, seed)
  words = os.path.join(folder, 'words.txt')
  with open(words, 'w', encoding='utf-8') as f:
    f.write(''.join(f'w{i}\n' for i in range(paper_tasks.VOCABULARY_SIZE)))
  return words


def _aggregation_seconds(setup, process, clients, rng):
  """Wall seconds of the mechanism's aggregation alone (after a warm-up)."""
  import tensorflow_federated as tff
  weights = process.get_model_weights(process.initialize()).trainable
  value_type = tff.types.to_type(
      [tff.TensorType(np.float32, np.shape(w)) for w in weights])
  aggregation = setup.mechanism.aggregator(setup.config).create(value_type)
  scale = setup.config.clip / np.sqrt(sum(np.size(w) for w in weights))
  updates = [[(rng.normal(size=np.shape(w)) * scale).astype(np.float32)
              for w in weights]
             for _ in range(clients)]
  state = aggregation.initialize()
  state = aggregation.next(state, updates).state
  start = time.perf_counter()
  aggregation.next(state, updates)
  return time.perf_counter() - start


def _evaluation_ms(setup, process, state):
  """(milliseconds per test example of `paper_tasks.Evaluator`, examples):
  the second pass over every generated test client (the first reads and
  caches them)."""
  ids = paper_tasks.eval_client_ids(setup.data, 0, 0)
  evaluator = paper_tasks.Evaluator(setup.task, setup.data, ids)
  weights = process.get_model_weights(state)
  evaluator.accuracy(weights)
  start = time.perf_counter()
  evaluator.accuracy(weights)
  seconds = time.perf_counter() - start
  count = sum(1 for client in ids
              for _ in setup.data.test.create_tf_dataset_for_client(client))
  return 1000 * seconds / count, count


def run(task='emnist',
        clients=100,
        examples=200,
        rounds=2,
        mechanisms=('none', 'gaussian', 'ddg'),
        bits=16,
        noise_multiplier=1.0,
        seed=0,
        aggregation=True):
  """Rows per mechanism (module docstring)."""
  if task not in paper_tasks.TASKS:
    raise harness.UsageError(f'--task must be one of {list(paper_tasks.TASKS)}')
  unknown = [m for m in mechanisms if m not in MECHANISMS]
  if unknown or rounds < 1:
    raise harness.UsageError(f'--mechanisms from {MECHANISMS}, --rounds >= 1')
  folder = tempfile.mkdtemp(prefix='train_round_cost_')
  try:
    return _measure(task, clients, examples, rounds, mechanisms, bits,
                    noise_multiplier, seed, aggregation, folder)
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def _measure(task, clients, examples, rounds, mechanisms, bits,
             noise_multiplier, seed, aggregation, folder):
  """`run` in `folder` (deleted after)."""
  started = time.perf_counter()
  vocab_file = _database(task, folder, clients, examples, seed)
  generated = time.perf_counter() - started
  rng = np.random.default_rng(seed)
  built, rows = {}, {}
  for name in mechanisms:
    config = training.TrainConfig(
        task=task,
        mechanism=name,
        data_dir=folder,
        output_dir=os.path.join(folder, f'run-{name}'),
        noise_multiplier=None if name == 'none' else noise_multiplier,
        bits=bits,
        rounds=rounds + 1,
        clients_per_round=clients,
        vocab_file=vocab_file,
        eval_every=0,
        seed=seed)
    start = time.perf_counter()
    setup = training.prepare(config)
    process, dimension = training.build_process(setup)
    build = time.perf_counter() - start
    state = process.initialize()
    ids = list(setup.data.train.client_ids)[:clients]
    start = time.perf_counter()
    state = process.next(state, ids).state
    first = time.perf_counter() - start
    built[name] = [setup, process, state, ids]
    rows[name] = dict(mechanism=name,
                      dimension=dimension,
                      build=build,
                      first=first,
                      wall=[],
                      cpu=[])
  for _ in range(rounds):
    for name in mechanisms:
      setup, process, state, ids = built[name]
      with harness.timed() as t:
        built[name][2] = process.next(state, ids).state
      rows[name]['wall'].append(t.wall)
      rows[name]['cpu'].append(t.cpu + t.workers_cpu)
  peak_rounds = _peak_mib()  # before the measurements below add theirs
  print(f'rounds done: peak {peak_rounds:.0f} MiB; wall {rows}',
        file=sys.stderr,
        flush=True)
  for name in mechanisms:
    setup, process, _, _ = built[name]
    if aggregation:
      rows[name]['aggregation'] = _aggregation_seconds(setup, process, clients,
                                                       rng)
  eval_ms, eval_count = _evaluation_ms(*built[mechanisms[0]][:3])
  peak = _peak_mib()
  base = rows.get('none')
  for row in rows.values():
    row['peak_mib'] = peak
    row['peak_rounds_mib'] = peak_rounds
    row['eval_ms_per_example'] = eval_ms
    row['wall_round'] = float(np.median(row['wall']))
    row['cpu_round'] = float(np.median(row['cpu']))
  for row in rows.values():
    if base:
      row['wall_ratio'] = row['wall_round'] / base['wall_round']
      row['cpu_ratio'] = row['cpu_round'] / base['cpu_round']
  table = harness.Table(
      [('mechanism', 'mechanism', 's'), ('dimension', 'd', ','),
       ('build', 'build s', '.1f'), ('first', 'first round s', '.1f'),
       ('wall_round', 's/round', '.2f'), ('wall_ratio', 'ratio', '.2f'),
       ('cpu_round', 'CPU s/round', '.2f'), ('cpu_ratio', 'CPU ratio', '.2f'),
       ('aggregation', 'aggregation s', '.2f')],
      [rows[name] for name in mechanisms],
      title=(f'{task}: {clients} clients x {examples} examples per round, '
             f'{bits} bits, z = {noise_multiplier:g}; median of {rounds} '
             'rounds after the first (interleaved)'),
      notes=[
          f'peak memory (this process + worker VmHWM): after the '
          f'rounds {peak_rounds:.0f} MiB ({peak_rounds / 1024:.2f} GiB); '
          f'after the aggregation-alone and evaluation measurements '
          f'{peak:.0f} MiB; database generated in {generated:.0f} s',
          f'evaluation: {eval_ms:.2f} ms per test example (over '
          f'{eval_count} examples, read once and cached)',
          'ratio / CPU ratio: vs the no-DP round (target for ddg on '
          'EMNIST: <= 1.3)'
      ])
  return table


if __name__ == '__main__':
  harness.main(
      run,
      __doc__,
      tff=True,
      task='emnist or stackoverflow',
      clients='clients per round (all of them)',
      examples='examples (sentences) per client',
      rounds='timed rounds per mechanism, after one untimed',
      mechanisms=harness.arg('mechanisms to compare', choices=MECHANISMS),
      bits='ddg / skellam bits',
      noise_multiplier='z',
      seed='data, cohorts and model initialization',
      aggregation='also time each aggregation alone (holds every client\'s '
      'random update in Python: 1.6 GB for 100 Stack Overflow clients)')
