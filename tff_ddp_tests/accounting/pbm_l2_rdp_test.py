"""The l2-aware cPBM bound (`pbm_rdp.l2_rdp`) against brute force.

Exact Renyi divergences of the joint output distribution of the released
sums, for D = 2..4 coordinates, small m and n, the target client's vector on
the l2 sphere of radius C (the axis, the diagonal and vectors in between),
both neighbouring relations and both divisors. The coordinates are
independent given the clients' vectors, so the joint divergence is the sum
of the coordinates' divergences (checked against the full joint PMF for
D = 2); the other clients' offsets are maximised per coordinate over
{-theta, 0, theta}^(n-1), which includes datasets the l2 clip would not
allow (so the brute force is at least the truth).
"""

import itertools
import math
from unittest import mock

from absl.testing import parameterized
import attr
import numpy as np
from scipy import special

from tff_ddp.accounting import event_io
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp as pbm
from tff_ddp.encoders import kashin
from tff_ddp.mechanisms import poisson_binomial as pbm_mechanism

ORDERS = np.array([1.1, 1.5, 2.0, 3.0, 5.0, 10.0, 32.0])
LEVEL = 1.5  # Kashin level K of the 'linf' divisor: B = K C / sqrt(D).


def _sum_pmf(offsets, m):
  """PMF of sum_i Binomial(m, 1/2 + offsets[i])."""
  pmf = np.array([1.0])
  for u in offsets:
    pmf = np.convolve(
        pmf, np.exp(pbm.log_binomial_pmf(np.arange(m + 1), m, 0.5 + u)))
  return pmf


def _divergence(p, q):
  """max(D(P || Q), D(Q || P)), exact from the PMFs."""
  with np.errstate(divide='ignore'):
    lp, lq = np.log(p), np.log(q)
  return np.maximum(pbm.renyi_divergence(lp, lq, ORDERS),
                    pbm.renyi_divergence(lq, lp, ORDERS))


def _offsets(y, theta, bound):
  """The client's probability offsets: theta y / B, kept in [-theta, theta]
  (the mechanism's clip to [p_low, p_high])."""
  return np.clip(theta * np.asarray(y, np.float64) / bound, -theta, theta)


def _brute_force(u, v, theta, m, n):
  """Exact joint divergence, worst case over the others, both directions.

  The target moves from offsets u to v (v = 0: zero-out). Per coordinate
  the other n - 1 clients' offsets range over {-theta, 0, theta}^(n-1), and
  the worst per coordinate is summed (coordinates are independent and the
  others' choice per coordinate is free), for each direction separately;
  the larger direction is returned.
  """
  forward = np.zeros_like(ORDERS)
  backward = np.zeros_like(ORDERS)
  with np.errstate(divide='ignore'):
    for uk, vk in zip(u, v):
      best_f = np.zeros_like(ORDERS)
      best_b = np.zeros_like(ORDERS)
      for others in itertools.product([-theta, 0.0, theta], repeat=n - 1):
        lp = np.log(_sum_pmf([uk] + list(others), m))
        lq = np.log(_sum_pmf([vk] + list(others), m))
        best_f = np.maximum(best_f, pbm.renyi_divergence(lp, lq, ORDERS))
        best_b = np.maximum(best_b, pbm.renyi_divergence(lq, lp, ORDERS))
      forward += best_f
      backward += best_b
  return np.maximum(forward, backward)


def _sphere_vectors(dim):
  """Unit vectors: axis, diagonal, in between, and two random ones."""
  axis = np.eye(dim)[0]
  diagonal = np.ones(dim) / math.sqrt(dim)
  between = np.array([2.0, 1.0] + [0.0] * (dim - 2))
  between /= np.linalg.norm(between)
  rng = np.random.default_rng(dim)
  randoms = rng.normal(size=(2, dim))
  randoms /= np.linalg.norm(randoms, axis=1, keepdims=True)
  return [axis, diagonal, between] + list(randoms)


def _pairs(dim, relation):
  vectors = _sphere_vectors(dim)
  if relation == 'zero_out':
    return [(y, np.zeros(dim)) for y in vectors]
  axis, diagonal = vectors[0], vectors[1]
  other_axis = np.eye(dim)[1]
  return [(axis, -axis), (axis, other_axis), (diagonal, -diagonal),
          (diagonal, axis), (vectors[2], -vectors[3]), (vectors[3], vectors[4])]


def _cases():
  for dim, m, n, theta, divisor, relation in itertools.product(
      (2, 3, 4), (1, 2), (1, 2, 3), (0.1, 0.25), ('l2', 'linf'), pbm.RELATIONS):
    yield dict(dim=dim,
               m=m,
               n=n,
               theta=theta,
               divisor=divisor,
               relation=relation)


def _violations(curve_fn):
  """Cases (and the first order) where curve_fn's bound < brute force.

  curve_fn(event, orders, relation) -> the bound per order. C = 1; B = 1
  ('l2') or K / sqrt(D) ('linf'), so the event's l2 bound is C / B.
  """
  found = []
  for case in _cases():
    dim, m, n, theta = case['dim'], case['m'], case['n'], case['theta']
    bound = 1.0 if case['divisor'] == 'l2' else LEVEL / math.sqrt(dim)
    event = events.PoissonBinomialDpEvent(theta,
                                          m,
                                          n,
                                          dim,
                                          l2_bound=1.0 / bound)
    curve = curve_fn(event, ORDERS, case['relation'])
    for y, y2 in _pairs(dim, case['relation']):
      brute = _brute_force(_offsets(y, theta, bound),
                           _offsets(y2, theta, bound), theta, m, n)
      bad = curve < brute * (1 - 1e-10)
      if np.any(bad):
        found.append((case, y, y2, ORDERS[bad][0]))
  return found


class PbmL2RdpTest(parameterized.TestCase):

  def test_never_below_brute_force(self):
    # Both the l2-aware bound alone and the accountant's curve (the smaller
    # of it and Lemma 2), over every case of `_cases`.
    self.assertEqual(_violations(pbm.l2_rdp), [])
    self.assertEqual(_violations(pbm.rdp), [])

  @parameterized.product(theta=[0.05, 0.25], relation=pbm.RELATIONS)
  def test_more_clients_never_below_brute_force(self, theta, relation):
    # n = 6: the bound with the others' coins revealed (`_kappa_revealed`)
    # is the smaller one here; D = 2, m = 1, every pair of `_pairs`.
    n, dim = 6, 2
    event = events.PoissonBinomialDpEvent(theta, 1, n, dim, l2_bound=1.0)
    curve = pbm.rdp(event, ORDERS, relation)
    for y, y2 in _pairs(dim, relation):
      brute = _brute_force(_offsets(y, theta, 1.0), _offsets(y2, theta, 1.0),
                           theta, 1, n)
      self.assertTrue(np.all(curve >= brute * (1 - 1e-10)), (y, y2))

  def test_revealing_the_coins_helps_with_many_clients(self):
    # About half of kappa for small theta (all n - 1 others stay).
    orders = np.array([1.5, 2.0, 8.0])
    revealed = pbm._kappa_revealed(0.01, 100, orders, 'zero_out')
    dropped = pbm._kappa_dropped(0.01, 100, orders, 'zero_out')
    np.testing.assert_allclose(revealed / dropped, 0.52, atol=0.03)

  def test_a_wrong_kappa_is_caught(self):
    # The test above can fail: kappa 10% too small (e.g. a sampled max that
    # misses the peak) is caught on the axis, where the bound is tight.
    right = pbm._kappa
    with mock.patch.object(pbm, '_kappa',
                           lambda *args: tuple(0.9 * np.asarray(right(*args)))):
      found = _violations(pbm.l2_rdp)
    self.assertNotEmpty(found)
    self.assertTrue(any(np.count_nonzero(y) == 1 for _, y, _, _ in found))

  @parameterized.product(n=[1, 2], theta=[0.1, 0.25])
  def test_zero_out_nearly_tight_on_the_axis(self, n, theta):
    # n' = n // 2 others at the extreme is the brute force's worst case for
    # n <= 2, so on the axis the zero-out bound is the truth up to kappa's
    # grid and the m trials released as one sum (orders <= 2, where f(s)/s^2
    # peaks at s_max). Measured: ratios 1.02 - 1.10. (Replace-one is looser
    # on the axis, 1.1 - 1.7 at these orders: kappa is set by short shifts
    # next to the edge of [-theta, theta], where Ber(1/2 +- theta) is most
    # sensitive, and charged for the long shift -theta -> theta.)
    m, dim = 2, 3
    axis = np.eye(dim)[0]
    event = events.PoissonBinomialDpEvent(theta, m, n, dim, l2_bound=1.0)
    brute = _brute_force(_offsets(axis, theta, 1.0), np.zeros(dim), theta, m, n)
    ratio = (pbm.l2_rdp(event, ORDERS, 'zero_out') / brute)[:3]
    self.assertTrue(np.all(ratio >= 1.0) and np.all(ratio < 1.11), ratio)

  def test_joint_pmf_is_the_sum_over_coordinates(self):
    # The brute force's additivity, against the full 2-D joint PMF.
    theta, m = 0.2, 2
    u = np.array([0.15, -0.1])
    others = [0.2, -0.05]
    p = [_sum_pmf([uk, ok], m) for uk, ok in zip(u, others)]
    q = [_sum_pmf([0.0, ok], m) for ok in others]
    joint_p, joint_q = np.outer(*p).ravel(), np.outer(*q).ravel()
    with np.errstate(divide='ignore'):
      joint = pbm.renyi_divergence(np.log(joint_p), np.log(joint_q), ORDERS)
      summed = sum(
          pbm.renyi_divergence(np.log(a), np.log(b), ORDERS)
          for a, b in zip(p, q))
    np.testing.assert_allclose(joint, summed, rtol=1e-9)
    del theta

  @parameterized.parameters(*pbm.RELATIONS)
  def test_diagonal_beats_lemma_2(self, relation):
    # The point of the bound: spread over D = 64 coordinates Lemma 2 pays
    # 64 f(theta); the l2 bound about f(theta) (kappa theta^2).
    event = events.PoissonBinomialDpEvent(0.1, 4, 100, 64, l2_bound=1.0)
    lemma2 = pbm.rdp(events.PoissonBinomialDpEvent(0.1, 4, 100, 64), ORDERS,
                     relation)
    curve = pbm.rdp(event, ORDERS, relation)
    self.assertTrue(np.all(curve < lemma2 / 30), curve / lemma2)

  def test_no_l2_bound_is_lemma_2(self):
    for bound in (None, math.inf, 8.0):  # 8^2 = 64 >= D: no gain possible.
      event = events.PoissonBinomialDpEvent(0.1, 4, 100, 64, l2_bound=bound)
      for relation in pbm.RELATIONS:
        np.testing.assert_array_equal(
            pbm.rdp(event, ORDERS, relation),
            pbm.rdp(events.PoissonBinomialDpEvent(0.1, 4, 100, 64), ORDERS,
                    relation))
    np.testing.assert_array_equal(
        pbm.l2_rdp(events.PoissonBinomialDpEvent(0.1, 4, 100, 64), ORDERS),
        np.full(ORDERS.shape, np.inf))

  def test_kappa_is_at_least_the_sampled_ratio(self):
    # kappa >= f(s)/s^2 for real datasets of n = 50 clients at random shifts
    # off the grid: the 49 others all at 1/2 + theta, or split between the
    # extremes, the target pair at several positions, both directions.
    rng = np.random.default_rng(1)
    n = 50
    for relation, scale in (('zero_out', 1.0), ('replace_one', 2.0)):
      for theta in (0.01, 0.1, 0.25):
        kap = pbm.kappa(theta, n, ORDERS, relation)
        for plus in (n - 1, 30, 25):
          others = [theta] * plus + [-theta] * (n - 1 - plus)
          for s in list(rng.uniform(0, scale * theta, 3)) + [scale * theta]:
            starts = ([0.0] if relation == 'zero_out' else np.linspace(
                -theta, theta - s, 3))
            for a in starts:
              for b in ([a + s, a - s] if relation == 'zero_out' else [a + s]):
                f = _divergence(_sum_pmf([a] + others, 1),
                                _sum_pmf([b] + others, 1))
                self.assertTrue(np.all(kap >= f / s**2), (s, a, b))

  def test_explicit_event_keeps_its_meaning(self):
    # Carriers without None (tensor events) get l2_bound = inf: Lemma 2.
    old = events.PoissonBinomialDpEvent(0.1, 4, 100, 64)
    made = event_io.explicit(old)
    self.assertEqual(made.l2_bound, math.inf)
    for relation in pbm.RELATIONS:
      np.testing.assert_array_equal(pbm.rdp(made, ORDERS, relation),
                                    pbm.rdp(old, ORDERS, relation))
    kept = events.PoissonBinomialDpEvent(0.1, 4, 100, 64, l2_bound=1.5)
    self.assertEqual(event_io.explicit(kept).l2_bound, 1.5)

  @parameterized.product(divisor=['l2', 'linf'], l0_clip=[None, 8])
  def test_mechanism_event_states_its_l2_clip(self, divisor, l0_clip):
    # L = C / B up to the documented rounding margin; the accountant's curve
    # is the smaller of Lemma 2 and the l2 bound.
    mechanism = pbm_mechanism.compute_parameters(
        64,
        pbm_mechanism.Request(l2_clip=2.0,
                              theta=0.05,
                              num_trials=16,
                              expected_clients_per_round=100,
                              divisor=divisor,
                              l0_clip=l0_clip),
        encoder=kashin.KashinEncoder(64))
    event = mechanism.dp_event()
    ratio = mechanism.l2_clip / mechanism.coordinate_bound
    self.assertBetween(event.l2_bound, ratio, ratio * (1 + 1e-5))
    if divisor == 'l2':
      self.assertAlmostEqual(event.l2_bound, 1.0, places=5)
    lemma2 = pbm.rdp(attr.evolve(event, l2_bound=None), ORDERS)
    np.testing.assert_array_equal(pbm.rdp(event, ORDERS),
                                  np.minimum(lemma2, pbm.l2_rdp(event, ORDERS)))

  @parameterized.parameters(0.0, -1.0, float('nan'))
  def test_rejects_bad_l2_bound(self, bound):
    with self.assertRaisesRegex(ValueError, 'l2_bound'):
      pbm.rdp(events.PoissonBinomialDpEvent(0.1, 4, 100, 64, l2_bound=bound),
              ORDERS)


class FairCoinLatticeTest(parameterized.TestCase):
  """The second reduction's mixture on its lattice equals the mixture of
  the row PMFs, computed here from its definition.

  Reference: rows J (weights P(J) = Bin(n - 1, 1 - 2 theta)(J), those the
  lattice keeps; the rest charged as `outer`), the target pair
  Ber(1/2 + u) + Bin(J, 1/2) vs Ber(1/2 + v) + Bin(J, 1/2) as convolved
  PMFs; exp((alpha - 1) D) = sum_J P(J) sum_z P^alpha Q^(1 - alpha)
  + outer 3^(alpha - 1) by logsumexp, and the curvature terms of
  `pbm._curvature_bound` with dP = R(z - 1) - R(z). 200 clients at theta
  0.2 (~2 10^4 atoms) take the many-atom path (one order at a time, expm1
  by steps); 12 clients the all-orders path.
  """

  _ORDERS = np.array([
      1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 4.0, 6.0, 8.0, 8.25, 8.5, 9.0, 12.0, 16.0,
      32.0, 64.0
  ])

  def _rows(self, theta, n):
    _, offsets, outer = pbm._fair_coin_lattice(theta, n)
    starts = np.flatnonzero(np.isclose(offsets, -2.0))  # z = 0 of each row
    js = np.diff(np.append(starts, offsets.size)) - 2
    weights = np.exp(pbm.log_binomial_pmf(js, n - 1, 1.0 - 2.0 * theta))
    return js, weights, outer

  @staticmethod
  def _pair(j, u, v):
    r = np.exp(pbm.log_binomial_pmf(np.arange(j + 1), j, 0.5))
    return (np.convolve([0.5 - u, 0.5 + u],
                        r), np.convolve([0.5 - v, 0.5 + v],
                                        r), np.convolve([-1.0, 1.0], r))

  @parameterized.product(n=[12, 200], relation=pbm.RELATIONS)
  def test_divergence_is_the_mixtures(self, n, relation):
    theta = 0.2
    js, weights, outer = self._rows(theta, n)
    self.assertGreater(js.size, 1)
    lattice = pbm._fair_coin_lattice(theta, n)
    s_max = theta if relation == pbm.events.Relation.ZERO_OUT else 2 * theta
    for u0, du, v0, dv in pbm._shift_families(theta, relation):
      u, v = u0 + du * s_max, v0 + dv * s_max
      got = pbm._lattice_divergence(u, v, self._ORDERS, lattice)
      log_g = []
      for a in self._ORDERS:
        terms = [
            np.log(w) + special.logsumexp(a * np.log(p) + (1 - a) * np.log(q))
            for j, w in zip(js, weights)
            for p, q, _ in [self._pair(int(j), u, v)]
        ]
        if outer > 0:
          terms.append(math.log(outer) + (a - 1) * math.log(3.0))
        log_g.append(special.logsumexp(terms))
      np.testing.assert_allclose(got,
                                 np.array(log_g) / (self._ORDERS - 1),
                                 rtol=1e-9)

  @parameterized.product(n=[12, 200], relation=pbm.RELATIONS)
  def test_curvature_is_the_mixtures(self, n, relation):
    theta, t = 0.2, 0.05
    js, weights, outer = self._rows(theta, n)
    lattice = pbm._fair_coin_lattice(theta, n)
    a = self._ORDERS[:, None]
    for family in pbm._shift_families(theta, relation):
      u0, du, v0, dv = family
      got = pbm._lattice_curvature(family, t, self._ORDERS, lattice)
      logs = []  # in logs: q^(-alpha-1) overflows for 200 clients
      for j, w in zip(js, weights):
        ends = []
        for s in (0.0, t):
          with np.errstate(divide='ignore'):  # log 0 = -inf where d = 0
            p, q, d = (np.log(np.abs(x))
                       for x in self._pair(int(j), u0 + du * s, v0 + dv * s))
          if dv == 0.0:
            ends.append((a - 2) * (p - q) + 2 * d - q)
          else:
            ends.append(a * p - (a + 1) * q + 2 * d)
        logs.append(
            math.log(w) +
            special.logsumexp(np.maximum(ends[0], ends[1]), axis=1))
      total = np.exp(special.logsumexp(logs, axis=0))
      total += outer * 8 * 3.0**(self._ORDERS + 2)
      np.testing.assert_allclose(got, self._ORDERS / 2 * total, rtol=1e-9)
