"""Tests for tff_ddp.mechanisms.alias_table: the certified table core.

The laws' own tables (discrete Gaussian, Skellam) are tested in their test
files; here the core's proof obligations on inputs of our own: the built
table realises the quantised weights exactly (decoded by this file), the
certificate is the one of the docstring, recomputed from the inputs, and
inputs that break an obligation are refused.
"""

import fractions

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import alias_table as core
from tff_ddp_tests import harness
from tff_ddp_tests.mechanisms import table_reference

_W = table_reference.W
_decode = table_reference.decode


class BuildTest(parameterized.TestCase):

  @parameterized.parameters(
      ([1],), ([1, 2, 1],), ([3, 0, 5, 0, 3],), ([7] * 9,),
      ([1, 10**30, 2**200 + 3, 10**30, 1],), (list(range(1, 202)),))
  def test_table_realises_the_largest_remainder_weights(self, lower):
    tail = fractions.Fraction(1, 2**240)
    table = core.build(fractions.Fraction(1), lower, 0, tail)
    t = len(lower) // 2
    self.assertEqual(table.t, t)
    # b = ceil(log2 K): the fewest power-of-two columns that hold K points.
    self.assertGreaterEqual(2**table.log2_columns, len(lower))
    self.assertLess(2**table.log2_columns, max(2 * len(lower) - 1, 2))
    weights = _decode(table)
    self.assertEqual(sum(weights.values()), _W)
    big_a = sum(lower)
    q = fractions.Fraction(0)
    for x, a in zip(range(-t, t + 1), lower):
      # Within one unit of W a / A (step 1), zero outside the support.
      self.assertLess(abs(weights.get(x, 0) - fractions.Fraction(_W * a,
                                                                 big_a)), 1)
      q += abs(fractions.Fraction(weights.get(x, 0), _W)
               - fractions.Fraction(a, big_a))
    self.assertEqual({x for x, w in weights.items() if w},
                     {x for x, a in zip(range(-t, t + 1), lower) if a})
    # gap 0: rho = 0, so the certificate is Q / 2 + tail exactly.
    self.assertEqual(table.tv_bound, q / 2 + tail)
    self.assertLess(table.tv_bound, core.TV_DISTANCE_UPPER_BOUND)

  def test_rho_enters_the_certificate(self):
    lower = [5, 9, 5]
    gap = 1
    lower = [v * 2**250 for v in lower]
    table = core.build(fractions.Fraction(1), lower, gap, fractions.Fraction(0))
    big_a = sum(lower)
    weights = _decode(table)
    q = sum(abs(fractions.Fraction(weights[x], _W)
                - fractions.Fraction(a, big_a))
            for x, a in zip((-1, 0, 1), lower))
    self.assertEqual(table.tv_bound,
                     (q + fractions.Fraction(2 * gap, big_a)) / 2)

  @parameterized.named_parameters(
      ('even_support', [1, 1], 0, 0, 'odd support'),
      ('rho', [2**200] * 3, 2**-39 * 2**200 * 3, 0, 'rho'),
      ('tail', [1, 1, 1], 0, fractions.Fraction(1, 2**232), 'tail'),
      ('negative', [1, -1, 1], 0, 0, 'a\\(x\\) >= 0'),
      ('zero', [0, 0, 0], 0, 0, 'A > 0'))
  def test_refuses_broken_obligations(self, lower, gap, tail, pattern):
    gap = int(gap)
    with self.assertRaisesRegex(AssertionError, pattern):
      core.build(fractions.Fraction(1), lower, gap, fractions.Fraction(tail))


class LookupTest(tf.test.TestCase):

  def test_top_mask(self):
    self.assertEqual(core.top_mask(63), 2**63 - 1)
    self.assertEqual(core.top_mask(1), 2**62)
    self.assertEqual(core.top_mask(20), (2**20 - 1) << 43)

  def test_sample_frequencies_of_a_small_law(self):
    # Law 1:2:1 on {-1, 0, 1}; 200000 draws: each frequency within 5
    # standard errors sqrt(p (1 - p) / n) (false failure < 1e-6 each).
    table = core.build(fractions.Fraction(1), [1, 2, 1], 0,
                       fractions.Fraction(0))
    n = 200_000
    x = core.sample(tf.constant(n), table, tf.constant([3, 4], tf.int64))
    x = x.numpy()
    for value, p in ((-1, 0.25), (0, 0.5), (1, 0.25)):
      self.assertLess(abs(np.mean(x == value) - p),
                      5 * np.sqrt(p * (1 - p) / n))
    self.assertTrue(np.all(np.abs(x) <= 1))


if __name__ == '__main__':
  harness.main()
