"""Randomized Walsh-Hadamard rotation: exact math against numpy/scipy."""

from absl.testing import parameterized
import numpy as np
import scipy.linalg
import tensorflow as tf

from tff_ddp.encoders import hadamard


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
    self.assertAllClose(hadamard.fast_walsh_hadamard(tf.constant(x)),
                        dense @ x,
                        rtol=1e-12,
                        atol=1e-12)

  def test_is_involution(self):
    x = tf.constant(np.random.default_rng(0).normal(size=64))
    self.assertAllClose(hadamard.fast_walsh_hadamard(
        hadamard.fast_walsh_hadamard(x)),
                        x,
                        rtol=1e-12,
                        atol=1e-12)

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
    fn = tf.function(hadamard.fast_walsh_hadamard,
                     input_signature=[tf.TensorSpec([None, d], tf.float64)])
    self.assertAllClose(fn(tf.constant(x[0])),
                        x[0] @ dense.T,
                        rtol=1e-12,
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

  @parameterized.parameters(1, 8, 13, 1000)
  def test_signs_are_the_bits_of_the_seeded_bytes(self, dim):
    # Sign 8i + j is +1 iff bit j of byte i is set, the bytes being
    # uniform Philox draws on [0, 256) (so the signs are iid uniform).
    seed = tf.constant([7, 8], tf.int64)
    values = tf.random.stateless_uniform([-(-dim // 8)],
                                         seed=seed,
                                         minval=0,
                                         maxval=256,
                                         dtype=tf.int32).numpy().astype(
                                             np.uint8)
    bits = np.unpackbits(values, bitorder='little')[:dim]
    self.assertAllEqual(hadamard.random_signs(dim, seed), 2.0 * bits - 1)
    scaled = hadamard.random_signs(dim, seed, tf.float32, 0.25)
    self.assertEqual(scaled.dtype, tf.float32)
    self.assertAllEqual(scaled, (2.0 * bits - 1) / 4)

  def test_flattens_a_spike(self):
    # A one-hot vector becomes a column of H: every entry +-1/sqrt(d).
    d = 256
    x = tf.one_hot(7, d, dtype=tf.float64)
    y = hadamard.RandomizedHadamard(d).encode(x, tf.constant([0, 1], tf.int64))
    self.assertAllClose(np.abs(y), np.full(d, 1 / np.sqrt(d)), rtol=1e-12)


class Float32BoundTest(tf.test.TestCase, parameterized.TestCase):
  """`float32_error_bound`: encode in float32 vs the exact rotation."""

  @parameterized.parameters(2, 16, 512, 2048, 8192)
  def test_float32_encode_is_within_the_bound(self, d):
    # Against the rotation in float64 (its own error ~1e-16 relative, far
    # below the bound ~1e-5); a precision bug (bfloat16 products, a lost
    # normalisation) shows as an error of 1e-3 or more.
    rotation = hadamard.RandomizedHadamard(d)
    seed = tf.constant([d, 3], tf.int64)
    signs = hadamard.random_signs(d, seed).numpy()
    spike = np.zeros(d)
    spike[d // 3] = 1e3
    column = signs * scipy.linalg.hadamard(d)[:, 1 % d] / np.sqrt(d)
    rng = np.random.default_rng(d)
    bound = rotation.float32_error
    for x in (rng.normal(size=d) * 1e5, rng.uniform(size=d), spike, np.ones(d),
              column * 123.25, rng.standard_cauchy(size=d)):
      x32 = np.float32(x)
      exact = rotation.encode(tf.constant(x32, tf.float64), seed).numpy()
      got = rotation.encode(tf.constant(x32), seed).numpy()
      self.assertEqual(got.dtype, np.float32)
      err = np.linalg.norm(got.astype(np.float64) - exact)
      self.assertLessEqual(err, bound * np.linalg.norm(x32.astype(np.float64)))

  def test_bound_formula(self):
    # (1 + u)^3 (1 + 4 * 15u / (1 - 15u))^5 - 1 at d = 2^20, u = 2^-24.
    u = 2.0**-24
    expected = (1 + u)**3 * (1 + 4 * 15 * u / (1 - 15 * u))**5 - 1
    self.assertAlmostEqual(hadamard.float32_error_bound(2**20) / expected,
                           1.0,
                           delta=1e-6)
    self.assertGreater(hadamard.float32_error_bound(2**20), expected)
