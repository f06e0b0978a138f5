"""The histogram encodings and estimators as plain functions of a method's
name: the form the `tff_ddp.analytics.quantiles.encodings.Encoding` classes
replaced, kept as the oracle of their claim to give the same bits.

`histograms_pinned_test` compares the classes with these functions in one
process, bit for bit. Both run the same TensorFlow ops on the same shapes in
the same order (cumulative sums, sums over a level's nodes, the conjugate
gradients of the consistent tree, the isotonic fit), so their outputs agree
on any machine, although those floats themselves may differ in their last
bits from one instruction set to another. Argument checks are left out: the
oracle only sees the test's valid inputs.
"""

import math

import numpy as np
import tensorflow as tf

METHODS = ('flat', 'tree', 'haar')


def _levels(num_bins: int) -> int:
  return num_bins.bit_length() - 1


def encoding_length(method: str, num_bins: int) -> int:
  """Length of one client's encoding."""
  return {'flat': num_bins, 'tree': 2 * num_bins - 2, 'haar': num_bins}[method]


def sensitivities(method: str, num_bins: int):
  """(l1, l2, l0) of one client's encoding."""
  levels = _levels(num_bins)
  touched = {'flat': 1, 'tree': levels, 'haar': levels + 1}[method]
  return float(touched), math.sqrt(touched), touched


def total_norm(method: str, num_bins: int) -> float:
  """||t||_2 of the estimated-total functional t."""
  return {
      'flat': math.sqrt(num_bins),
      'tree': math.sqrt(2.0),
      'haar': 1.0
  }[method]


def _tree_nodes(index, levels):
  """Position in the tree layout of the node at each level r containing bin
  `index`: offset(r) + (index >> r), offset(r) = sum_{s<r} b / 2^s."""
  b = 1 << levels
  out, offset = [], 0
  for r in range(levels):
    out.append(offset + tf.bitwise.right_shift(index, r))
    offset += b >> r
  return tf.stack(out, axis=-1)


def _haar_nodes(index, levels):
  """(positions, signs) of the base and the level-1..L nodes above `index`."""
  b = 1 << levels
  pos = [tf.zeros_like(index)]
  sign = [tf.ones_like(index)]
  offset = 1
  for l in range(1, levels + 1):
    pos.append(offset + tf.bitwise.right_shift(index, l))
    left = tf.equal(
        tf.bitwise.bitwise_and(tf.bitwise.right_shift(index, l - 1), 1), 0)
    sign.append(tf.where(left, tf.ones_like(index), -tf.ones_like(index)))
    offset += b >> l
  return tf.stack(pos, axis=-1), tf.stack(sign, axis=-1)


def encode(method: str, index, num_bins: int) -> tf.Tensor:
  """One client's encoding of its bin `index` (int64 scalar): int64 vector."""
  levels = _levels(num_bins)
  index = tf.cast(index, tf.int64)
  length = encoding_length(method, num_bins)
  if method == 'flat':
    positions = index[tf.newaxis]
    values = tf.ones([1], tf.int64)
  elif method == 'tree':
    positions = _tree_nodes(index, levels)
    values = tf.ones([levels], tf.int64)
  else:
    positions, values = _haar_nodes(index, levels)
  return tf.scatter_nd(positions[:, tf.newaxis], values, [length])


def _dyadic_nodes(b: int) -> np.ndarray:
  """[b, L + 1] int64: the tree positions of the maximal dyadic partition of
  the first j + 1 bins (row j), -1 where a level contributes nothing."""
  levels = _levels(b)
  offsets = [sum(b >> s for s in range(r)) for r in range(levels)]
  out = -np.ones((b, levels + 1), np.int64)
  for j in range(1, b + 1):  # prefix of j bins
    if j == b:  # the two top nodes (the root is not sent)
      out[j - 1, 0] = offsets[levels - 1]
      out[j - 1, 1] = offsets[levels - 1] + 1
      continue
    for r in range(levels - 1, -1, -1):
      if j & (1 << r):
        out[j - 1, r] = offsets[r] + (j >> r) - 1
  return out


def _tree_node_sums(leaves: tf.Tensor, b: int) -> tf.Tensor:
  """A x: the node sums (tree layout) of leaf values x (float64 [b])."""
  parts = []
  for r in range(_levels(b)):
    parts.append(tf.reduce_sum(tf.reshape(leaves, [b >> r, 1 << r]), 1))
  return tf.concat(parts, 0)


def _tree_adjoint(nodes: tf.Tensor, b: int) -> tf.Tensor:
  """A^T h: each leaf gets the sum of the values of its ancestors."""
  out = tf.zeros([b], tf.float64)
  offset = 0
  for r in range(_levels(b)):
    level = nodes[offset:offset + (b >> r)]
    out += tf.repeat(level, 1 << r)
    offset += b >> r
  return out


def _consistent_leaves(nodes: tf.Tensor, b: int) -> tf.Tensor:
  """argmin_x ||A x - h||_2 by L + 3 conjugate gradient steps."""
  rhs = _tree_adjoint(nodes, b)
  x = tf.zeros([b], tf.float64)
  r = rhs
  p = r
  rr = tf.reduce_sum(r * r)
  for _ in range(_levels(b) + 3):
    ap = _tree_adjoint(_tree_node_sums(p, b), b)
    step = tf.math.divide_no_nan(rr, tf.reduce_sum(p * ap))
    x += step * p
    r -= step * ap
    rr_new = tf.reduce_sum(r * r)
    p = r + tf.math.divide_no_nan(rr_new, rr) * p
    rr = rr_new
  return x


def _haar_leaves(coefficients: tf.Tensor, b: int) -> tf.Tensor:
  """The exact inverse of the Haar encoding, top down, O(b)."""
  sums = coefficients[:1]  # the root's sum: the base coefficient
  start = b  # the level-L node is the last coefficient
  for l in range(_levels(b), 0, -1):
    count = b >> l
    start -= count
    diffs = coefficients[start:start + count]
    left, right = (sums + diffs) / 2.0, (sums - diffs) / 2.0
    sums = tf.reshape(tf.stack([left, right], axis=1), [-1])
  return sums


def _unnormalised_cdf(method, noisy_sum, b, consistent):
  """(cumulative counts at the b right edges, the estimated total)."""
  if method == 'flat':
    cum = tf.cumsum(noisy_sum)
    return cum, cum[-1]
  if method == 'haar':
    cum = tf.cumsum(_haar_leaves(noisy_sum, b))
    return cum, noisy_sum[0]
  top = 2 * b - 4  # the two nodes of level L - 1
  total = noisy_sum[top] + noisy_sum[top + 1]
  if consistent:
    return tf.cumsum(_consistent_leaves(noisy_sum, b)), total
  nodes = tf.constant(_dyadic_nodes(b))
  picked = tf.gather(noisy_sum, tf.maximum(nodes, 0))
  cum = tf.reduce_sum(tf.where(nodes >= 0, picked, 0.0), axis=1)
  return cum, total


def isotonic(f: tf.Tensor) -> tf.Tensor:
  """Least-squares non-decreasing fit of a rank-1 tensor (O(b^2) min-max):
  g_j = max_{i <= j} min_{k >= j} mean(f[i..k])."""
  f = tf.cast(f, tf.float64)
  b = tf.shape(f)[0]
  s = tf.concat([tf.zeros([1], tf.float64), tf.cumsum(f)], 0)
  i = tf.range(b)[:, tf.newaxis]
  k = tf.range(b)[tf.newaxis, :]
  count = tf.cast(k - i + 1, tf.float64)
  means = (tf.gather(s, k + 1) - tf.gather(s, i)) / tf.maximum(count, 1.0)
  valid = k >= i
  big = tf.constant(np.inf, tf.float64)
  means = tf.where(valid, means, big)  # only k >= i
  # suffix min over k >= j, for each i: reverse cumulative min along axis 1.
  suffix_min = tf.reverse(
      tf.scan(tf.minimum, tf.reverse(tf.transpose(means), [0])), [0])
  suffix_min = tf.transpose(suffix_min)  # [i, j] = min_{k >= j} means[i, k]
  # max over i <= j.
  masked = tf.where(i <= k, suffix_min, -big)
  return tf.reduce_max(masked, axis=0)


def estimate_cdf(method: str,
                 noisy_sum,
                 num_bins: int,
                 count: str,
                 num_clients=None,
                 consistent: bool = False,
                 monotone: bool = False) -> tf.Tensor:
  """CDF estimates at the b right bin edges (float64 [b]): divided by the
  estimated total (count='estimated') or by num_clients ('exact')."""
  b = num_bins
  noisy_sum = tf.reshape(tf.cast(noisy_sum, tf.float64),
                         [encoding_length(method, b)])
  cum, estimated = _unnormalised_cdf(method, noisy_sum, b, consistent)
  total = (tf.cast(num_clients, tf.float64) if count == 'exact' else estimated)
  # A total <= 0 (no clients, or noise) leaves nothing to normalise by.
  cdf = cum / tf.where(total > 0, total, tf.ones_like(total))
  if monotone:
    cdf = tf.clip_by_value(isotonic(cdf), 0.0, 1.0)
  return cdf


def estimated_total(method: str, noisy_sum, num_bins: int) -> tf.Tensor:
  """The noisy total count read from the noisy sum."""
  b = num_bins
  noisy_sum = tf.cast(noisy_sum, tf.float64)
  return {
      'flat': lambda: tf.reduce_sum(noisy_sum),
      'tree': lambda: noisy_sum[2 * b - 4] + noisy_sum[2 * b - 3],
      'haar': lambda: noisy_sum[0]
  }[method]()
