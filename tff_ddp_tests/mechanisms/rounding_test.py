"""Conditional randomized rounding: exact bounds and unbiasedness."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import rounding
from tff_ddp_tests import harness


class RandomizedRoundTest(tf.test.TestCase, parameterized.TestCase):

  def test_rounds_to_a_neighbouring_integer(self):
    x = tf.constant(np.random.default_rng(0).uniform(-50, 50, size=1000))
    r = rounding.randomized_round(x, rounding.rounding_uniforms(
        [1000], tf.constant([1, 2], tf.int64), 0))
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
    self.assertLessEqual(int(np.sum(r.numpy().astype(np.int64)**2)),
                         threshold)
    self.assertGreaterEqual(int(attempts), 1)

  def test_impossible_threshold_gives_zeros(self):
    x = tf.constant([10.5, -3.2], tf.float64)
    r, attempts, ok = rounding.conditional_randomized_round(
        x, 1, tf.constant([0, 0], tf.int64), max_attempts=5)
    self.assertFalse(ok)
    self.assertEqual(int(attempts), 5)
    self.assertAllEqual(r, [0, 0])


if __name__ == '__main__':
  harness.main()
