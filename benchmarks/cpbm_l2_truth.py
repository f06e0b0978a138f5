"""How far the l2-aware cPBM accountant is from the truth (one round).

For the configuration of `cpbm_vs_ddg.py` (n clients, D representation
coordinates, m trials, Kashin level K) and given theta values, prints the
epsilon at delta of

* the accountant (`tff_ddp.accounting.pbm_rdp.rdp`: the smaller of Lemma 2
  and the l2-aware bound, per order) and Lemma 2 alone;
* the exact RDP curves of real neighbouring datasets (zero-out), from the
  PMFs of the released sums (coordinates independent: the curve is the sum
  of the coordinates' exact curves, both directions): the target client's
  representation on an axis (one coordinate at p = 1/2 + theta; for 'linf'
  as many coordinates at the full theta as its l2 clip allows, floor(D/K^2)
  and the rest on one more) or on the diagonal (every coordinate at
  theta L / sqrt(D)); the other n - 1 clients at 1/2 + theta in every
  coordinate, or split 49/50 between the extremes. The largest of these is a
  lower bound on the true epsilon of the round (each is a real pair of
  datasets), so the accountant's epsilon over it bounds how far the
  accountant is from the truth.

  .venv/bin/python benchmarks/cpbm_l2_truth.py --thetas 0.0673 0.119
"""

import math

import _harness as harness
import numpy as np
from scipy import special


def _log_binomial(n, p):
  k = np.arange(n + 1, dtype=np.float64)
  return (special.gammaln(n + 1.0) - special.gammaln(k + 1.0) -
          special.gammaln(n - k + 1.0) + k * math.log(p) +
          (n - k) * math.log1p(-p))


def _coordinate_curve(s, theta, others_plus, others_minus, m, orders):
  """Exact max(D(P||Q), D(Q||P)) of one coordinate, target 1/2 + s vs 1/2,
  others_plus clients at 1/2 + theta and others_minus at 1/2 - theta."""
  others = np.exp(_log_binomial(m * others_plus, 0.5 + theta))
  if others_minus:
    others = np.convolve(others,
                         np.exp(_log_binomial(m * others_minus, 0.5 - theta)))
  p = np.convolve(others, np.exp(_log_binomial(m, 0.5 + s)))
  q = np.convolve(others, np.exp(_log_binomial(m, 0.5)))
  keep = (p > 1e-300) & (q > 1e-300)  # dropping terms only lowers the sum
  lp, lq = np.log(p[keep]), np.log(q[keep])
  a = orders[:, None]
  forward = special.logsumexp(a * lp + (1 - a) * lq, axis=1)
  backward = special.logsumexp(a * lq + (1 - a) * lp, axis=1)
  return np.maximum(np.maximum(forward, backward), 0.0) / (orders - 1.0)


def run(thetas,
        clients=100,
        output_dim=512,
        level=math.sqrt(5.0),
        trials=256,
        delta=1e-5,
        divisor='l2'):
  """One row per theta: the accountant's epsilon beside the exact ones."""
  from tff_ddp.accounting import conversions
  from tff_ddp.accounting import events
  from tff_ddp.accounting import orders as orders_lib
  from tff_ddp.accounting import pbm_rdp

  orders = np.asarray(orders_lib.DEFAULT_ORDERS)
  n, big_d, m = clients, output_dim, trials
  l2 = 1.0 if divisor == 'l2' else math.sqrt(big_d) / level
  eps = lambda curve: conversions.rdp_to_epsilon(orders, curve, delta)[0]
  table = harness.Table(
      [('theta', 'theta', '.4f'), ('lemma2', 'Lemma 2', '.3f'),
       ('accountant', 'accountant', '.3f'), ('axis_all', 'axis,all+', '.3f'),
       ('axis_split', 'axis,split', '.3f'), ('diag_all', 'diag,all+', '.3f'),
       ('diag_split', 'diag,split', '.3f'), ('ratio', 'acct/truth>=', '.2f')],
      title=f'n = {n}, D = {big_d}, m = {m}, divisor {divisor} (L = '
      f'{l2:.3f}), delta = {delta}; zero-out, one round')
  for theta in thetas:
    base = events.PoissonBinomialDpEvent(theta, m, n, big_d)
    lemma2 = eps(pbm_rdp.rdp(base, orders))
    acct = eps(
        pbm_rdp.rdp(
            events.PoissonBinomialDpEvent(theta, m, n, big_d, l2_bound=l2),
            orders))
    full = int(math.floor(l2 * l2 + 1e-9))
    rest = math.sqrt(max(l2 * l2 - full, 0.0))
    truths = []
    for plus, minus in ((n - 1, 0), ((n - 1) // 2, n - 1 - (n - 1) // 2)):
      curve = lambda s: max(  # pylint: disable=cell-var-from-loop  # called within the same iteration
          _coordinate_curve(s, theta, plus, minus, m, orders).tolist(),
          _coordinate_curve(-s, theta, plus, minus, m, orders).tolist(),
          key=lambda c: -eps(np.asarray(c)))
      axis = full * np.asarray(curve(theta))
      if rest > 0:
        axis = axis + np.asarray(curve(theta * rest))
      diagonal = big_d * np.asarray(curve(theta * l2 / math.sqrt(big_d)))
      truths.append((eps(axis), eps(diagonal)))
    # pylint: disable-next=unbalanced-tuple-unpacking  # two (plus, minus) splits, two truths
    (a1, d1), (a2, d2) = truths
    table.add(theta=theta,
              lemma2=lemma2,
              accountant=acct,
              axis_all=a1,
              axis_split=a2,
              diag_all=d1,
              diag_split=d2,
              ratio=acct / max(a1, a2, d1, d2))
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               thetas=harness.arg('the cPBM theta values, one row each',
                                  type=float,
                                  nargs='+'),
               clients='n, the clients of the round',
               output_dim='D, the representation coordinates',
               level='K, the Kashin level',
               trials='m, the Bernoulli trials per coordinate',
               delta='the delta of the epsilons',
               divisor=harness.arg("cPBM's divisor", choices=('l2', 'linf')))
