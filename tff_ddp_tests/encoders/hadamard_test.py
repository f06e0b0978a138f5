"""Randomized Walsh-Hadamard rotation: exact math against numpy/scipy."""

from absl.testing import parameterized
import numpy as np
import scipy.linalg
import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp_tests import harness


class PaddedDimensionTest(parameterized.TestCase):

  @parameterized.parameters((1, 1), (2, 2), (3, 4), (1024, 1024), (1025, 2048))
  def test_padded_dimension(self, dim, expected):
    self.assertEqual(hadamard.padded_dimension(dim), expected)

  def test_negative_raises(self):
    with self.assertRaisesRegex(ValueError, 'dim must be an integer >= 0'):
      hadamard.padded_dimension(-1)
    with self.assertRaisesRegex(TypeError, 'dim'):
      hadamard.padded_dimension(3.5)

  def test_encoder_interface(self):
    rotation = hadamard.RandomizedHadamard(np.int64(5))
    self.assertEqual((rotation.dim, rotation.output_dim), (5, 8))
    self.assertTrue(rotation.is_isometry)
    self.assertIsNone(rotation.level)
    with self.assertRaisesRegex(ValueError, 'MAX_OUTPUT_DIM'):
      hadamard.RandomizedHadamard(2**26 + 1)


class FastWalshHadamardTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(1, 2, 8, 256)
  def test_matches_dense_orthonormal_hadamard(self, d):
    x = np.random.default_rng(d).normal(size=d)
    dense = scipy.linalg.hadamard(d) / np.sqrt(d)
    self.assertAllClose(
        hadamard.fast_walsh_hadamard(tf.constant(x)), dense @ x,
        rtol=1e-12, atol=1e-12)

  def test_is_involution(self):
    x = tf.constant(np.random.default_rng(0).normal(size=64))
    self.assertAllClose(
        hadamard.fast_walsh_hadamard(hadamard.fast_walsh_hadamard(x)), x,
        rtol=1e-12, atol=1e-12)

  def test_rejects_non_power_of_two(self):
    with self.assertRaisesRegex(ValueError, 'power of two'):
      hadamard.fast_walsh_hadamard(tf.zeros([6], tf.float64))

  @parameterized.parameters(1, 2, 32, 512)
  def test_batch_is_each_row(self, d):
    x = np.random.default_rng(d).normal(size=(3, 2, d))
    dense = scipy.linalg.hadamard(d) / np.sqrt(d)
    out = hadamard.fast_walsh_hadamard(tf.constant(x))
    self.assertEqual(out.shape, (3, 2, d))
    self.assertAllClose(out, x @ dense.T, rtol=1e-12, atol=1e-12)
    # Unknown batch size (graph mode): the shape comes back at run time.
    fn = tf.function(hadamard.fast_walsh_hadamard, input_signature=[
        tf.TensorSpec([None, d], tf.float64)])
    self.assertAllClose(fn(tf.constant(x[0])), x[0] @ dense.T, rtol=1e-12,
                        atol=1e-12)


class RandomizedHadamardTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(1, 5, 64, 1000)
  def test_round_trip_with_padding(self, dim):
    rotation = hadamard.RandomizedHadamard(dim)
    x = tf.constant(np.random.default_rng(dim).normal(size=dim))
    seed = tf.constant([3, 4], tf.int64)
    y = rotation.encode(x, seed)
    self.assertEqual(y.shape, [rotation.output_dim])
    self.assertAllClose(np.linalg.norm(y), np.linalg.norm(x), rtol=1e-12)
    self.assertAllClose(rotation.decode(y, seed), x, rtol=1e-10, atol=1e-12)

  def test_signs_depend_on_seed_only(self):
    a = hadamard.random_signs(128, tf.constant([1, 2], tf.int64))
    b = hadamard.random_signs(128, tf.constant([1, 2], tf.int64))
    c = hadamard.random_signs(128, tf.constant([1, 3], tf.int64))
    self.assertAllEqual(a, b)
    self.assertNotAllEqual(a, c)
    self.assertAllEqual(np.abs(a), np.ones(128))

  def test_flattens_a_spike(self):
    # A one-hot vector becomes a column of H: every entry +-1/sqrt(d).
    d = 256
    x = tf.one_hot(7, d, dtype=tf.float64)
    y = hadamard.RandomizedHadamard(d).encode(x, tf.constant([0, 1], tf.int64))
    self.assertAllClose(np.abs(y), np.full(d, 1 / np.sqrt(d)), rtol=1e-12)


if __name__ == '__main__':
  harness.main()
