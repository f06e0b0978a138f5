"""Fuzz tests of tff_ddp.utils: the entry points of `utils_entry_points`,
and the clip of a float64 client."""

import numpy as np
import tensorflow as tf

from tff_ddp.utils import tensors
from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.utils_entry_points import ENTRY_POINTS

_CASES = fz.test_classes('Utils', ENTRY_POINTS, __name__)
SlowFuzzUtilsTest = _CASES[1]


class FuzzUtilsTest(_CASES[0]):

  def test_clipped_float64_client_keeps_its_direction(self):
    # The 1e200 client of the issue: clipped to (0, 10), not zeros or NaN.
    clipped, was = tensors.clip_to_norm(tf.constant([0.0, 1e200], tf.float64),
                                        10.0)
    self.assertTrue(bool(was))
    np.testing.assert_allclose(clipped.numpy(), [0.0, 10.0], rtol=1e-15)
