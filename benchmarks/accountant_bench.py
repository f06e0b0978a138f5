"""Times the tff_ddp accountant against dp-accounting's on equivalent events.

Run: .venv/bin/python benchmarks/accountant_bench.py

Rows: eps of 10,000 sampled DDG rounds -- cohorts the server draws (the
known-sample mixture against the server) and self-sampling (Zhu & Wang,
against every adversary) -- as one SelfComposedDpEvent and as 10,000 separate
events, the same for cPBM, calibrations, and dp-accounting's RdpAccountant on
the equivalent Poisson-sampled Gaussian (central noise multiplier
sqrt(n) sigma / Delta_2, its tight analysis, against readers of the release),
which is the reference time.
"""

import os
import sys
import time

import dp_accounting

# Run from a checkout without installing the package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=wrong-import-position  # after the sys.path entry above

from tff_ddp import accounting
from tff_ddp.accounting import calibration
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
# pylint: enable=wrong-import-position

ROUNDS, RATE, DELTA = 10_000, 0.01, 1e-6
N, D, L2, SIGMA = 100, 2**16, 1000.0, 2000.0


def _timed(fn, repeat=3):
  best, value = float('inf'), None
  for _ in range(repeat):
    start = time.perf_counter()
    value = fn()
    best = min(best, time.perf_counter() - start)
  return best, value


def main():
  ddg = accounting.DistributedDiscreteGaussianDpEvent(L2, SIGMA, N, D)
  sampled = dp_accounting.PoissonSampledDpEvent(RATE, ddg)
  hidden = accounting.SelfSampledDpEvent(RATE, ddg)
  gauss = dp_accounting.PoissonSampledDpEvent(
      RATE, dp_accounting.GaussianDpEvent(N**0.5 * SIGMA / L2))
  pbm = accounting.SelfSampledDpEvent(
      RATE, accounting.PoissonBinomialDpEvent(0.01, 4, N, 64))

  def eps(acc_fn, event, count):
    return acc_fn().compose(event, count).get_epsilon(DELTA)

  # A DDG event asks the mechanism which sampler it runs (one home), which
  # imports TensorFlow once: not part of what the rows time.
  ddg_mechanism.release_event(L2, SIGMA, N, D)
  server = lambda: accounting.RdpAccountant(adversary='server')
  release = lambda: accounting.RdpAccountant(adversary='release')
  rows = []
  t_ref, e_ref = _timed(
      lambda: eps(dp_accounting.rdp.RdpAccountant, gauss, ROUNDS))
  rows.append(('dp-accounting, Poisson Gaussian x10k (release)', t_ref, e_ref))
  t, e = _timed(lambda: eps(release, gauss, ROUNDS))
  rows.append(('ours, Poisson Gaussian x10k (release, tight)', t, e))
  t, e = _timed(lambda: eps(server, sampled, ROUNDS))
  rows.append(('ours, Poisson DDG x10k (server: known sample)', t, e))
  t, e = _timed(lambda: eps(server, hidden, ROUNDS))
  rows.append(('ours, self-sampled DDG x10k (Zhu-Wang)', t, e))
  t, e = _timed(lambda: server().compose(
      dp_accounting.ComposedDpEvent([hidden] * ROUNDS)).get_epsilon(DELTA))
  rows.append(('ours, self-sampled DDG, 10k separate events', t, e))
  t, e = _timed(lambda: eps(server, pbm, ROUNDS))
  rows.append(('ours, self-sampled cPBM x10k', t, e))
  t, r = _timed(lambda: calibration.calibrate(
      server, lambda s: calibration.rounds_event(
          ddg_mechanism.release_event(L2, s, N, D), ROUNDS, 'self', RATE), 3.0,
      DELTA,
      calibration.Parameter.noise('local_stddev', ddg_mechanism.
                                  MIN_SCALED_LOCAL_STDDEV)),
                repeat=1)
  rows.append((f'calibrate self-sampled DDG sigma={r.value:.4g} to eps=3', t,
               r.epsilon))
  t, r = _timed(lambda: calibration.calibrate(
      release, lambda z: calibration.rounds_event(
          dp_accounting.GaussianDpEvent(z), ROUNDS, 'poisson', RATE), 3.0,
      DELTA, calibration.Parameter.noise('noise_multiplier')),
                repeat=1)
  rows.append(
      (f'calibrate Gaussian z={r.value:.4g} to eps=3 (release)', t, r.epsilon))

  print(f'{"case":56s} {"seconds":>9s} {"x ref":>7s} {"epsilon":>9s}')
  for name, t, e in rows:
    print(f'{name:56s} {t:9.4f} {t / t_ref:7.2f} {e:9.4f}')


if __name__ == '__main__':
  main()
