"""`tff-ddp quantiles`: a synthetic federated DP quantile experiment.

Every distributed row is the real TFF process of `build_quantile_process`
(secure modular sum in the C++ test execution context), one round per
repetition with fresh client data, calibrated to (epsilon, delta) per round
against the server that runs the protocol (zero-out neighbours); the central
row of each method is the same encoding with the Gaussian mechanism at the
same (epsilon, delta) added once by a trusted server -- private against
readers of the release only.
"""

import dataclasses
import time
from typing import Callable, List, Sequence

import numpy as np

from tff_ddp.cli import common
from tff_ddp.utils import checks
from tff_ddp.utils import processes

DISTRIBUTIONS = ('uniform', 'chi2')


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


def _worst(cdf, values, quantiles, upper, num_bins):
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  idx = hg.quantile_indices(cdf, quantiles).numpy()
  return float(np.max(hg.quantile_error(values, idx, quantiles, 0.0, upper,
                                        num_bins)))


def run(methods: Sequence[str] = ('flat', 'tree', 'haar'),
        mechanisms: Sequence[str] = ('discrete_gaussian', 'poisson_binomial'),
        num_clients: int = 128,
        num_bins: int = 32,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        distribution: str = 'uniform',
        upper_bound: float = 10.0,
        repetitions: int = 3,
        quantiles: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 0.9),
        bits: int = 18,
        seed: int = 0,
        print_fn: Callable[[str], None] = print) -> List[Row]:
  """Runs the experiment and prints the error table; returns its rows."""
  from tff_ddp.analytics import histograms as hg  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import quantiles as q  # pylint: disable=g-import-not-at-top
  from tff_ddp.analytics import simulation as sim  # pylint: disable=g-import-not-at-top
  repetitions = checks.integer(repetitions, 'repetitions', 1)
  num_clients = checks.integer(num_clients, 'clients', 1)
  upper_bound = checks.positive(upper_bound, 'upper')
  draw(distribution, 1, np.random.default_rng(0), upper_bound)  # validates
  # Each method named once, as its encoding (each with the count its
  # paper uses); every configuration is calibrated (and refused if it cannot
  # work) before any process runs.
  encodings = [hg.encoding(m, num_bins) for m in methods]
  configurations = {}
  for encoding in encodings:
    for mechanism in mechanisms:
      configurations[encoding, mechanism] = q.quantile_parameters(
          encoding, mechanism, num_bins, num_clients, epsilon, delta, bits)
  processes.use_test_context()
  datasets = [draw(distribution, num_clients,
                   np.random.default_rng(seed + r), upper_bound)
              for r in range(repetitions)]
  z_central = sim.central_noise_multiplier(epsilon, delta)
  rows = []
  for encoding in encodings:
    method, count = encoding.name, encoding.paper_count
    for mechanism in mechanisms:
      params = configurations[encoding, mechanism]
      process = q.build_quantile_process_from_parameters(
          params, 0.0, upper_bound, quantiles, count=count, rounds=1)
      state = process.initialize()
      errors, seconds = [], []
      for values in common.progress(datasets, f'{method} {mechanism}'):
        start = time.perf_counter()
        out = process.next(state, list(values.astype(np.float32)))
        seconds.append(time.perf_counter() - start)
        state = out.state
        errors.append(_worst(out.measurements['cdf'], values, quantiles,
                             upper_bound, num_bins))
      detail = (f'c={params.scaling} z={params.noise_multiplier:.3f}'
                if mechanism == 'discrete_gaussian' else
                f'theta={params.theta:.4f} m={params.num_trials}')
      rows.append(Row(method, mechanism, float(np.mean(errors)),
                      float(np.std(errors)), params.epsilon, detail,
                      float(np.mean(seconds[1:] or seconds)),
                      np.asarray(out.result)))
    # Central counterpart: the same encoding, Gaussian noise once.
    errors = []
    for r, values in enumerate(datasets):
      codes = sim.encodings(encoding, values, 0.0, upper_bound)
      noisy = sim.noisy_sum('central', codes, central_z=z_central,
                            l2_sensitivity=encoding.l2,
                            seed=seed + 7919 * (r + 1))
      cdf = hg.estimate_cdf(encoding, noisy, num_bins, count,
                            num_clients=num_clients)
      errors.append(_worst(cdf, values, quantiles, upper_bound, num_bins))
    rows.append(Row(method, 'central gaussian', float(np.mean(errors)),
                    float(np.std(errors)), epsilon,
                    f'z={z_central:.3f}', float('nan'), np.asarray(
                        hg.quantile_values(cdf, quantiles, 0.0, upper_bound,
                                           num_bins))))
  truth = np.quantile(np.clip(datasets[-1], 0.0, upper_bound), quantiles)
  print_fn(f'{num_clients} clients ({distribution} on [0, {upper_bound:g}]),'
           f' {num_bins} bins, ({epsilon:g}, {delta:g})-DP per round against '
           f'the server (central rows: against readers of the release), '
           f'zero-out neighbours, ring 2^{bits}, {repetitions} repetitions')
  print_fn(f'{"method":6s} {"mechanism":18s} {"worst err (eq.3)":>18s} '
           f'{"eps":>6s} {"s/round":>8s}  parameters')
  for row in rows:
    print_fn(f'{row.method:6s} {row.mechanism:18s} '
             f'{row.worst_error:8.4f} +- {row.worst_error_std:6.4f} '
             f'{row.epsilon:6.3f} {row.seconds_per_round:8.2f}  {row.detail}')
  print_fn('last repetition, quantiles ' +
           ' '.join(f'{p:g}' for p in quantiles) + ':')
  print_fn(f'  {"true (sample)":25s} ' +
           ' '.join(f'{v:6.2f}' for v in truth))
  for row in rows:
    print_fn(f'  {row.method + " " + row.mechanism:25s} ' +
             ' '.join(f'{v:6.2f}' for v in row.last_estimates))
  return rows


def add_parser(subparsers):
  p = subparsers.add_parser(
      'quantiles', help='synthetic federated DP quantile experiment',
      description=__doc__, formatter_class=common.HelpFormatter)
  p.add_argument('--methods', nargs='+', default=['flat', 'tree', 'haar'],
                 help='histogram encodings (tff_ddp.analytics.histograms: '
                 "flat, tree or its alias hierarchical, haar)")
  p.add_argument('--mechanisms', nargs='+',
                 default=['discrete_gaussian', 'poisson_binomial'],
                 choices=['discrete_gaussian', 'poisson_binomial'])
  p.add_argument('--clients', type=common.integer('--clients', 1, 2**29),
                 default=128, help='clients per round')
  p.add_argument('--bins', type=common.integer('--bins', 2, 2**16),
                 default=32, help='bins (a power of two for tree and haar)')
  p.add_argument('--epsilon', type=common.positive('--epsilon'), default=1.0,
                 help='epsilon per round (against the server)')
  p.add_argument('--delta', type=common.probability_open('--delta'),
                 default=1e-5, help='delta per round')
  p.add_argument('--distribution', default='uniform', choices=DISTRIBUTIONS,
                 help='client values: Unif[0, upper] or chi^2(4)')
  p.add_argument('--upper', type=common.positive('--upper'),
                 default=10.0, help='upper bound of the range [0, upper]')
  p.add_argument('--repetitions',
                 type=common.integer('--repetitions', 1, 10000),
                 default=3, help='rounds, each with fresh client data')
  p.add_argument('--quantiles', type=common.probability_open('--quantiles'),
                 nargs='+', default=[0.1, 0.25, 0.5, 0.75, 0.9],
                 help='levels in (0, 1)')
  p.add_argument('--bits', type=common.integer('--bits', 2, 30), default=18,
                 help='ring 2^bits')
  p.add_argument('--seed', type=common.integer('--seed', 0, 2**32 - 1),
                 default=0, help='seed of the synthetic data (not the noise)')
  p.set_defaults(command='quantiles', body=lambda args: run(
      methods=args.methods, mechanisms=args.mechanisms,
      num_clients=args.clients, num_bins=args.bins, epsilon=args.epsilon,
      delta=args.delta, distribution=args.distribution,
      upper_bound=args.upper, repetitions=args.repetitions,
      quantiles=args.quantiles, bits=args.bits, seed=args.seed) and 0)
  return p
