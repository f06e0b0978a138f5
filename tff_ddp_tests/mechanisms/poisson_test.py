"""Exact Poisson / Skellam sampler: envelope, exactness machinery, law.

Statistical tests use fixed seeds, so they are deterministic; the stated
false-failure probability is the chance that a *correct* sampler fails for a
seed drawn at random. Chi-square tests reject when the statistic exceeds the
chi-square(df) quantile at 1 - ALPHA (ALPHA = 1e-6 per block); mean and
variance tests allow Z = 5 standard errors (two-sided 5.7e-7 each, normal
approximation). 8 chi-square and 16 moment checks: a correct sampler fails
one for a random seed with probability below 2e-5 (union bound).
"""

import decimal
import hashlib
import math

from absl.testing import parameterized
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tff_ddp.mechanisms import binomial
from tff_ddp.mechanisms import poisson

ALPHA = 1e-6
Z = 5.0
MEANS = (2.0**-20, 0.3, 1.0, 7.5, 100.0, 600.0, 1e5, 2.0**30)


def _chi_square(samples, mean, min_expected=20.0):
  """(statistic, df, critical value at 1 - ALPHA) against Poisson(mean).

  Outcomes 0..max(samples) are pooled left to right into bins with
  expected count >= min_expected; the right tail beyond the last outcome
  joins the last bin, so every bin's expected count is >= 20.
  """
  lo = int(scipy.stats.poisson.ppf(1e-9, mean))
  hi = max(int(samples.max()), lo) + 1
  ks = np.arange(lo, hi)
  probs = scipy.stats.poisson.pmf(ks, mean)
  probs[0] += scipy.stats.poisson.cdf(lo - 1, mean)
  probs[-1] += scipy.stats.poisson.sf(hi - 1, mean)
  counts = np.bincount(np.maximum(samples, lo) - lo, minlength=len(ks))
  return _pooled_chi_square(counts, probs * len(samples), min_expected)


def _pooled_chi_square(counts, expected, min_expected=20.0):
  """(statistic, df, critical value at 1 - ALPHA) of observed `counts`
  against `expected` over consecutive outcomes, pooled left to right into
  bins with expected count >= min_expected (the remainder joins the last
  bin)."""
  obs, exp, o, e = [], [], 0.0, 0.0
  for c, x in zip(counts, expected):
    o, e = o + c, e + x
    if e >= min_expected:
      obs.append(o)
      exp.append(e)
      o = e = 0.0
  if not obs:
    return 0.0, 0, 1.0
  obs[-1] += o
  exp[-1] += e
  obs, exp = np.array(obs), np.array(exp)
  stat = float(np.sum((obs - exp)**2 / exp))
  df = max(len(obs) - 1, 1)
  return stat, df, float(scipy.stats.chi2.ppf(1 - ALPHA, df))


def _exact_ratio(prm, d):
  """r(D) = f(M + D) / f(M) as (numerator, denominator) integers."""
  mode, big_p, grid = prm.mode, prm.mean_num, 1 << poisson.MEAN_GRID_BITS
  num = den = 1
  if d >= 0:
    for j in range(1, d + 1):
      den *= mode + j
    return num * big_p**d, den * grid**d
  for j in range(-d):
    num *= mode - j
  return num * grid**(-d), den * big_p**(-d)


def _prm(mean):
  return poisson._params(poisson._chunks(mean)[1])


class HostConstantsTest(tf.test.TestCase, parameterized.TestCase):
  """K and sampled_mean by brute force on the host."""

  @parameterized.parameters(2.0**-20, 0.3, 1.0, 1.5, 7.5, 40.0, 300.0, 2500.7)
  def test_envelope_constant_bounds_every_ratio(self, mean):
    # K >= r(D) 2^floor(t/L) for every candidate D (exact rationals), over
    # the whole left side and the right side until the bound decreases
    # for good (the ratios fall faster than 2^(D/L) beyond the mode).
    prm = _prm(mean)
    width = prm.width
    ctx = decimal.Context(prec=60)
    mu = ctx.divide(decimal.Decimal(prm.mean_num), 1 << poisson.MEAN_GRID_BITS)
    k = ctx.divide(decimal.Decimal(prm.k_num), 1 << 20)
    worst = decimal.Decimal(0)
    right = 6 * width + 12 * int(math.sqrt(mean) + 1) + 20
    # r(D) built up from D = 0 in both directions in 60-digit decimals
    # (relative error < 1e-55 after a few thousand steps; K's rounding
    # margin is 2^-20 relative, so the comparison is decided exactly).
    for sign, stop in ((1, right), (-1, prm.mode)):
      r = decimal.Decimal(1)
      for step in range(0, stop + 1):
        d = sign * step
        if step > 0:
          r = ctx.multiply(
              r,
              ctx.divide(mu, prm.mode +
                         d) if sign > 0 else ctx.divide(prm.mode + d + 1, mu))
        t = d if d >= 0 else -1 - d
        value = ctx.multiply(r, 2**(t // width))
        worst = max(worst, value)
        self.assertLessEqual(value, k, f'mean={mean} D={d}')
    # Not loose by more than the rounding and the quadratic relaxation of
    # the proof (a few per cent) at moderate means; at small means the
    # proof's M > mu - 1 costs up to a factor ~2.4 (mu / (M + 1) < 1): a
    # slower sampler there, not a wrong one.
    self.assertLess(k / worst, decimal.Decimal(1.25 if mean >= 40 else 2.5),
                    f'mean={mean}')

  def test_expected_candidates_constant_in_the_mean(self):
    costs = [poisson.expected_candidates(m) for m in (1e3, 1e6, 2**30)]
    self.assertAllInRange(costs, 1.8, 1.9)
    self.assertLess(poisson.expected_candidates(10.0), 2.6)
    self.assertLess(poisson.expected_candidates(2.0**-20), 8.01)

  def test_sampled_mean(self):
    self.assertEqual(poisson.sampled_mean(0.5), 0.5)
    self.assertEqual(poisson.sampled_mean(2.0**-20), 2.0**-20)
    self.assertEqual(poisson.sampled_mean(1.5 * 2.0**-20), 2.0**-19)
    got = poisson.sampled_mean(math.pi)
    self.assertGreaterEqual(got, math.pi)
    self.assertLess(got - math.pi, 2.0**-20)
    self.assertEqual(got * 2**20, math.ceil(math.pi * 2**20))
    big = 3.3 * 2**30  # four chunks
    self.assertEqual(poisson._chunks(big)[0], 4)
    self.assertGreaterEqual(poisson.sampled_mean(big), big)
    self.assertLess(poisson.sampled_mean(big) - big, 4 * 2.0**-20 + 1e-3)

  @parameterized.named_parameters(
      ('mean_str', dict(mean='1'), TypeError, 'mean'),
      ('mean_bool', dict(mean=True), TypeError, 'mean'),
      ('mean_zero', dict(mean=0.0), ValueError, 'mean'),
      ('mean_nan', dict(mean=float('nan')), ValueError, 'mean'),
      ('mean_big', dict(mean=2.0**41), ValueError, 'mean'),
      ('seed_float', dict(seed=[1.0, 2.0]), TypeError, 'seed'),
      ('seed_shape', dict(seed=[1, 2, 3]), ValueError, r'seed.*\[2\]'),
  )
  def test_bad_arguments(self, override, error, pattern):
    args = dict(mean=3.0, seed=[1, 2])
    args.update(override)
    with self.assertRaisesRegex(error, pattern):
      poisson.sample_poisson([4], args['mean'], args['seed'])


class ExactnessMachineryTest(tf.test.TestCase, parameterized.TestCase):
  """The certified interval and the big-integer path against exact math."""

  @staticmethod
  def _exact_log_accept(prm, d, g_eff):
    ctx = decimal.Context(prec=50)
    ln2 = ctx.ln(decimal.Decimal(2))

    def ln_int(x):
      s = max(0, x.bit_length() - 200)
      return ctx.add(ctx.ln(decimal.Decimal(x >> s)), s * ln2)

    num, den = _exact_ratio(prm, d)
    return ln_int(num << (g_eff + 20)) - ln_int(den * prm.k_num)

  @parameterized.parameters(0.3, 7.5, 300.0, 600.0, 5000.5, 1e6)
  def test_interval_contains_exact_log_acceptance(self, mean):
    prm = _prm(mean)
    table = tf.constant(binomial._log_factorial_table())
    sd = math.sqrt(mean)
    rng = np.random.default_rng(int(mean * 10))
    ds = {0, 1, -1, -prm.mode, -prm.mode + 255, -prm.mode + 256, 3 * prm.width}
    ds |= {int(x) for x in rng.normal(0, 3 * sd, 12).round()}
    ds = sorted(x for x in ds if -prm.mode <= x and abs(x) <= 4000)
    gs = [min((x if x >= 0 else -1 - x) // prm.width, 63) for x in ds]
    log_a, err = poisson._log_accept(tf.constant(ds, tf.int64),
                                     tf.constant(gs, tf.int64), prm, table)
    for d, g, la, e in zip(ds, gs, log_a.numpy(), err.numpy()):
      exact = self._exact_log_accept(prm, d, g)
      self.assertLessEqual(exact, 0, f'a(D) > 1 at mean={mean} D={d}')
      diff = abs(decimal.Decimal(float(la)) - exact)
      self.assertLess(float(diff), e / 16, f'mean={mean} D={d}')

  def test_exact_accept_matches_rational_comparison(self):
    for mean in (7.5, 40.0):
      prm = _prm(mean)
      for d in (-5, -1, 0, 2, 7):
        g = (d if d >= 0 else -1 - d) // prm.width
        num, den = _exact_ratio(prm, d)
        w0 = (num << (g + 20 + 52)) // (den * prm.k_num)  # floor(a 2^52)
        for w, want in ((w0 - 2, True), (w0 + 2, False)):
          got = poisson._exact_accept(tf.constant(d, tf.int64),
                                      tf.constant(g, tf.int64),
                                      tf.constant(w, tf.int64), prm,
                                      tf.constant([1, 2], tf.int64))
          self.assertEqual(bool(got), want, f'mean={mean} d={d} w={w}')


_SAMPLERS = {}


def _sampler(mean, force_exact=False):
  key = (mean, force_exact)
  if key not in _SAMPLERS:
    _SAMPLERS[key] = tf.function(lambda n, s: poisson.sample_poisson(
        tf.reshape(n, [1]), mean, s, _force_exact=force_exact),
                                 input_signature=[
                                     tf.TensorSpec([], tf.int64),
                                     tf.TensorSpec([2], tf.int64)
                                 ])
  return _SAMPLERS[key]


@pytest.mark.slow  # statistical: `make test` runs it
class DistributionTest(tf.test.TestCase, parameterized.TestCase):

  def _check(self, mean, n, seed, force_exact=False):
    mu = poisson.sampled_mean(mean)
    x = _sampler(mean, force_exact)(tf.constant(n, tf.int64),
                                    tf.constant(seed, tf.int64)).numpy()
    self.assertEqual(x.dtype, np.int64)
    self.assertAllGreaterEqual(x, 0)
    stat, df, critical = _chi_square(x, mu)
    self.assertLess(stat, critical, f'mean={mean}: chi2 {stat} df {df}')
    self.assertLess(abs(x.mean() - mu), Z * math.sqrt(mu / n), f'{mean}')
    # Var(s^2) ~ (mu4 - var^2 (n-3)/(n-1)) / n with mu4 = mu + 3 mu^2.
    sd_var = math.sqrt((mu + 3 * mu**2 - mu**2 * (n - 3) / (n - 1)) / n)
    self.assertLess(abs(x.var(ddof=1) - mu), Z * sd_var, f'{mean}')

  @parameterized.parameters(0.3, 7.5, 600.0, 1e5, 2.0**30)
  def test_law(self, mean):
    self._check(mean, 200_000, [int(mean) % 1000, 21])

  def test_forced_exact_fallback(self):
    # Every candidate through the big-integer test: same law, slow path.
    for mean in (2.5, 40.0):
      self._check(mean, 1500, [3, 22], force_exact=True)

  def test_chunked_mean(self):
    # 1.5 * 2^30: two chunks of 0.75 * 2^30; mean and variance only.
    mean = 1.5 * 2**30
    mu = poisson.sampled_mean(mean)
    n = 20_000
    x = poisson.sample_poisson([n], mean, [5, 23]).numpy()
    self.assertLess(abs(x.mean() - mu), Z * math.sqrt(mu / n))
    sd_var = math.sqrt((mu + 3 * mu**2 - mu**2 * (n - 3) / (n - 1)) / n)
    self.assertLess(abs(x.var(ddof=1) - mu), Z * sd_var)

  def test_skellam(self):
    mean, n = 12.25, 200_000
    mu = poisson.sampled_mean(mean)
    x = poisson.sample_skellam([n], mean, [8, 24]).numpy()
    # Symmetric Skellam: E = 0, Var = 2 mu, kurtosis mu4 = 2mu + 12 mu^2.
    self.assertLess(abs(x.mean()), Z * math.sqrt(2 * mu / n))
    var = 2 * mu
    sd_var = math.sqrt((var + 3 * var**2 - var**2 * (n - 3) / (n - 1)) / n)
    self.assertLess(abs(x.var(ddof=1) - var), Z * sd_var)
    # Against the Skellam pmf (scipy), pooled as for the Poisson.
    ks, counts = np.unique(x, return_counts=True)
    full = np.arange(ks.min(), ks.max() + 1)
    obs = np.zeros(len(full))
    obs[ks - ks.min()] = counts
    exp = scipy.stats.skellam.pmf(full, mu, mu) * n
    exp[0] += scipy.stats.skellam.cdf(full[0] - 1, mu, mu) * n
    exp[-1] += scipy.stats.skellam.sf(full[-1], mu, mu) * n
    stat, df, critical = _pooled_chi_square(obs, exp)
    self.assertLess(stat, critical, f'skellam chi2 {stat} df {df}')


@pytest.mark.slow  # ~18 s of CPU: 15,000 eager draws, up to mean 1.6e9
class PinnedDrawsTest(tf.test.TestCase):
  """The draws of fixed seeds, as digests of the int64 bytes (first 16 hex
  digits of SHA-256): any change of a draw shows here.

  The draws are the same on every machine, as `binomial_test`'s are: the
  mean is a rational on the 2^-20 grid (`fractions`), the host constants
  are `decimal`, every outcome an integer comparison, a certified float
  decision (correctly rounded +, -, *, / only) or the exact big-integer
  test; the block width L is the argmin of a cost computed with math.exp,
  and for these means the runner-up costs at least 2e-9 more (relative),
  against libm's last-bit differences of ~1e-16."""

  @staticmethod
  def _digest(x):
    return hashlib.sha256(np.asarray(x, np.int64).tobytes()).hexdigest()[:16]

  def test_draws_are_pinned(self):
    for mean, digest in ((0.3, '5a239e6634ecd007'), (7.5, '6e5aea4ba5e2497d'),
                         (600.0, '1f12015d7a914aac'), (1e5, '0bbd9fe346722a27'),
                         (1.5 * 2**30, '89c160b3b0f8afbb')):
      self.assertEqual(
          self._digest(poisson.sample_poisson([3000], mean, [5, 9])), digest,
          mean)
    self.assertEqual(
        self._digest(poisson.sample_skellam([2000], 12.25, [1, 2])),
        'ff69ddc3e075e584')
    self.assertEqual(
        self._digest(
            poisson.sample_poisson([50], 40.0, [3, 4], _force_exact=True)),
        '5fd8d9ebfc99db0a')


@pytest.mark.slow
class ContractTest(tf.test.TestCase):

  def test_same_seed_same_output_eager_and_traced(self):
    fn = _sampler(600.0)
    a = fn(tf.constant(500, tf.int64), tf.constant([1, 2], tf.int64))
    self.assertAllEqual(
        a, fn(tf.constant(500, tf.int64), tf.constant([1, 2], tf.int64)))
    self.assertNotAllEqual(
        a, fn(tf.constant(500, tf.int64), tf.constant([1, 3], tf.int64)))
    self.assertAllEqual(poisson.sample_poisson([500], 600.0, [1, 2]), a)

  def test_shapes(self):
    self.assertEqual(poisson.sample_poisson([], 3.0, [0, 1]).shape, [])
    self.assertEqual(poisson.sample_poisson([2, 0], 3.0, [0, 1]).shape, [2, 0])
    self.assertEqual(
        poisson.sample_skellam([2, 3], 3.0, [0, 1]).dtype, tf.int64)
