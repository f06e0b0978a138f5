"""Seconds per round: DP-Delta-FL vs DP-FedAvg, 100 clients, the B.3 task.

The performance target of the Delta-FL issue: a round of DP-Delta-FL with
100 clients on the B.3 task within 2x the time of a DP-FedAvg round with the
same aggregator. Both are the real TFF processes of `tff_ddp.learning`
(`build_superquantile_fl` with a private loss histogram, and
`build_dp_fedavg`; the model update of both goes through the same
distributed discrete Gaussian aggregator and secure sum) in TFF's C++ test
execution context, on the B.3 task of "Differentially Private Federated
Quantiles with the Distributed Discrete Gaussian Mechanism" (linear model,
one full-gradient local step of learning rate 0.1).

The privacy configuration is the defaults of `tff-ddp superquantile`, with
the budget over the paper's 1000 rounds (epsilon = 5 over 1000 rounds of 100
of 2500 clients, delta = 1/2500, against the server; C = 0.1; DP-Delta-FL:
theta = 0.5, r = 0.25, B = 1.5, 16-bin tree histogram), calibrated by
`tff_ddp.learning.calibrate`.

Each process runs one warm-up round (the first call of `next`: the C++
executor compiles the computation; reported as "first") and then --rounds
timed rounds; the timed rounds of the processes interleave (round 1 of each,
then round 2 of each, ...) on the same cohorts, so a change of the machine's
load hits all of them. Only `process.next` is timed (the cohorts' tf.data
datasets are built before). Prints the median seconds per round, the first
round, and the ratio DP-Delta-FL / DP-FedAvg of the medians. Two non-private
reference rows (FedAvg, and Delta-FL with the exact quantile: no noise;
`--no-reference` drops them) show how much of a round is the DP machinery
rather than TFF running 100 clients.

  PYTHONPATH=$PWD .venv/bin/python benchmarks/deltafl_round_time.py \
      [--rounds 3] [--clients 100] [--no-reference] [--self-sampling]

--self-sampling: the two private processes use `PrivacyConfig(sampling=
'self')` (ε = 5 against the server with private coins of rate
clients / 2500; DP-Delta-FL with count='estimated') and every round takes
all 2500 clients, as self-sampling requires; a third row, DP-FedAvg on a
cohort of --clients (the default mode's process), is the peer, and the
ratio printed is self-sampled DP-FedAvg / cohort DP-FedAvg: what a round
of self-sampling costs.
"""

import argparse
import os
import time

import _common  # pylint: disable=unused-import
import numpy as np

POPULATION = 2500
TARGET_RATIO = 2.0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=3,
                      help='timed rounds of each process (after a warm-up)')
  parser.add_argument('--clients', type=int, default=100,
                      help='clients per round (of 2500)')
  parser.add_argument('--seed', type=int, default=0, help='the cohorts')
  parser.add_argument('--no-reference', action='store_true',
                      help='skip the non-private reference rows')
  parser.add_argument('--self-sampling', action='store_true',
                      help='self-sampled private processes on all 2500 '
                      'clients per round, against a cohort DP-FedAvg')
  args = parser.parse_args()
  if args.rounds < 1 or not 1 <= args.clients <= POPULATION:
    parser.error('--rounds >= 1 and 1 <= --clients <= 2500')

  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp import learning  # pylint: disable=g-import-not-at-top
  from tff_ddp.learning import tasks  # pylint: disable=g-import-not-at-top
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top

  task = tasks.b3_task()
  model_fn = task.model_fn()
  optimizer = tff.learning.optimizers.build_sgdm(0.1)
  common = dict(target_epsilon=5.0, target_delta=1.0 / POPULATION,
                rounds=1000, clients_per_round=args.clients, l2_clip=0.1,
                population=POPULATION, adversary='server')
  built, build_seconds = {}, {}
  self_kw = dict(sampling='self') if args.self_sampling else {}
  start = time.perf_counter()
  config = learning.calibrate(
      model_fn, budget_ratio=0.25, loss_upper_bound=1.5, num_bins=16,
      histogram='tree', **common, **self_kw, **(
          dict(count='estimated') if args.self_sampling else {})).config
  built['DP-Delta-FL'] = learning.build_superquantile_fl(
      model_fn, 0.5, optimizer, privacy=config)
  build_seconds['DP-Delta-FL'] = time.perf_counter() - start
  start = time.perf_counter()
  config = learning.calibrate(model_fn, **common, **self_kw).config
  built['DP-FedAvg'] = learning.build_dp_fedavg(model_fn, optimizer,
                                                privacy=config)
  build_seconds['DP-FedAvg'] = time.perf_counter() - start
  if args.self_sampling:
    start = time.perf_counter()
    config = learning.calibrate(model_fn, **common).config
    built['DP-FedAvg cohort'] = learning.build_dp_fedavg(
        model_fn, optimizer, privacy=config)
    build_seconds['DP-FedAvg cohort'] = time.perf_counter() - start
  if not args.no_reference:
    start = time.perf_counter()
    built['FedAvg (no DP)'] = learning.build_baseline('fedavg', model_fn,
                                                      optimizer)
    build_seconds['FedAvg (no DP)'] = time.perf_counter() - start
    start = time.perf_counter()
    built['Delta-FL (no DP)'] = learning.build_superquantile_fl(
        model_fn, 0.5, optimizer, reweighting='exact')
    build_seconds['Delta-FL (no DP)'] = time.perf_counter() - start

  rng = np.random.default_rng(args.seed)
  cohorts = [task.train.datasets(rng.choice(POPULATION, args.clients,
                                            replace=False))
             for _ in range(args.rounds + 1)]
  everyone = task.train.datasets(np.arange(POPULATION))
  self_sampled = (('DP-Delta-FL', 'DP-FedAvg') if args.self_sampling
                  else ())
  data = lambda name, t: everyone if name in self_sampled else cohorts[t]
  tff.backends.test.set_sync_test_cpp_execution_context()
  names = tuple(built)
  states, first, seconds = {}, {}, {name: [] for name in names}
  workers = set()
  try:
    for name in names:
      process = built[name]
      state = process.initialize()
      start = time.perf_counter()
      state = process.next(state, data(name, 0)).state
      first[name] = time.perf_counter() - start
      states[name] = state
      print(f'{name}: first round {first[name]:.2f} s', flush=True)
    for t in range(args.rounds):
      for name in names:
        start = time.perf_counter()
        output = built[name].next(states[name], data(name, t + 1))
        seconds[name].append(time.perf_counter() - start)
        states[name] = output.state
        privacy = output.metrics.get('privacy')
        print(f'{name}: round {t + 1} {seconds[name][-1]:.2f} s' +
              ('' if privacy is None else ' (epsilon so far '
               f'{float(privacy["epsilon"]):.4f})'), flush=True)
      workers.update(processes.descendant_pids())
  finally:
    ended = processes.release_tff()
  left = [pid for pid in workers if os.path.exists(f'/proc/{pid}')
          and processes._state(pid) not in ('', 'Z', 'X')]  # pylint: disable=protected-access

  load = os.getloadavg()
  median = {name: float(np.median(seconds[name])) for name in names}
  ratio = median['DP-Delta-FL'] / median['DP-FedAvg']
  print()
  if args.self_sampling:
    print(f'self-sampling: DP-Delta-FL and DP-FedAvg have all {POPULATION} '
          f'clients per round (coins of rate {args.clients}/{POPULATION}); '
          f'"DP-FedAvg cohort" has {args.clients}')
  print(f'B.3, {args.clients} of {POPULATION} clients per round, linear '
        f'model, DDG update aggregator (same config); {args.rounds} timed '
        'rounds of each after one warm-up, interleaved; load average '
        f'{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end')
  print(f'{"process":17s} {"s/round (median)":>16s} {"min":>7s} {"max":>7s}'
        f' {"first":>7s} {"build":>7s}')
  for name in names:
    print(f'{name:17s} {median[name]:16.2f} {min(seconds[name]):7.2f} '
          f'{max(seconds[name]):7.2f} {first[name]:7.2f} '
          f'{build_seconds[name]:7.2f}')
  print(f'DP-Delta-FL / DP-FedAvg = {ratio:.2f} (target <= '
        f'{TARGET_RATIO:g}): {"met" if ratio <= TARGET_RATIO else "NOT met"}')
  if args.self_sampling:
    print(f'self-sampled DP-FedAvg / cohort DP-FedAvg = '
          f'{median["DP-FedAvg"] / median["DP-FedAvg cohort"]:.1f}x per '
          f'round ({POPULATION} vs {args.clients} clients computing and '
          'sending)')
  print(f'TFF workers ended: {len(ended)}; still running: {len(left)}')


if __name__ == '__main__':
  main()
