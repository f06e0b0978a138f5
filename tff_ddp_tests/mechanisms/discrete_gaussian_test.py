"""Tests for tff_ddp.mechanisms.discrete_gaussian.

All randomness uses fixed seeds, so every test (including the statistical
ones) is deterministic. The statistical thresholds (p-value > 1e-3, 5 standard
errors) are significance levels chosen a priori, not values tuned to pass.
"""

import fractions
import math

from absl.testing import parameterized
import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

from tff_ddp.mechanisms import discrete_gaussian as dg

_NUM_SAMPLES = 200_000


def _sample(shape, scale, seed):
  fn = tf.function(lambda s: dg.sample_discrete_gaussian(shape, scale, s))
  return fn(tf.constant(seed, tf.int64)).numpy()


def _exact_pmf(s):
  """Support and normalised pmf of N_Z(0, s) (float64; for moderate s)."""
  half = int(math.ceil(14 * math.sqrt(s))) + 5
  x = np.arange(-half, half + 1)
  logw = -(x.astype(np.float64)**2) / (2 * s)
  w = np.exp(logw - logw.max())
  return x, w / w.sum()


def _pooled_chi_square(counts, expected, min_expected=5.0):
  """Chi-square p-value after merging adjacent bins until expected >= 5."""
  obs_bins, exp_bins = [], []
  acc_o, acc_e = 0.0, 0.0
  for o, e in zip(counts, expected):
    acc_o += o
    acc_e += e
    if acc_e >= min_expected:
      obs_bins.append(acc_o)
      exp_bins.append(acc_e)
      acc_o, acc_e = 0.0, 0.0
  if acc_e > 0 or acc_o > 0:  # leftover right tail joins the last bin
    obs_bins[-1] += acc_o
    exp_bins[-1] += acc_e
  obs_bins, exp_bins = np.array(obs_bins), np.array(exp_bins)
  assert len(obs_bins) >= 2
  stat = np.sum((obs_bins - exp_bins)**2 / exp_bins)
  return stats.chi2.sf(stat, len(obs_bins) - 1), len(obs_bins)


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class DiscreteGaussianTest(tf.test.TestCase, parameterized.TestCase):

  def test_dtype_and_shape(self):
    x = dg.sample_discrete_gaussian([3, 5, 2], 2.5, [1, 2])
    self.assertEqual(x.dtype, tf.int64)
    self.assertEqual(x.shape, (3, 5, 2))
    y = dg.sample_discrete_gaussian(tf.TensorShape([4]), 2.5, [1, 2])
    self.assertEqual(y.shape, (4,))
    z = dg.sample_discrete_gaussian(tf.constant([2, 3]), 2.5, [1, 2])
    self.assertEqual(z.shape, (2, 3))
    self.assertEqual(dg.sample_discrete_gaussian([0], 2.5, [1, 2]).shape, (0,))

  def test_deterministic_for_fixed_seed(self):
    a = dg.sample_discrete_gaussian([1000], 7.3, [5, 6])
    b = dg.sample_discrete_gaussian([1000], 7.3, tf.constant([5, 6]))
    c = dg.sample_discrete_gaussian([1000], 7.3, tf.constant([5, 6], tf.int64))
    self.assertAllEqual(a, b)
    self.assertAllEqual(a, c)

  def test_different_seeds_differ(self):
    a = dg.sample_discrete_gaussian([1000], 7.3, [5, 6]).numpy()
    b = dg.sample_discrete_gaussian([1000], 7.3, [5, 7]).numpy()
    c = dg.sample_discrete_gaussian([1000], 7.3, [6, 6]).numpy()
    self.assertGreater(np.mean(a != b), 0.8)
    self.assertGreater(np.mean(a != c), 0.8)
    # Not merely permuted or shifted copies of each other either.
    self.assertLess(abs(np.corrcoef(a, b)[0, 1]), 0.15)

  def test_zero_scale_gives_zeros(self):
    x = dg.sample_discrete_gaussian([4, 3], 0.0, [1, 2])
    self.assertEqual(x.dtype, tf.int64)
    self.assertAllEqual(x, np.zeros([4, 3], np.int64))
    self.assertEqual(dg.discrete_gaussian_variance_parameter(0), 0)

  @parameterized.named_parameters(
      ('negative', -1.0), ('nan', float('nan')), ('inf', float('inf')),
      ('neg_inf', float('-inf')), ('too_large', 2.0**25 * (1 + 2**-52)),
      ('huge_int', 10**40))
  def test_bad_scale_raises(self, scale):
    with self.assertRaisesRegex(ValueError, r'scale.*\[0, 33554432\.0\]'):
      dg.sample_discrete_gaussian([3], scale, [1, 2])
    with self.assertRaisesRegex(ValueError, 'scale'):
      dg.discrete_gaussian_variance_parameter(scale)

  def test_error_message_names_value(self):
    with self.assertRaisesRegex(ValueError, '-0.5'):
      dg.sample_discrete_gaussian([3], -0.5, [1, 2])

  def test_works_in_tf_function_and_matches_eager(self):
    fn = tf.function(
        lambda seed: dg.sample_discrete_gaussian([50, 4], 123.4, seed))
    seed = tf.constant([3, 4], tf.int64)
    x = fn(seed)
    self.assertEqual(x.dtype, tf.int64)
    self.assertEqual(x.shape, (50, 4))
    self.assertAllEqual(x, fn(seed))
    self.assertAllEqual(x, dg.sample_discrete_gaussian([50, 4], 123.4, seed))
    # Seed as a function argument: one trace serves all seeds.
    self.assertNotAllEqual(x, fn(tf.constant([3, 5], tf.int64)))

  def test_works_in_graph_mode(self):
    with tf.Graph().as_default():
      seed = tf.compat.v1.placeholder(tf.int64, [2])
      x = dg.sample_discrete_gaussian([100], 3.3, seed)
      with tf.compat.v1.Session() as sess:
        a = sess.run(x, {seed: [1, 2]})
        b = sess.run(x, {seed: [1, 2]})
    self.assertAllEqual(a, b)
    self.assertAllEqual(a, dg.sample_discrete_gaussian([100], 3.3, [1, 2]))

  @parameterized.parameters(0.3, 0.5, 1.0, 1.7, 5.5, 800.0, 1000.3,
                            2.0**20 + 0.5, 1e7, 2.0**24, 2.0**25)
  def test_variance_parameter_rounds_up_tightly(self, scale):
    s = dg.discrete_gaussian_variance_parameter(scale)
    sigma2 = fractions.Fraction(scale)**2
    self.assertIsInstance(s, fractions.Fraction)
    self.assertGreaterEqual(s, sigma2)
    self.assertEqual(s.denominator & (s.denominator - 1), 0)  # power of two
    self.assertLessEqual(s.numerator, 2**50)
    # Documented bound: (s - sigma^2) / sigma^2 < 1/N <= 2^-40 / min(1, sigma^2).
    self.assertLess((s - sigma2) / sigma2,
                    fractions.Fraction(1, 2**40) / min(1, sigma2))
    # Not rounding sigma up to an integer.
    if scale != int(scale):
      self.assertLess(s, fractions.Fraction(math.ceil(scale))**2)

  def test_variance_parameter_exact_when_representable(self):
    self.assertEqual(dg.discrete_gaussian_variance_parameter(3),
                     fractions.Fraction(9))
    self.assertEqual(dg.discrete_gaussian_variance_parameter(0.5),
                     fractions.Fraction(1, 4))

  def test_max_supported_scale(self):
    top = dg.max_supported_scale()
    self.assertEqual(top, 2.0**25)
    self.assertGreaterEqual(top, 2.0**24)
    x = dg.sample_discrete_gaussian([2000], top, [1, 2]).numpy()
    self.assertLess(abs(np.std(x) / top - 1), 0.1)
    with self.assertRaises(ValueError):
      dg.sample_discrete_gaussian([2], np.nextafter(top, np.inf), [1, 2])

  @parameterized.parameters(1e-6, 0.01, 0.3, 0.5, 0.999, 1.0, 1.7, 5.5, 31.9,
                            800.0, 1000.3, 12345.678, 2.0**20 + 0.5, 1e7,
                            2.0**24, 3e7, 2.0**25)
  def test_host_parameters_are_consistent(self, scale):
    sigma = fractions.Fraction(scale)
    prm = dg._params(sigma)
    s = fractions.Fraction(prm.n, 2**prm.q)
    self.assertEqual(s, dg.discrete_gaussian_variance_parameter(scale))
    mu = fractions.Fraction(prm.m, 2**prm.k)
    if sigma >= 1:
      self.assertEqual(mu, math.floor(sigma))
    self.assertEqual(fractions.Fraction(prm.a, prm.b), s / mu)
    self.assertEqual(fractions.Fraction(prm.p, prm.c),
                     fractions.Fraction(1, 4**prm.k) / (2 * s))
    # Truncation: 2 exp(-x_max^2 / (2 s)) < exp(-1000).
    self.assertGreaterEqual(prm.x_max**2, 2 * 1001 * s)
    self.assertLess(
        math.log(2) - float(fractions.Fraction(prm.x_max**2) / (2 * s)), -1000)
    # V >= v_cap forces |Y| > x_max; no int64 overflow anywhere.
    self.assertGreaterEqual(prm.a * prm.v_cap, (prm.x_max + 1) * prm.b)
    z_max = max(prm.m, prm.x_max * 2**prm.k - prm.m)
    self.assertLessEqual(z_max**2 * prm.p, 2**62)
    self.assertLessEqual(prm.a * (prm.v_cap + 2), 2**62)
    self.assertLessEqual(prm.c, 2**52)

  def test_bernoulli_exp_helpers_edge_cases(self):
    seed = tf.constant([9, 9], tf.int64)
    self.assertAllEqual(dg._bern_exp(tf.zeros([100], tf.int64), 7, seed),
                        np.ones(100, bool))
    g = dg._capped_geometric_exp_minus_one(
        tf.constant([0, 0, 1, 5, 1000], tf.int64), seed).numpy()
    self.assertAllEqual(g[:2], [0, 0])
    self.assertTrue(np.all(g <= [0, 0, 1, 5, 1000]))


def _moments_check(test, x, s, var, m4):
  n = x.size
  mean_se = math.sqrt(var / n)
  test.assertLess(abs(np.mean(x)), 5 * mean_se)
  var_se = math.sqrt((m4 - var**2) / n)
  test.assertLess(abs(np.var(x) - var),
                  5 * var_se,
                  msg=f'variance {np.var(x)} vs exact {var} (s = {s})')


@pytest.mark.slow
class DiscreteGaussianStatisticalTest(tf.test.TestCase, parameterized.TestCase):
  # With fixed seeds these tests are deterministic; p > 1e-3 and the
  # 5-standard-error tolerances are significance levels, not tuned values.

  @parameterized.parameters((0.3, 11), (0.5, 12), (1.7, 13), (5.5, 14))
  def test_chi_square_small_scales(self, scale, seed):
    s = float(dg.discrete_gaussian_variance_parameter(scale))
    x = _sample([_NUM_SAMPLES], scale, [seed, 0])
    support, pmf = _exact_pmf(s)
    self.assertLessEqual(np.max(np.abs(x)), support[-1])
    counts = np.bincount(x - support[0], minlength=support.size)
    p_value, num_bins = _pooled_chi_square(counts, pmf * x.size)
    self.assertGreater(num_bins, 2)
    self.assertGreater(p_value, 1e-3)
    var = float(np.sum(pmf * support.astype(np.float64)**2))
    m4 = float(np.sum(pmf * support.astype(np.float64)**4))
    _moments_check(self, x, s, var, m4)

  @parameterized.parameters((1000.3, 21), (2.0**20 + 0.5, 22))
  def test_chi_square_large_scales(self, scale, seed):
    s = float(dg.discrete_gaussian_variance_parameter(scale))
    x = _sample([_NUM_SAMPLES], scale, [seed, 0])
    if s <= 1e7:
      support, pmf = _exact_pmf(s)
      cdf = np.cumsum(pmf)
      # ~50 (nearly) equiprobable bins with integer edges.
      edges = support[np.searchsorted(cdf, np.arange(1, 50) / 50.0)]
      bin_cdf = cdf[np.searchsorted(support, edges)]
      var = float(np.sum(pmf * support.astype(np.float64)**2))
      m4 = float(np.sum(pmf * support.astype(np.float64)**4))
    else:
      # For s > 1e7 summing the pmf over ~14 sqrt(s) points is too big; the
      # discrete Gaussian CDF is then the midpoint normal CDF
      # Phi((k + 1/2) / sqrt(s)) up to a relative error O(1/s) < 1e-7
      # (Euler-Maclaurin), and var = s, m4 = 3 s^2 up to O(exp(-2 pi^2 s)).
      sd = math.sqrt(s)
      edges = np.floor(stats.norm.ppf(np.arange(1, 50) / 50.0) * sd)
      bin_cdf = stats.norm.cdf((edges + 0.5) / sd)
      var, m4 = s, 3 * s * s
    probs = np.diff(np.concatenate([[0.0], bin_cdf, [1.0]]))
    counts = np.bincount(np.searchsorted(edges, x, side='left'),
                         minlength=probs.size)
    self.assertGreater(np.min(probs), 0.015)
    self.assertLess(np.max(probs), 0.025)
    p_value, num_bins = _pooled_chi_square(counts, probs * x.size)
    self.assertEqual(num_bins, 50)
    self.assertGreater(p_value, 1e-3)
    _moments_check(self, x, s, var, m4)

  def test_symmetry_and_independence_across_seeds(self):
    a = _sample([_NUM_SAMPLES], 3.7, [31, 0])
    b = _sample([_NUM_SAMPLES], 3.7, [31, 1])
    # Correlation of independent samples is ~N(0, 1/n).
    self.assertLess(abs(np.corrcoef(a, b)[0, 1]), 5 / math.sqrt(a.size))
    self.assertLess(abs(np.mean(a > 0) - np.mean(a < 0)),
                    5 * math.sqrt(1.0 / a.size))

  @parameterized.parameters((0, 5), (3, 7), (1, 1), (5, 5), (123456, 2**51))
  def test_bernoulli_exp_frequency(self, r, c):
    n = 200_000
    fn = tf.function(lambda seed: dg._bern_exp(
        tf.fill([n], tf.constant(r, tf.int64)), c, seed))
    freq = np.mean(fn(tf.constant([41, r], tf.int64)).numpy())
    p = math.exp(-r / c)
    self.assertLess(abs(freq - p), 5 * math.sqrt(p * (1 - p) / n) + 1e-12)

  def test_bernoulli_exp_minus_one_and_geometric(self):
    n = 200_000
    bits = tf.function(lambda s: dg._bern_exp_minus_one(n, s))(tf.constant(
        [42, 0], tf.int64)).numpy()
    p = math.exp(-1)
    self.assertLess(abs(np.mean(bits) - p), 5 * math.sqrt(p * (1 - p) / n))
    g = tf.function(lambda s: dg._capped_geometric_exp_minus_one(
        tf.fill([n], tf.constant(50, tf.int64)), s))(tf.constant(
            [43, 0], tf.int64)).numpy()
    # P(G = v) = e^-v (1 - e^-1).
    values = np.arange(0, 9)
    expected = np.exp(-values) * (1 - math.exp(-1)) * n
    expected[-1] = math.exp(-8) * n  # pooled tail G >= 8
    counts = np.bincount(np.minimum(g, 8), minlength=9)
    p_value, _ = _pooled_chi_square(counts, expected)
    self.assertGreater(p_value, 1e-3)
