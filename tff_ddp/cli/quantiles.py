"""`tff-ddp quantiles`: federated DP quantiles on synthetic data or yours.

Every distributed row is the real TFF process of `build_quantile_process`
(secure modular sum in the C++ test execution context), one round per
repetition, calibrated to (epsilon, delta) per round against the server
that runs the protocol (zero-out neighbours); the central row of each
method is the same encoding with the Gaussian mechanism at the same
(epsilon, delta) added once by a trusted server -- private against readers
of the release only. Synthetic data is drawn afresh for every repetition;
--values FILE (one value per client: `value` or `client_id,value` lines)
runs every repetition on the file's values, one client per line, each
repetition a release of its own. The true quantiles and errors are computed
in the clear, to evaluate the estimate: the protocol releases neither.
"""

import dataclasses
import time
import warnings
from typing import Callable, List, Optional, Sequence

import numpy as np

from tff_ddp.cli import common
from tff_ddp.utils import checks
from tff_ddp.utils import processes

DISTRIBUTIONS = ('uniform', 'chi2')
# The ring's bits: the least tried when --bits is not given, and the most.
DEFAULT_BITS = 18
MAX_BITS = 30
# How the distributed rows run (--engine): 'tff', TFF's process, one call
# per client; 'batched', `tff_ddp.analytics.quantiles.rounds` (the same
# client and server code in batches, the process's distribution); 'auto',
# TFF up to AUTO_TFF_CLIENTS clients (~10 s a round), batched above.
ENGINES = ('auto', 'tff', 'batched')
AUTO_TFF_CLIENTS = 10**4


@dataclasses.dataclass
class Row:
  method: str
  mechanism: str
  worst_error: float  # mean over repetitions of max_p eq. 3
  worst_error_std: float
  epsilon: float
  detail: str
  seconds_per_round: float
  last_estimates: np.ndarray


def draw(distribution: str, n: int, rng, upper: float) -> np.ndarray:
  distribution = checks.choice(distribution, 'distribution', DISTRIBUTIONS)
  if distribution == 'uniform':
    return rng.uniform(0.0, upper, n)
  return rng.chisquare(4, n)


def _worst(cdf, values, quantiles, lower, upper, num_bins):
  from tff_ddp.analytics.quantiles import encodings as hg
  values = values[~np.isnan(values)]  # NaN: a client without a value
  if not values.size:
    return float('nan')
  idx = hg.quantile_indices(cdf, quantiles).numpy()
  return float(
      np.max(hg.quantile_error(values, idx, quantiles, lower, upper, num_bins)))


def configure(encodings,
              mechanisms,
              num_bins,
              num_clients,
              epsilon,
              delta,
              bits=None,
              noise_seed=None):
  """(bits, {(encoding, mechanism): calibrated parameters}).

  Without `bits`, the ring is sized for the clients (their number is
  public by protocol): the least bits from DEFAULT_BITS up at which every
  configuration fits (10^6 clients at epsilon 1: 25, where 18 was refused
  with "use bits >= 25").
  """
  from tff_ddp.analytics.quantiles import process as q

  def at(ring_bits):
    configurations = {}
    with warnings.catch_warnings():
      # A noise seed's warning is the report's first line (`run`).
      warnings.filterwarnings('ignore', message=r'.*\(seed=\.\.\.\)')
      for encoding in encodings:
        for mechanism in mechanisms:
          configurations[encoding, mechanism] = q.quantile_parameters(
              encoding, mechanism, num_bins,
              q.QuantileSetting(num_clients,
                                epsilon,
                                delta,
                                bits=ring_bits,
                                seed=noise_seed))
    return configurations

  if bits is not None:
    return bits, at(bits)
  for ring_bits in range(DEFAULT_BITS, MAX_BITS):
    try:
      return ring_bits, at(ring_bits)
    except ValueError:
      continue
  return MAX_BITS, at(MAX_BITS)  # its refusal says what to change


def run(
    methods: Sequence[str] = ('flat', 'tree', 'haar'),
    mechanisms: Sequence[str] = ('discrete_gaussian', 'poisson_binomial'),
    num_clients: int = 128,
    num_bins: int = 32,
    epsilon: float = 1.0,
    delta: Optional[float] = None,
    distribution: str = 'uniform',
    upper_bound: float = 10.0,
    repetitions: int = 3,
    quantiles: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 0.9),
    bits: Optional[int] = None,
    seed: int = 0,
    print_fn: Callable[[str], None] = print,
    values: Optional[np.ndarray] = None,
    lower_bound: float = 0.0,
    source: str = '',
    noise_seed: Optional[int] = None,
    output: Optional[str] = None,
    plot: Optional[str] = None,
    engine: str = 'auto',
    progress: Optional[Callable[[str, int, int], None]] = None) -> List[Row]:
  """Runs the experiment and prints the error table; returns its rows.

  With `values` (one per client, e.g. `data_files.read_values`) every
  repetition runs on them (num_clients, distribution and seed are not
  used); `source` names them in the report. Values outside [lower_bound,
  upper_bound] are clipped into the end bins.

  Every row's noise -- the distributed rows' client shares and the central
  rows' Gaussian -- comes from fresh OS entropy (`seed` is the synthetic
  data's only). `noise_seed` (reproducible runs) draws all of it from that
  seed instead: the report then says the rows are not private.

  `output` (CSV, or JSON for .json) gets every row's private estimates
  with their noise, epsilon and adversary; `plot` a picture of the last
  repetition's values with every row's estimates (`tff_ddp.cli.outputs`).

  `engine` (ENGINES) says how the distributed rows run, and the report
  says which ran; `progress(what, clients done, clients)` hears of each
  row's advance (default: `common.ProgressLines` on stderr).
  """
  from tff_ddp.cli import outputs
  print_fn = outputs.wrapping(print_fn)
  for path, flag in ((output, '--output'), (plot, '--plot')):
    if path is not None:
      outputs.check_path(path, flag)
  from tff_ddp.analytics.quantiles import encodings as hg
  from tff_ddp.analytics.quantiles import simulation as sim
  repetitions = checks.integer(repetitions, 'repetitions', 1)
  upper_bound = checks.real(upper_bound, 'upper')
  lower_bound = checks.real(lower_bound, 'lower')
  if not lower_bound < upper_bound:
    raise common.UserError(f'--lower ({lower_bound:g}) must be below --upper '
                           f'({upper_bound:g})')
  noise_seed = checks.seed(noise_seed, 'noise_seed')
  engine = checks.choice(engine, 'engine', ENGINES)
  if progress is None:
    progress = common.ProgressLines('quantiles')
  user_values = None if values is None else np.asarray(values, np.float64)
  if user_values is None:
    num_clients = checks.integer(num_clients, 'clients', 1)
    checks.positive(upper_bound, 'upper')
    draw(distribution, 1, np.random.default_rng(0), upper_bound)  # validates
  else:
    num_clients = len(user_values)
  delta = common.resolve_delta(delta, num_clients, print_fn)
  # Each method named once, as its encoding (each with the count its
  # paper uses); every configuration is calibrated (and refused if it cannot
  # work) before any process runs.
  encodings = [hg.encoding(m, num_bins) for m in methods]
  bits, configurations = configure(encodings, mechanisms, num_bins, num_clients,
                                   epsilon, delta, bits, noise_seed)
  batched = engine == 'batched' or (engine == 'auto' and
                                    num_clients > AUTO_TFF_CLIENTS)
  if not batched:
    processes.use_test_context()
  if user_values is None:
    datasets = [
        draw(distribution, num_clients, np.random.default_rng(seed + r),
             upper_bound) for r in range(repetitions)
    ]
  else:
    datasets = [user_values] * repetitions
  z_central = sim.central_noise_multiplier(epsilon, delta)
  rows = []
  for encoding in encodings:
    method, count = encoding.name, encoding.paper_count
    for mechanism in mechanisms:
      params = configurations[encoding, mechanism]
      round_fn = (_batched_round if batched else _tff_round)(params,
                                                             lower_bound,
                                                             upper_bound,
                                                             quantiles, count,
                                                             noise_seed)
      errors, seconds = [], []
      for r, dataset in enumerate(datasets):
        what = (f'{method} {mechanism}' +
                (f', repetition {r + 1}' if repetitions > 1 else ''))
        start = time.perf_counter()
        result, cdf = round_fn(
            dataset, r, lambda done, total, w=what: progress(w, done, total))
        seconds.append(time.perf_counter() - start)
        progress(what, len(dataset), len(dataset))
        errors.append(
            _worst(cdf, dataset, quantiles, lower_bound, upper_bound, num_bins))
      rows.append(
          Row(method, mechanism, float(np.mean(errors)), float(np.std(errors)),
              params.epsilon, params.noise.describe(),
              float(np.mean(seconds[1:] or seconds)), np.asarray(result)))
    # Central counterpart: the same encoding, Gaussian noise once, from
    # fresh OS entropy (or --noise-seed).
    errors = []
    for r, dataset in enumerate(datasets):
      codes = sim.encodings(encoding, dataset, lower_bound, upper_bound)
      noisy = sim.noisy_sum(
          'central',
          codes,
          central_z=z_central,
          l2_sensitivity=encoding.l2,
          seed=None if noise_seed is None else [noise_seed, r])
      cdf = encoding.cdf(noisy, num_clients if hg.exact_count(count) else None)
      errors.append(
          _worst(cdf, dataset, quantiles, lower_bound, upper_bound, num_bins))
    rows.append(
        Row(
            method, 'central gaussian', float(np.mean(errors)),
            float(np.std(errors)), epsilon, f'z={z_central:.3f}', float('nan'),
            np.asarray(
                hg.quantile_values(cdf, quantiles, lower_bound, upper_bound,
                                   num_bins))))
  last = np.clip(datasets[-1], lower_bound, upper_bound)
  last = last[~np.isnan(last)]
  truth = (np.quantile(last, quantiles) if last.size else np.full(
      len(quantiles), np.nan))
  data = distribution if user_values is None else source or 'values'
  if noise_seed is not None:
    print_fn(f'NOT PRIVATE: every row\'s noise is drawn from --noise-seed '
             f'{noise_seed} (reproducible, and known to whoever knows the '
             'seed); the epsilons are those the rows would have with fresh '
             'noise.')
  print_fn(f'{num_clients} clients ({data} on [{lower_bound:g}, '
           f'{upper_bound:g}]), {num_bins} bins, ring 2^{bits}, '
           f'{repetitions} repetitions')
  print_fn(f'({epsilon:g}, {delta:g})-DP per round against the server, '
           'zero-out neighbours')
  print_fn('distributed rows: ' +
           ('batched rounds (the clients\' encoding and noise in batches, the '
            'secure sum mod 2^bits in int64: the TFF process\'s distribution; '
            '--engine tff for TFF\'s)' if batched else
            'TFF\'s process (test execution context, one call per client)'))
  print_fn('central rows: the same (epsilon, delta), against readers of the '
           'release only')
  print_fn(f'{"method":6s} {"mechanism":18s} {"worst err (eq.3)":>18s} '
           f'{"eps":>6s} {"s/round":>8s}  parameters')
  for row in rows:
    print_fn(f'{row.method:6s} {row.mechanism:18s} '
             f'{row.worst_error:8.4f} +- {row.worst_error_std:6.4f} '
             f'{row.epsilon:6.3f} {row.seconds_per_round:8.2f}  {row.detail}')
  print_fn('last repetition, quantiles ' +
           ' '.join(f'{p:g}' for p in quantiles) + ':')
  print_fn(f'  {"true (sample)":25s} ' + ' '.join(f'{v:6.2f}' for v in truth))
  for row in rows:
    print_fn(f'  {row.method + " " + row.mechanism:25s} ' +
             ' '.join(f'{v:6.2f}' for v in row.last_estimates))
  if output is not None:
    outputs.write_records(output, [
        dict(method=row.method,
             mechanism=row.mechanism,
             quantile=p,
             estimate=float(v),
             epsilon=row.epsilon,
             delta=delta,
             adversary=('release'
                        if row.mechanism == 'central gaussian' else 'server'),
             noise=row.detail,
             clients=num_clients,
             lower=lower_bound,
             upper=upper_bound,
             bins=num_bins,
             private=noise_seed is None)
        for row in rows
        for p, v in zip(quantiles, row.last_estimates)
    ])
    print_fn(f'estimates written to {output} (the last repetition\'s; the '
             'true quantiles and errors are not in it)')
  if plot is not None:
    outputs.plot_quantiles(
        plot, datasets[-1], lower_bound, upper_bound, num_bins, quantiles, rows,
        f'{num_clients} clients ({data}), ({epsilon:g}, {delta:g})-DP '
        'per round' +
        (' -- NOT PRIVATE: --noise-seed' if noise_seed is not None else ''))
    print_fn(f'picture written to {plot} (the histogram is of your values in '
             'the clear: for you, not a private release)')
  return rows


def _tff_round(params, lower_bound, upper_bound, quantiles, count, noise_seed):
  """(values, repetition, progress) -> (estimates, cdf) of TFF's process
  (its state carried over the repetitions)."""
  del noise_seed  # the factory's test seed
  from tff_ddp.analytics.quantiles import process as q
  with warnings.catch_warnings():
    warnings.filterwarnings('ignore', message=r'.*\(seed=\.\.\.\)')
    process = q.build_quantile_process_from_parameters(
        params,
        lower_bound,
        upper_bound,
        quantiles,
        q.QuantileEstimation(count=count),
        rounds=1)
  state = [process.initialize()]

  def round_fn(values, repetition, progress):
    del repetition
    progress(0, len(values))
    out = process.next(state[0], list(values.astype(np.float32)))
    state[0] = out.state
    return out.result, out.measurements['cdf']

  return round_fn


def _batched_round(params, lower_bound, upper_bound, quantiles, count,
                   noise_seed):
  """The same with `quantiles.rounds.run_round` (each repetition's draws
  fresh; with --noise-seed, the seed's and the repetition's)."""
  from tff_ddp.analytics.quantiles import process as q
  from tff_ddp.analytics.quantiles import rounds as qr
  options = q.read_out_options(params.encoding, lower_bound, upper_bound,
                               quantiles, q.QuantileEstimation(count=count))

  def round_fn(values, repetition, progress):
    seed = None if noise_seed is None else noise_seed * 10007 + repetition
    out = qr.run_round(params,
                       options,
                       values,
                       noise_seed=seed,
                       progress=progress)
    return out.result, out.cdf

  return round_fn


def _body(args) -> int:
  """Runs the command: synthetic data, or the clients of --values."""
  from tff_ddp.cli import data_files
  values, value = data_files.file_or_synthetic(
      args.values, '--values', data_files.read_values,
      dict(clients=(args.clients, 128),
           distribution=(args.distribution, 'uniform'),
           seed=(args.seed, 0)), 'its clients are the lines of the file')
  repetitions = args.repetitions or (1 if values is not None else 3)
  run(methods=args.methods,
      mechanisms=args.mechanisms,
      num_clients=value['clients'],
      num_bins=args.bins,
      epsilon=args.epsilon,
      delta=args.delta,
      distribution=value['distribution'],
      upper_bound=args.upper,
      repetitions=repetitions,
      quantiles=args.quantiles,
      bits=args.bits,
      seed=value['seed'],
      values=values,
      lower_bound=args.lower,
      source=args.values or '',
      noise_seed=args.noise_seed,
      output=args.output,
      plot=args.plot,
      engine=args.engine)
  return 0


def add_parser(subparsers):
  p = subparsers.add_parser(
      'quantiles',
      help='federated DP quantiles on synthetic data or yours',
      description=__doc__,
      formatter_class=common.HelpFormatter)
  p.add_argument(
      '--methods',
      nargs='+',
      default=['flat', 'tree', 'haar'],
      help='histogram encodings (tff_ddp.analytics.quantiles.encodings: '
      "flat, tree or its alias hierarchical, haar)")
  p.add_argument('--mechanisms',
                 nargs='+',
                 default=['discrete_gaussian', 'poisson_binomial'],
                 choices=['discrete_gaussian', 'poisson_binomial'],
                 help='the distributed mechanisms (each beside a central '
                 'Gaussian)')
  p.add_argument('--values',
                 metavar='FILE',
                 help='your data instead of synthetic: a CSV file, one value '
                 'per client (lines `value` or `client_id,value`; inf and '
                 'nan per the process\'s policy; see docs/cli.md)')
  p.add_argument('--clients',
                 type=common.integer('--clients', 1, 2**29),
                 help='clients per round (default: 128; with --values, its '
                 'lines)')
  p.add_argument('--bins',
                 type=common.integer('--bins', 2, 2**16),
                 default=32,
                 help='bins (a power of two for tree and haar)')
  p.add_argument('--epsilon',
                 type=common.positive('--epsilon'),
                 default=1.0,
                 help='epsilon per round (against the server)')
  p.add_argument('--delta',
                 type=common.probability_open('--delta'),
                 help=common.DELTA_HELP + ' (per round)')
  p.add_argument('--distribution',
                 choices=DISTRIBUTIONS,
                 help='client values: Unif[0, upper] or chi^2(4) (default: '
                 'uniform; not with --values)')
  p.add_argument('--lower',
                 type=common.finite('--lower'),
                 default=0.0,
                 help='lower bound of the range [lower, upper]')
  p.add_argument('--upper',
                 type=common.finite('--upper'),
                 default=10.0,
                 help='upper bound of the range [lower, upper]')
  p.add_argument('--repetitions',
                 type=common.integer('--repetitions', 1, 10000),
                 help='rounds, each with fresh client data (default: 3; '
                 'with --values 1: each repetition is another release of '
                 'the same values)')
  p.add_argument('--quantiles',
                 type=common.probability_open('--quantiles'),
                 nargs='+',
                 default=[0.1, 0.25, 0.5, 0.75, 0.9],
                 help='levels in (0, 1)')
  p.add_argument('--bits',
                 type=common.integer('--bits', 2, 30),
                 help='ring 2^bits (default: the least from 18 up that holds '
                 'the clients)')
  p.add_argument('--seed',
                 type=common.integer('--seed', 0, 2**32 - 1),
                 help='seed of the synthetic data, not the noise (default: '
                 '0; not with --values)')
  p.add_argument('--output',
                 metavar='FILE',
                 help='write every row\'s private estimates with their noise, '
                 'epsilon and adversary: CSV, or JSON for a .json FILE '
                 '(default: none)')
  p.add_argument('--plot',
                 metavar='FILE',
                 help='draw the histogram of the values with every row\'s '
                 'estimates: .png, .pdf, .svg (default: none)')
  p.add_argument('--noise-seed',
                 type=common.integer('--noise-seed', 0, 2**32 - 1),
                 help='draw every row\'s noise from this seed: reproducible, '
                 'and then NOT private (the report says so) (default: '
                 'none: fresh OS entropy)')
  p.add_argument('--engine',
                 choices=ENGINES,
                 default='auto',
                 help='how the distributed rows run: tff (TFF\'s process, '
                 'one call per client), batched (the same client and server '
                 'code in batches: the process\'s distribution, minutes for '
                 f'10^6 clients) or auto (tff up to {AUTO_TFF_CLIENTS} '
                 'clients, batched above)')
  p.set_defaults(command='quantiles', body=_body)
  return p
