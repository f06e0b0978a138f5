"""The sampling bounds against exact Renyi divergences on small cases.

Every distribution here is computed exactly (discrete Gaussians truncated at
40 standard deviations, mass beyond e^-800; binomials in closed form), for
the protocols the accountant describes:

* known sample (the server chose the cohort): the joint law of (was the
  client sampled, output) -- the known-sample mixture formula must be
  *equal* to the exact divergence, and bound the release-only marginal;
* self-sampling (every client in the sum, private coins): the output laws
  of zero-out neighbours must be bounded by Zhu & Wang on the zero-out curve;
* fixed-size cohorts against the release: the output law mixed over all
  cohorts must be bounded by WBK19 on the replace-one curve.
"""

import itertools
import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
from scipy import special
from scipy import stats

from tff_ddp.accounting import accountant
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import subsampling

ORDERS = np.array([1.5, 2.0, 3.0, 4.0, 8.0])
_L = 150  # window [-_L, _L] of every DDG law below (sigma = 1)
_K = 70  # each noise share's kernel on [-_K, _K]


def _log_dg(sigma=1.0):
  """log pmf of N_Z(0, sigma^2) on [-_K, _K] (mass beyond: < e^-2400)."""
  x = np.arange(-_K, _K + 1, dtype=np.float64)
  logw = -x**2 / (2 * sigma**2)
  return logw - special.logsumexp(logw)


def _ddg_log_law(values, sigma=1.0):
  """log pmf on [-_L, _L] of sum_i (values[i] + N_Z(0, sigma^2)), in log
  space so that no tail underflows to 0 (shifted laws must keep the same
  support)."""
  law = np.full(2 * _L + 1, -np.inf)
  law[_L + int(sum(values))] = 0.0
  kernel = _log_dg(sigma)
  for _ in values:
    new = np.full_like(law, -np.inf)
    for j, lk in enumerate(kernel):
      shift = j - _K
      src = np.roll(law, shift)
      if shift > 0:
        src[:shift] = -np.inf
      elif shift < 0:
        src[shift:] = -np.inf
      new = np.logaddexp(new, src + lk)
    law = new
  return law


def _mix_log(q, log_a, log_b):
  """log((1 - q) a + q b)."""
  return np.logaddexp(math.log1p(-q) + log_a, math.log(q) + log_b)


def _binomial_sum(probs, m):
  law = np.array([1.0])
  for p in probs:
    law = np.convolve(law, stats.binom.pmf(np.arange(m + 1), m, p))
  return law


def _log(p):
  with np.errstate(divide='ignore'):
    return np.log(p)


def _divergence(p, q, orders=ORDERS):
  """max(D(P||Q), D(Q||P)) exactly, per order (pmfs)."""
  return _log_divergence(_log(np.asarray(p)), _log(np.asarray(q)), orders)


def _log_divergence(lp, lq, orders=ORDERS):
  """max(D(P||Q), D(Q||P)) exactly, per order (log pmfs).

  Truncated discrete Gaussian sums with different shifts have supports
  that differ only where both masses are below e^-2400; those points are
  left out (binomial laws share their support, nothing is left out).
  """
  keep = np.isfinite(lp) & np.isfinite(lq)
  if np.any(np.isfinite(lp) != np.isfinite(lq)):
    lp, lq = lp[keep], lq[keep]
  return np.maximum(pbm_rdp.renyi_divergence(lp, lq, orders),
                    pbm_rdp.renyi_divergence(lq, lp, orders))


def _curve(event, adversary='server'):
  return accountant.RdpAccountant(ORDERS, adversary=adversary).curve(event)


class KnownSampleTest(parameterized.TestCase):

  @parameterized.product(q=[0.01, 0.3, 0.9], delta=[1, 3])
  def test_mixture_is_exact_for_the_joint_law(self, q, delta):
    other = [1]  # the other client of the cohort
    mu0 = _ddg_log_law(other)  # u not sampled: not in the sum
    mu1 = _ddg_log_law(other + [delta])  # u sampled with its value
    mu1z = _ddg_log_law(other + [0])  # u sampled, zeroed out
    common = np.isfinite(mu1) & np.isfinite(mu1z)  # see _log_divergence
    mu1, mu1z = np.where(common, mu1, -np.inf), np.where(common, mu1z, -np.inf)
    joint_p = np.concatenate([math.log1p(-q) + mu0, math.log(q) + mu1])
    joint_q = np.concatenate([math.log1p(-q) + mu0, math.log(q) + mu1z])
    exact = pbm_rdp.renyi_divergence(joint_p, joint_q, ORDERS)
    inner = pbm_rdp.renyi_divergence(mu1, mu1z, ORDERS)
    formula = subsampling.known_sample_rdp(
        lambda a: pbm_rdp.renyi_divergence(mu1, mu1z, a), q, ORDERS)
    np.testing.assert_allclose(formula, exact, rtol=1e-9, atol=1e-15)
    self.assertTrue(np.all(exact <= inner + 1e-12))
    # The release sees only the marginal: never more than the joint.
    marginal = _log_divergence(_mix_log(q, mu0, mu1), _mix_log(q, mu0, mu1z))
    self.assertTrue(
        np.all(marginal <= _log_divergence(joint_p, joint_q) + 1e-12))
    # The accountant's bound (Theorem 5 curve inside) is above it.
    event = dp_accounting.PoissonSampledDpEvent(
        q,
        events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=delta,
                                                  local_stddev=1.0,
                                                  num_clients=2,
                                                  dimension=1))
    for adversary in accountant.ADVERSARIES:
      self.assertTrue(np.all(_curve(event, adversary) >= exact - 1e-12))

  @parameterized.parameters(0.05, 0.5)
  def test_cpbm_known_sample(self, q):
    theta, m = 0.25, 2
    event = dp_accounting.PoissonSampledDpEvent(
        q, events.PoissonBinomialDpEvent(theta, m, 2, 1))
    curve = _curve(event)
    for p_u, p_other in itertools.product(
        [0.5 - theta, 0.5 + theta, 0.5 + theta / 2], [0.5 - theta, 0.5]):
      mu0 = np.concatenate([_binomial_sum([p_other], m), np.zeros(m)])
      mu1 = _binomial_sum([p_u, p_other], m)
      mu1z = _binomial_sum([0.5, p_other], m)
      brute = _divergence(np.concatenate([(1 - q) * mu0, q * mu1]),
                          np.concatenate([(1 - q) * mu0, q * mu1z]))
      self.assertTrue(np.all(curve >= brute - 1e-12), (p_u, p_other))


class SelfSamplingTest(parameterized.TestCase):

  @parameterized.product(q=[0.05, 0.3], n=[1, 3], m=[1, 2])
  def test_cpbm(self, q, n, m):
    theta = 0.25
    event = events.SelfSampledDpEvent(
        q, events.PoissonBinomialDpEvent(theta, m, n, 1))
    curve = _curve(event)
    grid = [0.5 - theta, 0.5 - theta / 2, 0.5, 0.5 + theta]
    worst = np.zeros_like(ORDERS)
    for p_u, *others in itertools.product(grid, repeat=n):
      others = list(others)
      zeroed = _binomial_sum([0.5] + others, m)
      kept = _binomial_sum([p_u] + others, m)
      worst = np.maximum(worst, _divergence((1 - q) * zeroed + q * kept,
                                            zeroed))
    self.assertTrue(np.all(curve >= worst - 1e-12), (curve, worst))
    # And it is an amplification: below the unsampled curve.
    unsampled = _curve(events.PoissonBinomialDpEvent(theta, m, n, 1))
    self.assertTrue(np.all(curve <= unsampled + 1e-12))

  @parameterized.product(q=[0.05, 0.3], delta=[1, 2, 4])
  def test_ddg(self, q, delta):
    event = events.SelfSampledDpEvent(
        q,
        events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=4.0,
                                                  local_stddev=1.0,
                                                  num_clients=2,
                                                  dimension=1))
    curve = _curve(event)
    for other in (-4, 0, 3):
      zeroed = _ddg_log_law([other, 0])
      kept = _ddg_log_law([other, delta])
      brute = _log_divergence(_mix_log(q, zeroed, kept), zeroed)
      self.assertTrue(np.all(curve >= brute - 1e-12), (curve, brute))


class FixedCohortReleaseTest(parameterized.TestCase):

  @parameterized.parameters(1, 3)
  def test_ddg_without_replacement(self, delta):
    # Population of 4, cohorts of 2 drawn uniformly; the others' values are
    # anywhere in [-delta, delta] (the sensitivity bound).
    population, size = 4, 2
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population, size,
        events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=delta,
                                                  local_stddev=1.0,
                                                  num_clients=size,
                                                  dimension=1))
    curve = _curve(event, 'release')
    server = _curve(event, 'server')
    rng = np.random.default_rng(delta)
    for _ in range(5):
      others = list(rng.integers(-delta, delta + 1, size=population - 1))
      laws = {}
      for x_u in (delta, 0):
        values = others + [x_u]
        cohorts = list(itertools.combinations(range(population), size))
        laws[x_u] = special.logsumexp(
            [_ddg_log_law([values[i] for i in c]) for c in cohorts],
            axis=0) - math.log(len(cohorts))
      brute = _log_divergence(laws[delta], laws[0])
      self.assertTrue(np.all(curve >= brute - 1e-12), (curve, brute))
      self.assertTrue(np.all(server >= brute - 1e-12))


def _gaussian_mixture_log_pdf(means, weights, sigma, grid):
  """log density on `grid` of sum_k weights[k] N(means[k], sigma^2)."""
  means = np.asarray(means, np.float64)[:, None]
  logs = (np.log(np.asarray(weights, np.float64))[:, None] -
          (grid[None, :] - means)**2 / (2 * sigma**2) -
          math.log(sigma * math.sqrt(2 * math.pi)))
  return special.logsumexp(logs, axis=0)


def _gaussian_divergence(p_means,
                         q_means,
                         sigma,
                         p_weights=None,
                         q_weights=None,
                         orders=ORDERS):
  """max(D(P||Q), D(Q||P)) per order for two Gaussian mixtures, by
  quadrature: the log integrand log p^a q^(1-a) on a grid of step sigma/100
  over +-300 sigma around the means (its peak sits within a (|shift| +
  a |shift|) of them for the orders here; the mass outside is below
  e^-40000). The Riemann sum of a smooth Gaussian integrand at step
  sigma/100 is exact to ~1e-12 relative (its error decays like
  exp(-2 pi^2 sigma^2 / h^2))."""
  p_weights = p_weights or [1.0 / len(p_means)] * len(p_means)
  q_weights = q_weights or [1.0 / len(q_means)] * len(q_means)
  centre = float(np.mean(np.concatenate([p_means, q_means])))
  h = sigma / 100.0
  grid = centre + h * np.arange(-30000, 30001, dtype=np.float64)
  lp = _gaussian_mixture_log_pdf(p_means, p_weights, sigma, grid)
  lq = _gaussian_mixture_log_pdf(q_means, q_weights, sigma, grid)
  out = []
  for a in orders:
    both = [
        special.logsumexp(a * x + (1 - a) * y) + math.log(h)
        for x, y in ((lp, lq), (lq, lp))
    ]
    out.append(max(both) / (a - 1))
  return np.asarray(out)


class GaussianReplaceOneTest(parameterized.TestCase):
  """`GaussianDpEvent(z)` under REPLACE_ONE against exact divergences.

  The noise stddev is z C for a per-record bound C (dp-accounting's
  convention): one-dimensional records in [-C, C], the release is the sum of
  the cohort's records plus N(0, (zC)^2), replace-one neighbours swap +C for
  -C (a difference of 2C, the worst case). The exact Renyi divergence of
  the unsampled pair is 2 alpha / z^2 (closed form): the accountant's old
  alpha / (2 z^2) was a quarter of it.
  """

  Z = 2.0

  def _curve(self, event, adversary):
    return accountant.RdpAccountant(
        ORDERS, dp_accounting.NeighboringRelation.REPLACE_ONE,
        adversary).curve(event)

  def test_unsampled_is_the_closed_form(self):
    exact = _gaussian_divergence([1.0], [-1.0], self.Z)
    np.testing.assert_allclose(exact, 2 * ORDERS / self.Z**2, rtol=1e-9)
    for adversary in accountant.ADVERSARIES:
      np.testing.assert_allclose(self._curve(
          dp_accounting.GaussianDpEvent(self.Z), adversary),
                                 exact,
                                 rtol=1e-9)

  @parameterized.product(size=[1, 2], others=[(0.0, 0.0), (1.0, -1.0)])
  def test_without_replacement(self, size, others):
    # Population of 3: the client u (+1 or -1) and two others; every
    # cohort of `size` equally likely. The release sees only the sum.
    population = 3
    cohorts = list(itertools.combinations(range(population), size))
    laws = []
    for x_u in (1.0, -1.0):
      values = [x_u] + list(others)
      laws.append([sum(values[i] for i in c) for c in cohorts])
    brute = _gaussian_divergence(laws[0], laws[1], self.Z)
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population, size, dp_accounting.GaussianDpEvent(self.Z))
    for adversary in accountant.ADVERSARIES:
      curve = self._curve(event, adversary)
      self.assertTrue(np.all(curve >= brute * (1 - 1e-9)), (curve, brute))

  @parameterized.parameters(0.1, 0.5)
  def test_poisson_and_self_sampling(self, q):
    # Sampled (q) or not: the sum moves by +-1 or the record is absent
    # (Poisson) / sends zero (self-sampling): the same output laws here.
    brute = _gaussian_divergence([0.0, 1.0], [0.0, -1.0], self.Z, [1 - q, q],
                                 [1 - q, q])
    for event_cls in (dp_accounting.PoissonSampledDpEvent,
                      events.SelfSampledDpEvent):
      event = event_cls(q, dp_accounting.GaussianDpEvent(self.Z))
      for adversary in accountant.ADVERSARIES:
        curve = self._curve(event, adversary)
        self.assertTrue(np.all(curve >= brute * (1 - 1e-9)),
                        (event_cls, curve, brute))
