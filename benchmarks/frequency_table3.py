"""Table 3 of the frequency paper: multi-round frequency estimation (MFFE).

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy", Section 4.3 ("Extension to
multi-round Federated Frequency Estimation"), Algorithm 7 (MFFE), App. D
(Corollary 1) and App. E.1 (experimental details), Table 3.

n = 10^5 users in R = 100 rounds of N = 1000 (App. E.1 gives n; N = 1000 is
the per-round number of its MFFE experiments, "we fix N = 1000 and other
parameters set to be equal to the MFFE experiments presented previously"),
d in {50, 100}, the paper's i.i.d. and heterogeneous data
(`frequency.data`; the docstring stand-in with --datasets docstrings if it
has 10^5 users, no paper row). Each round: OcPBM of the batch with the
current clip C^(r) (cPBM theta = 0.2, m = 15), and the indicator
||y_i|| > C^(r) through a one-coordinate cPBM with theta' = theta, m' = 15;
C^(r+1) = C^(r) exp(-eta (gamma-hat - gamma*)), eta = 1, C^(1) = 1
(App. E.1). The parameters come from `frequency.process.frequency_parameters`
('multi_round', N per round, R rounds; theta' calibrated to the paper's
split, see `_frequency.at_paper_parameters`), the runs from the
distribution-exact simulator `frequency.multi_round.simulate` (checked
against the TFF process in its tests). Columns (l2 error of eq. 1 of the
final estimate of sum_i x_i over all rounds):

  Best C*   the clip fixed in every round at the eq. 5 / Corollary 1
            quantile 1 - sqrt(D / (4 m n theta^2)), n = N R, of all n
            users' representation norms, computed without noise (in
            hindsight); the norms of one frame (each round has its own
            frame; the quantile barely moves between frames)
  OcPBM     the online private C-hat with that target (Algorithm 7)
  C_small   online, target 1 - sqrt(D / (4 m N theta^2)), N per round
  C_median  online, target 1/2

Privacy: user-level, against the server that runs the protocol (it sees
the secure sums and who takes part), delta = 1e-5. Every user takes part in
one round only and the batches are fixed independently of the data, so
the whole run is as private as one round (parallel composition, App. D:
`disjoint_rounds=True`, opted in: the batches are disjoint by
construction here). "ours": our accountant,
zero-out neighbours, the round's two releases composed (N = 1000 users
each); "Lemma 2": the paper's Lemma 2 as printed (replace-one, m D and
m' 1 coordinates; `frequency.clipping.published_epsilon`), with our D (128 / 256)
and with the paper's D = 2d. The paper reports 7.5 (d = 50) and 10.7
(d = 100).

  .venv/bin/python benchmarks/frequency_table3.py [--runs 5]
      [--datasets iid heterogeneous] [--dims 50 100] [--initial-clip 1]

(--initial-clip: C^(1) of the online methods, to see how much of their
error is the climb from the paper's C^(1) = 1; the paper rows are for 1.)

A fresh data seed, frames and noise per run (the paper: mean ± std over 5
runs). Prints per setting the time, then the table with ours, the paper's
and the ratio ours / paper, then the final clips, then the clipping bias of
the clips each method used (||sum_i x_i (1 - min(1, C^(r(i)) /
||y_i||))|| / n with the norms of one frame): over all rounds and over
rounds 1-5 only, where the online clip is still climbing from C^(1) = 1.
About 25 minutes with 5 runs on 2 shared cores (~1 minute per run and
setting).
"""

import time
import zlib

import _frequency as F
import _harness as harness
import numpy as np

N_TOTAL = 10**5
PER_ROUND = 1000
THETA = 0.2
M = 15
INDICATOR_M = 15
ETA = 1.0
INITIAL_CLIP = 1.0
DELTA = 1e-5
EPSILON = {50: 7.5, 100: 10.7}  # the paper's, Lemma 2, App. E.1
METHODS = ('Best C*', 'OcPBM', 'C_small', 'C_median')
PAPER = {  # Table 3: mean ± std over 5 runs
    ('iid', 50): ((0.54, 0.04), (0.65, 0.08), (0.94, 0.10), (3.47, 0.11)),
    ('iid', 100): ((0.7, 0.04), (0.65, 0.05), (1.3, 0.06), (2.93, 0.07)),
    ('heterogeneous', 50): ((2.67, 0.20), (2.85, 0.26), (4.97, 0.20),
                            (10.45, 0.08)),
    ('heterogeneous', 100): ((3.22, 0.17), (3.26, 0.09), (5.92, 0.07),
                             (8.81, 0.07)),
}


def configure(d, initial_clip=INITIAL_CLIP):
  """(params, targets by method, epsilons) for one d."""
  from tff_ddp.analytics.frequency import clipping as fq
  params, ours, published = F.at_paper_parameters('multi_round',
                                                  d,
                                                  PER_ROUND,
                                                  DELTA,
                                                  theta=THETA,
                                                  m=M,
                                                  quantile_theta=THETA,
                                                  indicator_m=INDICATOR_M,
                                                  rounds=N_TOTAL // PER_ROUND,
                                                  learning_rate=ETA,
                                                  clip=initial_clip,
                                                  disjoint_rounds=True)
  paper_d = fq.published_epsilon([(THETA, M, PER_ROUND, 2 * d),
                                  (THETA, INDICATOR_M, PER_ROUND, 1)], DELTA)
  targets = {
      'Best C*': params.target_quantile,
      'OcPBM': params.target_quantile,
      'C_small': fq.optimal_quantile(params.effective_dim, M, PER_ROUND, THETA),
      'C_median': 0.5,
  }
  return params, targets, (ours, published, paper_d)


def one_run(params, targets, x, rng):
  """{method: (error, final clip, its level among all norms)}, C*."""
  from tff_ddp.analytics.frequency import clipping as fq
  from tff_ddp.analytics.frequency import multi_round
  from tff_ddp.analytics.frequency import simulation as fs
  batches = [x[i:i + PER_ROUND] for i in range(0, len(x), PER_ROUND)]
  norms = fs.norms_of(
      fs.representations(params.encoder(), x, fs.round_seed(rng)))
  c_star = fq.optimal_clip(norms, targets['Best C*'])
  out = {}
  for method in METHODS:
    if method == 'Best C*':
      rounds = multi_round.simulate(params, batches, rng, clip=c_star)
    else:
      rounds = multi_round.simulate(params,
                                    batches,
                                    rng,
                                    target=targets[method])
    last = rounds[-1].clip
    # The clipping bias of the clips used, ||sum_i x_i (1 - min(1,
    # C^(r(i)) / ||y_i||))|| / n, with the norms of the one frame (each
    # round's own frame differs slightly): all rounds, and rounds 1-5.
    per_user = np.repeat([rd.clip for rd in rounds], PER_ROUND)[:len(x)]
    lost = x * (1.0 - np.minimum(
        1.0, per_user / np.where(norms > 0, norms, 1.0)))[:, None]
    bias = np.linalg.norm(lost.sum(axis=0)) / len(x)
    early = np.linalg.norm(lost[:5 * PER_ROUND].sum(axis=0)) / len(x)
    out[method] = (fq.l2_error(rounds[-1].estimate,
                               x), last, float((norms
                                                <= last).mean()), bias, early)
  return out, c_star


def run(runs=5,
        datasets=('iid', 'heterogeneous'),
        dims=(50, 100),
        initial_clip=INITIAL_CLIP):
  """Table 3 (ours, the paper's, the ratio), the final clips and the
  clipping bias, one row per (dataset, d)."""
  configs = {}
  for d in dims:
    start = time.perf_counter()
    params, targets, eps = configure(d, initial_clip)
    configs[d] = (params, targets, eps)
    print(
        f'd = {d}: D = {params.output_dim}, theta = {params.theta}, m = '
        f'{params.num_trials}, indicator theta\' = '
        f'{params.indicator_theta:.4f}, m\' = '
        f'{params.indicator_num_trials}, eta = {params.learning_rate}, '
        f'C^(1) = {params.clip}, R = {params.rounds} rounds of N = '
        f'{params.expected_clients_per_round} (n = '
        f'{params.total_clients}); targets: C* / OcPBM '
        f'{targets["OcPBM"]:.4f}, C_small {targets["C_small"]:.4f}, '
        f'C_median 0.5',
        flush=True)
    print(
        f'  epsilon (delta = {DELTA}, one round = the whole run by '
        f'parallel composition over disjoint batches): ours {eps[0]:.3f} '
        f'(against the server, zero-out); Lemma 2 as published '
        f'{eps[1]:.3f} with our D = {params.output_dim}, {eps[2]:.3f} '
        f'with D = 2d = {2 * d}; paper {EPSILON[d]} '
        f'({time.perf_counter() - start:.0f} s)',
        flush=True)
  results = {}
  for name in datasets:
    for d in dims:
      start = time.perf_counter()
      params, targets, _ = configs[d]
      rng = np.random.default_rng(zlib.crc32(f'table3{name}{d}'.encode()))
      outs, stars = [], []
      for seed in range(runs):
        try:
          x = F.dataset(name, N_TOTAL, d, seed)
        except ValueError as e:
          print(f'{name}, d = {d}: skipped ({e})', flush=True)
          break
        out, c_star = one_run(params, targets, x, rng)
        outs.append(out)
        stars.append(c_star)
      if not outs:
        continue
      results[name, d] = (outs, stars)
      print(
          f'{name}, d = {d}: {len(outs)} runs, '
          f'{time.perf_counter() - start:.0f} s',
          flush=True)

  errors = harness.Table(
      [('dataset', 'dataset', 's'), ('d', 'd', 'd')] +
      [(m, m, lambda row, m=m: row[m]
        if isinstance(row[m], str) else F.cell(row[m]))
       for m in METHODS] + [('ratio', 'OcPBM / Best C*', '.3f')],
      title=f'Table 3 (MFFE): l2 error of the final estimate, mean ± std '
      f'over {runs} runs; n = {N_TOTAL}, N = {PER_ROUND} per round, theta = '
      f'{THETA}, m = {M}, m\' = {INDICATOR_M}, eta = {ETA}, C^(1) = '
      f'{initial_clip}')
  clips = harness.Table(
      [('dataset', 'dataset', 's'), ('d', 'd', 'd'),
       ('c_star', 'C* (level target)',
        lambda row: f'{row["c_star"]:.2f} ({row["target"]:.3f})')] +
      [(m, m if m != 'OcPBM' else 'OcPBM C-hat',
        lambda row, m=m: f'{row[m][0]:.2f} ({row[m][1]:.3f})')
       for m in METHODS[1:]],
      title='Final clip C^(R) (mean over runs) and its level among all n '
      'norms:')
  bias = harness.Table(
      [('dataset', 'dataset', 's'), ('d', 'd', 'd')] +
      [(m, m, lambda row, m=m: f'{row[m][0]:.3f} / {row[m][1]:.3f}')
       for m in METHODS],
      title='Clipping bias of the clips used (mean over runs; ||lost mass|| '
      '/ n, norms of one frame): all rounds / rounds 1-5 only')
  for (name, d), (outs, stars) in results.items():
    means = {m: np.mean([r[m][0] for r in outs]) for m in METHODS}
    errors.add(dataset=name,
               d=d,
               ratio=means['OcPBM'] / means['Best C*'],
               **{m: [r[m][0] for r in outs] for m in METHODS})
    paper = PAPER.get((name, d))
    if paper:
      errors.add(
          dataset='paper',
          d=d,
          ratio=paper[1][0] / paper[0][0],
          **{
              m: f'{a:.2f} ± {s:.2f}' for m, (a, s) in zip(METHODS, paper)
          })
      errors.add(
          dataset='ratio',
          d=d,
          ratio='',
          **{
              m: F.fmt_ratio(means[m], p[0]) for m, p in zip(METHODS, paper)
          })
    _, targets, _ = configs[d]
    clips.add(dataset=name,
              d=d,
              c_star=np.mean(stars),
              target=targets['OcPBM'],
              **{
                  m: (np.mean([r[m][1] for r in outs]),
                      np.mean([r[m][2] for r in outs])) for m in METHODS[1:]
              })
    bias.add(dataset=name,
             d=d,
             **{
                 m: (np.mean([r[m][3] for r in outs]),
                     np.mean([r[m][4] for r in outs])) for m in METHODS
             })
  return [errors, clips, bias]


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               runs='runs (data seeds) per dataset and d',
               datasets='the datasets, of frequency.data.DATASETS',
               dims='d, the items',
               initial_clip='C^(1) of the online methods (the paper: 1; the '
               'paper rows and ratios are for C^(1) = 1 only)')
