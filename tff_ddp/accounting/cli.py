"""`tff-ddp privacy`: epsilon of a mechanism over rounds, or calibrate it.

Examples:

  tff-ddp privacy --mechanism gaussian --noise-multiplier 1.1 --rounds 1000 \\
      --sampling poisson --rate 0.01 --delta 1e-5
  tff-ddp privacy --mechanism ddg --l2-sensitivity 1000 --num-clients 100 \\
      --dimension 65536 --rounds 1000 --sampling poisson --rate 0.01 \\
      --delta 1e-6 --target-epsilon 3
  tff-ddp privacy --mechanism cpbm --num-trials 16 --num-clients 1000 \\
      --dimension 64 --delta 1e-5 --target-epsilon 5 --calibrate theta

Prints eps, the best RDP order and the neighbouring relation; with
--target-epsilon prints the calibrated parameter instead of needing it.
"""

import argparse
import math

from tff_ddp.accounting import calibration

_FLAG = {
    'noise_multiplier': '--noise-multiplier',
    'local_stddev': '--local-stddev',
    'theta': '--theta',
    'num_trials': '--num-trials',
}
_REQUIRED = {
    'gaussian': ('noise_multiplier',),
    'ddg': ('l2_sensitivity', 'local_stddev', 'num_clients', 'dimension'),
    'cpbm': ('theta', 'num_trials', 'num_clients', 'dimension'),
}
_DEFAULT_CALIBRATED = {'gaussian': 'noise_multiplier', 'ddg': 'local_stddev',
                       'cpbm': 'theta'}


def register(subparsers) -> argparse.ArgumentParser:
  """Adds the `privacy` subcommand to an argparse `subparsers`."""
  p = subparsers.add_parser(
      'privacy', help='epsilon of a DP mechanism over rounds, or calibrate it',
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--mechanism', required=True,
                 choices=sorted(calibration.MECHANISM_PARAMETERS))
  p.add_argument('--noise-multiplier', type=float,
                 help='gaussian: noise stddev / l2 sensitivity (> 0)')
  p.add_argument('--l2-sensitivity', type=float,
                 help='ddg: l2 bound of one client, integer units (> 0)')
  p.add_argument('--l1-sensitivity', type=float,
                 help='ddg: optional l1 bound of one client (> 0)')
  p.add_argument('--local-stddev', type=float,
                 help='ddg: per-client discrete Gaussian scale (>= 0.5)')
  p.add_argument('--theta', type=float, help='cpbm: bias scale in (0, 0.25]')
  p.add_argument('--num-trials', type=int, help='cpbm: trials m (>= 1)')
  p.add_argument('--num-clients', type=int,
                 help='ddg/cpbm: clients in each sum (>= 1)')
  p.add_argument('--dimension', type=int,
                 help='ddg/cpbm: released coordinates (>= 1)')
  p.add_argument('--rounds', type=int, default=1, help='rounds (>= 1)')
  p.add_argument('--sampling', default='none', choices=calibration.SAMPLINGS)
  p.add_argument('--rate', type=float,
                 help='poisson: sampling probability in (0, 1]')
  p.add_argument('--population', type=int,
                 help='clients to sample from (>= clients per round)')
  p.add_argument('--clients-per-round', type=int,
                 help='sample size (default: --num-clients)')
  p.add_argument('--delta', type=float, required=True, help='in (0, 1)')
  p.add_argument('--target-epsilon', type=float,
                 help='calibrate a parameter to this epsilon (> 0)')
  p.add_argument('--calibrate', choices=sorted(_FLAG),
                 help='parameter to calibrate (default: the noise one)')
  p.set_defaults(func=run, _parser=p)
  return p


def _check(parser, args):
  """Validates args; returns (params, calibrated parameter or None)."""
  error = parser.error
  m = args.mechanism
  free = None
  if args.target_epsilon is not None:
    if not 0 < args.target_epsilon < math.inf:
      error(f'--target-epsilon must be > 0, got {args.target_epsilon}')
    free = args.calibrate or _DEFAULT_CALIBRATED[m]
    if free not in calibration.MECHANISM_PARAMETERS[m]:
      error(f'--calibrate for {m} must be one of '
            f'{", ".join(calibration.MECHANISM_PARAMETERS[m])}, got {free}')
  elif args.calibrate:
    error('--calibrate needs --target-epsilon')
  required = [k for k in _REQUIRED[m]
              if not (k == free or (m == 'ddg' and k == 'local_stddev'
                                    and free == 'noise_multiplier'))]
  for k in required:
    if getattr(args, k) is None:
      error(f'--mechanism {m} needs --{k.replace("_", "-")}')
  params = {k: getattr(args, k) for k in required}
  checks = {
      'noise_multiplier': (lambda v: v > 0, '> 0'),
      'l2_sensitivity': (lambda v: v > 0, '> 0'),
      'local_stddev': (lambda v: v >= 0.5, '>= 0.5'),
      'theta': (lambda v: 0 < v <= 0.25, 'in (0, 0.25]'),
      'num_trials': (lambda v: v >= 1, '>= 1'),
      'num_clients': (lambda v: v >= 1, '>= 1'),
      'dimension': (lambda v: v >= 1, '>= 1'),
  }
  for k, v in params.items():
    ok, text = checks[k]
    if not (math.isfinite(v) and ok(v)):
      error(f'--{k.replace("_", "-")} must be {text}, got {v}')
  if m == 'ddg' and args.l1_sensitivity is not None:
    if not args.l1_sensitivity > 0:
      error(f'--l1-sensitivity must be > 0, got {args.l1_sensitivity}')
    params['l1_sensitivity'] = args.l1_sensitivity
  if not 0 < args.delta < 1:
    error(f'--delta must be in (0, 1), got {args.delta}')
  if args.rounds < 1:
    error(f'--rounds must be >= 1, got {args.rounds}')
  return params, free


def _sampling(parser, args):
  """(rate, sample_size, population) for calibration.rounds_event."""
  if args.sampling == 'none':
    if args.rate is not None or args.population is not None:
      parser.error('--rate/--population need --sampling poisson or '
                   'without-replacement')
    return None, None, None
  size = args.clients_per_round or args.num_clients
  if args.population is not None:
    if not size:
      parser.error('--population needs --clients-per-round (or '
                   '--num-clients)')
    if not 1 <= size <= args.population:
      parser.error(f'--population must be >= clients per round ({size}), '
                   f'got {args.population}')
  if args.sampling == 'poisson':
    if args.rate is None and args.population is None:
      parser.error('--sampling poisson needs --rate in (0, 1] or '
                   '--population')
    if args.rate is not None and not 0 < args.rate <= 1:
      parser.error(f'--rate must be in (0, 1], got {args.rate}')
    return args.rate, size, args.population
  if args.population is None:
    parser.error('--sampling without-replacement needs --population '
                 '(>= clients per round)')
  return None, size, args.population


def run(args) -> int:
  """Prints eps (or the calibrated parameter); returns the exit code."""
  parser = getattr(args, '_parser', None) or argparse.ArgumentParser(
      prog='tff-ddp privacy')
  params, free = _check(parser, args)
  rate, size, population = _sampling(parser, args)
  relation = calibration.relation_for(args.sampling)
  if free is None:
    event = calibration.rounds_event(
        calibration.mechanism_event(args.mechanism, **params), args.rounds,
        args.sampling, rate, size, population)
    eps, order = calibration.epsilon_of(event, args.delta, relation)
    print(f'epsilon: {eps:.6g}')
  else:
    try:
      result = calibration.calibrate(
          args.mechanism, free, params, args.target_epsilon, args.delta,
          args.rounds, args.sampling, rate, size, population)
    except ValueError as e:
      parser.error(str(e))
    print(f'{_FLAG[free][2:]}: {result.value:.6g}'
          + (' (range limit)' if result.at_limit else ''))
    eps, order = result.epsilon, result.order
    print(f'epsilon: {eps:.6g} (target {args.target_epsilon:g})')
  print(f'best RDP order: {order:g}')
  print(f'delta: {args.delta:g}; neighbouring relation: '
        f'{"zero-out" if relation.name == "ADD_OR_REMOVE_ONE" and args.mechanism != "gaussian" else relation.name.lower()}')
  return 0
