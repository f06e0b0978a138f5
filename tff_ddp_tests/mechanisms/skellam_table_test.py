"""Tests for tff_ddp.mechanisms.skellam_table.

The table checks recompute everything independently of the module: the
reference pmf e^{-2 mu} I_k(2 mu) (modified Bessel function, mpmath at 130
digits; the module convolves integer Poisson brackets), the table decoded
from the raw int64 arrays by the suite's own decoder (`table_reference`),
the brackets against
exact rationals, and the one big product against plain sums.

Statistical tests use fixed seeds, so they are deterministic. Each
chi-square test rejects above the chi-square(df) quantile at 1 - ALPHA
(ALPHA = 1e-6) over nearly equiprobable bins of the exact pmf; its sample
size is DERIVED from the power wanted (`_sample_size`): the least n at which
the test rejects, with probability >= 0.999, any law whose bin
probabilities p' differ from the pmf's p by w^2 = sum (p' - p)^2 / p >=
0.002 (noncentral chi-square with noncentrality n w^2). For scale: moving
0.45% of the mass from one of 50 equal bins to another gives w^2 = 0.002;
a sampler of the wrong mean mu' = 1.1 mu gives more. With 5 such tests a
correct sampler fails one for a random seed with probability < 5e-6.
"""

import fractions
import math

from absl.testing import parameterized
import mpmath
import numpy as np
import pytest
import scipy.signal
import scipy.stats
import tensorflow as tf

from tff_ddp.mechanisms import alias_table as core
from tff_ddp.mechanisms import distributed_skellam
from tff_ddp.mechanisms import poisson
from tff_ddp.mechanisms import skellam_table as st
from tff_ddp_tests.mechanisms import table_reference

ALPHA = 1e-6
POWER = 0.999
EFFECT = 0.002  # w^2 = sum (p' - p)^2 / p of the alternative to detect
_W = table_reference.W
_decode = table_reference.decode


def _sample_size(df, effect=EFFECT, alpha=ALPHA, power=POWER):
  """Least n (to 1%) with P(ncx2(df, n effect) > crit) >= power."""
  crit = scipy.stats.chi2.isf(alpha, df)
  n = 100
  while scipy.stats.ncx2.sf(crit, df, n * effect) < power:
    n = int(n * 1.01) + 1
  return n


def _skellam_pmf(mu):
  """(ks, pmf) of the symmetric Skellam(mu, mu), float64, any mu.

  X = P1 - P2: P(X = k) = sum_j P(P2 = j) P(P1 = j + k), the correlation of
  two Poisson(mu) pmfs over a window [mu - 12 sqrt(mu) - 30, mu +
  12 sqrt(mu) + 60] holding all but < 1e-30 of the mass (scipy's Poisson
  pmf is accurate at every mean; its Skellam cdf is not at mu ~ 1e9),
  computed by FFT: absolute error ~1e-16, far below the bins' 1/100.
  """
  lo = max(0, int(mu - 12 * math.sqrt(mu) - 30))
  hi = int(mu + 12 * math.sqrt(mu) + 60)
  pmf = scipy.stats.poisson.pmf(np.arange(lo, hi + 1), mu)
  skellam = np.maximum(scipy.signal.fftconvolve(pmf, pmf[::-1]), 0.0)
  return np.arange(-(hi - lo), hi - lo + 1), skellam


def _chi_square(x, mu, bins=50):
  """(statistic, df, critical value) over nearly equiprobable bins with
  integer edges from the exact pmf (each bin of probability >= 1/bins but
  the last)."""
  ks, pmf = _skellam_pmf(mu)
  cdf = np.cumsum(pmf)
  edges, last = [], 0.0
  for k, c in zip(ks, cdf):
    if c - last >= 1.0 / bins and c < 1 - 1.0 / (2 * bins):
      edges.append(k)
      last = c
  cdf_at = dict(zip(ks.tolist(), cdf.tolist()))
  probs = np.diff([0.0] + [cdf_at[e] for e in edges] + [1.0])
  counts = np.bincount(np.searchsorted(edges, x, side='left'),
                       minlength=len(probs))
  expected = probs * len(x)
  stat = float(np.sum((counts - expected)**2 / expected))
  df = len(probs) - 1
  return stat, df, float(scipy.stats.chi2.isf(ALPHA, df))


def _reference_pmf(mu: fractions.Fraction, half_width: int):
  """{k: e^{-2 mu} I_k(2 mu)} on [-half_width, half_width], mpmath."""
  with mpmath.workdps(130):
    x = 2 * mpmath.mpf(mu.numerator) / mu.denominator
    scale = mpmath.exp(-x)
    half = {k: scale * mpmath.besseli(k, x) for k in range(half_width + 1)}
    return {k: half[abs(k)] for k in range(-half_width, half_width + 1)}


@pytest.mark.slow  # mpmath Bessel functions at 130 digits
class TableTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(2.0**-20, 0.3, 12.25, 150.0)
  def test_quantised_pmf_and_tv_bound_independently(self, mean):
    mu = st.exact_mean(mean)
    table = st.alias_table(mean)
    self.assertEqual(table.law, mu)
    t = table.t
    weights = _decode(table)
    self.assertEqual(sum(weights.values()), _W)
    self.assertTrue(all(abs(x) <= t for x, w in weights.items() if w))
    with mpmath.workdps(130):
      sd = math.sqrt(2 * float(mu))
      # Beyond t + 40 sd + 40 the Skellam mass is < 1e-300.
      half = t + int(40 * sd) + 40
      ref = _reference_pmf(mu, half)
      self.assertLess(abs(mpmath.fsum(ref.values()) - 1), mpmath.mpf(10)**-120)
      p_hat = {x: mpmath.mpf(weights.get(x, 0)) / _W for x in ref}
      tail = mpmath.fsum(v for x, v in ref.items() if abs(x) > t)
      tv = mpmath.fsum(abs(p_hat[x] - ref[x]) for x in ref) / 2
      ref_t = {x: ref[x] / (1 - tail) for x in range(-t, t + 1)}
      q = mpmath.fsum(abs(p_hat[x] - ref_t[x]) for x in ref_t)
      _, tail_bound = st._truncation(mu)
      tail_bound = mpmath.mpf(tail_bound.numerator) / tail_bound.denominator
      bound = st.tv_distance_bound(mean)
      self.assertLessEqual(tail, tail_bound)
      self.assertLess(tail_bound, mpmath.mpf(2)**-232)
      self.assertLessEqual(tv, bound)
      self.assertLess(bound, core.TV_DISTANCE_UPPER_BOUND)
      # The module's bound is q / 2 + its tail bound, up to its rho/2 <=
      # 2^-241 and the float rounding of the bound.
      self.assertLess(abs(bound - (q / 2 + tail_bound)),
                      mpmath.mpf(2)**-240 + 1e-15 * bound)
      # t is the least m - 1 whose (Chernoff) bound is below 2^-232: one
      # less would not do, and the true tail there is above 2^-250.
      tail_less = mpmath.fsum(v for x, v in ref.items() if abs(x) >= t)
      self.assertGreater(tail_less, mpmath.mpf(2)**-250)
      self.assertGreaterEqual(st._tail(mu, t), fractions.Fraction(1, 2**232))

  @parameterized.parameters(0.3, 12.25, 600.0)
  def test_poisson_brackets_contain_the_exact_ratios(self, mean):
    mu = st.exact_mean(mean)
    t, _ = st._truncation(mu)
    low_end, lo, hi = st._poisson_brackets(mu, t)
    mode = math.floor(mu)
    self.assertLessEqual(low_end, mode)
    self.assertGreaterEqual(len(lo) - 1, t)
    f = st._FIX_BITS

    def ratio(j):  # r(j) = mu^(j - M) M! / j!, exactly
      r = fractions.Fraction(1)
      for i in range(min(j, mode) + 1, max(j, mode) + 1):
        r *= (mu / i) if j > mode else (i / mu)
      return r

    n = len(lo)
    for i in sorted({0, 1, n // 4, mode - low_end, n // 2, n - 2, n - 1}):
      exact = ratio(low_end + i) * 2**f
      self.assertLessEqual(lo[i], exact)
      self.assertGreaterEqual(hi[i], exact)
    # The window's ends are below 2^-260 (or at 0).
    self.assertLess(hi[-1], 2**(f - 260) + 1)
    self.assertTrue(low_end == 0 or hi[0] < 2**(f - 260))
    # Its tail R really bounds the mass of r outside: next terms checked.
    big_r = st._window_tail(mu, low_end, hi)
    outside = ratio(low_end + n) + ratio(low_end + n + 1) + (
        ratio(low_end - 1) if low_end > 0 else 0)
    self.assertLessEqual(outside, big_r)

  def test_one_product_equals_the_plain_sums(self):
    rng = np.random.default_rng(3)
    for n, t in ((1, 0), (2, 1), (7, 4), (40, 39), (40, 12)):
      lo = [int(v) for v in rng.integers(0, 2**62, n)]
      lo = [v * 2**226 + 12345 for v in lo]  # up to 2^288, as the module's
      got = st._autocorrelation(lo, t)
      want = [
          sum(lo[i] * lo[i + k]
              for i in range(n - k)) if k < n else 0
          for k in range(t + 1)
      ]
      self.assertEqual(got, want)

  def test_cap(self):
    top = st.max_supported_mean()
    self.assertBetween(top, 4.0e8, 4.5e8)
    self.assertTrue(st.fits(top))
    self.assertFalse(st.fits(top + 2.0**-20))
    with self.assertRaisesRegex(
        ValueError, 'max_supported_mean.*2\\^20.*'
        'poisson.sample_skellam'):
      st.sample_skellam_table([2], 1.5 * 2**30, [1, 2])
    # The mechanism's default sampler is exact there (and in the chunked
    # range), the table below.
    self.assertEqual(
        distributed_skellam.resolve_noise_sampler('table', 1.5 * 2**30),
        'exact')
    self.assertEqual(distributed_skellam.resolve_noise_sampler('table', top),
                     'table')
    self.assertEqual(distributed_skellam.resolve_noise_sampler('exact', 3.0),
                     'exact')


class StatisticalTest(tf.test.TestCase, parameterized.TestCase):

  def test_sample_size_has_the_stated_power(self):
    # The derivation itself: at the sizes used the power is >= 0.999, and
    # a tenth of them would not reach it.
    for df in (4, 20, 49):
      n = _sample_size(df)
      crit = scipy.stats.chi2.isf(ALPHA, df)
      self.assertGreaterEqual(scipy.stats.ncx2.sf(crit, df, n * EFFECT), POWER)
      self.assertLess(scipy.stats.ncx2.sf(crit, df, n * EFFECT / 10), POWER)

  @parameterized.parameters((0.3, 1), (12.25, 2), (600.0, 3), (3e5, 4))
  def test_table_matches_the_exact_pmf(self, mean, seed):
    mu = poisson.sampled_mean(mean)
    probe = np.zeros(1, np.int64)
    _, df, _ = _chi_square(probe, mu)
    n = _sample_size(df)
    x = st.sample_skellam_table([n], mean, [seed, 40]).numpy()
    stat, df, critical = _chi_square(x, mu)
    self.assertLess(stat, critical, f'mean={mean}: chi2 {stat} df {df}')

  @pytest.mark.slow  # the exact chunked sampler: ~10 s
  def test_default_sampler_in_the_chunked_range(self):
    # mu = 1.5 * 2^30 > 2^30: beyond the table, the mechanism's default
    # runs the exact sampler (two chunks per Poisson); the same test.
    mean = 1.5 * 2**30
    self.assertEqual(distributed_skellam.resolve_noise_sampler('table', mean),
                     'exact')
    mu = poisson.sampled_mean(mean)
    _, df, _ = _chi_square(np.zeros(1, np.int64), mu)
    n = _sample_size(df)
    x = poisson.sample_skellam([n], mean, [6, 41]).numpy()
    stat, df, critical = _chi_square(x, mu)
    self.assertLess(stat, critical, f'chi2 {stat} df {df}')


class ExecutionTest(tf.test.TestCase):

  def test_same_seed_same_draws_eager_and_traced(self):
    fn = tf.function(
        lambda seed: st.sample_skellam_table([3, 500], 600.0, seed))
    a = fn(tf.constant([1, 2], tf.int64)).numpy()
    self.assertEqual(a.shape, (3, 500))
    self.assertEqual(a.dtype, np.int64)
    self.assertAllEqual(a, st.sample_skellam_table([3, 500], 600.0, [1, 2]))
    b = fn(tf.constant([1, 3], tf.int64)).numpy()
    self.assertGreater(np.mean(a != b), 0.9)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'mean must be in'):
      st.sample_skellam_table([2], 0.0, [1, 2])
    with self.assertRaisesRegex(TypeError, 'mean must be a real number'):
      st.sample_skellam_table([2], '3', [1, 2])
    with self.assertRaisesRegex(ValueError, r'seed must have shape \[2\]'):
      st.sample_skellam_table([2], 3.0, [1, 2, 3])
