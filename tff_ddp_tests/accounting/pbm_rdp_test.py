"""Tests of the cPBM RDP curve against brute force."""

import itertools
import math

from absl.testing import parameterized
import numpy as np
from scipy import special

from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp as pbm

ORDERS = np.array([1.1, 1.5, 2.0, 3.0, 4.5, 10.0, 32.0])


def _log_sum_pmf(probs, m):
  """Exact log PMF of sum_i Binomial(m, probs[i])."""
  pmf = np.array([1.0])
  for p in probs:
    pmf = np.convolve(pmf, np.exp(pbm.log_binomial_pmf(np.arange(m + 1), m, p)))
  with np.errstate(divide='ignore'):
    return np.log(pmf)


class PbmRdpTest(parameterized.TestCase):

  @parameterized.product(n=[1, 2, 3, 4],
                         m=[1, 2, 3],
                         theta=[0.05, 0.25],
                         relation=pbm.RELATIONS)
  def test_upper_bounds_zero_out_brute_force(self, n, m, theta, relation):
    curve = pbm.rdp(events.PoissonBinomialDpEvent(theta, m, n, 1), ORDERS,
                    relation)
    grid = [-1.0, -0.5, 0.0, 0.5, 1.0]
    worst = np.zeros_like(ORDERS)
    for ys in itertools.product(grid, repeat=n):
      probs = [0.5 + theta * y for y in ys]
      zeroed = [0.5] + probs[1:]  # Client 0 zeroed out (symmetric in i).
      lp, lq = _log_sum_pmf(probs, m), _log_sum_pmf(zeroed, m)
      worst = np.maximum(worst, pbm.renyi_divergence(lp, lq, ORDERS))
      worst = np.maximum(worst, pbm.renyi_divergence(lq, lp, ORDERS))
    self.assertTrue(np.all(curve >= worst * (1 - 1e-12)), (curve, worst))

  @parameterized.parameters(1, 3, 20)
  def test_upper_bounds_extreme_replacement(self, n):
    # Lemma 2's own setting: one client moves between -C and +C.
    theta, m = 0.2, 2
    curve = pbm.rdp(events.PoissonBinomialDpEvent(theta, m, n, 1), ORDERS,
                    'replace_one')
    rng = np.random.default_rng(0)
    for _ in range(20):
      others = list(0.5 + theta * rng.choice([-1.0, 1.0, 0.3], n - 1))
      lp = _log_sum_pmf([0.5 + theta] + others, m)
      lq = _log_sum_pmf([0.5 - theta] + others, m)
      brute = pbm.renyi_divergence(lp, lq, ORDERS)
      self.assertTrue(np.all(curve >= brute * (1 - 1e-12)), (curve, brute))

  @parameterized.parameters((1, 0.1), (5, 0.25), (100, 0.05))
  def test_first_term_matches_papers_pi1(self, n, theta):
    log_p, log_q = pbm.worst_case_pair(theta, n)
    n1 = math.ceil((n - 1) / 2) + 1
    k = np.arange(n1 + 1)
    a = (1 + 2 * theta) / (1 - 2 * theta)
    xi = np.log(a * (n1 - k) / n1 + k / (a * n1))
    for lam in [1.5, 2.0, 7.0]:
      log_pi1 = special.logsumexp(
          pbm.log_binomial_pmf(k, n1, 0.5 + theta) + lam * xi)
      self.assertAlmostEqual(pbm.renyi_divergence(log_p, log_q, [lam])[0],
                             log_pi1 / (lam - 1),
                             places=10)

  @parameterized.product(n=[1, 2, 7, 100, 5000], theta=[0.01, 0.1, 0.25])
  def test_zero_out_below_replace_one(self, n, theta):
    event = events.PoissonBinomialDpEvent(theta, 3, n, 2)
    zero = pbm.rdp(event, ORDERS, 'zero_out')
    replace = pbm.rdp(event, ORDERS, 'replace_one')
    self.assertTrue(np.all(zero <= replace * (1 + 1e-12)), (zero, replace))

  def test_zero_out_is_a_quarter_in_the_gaussian_regime(self):
    # Shift theta instead of 2 theta: RDP ~ alpha (shift)^2 / (2 var).
    event = events.PoissonBinomialDpEvent(0.005, 1, 10001, 1)
    ratio = (pbm.rdp(event, [2.0], 'zero_out') /
             pbm.rdp(event, [2.0], 'replace_one'))[0]
    self.assertAlmostEqual(ratio, 0.25, delta=0.01)

  def test_replace_one_dimension(self):
    narrow = events.PoissonBinomialDpEvent(0.1, 2, 30, 3)
    wide = events.PoissonBinomialDpEvent(0.1, 2, 30, 3, replace_one_dimension=6)
    np.testing.assert_allclose(pbm.rdp(wide, ORDERS, 'replace_one'),
                               2 * pbm.rdp(narrow, ORDERS, 'replace_one'))
    np.testing.assert_allclose(pbm.rdp(wide, ORDERS, 'zero_out'),
                               pbm.rdp(narrow, ORDERS, 'zero_out'))
    with self.assertRaisesRegex(ValueError, 'replace_one_dimension'):
      pbm.rdp(
          events.PoissonBinomialDpEvent(0.1, 2, 30, 3, replace_one_dimension=2),
          ORDERS)
    with self.assertRaisesRegex(ValueError, 'relation'):
      pbm.rdp(narrow, ORDERS, 'add_remove')

  def test_composes_over_trials_and_dimension(self):
    one = pbm.rdp(events.PoissonBinomialDpEvent(0.1, 1, 50, 1), ORDERS,
                  'replace_one')
    many = pbm.rdp(events.PoissonBinomialDpEvent(0.1, 4, 50, 3), ORDERS,
                   'replace_one')
    np.testing.assert_allclose(many, 12 * one)

  def test_monotone_in_theta_and_clients(self):
    e = lambda th, n: pbm.rdp(events.PoissonBinomialDpEvent(th, 8, n, 4), ORDERS
                             )
    self.assertTrue(np.all(e(0.1, 100) < e(0.2, 100)))
    self.assertTrue(np.all(e(0.1, 1000) < e(0.1, 100)))

  def test_stable_for_large_n(self):
    curve = pbm.rdp(events.PoissonBinomialDpEvent(0.1, 1, 10**6, 1), [2.0])
    # Small-theta asymptotics: per trial ~ alpha * 2 (2 theta)^2 / n' ... > 0.
    self.assertGreater(curve[0], 0.0)
    self.assertLess(curve[0], 1e-5)

  @parameterized.parameters(0.0, 0.3, -0.1, float('nan'))
  def test_rejects_bad_theta(self, theta):
    with self.assertRaisesRegex(ValueError, 'theta'):
      pbm.rdp(events.PoissonBinomialDpEvent(theta, 1, 2, 1), ORDERS)

  @parameterized.parameters('num_trials', 'num_clients', 'dimension')
  def test_rejects_integers_beyond_float_range(self, field):
    # Found by review: 10**400 reached float() inside the curve
    # (OverflowError) instead of a clear error naming the field.
    fields = dict(theta=0.2, num_trials=10, num_clients=100, dimension=10)
    fields[field] = 10**400
    with self.assertRaisesRegex(ValueError, field):
      pbm.rdp(events.PoissonBinomialDpEvent(**fields), ORDERS)

  @parameterized.product(n=[1001, 10**5],
                         theta=[0.01, 0.25],
                         relation=pbm.RELATIONS)
  def test_window_bound_matches_the_full_support(self, n, theta, relation):
    # Large n: the curve sums a window around the mean and bounds the rest;
    # it must agree with the full-support computation to a relative 1e-9
    # (the tail term is below e^-745) and never be below it.
    orders = np.array([1.5, 2.0, 16.0, 256.0])
    windowed = pbm.per_trial_rdp(theta, n, orders, relation)
    n_prime = n // 2
    k = np.arange(n_prime + 2)
    pairs = ([pbm.worst_case_pair(theta, n, k)]
             if relation == 'replace_one' else pbm.zero_out_pairs(theta, n, k))
    full = np.zeros_like(orders)
    for lp, lq in pairs:
      full = np.maximum(full, pbm.renyi_divergence(lp, lq, orders))
      full = np.maximum(full, pbm.renyi_divergence(lq, lp, orders))
    np.testing.assert_allclose(windowed, full, rtol=1e-9)
    self.assertTrue(np.all(windowed >= full * (1 - 1e-12)))

  def test_ten_million_clients_is_fast(self):
    # Was two minutes over the full support; the window is O(sqrt(n)).
    # Timed in CPU seconds of this process: a wall-clock bound is broken by
    # other work on the machine, not by the code.
    import time
    start = time.process_time()
    curve = pbm.rdp(events.PoissonBinomialDpEvent(0.1, 16, 10**7, 64), ORDERS)
    self.assertLess(time.process_time() - start, 20.0)
    self.assertTrue(np.all(np.isfinite(curve)))

  @parameterized.parameters(*pbm.RELATIONS)
  def test_more_clients_never_raise_the_curve(self, relation):
    # The reason the curve of MAX_EXACT_CLIENTS bounds every larger count:
    # more clients add independent Bernoullis to both members of the pair.
    orders = np.array([1.5, 2.0, 16.0, 256.0])
    for theta in (0.01, 0.1, 0.25):
      curves = [
          pbm.per_trial_rdp(theta, n, orders, relation)
          for n in list(range(1, 80)) + [10**3, 10**4, 10**5]
      ]
      self.assertTrue(np.all(np.diff(curves, axis=0) <= 1e-15), theta)

  def test_beyond_the_exact_limit_the_limit_s_curve(self):
    limit = pbm.MAX_EXACT_CLIENTS
    at = pbm.per_trial_rdp(0.1, limit, ORDERS)
    for n in (limit + 1, 10**12):
      np.testing.assert_array_equal(pbm.per_trial_rdp(0.1, n, ORDERS), at)

  def test_tail_term_is_an_upper_bound(self):
    # A truncated support with the tail given as mass and ratio bound is
    # never below the exact divergence of the full pair.
    lp = np.log([0.1, 0.2, 0.3, 0.4])
    lq = np.log([0.25, 0.25, 0.25, 0.25])
    exact = pbm.renyi_divergence(lp, lq, ORDERS)
    truncated = pbm.renyi_divergence(lp[1:],
                                     lq[1:],
                                     ORDERS,
                                     tail_mass=0.25,
                                     ratio_bound=0.4)
    self.assertTrue(np.all(truncated >= exact - 1e-12))

  def test_event_round_trips_named_tuple(self):
    e = events.PoissonBinomialDpEvent(0.1, 16, 100, 64)
    self.assertEqual(e.to_named_tuple().theta, 0.1)
