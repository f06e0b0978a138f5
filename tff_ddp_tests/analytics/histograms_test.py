"""Quantile math: encodings, exact inverses, CDF estimators against numpy."""

import dataclasses
import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import simulation as sim


def _pav(y):
  """Pool-adjacent-violators isotonic regression (numpy reference)."""
  blocks = []  # (mean, weight)
  for v in y:
    blocks.append([v, 1.0])
    while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
      m2, w2 = blocks.pop()
      m1, w1 = blocks.pop()
      blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
  return np.concatenate([[m] * int(w) for m, w in blocks])


def _haar_reference(index, b):
  """Coefficients by definition: base 1, then a_left - a_right per node."""
  leaves = np.zeros(b)
  leaves[index] = 1
  out = [1.0]
  size = 2
  while size <= b:
    for start in range(0, b, size):
      half = size // 2
      out.append(leaves[start:start + half].sum() -
                 leaves[start + half:start + size].sum())
    size *= 2
  return np.array(out)


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class EncodingTest(tf.test.TestCase, parameterized.TestCase):

  def test_bin_index_clips(self):
    x = np.array([-1.0, 0.0, 0.99, 1.0, 9.99, 10.0, 11.0, np.nan])
    self.assertAllEqual(hg.bin_index(x, 0.0, 10.0, 10),
                        [0, 0, 0, 1, 9, 9, 9, 0])

  @parameterized.parameters('flat', 'tree', 'haar')
  def test_encodings_against_brute_force(self, method):
    b = 16
    a = hg.Tree(b).node_matrix()
    for i in range(b):
      got = hg.encoding(method, b).encode(tf.constant(i, tf.int64)).numpy()
      if method == 'flat':
        want = np.eye(b)[i]
      elif method == 'tree':
        want = a[:, i]
      else:
        want = _haar_reference(i, b)
      self.assertAllEqual(got, want)
      l1, l2, l0 = hg.encoding(method, b).sensitivities()
      self.assertEqual(np.abs(got).sum(), l1)
      self.assertAlmostEqual(np.linalg.norm(got), l2)
      self.assertEqual(np.count_nonzero(got), l0)

  def test_haar_decode_is_exact_inverse(self):
    b = 32
    rng = np.random.default_rng(0)
    idx = rng.integers(0, b, size=200)
    total = sum(
        hg.encoding('haar', b).encode(tf.constant(i, tf.int64)).numpy()
        for i in idx)
    leaves = hg.Haar(b).decode_matrix() @ total
    self.assertAllClose(leaves, np.bincount(idx, minlength=b), atol=1e-12)
    # And on any coefficient vector: decode(encode-matrix) == identity.
    enc = np.stack([_haar_reference(i, b) for i in range(b)], axis=1)
    self.assertAllClose(hg.Haar(b).decode_matrix() @ enc, np.eye(b), atol=1e-12)

  def test_dyadic_prefix_uses_at_most_log_nodes(self):
    b = 64
    p = hg.Tree(b).dyadic_prefix_matrix()
    a = hg.Tree(b).node_matrix()
    self.assertAllEqual(p @ a, np.tril(np.ones((b, b))))
    self.assertLessEqual(p.sum(axis=1).max(), math.log2(b))
    # j = 15 (1-based) = [1, 8] + [9, 12] + [13, 14] + [15] (paper's example).
    self.assertEqual(p[14].sum(), 4)

  @parameterized.parameters(2, 4, 8, 64, 256)
  def test_consistent_tree_is_least_squares(self, b):
    rng = np.random.default_rng(b)
    h = rng.normal(size=2 * b - 2) * 3 + 5
    a = hg.Tree(b).node_matrix()
    leaves, *_ = np.linalg.lstsq(a, h, rcond=None)
    cdf = hg.Tree(b).cdf(tf.constant(h), 1, consistent=True)
    self.assertAllClose(cdf, np.cumsum(leaves), rtol=1e-9, atol=1e-9)

  @parameterized.parameters(2, 4, 16, 128)
  def test_structured_estimators_equal_the_dense_references(self, b):
    rng = np.random.default_rng(b + 1)
    tree = rng.normal(size=2 * b - 2) * 4
    haar = rng.normal(size=b) * 4
    flat = rng.normal(size=b) * 4
    cum = np.tril(np.ones((b, b)))
    for method, h, k in (('tree', tree, hg.Tree(b).dyadic_prefix_matrix()),
                         ('haar', haar, cum @ hg.Haar(b).decode_matrix()),
                         ('flat', flat, cum)):
      cdf = hg.encoding(method, b).cdf(tf.constant(h), 1)
      self.assertAllClose(cdf, k @ h, rtol=1e-12, atol=1e-12)
      total = hg.encoding(method, b).estimated_total(tf.constant(h))
      self.assertAllClose(total, (k @ h)[-1], rtol=1e-12, atol=1e-12)
    self.assertAlmostEqual(hg.encoding('flat', b).total_norm, math.sqrt(b))

  def test_many_bins_without_quadratic_memory(self):
    b = 2**16
    rng = np.random.default_rng(0)
    for method in ('flat', 'tree', 'haar'):
      h = rng.normal(size=hg.encoding(method, b).length)
      cdf = hg.encoding(method, b).cdf(tf.constant(h),
                                       consistent=method == 'tree')
      self.assertEqual(cdf.shape, [b])
    with self.assertRaisesRegex(ValueError, 'num_bins'):
      hg.encoding('flat', 2**16 + 1)
    with self.assertRaisesRegex(ValueError, 'monotone'):
      hg.Flat(4096).cdf(tf.zeros([4096]), monotone=True)

  @parameterized.parameters(*[(m, c, cons)
                              for m in ('flat', 'tree', 'haar')
                              for c in ('estimated', 'exact')
                              for cons in (False, True)
                              if not (cons and m != 'tree')])
  def test_noise_free_cdf_is_empirical(self, method, count, consistent):
    b = 32
    rng = np.random.default_rng(2)
    values = rng.uniform(0, 10, size=100)
    idx = hg.bin_index(values, 0.0, 10.0, b).numpy()
    total = sum(
        hg.encoding(method, b).encode(tf.constant(i)).numpy() for i in idx)
    cdf = hg.encoding(method, b).cdf(tf.constant(total, tf.float64),
                                     100 if hg.exact_count(count) else None,
                                     consistent=consistent)
    self.assertAllClose(cdf, np.cumsum(np.bincount(idx, minlength=b)) / 100)

  def test_isotonic_matches_pav(self):
    rng = np.random.default_rng(3)
    for _ in range(20):
      y = np.cumsum(rng.normal(size=40)) * 0.1 + rng.normal(size=40)
      self.assertAllClose(hg.isotonic(tf.constant(y)), _pav(y))
    self.assertAllClose(hg.isotonic(tf.constant([3.0, 1.0, 2.0])),
                        [2.0, 2.0, 2.0])

  def test_quantile_indices_eq1_first_on_ties(self):
    cdf = tf.constant([0.125, 0.25, 0.5, 0.75, 1.0], tf.float64)
    # 0.375 is exactly between 0.25 and 0.5: the first wins.
    self.assertAllEqual(
        hg.quantile_indices(cdf, [0.1875, 0.375, 0.5, 0.95, 0.0]),
        [0, 1, 2, 4, 0])

  def test_quantile_values(self):
    cdf = tf.constant([0.25, 0.5, 0.75, 1.0], tf.float64)
    self.assertAllClose(hg.quantile_values(cdf, [0.5], 0.0, 4.0, 4), [2.0])
    self.assertAllClose(
        hg.quantile_values(cdf, [0.5, 0.125, 1.0],
                           0.0,
                           4.0,
                           4,
                           interpolate=True), [2.0, 0.5, 4.0])

  def test_graph_equals_eager(self):
    total = tf.constant(np.arange(30, dtype=np.float64))
    fn = tf.function(lambda t: hg.Tree(16).cdf(t, monotone=True))
    self.assertAllClose(fn(total), hg.Tree(16).cdf(total, monotone=True))

  def test_edges_end_at_upper_when_the_width_rounds(self):
    # upper - lower = 2^53 + 1 rounds to 2^53 in float64; the last edge is
    # still upper, and the edges stay increasing inside the range (found by
    # the fuzz test: the last edge was 0.0 for upper 1.0).
    right = hg.edges(np.float32(-2.0**53), 1.0, 4)
    self.assertEqual(right[-1], 1.0)
    self.assertTrue(np.all(np.diff(right) > 0))
    self.assertAllEqual(hg.edges(0.0, 1.0, 4), [0.25, 0.5, 0.75, 1.0])

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'power of two'):
      hg.encoding('tree', 24).encode(tf.constant(0, tf.int64))
    with self.assertRaisesRegex(ValueError, 'method'):
      hg.encoding('bars', 16)
    with self.assertRaisesRegex(ValueError, 'num_bins'):
      hg.encoding('flat', 1)
    with self.assertRaisesRegex(ValueError, 'lower_bound < upper_bound'):
      hg.bin_index([1.0], 1.0, 1.0, 4)
    with self.assertRaisesRegex(ValueError, 'count'):
      hg.exact_count('guess')
    with self.assertRaisesRegex(ValueError, 'num_clients'):
      hg.Flat(4).cdf(tf.zeros([4]), -1)
    with self.assertRaisesRegex(ValueError, 'consistent'):
      hg.Flat(4).cdf(tf.zeros([4]), 3, consistent=True)
    # Flags are booleans, not arrays (found by the fuzz test).
    with self.assertRaisesRegex(TypeError, 'consistent must be True or False'):
      hg.Flat(4).cdf(tf.zeros([4]), consistent=np.array([np.nan, np.nan]))
    with self.assertRaisesRegex(TypeError, 'monotone must be True or False'):
      hg.Flat(4).cdf(tf.zeros([4]), monotone='yes')
    for text in ('1.0', ['1', '2', '3', '4'], np.array(['1'] * 4)):
      with self.assertRaisesRegex(TypeError, 'noisy_sum must be a tensor of '
                                  'numbers'):
        hg.Flat(4).cdf(text)


def _registered():
  return [hg.encoding(name, b) for name in hg.METHODS for b in (2, 8, 32)]


class ContractTest(tf.test.TestCase, parameterized.TestCase):
  """What every `encodings.Encoding` promises, checked for each class
  defined (so a new method is checked by defining it)."""

  def test_resolved_once_into_its_class(self):
    for name in hg.METHODS:
      encoding = hg.encoding(name, 8)
      self.assertEqual(encoding.name, name)
      self.assertIs(hg.encoding(encoding), encoding)
      self.assertIs(hg.encoding(encoding, 8), encoding)
      self.assertEqual(hg.canonical_method(name), name)
      self.assertIsInstance(encoding.ring_constant, int)
      self.assertGreater(encoding.ring_constant, 0)
      self.assertIn(encoding.paper_count, hg.COUNTS)
    self.assertEqual(hg.encoding('hierarchical', 8), hg.Tree(8))
    self.assertEqual(hg.canonical_method('hierarchical'), 'tree')
    self.assertEqual(hg.METHODS, ('flat', 'tree', 'haar'))
    with self.assertRaisesRegex(ValueError, 'num_bins=16 differs'):
      hg.encoding(hg.Haar(8), 16)
    with self.assertRaisesRegex(
        ValueError, r"method must be one of \('flat', "
        r"'tree', 'haar', 'hierarchical'\)"):
      hg.encoding('dyadic', 8)
    with self.assertRaisesRegex(TypeError, 'method must be one of'):
      hg.encoding(3, 8)
    with self.assertRaisesRegex(TypeError, "named 'tree' exists"):

      class Again(hg.Flat):  # pylint: disable=unused-variable  # defining it is the test
        name = 'tree'

  def test_bins(self):
    for name in hg.METHODS:
      cls = type(hg.encoding(name, 2))
      with self.assertRaisesRegex(ValueError, 'num_bins'):
        cls(1)
      with self.assertRaisesRegex(TypeError, 'num_bins'):
        cls(8.0)
      if cls.needs_power_of_two:
        with self.assertRaisesRegex(ValueError, 'power of two'):
          cls(12)
      else:
        self.assertEqual(cls(12).num_bins, 12)

  def test_sensitivities_by_enumeration(self):
    for encoding in _registered():
      self.check_sensitivities(encoding)

  def test_noise_free_read_out_is_exact(self):
    for encoding in _registered():
      self.check_noise_free_read_out(encoding)

  def test_structured_read_outs_equal_the_references(self):
    for encoding in _registered():
      self.check_read_outs(encoding, traced=encoding.num_bins == 8)

  def test_consistent_read_out_only_where_declared(self):
    for encoding in _registered():
      self.check_consistent(encoding)

  def test_a_new_method_is_one_class(self):
    """The class checklist of `encodings.Encoding`, followed for a toy
    method (the one-hot of the mirrored bin), is all the package needs: the
    name resolves, the contract holds, and the calibration and the
    simulator take it."""

    @dataclasses.dataclass(frozen=True)
    class Mirrored(hg.Encoding):
      name = 'mirrored_test_only'
      ring_constant = 8  # as flat: one coordinate per bin
      paper_count = 'estimated'
      needs_power_of_two = False

      @property
      def length(self):
        return self.num_bins

      @property
      def l0(self):
        return 1

      @property
      def total_norm(self):
        return math.sqrt(self.num_bins)

      def _sparse_encoding(self, index):
        return (self.num_bins - 1 - index)[tf.newaxis], tf.ones([1], tf.int64)

      def _cumulative(self, noisy_sum, consistent):
        cum = tf.cumsum(tf.reverse(noisy_sum, [0]))
        return cum, cum[-1]

      def _total(self, noisy_sum):
        return tf.reduce_sum(noisy_sum)

      def cdf_matrix(self):
        b = self.num_bins
        return np.tril(np.ones((b, b)))[:, ::-1]

      def total_vector(self):
        return np.ones(self.num_bins)

    try:
      encoding = hg.encoding('mirrored_test_only', 6)
      self.assertEqual(encoding, Mirrored(6))
      for check in (self.check_sensitivities, self.check_noise_free_read_out,
                    self.check_read_outs, self.check_consistent):
        check(encoding)
      params = qc.quantile_parameters(encoding, 'poisson_binomial', 6,
                                      qc.QuantileSetting(64, 8.0, 1e-5))
      self.assertEqual(params.method, 'mirrored_test_only')
      values = np.random.default_rng(0).uniform(0.0, 6.0, 64)
      codes = sim.encodings(encoding, values, 0.0, 6.0)
      noisy = sim.noisy_sum('poisson_binomial', codes, params, seed=1)
      # The noise-free CDF is the empirical one, and the noisy one is near
      # it: per bin the noise has stddev <= noise_stddev(64) (one
      # coordinate per bin, independent), so the cumulative count j has
      # stddev <= sqrt(j) s; 6 of them.
      truth = np.cumsum(np.bincount(values.astype(int), minlength=6)) / 64
      self.assertAllClose(encoding.cdf(codes.sum(0), 64), truth)
      bound = 6 * params.noise_stddev(64) * np.sqrt(np.arange(1, 7)) / 64
      np.testing.assert_array_less(np.abs(encoding.cdf(noisy, 64) - truth),
                                   bound)
    finally:
      hg._CLASSES.pop('mirrored_test_only', None)  # pylint: disable=protected-access  # unregisters the test class

  # -- the checks --------------------------------------------------------

  def check_sensitivities(self, encoding):
    """Every bin's encoding touches exactly l0 coordinates with the l1 and
    l2 norms the calibration uses (a zero-out neighbour differs by one such
    encoding)."""
    codes = np.stack(
        [encoding.encode(i).numpy() for i in range(encoding.num_bins)])
    self.assertEqual(codes.shape, (encoding.num_bins, encoding.length))
    l1, l2, l0 = encoding.sensitivities()
    self.assertAllEqual(np.count_nonzero(codes, axis=1), [l0] * len(codes))
    self.assertAllClose(np.abs(codes).sum(axis=1), [l1] * len(codes))
    self.assertAllClose(np.linalg.norm(codes, axis=1), [l2] * len(codes))

  def check_noise_free_read_out(self, encoding):
    """Summed encodings read back as the counts: K e(i) = [j >= i] and
    t . e(i) = 1 for every bin i."""
    b = encoding.num_bins
    codes = np.stack([encoding.encode(i).numpy() for i in range(b)])
    self.assertAllClose(encoding.cdf_matrix() @ codes.T,
                        np.triu(np.ones((b, b))).T,
                        atol=1e-12)
    self.assertAllClose(codes @ encoding.total_vector(), np.ones(b))

  def check_read_outs(self, encoding, traced=True):
    """The structured (TF) read-outs are the dense references."""
    h = np.random.default_rng(4).normal(size=encoding.length) * 3.0
    self.assertAllClose(encoding.cdf(tf.constant(h), 1),
                        encoding.cdf_matrix() @ h,
                        rtol=1e-12,
                        atol=1e-12)
    self.assertAllClose(encoding.estimated_total(h),
                        encoding.total_vector() @ h,
                        rtol=1e-12)
    # Normalised by the estimated total, the last cumulative value (when it
    # is positive; else by 1).
    k = encoding.cdf_matrix() @ h
    self.assertAllClose(encoding.cdf(h),
                        k / (k[-1] if k[-1] > 0 else 1.0),
                        rtol=1e-9)
    self.assertAlmostEqual(encoding.total_norm,
                           np.linalg.norm(encoding.total_vector()))
    if traced:
      fn = tf.function(lambda x: encoding.cdf(x, 1, monotone=True))
      self.assertAllClose(fn(tf.constant(h)), encoding.cdf(h, 1, monotone=True))

  def check_consistent(self, encoding):
    h = tf.zeros([encoding.length], tf.float64)
    if encoding.has_consistent_estimator:
      self.assertEqual(
          encoding.cdf(h, 1, consistent=True).shape, [encoding.num_bins])
    else:
      with self.assertRaisesRegex(ValueError, "only applies to method="
                                  "'tree', not"):
        encoding.cdf(h, 1, consistent=True)
