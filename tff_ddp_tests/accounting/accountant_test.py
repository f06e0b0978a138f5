"""Tests of RdpAccountant, generic subsampling and conversions."""

from absl.testing import parameterized
import dp_accounting
import numpy as np

from tff_ddp.accounting import accountant
from tff_ddp.accounting import conversions
from tff_ddp.accounting import ddg
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm
from tff_ddp.accounting import subsampling

REL = dp_accounting.NeighboringRelation
INT_ORDERS = np.arange(2.0, 65.0)


def _ddg(local_stddev=3.0, l2=10.0, n=100, d=1000):
  return events.DistributedDiscreteGaussianDpEvent(l2, local_stddev, n, d)


def _pbm(theta=0.1, m=8, n=100, d=16):
  return events.PoissonBinomialDpEvent(theta, m, n, d)


class DdgCurveTest(parameterized.TestCase):

  @parameterized.parameters(3.0, 10.0, 100.0)
  def test_large_local_noise_matches_continuous_gaussian(self, local):
    n, z = 100, 1.3
    l2 = np.sqrt(n) * local / z
    curve = ddg.rdp(_ddg(local, l2, n, 10**4), INT_ORDERS)
    np.testing.assert_allclose(curve, INT_ORDERS / (2 * z**2), rtol=1e-9)

  def test_epsilon_monotone(self):
    eps = lambda **kw: ddg.epsilon(_ddg(**kw), 1e-5)[0]
    self.assertLess(eps(n=1000), eps(n=100))
    self.assertLess(eps(local_stddev=4.0), eps(local_stddev=3.0))
    # tau matters at small local noise: more dimensions cost more.
    self.assertGreater(eps(local_stddev=0.6, d=10**5),
                       eps(local_stddev=0.6, d=10))


class SubsamplingTest(parameterized.TestCase):

  @parameterized.parameters(0.001, 0.01, 0.1, 0.5)
  def test_generic_poisson_bound_not_below_tight_gaussian(self, q):
    sigma = 1.1
    generic = subsampling.poisson_rdp(lambda a: a / (2 * sigma**2), q,
                                      INT_ORDERS)
    tight = dp_accounting.rdp.RdpAccountant(INT_ORDERS).compose(
        dp_accounting.PoissonSampledDpEvent(
            q, dp_accounting.GaussianDpEvent(sigma))).rdp
    self.assertTrue(np.all(generic >= tight * (1 - 1e-9)))

  @parameterized.parameters(10, 1000)
  def test_generic_wor_bound_not_below_dp_accounting(self, size):
    sigma = 1.1
    generic = subsampling.without_replacement_rdp(
        lambda a: a / (2 * sigma**2), size, 10000, INT_ORDERS)
    theirs = dp_accounting.rdp.RdpAccountant(
        INT_ORDERS, REL.REPLACE_ONE).compose(
            dp_accounting.SampledWithoutReplacementDpEvent(
                10000, size, dp_accounting.GaussianDpEvent(sigma))).rdp
    self.assertTrue(np.all(generic >= theirs * (1 - 1e-9)))

  def test_rate_one_equals_unsampled(self):
    orders = ddg.DEFAULT_ORDERS
    fn = lambda a: accountant.event_rdp(_pbm(), a)
    np.testing.assert_array_equal(
        subsampling.poisson_rdp(fn, 1.0, orders), fn(np.asarray(orders)))
    np.testing.assert_array_equal(
        subsampling.without_replacement_rdp(fn, 7, 7, orders),
        fn(np.asarray(orders)))

  def test_amplifies_and_capped_by_unsampled(self):
    orders = np.asarray(ddg.DEFAULT_ORDERS)
    fn = lambda a: ddg.rdp(_ddg(), a)
    sampled = subsampling.poisson_rdp(fn, 0.01, orders)
    self.assertTrue(np.all(sampled <= fn(orders)))
    self.assertLess(sampled[0], 0.1 * fn(orders)[0])
    # Fractional orders lie between the integer neighbours' cumulants.
    self.assertTrue(np.all(np.diff(sampled * (orders - 1)) >= -1e-15))


class RdpAccountantTest(parameterized.TestCase):

  def test_sampled_gaussian_stays_on_tight_path(self):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            0.01, dp_accounting.ComposedDpEvent([
                dp_accounting.GaussianDpEvent(1.0),
                dp_accounting.GaussianDpEvent(2.0)])), 100)
    ours = accountant.RdpAccountant().compose(event)
    theirs = dp_accounting.rdp.RdpAccountant().compose(event)
    np.testing.assert_array_equal(ours.rdp, theirs.rdp)
    self.assertEqual(ours.get_epsilon(1e-5), theirs.get_epsilon(1e-5))

  def test_wor_gaussian_stays_on_tight_path(self):
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        1000, 10, dp_accounting.GaussianDpEvent(1.0))
    ours = accountant.RdpAccountant(None, REL.REPLACE_ONE).compose(event)
    theirs = dp_accounting.rdp.RdpAccountant(None, REL.REPLACE_ONE).compose(
        event)
    np.testing.assert_array_equal(ours.rdp, theirs.rdp)

  def test_unsampled_events_use_their_curves(self):
    acc = accountant.RdpAccountant()
    np.testing.assert_allclose(acc.compose(_ddg()).rdp,
                               ddg.rdp(_ddg(), acc.orders))

  def test_composition_adds(self):
    a, b = _ddg(), _pbm()
    single = lambda e: accountant.RdpAccountant().compose(e).rdp
    composed = single(dp_accounting.ComposedDpEvent(
        [a, dp_accounting.SelfComposedDpEvent(b, 3)]))
    np.testing.assert_allclose(composed, single(a) + 3 * single(b))
    sampled = lambda e: dp_accounting.PoissonSampledDpEvent(0.1, e)
    acc = accountant.RdpAccountant()
    acc.compose(sampled(a), 5).compose(sampled(b))
    np.testing.assert_allclose(
        acc.rdp, 5 * single(sampled(a)) + single(sampled(b)))

  def test_mixed_subtree_under_sampling(self):
    mixed = dp_accounting.PoissonSampledDpEvent(
        0.05, dp_accounting.ComposedDpEvent(
            [_ddg(), dp_accounting.GaussianDpEvent(5.0)]))
    acc = accountant.RdpAccountant()
    self.assertTrue(acc.supports(mixed))
    eps = acc.compose(mixed).get_epsilon(1e-5)
    self.assertGreater(eps, 0.0)

  def test_replace_one_doubles_ddg_sensitivity(self):
    acc = accountant.RdpAccountant(None, REL.REPLACE_ONE).compose(_ddg())
    doubled = events.DistributedDiscreteGaussianDpEvent(
        20.0, 3.0, 100, 1000, l1_sensitivity=2 * min(np.sqrt(1000) * 10, 100))
    np.testing.assert_allclose(acc.rdp, ddg.rdp(doubled, acc.orders))

  def test_pbm_curve_follows_the_relation(self):
    event = events.PoissonBinomialDpEvent(0.1, 4, 50, 3,
                                          replace_one_dimension=6)
    for rel, curve in ((REL.ADD_OR_REMOVE_ONE, 'zero_out'),
                       (REL.REPLACE_SPECIAL, 'zero_out'),
                       (REL.REPLACE_ONE, 'replace_one')):
      acc = accountant.RdpAccountant(None, rel).compose(event)
      np.testing.assert_allclose(acc.rdp, pbm.rdp(event, acc.orders, curve))

  def test_unsupported_events(self):
    acc = accountant.RdpAccountant()
    self.assertFalse(acc.supports(dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.LaplaceDpEvent(1.0))))
    self.assertFalse(acc.supports(dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.PoissonSampledDpEvent(0.1, _ddg()))))
    # Relations as in the base class.
    self.assertFalse(acc.supports(
        dp_accounting.SampledWithoutReplacementDpEvent(100, 10, _pbm())))
    self.assertFalse(accountant.RdpAccountant(None, REL.REPLACE_ONE).supports(
        dp_accounting.PoissonSampledDpEvent(0.1, _pbm())))
    self.assertTrue(acc.supports(dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.SelfComposedDpEvent(_pbm(), 2))))

  def test_many_identical_rounds_composed_one_by_one(self):
    event = dp_accounting.PoissonSampledDpEvent(0.01, _ddg())
    one_by_one = accountant.RdpAccountant().compose(
        dp_accounting.ComposedDpEvent([event] * 200))
    self_composed = accountant.RdpAccountant().compose(event, 200)
    np.testing.assert_allclose(one_by_one.rdp, self_composed.rdp)


class ConversionsTest(parameterized.TestCase):

  @parameterized.parameters(0.01, 0.5, 5.0)
  def test_zcdp_round_trips(self, rho):
    eps = conversions.zcdp_to_approx_dp(rho, 1e-6)
    self.assertAlmostEqual(conversions.zcdp_to_delta(rho, eps), 1e-6,
                           delta=1e-9)
    back = conversions.approx_dp_to_zcdp(eps, 1e-6)
    self.assertLessEqual(back, rho * (1 + 1e-9))
    self.assertAlmostEqual(back, rho, delta=1e-6 * rho)

  def test_zcdp_matches_rdp_conversion_on_fine_grid(self):
    rho = 0.3
    orders = np.linspace(1.02, 200, 20000)
    eps_rdp, _ = conversions.rdp_to_epsilon(orders, rho * orders, 1e-5)
    self.assertAlmostEqual(conversions.zcdp_to_approx_dp(rho, 1e-5), eps_rdp,
                           places=4)

  def test_ddg_reexports_conversion(self):
    self.assertIs(ddg.zcdp_to_approx_dp, conversions.zcdp_to_approx_dp)
