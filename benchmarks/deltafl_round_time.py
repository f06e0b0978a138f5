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

import _harness as harness
import numpy as np

POPULATION = 2500
TARGET_RATIO = 2.0


def run(rounds=3, clients=100, seed=0, reference=True, self_sampling=False):
  """One row per process: seconds per round, first round, build."""
  if rounds < 1 or not 1 <= clients <= POPULATION:
    raise harness.UsageError(
        f'--rounds {rounds} --clients {clients}: use --rounds >= 1 and 1 <= '
        f'--clients <= {POPULATION}')

  import tensorflow_federated as tff
  from tff_ddp import learning
  from tff_ddp.learning import tasks

  task = tasks.b3_task()
  model_fn = task.model_fn()
  optimizer = tff.learning.optimizers.build_sgdm(0.1)
  common = dict(target_epsilon=5.0,
                target_delta=1.0 / POPULATION,
                rounds=1000,
                clients_per_round=clients,
                l2_clip=0.1,
                population=POPULATION,
                adversary='server')
  self_kw = dict(sampling='self') if self_sampling else {}
  builds = {
      'DP-Delta-FL':
          lambda: learning.build_superquantile_fl(
              model_fn,
              0.5,
              optimizer,
              privacy=learning.calibrate(model_fn,
                                         budget_ratio=0.25,
                                         loss_upper_bound=1.5,
                                         num_bins=16,
                                         histogram='tree',
                                         **common,
                                         **self_kw,
                                         **(dict(count='estimated')
                                            if self_sampling else {})).config),
      'DP-FedAvg':
          lambda: learning.build_dp_fedavg(
              model_fn,
              optimizer,
              privacy=learning.calibrate(model_fn, **common, **self_kw).config)
  }
  if self_sampling:
    builds['DP-FedAvg cohort'] = lambda: learning.build_dp_fedavg(
        model_fn,
        optimizer,
        privacy=learning.calibrate(model_fn, **common).config)
  if reference:
    builds['FedAvg (no DP)'] = lambda: learning.build_baseline(
        'fedavg', model_fn, optimizer)
    builds['Delta-FL (no DP)'] = lambda: learning.build_superquantile_fl(
        model_fn, 0.5, optimizer, reweighting='exact')
  built, build_seconds = {}, {}
  for name, build in builds.items():
    with harness.timed() as timing:
      built[name] = build()
    build_seconds[name] = timing.wall

  rng = np.random.default_rng(seed)
  cohorts = [
      task.train.datasets(rng.choice(POPULATION, clients, replace=False))
      for _ in range(rounds + 1)
  ]
  everyone = task.train.datasets(np.arange(POPULATION))
  self_sampled = ('DP-Delta-FL', 'DP-FedAvg') if self_sampling else ()
  data = lambda name, t: everyone if name in self_sampled else cohorts[t]
  names = tuple(built)
  states, first, seconds = {}, {}, {name: [] for name in names}
  for name in names:
    process = built[name]
    state = process.initialize()
    with harness.timed() as timing:
      state = process.next(state, data(name, 0)).state
    first[name] = timing.wall
    states[name] = state
    print(f'{name}: first round {first[name]:.2f} s', flush=True)
  for t in range(rounds):
    for name in names:
      with harness.timed() as timing:
        output = built[name].next(states[name], data(name, t + 1))
      seconds[name].append(timing.wall)
      states[name] = output.state
      privacy = output.metrics.get('privacy')
      print(f'{name}: round {t + 1} {seconds[name][-1]:.2f} s' +
            ('' if privacy is None else ' (epsilon so far '
             f'{float(privacy["epsilon"]):.4f})'),
            flush=True)
  workers = harness.processes.descendant_pids()
  ended = harness.processes.release_tff()
  left = [pid for pid in workers if not harness.processes.has_exited(pid)]

  median = {name: float(np.median(seconds[name])) for name in names}
  ratio = median['DP-Delta-FL'] / median['DP-FedAvg']
  table = harness.Table(
      [('process', 'process', 's'), ('median', 's/round (median)', '.2f'),
       ('min', 'min', '.2f'), ('max', 'max', '.2f'), ('first', 'first', '.2f'),
       ('build', 'build', '.2f')],
      title=(f'self-sampling: DP-Delta-FL and DP-FedAvg have all {POPULATION}'
             f' clients per round (coins of rate {clients}/{POPULATION}); '
             f'"DP-FedAvg cohort" has {clients}\n' if self_sampling else '') +
      f'B.3, {clients} of {POPULATION} clients per round, linear model, DDG '
      f'update aggregator (same config); {rounds} timed rounds of each after '
      'one warm-up, interleaved',
      notes=[
          f'DP-Delta-FL / DP-FedAvg = {ratio:.2f} (target <= '
          f'{TARGET_RATIO:g}): '
          f'{"met" if ratio <= TARGET_RATIO else "NOT met"}'
      ])
  for name in names:
    table.add(process=name,
              median=median[name],
              min=min(seconds[name]),
              max=max(seconds[name]),
              first=first[name],
              build=build_seconds[name],
              seconds=seconds[name])
  if self_sampling:
    table.notes.append(
        f'self-sampled DP-FedAvg / cohort DP-FedAvg = '
        f'{median["DP-FedAvg"] / median["DP-FedAvg cohort"]:.1f}x per round '
        f'({POPULATION} vs {clients} clients computing and sending)')
  table.notes.append(f'TFF workers ended: {len(ended)}; still running: '
                     f'{len(left)}')
  return table


if __name__ == '__main__':
  harness.main(
      run,
      __doc__,
      tff=True,
      rounds='timed rounds of each process (after a warm-up)',
      clients='clients per round (of 2500)',
      seed='the cohorts',
      reference='skip the non-private reference rows',
      self_sampling='self-sampled private processes on all 2500 clients per '
      'round, against a cohort DP-FedAvg')
