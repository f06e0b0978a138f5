"""DP-Delta-FL vs DP-FedAvg on B.3 with self-sampling, against the server.

The runs of `deltafl_figure3.py` sample cohorts of n = 100 of N = 2500
clients; the server that runs the protocol picks them, so no amplification
by sampling is valid against it and epsilon = 5 over 1000 rounds needs
z = 5.30 for DP-FedAvg. With self-sampling (`PrivacyConfig(sampling='self')`)
all N clients are in every secure sum and each keeps its data with a
private coin of rate q = n / N (the aggregators' `client_sampling_rate`);
the server never learns the coins, so each release is a
`SelfSampledDpEvent` (Poisson-subsampled RDP) *against the server*, and the
same epsilon needs far less noise. The price: all N clients compute and
communicate in every round (25x here).

Same task, model, rounds, learning rate, delta = 1/N and zero-out
neighbours as `deltafl_figure3.py`; the rounds run in
`tff_ddp.learning.simulation.LinearSimulator` (its `BatchedSum` simulates
the coins and the N noise shares). Tuning, by the seed-0 validation 90th
percentile only (test errors never select; a move needs a strictly lower
score):

* DP-FedAvg: C over the clip grid of `deltafl_figure3.py` (quantiles of
  non-private FedAvg's update norms);
* DP-Delta-FL (each theta): C over the same grid at r = 0.5, then r over
  --ratios at that C, then (with --tail-counts) the divisor; B = 1.5,
  b = 16 bins, tree histogram, count='estimated' (the number of clients
  that kept their data is hidden, so the CDF is normalised by the noisy
  total);

then every chosen configuration runs with --seeds seeds. The table adds
the paired (same seed: same coins' streams and noise streams) differences
DP-Delta-FL - DP-FedAvg, mean +- standard error.

  PYTHONPATH=$PWD .venv/bin/python benchmarks/deltafl_self_sampling.py \
      --epsilons 5 --thetas 0.5 --seeds 5

Runs are cached one JSON line each in
`benchmarks/results/deltafl_self_runs.jsonl` (delete it to retrain).
"""

import os
import time

import _harness as harness
import deltafl_figure3 as f3
import numpy as np

CACHE = os.path.join(f3.HERE, 'results', 'deltafl_self_runs.jsonl')
RATIOS = (0.25, 0.5, 0.75)


def run(epsilons=(5.0,),
        thetas=(0.5,),
        ratios=RATIOS,
        tail_counts=('expected',),
        seeds=5,
        rounds=f3.ROUNDS,
        cached_only=False):
  """Tunes each method (cached runs), then one row per (epsilon, method)
  over the seeds, and the paired differences."""
  import tensorflow as tf
  # One thread: on a shared 2-core machine TF's pools only contend.
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  from tff_ddp import learning
  from tff_ddp.learning import simulation
  from tff_ddp.learning import tasks

  task = tasks.b3_task()
  sim = simulation.LinearSimulator(task, learning_rate=0.1, local_steps=1)
  runs = f3.Runs(CACHE, cached_only=cached_only)
  norms = f3._update_norms(sim, seed=0)  # pylint: disable=protected-access  # measures a private part
  clips = tuple(
      float(f'{q:.3g}') for q in np.quantile(norms, [0.3, 0.5, 0.7, 0.9]))
  print(f'clip grid (update-norm quantiles 0.3..0.9): {clips}', flush=True)

  def private(objective,
              theta,
              eps,
              clip,
              seed,
              ratio=None,
              tail_count='expected'):
    config = dict(kind='private',
                  sampling='self',
                  objective=objective,
                  theta=theta,
                  eps=eps,
                  clip=clip,
                  seed=seed,
                  ratio=ratio,
                  bound=1.5,
                  bins=16,
                  tail_count=tail_count,
                  rounds=rounds,
                  adversary='server')

    def compute():
      extra = {} if ratio is None else dict(budget_ratio=ratio,
                                            loss_upper_bound=1.5,
                                            num_bins=16,
                                            tail_count=tail_count,
                                            count='estimated')
      calibrated = learning.calibrate(sim.update_type,
                                      eps,
                                      f3.DELTA,
                                      rounds,
                                      f3.CLIENTS,
                                      clip,
                                      population=f3.POPULATION,
                                      sampling='self',
                                      adversary='server',
                                      **extra)
      start = time.time()
      result = f3._summary(
          sim.run(  # pylint: disable=protected-access  # measures a private part
              objective,
              rounds,
              f3.CLIENTS,
              seed,
              theta,
              privacy=calibrated.config))
      result['seconds_per_round'] = (time.time() - start) / rounds
      result['noise_multiplier'] = calibrated.config.noise_multiplier
      result['quantile_noise_multiplier'] = (
          calibrated.config.quantile_noise_multiplier)
      return result

    return runs.get(config, compute)

  def pick(grid, score, label):
    """The first grid point with the least score (strictly better moves)."""
    scores = {g: score(g) for g in grid}
    best = grid[0]
    for g in grid[1:]:
      if scores[g] < scores[best]:
        best = g
    print(f'    {label}: ' + ', '.join(f'{g}: {scores[g]:.1f}' for g in grid) +
          f' -> {best}',
          flush=True)
    return best

  table = []
  for eps in epsilons:
    print(f'eps = {eps:g}', flush=True)
    fedavg_c = pick(clips,
                    lambda c: private('fedavg', None, eps, c, 0)['val_p90'],
                    'DP-FedAvg C')
    rows = {
        'DP-FedAvg': [
            private('fedavg', None, eps, fedavg_c, s) for s in range(seeds)
        ]
    }
    configs = {'DP-FedAvg': f'C={fedavg_c}'}
    for theta in thetas:
      score = lambda c, r, t: private('superquantile', theta, eps, c, 0, r, t)[
          'val_p90']
      c = pick(clips, lambda c: score(c, 0.5, 'expected'), f'theta={theta} C')
      r_grid = tuple(dict.fromkeys((0.5,) + tuple(ratios)))
      r = pick(r_grid, lambda r: score(c, r, 'expected'), f'theta={theta} r')
      tail = pick(tuple(tail_counts), lambda t: score(c, r, t),
                  f'theta={theta} divisor')
      name = f'DP-Delta-FL theta={theta}'
      rows[name] = [
          private('superquantile', theta, eps, c, s, r, tail)
          for s in range(seeds)
      ]
      configs[name] = f'C={c} r={r} B=1.5 b=16 div={tail}'
    table.append((eps, rows, configs))

  results = harness.Table(
      [('method', 'method', 's'), ('eps', 'eps', 'g'),
       ('val_p90', 'val p90', '.1f'),
       ('p90', 'test 90th pct', harness.mean_std('p90', ddof=1)),
       ('mean', 'test mean', harness.mean_std('mean', ddof=1)),
       ('z_w', 'z_w', '.2f'), ('z_q', 'z_q', '.2f'),
       ('seconds_per_round', 's/round', '.3f'), ('config', 'config', 's')],
      title=f'B.3, {rounds} rounds, self-sampling q = {f3.CLIENTS}/'
      f'{f3.POPULATION} (all {f3.POPULATION} clients in every secure sum), '
      f'delta = 1/{f3.POPULATION}, adversary = server, zero-out neighbours, '
      f'seeds 0..{seeds - 1}; error (%) over 500 test clients, mean +- '
      'sample std over seeds; val p90 = the seed-0 selection score')
  paired = harness.Table(
      [('eps', 'eps', 'g'), ('method', 'method', 's'),
       ('diff', 'per seed',
        lambda row: ' '.join(f'{d:+5.1f}' for d in row['diff'])),
       ('mean', 'mean +- se', lambda row: f'{row["mean"]:+.2f} +- '
        f'{row["se"]:.2f}')],
      title='paired by seed: DP-Delta-FL - DP-FedAvg, 90th-percentile test '
      'error (points)')
  for eps, rows, configs in table:
    base = np.array([r['test_p90'] for r in rows['DP-FedAvg']])
    for name, runs_ in rows.items():
      results.add(method=name,
                  eps=eps,
                  val_p90=runs_[0]['val_p90'],
                  p90=[r['test_p90'] for r in runs_],
                  mean=[r['test_mean'] for r in runs_],
                  z_w=runs_[0]['noise_multiplier'],
                  z_q=runs_[0]['quantile_noise_multiplier'],
                  seconds_per_round=np.median(
                      [r.get('seconds_per_round', np.nan) for r in runs_]),
                  config=configs[name])
      if name != 'DP-FedAvg':
        diff = np.array([r['test_p90'] for r in runs_]) - base
        paired.add(eps=eps,
                   method=name,
                   diff=diff,
                   mean=diff.mean(),
                   se=diff.std(ddof=1) / np.sqrt(len(diff)))
  return [results, paired]


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               epsilons='epsilons against the server',
               thetas='the DP-Delta-FL tail fractions',
               ratios='the r grid (0.5 is always tried first)',
               tail_counts=harness.arg('the grid of the update divisor',
                                       choices=['expected', 'histogram']),
               seeds='seeds of the final runs',
               rounds='training rounds',
               cached_only='train nothing; report from the cache')
