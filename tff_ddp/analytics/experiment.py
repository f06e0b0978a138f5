"""A synthetic federated quantile experiment (what `tff-ddp quantiles` runs).

Every distributed row is the real TFF process of `build_quantile_process`
(secure modular sum in the C++ test execution context), one round per
repetition with fresh client data; the central row of each method is the
same encoding with the Gaussian mechanism at the same (epsilon, delta)
added once by a trusted server (`simulation.noisy_sum('central', ...)`).
"""

import dataclasses
import time
from typing import Callable, List, Sequence

import numpy as np

from tff_ddp.analytics import histograms as hg
from tff_ddp.analytics import quantiles as q
from tff_ddp.analytics import simulation as sim

DISTRIBUTIONS = ('uniform', 'chi2')
_COUNT = {'flat': 'estimated', 'tree': 'exact', 'haar': 'exact'}


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
  if distribution == 'uniform':
    return rng.uniform(0.0, upper, n)
  if distribution == 'chi2':
    return rng.chisquare(4, n)
  raise ValueError(f'distribution must be one of {DISTRIBUTIONS}, got '
                   f'{distribution!r}.')


def _worst(cdf, values, quantiles, upper, num_bins):
  idx = hg.quantile_indices(cdf, quantiles).numpy()
  return float(np.max(hg.quantile_error(values, idx, quantiles, 0.0, upper,
                                        num_bins)))


def run(methods: Sequence[str] = hg.METHODS,
        mechanisms: Sequence[str] = q.MECHANISMS,
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
  if repetitions < 1:
    raise ValueError(f'repetitions must be >= 1, got {repetitions}.')
  draw(distribution, 1, np.random.default_rng(0), upper_bound)  # validates
  datasets = [draw(distribution, num_clients,
                   np.random.default_rng(seed + r), upper_bound)
              for r in range(repetitions)]
  z_central = sim.central_noise_multiplier(epsilon, delta)
  rows = []
  for method in [hg.canonical_method(m) for m in methods]:
    for mechanism in mechanisms:
      params = q.quantile_parameters(method, mechanism, num_bins,
                                     num_clients, epsilon, delta, bits)
      process = q.build_quantile_process(
          method, mechanism, 0.0, upper_bound, num_bins, quantiles,
          num_clients, epsilon, delta, count=_COUNT[method], bits=bits)
      state = process.initialize()
      errors, seconds = [], []
      for values in datasets:
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
    l2 = hg.sensitivities(method, num_bins)[1]
    errors = []
    for r, values in enumerate(datasets):
      codes = sim.encodings(method, values, 0.0, upper_bound, num_bins)
      noisy = sim.noisy_sum('central', codes, central_z=z_central,
                            l2_sensitivity=l2, seed=seed + 7919 * (r + 1))
      cdf = hg.estimate_cdf(method, noisy, num_bins, _COUNT[method],
                            num_clients=num_clients)
      errors.append(_worst(cdf, values, quantiles, upper_bound, num_bins))
    rows.append(Row(method, 'central gaussian', float(np.mean(errors)),
                    float(np.std(errors)), epsilon,
                    f'z={z_central:.3f}', float('nan'), np.asarray(
                        hg.quantile_values(cdf, quantiles, 0.0, upper_bound,
                                           num_bins))))
  truth = np.quantile(np.clip(datasets[-1], 0.0, upper_bound), quantiles)
  print_fn(f'{num_clients} clients ({distribution} on [0, {upper_bound:g}]),'
           f' {num_bins} bins, ({epsilon:g}, {delta:g})-DP per round, ring '
           f'2^{bits}, {repetitions} repetitions')
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
