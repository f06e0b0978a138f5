"""RdpAccountant: adversaries, sampling, composition, samplers, regressions."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np

from tff_ddp.accounting import accountant
from tff_ddp.accounting import conversions
from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import events
from tff_ddp.accounting import orders as orders_lib
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import subsampling

REL = dp_accounting.NeighboringRelation
INT_ORDERS = np.arange(2.0, 65.0)
ORDERS = np.asarray(orders_lib.DEFAULT_ORDERS)


def _ddg(local_stddev=3.0, l2=10.0, n=100, d=1000, tv=None):
  return events.DistributedDiscreteGaussianDpEvent(l2,
                                                   local_stddev,
                                                   n,
                                                   d,
                                                   sampler_tv_distance=tv)


def _pbm(theta=0.1, m=8, n=100, d=16):
  return events.PoissonBinomialDpEvent(theta, m, n, d)


def _acc(adversary='server', relation=REL.ADD_OR_REMOVE_ONE, orders=None):
  return accountant.RdpAccountant(orders, relation, adversary)


class DdgCurveTest(parameterized.TestCase):

  @parameterized.parameters(3.0, 10.0, 100.0)
  def test_large_local_noise_matches_continuous_gaussian(self, local):
    n, z = 100, 1.3
    l2 = np.sqrt(n) * local / z
    curve = ddg_rdp.rdp(_ddg(local, l2, n, 10**4), INT_ORDERS)
    np.testing.assert_allclose(curve, INT_ORDERS / (2 * z**2), rtol=1e-9)

  def test_epsilon_monotone(self):
    eps = lambda **kw: accountant.epsilon(_ddg(**kw), 1e-5)[0]
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
            q, dp_accounting.GaussianDpEvent(sigma)))._rdp  # pylint: disable=protected-access  # the accountant's RDP curve
    self.assertTrue(np.all(generic >= tight * (1 - 1e-9)))

  @parameterized.parameters(10, 1000)
  def test_generic_wor_bound_not_below_dp_accounting(self, size):
    sigma = 1.1
    generic = subsampling.without_replacement_rdp(lambda a: a / (2 * sigma**2),
                                                  size, 10000, INT_ORDERS)
    theirs = dp_accounting.rdp.RdpAccountant(
        INT_ORDERS, REL.REPLACE_ONE).compose(
            dp_accounting.SampledWithoutReplacementDpEvent(
                10000, size, dp_accounting.GaussianDpEvent(sigma)))._rdp  # pylint: disable=protected-access  # the accountant's RDP curve
    self.assertTrue(np.all(generic >= theirs * (1 - 1e-9)))

  def test_rate_one_equals_unsampled(self):
    fn = lambda a: _acc(orders=a).curve(_pbm())
    np.testing.assert_array_equal(subsampling.poisson_rdp(fn, 1.0, ORDERS),
                                  fn(ORDERS))
    np.testing.assert_array_equal(
        subsampling.without_replacement_rdp(fn, 7, 7, ORDERS), fn(ORDERS))
    np.testing.assert_array_equal(subsampling.known_sample_rdp(fn, 1.0, ORDERS),
                                  fn(ORDERS))

  def test_amplifies_and_capped_by_unsampled(self):
    fn = lambda a: ddg_rdp.rdp(_ddg(), a)
    sampled = subsampling.poisson_rdp(fn, 0.01, ORDERS)
    self.assertTrue(np.all(sampled <= fn(ORDERS)))
    self.assertLess(sampled[0], 0.1 * fn(ORDERS)[0])
    # Fractional orders lie between the integer neighbours' cumulants.
    self.assertTrue(np.all(np.diff(sampled * (ORDERS - 1)) >= -1e-15))

  def test_known_sample_formula_by_hand(self):
    # eps(alpha) = 2 at alpha = 3, q = 0.1:
    # (1/2) log(0.9 + 0.1 e^4) = (1/2) log(6.359815) = 0.924996.
    curve = subsampling.known_sample_rdp(lambda a: 2.0 * np.ones_like(a), 0.1,
                                         [3.0])
    self.assertAlmostEqual(curve[0],
                           0.5 * math.log(0.9 + 0.1 * math.e**4),
                           places=12)
    self.assertAlmostEqual(curve[0], 0.924996, places=5)
    # Never above the unsampled curve, 0 at q = 0, inf stays inf.
    self.assertTrue(
        np.all(
            subsampling.known_sample_rdp(lambda a: a, 0.3, ORDERS) <= ORDERS))
    self.assertTrue(
        np.all(
            subsampling.known_sample_rdp(lambda a: np.full_like(a, np.inf), 0.3,
                                         ORDERS) == np.inf))

  def test_known_sample_weaker_than_hidden_sample(self):
    fn = lambda a: ddg_rdp.rdp(_ddg(), a)
    known = subsampling.known_sample_rdp(fn, 0.01, INT_ORDERS)
    hidden = subsampling.poisson_rdp(fn, 0.01, INT_ORDERS)
    self.assertTrue(np.all(hidden <= known * (1 + 1e-12)))
    self.assertGreater(known[-1] / hidden[-1], 5.0)


class AdversaryTest(parameterized.TestCase):
  """What each sampling event buys against each adversary (module table)."""

  def test_default_is_the_server(self):
    self.assertEqual(accountant.RdpAccountant().adversary, 'server')
    self.assertIn('server', accountant.RdpAccountant().describe())
    with self.assertRaisesRegex(ValueError, 'adversary'):
      accountant.RdpAccountant(adversary='analyst')

  def test_the_adversary_is_resolved_once(self):
    # The name becomes an Adversary at the entry point (which still
    # compares equal to the name users pass), and the enum is accepted.
    for name, member in (('server', accountant.Adversary.SERVER),
                         ('release', accountant.Adversary.RELEASE)):
      self.assertIs(accountant.RdpAccountant(adversary=name).adversary, member)
      self.assertIs(accountant.as_adversary(member), member)
      self.assertEqual(member, name)
      self.assertEqual(f'{member}', name)
      event = dp_accounting.PoissonSampledDpEvent(0.01, _ddg())
      self.assertEqual(accountant.epsilon(event, 1e-5, name),
                       accountant.epsilon(event, 1e-5, member))
    self.assertEqual(accountant.ADVERSARIES, ('server', 'release'))
    with self.assertRaisesRegex(
        ValueError, r"adversary must be one of \('server', 'release'\)"):
      accountant.as_adversary('Server')

  def test_the_relation_is_resolved_once(self):
    # dp-accounting's relations map onto the curves' (zero-out for
    # add/remove and replace-special, distributed noise staying in the
    # sum); a curve is the same whichever spelling names its relation.
    rel = dp_accounting.NeighboringRelation
    for given, member in ((rel.ADD_OR_REMOVE_ONE, events.Relation.ZERO_OUT),
                          (rel.REPLACE_SPECIAL, events.Relation.ZERO_OUT),
                          (rel.REPLACE_ONE, events.Relation.REPLACE_ONE),
                          ('zero_out', events.Relation.ZERO_OUT),
                          ('replace_one', events.Relation.REPLACE_ONE)):
      self.assertIs(events.as_relation(given), member)
      np.testing.assert_array_equal(ddg_rdp.rdp(_ddg(), ORDERS, given),
                                    ddg_rdp.rdp(_ddg(), ORDERS, member.value))
    with self.assertRaisesRegex(ValueError, 'relation must be one of'):
      events.as_relation('add_remove')

  @parameterized.parameters('server', 'release')
  def test_poisson_over_distributed_noise_is_the_known_sample_mixture(
      self, adversary):
    event = dp_accounting.PoissonSampledDpEvent(0.01, _ddg())
    base = lambda a: ddg_rdp.rdp(_ddg(), a)
    np.testing.assert_allclose(
        _acc(adversary).curve(event),
        subsampling.known_sample_rdp(base, 0.01, ORDERS))

  def test_poisson_gaussian_is_tight_only_for_the_release(self):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            0.01,
            dp_accounting.ComposedDpEvent([
                dp_accounting.GaussianDpEvent(1.0),
                dp_accounting.GaussianDpEvent(2.0)
            ])), 100)
    theirs = dp_accounting.rdp.RdpAccountant(ORDERS).compose(event)
    release = _acc('release').compose(event)
    np.testing.assert_allclose(release.rdp, theirs._rdp, rtol=1e-12)  # pylint: disable=protected-access  # the accountant's RDP curve
    self.assertAlmostEqual(release.get_epsilon(1e-5),
                           theirs.get_epsilon(1e-5),
                           places=9)
    server = _acc('server').compose(event)
    self.assertGreater(server.get_epsilon(1e-5), 5 * release.get_epsilon(1e-5))

  def test_without_replacement(self):
    event = dp_accounting.SampledWithoutReplacementDpEvent(10000, 100, _ddg())
    for relation, name in ((REL.ADD_OR_REMOVE_ONE, 'zero_out'),
                           (REL.REPLACE_ONE, 'replace_one')):
      known = subsampling.known_sample_rdp(
          lambda a, name=name: ddg_rdp.rdp(_ddg(), a, name), 0.01, ORDERS)
      np.testing.assert_allclose(_acc('server', relation).curve(event), known)
      # The release: per order, the smaller of that and WBK19 on the
      # replace-one curve (which holds under either relation).
      replace_one = lambda a: ddg_rdp.rdp(_ddg(), a, 'replace_one')
      wbk = subsampling.without_replacement_rdp(replace_one, 100, 10000, ORDERS)
      np.testing.assert_allclose(
          _acc('release', relation).curve(event), np.minimum(wbk, known))
    # A Gaussian's replace-one sensitivity is twice its per-record bound:
    # dp-accounting's WBK19 Theorem 27 at noise multiplier z / 2.
    gaussian = dp_accounting.SampledWithoutReplacementDpEvent(
        1000, 10, dp_accounting.GaussianDpEvent(1.0))
    theirs = dp_accounting.rdp.RdpAccountant(ORDERS, REL.REPLACE_ONE).compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            1000, 10, dp_accounting.GaussianDpEvent(0.5)))._rdp  # pylint: disable=protected-access  # the accountant's RDP curve
    known = subsampling.known_sample_rdp(lambda a: 2.0 * a, 0.01, ORDERS)
    np.testing.assert_allclose(
        _acc('release', REL.REPLACE_ONE).curve(gaussian),
        np.minimum(theirs, known))

  @parameterized.parameters('server', 'release')
  def test_self_sampling_is_amplified_against_everyone(self, adversary):
    # Per order, the smaller of Zhu & Wang and the known-sample mixture
    # (both hold for every adversary).
    for inner, q in ((_ddg(), 0.01), (_pbm(0.05, 16, 1000, 64), 0.1)):
      event = events.SelfSampledDpEvent(q, inner)
      base = lambda a, inner=inner: _acc(orders=a).curve(inner)
      np.testing.assert_allclose(
          _acc(adversary).curve(event),
          np.minimum(subsampling.poisson_rdp(base, q, ORDERS),
                     subsampling.known_sample_rdp(base, q, ORDERS)))
    gaussian = events.SelfSampledDpEvent(0.01,
                                         dp_accounting.GaussianDpEvent(1.0))
    np.testing.assert_allclose(
        _acc(adversary).curve(gaussian),
        dp_accounting.rdp.RdpAccountant(ORDERS).compose(
            dp_accounting.PoissonSampledDpEvent(
                0.01, dp_accounting.GaussianDpEvent(1.0)))._rdp)  # pylint: disable=protected-access  # the accountant's RDP curve
    # Replace-one neighbours: both values move, so only the mixture bound.
    event = events.SelfSampledDpEvent(0.01, _ddg())
    replace = _acc(adversary, REL.REPLACE_ONE).curve(event)
    np.testing.assert_allclose(
        replace,
        subsampling.known_sample_rdp(
            lambda a: ddg_rdp.rdp(_ddg(), a, 'replace_one'), 0.01, ORDERS))

  def test_readme_example_numbers(self):
    # The sampling table of docs/accounting.md (once in the README):
    # tff-ddp privacy --mechanism ddg --l2-sensitivity 1000 --local-stddev
    # 200 --num-clients 100 --dimension 65536 --rounds 1000 --rate 0.01.
    # (docs_test.py runs the three commands and compares their output.)
    base = _ddg(200.0, 1000.0, 100, 2**16)
    eps = {}
    for name, event in (('poisson',
                         dp_accounting.PoissonSampledDpEvent(0.01, base)),
                        ('wor',
                         dp_accounting.SampledWithoutReplacementDpEvent(
                             10000, 100,
                             base)), ('self',
                                      events.SelfSampledDpEvent(0.01, base))):
      for adversary in accountant.ADVERSARIES:
        eps[name, adversary] = _acc(adversary).compose(event,
                                                       1000).get_epsilon(1e-6)
    self.assertEqual(eps['poisson', 'server'], eps['poisson', 'release'])
    self.assertEqual(eps['wor', 'server'], eps['poisson', 'server'])
    self.assertLess(eps['wor', 'release'], 0.5 * eps['wor', 'server'])
    self.assertEqual(eps['self', 'server'], eps['self', 'release'])
    self.assertLess(eps['self', 'server'], 0.2 * eps['poisson', 'server'])


class RdpAccountantTest(parameterized.TestCase):

  def test_unsampled_events_use_their_curves(self):
    acc = _acc()
    np.testing.assert_allclose(
        acc.compose(_ddg()).rdp, ddg_rdp.rdp(_ddg(), acc.orders))

  def test_composition_adds(self):
    a, b = _ddg(), _pbm()
    single = lambda e: _acc().compose(e).rdp
    composed = single(
        dp_accounting.ComposedDpEvent(
            [a, dp_accounting.SelfComposedDpEvent(b, 3)]))
    np.testing.assert_allclose(composed, single(a) + 3 * single(b))
    sampled = lambda e: dp_accounting.PoissonSampledDpEvent(0.1, e)
    acc = _acc()
    acc.compose(sampled(a), 5).compose(sampled(b))
    np.testing.assert_allclose(acc.rdp,
                               5 * single(sampled(a)) + single(sampled(b)))

  def test_mixed_subtree_under_sampling(self):
    mixed = events.SelfSampledDpEvent(
        0.05,
        dp_accounting.ComposedDpEvent(
            [_ddg(), dp_accounting.GaussianDpEvent(5.0)]))
    acc = _acc()
    self.assertTrue(acc.supports(mixed))
    self.assertGreater(acc.compose(mixed).get_epsilon(1e-5), 0.0)

  def test_replace_one_doubles_ddg_sensitivity(self):
    acc = _acc('server', REL.REPLACE_ONE).compose(_ddg())
    doubled = events.DistributedDiscreteGaussianDpEvent(
        20.0, 3.0, 100, 1000, l1_sensitivity=2 * min(np.sqrt(1000) * 10, 100))
    np.testing.assert_allclose(acc.rdp, ddg_rdp.rdp(doubled, acc.orders))

  def test_pbm_curve_follows_the_relation(self):
    event = events.PoissonBinomialDpEvent(0.1,
                                          4,
                                          50,
                                          3,
                                          replace_one_dimension=6)
    for rel, curve in ((REL.ADD_OR_REMOVE_ONE, 'zero_out'),
                       (REL.REPLACE_SPECIAL, 'zero_out'), (REL.REPLACE_ONE,
                                                           'replace_one')):
      acc = _acc('server', rel).compose(event)
      np.testing.assert_allclose(acc.rdp, pbm_rdp.rdp(event, acc.orders, curve))

  def test_supported_and_unsupported_events(self):
    acc = _acc()
    self.assertFalse(acc.supports(dp_accounting.LaplaceDpEvent(1.0)))
    self.assertFalse(
        acc.supports(
            dp_accounting.PoissonSampledDpEvent(
                0.1, dp_accounting.LaplaceDpEvent(1.0))))
    with self.assertRaisesRegex(dp_accounting.UnsupportedEventError, 'Laplace'):
      acc.compose(dp_accounting.LaplaceDpEvent(1.0))
    # Nested sampling: the server-side mixture of a mixture.
    nested = dp_accounting.PoissonSampledDpEvent(
        0.1, events.SelfSampledDpEvent(0.1, _ddg()))
    self.assertTrue(acc.supports(nested))
    inner = lambda a: _acc(orders=a).curve(
        events.SelfSampledDpEvent(0.1, _ddg()))
    np.testing.assert_allclose(acc.curve(nested),
                               subsampling.known_sample_rdp(inner, 0.1, ORDERS))
    self.assertTrue(
        acc.supports(
            dp_accounting.SampledWithoutReplacementDpEvent(100, 10, _pbm())))

  def test_tiny_rate_on_the_tight_gaussian_path(self):
    # dp-accounting's log-space sums return -3e-30 at q = 2^-50; the
    # conversion refused that curve (ValueError) before the adapter clipped
    # round-off at 0, the least a divergence can be.
    event = dp_accounting.PoissonSampledDpEvent(
        2.0**-50, dp_accounting.GaussianDpEvent(1.0))
    curve = _acc('release').curve(event)
    self.assertTrue(np.all(curve >= 0.0))
    self.assertLess(_acc('release').compose(event).get_epsilon(1e-6), 1e-6)

  def test_non_private_events(self):
    self.assertEqual(
        _acc().compose(dp_accounting.NonPrivateDpEvent()).get_epsilon(1e-5),
        math.inf)
    self.assertEqual(
        _acc().compose(dp_accounting.NoOpDpEvent()).get_epsilon(1e-5), 0.0)

  def test_many_identical_rounds_composed_one_by_one(self):
    event = dp_accounting.PoissonSampledDpEvent(0.01, _ddg())
    one_by_one = _acc().compose(dp_accounting.ComposedDpEvent([event] * 200))
    self_composed = _acc().compose(event, 200)
    np.testing.assert_allclose(one_by_one.rdp, self_composed.rdp)

  @parameterized.parameters(float('nan'), 0.0, 1.0, -1e-5, 'small', None)
  def test_bad_delta(self, delta):
    acc = _acc().compose(_ddg())
    with self.assertRaisesRegex((ValueError, TypeError), 'target_delta'):
      acc.get_epsilon(delta)

  @parameterized.parameters(([1.5, float('inf')],), ([0.5, 2.0],),
                            ([float('nan')],), ([],), ([2.0, 1e9],))
  def test_bad_orders(self, orders):
    with self.assertRaisesRegex(ValueError, 'orders'):
      accountant.RdpAccountant(orders)

  def test_a_remembered_grid_is_still_checked_and_copied(self):
    # check_orders remembers float grids that passed (a cPBM calibration
    # checks the same grid ~10^5 times): the same values in another form
    # are checked element by element, a refused grid is refused every
    # time, and a caller's change to the result is not remembered.
    grid = orders_lib.check_orders(orders_lib.DEFAULT_ORDERS)
    grid[0] = 0.5
    np.testing.assert_array_equal(
        orders_lib.check_orders(orders_lib.DEFAULT_ORDERS), ORDERS)
    np.testing.assert_array_equal(orders_lib.check_orders(ORDERS), ORDERS)
    np.testing.assert_array_equal(orders_lib.check_orders([2, 3.0]), [2.0, 3.0])
    for _ in range(2):
      with self.assertRaisesRegex(TypeError, 'orders'):
        orders_lib.check_orders([2.0, True])
      with self.assertRaisesRegex(ValueError, 'orders'):
        orders_lib.check_orders((2.0, 0.5))
      with self.assertRaisesRegex(ValueError, 'orders'):
        orders_lib.check_orders(np.array([2.0, np.nan]))

  def test_relation_type(self):
    with self.assertRaisesRegex(TypeError, 'neighboring_relation'):
      accountant.RdpAccountant(None, 'zero_out')


class SamplerDeltaTest(parameterized.TestCase):
  """The table sampler's TV distance enters delta as (1 + e^eps) N eta."""

  def test_mass_counts_every_sample(self):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.1,
                                            _ddg(n=100, d=1000, tv=2.0**-108)),
        50)
    acc = _acc().compose(event, 2)
    self.assertEqual(acc.sampler_tv_mass, 2 * 50 * 100 * 1000 * 2.0**-108)

  def test_epsilon_and_delta_include_the_term(self):
    eta = 2e-12  # exaggerated so that the term is visible
    exact = _acc().compose(_ddg())
    approx = _acc().compose(_ddg(tv=eta))
    mass = approx.sampler_tv_mass
    self.assertAlmostEqual(mass, 100 * 1000 * eta, delta=1e-20)
    eps = approx.get_epsilon(1e-5)
    self.assertGreater(eps, exact.get_epsilon(1e-5))
    # The returned eps is valid: the curve's delta at eps plus the term.
    self.assertLessEqual(
        exact.get_delta(eps) + (1 + math.exp(eps)) * mass, 1e-5 * (1 + 1e-9))
    self.assertAlmostEqual(approx.get_delta(eps),
                           exact.get_delta(eps) + (1 + math.exp(eps)) * mass)
    # Too much TV mass for the delta: no guarantee.
    self.assertEqual(_acc().compose(_ddg(tv=1e-3)).get_epsilon(1e-5), math.inf)

  def test_delta_never_grows_with_epsilon(self):
    # Once (1 + e^eps) eta dominates the curve's delta, the term alone would
    # make delta grow with eps; (eps0, delta) implies (eps, delta) for
    # eps >= eps0, so the answer is the least delta over eps0 <= eps.
    acc = _acc().compose(_ddg(tv=2.0**-108), 100)
    grid = np.linspace(0.0, 60.0, 241)
    deltas = [acc.get_delta(e) for e in grid]
    self.assertTrue(np.all(np.diff(deltas) <= 0.0), deltas)
    # Each value is attained: some eps0 <= eps has curve + term equal to it.
    exact = _acc().compose(_ddg(), 100)
    mass = acc.sampler_tv_mass
    for eps, delta in zip(grid[::40], deltas[::40]):
      best = min(
          exact.get_delta(e0) + (1 + math.exp(e0)) * mass
          for e0 in np.linspace(0.0, eps, 401))
      self.assertLessEqual(delta, best * (1 + 1e-6))
      self.assertGreaterEqual(delta, 0.5 * best)

  def test_real_table_bound_changes_nothing_visible(self):
    exact = _acc().compose(_ddg(30.0), 10).get_epsilon(1e-6)
    table = _acc().compose(_ddg(30.0, tv=2.0**-108), 10).get_epsilon(1e-6)
    self.assertLess(exact, 10.0)
    self.assertAlmostEqual(table, exact, places=9)
    self.assertGreaterEqual(table, exact)


class RegressionTest(parameterized.TestCase):
  """Pinned epsilons: any change to a curve or conversion shows here."""

  @parameterized.named_parameters(
      ('ddg', _ddg(200.0, 1000.0, 100, 2**16), 1, 'server', 2.16588),
      ('ddg_tau', _ddg(0.6, 10.0, 100, 1000), 1, 'server', 491.6271),
      ('pbm', _pbm(0.05, 16, 1000, 64), 1, 'server', 0.55606),
      ('gaussian', dp_accounting.GaussianDpEvent(1.0), 10, 'release', 19.0536),
      ('ddg_poisson_server',
       dp_accounting.PoissonSampledDpEvent(0.01, _ddg(
           200.0, 1000.0, 100, 2**16)), 1000, 'server', 11.50702),
      ('ddg_wor_release',
       dp_accounting.SampledWithoutReplacementDpEvent(
           10000, 100, _ddg(200.0, 1000.0, 100, 2**
                            16)), 1000, 'release', 4.02121),
      ('ddg_self',
       events.SelfSampledDpEvent(0.01, _ddg(200.0, 1000.0, 100, 2**
                                            16)), 1000, 'server', 1.05286),
      # 2.40374 before the known-sample mixture joined Zhu & Wang in the
      # per-order minimum (it is smaller at the high orders here).
      ('pbm_self', events.SelfSampledDpEvent(0.1, _pbm(
          0.05, 16, 1000, 64)), 100, 'server', 2.28917),
      ('gaussian_poisson_release',
       dp_accounting.PoissonSampledDpEvent(
           0.01, dp_accounting.GaussianDpEvent(1.0)), 1000, 'release', 2.43669),
  )
  def test_pinned(self, event, rounds, adversary, expected):
    eps = _acc(adversary).compose(
        event, rounds).get_epsilon(1e-6 if (rounds == 1000) else 1e-5)
    self.assertAlmostEqual(eps, expected, places=4)


class ConversionsTest(parameterized.TestCase):

  @parameterized.parameters(0.01, 0.5, 5.0)
  def test_zcdp_round_trips(self, rho):
    eps = conversions.zcdp_to_approx_dp(rho, 1e-6)
    self.assertAlmostEqual(conversions.zcdp_to_delta(rho, eps),
                           1e-6,
                           delta=1e-9)
    back = conversions.approx_dp_to_zcdp(eps, 1e-6)
    self.assertLessEqual(back, rho * (1 + 1e-9))
    self.assertAlmostEqual(back, rho, delta=1e-6 * rho)

  def test_epsilon_beyond_finite_rho_is_refused(self):
    # Found by the fuzz test: the doubling search for rho overflowed to inf
    # and brentq failed with "Failed to converge".
    with self.assertRaisesRegex(ValueError, 'target_epsilon=.*smaller'):
      conversions.approx_dp_to_zcdp(1.7976931348623157e308, 1e-5)
    self.assertGreater(conversions.approx_dp_to_zcdp(1e200, 1e-5), 1e199)

  def test_zcdp_matches_rdp_conversion_on_fine_grid(self):
    rho = 0.3
    orders = np.linspace(1.02, 200, 20000)
    eps_rdp, _ = conversions.rdp_to_epsilon(orders, rho * orders, 1e-5)
    self.assertAlmostEqual(conversions.zcdp_to_approx_dp(rho, 1e-5),
                           eps_rdp,
                           places=4)

  def test_bad_curves(self):
    with self.assertRaisesRegex(ValueError, 'rdp values'):
      conversions.rdp_to_epsilon([2.0], [float('nan')], 1e-5)
    with self.assertRaisesRegex(ValueError, 'rdp values'):
      conversions.rdp_to_epsilon([2.0], [-1.0], 1e-5)
    with self.assertRaisesRegex(ValueError, 'shape'):
      conversions.rdp_to_epsilon([2.0, 3.0], [1.0], 1e-5)
    self.assertEqual(
        conversions.rdp_to_epsilon([2.0], [np.inf], 1e-5)[0], math.inf)
