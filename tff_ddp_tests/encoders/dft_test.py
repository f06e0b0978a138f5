"""Tests of the randomized DFT encoder (TFF's rotation_type='dft')."""

import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.encoders import dft
from tff_ddp.encoders import make_encoder

_SEED = tf.constant([11, 12], tf.int64)


def _reference(x, seed):
  """numpy's FFT of the phased pairs: the map of docs/notes/dft_rotation.md."""
  d = len(x)
  padded = np.zeros(dft.padded_dimension(d))
  padded[:d] = x
  n = len(padded) // 2
  k = dft.random_phases(n, seed).numpy()
  z = (padded[0::2] + 1j * padded[1::2]) * (1j**k)
  w = np.fft.fft(z) / math.sqrt(n)
  return np.concatenate([w.real, w.imag])


class DftTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(1, 2, 3, 8, 17, 100, 1025)
  def test_matches_reference_round_trip_and_isometry(self, d):
    enc = dft.RandomizedDft(d)
    self.assertEqual(enc.output_dim, max(2, d + d % 2))
    x = np.random.default_rng(d).normal(size=d)
    y = enc.encode(tf.constant(x), _SEED).numpy()
    self.assertAllClose(y, _reference(x, _SEED), rtol=0, atol=1e-12)
    self.assertAllClose(np.linalg.norm(y), np.linalg.norm(x), rtol=1e-13)
    self.assertAllClose(enc.decode(tf.constant(y), _SEED),
                        x,
                        rtol=0,
                        atol=1e-12)
    residual = enc.encode_with_residual(tf.constant(x), _SEED)[1]
    self.assertEqual(float(residual), 0.0)

  def test_pads_to_even_not_power_of_two(self):
    # The point of the DFT: 2^k + 1 pads to 2^k + 2 (Hadamard: 2^(k+1)).
    for k in (4, 10, 16):
      self.assertEqual(dft.RandomizedDft(2**k + 1).output_dim, 2**k + 2)
      self.assertEqual(
          make_encoder('hadamard', 2**k + 1).output_dim, 2**(k + 1))

  def test_worked_example_phases_are_exact(self):
    # x = (3, 4): one complex number 3 + 4i times i^k, k in {0, 1, 2, 3}.
    enc = dft.RandomizedDft(2)
    seen = set()
    for s in range(40):
      seed = tf.constant([s, 0], tf.int64)
      y = tuple(enc.encode(tf.constant([3.0, 4.0], tf.float64), seed).numpy())
      self.assertIn(y, {(3.0, 4.0), (-4.0, 3.0), (-3.0, -4.0), (4.0, -3.0)})
      seen.add(y)
      self.assertAllEqual(enc.decode(tf.constant(y), seed), [3.0, 4.0])
    self.assertLen(seen, 4)

  def test_float32(self):
    enc = dft.RandomizedDft(9)
    x = np.random.default_rng(1).normal(size=9).astype(np.float32)
    y = enc.encode(tf.constant(x), _SEED)
    self.assertEqual(y.dtype, tf.float32)
    self.assertAllClose(enc.decode(y, _SEED), x, atol=1e-5)

  def test_seeds_differ_and_graph_equals_eager(self):
    enc = dft.RandomizedDft(10)
    x = tf.constant(np.random.default_rng(2).normal(size=10))
    a = enc.encode(x, _SEED)
    self.assertNotAllClose(a, enc.encode(x, tf.constant([1, 2], tf.int64)))
    self.assertAllClose(a, tf.function(enc.encode)(x, _SEED), atol=1e-14)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'dim'):
      dft.RandomizedDft(0)
    with self.assertRaisesRegex(TypeError, 'dim'):
      dft.RandomizedDft(2.5)
    with self.assertRaisesRegex(ValueError, 'MAX_OUTPUT_DIM'):
      dft.RandomizedDft(2**26 + 1)
    with self.assertRaisesRegex(TypeError, 'float'):
      dft.RandomizedDft(3).encode(tf.constant([1, 2, 3]), _SEED)

  def test_registry(self):
    self.assertIsInstance(make_encoder('dft', 5), dft.RandomizedDft)


@pytest.mark.slow  # statistical: `make test` runs it
class CoordinateVarianceTest(tf.test.TestCase, parameterized.TestCase):
  """Every output coordinate has variance ||x||^2 / D over the public seed, for
  every input (docs/notes/dft_rotation.md, "Why complex phases"), also inputs
  concentrated on the first coordinates, where real +-1 signs give
  2 ||x||^2 / D."""

  @parameterized.named_parameters(('e0', 'e0'), ('first_half', 'half'))
  def test_variance_is_norm_squared_over_d(self, kind):
    d, draws = 16, 4000
    x = np.zeros(d)
    if kind == 'e0':
      x[0] = 1.0
    else:
      x[:d // 2] = np.random.default_rng(5).normal(size=d // 2)
    enc = dft.RandomizedDft(d)
    encode = tf.function(enc.encode)
    y = np.stack([
        encode(tf.constant(x), tf.constant([s, 99], tf.int64)).numpy()
        for s in range(draws)
    ])
    # E y_m = 0 (the phase is symmetric), so E y_m^2 is the variance; its
    # estimate is a mean of `draws` i.i.d. squares, standard error
    # sd(y_m^2) / sqrt(draws) (for e_0: y_m^2 is 1/N or 0 with probability
    # 1/2 each, sd = 1 / (2N)). 5 standard errors per coordinate: a false
    # failure among the 16 coordinates has probability < 1e-5.
    target = np.dot(x, x) / enc.output_dim
    second = np.mean(y**2, axis=0)
    se = np.std(y**2, axis=0, ddof=1) / math.sqrt(draws)
    self.assertTrue(np.all(np.abs(second - target) <= 5 * se + 1e-15),
                    msg=f'{second} vs {target} (se {se})')
    # Real +-1 signs would put the e_0 case at twice the target on every
    # coordinate (|Re w_m| = 1 / sqrt(N) for every seed): 1/(2N) above,
    # i.e. sqrt(draws) = 63 standard errors; the test tells them apart.
    self.assertTrue(np.all(5 * se < target / 2))
