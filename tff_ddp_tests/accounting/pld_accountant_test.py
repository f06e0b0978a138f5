"""The PLD accountant against exact delta(eps) of enumerated small cases.

Every output law here is built from the mechanism's definition (each
client's noise or Bernoullis, convolved; every admissible input of the
target and, for cPBM, of the other clients on a grid), independently of
`pld_mechanisms`, and its hockey-stick divergence delta(eps) =
sum (P - e^eps Q)_+ is computed exactly, both directions. The accountant's
delta must never be below the worst of them. The same check is run against
two broken accountants -- an optimistic discretization, and one direction
dropped -- and must catch both: the checks can fail.
"""

import itertools
import math
from unittest import mock

from absl.testing import parameterized
import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib
import numpy as np
from scipy import special
from scipy import stats

from tff_ddp.accounting import accountant
from tff_ddp.accounting import events
from tff_ddp.accounting import pld_accountant
from tff_ddp.accounting import pld_curves

REL = dp_accounting.NeighboringRelation
EPSILONS = np.array([-1.0, -0.3, 0.0, 0.1, 0.3, 0.6, 1.0, 1.5, 2.5])
# Float slack of the comparisons: the accountant adds 1e-15 per release
# and dp-accounting's FFT composition errs by ~1e-16 per entry.
SLACK = 1e-12


def exact_delta(p, q, eps):
  """max over directions of sum (P - e^eps Q)_+ (P, Q as arrays)."""
  p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
  g = np.exp(np.asarray(eps, np.float64))[:, None]
  return np.maximum(
      np.maximum(p - g * q, 0).sum(1),
      np.maximum(q - g * p, 0).sum(1))


def dg_pmf(sigma, width=60):
  x = np.arange(-width, width + 1)
  w = np.exp(-x * x / (2 * sigma * sigma))
  return w / w.sum()


def noise_sum(pmf, n):
  out = np.array([1.0])
  for _ in range(n):
    out = np.convolve(out, pmf)
  return out


def shifted(pmf, shift, pad):
  """pmf moved right by `shift` inside zeros of `pad` on both sides."""
  out = np.zeros(pmf.size + 2 * pad)
  out[pad + shift:pad + shift + pmf.size] = pmf
  return out


def product_law(pmf, x, pad):
  """The law of independent coordinates, coordinate i `pmf` shifted by
  x[i] (`shifted`), flattened."""
  out = np.ones(1)
  for v in x:
    out = np.outer(out, shifted(pmf, v, pad)).ravel()
  return out


def ddg_worst(sigma, n, v_max, eps):
  """Worst delta over integer inputs |x| <= v_max of zero-out pairs."""
  law = noise_sum(dg_pmf(sigma), n)
  worst = np.zeros(eps.shape)
  for x in range(-v_max, v_max + 1):
    worst = np.maximum(
        worst, exact_delta(shifted(law, x, v_max), shifted(law, 0, v_max), eps))
  return worst


def cpbm_law(probs, m):
  out = np.array([1.0])
  for p in probs:
    out = np.convolve(out, stats.binom.pmf(np.arange(m + 1), m, p))
  return out


def cpbm_worst(theta, n, m, eps, replace_one=False, grid=5):
  """Worst delta over the target's and the others' inputs on a grid."""
  values = 0.5 + theta * np.linspace(-1, 1, grid)
  worst = np.zeros(eps.shape)
  for others in itertools.combinations_with_replacement(values, n - 1):
    rest = cpbm_law(others, m)
    for a in values:
      for b in (values if replace_one else [0.5]):
        worst = np.maximum(
            worst,
            exact_delta(np.convolve(rest, cpbm_law([a], m)),
                        np.convolve(rest, cpbm_law([b], m)), eps))
  return worst


def pld_delta(acc, eps):
  return np.array([
      acc.pld_delta(max(e, 0.0)) if e >= 0 else acc._state.delta(e) for e in eps
  ])  # pylint: disable=protected-access  # tests a private part


class BrokenAccountant(pld_accountant.PldAccountant):
  """Mutations the checks must catch."""

  def __init__(self, mutation, **kwargs):
    super().__init__(**kwargs)
    self._mutation = mutation

  def _compute(self, event):
    state = super()._compute(event)
    if self._mutation == 'remove_only':
      return pld_accountant._State(state.remove, state.remove, True)  # pylint: disable=protected-access  # tests a private part
    return state


def optimistic_pld(p, q, interval):
  """dp-accounting's PLD of (P || Q) rounded down (optimistic); the laws
  here are shifts of a symmetric law, so one direction is both."""
  logp = {i: math.log(v) for i, v in enumerate(p) if v > 0}
  logq = {i: math.log(v) for i, v in enumerate(q) if v > 0}
  return pld_lib.from_two_probability_mass_functions(
      logq,
      logp,
      pessimistic_estimate=False,
      value_discretization_interval=interval)


class ExactTest(parameterized.TestCase):

  # pylint: disable-next=invalid-name  # named as unittest's assertions
  def assertAbove(self, ours, exact, what):
    gap = ours - exact
    self.assertTrue(np.all(gap >= -SLACK),
                    f'{what}: ours {ours} below exact {exact}')

  @parameterized.parameters((1.0, 3, 1), (0.5, 4, 2), (2.0, 2, 3), (0.7, 1, 1))
  def test_ddg_sum_never_below_exact(self, sigma, n, shift):
    acc = pld_accountant.PldAccountant(use_rdp=False)
    acc.compose(events.DistributedDiscreteGaussianDpEvent(shift, sigma, n, 1))
    self.assertAbove(pld_delta(acc, EPSILONS),
                     ddg_worst(sigma, n, shift, EPSILONS), 'ddg')

  def test_ddg_close_to_exact(self):
    # The truth is the shift-V pair; ours is it, pessimistically rounded
    # at 1e-3 (each loss up by at most 1e-3): within 0.5% of epsilon.
    acc = pld_accountant.PldAccountant(use_rdp=False)
    acc.compose(events.DistributedDiscreteGaussianDpEvent(3, 1.0, 4, 1))
    law = noise_sum(dg_pmf(1.0), 4)
    p, q = shifted(law, 3, 3), shifted(law, 0, 3)
    lo, hi = 0.0, 10.0
    for _ in range(60):
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if exact_delta(p, q, [mid])[0] > 1e-6 else (lo, mid)
    ours = acc.get_epsilon(1e-6)
    self.assertBetween(ours, hi, hi * 1.005)

  def test_ddg_two_coordinates(self):
    # l2 = 1.5, l1 = 2: inputs (0, +-1), (+-1, 0), (+-1, +-1); the
    # accountant composes two coordinates shifted by 1.
    sigma, n = 0.8, 2
    acc = pld_accountant.PldAccountant(use_rdp=False)
    acc.compose(
        events.DistributedDiscreteGaussianDpEvent(1.5,
                                                  sigma,
                                                  n,
                                                  2,
                                                  l1_sensitivity=2.0))
    law = noise_sum(dg_pmf(sigma), n)
    worst = np.zeros(EPSILONS.shape)
    for x1, x2 in itertools.product((-1, 0, 1), repeat=2):
      p = np.outer(shifted(law, x1, 1), shifted(law, x2, 1)).ravel()
      q = np.outer(shifted(law, 0, 1), shifted(law, 0, 1)).ravel()
      worst = np.maximum(worst, exact_delta(p, q, EPSILONS))
    self.assertAbove(pld_delta(acc, EPSILONS), worst, 'ddg 2-d')

  def test_ddg_l0_clip(self):
    # l0 = 1 in 3 coordinates, l2 = 2: a client's vector is one-hot with a
    # value in [-2, 2]; every such vector against zero (zero-out). The
    # accountant composes one coordinate: the one-coordinate event's PLD.
    sigma, n, d = 0.8, 2, 3
    acc = pld_accountant.PldAccountant(use_rdp=False)
    acc.compose(
        events.DistributedDiscreteGaussianDpEvent(2.0,
                                                  sigma,
                                                  n,
                                                  d,
                                                  l0_sensitivity=1))
    law = noise_sum(dg_pmf(sigma, width=10), n)

    def joint(x):
      return product_law(law, x, 4)

    zero = joint(np.zeros(d, int))
    worst = np.zeros(EPSILONS.shape)
    for i, v in itertools.product(range(d), (-2, -1, 1, 2)):
      worst = np.maximum(
          worst, exact_delta(joint(np.eye(d, dtype=int)[i] * v), zero,
                             EPSILONS))
    self.assertAbove(pld_delta(acc, EPSILONS), worst, 'ddg l0')
    single = pld_accountant.PldAccountant(use_rdp=False)
    single.compose(events.DistributedDiscreteGaussianDpEvent(2.0, sigma, n, 1))
    self.assertEqual(acc.get_epsilon(1e-6), single.get_epsilon(1e-6))
    # Without the l0 bound the same release is charged more.
    loose = pld_accountant.PldAccountant(use_rdp=False)
    loose.compose(events.DistributedDiscreteGaussianDpEvent(2.0, sigma, n, d))
    self.assertGreater(loose.get_epsilon(1e-6), acc.get_epsilon(1e-6))

  def test_ddg_linf_bound(self):
    # l_inf 1, l2 2 in 3 coordinates: a client's vector is in {-1, 0, 1}^3
    # (every such vector has l2 <= sqrt(3) <= 2); each against zero
    # (zero-out). The accountant composes three coordinates shifted by 1,
    # where l2 alone would shift each by 2.
    sigma, n, d = 0.8, 2, 3
    acc = pld_accountant.PldAccountant(use_rdp=False)
    acc.compose(
        events.DistributedDiscreteGaussianDpEvent(2.0,
                                                  sigma,
                                                  n,
                                                  d,
                                                  linf_sensitivity=1))
    law = noise_sum(dg_pmf(sigma, width=10), n)

    def joint(x):
      return product_law(law, x, 1)

    zero = joint(np.zeros(d, int))
    worst = np.zeros(EPSILONS.shape)
    for x in itertools.product((-1, 0, 1), repeat=d):
      worst = np.maximum(worst, exact_delta(joint(x), zero, EPSILONS))
    self.assertAbove(pld_delta(acc, EPSILONS), worst, 'ddg linf')
    # The same as three one-coordinate releases of shift 1.
    single = pld_accountant.PldAccountant(use_rdp=False)
    for _ in range(d):
      single.compose(events.DistributedDiscreteGaussianDpEvent(
          1.0, sigma, n, 1))
    self.assertAlmostEqual(acc.get_epsilon(1e-6),
                           single.get_epsilon(1e-6),
                           delta=1e-9)
    # Without the l_inf bound the coordinate-wise PLD has no case (shift 2
    # in 3 coordinates) and the tightest bound is RDP's, larger.
    loose = pld_accountant.tightest()
    loose.compose(events.DistributedDiscreteGaussianDpEvent(2.0, sigma, n, d))
    self.assertGreater(loose.get_epsilon(1e-6), acc.get_epsilon(1e-6))

  @parameterized.parameters((2.0, 1), (6.0, 2), (0.8, 1))
  def test_skellam_never_below_exact(self, variance, shift):
    acc = pld_accountant.PldAccountant(use_rdp=False)
    acc.compose(events.DistributedSkellamDpEvent(shift, variance / 3, 3, 1))
    x = np.arange(-80, 81)
    law = special.ive(np.abs(x), variance)
    worst = np.maximum(
        exact_delta(shifted(law, shift, shift), shifted(law, 0, shift),
                    EPSILONS), 0)
    self.assertAbove(pld_delta(acc, EPSILONS), worst, 'skellam')

  @parameterized.parameters((0.25, 3, 2, False), (0.1, 3, 3, False),
                            (0.25, 3, 2, True), (0.2, 4, 1, False))
  def test_cpbm_never_below_exact(self, theta, n, m, replace_one):
    relation = REL.REPLACE_ONE if replace_one else REL.ADD_OR_REMOVE_ONE
    acc = pld_accountant.PldAccountant(relation, use_rdp=False)
    acc.compose(events.PoissonBinomialDpEvent(theta, m, n, 1))
    self.assertAbove(pld_delta(acc, EPSILONS),
                     cpbm_worst(theta, n, m, EPSILONS, replace_one), 'cpbm')

  def test_cpbm_beats_lemma_2_rdp(self):
    # The same release: the PLD is below RDP (Lemma 2) by > 1.5x here.
    acc = pld_accountant.PldAccountant()
    acc.compose(events.PoissonBinomialDpEvent(0.25, 16, 100, 1))
    self.assertLess(
        acc.pld_epsilon(1e-6) * 1.5, acc.rdp_accountant.get_epsilon(1e-6))
    self.assertEqual(acc.bound_used(1e-6), pld_accountant.PLD)

  def _self_sampled_exact(self, q, rounds):
    # Shares cut at 12 sigma (mass beyond: e^-72, far below SLACK's scale
    # of what the comparison resolves), so the 3-round product is small.
    law = noise_sum(dg_pmf(1.0, width=12), 2)
    p1 = (1 - q) * shifted(law, 0, 1) + q * shifted(law, 1, 1)
    q1 = shifted(law, 0, 1)
    p, qq = p1, q1
    for _ in range(rounds - 1):
      p, qq = np.outer(p, p1).ravel(), np.outer(qq, q1).ravel()
    return exact_delta(p, qq, EPSILONS)

  @parameterized.parameters('server', 'release')
  def test_self_sampled_composed_never_below_exact(self, adversary):
    acc = pld_accountant.PldAccountant(adversary=adversary, use_rdp=False)
    acc.compose(
        events.SelfSampledDpEvent(
            0.3, events.DistributedDiscreteGaussianDpEvent(1, 1.0, 2, 1)), 3)
    self.assertAbove(pld_delta(acc, EPSILONS), self._self_sampled_exact(0.3, 3),
                     'self-sampled')

  def test_known_sample_is_exact_mixture(self):
    # Poisson cohorts the server sees: the view is (sampled?, output).
    q = 0.4
    law = noise_sum(dg_pmf(1.0), 2)
    rest = shifted(law, 0, 1)
    p = np.concatenate([(1 - q) * rest, q * shifted(law, 1, 1)])
    qq = np.concatenate([(1 - q) * rest, q * rest])
    for sampling in (
        lambda e: dp_accounting.PoissonSampledDpEvent(q, e),
        lambda e: dp_accounting.SampledWithoutReplacementDpEvent(5, 2, e)):
      acc = pld_accountant.PldAccountant(use_rdp=False)
      acc.compose(
          sampling(events.DistributedDiscreteGaussianDpEvent(1, 1.0, 2, 1)))
      self.assertAbove(pld_delta(acc, EPSILONS), exact_delta(p, qq, EPSILONS),
                       'known sample')

  def test_release_poisson_gaussian_matches_dp_accounting(self):
    acc = pld_accountant.PldAccountant(adversary='release', use_rdp=False)
    acc.compose(
        dp_accounting.PoissonSampledDpEvent(0.05,
                                            dp_accounting.GaussianDpEvent(1.2)),
        50)
    theirs = pld_lib.from_gaussian_mechanism(
        1.2, sampling_prob=0.05,
        value_discretization_interval=1e-3).self_compose(
            50).get_epsilon_for_delta(1e-6)
    self.assertAlmostEqual(acc.get_epsilon(1e-6), theirs, delta=1e-6)


class ChecksCanFailTest(parameterized.TestCase):
  """The comparisons above catch an optimistic or one-sided PLD."""

  def test_dropping_a_direction_is_caught(self):
    # cPBM replace-one is asymmetric: the 'add' direction is larger here.
    theta, n, m = 0.25, 3, 2
    exact = cpbm_worst(theta, n, m, EPSILONS)
    broken = BrokenAccountant('remove_only', use_rdp=False)
    broken.compose(events.PoissonBinomialDpEvent(theta, m, n, 1))
    self.assertTrue(np.any(pld_delta(broken, EPSILONS) < exact - 1e-6))

  def test_optimistic_discretization_is_caught(self):
    law = noise_sum(dg_pmf(1.0), 3)
    p, q = shifted(law, 1, 1), shifted(law, 0, 1)
    pld = optimistic_pld(p, q, 0.05)
    ours = np.array([pld.get_delta_for_epsilon(e) for e in EPSILONS[3:]])
    self.assertTrue(np.any(ours < exact_delta(p, q, EPSILONS[3:]) - 1e-6))


def _events():
  """One of every event kind the accountants share."""
  ddg = events.DistributedDiscreteGaussianDpEvent(2, 1.0, 20, 1)
  sk = events.DistributedSkellamDpEvent(2, 2.0, 20, 1)
  pbm = events.PoissonBinomialDpEvent(0.2, 8, 50, 2)
  gauss = dp_accounting.GaussianDpEvent(1.5)
  return {
      'gaussian':
          gauss,
      'ddg':
          ddg,
      'skellam':
          sk,
      'cpbm':
          pbm,
      'composed':
          dp_accounting.ComposedDpEvent([ddg, pbm, gauss]),
      'self_composed':
          dp_accounting.SelfComposedDpEvent(ddg, 5),
      'poisson':
          dp_accounting.SelfComposedDpEvent(
              dp_accounting.PoissonSampledDpEvent(0.1, ddg), 20),
      'poisson_gaussian':
          dp_accounting.SelfComposedDpEvent(
              dp_accounting.PoissonSampledDpEvent(0.1, gauss), 20),
      'without_replacement':
          dp_accounting.SelfComposedDpEvent(
              dp_accounting.SampledWithoutReplacementDpEvent(100, 10, sk), 20),
      'self_sampled':
          dp_accounting.SelfComposedDpEvent(events.SelfSampledDpEvent(0.1, pbm),
                                            20),
      'ddg_multi':
          events.DistributedDiscreteGaussianDpEvent(30, 5.0, 20, 1000),
  }


class AgainstRdpTest(parameterized.TestCase):

  @parameterized.product(kind=sorted(_events()),
                         adversary=('server', 'release'),
                         relation=(REL.ADD_OR_REMOVE_ONE, REL.REPLACE_ONE))
  def test_never_above_rdp(self, kind, adversary, relation):
    event = _events()[kind]
    acc = pld_accountant.PldAccountant(relation, adversary)
    acc.compose(event)
    rdp = accountant.RdpAccountant(neighboring_relation=relation,
                                   adversary=adversary).compose(event)
    eps, bound = acc.get_epsilon_and_bound(1e-6)
    self.assertLessEqual(eps, rdp.get_epsilon(1e-6))
    self.assertIn(bound, (pld_accountant.PLD, pld_accountant.RDP))
    # Where RDP has a bound the PLD lacks, RDP may win: the coordinate-wise
    # PLD of a multi-dimensional DDG, WBK19 for cohorts against the release.
    rdp_only = kind == 'ddg_multi' or (kind == 'without_replacement' and
                                       adversary == 'release')
    if not rdp_only:
      self.assertLessEqual(acc.pld_epsilon(1e-6), rdp.get_epsilon(1e-6))

  def test_describe_names_the_bound(self):
    acc = pld_accountant.PldAccountant(adversary='release')
    acc.compose(events.DistributedDiscreteGaussianDpEvent(1, 1.0, 20, 1))
    self.assertIn('privacy loss distribution', acc.describe(1e-6))
    self.assertIn('against the release', acc.describe(1e-6))
    eps, bound = pld_accountant.tightest_epsilon(
        events.DistributedDiscreteGaussianDpEvent(1, 1.0, 20, 1), 1e-6)
    self.assertEqual(bound, pld_accountant.PLD)
    self.assertAlmostEqual(eps, acc.get_epsilon(1e-6))

  def test_non_private_is_infinite(self):
    acc = pld_accountant.PldAccountant()
    acc.compose(dp_accounting.NonPrivateDpEvent())
    self.assertEqual(acc.get_epsilon(1e-6), math.inf)

  def test_interval_costs_little(self):
    event = dp_accounting.SelfComposedDpEvent(
        events.SelfSampledDpEvent(
            0.05, events.DistributedDiscreteGaussianDpEvent(1, 1.0, 16, 1)),
        200)
    fine = pld_accountant.PldAccountant(
        value_discretization_interval=1e-4).compose(event).get_epsilon(1e-6)
    coarse = pld_accountant.PldAccountant().compose(event).get_epsilon(1e-6)
    self.assertBetween(coarse, fine, fine * 1.003)

  def test_cached_plds_give_the_same_epsilon(self):
    # PLDs are shared across accountants of one relation, adversary and
    # grid (pld_accountant._STATES); a second accountant reads them.
    event = dp_accounting.SelfComposedDpEvent(
        events.SelfSampledDpEvent(
            0.05, events.DistributedDiscreteGaussianDpEvent(1, 1.0, 16, 1)),
        200)
    cache = pld_accountant._STATES  # pylint: disable=protected-access  # tests a private part
    results = {}
    for adversary in accountant.ADVERSARIES:
      for relation in (REL.ADD_OR_REMOVE_ONE, REL.REPLACE_ONE):
        cache.clear()
        fresh = pld_accountant.PldAccountant(
            relation, adversary).compose(event).get_epsilon(1e-6)
        results[adversary, relation] = fresh
    for (adversary, relation), fresh in results.items():
      cached = pld_accountant.PldAccountant(
          relation, adversary).compose(event).get_epsilon(1e-6)
      self.assertEqual(cached, fresh, (adversary, relation))
    self.assertNotEqual(results['server', REL.ADD_OR_REMOVE_ONE],
                        results['server', REL.REPLACE_ONE])

  def test_coarse_grid_is_an_upper_bound(self):
    # What calibrate's first search uses: a 10x coarser grid, pessimistic
    # too, so never below the fine one's epsilon, and close to it.
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.02,
                                            dp_accounting.GaussianDpEvent(1.0)),
        300)
    fine = pld_accountant.PldAccountant(adversary='release', use_rdp=False)
    coarse = fine.pld_only(10.0)
    self.assertEqual(coarse.value_discretization_interval, 1e-2)
    e_fine = fine.compose(event).get_epsilon(1e-6)
    e_coarse = coarse.compose(event).get_epsilon(1e-6)
    self.assertBetween(e_coarse, e_fine, e_fine * 1.02)


class ConvexMinorantTest(parameterized.TestCase):

  @parameterized.parameters(0, 1, 2)
  def test_lower_convex_hull(self, seed):
    # Vertices: convex (slopes increase), every point on or above the
    # interpolation of the vertices, both ends kept; against a brute-force
    # check of every point's position.
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, 300))
    y = np.exp(-x) + rng.uniform(0, 0.05, 300)
    y[100:140] = y[100]  # a plateau, then collinear points
    idx = pld_curves.convex_minorant(x, y)
    self.assertEqual((idx[0], idx[-1]), (0, x.size - 1))
    slopes = np.diff(y[idx]) / np.diff(x[idx])
    self.assertTrue(np.all(np.diff(slopes) > 0))
    interpolated = np.interp(x, x[idx], y[idx])
    self.assertTrue(np.all(interpolated <= y + 1e-12))

  @parameterized.parameters(0, 1, 2)
  def test_passes_equal_one_pass_chain(self, seed):
    # The vectorized passes, and the fallback after one pass, against the
    # one-pass monotone chain on the whole input: the same vertices.
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, 2000))
    y = np.exp(-x) + rng.uniform(0, 0.05 * seed, 2000)
    chain = pld_curves._monotone_chain(x.tolist(), y.tolist())
    np.testing.assert_array_equal(pld_curves.convex_minorant(x, y), chain)
    with mock.patch.object(pld_curves, '_HULL_PASSES', 1):
      np.testing.assert_array_equal(pld_curves.convex_minorant(x, y), chain)


class ComposeRoundsTest(parameterized.TestCase):
  """A run's round events, each distinct event composed once with its
  count: the epsilon of composing them one by one."""

  def test_counts_equal_one_by_one(self):
    a = dp_accounting.PoissonSampledDpEvent(0.1,
                                            dp_accounting.GaussianDpEvent(1.5))
    b = dp_accounting.GaussianDpEvent(4.0)
    # Unhashable (a list inside): grouped by equality.
    c = dp_accounting.ComposedDpEvent([b, dp_accounting.GaussianDpEvent(6.)])
    rounds = [a, b, a, c, a, c]
    counted = pld_accountant.compose_rounds(pld_accountant.tightest('server'),
                                            rounds)
    one_by_one = pld_accountant.tightest('server')
    for event in rounds:
      one_by_one.compose(event)
    self.assertEqual(counted.bound_used(1e-6), pld_accountant.PLD)
    self.assertAlmostEqual(counted.get_epsilon(1e-6),
                           one_by_one.get_epsilon(1e-6),
                           delta=2e-3)
    # RDP beside it: the same curves summed.
    self.assertAlmostEqual(counted.rdp_accountant.get_epsilon(1e-6),
                           one_by_one.rdp_accountant.get_epsilon(1e-6),
                           places=9)

  def test_identical_rounds_are_one_self_composition(self):
    event = dp_accounting.GaussianDpEvent(3.0)
    counted = pld_accountant.compose_rounds(pld_accountant.tightest('release'),
                                            [event] * 40)
    expected = pld_accountant.tightest('release').compose(
        dp_accounting.SelfComposedDpEvent(event, 40))
    self.assertEqual(counted.get_epsilon_and_bound(1e-5),
                     expected.get_epsilon_and_bound(1e-5))

  def test_final_epsilon_reports_that_composition(self):
    # FinalEpsilon carries the composed accountant's epsilon, bound and
    # description, the adversary asked and the number of rounds; anything
    # but DpEvents is refused before an accountant is built.
    event = dp_accounting.GaussianDpEvent(3.0)
    final = pld_accountant.final_epsilon('server', [event] * 40, 1e-5, 7.5)
    expected = pld_accountant.compose_rounds(pld_accountant.tightest('server'),
                                             [event] * 40)
    self.assertEqual((final.epsilon, final.bound),
                     expected.get_epsilon_and_bound(1e-5))
    self.assertEqual(final.description, expected.describe(1e-5))
    self.assertEqual(
        (final.adversary, final.delta, final.rounds, final.rdp_epsilon),
        ('server', 1e-5, 40, 7.5))
    with self.assertRaisesRegex(TypeError, 'DpEvents.*got float'):
      pld_accountant.final_epsilon('server', [event, 3.0], 1e-5)
