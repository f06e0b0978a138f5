"""Figure 2 of dp-federated-quantiles (and Table 5 of the frequency paper).

Worst quantile error (the paper's eq. 3) over p in {0.1, ..., 0.9} versus
epsilon for (epsilon, 1e-5)-DP, mean +- std over --runs runs, for
n in {128, 512}, b in {32, 64}, Unif[0, 10] and chi^2(4) clipped to [0, 10],
ring 2^18, and:

  flat-est   Algorithm 1 option 1 (normalise by the noisy total)
  flat-n     Algorithm 1 option 2 (normalise by n)
  tree       Algorithm 2 (binary tree without root, maximal dyadic prefixes)
  haar       Haar wavelet coefficients (exact inverse)

each with the distributed discrete Gaussian (DDG), the Poisson binomial
(cPBM) and the central Gaussian at the same (epsilon, delta) -- the
trusted-server counterpart. Rounds are sampled with
`tff_ddp.analytics.quantiles.simulation` (distribution-exact for these
encodings; see its docstring); `--check` also runs the real TFF process for a
few configurations and prints both. Writes PNG plots next to RESULTS.md.

  .venv/bin/python benchmarks/quantiles_figure2.py [--runs 10] [--check]
"""

import itertools
import os
import zlib

import _harness as harness
import numpy as np

QUANTILES = tuple(np.round(np.arange(0.1, 1.0, 0.1), 1))
VARIANTS = (('flat-est', 'flat', 'estimated'), ('flat-n', 'flat', 'exact'),
            ('tree', 'tree', 'exact'), ('haar', 'haar', 'exact'))
SETTINGS = ('discrete_gaussian', 'poisson_binomial', 'central')
SHORT = {
    'discrete_gaussian': 'DDG',
    'poisson_binomial': 'cPBM',
    'central': 'central'
}
DELTA = 1e-5
BITS = 18
HERE = os.path.dirname(os.path.abspath(__file__))


def data(dist, n, rng):
  if dist == 'unif':
    return rng.uniform(0, 10, n)
  return np.clip(rng.chisquare(4, n), 0, 10)


def worst_error(cdf, values, num_bins):
  """max over p of eq. 3, with eq. 1's index (first on ties, as argmin)."""
  from tff_ddp.analytics.quantiles import encodings as hg
  cdf = np.asarray(cdf)
  idx = np.argmin(np.abs(cdf[None, :] - np.asarray(QUANTILES)[:, None]), axis=1)
  return float(
      np.max(hg.quantile_error(values, idx, QUANTILES, 0.0, 10.0, num_bins)))


def cdf_estimate(encoding, noisy, count, n):
  """The process's CDF estimate (`Encoding.cdf`, one home)."""
  from tff_ddp.analytics.quantiles import encodings as hg
  return encoding.cdf(noisy, n if hg.exact_count(count) else None).numpy()


def sweep(runs, clients, bins, dists, epsilons):
  from tff_ddp.analytics.quantiles import encodings as hg
  from tff_ddp.analytics.quantiles import process as q
  from tff_ddp.analytics.quantiles import simulation as sim
  results = {}  # (dist, n, b, variant, setting, eps) -> list of errors
  params = {}
  for n, b in itertools.product(clients, bins):
    for eps in epsilons:
      z_central = sim.central_noise_multiplier(eps, DELTA)
      for method in hg.METHODS:
        for setting in SETTINGS[:2]:
          params[(n, b, method, setting, eps)] = q.quantile_parameters(
              method, setting, b, q.QuantileSetting(n, eps, DELTA, bits=BITS))
      for dist in dists:
        for run in range(runs):
          rng = np.random.default_rng(1000 * run + n + b)
          values = data(dist, n, rng)
          for name, method, count in VARIANTS:
            encoding = hg.encoding(method, b)
            codes = sim.encodings(encoding, values, 0.0, 10.0)
            for s_i, setting in enumerate(SETTINGS):
              seed = zlib.crc32(
                  repr((run, n, b, eps, dist, name, s_i)).encode())
              noisy = sim.noisy_sum(setting,
                                    codes,
                                    params.get((n, b, method, setting, eps)),
                                    central_z=z_central,
                                    l2_sensitivity=encoding.l2,
                                    seed=seed)
              cdf = cdf_estimate(encoding, noisy, count, n)
              results.setdefault((dist, n, b, name, setting, eps),
                                 []).append(worst_error(cdf, values, b))
  return results, params


def check_against_process(check_rounds):
  """The same configurations through the real TFF process (a few rounds)."""
  from tff_ddp.analytics.quantiles import process as q
  harness.processes.use_test_context()
  rows = []
  for (name, method,
       count), setting in itertools.product(VARIANTS, SETTINGS[:2]):
    for eps in (1.0, 5.0):
      # min_total_stddevs=0: the paper's estimator, no NaN safeguard.
      process = q.build_quantile_process(
          method, setting, 0.0, 10.0, 32, QUANTILES,
          q.QuantileSetting(128, eps, DELTA, bits=BITS),
          q.QuantileEstimation(count=count, min_total_stddevs=0.0))
      state = process.initialize()
      errors = []
      for run in range(check_rounds):
        values = data('unif', 128, np.random.default_rng(7000 + run))
        out = process.next(state, list(values.astype(np.float32)))
        state = out.state
        errors.append(worst_error(out.measurements['cdf'], values, 32))
      rows.append((name, setting, eps, np.mean(errors), np.std(errors)))
  return rows


def plot(results, clients, bins, dists, epsilons, path):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  panels = list(itertools.product(dists, clients, bins))
  fig, axes = plt.subplots(len(dists),
                           len(panels) // len(dists),
                           figsize=(4 * len(panels) // len(dists),
                                    3.4 * len(dists)),
                           squeeze=False)
  styles = {'discrete_gaussian': '-', 'poisson_binomial': ':', 'central': '--'}
  colors = dict(zip([v[0] for v in VARIANTS], ['C0', 'C1', 'C2', 'C3']))
  for ax, (dist, n, b) in zip(axes.flat, panels):
    for (name, _, _), setting in itertools.product(VARIANTS, SETTINGS):
      mean = [
          np.mean(results[(dist, n, b, name, setting, e)]) for e in epsilons
      ]
      std = [np.std(results[(dist, n, b, name, setting, e)]) for e in epsilons]
      ax.errorbar(epsilons,
                  mean,
                  yerr=std,
                  ls=styles[setting],
                  color=colors[name],
                  capsize=2,
                  lw=1,
                  label=f'{name} {SHORT[setting]}')
    ax.set_yscale('log')
    ax.set_title(f'{dist}, n={n}, b={b}')
    ax.set_xlabel('epsilon (delta=1e-5)')
    ax.set_ylabel('worst quantile error (eq. 3)')
  axes.flat[0].legend(fontsize=6, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def _spread(values, digits):
  """'median [min, max]' of `values`."""
  return (f'{np.median(values):.{digits}f} [{min(values):.{digits}f}, '
          f'{max(values):.{digits}f}]')


def run(runs=10,
        clients=(128, 512),
        bins=(32, 64),
        dists=('unif', 'chi2'),
        epsilons=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        check=False,
        check_rounds=5,
        plot_path=os.path.join(HERE, 'figures', 'quantiles_figure2.png')):
  """A table of errors per (dist, n, b) panel; then the distributed /
  central ratios, the analytic noise ratios, the Table 5 analogue, the
  calibrated parameters, and with `check` the TFF process beside the
  simulator."""
  from tff_ddp.analytics.quantiles import simulation as sim
  results, params = sweep(runs, clients, bins, dists, epsilons)
  checked = check_against_process(check_rounds) if check else []
  pairs = list(itertools.product(VARIANTS, SETTINGS))
  tables = []
  for dist, n, b in itertools.product(dists, clients, bins):
    table = harness.Table(
        [('eps', 'eps', 'g')] +
        [(f'{name} {SHORT[s]}', f'{name} {SHORT[s]}', lambda row, k=
          f'{name} {SHORT[s]}': f'{row[k][0]:.4f}+-{row[k][1]:.4f}')
         for (name, _, _), s in pairs],
        title=f'{dist}, n={n}, b={b}: worst quantile error, mean +- std '
        f'over {runs} runs')
    for e in epsilons:
      table.add(eps=e,
                **{
                    f'{name} {SHORT[s]}': (
                        np.mean(results[(dist, n, b, name, s, e)]),
                        np.std(results[(dist, n, b, name, s,
                                        e)])) for (name, _, _), s in pairs
                })
    tables.append(table)
  # Distributed vs central: the 1.1x target, per method and mechanism; and
  # the same without sampling error: the per-coordinate noise stddev of the
  # distributed sum over the central Gaussian's (analytic).
  ratios = harness.Table(
      [('method', 'method', 's'), ('mechanism', 'mechanism', 's'),
       ('measured', 'distributed / central, measured', 's'),
       ('analytic', 'noise stddev, analytic', 's')],
      title='ratio of mean worst error, distributed / central (all panels, '
      'all eps), and of the per-coordinate noise stddev (analytic, over n, '
      'b, eps): median [min, max]')
  for (name, method, _), s in itertools.product(VARIANTS, SETTINGS[:2]):
    measured = [
        np.mean(results[(d, n, b, name, s, e)]) /
        np.mean(results[(d, n, b, name, 'central', e)])
        for d, n, b, e in itertools.product(dists, clients, bins, epsilons)
    ]
    analytic = [
        sim.noise_stddev(p, n) /
        (sim.central_noise_multiplier(e, DELTA) * p.l2_sensitivity)
        for (n, b, m, s_, e), p in params.items()
        if m == method and s_ == s
    ]
    ratios.add(method=name,
               mechanism=SHORT[s],
               measured=_spread(measured, 2),
               analytic=_spread(analytic, 3))
  tables.append(ratios)
  # Table 5 of the frequency paper: Haar vs flat average error.
  table5 = harness.Table(
      [('setting', 'setting', 's'), ('flat-n', 'flat-n', '.4f'),
       ('tree', 'tree', '.4f'), ('haar', 'haar', '.4f'),
       ('haar/flat', 'haar/flat', '.2f')],
      title='average worst error over all panels and eps (Table 5 analogue)')
  for s in SETTINGS:
    row = table5.add(setting=SHORT[s],
                     **{
                         name:
                             np.mean([
                                 np.mean(v)
                                 for k, v in results.items()
                                 if k[3] == name and k[4] == s
                             ]) for name in ('flat-n', 'tree', 'haar')
                     })
    row['haar/flat'] = row['haar'] / row['flat-n']
  tables.append(table5)
  calibrated = harness.Table(
      [('n', 'n', 'd'), ('b', 'b', 'd'), ('method', 'method', 's'),
       ('mechanism', 'mechanism', 's'),
       ('detail', 'c, z (DDG) or theta, m (cPBM)', 's')],
      title=f'calibrated parameters at eps={epsilons[0]:g}')
  for (n, b, method, setting, eps), p in sorted(params.items()):
    if eps == epsilons[0]:
      calibrated.add(n=n,
                     b=b,
                     method=method,
                     mechanism=SHORT[setting],
                     detail=p.noise.describe())
  tables.append(calibrated)
  if checked:
    versus = harness.Table(
        [('variant', 'variant', 's'), ('mechanism', 'mechanism', 's'),
         ('eps', 'eps', 'g'),
         ('process', f'process ({check_rounds} rounds)',
          lambda row: f'{row["mean"]:.4f} +- {row["std"]:.4f}'),
         ('simulator', 'simulator', 's')],
        title='TFF process vs simulator, unif, n=128, b=32 (mean +- std of '
        'the worst error)')
    for name, s, e, mean, std in checked:
      r = results.get(('unif', 128, 32, name, s, e))
      versus.add(
          variant=name,
          mechanism=SHORT[s],
          eps=e,
          mean=mean,
          std=std,
          simulator=(f'{np.mean(r):.4f} +- {np.std(r):.4f}' if r else 'n/a'))
    tables.append(versus)
  os.makedirs(os.path.dirname(plot_path), exist_ok=True)
  plot(results, clients, bins, dists, epsilons, plot_path)
  tables[-1].notes.append(
      f'plot: {os.path.relpath(plot_path, os.path.dirname(HERE))}')
  return tables


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               runs='runs per configuration',
               clients='n, the clients',
               bins='b, the histogram bins',
               dists=harness.arg('the value distributions',
                                 choices=('unif', 'chi2')),
               epsilons=harness.arg('target epsilons (delta 1e-5)', type=float),
               check='also run the TFF process for n=128, b=32',
               check_rounds='rounds of each checked configuration',
               plot_path=harness.arg('where the figure goes',
                                     flags=('--plot',)))
