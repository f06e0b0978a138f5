"""Seconds of one TFFE (two-phase) run through the real TFF process vs n.

The performance target of the frequency-estimation issue: a TFFE run with
n = 10^4 users and d = 100 in under 2 minutes on this machine, and how it
scales with n. A run is one `next` of the process that
`tff_ddp.analytics.build_frequency_process_from_parameters` builds for
protocol 'two_phase' (TFFE, Algorithm 6 of "Bounding Contribution
Optimally for Federated Frequency Estimation under User-level Distributed
Differential Privacy": phase 1, the Haar quantile of the clients' Kashin
norms -> C-hat; phase 2, cPBM with C = C-hat; two secure sums) in TFF's C++
test execution context, on the paper's i.i.d. synthetic data
(`tff_ddp.analytics.frequency_data.iid`: each user draws 100 items from
p_j ~ 1/j over [d]), calibrated to (--epsilon, --delta) against the server
(zero-out neighbours) with m = 30 and 64 Haar bins (the paper's Table 2).

For each n: "build" is `frequency_parameters` (the calibration) plus
`build_frequency_process_from_parameters` (tracing the computations);
"run" is `initialize` plus one `next` on all n clients (the C++ executor
compiles on that first call, so it is included: a user runs TFFE once).
The data are generated before the clock starts. Prints seconds per run,
seconds per 1000 users, and whether the largest n = 10^4 is under 120 s.

  PYTHONPATH=$PWD .venv/bin/python benchmarks/frequency_run_time.py \
      [--ns 1000 3000 10000] [--dim 100]
"""

import argparse
import os
import time

import _common  # pylint: disable=unused-import
import numpy as np

TARGET_SECONDS = 120.0
TARGET_N = 10**4


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--ns', type=int, nargs='+', default=[1000, 3000, 10000],
                      help='numbers of users n, one run each')
  parser.add_argument('--dim', type=int, default=100, help='d, the items')
  parser.add_argument('--epsilon', type=float, default=4.0)
  parser.add_argument('--delta', type=float, default=1e-4)
  parser.add_argument('--seed', type=int, default=0, help='the data')
  args = parser.parse_args()
  if min(args.ns) < 1 or args.dim < 1:
    parser.error('--ns and --dim must be positive')

  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import frequency as fq  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import frequency_data as fd  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import frequency_process as fp  # pylint: disable=g-import-not-at-top
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top

  tff.backends.test.set_sync_test_cpp_execution_context()
  rows = []
  try:
    for n in args.ns:
      x = fd.iid(n, args.dim, seed=args.seed)
      clients = list(x.astype(np.float32))
      start = time.perf_counter()
      params = fp.frequency_parameters(
          'two_phase', args.dim, n, args.epsilon, args.delta, num_trials=30,
          num_bins=64, max_items=fd.max_items(x))
      process = fp.build_frequency_process_from_parameters(params)
      build = time.perf_counter() - start
      start = time.perf_counter()
      output = process.next(process.initialize(), clients)
      run = time.perf_counter() - start
      error = fq.l2_error(output.result, x)
      rows.append((n, build, run, float(output.measurements['clip']), error))
      print(f'n = {n}: build {build:.2f} s, run {run:.2f} s, C-hat '
            f'{rows[-1][3]:.4g}, l2 error / n {error:.4f}; '
            f'{fp.describe(params)}', flush=True)
  finally:
    ended = processes.release_tff()

  load = os.getloadavg()
  print()
  print(f'TFFE (two_phase), i.i.d. data, d = {args.dim}, epsilon = '
        f'{args.epsilon:g}, delta = {args.delta:g}, m = 30, 64 Haar bins; '
        'one run per n in the TFF C++ test context; load average '
        f'{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end')
  print(f'{"n":>7s} {"build s":>8s} {"run s":>8s} {"s / 1000 users":>15s} '
        f'{"C-hat":>8s} {"l2 err":>7s}')
  for n, build, run, clip, error in rows:
    print(f'{n:7d} {build:8.2f} {run:8.2f} {1000 * run / n:15.3f} '
          f'{clip:8.4g} {error:7.4f}')
  if len(rows) > 1:
    ns = np.log([r[0] for r in rows])
    runs = np.log([r[2] for r in rows])
    slope = np.polyfit(ns, runs, 1)[0]
    print(f'run time ~ n^{slope:.2f} (least-squares slope of log seconds on '
          'log n)')
  at_target = [r for r in rows if r[0] == TARGET_N]
  if at_target:
    total = at_target[0][1] + at_target[0][2]
    print(f'n = {TARGET_N}: run {at_target[0][2]:.1f} s, build + run '
          f'{total:.1f} s; target run < {TARGET_SECONDS:g} s: '
          f'{"met" if at_target[0][2] < TARGET_SECONDS else "NOT met"}')
  else:
    print(f'n = {TARGET_N} not run (target: < {TARGET_SECONDS:g} s)')
  print(f'TFF workers ended: {len(ended)}')


if __name__ == '__main__':
  main()
