"""overflow_safe_norm and clip_to_norm: exact norms at extreme scales."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_ddp.utils import tensors


class OverflowSafeNormTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(1e-200, 1.0, 1e200)
  def test_scales(self, scale):
    v = np.array([3.0, 4.0]) * scale
    self.assertAllClose(tensors.overflow_safe_norm(tf.constant(v)),
                        5.0 * scale,
                        rtol=1e-14)

  def test_rows(self):
    v = np.array([[3.0, 4.0], [0.0, 0.0], [1e200, 1e200], [-1e-200, 0.0]])
    out = tensors.overflow_safe_norm(tf.constant(v), axis=-1)
    self.assertEqual(out.shape, (4,))
    self.assertAllClose(out, [5.0, 0.0, np.sqrt(2) * 1e200, 1e-200], rtol=1e-14)
    # axis=None is the norm of everything, a scalar.
    self.assertEqual(tensors.overflow_safe_norm(tf.constant(v[:2])).shape, ())

  def test_clip(self):
    v, clipped = tensors.clip_to_norm(tf.constant(np.array([3.0e200, 4.0e200])),
                                      1.0)
    self.assertTrue(clipped)
    self.assertAllClose(v, [0.6, 0.8], rtol=1e-14)
