"""Do the estimator improvements help? Paper (eq. 1) vs ours, same noise.

For each noisy round (DDG, sampled with
`tff_ddp.analytics.quantiles.simulation`), every estimator reads the *same*
noisy sum:

  paper        eq. 1 on the raw CDF (flat option 1; tree/Haar normalised by n)
  monotone     isotonic projection of the CDF, then eq. 1
  interpolate  isotonic, then linear interpolation inside the bin
  consistent   tree only: least-squares consistent tree, then eq. 1

Error: worst over p in {0.1, ..., 0.9} of |F_n(q_hat) - p|, F_n the
empirical CDF of the (clipped) true values -- eq. 3 when q_hat is a bin
edge, and defined for interpolated estimates too. Mean over --runs rounds;
ratio = estimator / paper (< 1 means it helps).

  .venv/bin/python benchmarks/quantile_estimators.py [--runs 20]
"""

import itertools
import zlib

import _harness as harness
import numpy as np

QUANTILES = tuple(np.round(np.arange(0.1, 1.0, 0.1), 1))
DELTA = 1e-5


def value_error(estimates, values):
  v = np.sort(np.clip(values, 0.0, 10.0))
  f = np.searchsorted(v, np.asarray(estimates), side='right') / len(v)
  return float(np.max(np.abs(f - np.asarray(QUANTILES))))


def run(runs=20, epsilons=(1.0, 2.0, 5.0)):
  """One row per (method, estimator): the mean worst error per epsilon and
  its ratio to the paper's estimator."""
  from tff_ddp.analytics.quantiles import encodings as hg
  from tff_ddp.analytics.quantiles import process as q
  from tff_ddp.analytics.quantiles import simulation as sim
  b = 32
  estimators = {
      'paper': dict(monotone=False, interpolate=False, consistent=False),
      'monotone': dict(monotone=True, interpolate=False, consistent=False),
      'interpolate': dict(monotone=True, interpolate=True, consistent=False),
      'consistent': dict(monotone=False, interpolate=False, consistent=True),
  }
  errors = {}
  for n, dist, eps, method in itertools.product((128, 512), ('unif', 'chi2'),
                                                epsilons, hg.METHODS):
    encoding = hg.encoding(method, b)
    params = q.quantile_parameters(encoding, 'discrete_gaussian', b,
                                   q.QuantileSetting(n, eps, DELTA))
    for run_index in range(runs):
      rng = np.random.default_rng(run_index + 17 * n)
      values = (rng.uniform(0, 10, n) if dist == 'unif' else np.clip(
          rng.chisquare(4, n), 0, 10))
      codes = sim.encodings(encoding, values, 0.0, 10.0)
      seed = zlib.crc32(repr((n, dist, eps, method, run_index)).encode())
      noisy = sim.noisy_sum('discrete_gaussian', codes, params, seed=seed)
      for name, opts in estimators.items():
        if opts['consistent'] and not encoding.has_consistent_estimator:
          continue
        # Each with the count its paper uses (flat: estimated, else n).
        cdf = encoding.cdf(noisy,
                           n if hg.exact_count(encoding.paper_count) else None,
                           consistent=opts['consistent'],
                           monotone=opts['monotone'])
        est = hg.quantile_values(cdf,
                                 QUANTILES,
                                 0.0,
                                 10.0,
                                 b,
                                 interpolate=opts['interpolate']).numpy()
        errors.setdefault((method, name, eps),
                          []).append(value_error(est, values))
  table = harness.Table(
      [('method', 'method', 's'), ('estimator', 'estimator', 's')] +
      [(f'eps={e:g}', f'eps={e:g}',
        lambda row, e=e: f'{row[f"error_{e:g}"]:.4f} '
        f'({row[f"ratio_{e:g}"]:4.2f})') for e in epsilons],
      title=f'DDG, b = {b}, n in {{128, 512}}, Unif and chi2(4), {runs} '
      'runs each: mean worst error (ratio to paper)')
  for method in hg.METHODS:
    for name in estimators:
      if (method, name, epsilons[0]) not in errors:
        continue
      row = table.add(method=method, estimator=name)
      for e in epsilons:
        mean = np.mean(errors[(method, name, e)])
        row[f'error_{e:g}'] = mean
        row[f'ratio_{e:g}'] = mean / np.mean(errors[(method, 'paper', e)])
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               runs='noisy rounds per configuration',
               epsilons='target epsilons (delta 1e-5)')
