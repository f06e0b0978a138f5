"""Issue 25: the neighbouring relation's epsilons, old and new, and MFFE's
indicator encodings compared at equal epsilon.

Every process now states one relation -- one user's data removed (the
user still takes part in the secure sums, holds no data, adds its noise
shares) -- and "no data" sends the zero message of every release, so the
zero-out curves it is accounted on are exact. Before, "no data" sent -1 to
MFFE's indicator, bin 0 to TFFE's phase 1 and loss 0 (bin 0) to
DP-Delta-FL's histogram: replace-one pairs costed as zero-out. Printed per
recorded configuration:

* old accounted: the epsilon the process reported (zero-out curves);
* old true: the same parameters with the sub-event costed for what the old
  encoding sent (an upper bound, per coordinate exact in the worst case):
  MFFE's indicator on the replace-one curve (+1 vs -1); TFFE's phase 1 as
  the worst pair (bin 0, bin j) of the Haar encoding, each coordinate that
  flips sign on the replace-one per-trial curve and each that moves to or
  from 0 on the zero-out one; DP-Delta-FL's histogram DDG with the
  replace-one sensitivities of (bin 0, bin j) (Delta_2^2 and Delta_1
  doubled: flat 2 vs 1, tree 2L vs L, Haar 2L + 2 vs L + 1);
* new: the same parameters with the new encoding, which the zero-out
  curves cover exactly (brute-force tests in tff_ddp_tests/*/neighbour_test)
  -- the old accounted value, now true.

`--simulate` adds MFFE's three indicator encodings at equal epsilon on the
distribution-exact simulator (`frequency.multi_round.simulate`):
'signed' (the new: +-1 with data, 0 without), 'binary' ({0, 1} at the same
theta'), 'paper' (+-1, no data -1, theta' recalibrated so that the round
with the indicator on the replace-one curve has the old accounted
epsilon).

  PYTHONPATH=$PWD .venv/bin/python benchmarks/neighbour_relation.py \
      [--skip-epsilons] [--tffe] [--simulate] [--runs 3 --rounds 30]
"""

import argparse
import math
import time

import _common  # pylint: disable=unused-import  # sets sys.path and the worker guard
import _frequency as F
import numpy as np

DELTA_FREQ = 1e-4


def _orders():
  from tff_ddp.accounting import orders
  return np.asarray(orders.DEFAULT_ORDERS)


def _eps(rdp, delta):
  from tff_ddp.accounting import conversions
  return conversions.rdp_to_epsilon(_orders(), rdp, delta)[0]


def _pbm(event, relation):
  from tff_ddp.accounting import pbm_rdp
  return pbm_rdp.rdp(event, _orders(), relation)


def old_haar_rdp(event, num_bins):
  """RDP of the old phase 1: the worst pair (bin 0, bin j), per coordinate.

  In the Haar encoding a coordinate where both are nonzero and differ is a
  sign flip (replace-one per-trial curve); one that is zero in one of them
  moves by one (zero-out per-trial curve); equal coordinates cost nothing.
  """
  from tff_ddp.accounting import pbm_rdp
  from tff_ddp.analytics.quantiles import encodings as hg
  from tff_ddp.analytics.quantiles import simulation
  table = simulation._table(hg.Haar(num_bins))  # pylint: disable=protected-access  # measures a private part
  flip_curve = pbm_rdp.per_trial_rdp(event.theta, event.num_clients, _orders(),
                                     'replace_one')
  move_curve = pbm_rdp.per_trial_rdp(event.theta, event.num_clients, _orders(),
                                     'zero_out')
  first = table[0]
  worst = np.zeros(len(_orders()))
  for row in table[1:]:
    flips = int(np.sum((first != 0) & (row != 0) & (first != row)))
    moves = int(np.sum((first == 0) != (row == 0)))
    worst = np.maximum(
        worst, event.num_trials * (flips * flip_curve + moves * move_curve))
  return worst


def frequency_rows():
  import tensorflow_federated as tff
  from tff_ddp.analytics.frequency import process as fp
  rows = []

  def tffe(name, params):
    freq = params.factory.dp_event(params.aggregated_type)
    first = params.quantile.factory.dp_event(params.quantile.value_type)
    old = _pbm(freq, 'zero_out') + _pbm(first, 'zero_out')
    true = _pbm(freq, 'zero_out') + old_haar_rdp(first, params.num_bins)
    rows.append((name, params.epsilon, _eps(old, params.delta),
                 _eps(true, params.delta), _eps(old, params.delta)))

  def mffe(name, params):
    freq = params.factory.dp_event(params.aggregated_type)
    ind = params.indicator_factory.dp_event(tff.TensorType(np.float64, [1]))
    old = _pbm(freq, 'zero_out') + _pbm(ind, 'zero_out')
    true = _pbm(freq, 'zero_out') + _pbm(ind, 'replace_one')
    rows.append((name, params.epsilon, _eps(old, params.delta),
                 _eps(true, params.delta), _eps(old, params.delta)))

  # The defaults: d = 64, n = 1000 (TFFE: 10^4, where eq. 5 has an
  # interior optimum at epsilon 1), epsilon 1, budget_fraction 1/11 and 1/2.
  for fraction in (1.0 / 11.0, 0.5):
    tffe(
        f'TFFE d=64 n=10^4 eps=1 rho={fraction:.3g}',
        fp.frequency_parameters('two_phase',
                                64,
                                10**4,
                                1.0,
                                1e-5,
                                max_items=100,
                                budget_fraction=fraction))
    mffe(
        f'MFFE d=64 N=1000 eps=1 rho={fraction:.3g}',
        fp.frequency_parameters('multi_round',
                                64,
                                1000,
                                1.0,
                                1e-5,
                                budget_fraction=fraction))
  # Table 2 block A (the paper's theta, m; n = 10^4, delta 1e-4).
  for d in (50, 100):
    params, _, _ = F.at_paper_parameters('two_phase',
                                         d,
                                         10**4,
                                         DELTA_FREQ,
                                         max_items=100)
    tffe(f'Table 2 A TFFE d={d}', params)
  # Table 2 block B (the paper's epsilon by our accountant).
  for d, eps in ((50, 2.8), (100, 4.0)):
    params = fp.frequency_parameters('two_phase',
                                     d,
                                     10**4,
                                     eps,
                                     DELTA_FREQ,
                                     max_items=100,
                                     calibrate='num_trials',
                                     theta=0.2)
    tffe(f'Table 2 B TFFE d={d}', params)
  # Table 3 (MFFE at the paper's parameters, N = 1000 per round).
  for d in (50, 100):
    params, _, _ = F.at_paper_parameters('multi_round',
                                         d,
                                         1000,
                                         1e-5,
                                         theta=0.2,
                                         m=15,
                                         indicator_m=15,
                                         rounds=100,
                                         learning_rate=1.0,
                                         clip=1.0,
                                         disjoint_rounds=True)
    mffe(f'Table 3 MFFE d={d}', params)
  return rows


def deltafl_rows():
  import attr
  import dp_accounting
  import tensorflow_federated as tff
  from tff_ddp.accounting import accountant
  from tff_ddp.accounting import events
  from tff_ddp.learning import privacy
  update_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, [20, 10]),
       tff.TensorType(np.float32, [10])], list)  # B.3's linear model
  # Figure 3's stage-3 choices (benchmarks/RESULTS.md): (theta, eps, C, r, B).
  chosen = [(0.25, 5, 0.0853, 0.1, 1.1), (0.5, 5, 0.0971, 0.75, 1.5),
            (0.25, 10, 0.0853, 0.5, 1.1), (0.5, 10, 0.0971, 0.5, 1.5),
            (0.25, 20, 0.0971, 0.25, 1.5), (0.5, 20, 0.0971, 0.25, 1.5)]
  rounds, delta = 1000, 1.0 / 2500

  def doubled(event):
    """The round event with the histogram's replace-one sensitivities."""
    if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
      return attr.evolve(event, event=doubled(event.event))
    if isinstance(event, dp_accounting.ComposedDpEvent):
      hist, update = event.events
      assert isinstance(hist, events.DistributedDiscreteGaussianDpEvent)
      l1 = hist.l1_sensitivity
      return dp_accounting.ComposedDpEvent([
          attr.evolve(hist,
                      l2_sensitivity=math.sqrt(2.0) * hist.l2_sensitivity,
                      l1_sensitivity=None if l1 is None else 2.0 * l1), update
      ])
    raise TypeError(type(event))

  rows = []
  for theta, eps, clip, ratio, bound in chosen:
    cal = privacy.calibrate(update_type,
                            eps,
                            delta,
                            rounds,
                            100,
                            clip,
                            budget_ratio=ratio,
                            population=2500,
                            adversary='server',
                            loss_upper_bound=bound,
                            num_bins=16,
                            tail_count='expected')
    config = cal.config
    event = config.round_event(update_type)
    old = accountant.epsilon(dp_accounting.SelfComposedDpEvent(event, rounds),
                             delta, 'server')[0]
    true = accountant.epsilon(
        dp_accounting.SelfComposedDpEvent(doubled(event), rounds), delta,
        'server')[0]
    rows.append((f'Fig. 3 DP-Delta-FL theta={theta} eps={eps} r={ratio} '
                 f'z_w={config.noise_multiplier:.2f} '
                 f'z_q={config.quantile_noise_multiplier:.2f}', cal.epsilon,
                 old, true, old))
  return rows


def _paper_indicator(params, target, delta):
  """A cPBM indicator mechanism whose replace-one curve, composed with the
  frequency release's zero-out curve, meets the old accounted epsilon."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import poisson_binomial
  freq = _pbm(params.factory.dp_event(params.aggregated_type), 'zero_out')
  n = params.expected_clients_per_round
  m = params.indicator_num_trials
  itype = tff.TensorType(np.float64, [1])

  def make(theta):
    return poisson_binomial.PoissonBinomialSumFactory(
        l2_clip=1.0,
        theta=theta,
        num_trials=m,
        expected_clients_per_round=n,
        encoder='none',
        divisor='linf',
        linf_clip=1.0)

  def eps(theta):
    return _eps(freq + _pbm(make(theta).dp_event(itype), 'replace_one'), delta)

  lo, hi = 1e-6, params.indicator_theta
  for _ in range(50):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if eps(mid) <= target else (lo, mid)
  return make(lo).mechanism(itype), lo, eps(lo)


def simulate(runs, rounds, datasets):
  from tff_ddp.analytics.frequency import clipping as fq
  from tff_ddp.analytics.frequency import multi_round
  from tff_ddp.analytics.frequency import simulation as fs
  per_round, d = 1000, 50
  params, _, _ = F.at_paper_parameters('multi_round',
                                       d,
                                       per_round,
                                       1e-5,
                                       theta=0.2,
                                       m=15,
                                       indicator_m=15,
                                       rounds=100,
                                       learning_rate=1.0,
                                       clip=1.0,
                                       disjoint_rounds=True)
  target = params.epsilon
  paper_mech, paper_theta, paper_eps = _paper_indicator(params, target,
                                                        params.delta)
  print(f"MFFE d = {d}, N = {per_round}, R = {rounds} rounds; epsilon "
        f"{target:.4f} for every encoding; indicator theta' = "
        f"{params.indicator_theta:.4f} ('signed', 'binary'), "
        f"{paper_theta:.4f} ('paper' on replace-one: epsilon "
        f'{paper_eps:.4f}), m\' = {params.indicator_num_trials}')
  variants = [('signed', None), ('binary', None), ('paper', paper_mech)]
  for name in datasets:
    results = {v: [] for v, _ in variants}
    start = time.time()
    for run in range(runs):
      x = F.dataset(name, per_round * rounds, d, run)
      batches = [x[i:i + per_round] for i in range(0, len(x), per_round)]
      for variant, mech in variants:
        rng = np.random.default_rng(1000 + run)
        out = multi_round.simulate(params,
                                   batches,
                                   rng,
                                   indicator_encoding=variant,
                                   indicator=mech)
        # The level estimate's error: gamma-hat vs the true level of the
        # clip used, per round (the round's own users, one frame).
        errs = []
        for rd, batch in zip(out, batches):
          norms = fs.norms_of(
              fs.representations(params.encoder(), batch, fs.round_seed(rng)))
          errs.append(rd.quantile_level - float((norms <= rd.clip).mean()))
        results[variant].append(
            (fq.l2_error(out[-1].estimate, x),
             float(np.sqrt(np.mean(np.square(errs)))), out[-1].clip))
    print(f'{name}: {runs} runs, {time.time() - start:.0f} s')
    print('| encoding | final l2 error | RMS error of gamma-hat | final C |')
    print('|---|---|---|---|')
    for variant, _ in variants:
      r = np.array(results[variant])
      print(f'| {variant} | {F.cell(r[:, 0], 3)} | {F.cell(r[:, 1], 4)} | '
            f'{F.cell(r[:, 2], 2)} |')


def tffe_paired(runs, datasets):
  """TFFE (Table 2 block A, d = 50, n = 10^4): the old phase 1 (no data in
  bin 0), the new (no data in no bin; `frequency.two_phase.quantile_phase`)
  and the new with the missing mass counted at norm 0 (not chosen), on the
  same data, frame and phase-1 noise seed; phase 2 with the same noise
  stream."""
  from tff_ddp.analytics.frequency import clipping as fq
  from tff_ddp.analytics.frequency import simulation as fs
  from tff_ddp.analytics.frequency import two_phase
  from tff_ddp.analytics.quantiles import encodings as hg
  from tff_ddp.analytics.quantiles import simulation
  n, d = 10**4, 50
  for name in datasets:
    x0 = F.dataset(name, n, d, 0)
    max_items = float(x0.sum(axis=1).max())
    params, _, _ = F.at_paper_parameters('two_phase',
                                         d,
                                         n,
                                         DELTA_FREQ,
                                         max_items=max_items)
    upper, target = params.upper_bound, params.target_quantile
    encoding = params.quantile.encoding  # TFFE's phase 1: Haar
    out = {'old': [], 'new': [], 'new + missing mass at 0': []}
    start = time.time()
    for run in range(runs):
      x = F.dataset(name, n, d, run)
      rng = np.random.default_rng(run)
      seed = fs.round_seed(rng)
      y = fs.representations(params.encoder(), x, seed)
      norms = fs.norms_of(y)
      noise_seed = 7919 + run
      # Old: every norm in a bin (0 -> bin 0), CDF normalised by n.
      values = np.asarray(norms, np.float32).astype(np.float64)
      codes = simulation.encodings(encoding, values, 0.0, upper)
      noisy = simulation.noisy_sum('poisson_binomial',
                                   codes,
                                   params.quantile,
                                   seed=noise_seed)
      cdf = encoding.cdf(noisy, n)
      c_old = float(
          hg.quantile_values(cdf, [target], 0.0, upper,
                             encoding.num_bins).numpy()[0])

      class _Seed:  # quantile_phase draws its noise seed from rng

        def integers(self, *_):
          return noise_seed

      c_new, status = two_phase.quantile_phase(params.quantile, norms, upper,
                                               target, _Seed())
      assert status == 'ok', status
      # The alternative not chosen: the new encoding with the missing mass
      # n - (noisy total) counted at norm 0 (post-processing).
      noisy = simulation.noisy_sum('poisson_binomial',
                                   np.where((values > 0)[:, None], codes, 0),
                                   params.quantile,
                                   seed=noise_seed)
      cdf = encoding.cdf(noisy, n)
      total = float(encoding.estimated_total(noisy))
      c_shift = float(
          hg.quantile_values(cdf + (n - total) / n, [target], 0.0, upper,
                             encoding.num_bins).numpy()[0])
      c_star = fq.optimal_clip(norms, target)
      for key, c in (('old', c_old), ('new', c_new), ('new + missing mass at 0',
                                                      c_shift)):
        est = fs.pbm_sum(params.mechanism(), y,
                         np.random.default_rng(10**6 + run), seed, c, norms)
        out[key].append((fq.l2_error(est,
                                     x), c / c_star, float(
                                         (norms <= c).mean()) - target))
    print(f'TFFE {name} d = {d}, n = {n}: {runs} paired runs, '
          f'{time.time() - start:.0f} s; empty users '
          f'{(x.sum(axis=1) == 0).mean():.4%} (last run); target {target:.4f}')
    print('| phase 1 | l2 error | C-hat / C* | level of C-hat - target |')
    print('|---|---|---|---|')
    for key in out:
      r = np.array(out[key])
      print(f'| {key} | {F.cell(r[:, 0], 3)} | {F.cell(r[:, 1], 3)} | '
            f'{F.cell(r[:, 2], 4)} |')


def main():
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n', maxsplit=1)[0])
  parser.add_argument('--simulate', action='store_true')
  parser.add_argument('--tffe', action='store_true')
  parser.add_argument('--skip-epsilons', action='store_true')
  parser.add_argument('--runs', type=int, default=3)
  parser.add_argument('--rounds', type=int, default=30)
  parser.add_argument('--datasets', nargs='+', default=['iid', 'heterogeneous'])
  args = parser.parse_args()
  try:
    if not args.skip_epsilons:
      start = time.time()
      rows = frequency_rows() + deltafl_rows()
      print('| configuration | reported | old accounted (zero-out) | old true '
            '(sub-event as sent) | new (true) |')
      print('|---|---|---|---|---|')
      for name, reported, old, true, new in rows:
        print(f'| {name} | {reported:.4f} | {old:.4f} | {true:.4f} | '
              f'{new:.4f} |')
      print(f'({time.time() - start:.0f} s)')
    if args.tffe:
      tffe_paired(args.runs, args.datasets)
    if args.simulate:
      simulate(args.runs, args.rounds, args.datasets)
  finally:
    from tff_ddp.utils import processes
    processes.release_tff()


if __name__ == '__main__':
  main()
