"""Tests for tff_ddp.mechanisms.discrete_gaussian_table.

The table checks recompute everything independently of the module: the
reference pmf with mpmath at 130 significant digits (the module uses Python
integers bracketed with `decimal`), the table decoded from the raw int64
arrays by the suite's own decoder (`table_reference`), and the sampler's
outputs from its words by that reading of the table (a 252 - b bit
comparison in Python integers).

Statistical checks use fixed seeds, so they are deterministic. Their
thresholds are set a priori from the sampling distribution of the statistic
for a correct sampler: each chi-square check fails with probability
_ALPHA = 1e-4 (chi-square approximation of the pooled statistic, expected
counts >= 5), each mean or variance check with probability ~1e-4 (|z| > 3.89
for an asymptotically normal statistic). With 13 such checks in the file a
correct sampler fails one for a random seed with probability < 1.3e-3; for
the fixed seeds below it passes.
"""

import fractions
import math

from absl.testing import parameterized
import mpmath
import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

from tff_ddp.mechanisms import alias_table as core
from tff_ddp.mechanisms import discrete_gaussian as dg
from tff_ddp.mechanisms import discrete_gaussian_table as dt
from tff_ddp_tests.mechanisms import table_reference

_ALPHA = 1e-4
_Z = float(stats.norm.isf(_ALPHA / 2))  # 3.89: two-sided 1e-4
_W = table_reference.W
_LOW63 = 2**63 - 1


def _sample(n, scale, seed):
  fn = tf.function(lambda s: dt.sample_discrete_gaussian_table([n], scale, s))
  return fn(tf.constant(seed, tf.int64)).numpy()


_threshold = table_reference.threshold
_decode = table_reference.decode


def _reference_pmf(s: fractions.Fraction, half_width: int):
  """mpmath pmf of N_Z(0, s) on [-half_width, half_width] and its Z.

  130 digits: the TV distances compared are ~1e-76 (1/W = 2^-252) and the
  tail's margin below its bound can be ~1e-87 relative (scale 0.05).
  """
  with mpmath.workdps(130):
    s_mp = mpmath.mpf(s.numerator) / s.denominator
    e = {
        x: mpmath.exp(-mpmath.mpf(x * x) / (2 * s_mp))
        for x in range(-half_width, half_width + 1)
    }
    z = mpmath.fsum(e.values())
    return {x: v / z for x, v in e.items()}


def _float_pmf(s):
  half = int(math.ceil(14 * math.sqrt(s))) + 5
  x = np.arange(-half, half + 1)
  logw = -(x.astype(np.float64)**2) / (2 * s)
  w = np.exp(logw - logw.max())
  return x, w / w.sum()


def _pooled_chi_square(counts, expected, min_expected=5.0):
  """(statistic, bins) after merging adjacent bins until expected >= 5."""
  obs, exp = [], []
  acc_o = acc_e = 0.0
  for o, e in zip(counts, expected):
    acc_o += o
    acc_e += e
    if acc_e >= min_expected:
      obs.append(acc_o)
      exp.append(acc_e)
      acc_o = acc_e = 0.0
  obs[-1] += acc_o
  exp[-1] += acc_e
  obs, exp = np.array(obs), np.array(exp)
  return float(np.sum((obs - exp)**2 / exp)), len(obs)


def _moments(x_support, pmf):
  var = float(np.sum(pmf * x_support.astype(np.float64)**2))
  m4 = float(np.sum(pmf * x_support.astype(np.float64)**4))
  return var, m4


def _check_table_against_reference(test, scale):
  """The decoded table and its TV bound vs an mpmath recomputation."""
  s = dg.discrete_gaussian_variance_parameter(scale)
  table = dt.alias_table(scale)
  test.assertEqual(table.law, s)
  t = table.t
  with mpmath.workdps(130):
    # T + 1 is the smallest m with m^2 / (2s) >= 233 ln 2 (up to the
    # rational L > ln 2 the module uses, 2e-21 above ln 2).
    ln2 = mpmath.log(2)
    s_mp = mpmath.mpf(s.numerator) / s.denominator
    test.assertGreaterEqual((t + 1)**2 / (2 * s_mp), 233 * ln2)
    test.assertLess(t**2 / (2 * s_mp), 233 * ln2 + mpmath.mpf(1e-15))
    weights = _decode(table)
    test.assertEqual(sum(weights.values()), _W)
    test.assertTrue(all(abs(x) <= t for x, w in weights.items() if w))
    # Reference over a range whose excluded mass is < e^-2000.
    half = t + int(65 * math.sqrt(float(s))) + 2
    ref = _reference_pmf(s, half)
    p_hat = {x: mpmath.mpf(weights.get(x, 0)) / _W for x in ref}
    tail = mpmath.fsum(v for x, v in ref.items() if abs(x) > t)
    # Exact TV (to ~1e-110) and the bound's pieces, recomputed.
    tv = mpmath.fsum(abs(p_hat[x] - ref[x]) for x in ref) / 2
    ref_t = {x: ref[x] / (1 - tail) for x in range(-t, t + 1)}
    q = mpmath.fsum(abs(p_hat[x] - ref_t[x]) for x in ref_t)
    tau_bound = 2 * mpmath.exp(-mpmath.mpf((t + 1)**2) / (2 * s_mp))
    independent_bound = q / 2 + tau_bound
    bound = dt.tv_distance_bound(scale)
    test.assertLessEqual(tv, bound)
    test.assertLessEqual(tail, tau_bound)
    # The module's bound is the same quantity (its rho is < 2^-240).
    test.assertLess(abs(bound - independent_bound),
                    mpmath.mpf(2)**-240 + 1e-15 * independent_bound)
    test.assertLess(bound, 2.0**-231)
    # Each quantised probability is within 1/W of the truncated pmf.
    test.assertLess(max(abs(p_hat[x] - ref_t[x]) for x in ref_t),
                    mpmath.mpf(1) / _W)


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class TableTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(0.05, 0.3, 0.7, 1.0, 3.3, 12.5)
  def test_quantised_pmf_and_tv_bound_independently(self, scale):
    _check_table_against_reference(self, scale)

  @parameterized.parameters(0.2, 3.3, 785.0, 'top')
  def test_brackets_contain_exp(self, scale):
    # Step 2 of the module: lo(x) <= 2^320 exp(-x^2 / (2s)) <= hi(x).
    if scale == 'top':
      scale = dt.max_supported_scale()
    s = dg.discrete_gaussian_variance_parameter(scale)
    t = dt.alias_table(scale).t
    lo, hi = dt._bracket_weights(s, t)
    self.assertLen(lo, t + 1)
    with mpmath.workdps(150):
      s_mp = mpmath.mpf(s.numerator) / s.denominator
      for x in sorted({0, 1, 2, t // 3, t // 2, t - 1, t} - {-1}):
        exact = mpmath.exp(-mpmath.mpf(x * x) / (2 * s_mp)) * 2**320
        self.assertLessEqual(lo[x], exact)
        self.assertGreaterEqual(hi[x], exact)

  @parameterized.parameters(1e-6, 0.01, 0.3, 0.7, 1.0, 3.3, 50.0, 785.0, 4000.0)
  def test_tv_bound_below_the_constant(self, scale):
    bound = dt.tv_distance_bound(scale)
    self.assertGreater(bound, 0.0)
    self.assertLess(bound, dt.TV_DISTANCE_UPPER_BOUND)
    # The target: eta <= 2^-230 keeps the sampler's delta term of
    # any run up to 2^40 samples below 1e-20 of delta >= 1e-12 at eps < 100.
    self.assertLessEqual(dt.TV_DISTANCE_UPPER_BOUND, 2.0**-230)

  def test_zero_scale(self):
    self.assertEqual(dt.tv_distance_bound(0), 0.0)
    x = dt.sample_discrete_gaussian_table([3, 2], 0.0, [1, 2])
    self.assertEqual(x.dtype, tf.int64)
    self.assertAllEqual(x, np.zeros([3, 2], np.int64))

  def test_cap(self):
    top = dt.max_supported_scale()
    self.assertEqual(dt.MAX_COLUMNS, 2**20)
    # s <= 2^37 / G with G = 233 L: scale^2 <= 2^37 / (233 * 0.6931...).
    self.assertBetween(top, 29171.0, 29172.0)
    table = dt.alias_table(top)
    self.assertEqual(table.log2_columns, 20)
    self.assertEqual(table.t, 2**19 - 1)
    self.assertLess(dt.tv_distance_bound(top), dt.TV_DISTANCE_UPPER_BOUND)
    x = dt.sample_discrete_gaussian_table([20000], top, [1, 2]).numpy()
    self.assertLess(abs(np.std(x) / top - 1), 0.05)
    above = math.nextafter(top, math.inf)
    with self.assertRaisesRegex(ValueError, r'scale.*1048576.*sample_discrete'):
      dt.sample_discrete_gaussian_table([2], above, [1, 2])
    with self.assertRaisesRegex(ValueError, 'max_supported_scale'):
      dt.tv_distance_bound(above)

  @parameterized.product(unconditional=(False, True), top_bits=(None, 20))
  def test_tie_resolution_compares_every_threshold_bit(self, unconditional,
                                                       top_bits):
    # Crafted draws tying the top bits of U with t(J) and then the rest of
    # U equal to t(J)'s bits word by word up to a level, below or above
    # there; the result must be the full 252 - b bit comparison U < t(J),
    # decided here in Python, with the tie branch under tf.cond and
    # without, reading k = 63 - b (default) or 20 top bits from the word.
    table = dt.alias_table(3.3)
    b = table.log2_columns
    k = 63 - b if top_bits is None else top_bits
    cols, u_tops, ties, us = table_reference.crafted_draws(
        table, k, np.random.default_rng(5))
    expected = [
        (j if u < _threshold(table, j) else int(table.packed[j]) % 2**b) -
        table.t for j, u in zip(cols, us)
    ]
    out = core.lookup(table,
                      tf.constant(cols, tf.int64),
                      tf.constant(u_tops, tf.int64),
                      lambda: tf.constant(ties, tf.int64),
                      top_bits=k,
                      unconditional_ties=unconditional).numpy()
    np.testing.assert_array_equal(out, expected)

  def test_samples_equal_a_python_reading_of_the_same_words(self):
    # The sampler's definition, re-derived: word w -> J = w mod 2^b, U =
    # (bits b..62 of w) 2^189 + (tie words 1..3 mod 2^63) in 63-bit digits;
    # output J - t if U < t(J) else alias(J) - t. Scale 0.05 has one point
    # (b = 0: the whole word but bit 63 is U's top). Ties of the top bits
    # (probability 2^(b - 63)) do not occur here; the crafted test above
    # checks them.
    for scale, n in ((3.3, 3000), (0.05, 50), (785.0, 3000)):
      table = dt.alias_table(scale)
      b = table.log2_columns
      seed = tf.constant([4, 2], tf.int64)
      w = core.words([n], core.fold(seed, 0)).numpy()
      tie = core.words([n, core.TIE_WORDS], core.fold(seed, 1)).numpy()
      got = dt.sample_discrete_gaussian_table([n], scale, seed).numpy()
      expected = []
      for i in range(n):
        word = int(w[i]) % 2**64
        j = word % 2**b
        u = (word >> b) % 2**(63 - b)
        for v in tie[i, 1:]:
          u = u * 2**63 + (int(v) % 2**63)
        alias = int(table.packed[j]) % 2**b
        expected.append((j if u < _threshold(table, j) else alias) - table.t)
      np.testing.assert_array_equal(got, expected)

  def test_unconditional_ties_equal_the_cond_path(self):
    # Up to UNCONDITIONAL_TIES_MAX_SAMPLES samples with a static count,
    # ties are resolved without a tf.cond; the values must equal the cond
    # path's for the same seed, eagerly, and traced without a static count.
    table = dt.alias_table(3.3)
    n = core.UNCONDITIONAL_TIES_MAX_SAMPLES
    b = table.log2_columns
    seed = tf.constant([7, 9], tf.int64)
    word = core.words([n], core.fold(seed, 0))
    column = tf.bitwise.bitwise_and(word, 2**b - 1)
    u_top = tf.bitwise.bitwise_and(word, core.top_mask(63 - b))
    extra = lambda: core.words([n, core.TIE_WORDS], core.fold(seed, 1))
    via_cond = core.lookup(table, column, u_top, extra).numpy()
    direct = core.lookup(table, column, u_top, extra,
                         unconditional_ties=True).numpy()
    np.testing.assert_array_equal(via_cond, direct)
    np.testing.assert_array_equal(
        core.sample(tf.constant(n), table, seed).numpy(), direct)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def dynamic(count):  # no static count: the tf.cond path
      return core.sample(count, table, seed)

    np.testing.assert_array_equal(dynamic(tf.constant(n)).numpy(), direct)


@pytest.mark.slow
class TableSlowTest(tf.test.TestCase):

  def test_quantised_pmf_and_tv_bound_independently_scale_785(self):
    _check_table_against_reference(self, 785.0)  # ~7 s (60k mpmath terms)


class StatisticalTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((0.7, 11), (3.3, 12))
  def test_chi_square_and_moments_small_scales(self, scale, seed):
    n = 1_000_000
    s = float(dg.discrete_gaussian_variance_parameter(scale))
    x = _sample(n, scale, [seed, 0])
    support, pmf = _float_pmf(s)
    self.assertLessEqual(np.max(np.abs(x)), support[-1])
    counts = np.bincount(x - support[0], minlength=support.size)
    stat, bins = _pooled_chi_square(counts, pmf * n)
    self.assertGreater(bins, 3)
    self.assertLess(stat, stats.chi2.isf(_ALPHA, bins - 1))
    var, m4 = _moments(support, pmf)
    self.assertLess(abs(np.mean(x)), _Z * math.sqrt(var / n))
    self.assertLess(abs(np.var(x) - var), _Z * math.sqrt((m4 - var**2) / n))
    if scale > 3:  # Var N_Z(0, s) = s up to O(exp(-2 pi^2 s))
      self.assertLess(abs(var / s - 1), 1e-12)

  def test_chi_square_and_moments_scale_785(self):
    n, scale = 1_000_000, 785.0
    s = float(dg.discrete_gaussian_variance_parameter(scale))
    self.assertEqual(s, 785.0**2)
    x = _sample(n, scale, [21, 0])
    support, pmf = _float_pmf(s)
    cdf = np.cumsum(pmf)
    # 100 nearly equiprobable bins with integer edges.
    edges = support[np.searchsorted(cdf, np.arange(1, 100) / 100.0)]
    bin_cdf = cdf[np.searchsorted(support, edges)]
    probs = np.diff(np.concatenate([[0.0], bin_cdf, [1.0]]))
    counts = np.bincount(np.searchsorted(edges, x, side='left'),
                         minlength=probs.size)
    stat, bins = _pooled_chi_square(counts, probs * n)
    self.assertEqual(bins, 100)
    self.assertLess(stat, stats.chi2.isf(_ALPHA, bins - 1))
    var, m4 = _moments(support, pmf)
    self.assertLess(abs(var / s - 1), 1e-12)
    self.assertLess(abs(np.mean(x)), _Z * math.sqrt(var / n))
    self.assertLess(abs(np.var(x) - var), _Z * math.sqrt((m4 - var**2) / n))


class ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_dtype_and_shapes(self):
    x = dt.sample_discrete_gaussian_table([3, 5, 2], 2.5, [1, 2])
    self.assertEqual(x.dtype, tf.int64)
    self.assertEqual(x.shape, (3, 5, 2))
    self.assertEqual(
        dt.sample_discrete_gaussian_table(tf.TensorShape([4]), 2.5,
                                          [1, 2]).shape, (4,))
    self.assertEqual(
        dt.sample_discrete_gaussian_table(tf.constant([2, 3]), 2.5,
                                          [1, 2]).shape, (2, 3))
    self.assertEqual(
        dt.sample_discrete_gaussian_table([0], 2.5, [1, 2]).shape, (0,))

  def test_tf_function_same_and_different_seeds(self):
    fn = tf.function(
        lambda seed: dt.sample_discrete_gaussian_table([4000], 123.4, seed))
    a = fn(tf.constant([3, 4], tf.int64)).numpy()
    self.assertAllEqual(a, fn(tf.constant([3, 4], tf.int64)))
    self.assertAllEqual(
        a, dt.sample_discrete_gaussian_table([4000], 123.4, [3, 4]))
    self.assertAllEqual(
        a,
        dt.sample_discrete_gaussian_table([4000], 123.4,
                                          tf.constant([3, 4], tf.int32)))
    for other in ([3, 5], [4, 4]):
      b = fn(tf.constant(other, tf.int64)).numpy()
      self.assertGreater(np.mean(a != b), 0.9)
      self.assertLess(abs(np.corrcoef(a, b)[0, 1]), 5 / math.sqrt(a.size))

  def test_dynamic_shape_in_tf_function(self):
    fn = tf.function(
        lambda shape, seed: dt.sample_discrete_gaussian_table(shape, 3.3, seed))
    x = fn(tf.constant([6, 7], tf.int64), tf.constant([1, 2], tf.int64))
    self.assertEqual(x.shape, (6, 7))
    self.assertAllEqual(x, dt.sample_discrete_gaussian_table([6, 7], 3.3,
                                                             [1, 2]))


class ArgumentTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('negative', -1.0,
       r'scale must be finite and in \[0, 29171\.\d+\].*-1\.0'),
      ('nan', float('nan'), 'scale must be finite.*nan'),
      ('inf', float('inf'), 'scale must be finite.*inf'),
      ('above_cap', 50000.0, r'scale.*50000\.0.*1048576 = 2\^20'),
      ('huge_int', 10**40, r'scale.*10{40}'))
  def test_bad_scale_value(self, scale, regex):
    with self.assertRaisesRegex(ValueError, regex):
      dt.sample_discrete_gaussian_table([3], scale, [1, 2])
    with self.assertRaisesRegex(ValueError, 'scale'):
      dt.tv_distance_bound(scale)

  @parameterized.named_parameters(('string', '3.0'), ('none', None),
                                  ('bool', True), ('complex', 1j),
                                  ('vector', [1.0]))
  def test_bad_scale_type(self, scale):
    with self.assertRaisesRegex(TypeError, 'scale must be a real number'):
      dt.sample_discrete_gaussian_table([3], scale, [1, 2])

  def test_non_constant_scale_tensor(self):
    fn = tf.function(
        lambda scale: dt.sample_discrete_gaussian_table([3], scale, [1, 2]))
    with self.assertRaisesRegex(TypeError, 'non-constant tensor'):
      fn(tf.constant(2.0))
    self.assertEqual(
        dt.sample_discrete_gaussian_table([3], tf.constant(2.0), [1, 2]).shape,
        (3,))

  @parameterized.named_parameters(
      ('negative', [2, -1], ValueError, 'shape entries must be >= 0, got -1'),
      ('float', [2.5], TypeError, 'shape entries must be ints, got 2.5'),
      ('not_a_shape', 'abc', TypeError, 'shape must be'),
      ('partial', tf.TensorShape([None, 2]), ValueError, 'fully defined'),
      ('float_tensor', tf.constant([2.0]), TypeError, 'integer dtype'))
  def test_bad_shape(self, shape, error, regex):
    with self.assertRaisesRegex(error, regex):
      dt.sample_discrete_gaussian_table(shape, 1.0, [1, 2])

  @parameterized.named_parameters(
      ('three', [1, 2, 3], ValueError, r'seed must have shape \[2\]'),
      ('scalar', 5, ValueError, r'seed must have shape \[2\]'),
      ('float', [1.0, 2.0], TypeError, 'seed must be .*float32'),
      ('string', 'ab', TypeError, 'seed must be'))
  def test_bad_seed(self, seed, error, regex):
    with self.assertRaisesRegex(error, regex):
      dt.sample_discrete_gaussian_table([3], 1.0, seed)
