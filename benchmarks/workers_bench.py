"""Timing of one secure-sum round on 1, 2, 4 local worker_binary processes.

Shared machine (2 cores, other jobs running): numbers are indicative only.
Per configuration: one warm-up round (compilation), then --reps timed rounds;
the table gives the median wall time, and the CPU seconds spent by this
Python process (serialising 1000 client values, orchestration) and by the
workers (sum over their pids, from /proc/<pid>/stat) per round.

  python benchmarks/workers_bench.py [--clients 1000] [--dim 64] [--reps 3]
"""

import argparse
import gc
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from tff_ddp.aggregators import DiscreteGaussianSumFactory  # pylint: disable=g-import-not-at-top
from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
from tff_ddp.utils import workers  # pylint: disable=g-import-not-at-top

_TICKS = os.sysconf('SC_CLK_TCK')


def _cpu_seconds(pids):
  total = 0.0
  for pid in pids:
    try:
      with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
      total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    except OSError:
      pass
  return total


def _workloads(dim, modulus=2**16):
  @tff.federated_computation(
      tff.FederatedType(tff.TensorType(np.int32, [dim]), tff.CLIENTS))
  def secure_sum(values):
    return tff.backends.mapreduce.federated_secure_modular_sum(
        values, np.int32(modulus))

  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    ddg = DiscreteGaussianSumFactory(
        noise_multiplier=1.0, expected_clients_per_round=1000, bits=20,
        l2_clip=1.0).create(tff.TensorType(np.float32, [dim]))
  return secure_sum, ddg


def _time(fn, reps, worker_pids):
  fn()  # warm-up: compilation, executor creation
  walls, py_cpu, wk_cpu, results = [], [], [], []
  for _ in range(reps):
    c0, w0, t0 = time.process_time(), _cpu_seconds(worker_pids()), \
        time.perf_counter()
    results.append(fn())
    walls.append(time.perf_counter() - t0)
    py_cpu.append(time.process_time() - c0)
    wk_cpu.append(_cpu_seconds(worker_pids()) - w0)
  return (statistics.median(walls), statistics.median(py_cpu),
          statistics.median(wk_cpu), results[-1])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--clients', type=int, default=1000)
  parser.add_argument('--dim', type=int, default=64)
  parser.add_argument('--reps', type=int, default=3)
  parser.add_argument('--workers', default='1,2,4')
  parser.add_argument('--unthreaded', default='2,4',
                      help='worker counts also run without per-worker '
                      'threads (as TFF would), to show serialisation')
  parser.add_argument('--workloads', default='secure_sum,ddg')
  parser.add_argument('--pinned', action='store_true',
                      help='also: 1 worker on cpu 0 vs 2 workers on cpus 0 '
                      'and 1 (taskset), threaded and unthreaded')
  args = parser.parse_args()

  rng = np.random.default_rng(0)
  ints = [rng.integers(0, 2**16, size=args.dim).astype(np.int32)
          for _ in range(args.clients)]
  floats = [(v / np.linalg.norm(v)).astype(np.float32) for v in
            (rng.normal(size=args.dim) for _ in range(args.clients))]
  secure_sum, ddg = _workloads(args.dim)
  expected = np.sum(np.array(ints, np.int64), 0) % 2**16
  ddg_state = {}

  def run(name):
    if name == 'secure_sum':
      return lambda: secure_sum(ints)
    def ddg_round():
      if 'state' not in ddg_state:
        ddg_state['state'] = ddg.initialize()
      return ddg.next(ddg_state['state'], floats).result
    return ddg_round

  configs = [('test ctx (1 proc)', None, True, None)]
  configs += [(f'{n} worker(s)', n, True, None)
              for n in map(int, filter(None, args.workers.split(',')))]
  configs += [(f'{n} workers, unthreaded', n, False, None)
              for n in map(int, filter(None, args.unthreaded.split(',')))]
  if args.pinned:
    configs += [('1 worker on cpu0', 1, True, ['0']),
                ('2 workers cpu0+cpu1', 2, True, ['0', '1']),
                ('2 workers cpu0+cpu1, unthreaded', 2, False, ['0', '1'])]

  baseline = tff.backends.test.create_sync_test_cpp_execution_context()
  rows = []
  try:
    for label, n, threaded, cpu_sets in configs:
      for name in args.workloads.split(','):
        ddg_state.clear()
        if n is None:
          # One test context (one local worker, started by TFF, ended by
          # pid in `finally`) for all workloads.
          with tff.framework.get_context_stack().install(baseline):
            wall, py, wk, res = _time(run(name), args.reps,
                                      processes.descendant_pids)
        else:
          with workers.local_workers(num_workers=n, threaded=threaded,
                                     cpu_sets=cpu_sets) as w:
            wall, py, wk, res = _time(run(name), args.reps, lambda: w.pids)
        if name == 'secure_sum':
          assert np.array_equal(res, expected), (label, res, expected)
        rows.append((name, label, wall, py, wk))
        print(f'{name:10s} {label:24s} wall {wall:6.2f} s  python cpu '
              f'{py:6.2f} s  workers cpu {wk:6.2f} s', flush=True)
  finally:
    # Dropping the test context lets TFF's own finalizer end its worker
    # (SIGINT, wait); then anything left is ended by pid.
    baseline = None
    gc.collect()
    processes.end_descendants()

  print(f'\n{args.clients} clients, d={args.dim}, median of {args.reps} '
        f'rounds, shared 2-core machine ({os.cpu_count()} cpus visible)')
  print('| workload | configuration | wall s | Python CPU s | workers CPU s |')
  print('|---|---|---|---|---|')
  for name, label, wall, py, wk in rows:
    print(f'| {name} | {label} | {wall:.2f} | {py:.2f} | {wk:.2f} |')


if __name__ == '__main__':
  main()
