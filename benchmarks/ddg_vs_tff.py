"""Seconds per round: tff_ddp's DDG factory vs TFF's DistributedDpSumFactory.

Same run, same arguments: d = 2^16, 100 clients, 16 bits, noise multiplier 1,
l2 clip 1, TFF's mechanism='distributed_dgauss', rotation_type='hd'. Both
processes run in the C++ test execution context (needed for the secure sum);
the first round (tracing) is excluded from the timing. Extra rows (unless
--no-breakdown): both factories with noise_multiplier=0 and a plain float
SumFactory, to separate the noise sampling from the rest of the round.

  .venv/bin/python benchmarks/ddg_vs_tff.py [--dim 65536] [--clients 100]
"""

import argparse

import _common  # pylint: disable=unused-import  # sets sys.path and the worker guard
import numpy as np


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--dim', type=int, default=2**16)
  parser.add_argument('--clients', type=int, default=100)
  parser.add_argument('--bits', type=int, default=16)
  parser.add_argument('--rounds', type=int, default=4)
  parser.add_argument('--no-breakdown',
                      dest='breakdown',
                      action='store_false',
                      help='skip the rows without noise')
  args = parser.parse_args()

  import tensorflow_federated as tff
  from tff_ddp.aggregators import DiscreteGaussianSumFactory
  tff.backends.test.set_sync_test_cpp_execution_context()

  rng = np.random.default_rng(0)
  data = rng.normal(size=(args.clients, args.dim)).astype(np.float32)
  data /= np.linalg.norm(data, axis=1, keepdims=True)
  value_type = tff.TensorType(np.float32, [args.dim])
  common = dict(noise_multiplier=1.0,
                expected_clients_per_round=args.clients,
                bits=args.bits,
                l2_clip=1.0,
                modclip_prob=1e-4,
                beta=0.0)
  factories = {
      'tff_ddp DiscreteGaussianSumFactory':
          (DiscreteGaussianSumFactory.from_tff_arguments(**common)),
      'TFF DistributedDpSumFactory (dgauss, hd)':
          tff.aggregators.distributed_dp.DistributedDpSumFactory(
              mechanism='distributed_dgauss', rotation_type='hd', **common),
  }
  if args.breakdown:
    # Where the time goes: the same pipelines without noise, and a plain
    # float sum, measure the TFF plumbing that no sampler can remove.
    quiet = dict(common, noise_multiplier=0.0)
    factories['tff_ddp, noise_multiplier=0'] = (
        # pylint: disable-next=repeated-keyword  # dict(common, noise_multiplier=0) replaces the key
        DiscreteGaussianSumFactory.from_tff_arguments(**quiet))
    factories['TFF, noise_multiplier=0'] = (
        tff.aggregators.distributed_dp.DistributedDpSumFactory(
            mechanism='distributed_dgauss', rotation_type='hd', **quiet))
    factories['tff.aggregators.SumFactory (float)'] = (
        tff.aggregators.SumFactory())
  rows = []
  try:
    for name, factory in factories.items():
      process = factory.create(value_type)
      results, seconds = _common.time_rounds(process, list(data), args.rounds)
      error = np.mean((np.asarray(results[-1]) - data.sum(0))**2)
      rows.append((name, float(np.mean(seconds[1:])), seconds[0], error))
  finally:
    _common.end_workers()
  ours = rows[0][1]
  print(f'\nd = {args.dim}, {args.clients} clients, {args.bits} bits, '
        f'{args.rounds - 1} timed rounds after the first\n')
  print(f'{"aggregator":42s} {"s/round":>8s} {"first":>7s} {"ratio":>6s} '
        f'{"MSE(sum)":>9s}')
  for name, spr, first, err in rows:
    print(f'{name:42s} {spr:8.3f} {first:7.2f} {spr / ours:6.2f} '
          f'{err:9.3f}')
  print(f'\nours / TFF = {ours / rows[1][1]:.2f} (target <= 1.0)')
  if args.breakdown:
    print(f'noise sampling per client: ours '
          f'{(rows[0][1] - rows[2][1]) / args.clients * 1e3:.1f} ms, TFF '
          f'{(rows[1][1] - rows[3][1]) / args.clients * 1e3:.1f} ms')


if __name__ == '__main__':
  main()
