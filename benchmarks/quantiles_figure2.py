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
`tff_ddp.analytics.simulation` (distribution-exact for these encodings; see
its docstring); `--check` also runs the real TFF process for a few
configurations and prints both. Writes PNG plots next to RESULTS.md.

  .venv/bin/python benchmarks/quantiles_figure2.py [--runs 10] [--check]
"""

import argparse
import itertools
import os
import zlib

import _common  # pylint: disable=unused-import
import numpy as np

QUANTILES = tuple(np.round(np.arange(0.1, 1.0, 0.1), 1))
VARIANTS = (('flat-est', 'flat', 'estimated'), ('flat-n', 'flat', 'exact'),
            ('tree', 'tree', 'exact'), ('haar', 'haar', 'exact'))
SETTINGS = ('discrete_gaussian', 'poisson_binomial', 'central')
SHORT = {'discrete_gaussian': 'DDG', 'poisson_binomial': 'cPBM',
         'central': 'central'}
DELTA = 1e-5
BITS = 18
HERE = os.path.dirname(os.path.abspath(__file__))


def data(dist, n, rng):
  if dist == 'unif':
    return rng.uniform(0, 10, n)
  return np.clip(rng.chisquare(4, n), 0, 10)


def worst_error(cdf, values, num_bins):
  """max over p of eq. 3, with eq. 1's index (first on ties, as argmin)."""
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  cdf = np.asarray(cdf)
  idx = np.argmin(np.abs(cdf[None, :] - np.asarray(QUANTILES)[:, None]),
                  axis=1)
  return float(np.max(hg.quantile_error(values, idx, QUANTILES, 0.0, 10.0,
                                        num_bins)))


def cdf_estimate(method, noisy, num_bins, count, n):
  """The process's CDF estimate (`histograms.estimate_cdf`, one home)."""
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  return hg.estimate_cdf(method, noisy, num_bins, count,
                         num_clients=n).numpy()


def sweep(args):
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import quantiles as q  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import simulation as sim  # pylint: disable=g-import-not-at-top
  results = {}  # (dist, n, b, variant, setting, eps) -> list of errors
  params = {}
  for n, b in itertools.product(args.clients, args.bins):
    for eps in args.epsilons:
      z_central = sim.central_noise_multiplier(eps, DELTA)
      for method in ('flat', 'tree', 'haar'):
        for setting in SETTINGS[:2]:
          params[(n, b, method, setting, eps)] = q.quantile_parameters(
              method, setting, b, n, eps, DELTA, bits=BITS)
      for dist in args.dists:
        for run in range(args.runs):
          rng = np.random.default_rng(1000 * run + n + b)
          values = data(dist, n, rng)
          for name, method, count in VARIANTS:
            codes = sim.encodings(method, values, 0.0, 10.0, b)
            l2 = hg.sensitivities(method, b)[1]
            for s_i, setting in enumerate(SETTINGS):
              seed = zlib.crc32(repr((run, n, b, eps, dist, name,
                                      s_i)).encode())
              noisy = sim.noisy_sum(
                  setting, codes, params.get((n, b, method, setting, eps)),
                  central_z=z_central, l2_sensitivity=l2, seed=seed)
              cdf = cdf_estimate(method, noisy, b, count, n)
              results.setdefault((dist, n, b, name, setting, eps), []).append(
                  worst_error(cdf, values, b))
  return results, params


def check_against_process(args):
  """The same configurations through the real TFF process (a few rounds)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import quantiles as q  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  rows = []
  for (name, method, count), setting in itertools.product(
      VARIANTS, SETTINGS[:2]):
    for eps in (1.0, 5.0):
      # min_total_stddevs=0: the paper's estimator, no NaN safeguard.
      process = q.build_quantile_process(
          method, setting, 0.0, 10.0, 32, QUANTILES, 128, eps, DELTA,
          count=count, bits=BITS, min_total_stddevs=0.0)
      state = process.initialize()
      errors = []
      for run in range(args.check_rounds):
        values = data('unif', 128, np.random.default_rng(7000 + run))
        out = process.next(state, list(values.astype(np.float32)))
        state = out.state
        errors.append(worst_error(out.measurements['cdf'], values, 32))
      rows.append((name, setting, eps, np.mean(errors), np.std(errors)))
  return rows


def plot(results, args, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  panels = list(itertools.product(args.dists, args.clients, args.bins))
  fig, axes = plt.subplots(len(args.dists), len(panels) // len(args.dists),
                           figsize=(4 * len(panels) // len(args.dists),
                                    3.4 * len(args.dists)), squeeze=False)
  styles = {'discrete_gaussian': '-', 'poisson_binomial': ':',
            'central': '--'}
  colors = dict(zip([v[0] for v in VARIANTS], ['C0', 'C1', 'C2', 'C3']))
  for ax, (dist, n, b) in zip(axes.flat, panels):
    for (name, _, _), setting in itertools.product(VARIANTS, SETTINGS):
      mean = [np.mean(results[(dist, n, b, name, setting, e)])
              for e in args.epsilons]
      std = [np.std(results[(dist, n, b, name, setting, e)])
             for e in args.epsilons]
      ax.errorbar(args.epsilons, mean, yerr=std, ls=styles[setting],
                  color=colors[name], capsize=2, lw=1,
                  label=f'{name} {SHORT[setting]}')
    ax.set_yscale('log')
    ax.set_title(f'{dist}, n={n}, b={b}')
    ax.set_xlabel('epsilon (delta=1e-5)')
    ax.set_ylabel('worst quantile error (eq. 3)')
  axes.flat[0].legend(fontsize=6, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--runs', type=int, default=10)
  parser.add_argument('--clients', type=int, nargs='+', default=[128, 512])
  parser.add_argument('--bins', type=int, nargs='+', default=[32, 64])
  parser.add_argument('--dists', nargs='+', default=['unif', 'chi2'])
  parser.add_argument('--epsilons', type=float, nargs='+',
                      default=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
  parser.add_argument('--check', action='store_true',
                      help='also run the TFF process for n=128, b=32')
  parser.add_argument('--check-rounds', type=int, default=5)
  parser.add_argument('--plot', default=os.path.join(
      HERE, 'figures', 'quantiles_figure2.png'))
  args = parser.parse_args()
  try:
    results, params = sweep(args)
    rows = check_against_process(args) if args.check else []
  finally:
    _common.end_workers()

  for dist, n, b in itertools.product(args.dists, args.clients, args.bins):
    print(f'\n{dist}, n={n}, b={b}: worst quantile error, mean +- std over '
          f'{args.runs} runs')
    header = ' '.join(f'{name + " " + SHORT[s]:>16s}'
                      for (name, _, _), s in itertools.product(VARIANTS,
                                                               SETTINGS))
    print(f'{"eps":>4s} {header}')
    for e in args.epsilons:
      cells = []
      for (name, _, _), s in itertools.product(VARIANTS, SETTINGS):
        r = results[(dist, n, b, name, s, e)]
        cells.append(f'{np.mean(r):7.4f}+-{np.std(r):6.4f}')
      print(f'{e:4g} ' + ' '.join(f'{c:>16s}' for c in cells))
  # Distributed vs central: the 1.1x target, per method and mechanism.
  print('\nratio of mean worst error, distributed / central (all panels, '
        'all eps): median [min, max]')
  for (name, _, _), s in itertools.product(VARIANTS, SETTINGS[:2]):
    ratios = [np.mean(results[(d, n, b, name, s, e)]) /
              np.mean(results[(d, n, b, name, 'central', e)])
              for d, n, b, e in itertools.product(
                  args.dists, args.clients, args.bins, args.epsilons)]
    print(f'  {name:9s} {SHORT[s]:5s} {np.median(ratios):6.2f} '
          f'[{min(ratios):.2f}, {max(ratios):.2f}]')
  # The same comparison without sampling error: per-coordinate noise
  # stddev of the distributed sum over the central Gaussian's.
  from tff_ddp.analytics import simulation as sim  # pylint: disable=g-import-not-at-top
  print('\nnoise stddev per coordinate, distributed / central (analytic): '
        'median [min, max] over n, b, eps')
  for method, setting in itertools.product(('flat', 'tree', 'haar'),
                                           SETTINGS[:2]):
    ratios = []
    for (n, b, m, s, e), p in params.items():
      if m != method or s != setting:
        continue
      central = sim.central_noise_multiplier(e, DELTA) * p.l2_sensitivity
      ratios.append(sim.noise_stddev(p, n) / central)
    print(f'  {method:9s} {SHORT[setting]:5s} {np.median(ratios):6.3f} '
          f'[{min(ratios):.3f}, {max(ratios):.3f}]')
  # Table 5 of the frequency paper: Haar vs flat average error.
  print('\naverage worst error over all panels and eps (Table 5 analogue)')
  for s in SETTINGS:
    flat = np.mean([np.mean(v) for k, v in results.items()
                    if k[3] == 'flat-n' and k[4] == s])
    haar = np.mean([np.mean(v) for k, v in results.items()
                    if k[3] == 'haar' and k[4] == s])
    tree = np.mean([np.mean(v) for k, v in results.items()
                    if k[3] == 'tree' and k[4] == s])
    print(f'  {SHORT[s]:8s} flat-n {flat:.4f}  tree {tree:.4f}  haar '
          f'{haar:.4f}  haar/flat {haar / flat:.2f}')
  print('\ncalibrated parameters at eps=1 (n, b, method: c, z | theta, m):')
  for (n, b, method, setting, eps), p in sorted(params.items()):
    if eps == args.epsilons[0]:
      detail = (f'c={p.scaling}, z={p.noise_multiplier:.3f}'
                if setting == 'discrete_gaussian' else
                f'theta={p.theta:.5f}, m={p.num_trials}')
      print(f'  n={n:4d} b={b:3d} {method:5s} {SHORT[setting]:5s} {detail}')
  if rows:
    print('\nTFF process vs simulator, unif, n=128, b=32 (mean +- std of the '
          'worst error)')
    for name, s, e, mean, std in rows:
      r = results.get(('unif', 128, 32, name, s, e))
      simulated = (f'{np.mean(r):.4f} +- {np.std(r):.4f}' if r else 'n/a')
      print(f'  {name:9s} {SHORT[s]:5s} eps={e:g}: process {mean:.4f} +- '
            f'{std:.4f} ({args.check_rounds} rounds), simulator {simulated}')
  os.makedirs(os.path.dirname(args.plot), exist_ok=True)
  plot(results, args, args.plot)
  print(f'\nplot: {os.path.relpath(args.plot, os.path.dirname(HERE))}')


if __name__ == '__main__':
  main()
