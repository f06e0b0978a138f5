"""Empirical privacy audit of one round: a lower bound vs the accountant.

`tff_ddp.audit.audit` on the real TFF processes (TFF's C++ test context,
secure modular sum). For each configuration: `--runs` rounds on a dataset D
and as many on its zero-out neighbour D' (the target client's value replaced
by zeros; for the quantile process by NaN, whose encoding is the zero
vector), every run from a fresh `initialize()` (fresh public seed) with the
clients' noise from kernel entropy (the factories' default: no test seed).
The distinguisher sees the result and every measurement field; its
statistic and threshold are chosen on the first half of the runs and
evaluated on the second (see `tff_ddp.audit`). eps_lb holds with 95%
confidence (Clopper-Pearson, one threshold: two one-sided bounds at 2.5%);
the accountant's epsilon is that of the round's own measured DP event,
against the server, zero-out neighbours, at the same delta.

Configurations (n clients, d = --dim; the target's value has norm l2_clip
unless said otherwise, the others small random vectors):

* DDG: DiscreteGaussianSumFactory(noise_multiplier 1, 16 bits, clip 1,
  Hadamard); a-priori statistic: the result's projection on the target.
* Skellam: SkellamSumFactory, as DDG, noise multiplier 1 and (weakly
  private) 0.3.
* cPBM: PoissonBinomialSumFactory (Kashin, clip 1 on the representation),
  once calibrated to eps 8 and once weakly private (theta 0.25, m 16).
* quantiles: build_quantile_process('flat', 'discrete_gaussian', [0, 1],
  16 bins, quartiles, calibrated to epsilon 4 for one round); the target's
  value alone in the top bin.
* DDG debug: as DDG with debug_measurements=True and the target's value
  of norm 3 (clipped), so the exact debug count 'clipped' differs between
  D and D' (1 vs 0): the leak of the old measurements. Its accountant
  epsilon is inf (NonPrivateDpEvent); the lower bound is limited only by
  the number of runs: log((1 - delta - u) / u) with u = 1 - 0.025^(1/N),
  N the evaluation runs.
* DDG noised counts: as DDG debug with count_noise_multiplier=1 instead:
  the counts are released with distributed discrete Gaussian noise and
  their event is composed into the round's.

  .venv/bin/python benchmarks/privacy_audit.py [--runs 1500] [--debug-runs 1000]
"""

import argparse
import math
import time
import warnings

import _common
import numpy as np


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--runs',
                      type=int,
                      default=1500,
                      help='rounds per dataset (DDG, cPBM, quantiles)')
  parser.add_argument('--debug-runs',
                      type=int,
                      default=1000,
                      help='rounds per dataset (debug and noised counts)')
  parser.add_argument('--clients', type=int, default=10)
  parser.add_argument('--dim', type=int, default=16)
  parser.add_argument('--delta', type=float, default=1e-5)
  parser.add_argument('--confidence', type=float, default=0.95)
  parser.add_argument('--only',
                      nargs='*',
                      default=None,
                      help='run only these rows (ddg skellam skellam-weak '
                      'cpbm cpbm-weak quantiles debug noised)')
  args = parser.parse_args()

  import tensorflow_federated as tff
  from tff_ddp import audit as audit_lib
  from tff_ddp.aggregators import calibrated
  from tff_ddp.aggregators import DiscreteGaussianSumFactory
  from tff_ddp.aggregators import PoissonBinomialSumFactory
  from tff_ddp.aggregators import SkellamSumFactory
  from tff_ddp.analytics import build_quantile_process
  from tff_ddp.analytics import QuantileSetting
  tff.backends.test.set_sync_test_cpp_execution_context()

  n, d, delta = args.clients, args.dim, args.delta
  value_type = tff.TensorType(np.float32, [d])
  rng = np.random.default_rng(0)
  direction = rng.normal(size=d)
  direction /= np.linalg.norm(direction)
  others = [(0.05 * rng.normal(size=d)).astype(np.float32) for _ in range(n - 1)
           ]
  target = direction.astype(np.float32)
  dataset = [target] + others
  big = [(3.0 * direction).astype(np.float32)] + others
  projection = {
      'projection': lambda result, _: float(np.dot(result, direction))
  }
  quantile_data = [np.float32(0.95)] + [
      np.float32(v) for v in rng.uniform(0.0, 0.7, size=n - 1)
  ]

  def ddg(**kwargs):
    return DiscreteGaussianSumFactory.from_tff_arguments(
        noise_multiplier=1.0,
        expected_clients_per_round=n,
        bits=16,
        l2_clip=1.0,
        **kwargs).create(value_type)

  def skellam(z):
    return SkellamSumFactory.from_tff_arguments(noise_multiplier=z,
                                                expected_clients_per_round=n,
                                                bits=16,
                                                l2_clip=1.0).create(value_type)

  def cpbm_moderate():
    return calibrated.poisson_binomial(value_type,
                                       8.0,
                                       delta,
                                       num_trials=16,
                                       expected_clients_per_round=n,
                                       l2_clip=1.0).factory.create(value_type)

  def cpbm_weak():
    return PoissonBinomialSumFactory(
        l2_clip=1.0, theta=0.25, num_trials=16,
        expected_clients_per_round=n).create(value_type)

  def quantiles():
    return build_quantile_process('flat', 'discrete_gaussian', 0.0, 1.0, 16,
                                  [0.25, 0.5, 0.75],
                                  QuantileSetting(n, 4.0, delta))

  rows = [
      ('ddg', 'DDG', 'z 1, 16 bits, clip 1, Hadamard', ddg, dataset, projection,
       args.runs),
      ('skellam', 'Skellam', 'z 1, 16 bits, clip 1, Hadamard',
       lambda: skellam(1.0), dataset, projection, args.runs),
      ('skellam-weak', 'Skellam', 'z 0.3, 16 bits, clip 1, Hadamard',
       lambda: skellam(0.3), dataset, projection, args.runs),
      ('cpbm', 'cPBM', 'calibrated eps 8: m 16, clip 1, Kashin', cpbm_moderate,
       dataset, projection, args.runs),
      ('cpbm-weak', 'cPBM', 'theta 0.25, m 16, clip 1, Kashin', cpbm_weak,
       dataset, projection, args.runs),
      ('quantiles', 'quantiles', 'flat, DDG, 16 bins, eps 4 (calibrated)',
       quantiles, quantile_data, None, args.runs),
      ('debug', 'DDG debug', 'as DDG, debug_measurements, target clipped',
       lambda: ddg(debug_measurements=True), big, projection, args.debug_runs),
      ('noised', 'DDG noised counts', 'as DDG debug, count_noise_multiplier '
       '1 instead', lambda: ddg(count_noise_multiplier=1.0), big, projection,
       args.debug_runs),
  ]
  if args.only:
    rows = [r for r in rows if r[0] in args.only]

  results = []
  total = time.perf_counter()
  try:
    for key, mechanism, config, build, data, statistics, runs in rows:
      with warnings.catch_warnings():
        # debug_measurements=True warns that the round is not private: that
        # is what this row shows.
        warnings.simplefilter('ignore', UserWarning)
        process = build()
      fill = np.nan if key == 'quantiles' else 0.0
      neighbour = audit_lib.zero_out(data, 0, fill=fill)
      result = audit_lib.audit(process,
                               data,
                               neighbour,
                               runs,
                               delta,
                               statistics=statistics,
                               confidence=args.confidence)
      results.append((mechanism, config, result))
      print(
          f'{key}: {result.statistic} eps_lb '
          f'{result.epsilon_lower_bound:.3f} accountant '
          f'{result.accountant_epsilon:.3f} '
          f'({result.seconds:.0f} s)',
          flush=True)
  finally:
    _common.end_workers()
  total = time.perf_counter() - total

  confidence = f'{100 * args.confidence:g}%'
  print(f'\n{n} clients, d = {d}, delta = {delta}; one round; zero-out '
        f'neighbours (target = client 0); eps_lb at {confidence} confidence '
        '(Clopper-Pearson, union bound over 1 threshold x 2 rates); '
        'accountant: the measured event, against the server.\n')
  print('| mechanism | configuration | runs | statistic | FPR | FNR | '
        f'eps_lb ({confidence}) | accountant eps | ratio | s |')
  print('|---|---|---|---|---|---|---|---|---|---|')
  for mechanism, config, r in results:
    print(f'| {mechanism} | {config} | {r.runs} ({r.evaluation_runs} eval) | '
          f'{r.statistic} | {r.fpr:.4f} (<= {r.fpr_upper:.4f}) | '
          f'{r.fnr:.4f} (<= {r.fnr_upper:.4f}) | '
          f'{r.epsilon_lower_bound:.3f} | {_eps(r.accountant_epsilon)} | '
          f'{r.ratio:.3f} | {r.seconds:.0f} |')
  evaluation = [r.evaluation_runs for *_, r in results]
  for runs in sorted(set(evaluation)):
    u = 1.0 - (0.5 * (1.0 - args.confidence))**(1.0 / runs)
    print(f'\nLargest eps_lb {runs} evaluation runs can show (no errors): '
          f'{math.log((1.0 - delta - u) / u):.3f}')
  print(f'\ntotal {total:.0f} s')


def _eps(value):
  return 'inf' if math.isinf(value) else f'{value:.3f}'


if __name__ == '__main__':
  main()
