"""Conditional randomized rounding: exact bounds and unbiasedness."""

import fractions

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import rounding


class RandomizedRoundTest(tf.test.TestCase, parameterized.TestCase):

  def test_rounds_to_a_neighbouring_integer(self):
    x = tf.constant(np.random.default_rng(0).uniform(-50, 50, size=1000))
    r = rounding.randomized_round(
        x, rounding.rounding_uniforms([1000], tf.constant([1, 2], tf.int64), 0))
    self.assertEqual(r.dtype, tf.int64)
    self.assertAllLess(np.abs(r.numpy() - x.numpy()), 1.0)

  def test_unbiased(self):
    # Each coordinate is Bernoulli(frac) around floor(x): the mean over n
    # draws has standard error sqrt(f(1-f)/n) <= 0.5/sqrt(n); we allow 5 of
    # them for each of the 3 coordinates.
    x = tf.constant([42.3, -0.5, 7.0], tf.float64)
    n = 20000
    xs = tf.tile(x[tf.newaxis], [n, 1])
    draws = rounding.randomized_round(
        xs, rounding.rounding_uniforms([n, 3], tf.constant([9, 9], tf.int64),
                                       0)).numpy()
    frac = x.numpy() - np.floor(x.numpy())
    se = np.sqrt(frac * (1 - frac) / n)
    self.assertTrue(np.all(np.abs(draws.mean(0) - x.numpy()) <= 5 * se + 1e-12))
    self.assertAllEqual(draws[:, 2], np.full(n, 7))


class ConditionalRoundTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(0, 1, 2)
  def test_accepted_vector_meets_threshold(self, seed):
    d = 256
    x = np.random.default_rng(seed).normal(size=d) * 3
    norm_sq = float(np.sum(x**2))
    # About the mean norm after rounding: some attempts fail, some pass.
    threshold = int(norm_sq + d / 6)
    r, attempts, ok = rounding.conditional_randomized_round(
        tf.constant(x), threshold, tf.constant([seed, 7], tf.int64))
    self.assertTrue(ok)
    self.assertLessEqual(int(np.sum(r.numpy().astype(np.int64)**2)), threshold)
    self.assertGreaterEqual(int(attempts), 1)

  def test_int32_norm_check_is_exact_in_int64(self):
    # The float32 path's rounded values are int32; the privacy of the
    # client rests on ||x~||^2 <= T being checked exactly. Coordinates
    # near 2^30 (integers in float32, so rounding keeps them) have squares
    # that wrap in int32 ((2^30 - 64)^2 = 4096 mod 2^32): an int32 check
    # would accept a vector whose true squared norm is ~2^61 against a
    # threshold one below it.
    v = 2**30 - 64
    x = tf.constant([v, -v, 0], tf.float32)
    exact = 2 * v * v
    r, _, ok = rounding.conditional_randomized_round(x,
                                                     exact - 1,
                                                     tf.constant([1, 1],
                                                                 tf.int64),
                                                     max_attempts=3)
    self.assertFalse(ok)
    self.assertAllEqual(r, [0, 0, 0])
    r, attempts, ok = rounding.conditional_randomized_round(
        x, exact, tf.constant([1, 1], tf.int64), max_attempts=3)
    self.assertTrue(ok)
    self.assertEqual(int(attempts), 1)
    self.assertEqual(r.dtype, tf.int32)
    self.assertAllEqual(r, [v, -v, 0])

  def test_impossible_threshold_gives_zeros(self):
    x = tf.constant([10.5, -3.2], tf.float64)
    r, attempts, ok = rounding.conditional_randomized_round(
        x, 1, tf.constant([0, 0], tf.int64), max_attempts=5)
    self.assertFalse(ok)
    self.assertEqual(int(attempts), 5)
    self.assertAllEqual(r, [0, 0])


def _exact_fraction(x) -> fractions.Fraction:
  """The real fraction x - floor(x) of a float, exactly."""
  q = fractions.Fraction(float(x))
  return q - (q.numerator // q.denominator)


class RoundWithWordsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((np.float32, 6), (np.float32, 11), (np.float64, 6),
                            (np.float64, 11))
  def test_law_over_every_word(self, dtype, bits):
    # Feeding every k-bit word once gives P(up) exactly: the number of
    # words that round up, over 2^k. The module's claim: P(up) =
    # ceil(fl(frac) 2^k) / 2^k with fl(frac) = x - floor(x) in the dtype,
    # so the bias against the real fraction is in [-u/2, 2^-k + u/2)
    # (fl(frac) exact for |x| >= 1, within u/2 below), u the unit roundoff.
    rng = np.random.default_rng(bits)
    xs = np.concatenate([
        rng.uniform(-3, 3, 40),
        rng.normal(size=20) * 1e4, -rng.uniform(0, 1, 20),
        -(2.0**-np.arange(20, 60, 8)),
        np.arange(-4, 5) / 4.0, [0.0]
    ]).astype(dtype)
    words = np.arange(2**bits, dtype=np.int32) | (5 << bits)  # high bits set
    ups = rounding.round_with_words(
        tf.constant(np.repeat(xs[:, None], 2**bits, 1)),
        tf.constant(np.tile(words, (len(xs), 1))), bits).numpy()
    floors = np.floor(xs).astype(np.int64)
    up_count = (ups - floors[:, None]).sum(1)
    self.assertTrue(
        np.all((ups == floors[:, None]) | (ups == floors[:, None] + 1)))
    u = float(np.finfo(dtype).eps) / 2
    for x, count in zip(xs, up_count):
      fl_frac = fractions.Fraction(float(x - np.floor(x)))
      self.assertEqual(count, -(-fl_frac * 2**bits // 1), x)  # ceil
      bias = fractions.Fraction(int(count), 2**bits) - _exact_fraction(x)
      self.assertGreaterEqual(bias, -fractions.Fraction(u) / 2, x)
      self.assertLess(
          bias,
          fractions.Fraction(1, 2**bits) + fractions.Fraction(u) / 2, x)

  @parameterized.parameters(np.float32, np.float64)
  def test_default_bits_compare_exactly_at_the_boundary(self, dtype):
    # frac = j / 2^k exactly: word j - 1 rounds up, word j does not (k the
    # default bits: 24 for float32, 31 for float64), so no bit is lost.
    k = rounding.ROUNDING_BITS[tf.as_dtype(dtype)]
    j = np.array([1, 2**(k - 1) + 1, 2**k - 1], np.int64)
    x = (j / 2.0**k).astype(dtype)
    self.assertAllEqual(x, j / 2.0**k)  # representable
    for offset, expected in ((-1, 1), (0, 0)):
      out = rounding.round_with_words(
          tf.constant(x), tf.constant((j + offset).astype(np.int32)))
      self.assertAllEqual(out, [expected] * 3)
    self.assertEqual(out.dtype, rounding.integer_dtype(tf.as_dtype(dtype)))

  def test_refuses_more_bits_than_exact(self):
    with self.assertRaisesRegex(ValueError, 'bits must be in'):
      rounding.round_with_words(tf.zeros([2], tf.float32),
                                tf.zeros([2], tf.int32), 25)

  def test_first_words_feed_attempt_zero(self):
    # Attempt 0 rounds with the caller's words (and only they decide it):
    # with an easy threshold the output is exactly round_with_words of them.
    x = tf.constant(np.random.default_rng(4).normal(size=64) * 3, tf.float32)
    words = tf.random.stateless_uniform([64],
                                        seed=[5, 6],
                                        dtype=tf.int32,
                                        minval=None,
                                        maxval=None)
    r, attempts, ok = rounding.conditional_randomized_round(
        x, 10**9, tf.constant([1, 2], tf.int64), first_words=words)
    self.assertTrue(ok)
    self.assertEqual(int(attempts), 1)
    self.assertAllEqual(r, rounding.round_with_words(x, words))
    self.assertEqual(r.dtype, tf.int32)
