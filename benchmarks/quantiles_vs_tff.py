"""Quantiles: our processes vs TFF's hierarchical histogram, and 10k clients.

Part 1 (accuracy, same run, same data): our hierarchical (tree) and flat
processes with the distributed discrete Gaussian, vs
`tff.analytics.build_hierarchical_histogram_process(dp_mechanism=
'distributed-discrete-gaussian')` (arity 2, one record per client, 18 bits)
with its noise multiplier set to the Gaussian mechanism's z for the same
(epsilon, delta) -- TFF gives no epsilon for it, and this choice ignores
its discretisation costs, i.e. it favours TFF. TFF's tree (with the root)
is turned into a CDF by the same maximal-dyadic-prefix estimator our tree
uses (Algorithm 2; the root is not used), and the worst quantile error
(eq. 3) over p in {0.1, ..., 0.9} is reported, mean +- std over --reps
rounds.

Part 2 (performance): seconds per round with --big-clients clients
(default 10,000), flat 64 bins, for our DDG and cPBM processes and TFF's
process; first round (tracing) reported separately. Target: < 60 s.

  .venv/bin/python benchmarks/quantiles_vs_tff.py [--reps 5]
      [--big-clients 10000] [--skip-accuracy] [--skip-timing]
"""

import argparse
import time

import _common  # pylint: disable=unused-import
import numpy as np

QUANTILES = tuple(np.round(np.arange(0.1, 1.0, 0.1), 1))
DELTA = 1e-5


def tff_tree_to_ours(flat_values, splits):
  """TFF layers [root, level 1, ..., leaves] -> our layout (leaves first,
  then each level up, without the root)."""
  layers = [flat_values[splits[i]:splits[i + 1]]
            for i in range(len(splits) - 1)]
  return np.concatenate(layers[:0:-1]).astype(np.float64)


def worst(cdf, values, b):
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  idx = hg.quantile_indices(cdf, QUANTILES).numpy()
  return float(np.max(hg.quantile_error(values, idx, QUANTILES, 0.0, 10.0,
                                        b)))


def tff_process(n, b, z):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff.analytics.build_hierarchical_histogram_process(
      0.0, 10.0, b, arity=2, max_records_per_user=1,
      dp_mechanism='distributed-discrete-gaussian', noise_multiplier=z,
      expected_clients_per_round=n, bits=18)


def accuracy(args):
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import quantiles as q  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import simulation as sim  # pylint: disable=g-import-not-at-top
  n, b = args.clients, args.bins
  rows = []
  for eps in args.epsilons:
    z = sim.central_noise_multiplier(eps, DELTA)
    data = [np.random.default_rng(100 + r).uniform(0, 10, n)
            for r in range(args.reps)]
    ours = {
        'tff_ddp tree DDG': q.build_quantile_process(
            'tree', 'discrete_gaussian', 0.0, 10.0, b, QUANTILES, n, eps,
            DELTA, count='exact'),
        'tff_ddp flat DDG': q.build_quantile_process(
            'flat', 'discrete_gaussian', 0.0, 10.0, b, QUANTILES, n, eps,
            DELTA, count='estimated'),
    }
    result = {}
    for name, process in ours.items():
      state, errors, secs = process.initialize(), [], []
      for values in data:
        start = time.perf_counter()
        out = process.next(state, list(values.astype(np.float32)))
        secs.append(time.perf_counter() - start)
        state = out.state
        errors.append(worst(out.measurements['cdf'], values, b))
      result[name] = (np.mean(errors), np.std(errors), np.mean(secs[1:]))
    process = tff_process(n, b, z)
    state, errors, secs = process.initialize(), [], []
    for values in data:
      start = time.perf_counter()
      out, _ = process.next(state, [[np.float32(v)] for v in values])
      secs.append(time.perf_counter() - start)
      tree = out.aggregated_hierarchical_histogram
      noisy = tff_tree_to_ours(np.asarray(tree['flat_values']),
                               np.asarray(tree['nested_row_splits'][0]))
      cdf = hg.estimate_cdf('tree', noisy, b, 'exact', num_clients=n)
      errors.append(worst(cdf, values, b))
    result['TFF hierarchical histogram (dgauss)'] = (
        np.mean(errors), np.std(errors), np.mean(secs[1:]))
    rows.append((eps, z, result))
  return rows


def timing(args):
  from tff_ddp.analytics import quantiles as q  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import simulation as sim  # pylint: disable=g-import-not-at-top
  n, b, eps = args.big_clients, 64, 1.0
  values = np.random.default_rng(5).uniform(0, 10, n).astype(np.float32)
  processes = {
      'tff_ddp flat DDG': q.build_quantile_process(
          'flat', 'discrete_gaussian', 0.0, 10.0, b, QUANTILES, n, eps,
          DELTA),
      'tff_ddp flat cPBM': q.build_quantile_process(
          'flat', 'poisson_binomial', 0.0, 10.0, b, QUANTILES, n, eps,
          DELTA),
      'TFF hierarchical histogram (dgauss)': tff_process(
          n, b, sim.central_noise_multiplier(eps, DELTA)),
  }
  rows = []
  for name, process in processes.items():
    state = process.initialize()
    secs = []
    for _ in range(args.timed_rounds + 1):
      start = time.perf_counter()
      if name.startswith('TFF'):
        process.next(state, [[v] for v in values])
      else:
        state = process.next(state, list(values)).state
      secs.append(time.perf_counter() - start)
    rows.append((name, secs[0], float(np.mean(secs[1:]))))
  return rows


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--clients', type=int, default=128)
  parser.add_argument('--bins', type=int, default=32)
  parser.add_argument('--epsilons', type=float, nargs='+',
                      default=[1.0, 2.0, 5.0, 10.0])
  parser.add_argument('--reps', type=int, default=5)
  parser.add_argument('--big-clients', type=int, default=10000)
  parser.add_argument('--timed-rounds', type=int, default=2)
  parser.add_argument('--skip-accuracy', action='store_true')
  parser.add_argument('--skip-timing', action='store_true')
  args = parser.parse_args()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  try:
    acc = [] if args.skip_accuracy else accuracy(args)
    tim = [] if args.skip_timing else timing(args)
  finally:
    _common.end_workers()
  if acc:
    print(f'\nUnif[0, 10], n = {args.clients}, b = {args.bins}, 18 bits; '
          f'worst quantile error (eq. 3), mean +- std over {args.reps} '
          'rounds; ratio = TFF / ours (tree)')
    names = list(acc[0][2])
    print(f'{"eps":>5s} {"z":>6s} ' + ' '.join(f'{n:>38s}' for n in names)
          + f' {"ratio":>6s}')
    for eps, z, result in acc:
      cells = [f'{m:.4f} +- {s:.4f} ({t:.2f} s)'
               for m, s, t in result.values()]
      ratio = result[names[2]][0] / result[names[0]][0]
      print(f'{eps:5g} {z:6.3f} ' + ' '.join(f'{c:>38s}' for c in cells)
            + f' {ratio:6.2f}')
  if tim:
    print(f'\n{args.big_clients} clients, 64 bins, eps = 1: seconds per '
          f'round (mean of {args.timed_rounds} after the first)')
    ours = tim[0][2]
    for name, first, spr in tim:
      print(f'  {name:38s} first {first:7.2f}  then {spr:7.2f}  '
            f'ratio to ours (DDG) {spr / ours:5.2f}')
    print('target: < 60 s per round')


if __name__ == '__main__':
  main()
