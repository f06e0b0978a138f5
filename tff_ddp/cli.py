"""The `tff-ddp` command.

  tff-ddp demo      federated mean estimation with DDG vs Gaussian (make demo)
  tff-ddp privacy   epsilon of a mechanism over rounds, or calibrate its noise
  tff-ddp quantiles federated DP quantiles (flat / tree / Haar, DDG / cPBM)
"""

import argparse
import sys


def _add_demo(subparsers):
  p = subparsers.add_parser(
      'demo', help='federated DDG mean estimation with a privacy/utility report',
      description='Runs the real TFF aggregation process (secure modular sum) '
      'on synthetic clients for DDG at several bit widths, the central '
      'Gaussian with the same noise, and no noise; prints MSE, eps and time.')
  p.add_argument('--clients', type=int, default=100, help='clients (>= 1)')
  p.add_argument('--dim', type=int, default=1024, help='dimension (>= 1)')
  p.add_argument('--rounds', type=int, default=3, help='rounds (>= 1)')
  p.add_argument('--bits', type=int, nargs='+', default=[12, 14, 16, 20],
                 help='DDG bit widths, each in [1, 30]')
  p.add_argument('--noise-multiplier', type=float, default=1.0,
                 help='central noise stddev / l2 clip (> 0)')
  p.add_argument('--l2-clip', type=float, default=1.0, help='(> 0)')
  p.add_argument('--delta', type=float, default=1e-5, help='in (0, 1)')
  p.add_argument('--seed', type=int, default=0, help='data seed')
  p.set_defaults(func=_run_demo, parser=p)


def _run_demo(args) -> int:
  parser = args.parser
  if args.clients < 1 or args.dim < 1 or args.rounds < 1:
    parser.error('--clients, --dim and --rounds must be >= 1')
  if any(not 1 <= b <= 30 for b in args.bits):
    parser.error(f'--bits must be in [1, 30], got {args.bits}')
  if not args.noise_multiplier > 0 or not args.l2_clip > 0:
    parser.error('--noise-multiplier and --l2-clip must be > 0')
  if not 0 < args.delta < 1:
    parser.error(f'--delta must be in (0, 1), got {args.delta}')
  from tff_ddp import demo  # pylint: disable=g-import-not-at-top
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
  try:
    demo.run(num_clients=args.clients, dim=args.dim, rounds=args.rounds,
             bits=tuple(args.bits), noise_multiplier=args.noise_multiplier,
             l2_clip=args.l2_clip, delta=args.delta, seed=args.seed)
  except ValueError as e:
    parser.error(str(e))
  finally:
    processes.end_descendants()
  return 0


def _add_quantiles(subparsers):
  p = subparsers.add_parser(
      'quantiles', help='synthetic federated DP quantile experiment',
      description='Runs build_quantile_process (real TFF process, secure '
      'modular sum) for each method and mechanism on synthetic clients, '
      'next to the central Gaussian at the same (eps, delta); prints the '
      'worst quantile error (eq. 3 of the quantile paper), eps and time.')
  p.add_argument('--methods', nargs='+', default=['flat', 'tree', 'haar'],
                 choices=['flat', 'tree', 'hierarchical', 'haar'],
                 help="'hierarchical' is the same as 'tree'")
  p.add_argument('--mechanisms', nargs='+',
                 default=['discrete_gaussian', 'poisson_binomial'],
                 choices=['discrete_gaussian', 'poisson_binomial'])
  p.add_argument('--clients', type=int, default=128, help='clients (>= 1)')
  p.add_argument('--bins', type=int, default=32,
                 help='bins (a power of two for tree and haar)')
  p.add_argument('--epsilon', type=float, default=1.0, help='(> 0)')
  p.add_argument('--delta', type=float, default=1e-5, help='in (0, 1)')
  p.add_argument('--distribution', default='uniform',
                 choices=['uniform', 'chi2'],
                 help='client values: Unif[0, upper] or chi^2(4)')
  p.add_argument('--upper', type=float, default=10.0,
                 help='upper bound of the range [0, upper]')
  p.add_argument('--repetitions', type=int, default=3, help='(>= 1)')
  p.add_argument('--quantiles', type=float, nargs='+',
                 default=[0.1, 0.25, 0.5, 0.75, 0.9], help='levels in (0, 1)')
  p.add_argument('--bits', type=int, default=18, help='ring 2^bits')
  p.add_argument('--seed', type=int, default=0, help='data seed')
  p.set_defaults(func=_run_quantiles, parser=p)


def _run_quantiles(args) -> int:
  parser = args.parser
  if args.clients < 1 or args.repetitions < 1:
    parser.error('--clients and --repetitions must be >= 1')
  if not args.epsilon > 0 or not 0 < args.delta < 1:
    parser.error('--epsilon must be > 0 and --delta in (0, 1)')
  if not all(0 < p < 1 for p in args.quantiles):
    parser.error(f'--quantiles must be in (0, 1), got {args.quantiles}')
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import experiment  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  try:
    experiment.run(
        methods=args.methods, mechanisms=args.mechanisms,
        num_clients=args.clients, num_bins=args.bins, epsilon=args.epsilon,
        delta=args.delta, distribution=args.distribution,
        upper_bound=args.upper, repetitions=args.repetitions,
        quantiles=args.quantiles, bits=args.bits, seed=args.seed)
  except ValueError as e:
    parser.error(str(e))
  finally:
    processes.end_descendants()
  return 0


def build_parser() -> argparse.ArgumentParser:
  from tff_ddp.accounting import cli as privacy_cli  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(
      prog='tff-ddp', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  subparsers = parser.add_subparsers(dest='command', required=True)
  _add_demo(subparsers)
  privacy_cli.register(subparsers)
  _add_quantiles(subparsers)
  return parser


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  return args.func(args)


if __name__ == '__main__':
  sys.exit(main())
