"""`tff-ddp privacy`: epsilon of a mechanism over rounds, or calibrate it.

Examples:

  tff-ddp privacy --mechanism gaussian --noise-multiplier 1.1 --rounds 1000 \\
      --sampling poisson --rate 0.01 --delta 1e-5
  tff-ddp privacy --mechanism ddg --noise-multiplier 3 --bits 12 \\
      --num-clients 20 --dimension 10000 --delta 1e-5
  tff-ddp privacy --mechanism ddg --l2-sensitivity 1000 --local-stddev 200 \\
      --num-clients 100 --dimension 65536 --rounds 1000 \\
      --sampling without-replacement --population 10000 --delta 1e-6
  tff-ddp privacy --mechanism skellam --l2-sensitivity 1000 \\
      --local-stddev 300 --num-clients 100 --dimension 65536 --delta 1e-6
  tff-ddp privacy --mechanism cpbm --num-trials 16 --num-clients 1000 \\
      --dimension 64 --delta 1e-5 --target-epsilon 5 --calibrate theta

Prints epsilon against the server that runs the protocol and against readers
of the release (or only the --adversary given), the bound (the privacy loss
distribution, or RDP and its best order), the
neighbouring relation and what the sampling buys against each; with
--target-epsilon it calibrates the parameter against the named adversary
(default: the server) and prints the epsilon of that value against both.

A DDG or Skellam run is given one of two ways, never mixed: a factory's
settings (--noise-multiplier z, relative to the l2 clip as in every factory
and in TFF, --bits, --num-clients, --dimension of the value, and
optionally --l2-clip, --beta, --modclip-prob): the epsilon of the
factory's own `dp_event` for that run; or the integer-domain numbers a
run's measurements report (--l2-sensitivity = scaled_inflated_l2,
--local-stddev = scaled_local_stddev, --dimension = padded_dim). The
central Gaussian is added by the server itself: against the server its
epsilon is infinite.

Sampling: 'poisson' / 'without-replacement' -- the server draws the cohort,
the others do not take part (the server knows the sample); 'self' -- every
client takes part and keeps its value with probability --rate (the
factories' client_sampling_rate; the sample is hidden from everyone).
"""

import importlib
import math

from tff_ddp.cli import common
from tff_ddp.utils import checks

# A DDG or Skellam run is given either as the factory's settings (its
# noise multiplier z, relative to the l2 clip c as in every factory and in
# TFF) or as the integer-domain numbers its measurements report; each set
# is complete on its own and the two do not mix.
_FACTORY_FLAGS = ('noise_multiplier', 'bits', 'l2_clip', 'beta', 'modclip_prob')
_MEASURED_FLAGS = ('l2_sensitivity', 'local_stddev', 'l1_sensitivity')
_DISTRIBUTED_FLAGS = (_FACTORY_FLAGS + _MEASURED_FLAGS +
                      ('num_clients', 'dimension', 'noise_sampler'))
_MECHANISM_FLAGS = {
    'gaussian': ('noise_multiplier',),
    'ddg': _DISTRIBUTED_FLAGS,
    'skellam': _DISTRIBUTED_FLAGS,
    'cpbm': ('theta', 'num_trials', 'num_clients', 'dimension'),
}
# The factories' default noise_sampler; other mechanisms ignore the default.
_DEFAULT_SAMPLER = 'table'
_REQUIRED = {
    'gaussian': ('noise_multiplier',),
    'ddg': ('num_clients', 'dimension'),
    'skellam': ('num_clients', 'dimension'),
    'cpbm': ('theta', 'num_trials', 'num_clients', 'dimension'),
}
# ddg / skellam: what each way of giving the run needs beside _REQUIRED.
_MODE_REQUIRED = {
    'factory': ('noise_multiplier', 'bits'),
    'measured': ('l2_sensitivity', 'local_stddev')
}
# What --calibrate may name, per mechanism (the first is the default).
_CALIBRATED = {
    'gaussian': ('noise_multiplier',),
    'ddg': ('local_stddev', 'noise_multiplier'),
    'skellam': ('local_stddev', 'noise_multiplier'),
    'cpbm': ('theta', 'num_trials'),
}
# The largest num_trials a calibration tries.
_MAX_NUM_TRIALS = 2**31 - 1


def _gaussian_event(noise_multiplier):
  import dp_accounting
  return dp_accounting.GaussianDpEvent(noise_multiplier)


# The mechanisms modules whose `release_event` the CLI calls, and the
# class of each.
_DISTRIBUTED_MODULES = ('tff_ddp.mechanisms.distributed_discrete_gaussian',
                        'tff_ddp.mechanisms.distributed_skellam')
_DISTRIBUTED_CLASSES = ('DistributedDiscreteGaussian', 'DistributedSkellam')


def _mechanism_class(module):
  if module in _DISTRIBUTED_MODULES:
    return getattr(importlib.import_module(module),
                   _DISTRIBUTED_CLASSES[_DISTRIBUTED_MODULES.index(module)])
  raise ValueError(f'no release_event in {module}')


def factory_mechanism(module,
                      noise_multiplier,
                      num_clients,
                      dimension,
                      bits,
                      l2_clip=1.0,
                      beta=0.0,
                      modclip_prob=1e-4,
                      noise_sampler=_DEFAULT_SAMPLER):
  """The mechanism a factory builds for these settings: the same `Request`
  and `compute_parameters` (default encoder: the randomized Hadamard) as
  `DiscreteGaussianSumFactory` / `SkellamSumFactory` on a float32 value of
  `dimension` scalars, so its event is the factory's `dp_event`."""
  from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
  request = ddg.Request(l2_clip=l2_clip,
                        noise_multiplier=noise_multiplier,
                        expected_clients_per_round=num_clients,
                        bits=bits,
                        modclip_prob=modclip_prob,
                        beta=beta,
                        noise_sampler=noise_sampler)
  return _mechanism_class(module).compute_parameters(dimension, request)


def _distributed_event(module):
  """The event builder of --mechanism ddg / skellam. From a factory's
  settings (--noise-multiplier z relative to the clip, --bits, ...): the
  event of the mechanism the factory builds (`factory_mechanism`). From a
  run's measurements (--l2-sensitivity, --local-stddev, ...): the
  mechanism's own `release_event` (it carries the sampler's TV distance).
  `module` is imported when called."""

  def event(num_clients, dimension, noise_sampler=_DEFAULT_SAMPLER, **given):
    if 'l2_sensitivity' in given:
      return _mechanism_class(module).release_event(num_clients=num_clients,
                                                    dimension=dimension,
                                                    noise_sampler=noise_sampler,
                                                    **given)
    return factory_mechanism(module,
                             num_clients=num_clients,
                             dimension=dimension,
                             noise_sampler=noise_sampler,
                             **given).dp_event()

  return event


def _cpbm_event(theta, num_trials, num_clients, dimension):
  from tff_ddp.accounting import events
  return events.PoissonBinomialDpEvent(theta, num_trials, num_clients,
                                       dimension)


# --mechanism NAME -> one release's event from its flags (keywords).
_EVENTS = {
    'gaussian':
        _gaussian_event,
    'ddg':
        _distributed_event('tff_ddp.mechanisms.distributed_discrete_gaussian'),
    'skellam':
        _distributed_event('tff_ddp.mechanisms.distributed_skellam'),
    'cpbm':
        _cpbm_event
}


def _parameter(mechanism, free):
  """The `calibration.Parameter` of --calibrate `free` for `mechanism`."""
  from tff_ddp.accounting import calibration
  from tff_ddp.accounting import pbm_rdp
  ranges = {
      'theta':
          lambda: calibration.Parameter.signal(free, pbm_rdp.MIN_THETA, pbm_rdp.
                                               MAX_THETA),
      'num_trials':
          lambda: calibration.Parameter.signal(
              free, 1, _MAX_NUM_TRIALS, discrete=True),
      'noise_multiplier':
          lambda: calibration.Parameter.noise(free),
      'local_stddev':
          lambda: calibration.Parameter.noise(free),
  }
  if mechanism == 'ddg' and free == 'local_stddev':
    # Theorem 9's sigma/gamma >= 1/2. (A factory's z below what that
    # allows is refused by its mechanism: unsafe for the search.)
    from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
    least = ddg.MIN_SCALED_LOCAL_STDDEV
    ranges['local_stddev'] = lambda: calibration.Parameter.noise(free, least)
  return ranges[free]()


_SAMPLING_NOTE = {
    'none':
        'no sampling: every client of a round takes part.',
    'poisson': ('Poisson cohorts drawn by the server: against the server '
                '(it knows the sample) only the known-sample mixture; '
                'against the release the same bound for distributed noise '
                '(an unsampled client also removes its noise share, so '
                'Poisson amplification is not proved), for the Gaussian the '
                'smaller of it and dp-accounting\'s tight bound.'),
    'without-replacement':
        ('fixed-size cohorts drawn by the server: against the server the '
         'known-sample mixture; against the release, per RDP order, the '
         'smaller of it and Wang, Balle & Kasiviswanathan (2019) on the '
         'replace-one curve (never more than against the server).'),
    'self': ('self-sampling (every client in the secure sum, private coins): '
             'Zhu & Wang (2019), or the known-sample mixture where smaller, '
             'against every adversary.'),
}


def _print_factory_run(mechanism, params):
  """The numbers a factory's run reports for these settings (what
  --l2-sensitivity / --local-stddev / --dimension would take)."""
  module = ('tff_ddp.mechanisms.distributed_discrete_gaussian'
            if mechanism == 'ddg' else 'tff_ddp.mechanisms.distributed_skellam')
  built = factory_mechanism(module, **params)
  print(f'the factory\'s run: noise multiplier {built.noise_multiplier:.6g} '
        f'(central noise / l2 clip), scaled_inflated_l2 '
        f'{built.l2_sensitivity:.6g}, scaled_local_stddev '
        f'{built.scaled_local_stddev:.6g}, padded_dim {built.output_dim}')


def _flag(name):
  return '--' + name.replace('_', '-')


def add_parser(subparsers):
  from tff_ddp.accounting import accountant
  from tff_ddp.accounting import calibration
  p = subparsers.add_parser(
      'privacy',
      help='epsilon of a DP mechanism over rounds, or calibrate it',
      description=__doc__,
      formatter_class=common.HelpFormatter)
  number = common.converter
  integer = lambda low, name: common.converter(
      lambda v, n: checks.integer(v, n, low), name, int)
  p.add_argument('--mechanism',
                 required=True,
                 choices=sorted(_EVENTS),
                 help='the mechanism whose rounds are accounted')
  p.add_argument('--noise-multiplier',
                 type=number(checks.positive, '--noise-multiplier'),
                 help='z, central noise stddev / l2 clip: gaussian\'s, or '
                 'a ddg/skellam factory\'s noise_multiplier (with --bits; '
                 'the same z and epsilon as the factory)')
  p.add_argument('--bits',
                 type=integer(1, '--bits'),
                 help='ddg/skellam factory: log2 of the secure sum\'s '
                 'modulus')
  p.add_argument('--l2-clip',
                 type=number(checks.positive, '--l2-clip'),
                 help='ddg/skellam factory: the l2 clip c (default: 1; '
                 'epsilon does not depend on it)')
  p.add_argument('--beta',
                 type=number(
                     lambda v, n: checks.real(v, n, 0.0, 1.0, high_open=True),
                     '--beta'),
                 help='ddg/skellam factory: conditional rounding bias '
                 '(default: 0, the factories\')')
  p.add_argument('--modclip-prob',
                 type=number(
                     lambda v, n: checks.real(v, n, 0.0, 1.0, True, True),
                     '--modclip-prob'),
                 help='ddg/skellam factory: modclip_prob (default: '
                 '1e-4, the factories\')')
  p.add_argument('--l2-sensitivity',
                 type=number(checks.positive, '--l2-sensitivity'),
                 help='ddg/skellam run\'s measurement: l2 bound of one '
                 'client, integer units (scaled_inflated_l2)')
  p.add_argument('--l1-sensitivity',
                 type=number(checks.positive, '--l1-sensitivity'),
                 help='ddg/skellam: optional l1 bound of one client')
  p.add_argument('--local-stddev',
                 type=number(lambda v, n: checks.real(v, n, low=0.5),
                             '--local-stddev'),
                 help='ddg: per-client discrete Gaussian scale; skellam: '
                 'stddev of each client\'s Skellam noise (TFF: '
                 'scaled_local_stddev); >= 0.5')
  p.add_argument('--noise-sampler',
                 choices=('table', 'exact'),
                 default=_DEFAULT_SAMPLER,
                 help='ddg/skellam: the noise sampler of the run (the '
                 'factories\' default is table, whose per-sample TV distance '
                 'is added to delta, as in the Python accountant)')
  p.add_argument('--theta',
                 type=number(
                     lambda v, n: checks.real(v, n, 0.0, 0.25, low_open=True),
                     '--theta'),
                 help='cpbm: bias scale in (0, 0.25]')
  p.add_argument('--num-trials',
                 type=integer(1, '--num-trials'),
                 help='cpbm: trials m')
  p.add_argument('--num-clients',
                 type=integer(1, '--num-clients'),
                 help='ddg/skellam/cpbm: clients in each sum')
  p.add_argument('--dimension',
                 type=integer(1, '--dimension'),
                 help='ddg/skellam/cpbm: released coordinates (TFF: '
                 'padded_dim)')
  p.add_argument('--rounds',
                 type=integer(1, '--rounds'),
                 default=1,
                 help='rounds')
  p.add_argument('--sampling',
                 default='none',
                 choices=calibration.SAMPLINGS,
                 help='how each round\'s cohort is chosen')
  p.add_argument('--rate',
                 type=number(checks.probability, '--rate'),
                 help='poisson/self: sampling probability in (0, 1]')
  p.add_argument('--population',
                 type=integer(1, '--population'),
                 help='clients to sample from (>= clients per round)')
  p.add_argument('--clients-per-round',
                 type=integer(1, '--clients-per-round'),
                 help='sample size (default: --num-clients)')
  p.add_argument('--delta',
                 type=number(
                     lambda v, n: checks.real(v, n, 0.0, 1.0, True, True),
                     '--delta'),
                 required=True,
                 help='delta in (0, 1)')
  p.add_argument('--adversary',
                 choices=accountant.ADVERSARIES,
                 help='only this adversary (default: both, labelled)')
  p.add_argument('--target-epsilon',
                 type=number(checks.positive, '--target-epsilon'),
                 help='calibrate a parameter to this epsilon')
  p.add_argument('--calibrate',
                 choices=('noise_multiplier', 'local_stddev', 'theta',
                          'num_trials'),
                 help='parameter to calibrate (default: the noise one)')
  p.set_defaults(command='privacy', body=run)
  return p


def _mode(args, free):
  """ddg / skellam: 'factory' (a factory's settings: --noise-multiplier
  relative to the clip, --bits, ...) or 'measured' (a run's
  --l2-sensitivity, --local-stddev, ...)."""
  factory = sorted(
      name for name in _FACTORY_FLAGS if getattr(args, name) is not None)
  measured = sorted(
      name for name in _MEASURED_FLAGS if getattr(args, name) is not None)
  if free is not None:
    (factory if free == 'noise_multiplier' else measured).append(free)
  if factory and measured:
    raise common.UserError(
        f'{", ".join(_flag(f) for f in factory)} (a factory\'s settings: '
        'its noise multiplier is relative to the l2 clip, as in every '
        'factory and in TFF) do(es) not combine with '
        f'{", ".join(_flag(f) for f in measured)} (a run\'s measured '
        'integer-domain numbers); give one set')
  if measured:
    return 'measured'
  if factory:
    return 'factory'
  raise common.UserError(
      f'--mechanism {args.mechanism} needs a factory\'s settings '
      '(--noise-multiplier, --bits, optionally --l2-clip, --beta, '
      '--modclip-prob) or a run\'s measurements (--l2-sensitivity, '
      '--local-stddev)')


def _parameters(args):
  """Validates which flags apply; returns (params, calibrated or None)."""
  m = args.mechanism
  free = None
  if args.target_epsilon is not None:
    free = args.calibrate
    if free is None:
      free = _CALIBRATED[m][0]
      if m in ('ddg', 'skellam') and any(
          getattr(args, name) is not None for name in _FACTORY_FLAGS):
        free = 'noise_multiplier'
    if free not in _CALIBRATED[m]:
      raise common.UserError(f'--calibrate for {m} must be one of '
                             f'{", ".join(_CALIBRATED[m])}, got {free}')
  elif args.calibrate:
    raise common.UserError('--calibrate needs --target-epsilon')
  given = {
      name for names in _MECHANISM_FLAGS.values() for name in names
      if getattr(args, name) is not None
  }
  if args.noise_sampler == _DEFAULT_SAMPLER:
    given.discard('noise_sampler')
  foreign = sorted(given - set(_MECHANISM_FLAGS[m]))
  if foreign:
    raise common.UserError(
        f'{", ".join(_flag(f) for f in foreign)} do(es) not apply to '
        f'--mechanism {m} (its flags: '
        f'{", ".join(_flag(f) for f in _MECHANISM_FLAGS[m])})')
  if free is not None and getattr(args, free) is not None:
    raise common.UserError(f'{_flag(free)} is what --target-epsilon '
                           'calibrates; do not give it')
  required = _REQUIRED[m]
  if m in ('ddg', 'skellam'):
    required += _MODE_REQUIRED[_mode(args, free)]
  for name in required:
    if name != free and getattr(args, name) is None:
      raise common.UserError(f'--mechanism {m} needs {_flag(name)}')
  params = {
      name: getattr(args, name)
      for name in _MECHANISM_FLAGS[m]
      if getattr(args, name) is not None
  }
  return params, free


def _sampling(args):
  """(rate, sample_size, population) for calibration.rounds_event."""
  if args.sampling == 'none':
    if (args.rate, args.population, args.clients_per_round) != (None,) * 3:
      raise common.UserError('--rate/--population/--clients-per-round need '
                             '--sampling poisson, without-replacement or '
                             'self')
    return None, None, None
  size = args.clients_per_round or args.num_clients
  if args.sampling in ('poisson', 'self'):
    if args.rate is None and args.population is None:
      raise common.UserError(f'--sampling {args.sampling} needs --rate or '
                             '--population')
    if args.rate is not None and args.population is not None:
      raise common.UserError('give --rate or --population, not both')
    if args.rate is not None:
      return args.rate, None, None
  elif args.population is None:
    raise common.UserError('--sampling without-replacement needs '
                           '--population (>= clients per round)')
  if not size:
    raise common.UserError('--population needs --clients-per-round (or '
                           '--num-clients)')
  if size > args.population:
    raise common.UserError(f'--population must be >= clients per round '
                           f'({size}), got {args.population}')
  return None, size, args.population


# A calibration at its range limit that spends less than this fraction of
# the target says so, with the calibration that spends it where one does.
_SPENT_FRACTION = 0.99
_SPENDS_IT = {
    'theta': ('Calibrating the trials at the largest theta spends it: '
              '--calibrate num_trials --theta 0.25.'),
}


def run(args) -> int:
  """Prints eps (or the calibrated parameter); returns the exit code."""
  from tff_ddp.accounting import accountant
  from tff_ddp.accounting import calibration
  from tff_ddp.accounting import conversions
  from tff_ddp.accounting import pld_accountant
  params, free = _parameters(args)
  rate, size, population = _sampling(args)
  adversaries = ([args.adversary]
                 if args.adversary else list(accountant.ADVERSARIES))
  release = _EVENTS[args.mechanism]

  def make_event(x=None):
    one = release(**params) if x is None else release(**params, **{free: x})
    return calibration.rounds_event(one, args.rounds, args.sampling, rate, size,
                                    population)

  central = args.mechanism == 'gaussian'
  if free is None:
    event = make_event()
  else:
    # The central Gaussian is added by the server: nothing to calibrate
    # against it.
    target_adversary = args.adversary or ('release' if central else 'server')
    if central and target_adversary == 'server':
      raise common.UserError(
          '--mechanism gaussian is added by the server itself: no noise '
          'makes it private against the server; calibrate against the '
          'release (--adversary release)')
    result = calibration.calibrate(
        lambda: pld_accountant.tightest(adversary=target_adversary), make_event,
        args.target_epsilon, args.delta, _parameter(args.mechanism, free))
    print(f'{free.replace("_", "-")}: {result.value:.6g}' +
          (' (range limit)' if result.at_limit else '') +
          f'  (calibrated to epsilon {args.target_epsilon:g} against the '
          f'{target_adversary})')
    event = result.event
    if free == 'noise_multiplier' and not central:
      params = dict(params, noise_multiplier=result.value)
  if args.mechanism in ('ddg', 'skellam') and 'bits' in params:
    _print_factory_run(args.mechanism, params)
  sampler_bound = False
  epsilons = {}
  for adversary in adversaries:
    if central and adversary == 'server':
      # The same as `tff-ddp train --mechanism gaussian` and the demo: the
      # server adds the noise and sees the exact sum.
      print('epsilon against the server (runs the protocol): inf  (it adds '
            'the noise itself and sees the exact sum)')
      epsilons[adversary] = math.inf
      continue
    # The Python accountant itself: the same curves, sampler term and
    # conversion as `tff_ddp.accounting.epsilon` / `RdpAccountant`.
    acc = pld_accountant.tightest(adversary=adversary).compose(event)
    eps, order = acc.get_epsilon_and_optimal_order(args.delta)
    rdp = acc.rdp_accountant
    sampler_bound |= bool(
        math.isinf(eps) and acc.sampler_tv_mass > 0 and math.isfinite(
            conversions.rdp_to_epsilon(rdp.orders, rdp.rdp, args.delta)[0]))
    label = {
        'server': 'the server (runs the protocol)',
        'release': 'readers of the release'
    }[adversary]
    print(f'epsilon against {label}: {eps:.6g}  '
          f'({pld_accountant.bound_label(order)})')
    epsilons[adversary] = eps
  if sampler_bound:
    print(f'note: epsilon is inf because the table sampler\'s total-'
          f'variation term (1 + e^eps) N eta exceeds delta (N eta = '
          f'{acc.sampler_tv_mass:.3g}); a run with --noise-sampler exact '
          '(noise_sampler=\'exact\') has no such term.')
  print(
      f'delta: {args.delta:g}; neighbours: '
      f'{"add/remove (central Gaussian)" if args.mechanism == "gaussian" else "zero-out"}'
      f'; {args.rounds} round(s)')
  print(f'sampling: {_SAMPLING_NOTE[args.sampling]}')
  # (For the integer --num-trials, at_limit also means "the next integer
  # is over the target": nothing to say.)
  if free is not None and result.at_limit and free != 'num_trials':
    spent = epsilons[target_adversary]
    if spent < _SPENT_FRACTION * args.target_epsilon:
      print(f'note: --{free.replace("_", "-")} is at its range limit, so '
            f'this run spends epsilon {spent:.4g} of the '
            f'{args.target_epsilon:g} asked (against the {target_adversary}):'
            f' more noise than the budget needs. ' +
            _SPENDS_IT.get(free, 'No value of it spends more.'))
  if args.mechanism == 'gaussian':
    print('note: a central Gaussian is added by the server itself, so it '
          'protects only against readers of the release.')
  return 0
