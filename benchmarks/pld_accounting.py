"""Issue 42: the PLD accountant beside RDP, same run, and what it buys.

    .venv/bin/python benchmarks/pld_accounting.py [--quick]

Tables (every epsilon against the server, zero-out neighbours, unless the
row says otherwise):

1. releases: RDP (`RdpAccountant`) vs the PLD (`PldAccountant`, pessimistic),
   their ratio, and for cPBM a lower bound on the truth (the exact law of
   one coordinate with every other client at one extreme, the target at
   the other; no valid accountant can go below it);
2. speed: 1500-round accountings and calibrations with the tightest
   accountant (the library's default) beside RDP alone, wall and CPU
   seconds (the machine may be shared: CPU seconds are the steadier);
3. calibrated noise at equal epsilon: the cPBM quantile processes' noise
   (count units) over the central Gaussian's at the same epsilon, and the
   Gaussian noise multipliers of the DDG paper's EMNIST / Stack Overflow
   runs, RDP vs tightest.
"""

import argparse
import datetime
import math
import os
import sys
import time

import dp_accounting
import numpy as np
from scipy import stats

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import pld_accountant

SC = dp_accounting.SelfComposedDpEvent
DDG = events.DistributedDiscreteGaussianDpEvent
PBM = events.PoissonBinomialDpEvent


def releases():
  rows = [
      ('cPBM theta 0.25, m 16, n 100', PBM(0.25, 16, 100, 1), 1e-6, 'server'),
      ('cPBM theta 0.1, m 64, n 100', PBM(0.1, 64, 100, 1), 1e-6, 'server'),
      ('cPBM theta 0.02, m 1024, n 1000', PBM(0.02, 1024, 1000,
                                              1), 1e-6, 'server'),
      ('DDG shift 10, local sd 3, n 30', DDG(10, 3, 30, 1), 1e-6, 'server'),
      ('DDG shift 1, sd 1, n 100, self q 0.01, 1000 rounds',
       SC(events.SelfSampledDpEvent(0.01, DDG(1, 1.0, 100, 1)),
          1000), 1e-6, 'server'),
      ('DDG shift 1, sd 0.5, n 16, self q 0.05, 300 rounds',
       SC(events.SelfSampledDpEvent(0.05, DDG(1, 0.5, 16, 1)),
          300), 1e-6, 'server'),
      ('Skellam shift 5, local var 4, n 50',
       events.DistributedSkellamDpEvent(5, 4.0, 50, 1), 1e-6, 'server'),
      ('Gaussian z 4.23, one shot', dp_accounting.GaussianDpEvent(4.23), 1e-6,
       'server'),
      ('Gaussian z 1.0, Poisson q 100/3400, 1500 rounds (release)',
       SC(
           dp_accounting.PoissonSampledDpEvent(
               100 / 3400, dp_accounting.GaussianDpEvent(1.0)),
           1500), 1 / 3400, 'release'),
      ('DDG d 65536, l2 1000, sd 200, n 100, 1000 rounds (RDP kept)',
       SC(DDG(1000, 200, 100, 65536), 1000), 1e-6, 'server'),
  ]
  print('| release | delta | RDP | PLD | RDP / PLD | reported | truth >= | s |')
  print('|---|---|---|---|---|---|---|---|')
  for name, event, delta, adv in rows:
    t = time.time()
    acc = pld_accountant.PldAccountant(adversary=adv).compose(event)
    pld = acc.pld_epsilon(delta)
    rdp = acc.rdp_accountant.get_epsilon(delta)
    sec = time.time() - t
    truth = _cpbm_truth(event, delta) if isinstance(event, PBM) else None
    print(f'| {name} | {delta:.3g} | {rdp:.4g} | {pld:.4g} | '
          f'{rdp / pld:.2f} | {acc.bound_used(delta)} | '
          f'{"" if truth is None else f"{truth:.4g}"} | {sec:.2f} |')


def _cpbm_truth(event, delta):
  """Exact epsilon of one coordinate, every other client at 1/2 - theta,
  target at 1/2 + theta vs 1/2 (a valid pair: a lower bound)."""
  n, m, theta = int(event.num_clients), int(event.num_trials), event.theta
  big = (n - 1) * m
  if big > 20000:
    return None
  rest = stats.binom.pmf(np.arange(big + 1), big, 0.5 - theta)
  p = np.convolve(rest, stats.binom.pmf(np.arange(m + 1), m, 0.5 + theta))
  q = np.convolve(rest, stats.binom.pmf(np.arange(m + 1), m, 0.5))

  def h(a, b, e):
    return np.maximum(a - math.exp(e) * b, 0).sum()

  def eps(a, b):
    lo, hi = 0.0, 20.0
    for _ in range(60):
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if h(a, b, mid) > delta else (lo, mid)
    return hi

  return max(eps(p, q), eps(q, p))


def _timed(fn):
  """(result, wall seconds, CPU seconds) of fn()."""
  wall, cpu = time.time(), time.process_time()
  result = fn()
  return result, time.time() - wall, time.process_time() - cpu


def speed(quick):
  """1500-round accountings and calibrations: the tightest accountant (the
  default) beside RDP alone, wall and CPU seconds (targets: an accounting
  under 1 s, a calibration under 10 s)."""
  print('| 1500-round accounting | tightest s (CPU) | RDP s (CPU) | '
        'epsilon tightest / RDP | bound |')
  print('|---|---|---|---|---|')
  cases = [
      ('Poisson Gaussian q 100/3400 (release)',
       SC(
           dp_accounting.PoissonSampledDpEvent(
               100 / 3400, dp_accounting.GaussianDpEvent(1.0)),
           1500), 'release', 1 / 3400),
      ('self-sampled DDG sd 1 n 100 q 0.01',
       SC(events.SelfSampledDpEvent(0.01, DDG(2, 1.0, 100, 1)),
          1500), 'server', 1e-6),
      ('cPBM theta 0.1 m 64 n 100 d 1', SC(PBM(0.1, 64, 100, 1),
                                           1500), 'server', 1e-6),
  ]
  for name, event, adv, delta in cases:
    pld_accountant._STATES.clear()  # pylint: disable=protected-access  # resets private state between cases
    (e, bound), wall, cpu = _timed(lambda: pld_accountant.tightest(
        adversary=adv).compose(event).get_epsilon_and_bound(delta))
    rdp, rwall, rcpu = _timed(lambda: accountant.RdpAccountant(adversary=adv).
                              compose(event).get_epsilon(delta))
    print(f'| {name} | {wall:.2f} ({cpu:.2f}) | {rwall:.2f} ({rcpu:.2f}) | '
          f'{e:.4g} / {rdp:.4g} | {bound} |')
  print()
  print('| calibration | tightest s (CPU) | RDP s (CPU) | value tightest / '
        'RDP | bound |')
  print('|---|---|---|---|---|')
  rdp_only = _rdp_only()
  calibrations = [
      ('Gaussian z, Poisson q 100/3400, 1500 rounds, eps 10 (release)',
       lambda make: calibration.calibrate(
           lambda: make(adversary='release'), lambda z: calibration.
           rounds_event(dp_accounting.GaussianDpEvent(z),
                        1500,
                        'poisson',
                        rate=100 / 3400), 10.0, 1 / 3400,
           calibration.Parameter.noise('z'))),
      ('Gaussian z, 10 rounds, eps 2, replace-one',
       lambda make: calibration.calibrate(
           lambda: make(neighboring_relation=(dp_accounting.NeighboringRelation.
                                              REPLACE_ONE)), lambda z:
           calibration.rounds_event(dp_accounting.GaussianDpEvent(
               z), 10), 2.0, 1e-5, calibration.Parameter.noise('z'))),
      ('cPBM theta, m 64, n 100, d 64, eps 1', lambda make: calibration.
       calibrate(make, lambda t: PBM(t, 64, 100, 64), 1.0, 1e-6,
                 calibration.Parameter.signal('theta', 2**-40, 0.25))),
      ('cPBM num_trials, theta 0.1, n 100, d 1, eps 3',
       lambda make: calibration.calibrate(
           make, lambda m: PBM(0.1, m, 100, 1), 3.0, 1e-6,
           calibration.Parameter.signal(
               'num_trials', 1, 2**31 - 1, discrete=True))),
      ('DDG local sd, shift 4, n 50, 100 rounds, eps 2',
       lambda make: calibration.calibrate(
           make, lambda s: SC(DDG(4, s, 50, 1), 100), 2.0, 1e-6,
           calibration.Parameter.noise('local_stddev', 0.5))),
      ('DDG local sd, d 65536, l2 1000, n 100, 1000 rounds, eps 5',
       lambda make: calibration.calibrate(
           make, lambda s: SC(DDG(1000, s, 100, 65536), 1000), 5.0, 1e-6,
           calibration.Parameter.noise('local_stddev', 0.5))),
  ]
  for name, fn in calibrations:
    pld_accountant._STATES.clear()  # pylint: disable=protected-access  # resets private state between cases
    r, wall, cpu = _timed(lambda: fn(pld_accountant.tightest))
    rdp, rwall, rcpu = _timed(lambda: fn(rdp_only))
    print(f'| {name} | {wall:.2f} ({cpu:.2f}) | {rwall:.2f} ({rcpu:.2f}) | '
          f'{r.value:.5g} / {rdp.value:.5g} | {r.bound} |')
  if quick:
    return
  # The frequency docs example (docs/analytics.md): a budget split of a
  # cPBM quantile phase and a cPBM frequency phase, each step calibrating
  # both (the l2-aware cPBM RDP's constants, ~30 s of CPU per new theta,
  # dominate either way).
  from tff_ddp.analytics.frequency import process as fp
  for label, make in (('tightest', pld_accountant.tightest), ('RDP', rdp_only)):
    pld_accountant.tightest = make
    pld_accountant._STATES.clear()  # pylint: disable=protected-access  # resets private state between cases
    pbm_rdp._kappa.cache_clear()  # pylint: disable=protected-access  # resets private state between cases
    try:
      params, wall, cpu = _timed(
          lambda: fp.frequency_parameters('two_phase',
                                          dim=20,
                                          expected_clients_per_round=500,
                                          epsilon=4.0,
                                          delta=1e-5,
                                          max_items=100))
    finally:
      pld_accountant.tightest = tightest_default
    print(f'| frequency two_phase d 20 n 500 eps 4 ({label}) | {wall:.1f} '
          f'({cpu:.1f}) | | theta {params.theta:.4g} m {params.num_trials} | '
          '|')


tightest_default = pld_accountant.tightest


def _rdp_only():
  return lambda adversary='server', neighboring_relation=(
      dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE): (
          accountant.RdpAccountant(neighboring_relation=neighboring_relation,
                                   adversary=adversary))


def equal_epsilon(quick):
  tightest = pld_accountant.tightest
  print('| noise at equal epsilon | RDP | tightest | RDP / tightest |')
  print('|---|---|---|---|')
  for name, rounds, q, delta, target, adv in [
      ('EMNIST Gaussian z (q 100/3400, 1500 rounds, eps 10, release)', 1500,
       100 / 3400, 1 / 3400, 10.0, 'release'),
      ('Stack Overflow Gaussian z (q 100/342477, 1600 rounds, eps 1, '
       'release)', 1600, 100 / 342477, 1e-6, 1.0, 'release')
  ]:
    zs = []
    for make in (_rdp_only(), tightest):
      zs.append(
          calibration.calibrate(
              lambda: make(adversary=adv), lambda z: calibration.rounds_event(
                  dp_accounting.GaussianDpEvent(z), rounds, 'poisson', rate=q),
              target, delta, calibration.Parameter.noise('z')).value)
    print(f'| {name} | {zs[0]:.4g} | {zs[1]:.4g} | {zs[0] / zs[1]:.3f} |')
  from tff_ddp.analytics.quantiles import calibration as qc
  central = {}
  for label, make in (('RDP', _rdp_only()), ('tightest', tightest)):
    central[label] = calibration.calibrate(
        lambda: make(adversary='server'), dp_accounting.GaussianDpEvent, 1.0,
        1e-6, calibration.Parameter.noise('z')).value
  print(f'| central Gaussian z (eps 1, delta 1e-6) | {central["RDP"]:.4g} | '
        f'{central["tightest"]:.4g} | '
        f'{central["RDP"] / central["tightest"]:.3f} |')
  print()
  print('| cPBM quantiles (64 bins, eps 1, delta 1e-6) | noise / central '
        '(RDP) | noise / central (tightest) | s (tightest) |')
  print('|---|---|---|---|')
  configs = [('flat', 100), ('tree', 100), ('haar', 100), ('flat', 1000)]
  if quick:
    configs = configs[:1]
  for method, n in configs:
    ratios, sec = [], 0.0
    for label, make in (('RDP', _rdp_only()), ('tightest', tightest)):
      pld_accountant.tightest = make
      try:
        t = time.time()
        setting = qc.QuantileSetting(expected_clients_per_round=n,
                                     epsilon=1.0,
                                     delta=1e-6,
                                     bits=20)
        params = qc.quantile_parameters(method, 'poisson_binomial', 64, setting)
        sec = time.time() - t
        l2 = params.l2_sensitivity
        ratios.append(params.noise_stddev() / (central[label] * l2))
      finally:
        pld_accountant.tightest = tightest
    print(f'| {method}, n {n} | {ratios[0]:.3f} | {ratios[1]:.3f} | '
          f'{sec:.1f} |')


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true')
  args = parser.parse_args()
  print(f'# {" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])} | '
        f'{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC | load '
        f'{os.getloadavg()[0]:.2f} | cores {os.cpu_count()}')
  releases()
  print()
  speed(args.quick)
  print()
  equal_epsilon(args.quick)


if __name__ == '__main__':
  main()
