"""Privacy of the distributed discrete Gaussian: Theorem 5 by hand, RDP."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np

from tff_ddp.accounting import accountant
from tff_ddp.accounting import conversions
from tff_ddp.accounting import ddg_rdp as ddg
from tff_ddp.accounting import events
from tff_ddp.accounting import orders as orders_lib
from tff_ddp.mechanisms import rounding


def _event(l2=2.0, sigma=0.5, n=3, d=4, l1=None):
  return events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=l2,
                                                   local_stddev=sigma,
                                                   num_clients=n,
                                                   dimension=d,
                                                   l1_sensitivity=l1)


class Theorem5Test(parameterized.TestCase):

  def test_tau_by_hand(self):
    # tau = 10 * (exp(-2 pi^2 0.25 * 1/2) + exp(-2 pi^2 0.25 * 2/3))
    #     = 10 * (exp(-2.467401) + exp(-3.289868))
    #     = 10 * (0.0848054 + 0.0372583) = 1.220637
    self.assertAlmostEqual(ddg.tau(0.5, 3), 1.220637, places=5)

  def test_tau_for_a_billion_clients_is_bounded_and_cheap(self):
    # Exact for n - 1 <= 2^20 terms; beyond, the tail bound is within a
    # factor exp(2 pi^2 sigma^2 / 2^20) of the exact tail.
    exact = ddg.tau(0.5, 2**20 + 1)
    bounded = ddg.tau(0.5, 2**20 + 1001)
    per_term = 10 * math.exp(-2 * math.pi**2 * 0.25)
    self.assertGreater(bounded, exact + 999 * per_term)
    self.assertLess(
        bounded, exact +
        1000 * per_term * math.exp(2 * math.pi**2 * 0.25 / 2**20) * (1 + 1e-12))
    self.assertGreater(ddg.tau(2.0, 10**9), 0.0)

  def test_epsilon_by_hand(self):
    # Delta_2 = 2, sigma = 0.5, n = 3, d = 4 (a regime where tau matters):
    # s2 = 2 / (sqrt(3) * 0.5) = 2.309401, s2^2 = 5.333333
    # eq. 5 first term: sqrt(5.333333 + 1.220637 * 4 / 2) = sqrt(7.774608)
    #                   = 2.788298
    # eq. 5 second term: 2.309401 + 1.220637 * 2 = 4.750676
    # eq. 8 middle term, Delta_1 = min(2*2, 2^2) = 4, s1 = 4.618802:
    #   sqrt(5.333333 + 2*4.618802*1.220637 + 1.220637^2*4) = 4.750676
    self.assertAlmostEqual(ddg.zcdp_epsilon(_event()), 2.788298, places=5)

  def test_large_noise_is_the_gaussian(self):
    # tau vanishes, so eps = Delta_2 / (sqrt(n) sigma).
    e = _event(l2=1000.0, sigma=100.0, n=100, d=1024)
    self.assertAlmostEqual(ddg.zcdp_epsilon(e), 1.0, places=12)

  def test_rounded_norm_bound_by_hand(self):
    # c/gamma = 10, d = 16: unconditional (10 + 4)^2 = 196; with
    # beta = exp(-1/2): 100 + 4 + sqrt(2 * 0.5) * (10 + 2) = 116.
    self.assertAlmostEqual(
        rounding.rounded_l2_norm_bound_squared(10.0, 16, 0.0), 196.0)
    self.assertAlmostEqual(
        rounding.rounded_l2_norm_bound_squared(10.0, 16, math.exp(-0.5)), 116.0)

  def test_small_noise_has_no_guarantee(self):
    self.assertEqual(ddg.zcdp_epsilon(_event(sigma=0.49)), math.inf)
    self.assertTrue(
        np.all(np.isinf(ddg.rdp(_event(sigma=0.49),
                                orders_lib.DEFAULT_ORDERS))))

  @parameterized.parameters(dict(l2=-1.0), dict(sigma=float('nan')), dict(n=0),
                            dict(d=0), dict(l2=float('inf')))
  def test_bad_event_raises(self, **kwargs):
    with self.assertRaises(ValueError):
      ddg.zcdp_epsilon(_event(**kwargs))

  @parameterized.parameters(dict(n=2.5), dict(d='4'), dict(n=True))
  def test_bad_event_types_raise(self, **kwargs):
    with self.assertRaises(TypeError):
      ddg.zcdp_epsilon(_event(**kwargs))

  def test_huge_values_do_not_overflow(self):
    e = _event(l2=1e200, sigma=1e-3 + 1e200, n=10**9, d=2**20)
    self.assertTrue(np.all(np.isfinite(ddg.rdp(e, [2.0, 64.0]))))
    self.assertTrue(
        np.all(np.isinf(ddg.rdp(_event(l2=1e300, sigma=1.0), [2.0]))))

  def test_replace_one_doubles_both_sensitivities(self):
    e = _event(l2=1000.0, sigma=100.0, n=100, d=1024)
    orders = np.array([2.0, 8.0])
    self.assertTrue(
        np.allclose(ddg.rdp(e, orders, 'replace_one'),
                    4 * ddg.rdp(e, orders),
                    rtol=1e-12))
    with self.assertRaisesRegex(ValueError, 'relation'):
      ddg.rdp(e, orders, 'add_remove')


class RdpTest(parameterized.TestCase):

  @parameterized.parameters('num_clients', 'dimension')
  def test_rejects_integers_beyond_float_range(self, field):
    # Found by review: 10**400 reached float() (OverflowError) instead of a
    # clear error naming the field.
    fields = dict(l2_sensitivity=1.0,
                  local_stddev=1.0,
                  num_clients=10,
                  dimension=10)
    fields[field] = 10**400
    with self.assertRaisesRegex(ValueError, field):
      ddg.rdp(events.DistributedDiscreteGaussianDpEvent(**fields),
              np.array([2.0]))

  def test_rdp_is_at_most_the_zcdp_curve(self):
    e = _event()
    orders = np.array(orders_lib.DEFAULT_ORDERS)
    zcdp_curve = orders * ddg.zcdp_epsilon(e)**2 / 2
    self.assertTrue(np.all(ddg.rdp(e, orders) <= zcdp_curve + 1e-12))

  def test_rdp_matches_gaussian_when_tau_vanishes(self):
    e = _event(l2=1000.0, sigma=100.0, n=100, d=1024)
    orders = np.array([1.5, 2.0, 8.0, 64.0])
    gaussian = orders * 1.0**2 / 2  # noise multiplier 1: alpha / 2
    self.assertTrue(np.allclose(ddg.rdp(e, orders), gaussian, rtol=1e-12))

  def test_epsilon_close_to_zcdp_conversion(self):
    # RDP at a grid of orders converts to slightly more than the exact
    # inf over alpha of the zCDP conversion (Lemma 4), never less.
    e = _event(l2=1000.0, sigma=100.0, n=100, d=1024)
    eps_rdp, _ = accountant.epsilon(e, 1e-5)
    eps_zcdp = conversions.zcdp_to_approx_dp(0.5, 1e-5)
    self.assertGreaterEqual(eps_rdp, eps_zcdp - 1e-9)
    self.assertLess(eps_rdp, eps_zcdp * 1.01)

  def test_monotone_in_clients_noise_and_dimension(self):
    # More clients help where tau is negligible (sigma >~ 1); at sigma ~ 1/2
    # each extra client adds to tau, so there is no such monotonicity.
    self.assertLess(ddg.zcdp_epsilon(_event(sigma=2.0, n=20, d=64)),
                    ddg.zcdp_epsilon(_event(sigma=2.0, n=10, d=64)))
    base = ddg.zcdp_epsilon(_event(sigma=0.6, n=10, d=64))
    self.assertLess(ddg.zcdp_epsilon(_event(sigma=0.8, n=10, d=64)), base)
    self.assertGreater(ddg.zcdp_epsilon(_event(sigma=0.6, n=10, d=256)), base)

  def test_event_round_trips_through_named_tuple(self):
    e = _event(l1=3.0)
    self.assertEqual(dp_accounting.DpEvent.from_named_tuple(e.to_named_tuple()),
                     e)
