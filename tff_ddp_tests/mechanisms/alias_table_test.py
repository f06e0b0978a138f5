"""Tests for tff_ddp.mechanisms.alias_table: the certified table core.

The laws' own tables (discrete Gaussian, Skellam) are tested in their test
files; here the core's proof obligations on inputs of our own: the built
table realises the quantised weights exactly (decoded by this file), the
certificate is the one of the docstring, recomputed from the inputs, and
inputs that break an obligation are refused.
"""

import dataclasses
import fractions

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import alias_table as core
from tff_ddp.mechanisms import discrete_gaussian_table as dt
from tff_ddp_tests.mechanisms import table_reference

_W = table_reference.W
_decode = table_reference.decode


class BuildTest(parameterized.TestCase):

  @parameterized.parameters(([1],), ([1, 2, 1],), ([3, 0, 5, 0, 3],),
                            ([7] * 9,), ([1, 10**30, 2**200 + 3, 10**30, 1],),
                            (list(range(1, 202)),))
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
      self.assertLess(
          abs(weights.get(x, 0) - fractions.Fraction(_W * a, big_a)), 1)
      q += abs(
          fractions.Fraction(weights.get(x, 0), _W) -
          fractions.Fraction(a, big_a))
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
    q = sum(
        abs(fractions.Fraction(weights[x], _W) - fractions.Fraction(a, big_a))
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


class TrimmedLowTest(tf.test.TestCase, parameterized.TestCase):
  """`low` keeps K = 2t + 1 rows, not 2^b (docs/notes/certified_tables.md,
  alias_table.py's CONSTRUCTION step 3): the lookup must be the same function of
  (J, U) as with all 2^b rows, the missing rows being zero words."""

  def _assert_same_outputs(self, table, k, seed):
    b = table.log2_columns
    full = dataclasses.replace(
        table,
        low=np.concatenate([
            table.low,
            np.zeros([2**b - len(table.low), core.LOW_WORDS], np.int64)
        ]))
    cols, u_tops, ties, us = table_reference.crafted_draws(
        table, k, np.random.default_rng(seed))
    expected = []
    for j, u in zip(cols, us):
      alias = int(table.packed[j]) % 2**b
      keep = table_reference.threshold(table, j)  # missing rows: 0
      expected.append((j if u < keep else alias) - table.t)
    # Read through the first level too where it applies (k >= 31 - b).
    levels = (False, True) if k >= 31 - b else (False,)
    for unconditional in (False, True):
      for first_level in levels:
        outputs = [
            core.lookup(t,
                        tf.constant(cols, tf.int64),
                        tf.constant(u_tops, tf.int64),
                        lambda: tf.constant(ties, tf.int64),
                        top_bits=k,
                        unconditional_ties=unconditional,
                        first_level=first_level).numpy() for t in (table, full)
        ]
        np.testing.assert_array_equal(outputs[0], outputs[1])
        np.testing.assert_array_equal(outputs[0], expected)

  @parameterized.product(lower=([3, 0, 5, 0, 3], list(range(1, 202)), [1] * 9),
                         top_bits=(None, 3, 'first'))
  def test_built_tables_keep_k_rows_and_the_full_outputs(self, lower, top_bits):
    # K = 5, 201, 9 points in 8, 256, 16 columns: 3 to 55 columns beyond
    # K, each tied at every level of U; k = 3 top bits leaves a mid field.
    table = core.build(fractions.Fraction(1), lower, 0,
                       fractions.Fraction(1, 2**240))
    self.assertEqual(table.low.shape, (len(lower), core.LOW_WORDS))
    self.assertLess(len(lower), 2**table.log2_columns)
    b = table.log2_columns
    k = {None: 63 - b, 'first': 31 - b}.get(top_bits, top_bits)
    self._assert_same_outputs(table, k, seed=len(lower))

  @parameterized.parameters(None, 3, 27)
  def test_any_packed_entries_beyond_the_rows(self, top_bits):
    # Arbitrary words, including non-zero top fields and aliases in the
    # columns beyond the stored rows (a build never makes those: this
    # checks the lookup's reading of a missing row itself, at the
    # comparison's every level, whichever of top / mid / low decides).
    rng = np.random.default_rng(11)
    b, rows = 4, 6
    table = core.AliasTable(law=fractions.Fraction(1),
                            t=3,
                            log2_columns=b,
                            packed=rng.integers(0, 2**63, 2**b, dtype=np.int64),
                            low=rng.integers(0,
                                             2**63, [rows, core.LOW_WORDS],
                                             dtype=np.int64),
                            tv_bound=fractions.Fraction(0),
                            build_seconds=0.0)
    k = 63 - b if top_bits is None else top_bits
    self._assert_same_outputs(table, k, seed=12)

  def test_decoder_reads_missing_rows_as_zero(self):
    table = core.build(fractions.Fraction(1), [3, 0, 5, 0, 3], 0,
                       fractions.Fraction(1, 2**240))
    b = table.log2_columns
    full = np.concatenate([
        table.low,
        np.zeros([2**b - len(table.low), core.LOW_WORDS], np.int64)
    ])
    self.assertEqual(core.column_weights(table.packed, table.low, b),
                     core.column_weights(table.packed, full, b))


class FirstLevelTest(tf.test.TestCase):
  """A table of b >= FIRST_LEVEL_MIN_BITS is read through its int32 first level
  by default (docs/notes/certified_tables.md, SAMPLING): the same outputs as the
  one-level read. The crafted draws of `TrimmedLowTest` check it at every tie
  level on small tables (first_level forced); here the default path of a real
  table at b = 18."""

  def test_first_level_entries(self):
    table = core.build(fractions.Fraction(1), list(range(1, 202)), 0,
                       fractions.Fraction(1, 2**240))
    b = table.log2_columns
    for j in range(2**b):
      top = int(table.packed[j]) >> b  # 63 - b bits
      self.assertEqual(int(table.first_level[j]),
                       ((top >> 32) << b) | (int(table.packed[j]) % 2**b))
    self.assertEqual(table.first_level.dtype, np.int32)

  def test_default_read_of_a_large_table_equals_the_one_level_read(self):
    # The discrete Gaussian table at scale 3700: T = 66,489, 2^18 columns.
    # 2^18 draws per seed meet ~2^18 2^-13 = 32 first-level ties each.
    table = dt.alias_table(3700.0)
    b = table.log2_columns
    self.assertEqual(b, core.FIRST_LEVEL_MIN_BITS)
    n = 2**18
    ties_seen = 0
    for s in range(3):
      seed = tf.constant([s, 5], tf.int64)
      word = core.words([n], core.fold(seed, 0))
      column = tf.bitwise.bitwise_and(word, 2**b - 1)
      u_top = tf.bitwise.bitwise_and(word, core.top_mask(63 - b))
      extra = lambda: core.words([n, core.TIE_WORDS], core.fold(seed, 1))
      one_level = core.lookup(table, column, u_top, extra,
                              first_level=False).numpy()
      np.testing.assert_array_equal(
          core.sample(tf.constant(n), table, seed).numpy(), one_level)
      first = table.first_level[column.numpy()] >> b
      ties_seen += int(np.sum(first == (u_top.numpy() >> (32 + b))))
    self.assertGreater(ties_seen, 0)  # the exact path was taken
