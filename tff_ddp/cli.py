"""The `tff-ddp` command.

  tff-ddp demo      federated mean estimation with DDG vs Gaussian (make demo)
  tff-ddp privacy   epsilon of a mechanism over rounds, or calibrate its noise
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


def build_parser() -> argparse.ArgumentParser:
  from tff_ddp.accounting import cli as privacy_cli  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(
      prog='tff-ddp', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  subparsers = parser.add_subparsers(dest='command', required=True)
  _add_demo(subparsers)
  privacy_cli.register(subparsers)
  return parser


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  return args.func(args)


if __name__ == '__main__':
  sys.exit(main())
