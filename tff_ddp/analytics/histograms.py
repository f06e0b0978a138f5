"""The math of federated DP quantiles: client encodings and CDF estimators.

Papers: the federated DP quantiles paper (Algorithm 1 flat histograms,
Algorithm 2 hierarchical histograms, eq. 1 the nearest-bin-edge rule, eq. 3
the error) and Chen et al., "Federated frequency estimation" (Section 4.2,
eqs. 6-7, the discrete Haar wavelet transform).

Bins: [lower, upper] is cut into b = `num_bins` bins of width
w = (upper - lower) / b with right edges l_j = lower + j w, j = 1..b. A value
falls in bin i (0-based) if lower + i w <= x < lower + (i + 1) w; values
below `lower` go to bin 0, values >= upper (including upper itself) to bin
b - 1 (clipping, documented in the process). The CDF is estimated at the
right edges: F_j = #{x <= l_j-ish} / n = (h_1 + ... + h_j) / n.

Client encodings (one value -> an integer vector; the aggregator sums them):

* flat (Algorithm 1): one-hot of length b. l1 = l2 = 1.
* tree (Algorithm 2): node (r, o) counts bins [o 2^r, (o + 1) 2^r) for levels
  r = 0 (bins) .. L - 1 (the two halves), L = log2 b; the root (the public
  count n) is skipped. Layout: level 0's b nodes, then level 1's b/2, ...,
  then level L - 1's 2: length 2b - 2. A client has a 1 in one node per
  level: l1 = L, l2 = sqrt(L).
* haar (eq. 6 rescaled, §4.2): coefficient 0 is the base (the client's
  count, 1); then for levels l = 1..L (a level-l node spans 2^l bins), in
  the order level 1's b/2 nodes, level 2's b/4, ..., level L's 1 node (the
  root), D = a_left - a_right in {-1, 0, +1}: length b. A client has
  +-1 in one node per level: l1 = L + 1, l2 = sqrt(L + 1).
  Exact inverse (derived here; the paper's eq. 7 prints H_0 where the
  average H_0 / b belongs): going down from a node with sum S, the children
  have sums (S + D) / 2 and (S - D) / 2, so leaf v has
  c[v] = T / b + sum_l g_l[v] D_l[v] / 2^l, T the base, g = +1 (-1) if v is
  in the left (right) subtree of its level-l ancestor. `haar_decode` is this
  map; it inverts `haar_encode` exactly on sums.

Server estimators: every method's estimate is linear in the noisy sum,
applied with structured O(b log b) operations (never a dense b x b matrix;
the `*_matrix` functions are small-b references for tests), followed by
optional post-processing:

* flat: F_j = cumsum(h)_j / N;
* tree: F_j = sum of the nodes of the maximal dyadic partition of [0, j)
  (Algorithm 2, <= L nodes) / N; or, with `consistent=True`, the
  least-squares consistent tree (Hay et al. 2010): the leaves x minimising
  ||A x - H||_2 for the node-sum matrix A, then F = cumsum(x) / N, solved
  by conjugate gradients on A^T A x = A^T H (A^T A has L + 1 distinct
  eigenvalues, one per Haar level, so L + 1 steps are exact in exact
  arithmetic; we run L + 3);
* haar: F_j = cumsum(haar_decode(H))_j / N;

with N the exact count n (`count='exact'`, Algorithm 1 option 2) or the
estimated total (`count='estimated'`, option 1: sum of bins / of the two top
nodes / the base coefficient). `quantile_indices` then applies eq. 1;
`monotone=True` first replaces F by its isotonic (non-decreasing,
least-squares) projection clipped to [0, 1], which the papers do not do; it
costs O(b^2) memory, so it is limited to MAX_MONOTONE_BINS bins.
"""

import math
from typing import Sequence

import numpy as np
import tensorflow as tf

from tff_ddp.utils import checks

METHODS = ('flat', 'tree', 'haar')
ALIASES = {'hierarchical': 'tree'}  # the quantile paper's name for 'tree'
COUNTS = ('estimated', 'exact')
# Bins: estimators are O(b log b), encodings O(log b) per client.
MAX_BINS = 2**16
# The isotonic projection is O(b^2) in memory (8 MiB per 1024^2 entries).
MAX_MONOTONE_BINS = 2048
# The dense reference matrices are O(b^2).
_MAX_REFERENCE_BINS = 4096


def canonical_method(method: str) -> str:
  """'flat', 'tree' or 'haar'; 'hierarchical' is accepted for 'tree'."""
  checks.choice(method, 'method', METHODS + tuple(ALIASES))
  return ALIASES.get(method, method)


def _check_bins(num_bins: int, method: str = 'flat') -> int:
  method = canonical_method(method)
  num_bins = checks.integer(num_bins, 'num_bins', 2, MAX_BINS)
  if method != 'flat' and num_bins & (num_bins - 1):
    raise ValueError(
        f"method={method!r} needs num_bins to be a power of two (a binary "
        f"tree over the bins), got {num_bins}; use "
        f"{2 ** math.ceil(math.log2(num_bins))} or method='flat'.")
  return int(num_bins)


def encoding_length(method: str, num_bins: int) -> int:
  """Length of one client's encoding."""
  b = _check_bins(num_bins, method)
  return {'flat': b, 'tree': 2 * b - 2, 'haar': b}[method]


def sensitivities(method: str, num_bins: int):
  """(l1, l2, l0) of one client's encoding: the zero-out sensitivities.

  l0 is the number of coordinates a client touches.
  """
  b = _check_bins(num_bins, method)
  levels = b.bit_length() - 1
  touched = {'flat': 1, 'tree': levels, 'haar': levels + 1}[method]
  return float(touched), math.sqrt(touched), touched


def check_range(lower: float, upper: float):
  """(lower, upper) as floats with lower < upper, both finite."""
  lower = checks.real(lower, 'lower_bound')
  upper = checks.real(upper, 'upper_bound')
  if not lower < upper:
    raise ValueError(f'need lower_bound < upper_bound, got {lower} and '
                     f'{upper}.')
  if not math.isfinite(upper - lower):
    raise ValueError(f'upper_bound - lower_bound = {upper - lower} overflows; '
                     'use a narrower range.')
  return lower, upper


def bin_index(x, lower: float, upper: float, num_bins: int) -> tf.Tensor:
  """The bin of each value (int64), values outside [lower, upper] clipped.

  NaN maps to bin 0; callers exclude non-finite values before.
  """
  lower, upper = check_range(lower, upper)
  num_bins = checks.integer(num_bins, 'num_bins', 1, MAX_BINS)
  x = tf.cast(x, tf.float64)
  width = (upper - lower) / num_bins
  idx = tf.floor((x - lower) / width)
  idx = tf.where(tf.math.is_nan(idx), tf.zeros_like(idx), idx)
  return tf.cast(tf.clip_by_value(idx, 0.0, num_bins - 1.0), tf.int64)


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
  """(positions, signs) of the base and the level-1..L nodes above `index`.

  Layout: 0 = base; level l (1..L) node o at 1 + sum_{s<l} b / 2^s - b + o.
  Sign +1 if the bin is in the node's left half.
  """
  b = 1 << levels
  pos = [tf.zeros_like(index)]
  sign = [tf.ones_like(index)]
  offset = 1
  for l in range(1, levels + 1):
    pos.append(offset + tf.bitwise.right_shift(index, l))
    left = tf.equal(tf.bitwise.bitwise_and(
        tf.bitwise.right_shift(index, l - 1), 1), 0)
    sign.append(tf.where(left, tf.ones_like(index), -tf.ones_like(index)))
    offset += b >> l
  return tf.stack(pos, axis=-1), tf.stack(sign, axis=-1)


def encode(method: str, index, num_bins: int) -> tf.Tensor:
  """One client's encoding of its bin `index` (int64 scalar): int64 vector."""
  b = _check_bins(num_bins, method)
  levels = b.bit_length() - 1
  index = tf.cast(index, tf.int64)
  length = encoding_length(method, b)
  if method == 'flat':
    positions = index[tf.newaxis]
    values = tf.ones([1], tf.int64)
  elif method == 'tree':
    positions = _tree_nodes(index, levels)
    values = tf.ones([levels], tf.int64)
  else:
    positions, values = _haar_nodes(index, levels)
  return tf.scatter_nd(positions[:, tf.newaxis], values, [length])


# ---------------------------------------------------------------------------
# Dense reference matrices (numpy, small b only: tests and documentation).


def _check_reference_bins(num_bins, method):
  b = _check_bins(num_bins, method)
  if b > _MAX_REFERENCE_BINS:
    raise ValueError(f'reference matrices are O(b^2); num_bins must be <= '
                     f'{_MAX_REFERENCE_BINS}, got {b}.')
  return b


def tree_matrix(num_bins: int) -> np.ndarray:
  """A: (2b - 2) x b, node = sum of its bins (the tree layout above)."""
  b = _check_reference_bins(num_bins, 'tree')
  levels = b.bit_length() - 1
  rows = []
  for r in range(levels):
    for o in range(b >> r):
      row = np.zeros(b)
      row[o << r:(o + 1) << r] = 1.0
      rows.append(row)
  return np.array(rows)


def haar_decode_matrix(num_bins: int) -> np.ndarray:
  """Hd: b x b, leaves = Hd @ coefficients (the exact inverse of encode)."""
  b = _check_reference_bins(num_bins, 'haar')
  levels = b.bit_length() - 1
  m = np.zeros((b, b))
  m[:, 0] = 1.0 / b
  offset = 1
  for l in range(1, levels + 1):
    for v in range(b):
      node = offset + (v >> l)
      sign = 1.0 if ((v >> (l - 1)) & 1) == 0 else -1.0
      m[v, node] = sign / 2.0**l
    offset += b >> l
  return m


def dyadic_prefix_matrix(num_bins: int) -> np.ndarray:
  """P: b x (2b - 2), (P H)_j = sum over the maximal dyadic partition of the
  first j + 1 bins (Algorithm 2, step 4); row b - 1 uses the two top nodes."""
  b = _check_reference_bins(num_bins, 'tree')
  p = np.zeros((b, 2 * b - 2))
  for j, nodes in enumerate(_dyadic_nodes(b)):
    p[j, nodes[nodes >= 0]] = 1.0
  return p


def _dyadic_nodes(b: int) -> np.ndarray:
  """[b, L + 1] int64: the tree positions of the maximal dyadic partition of
  the first j + 1 bins (row j), -1 where a level contributes nothing."""
  levels = b.bit_length() - 1
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


# ---------------------------------------------------------------------------
# Structured linear maps (TF, O(b log b)).


def _tree_node_sums(leaves: tf.Tensor, b: int) -> tf.Tensor:
  """A x: the node sums (tree layout) of leaf values x (float64 [b])."""
  levels = b.bit_length() - 1
  parts = []
  for r in range(levels):
    parts.append(tf.reduce_sum(tf.reshape(leaves, [b >> r, 1 << r]), 1))
  return tf.concat(parts, 0)


def _tree_adjoint(nodes: tf.Tensor, b: int) -> tf.Tensor:
  """A^T h: each leaf gets the sum of the values of its ancestors."""
  levels = b.bit_length() - 1
  out = tf.zeros([b], tf.float64)
  offset = 0
  for r in range(levels):
    level = nodes[offset:offset + (b >> r)]
    out += tf.repeat(level, 1 << r)
    offset += b >> r
  return out


def _consistent_leaves(nodes: tf.Tensor, b: int) -> tf.Tensor:
  """argmin_x ||A x - h||_2 by conjugate gradients (module docstring)."""
  levels = b.bit_length() - 1
  rhs = _tree_adjoint(nodes, b)
  x = tf.zeros([b], tf.float64)
  r = rhs
  p = r
  rr = tf.reduce_sum(r * r)
  for _ in range(levels + 3):
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
  levels = b.bit_length() - 1
  sums = coefficients[:1]  # the root's sum: the base coefficient
  start = b  # the level-L node is the last coefficient
  for l in range(levels, 0, -1):
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
  levels = b.bit_length() - 1
  top = 2 * b - 4  # the two nodes of level L - 1
  total = noisy_sum[top] + noisy_sum[top + 1]
  if consistent:
    return tf.cumsum(_consistent_leaves(noisy_sum, b)), total
  nodes = tf.constant(_dyadic_nodes(b))
  picked = tf.gather(noisy_sum, tf.maximum(nodes, 0))
  cum = tf.reduce_sum(tf.where(nodes >= 0, picked, 0.0), axis=1)
  del levels
  return cum, total


def total_norm(method: str, num_bins: int) -> float:
  """||t||_2 of the estimated-total functional t (total = t . noisy sum).

  flat: the sum of the b bins, sqrt(b); tree: the two top nodes, sqrt(2);
  haar: the base coefficient, 1. Times the per-coordinate noise stddev it is
  the stddev of the estimated total's noise.
  """
  b = _check_bins(num_bins, method)
  return {'flat': math.sqrt(b), 'tree': math.sqrt(2.0), 'haar': 1.0}[
      canonical_method(method)]


# ---------------------------------------------------------------------------
# TF estimators.


def isotonic(f: tf.Tensor) -> tf.Tensor:
  """Least-squares non-decreasing fit of a rank-1 tensor (O(b^2) min-max).

  The isotonic regression is g_j = max_{i <= j} min_{k >= j} mean(f[i..k])
  (e.g. Robertson, Wright & Dykstra 1988, Thm 1.4.4), computed from prefix
  sums on a b x b grid.
  """
  f = tf.cast(f, tf.float64)
  b = int(f.shape[0]) if f.shape[0] is not None else None
  if b is not None and b > MAX_MONOTONE_BINS:
    raise ValueError(f'isotonic needs O(b^2) memory; at most '
                     f'{MAX_MONOTONE_BINS} values, got {b}.')
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


def estimate_cdf(method: str, noisy_sum, num_bins: int, count: str,
                 num_clients=None, consistent: bool = False,
                 monotone: bool = False) -> tf.Tensor:
  """CDF estimates at the b right bin edges (float64 [b]).

  Args:
    method: 'flat', 'tree' or 'haar'.
    noisy_sum: the decoded sum of the clients' encodings (float [length]).
    num_bins: b.
    count: 'estimated' (divide by the noisy total) or 'exact' (by
      num_clients).
    num_clients: n, for count='exact'.
    consistent: tree only: least-squares consistent tree first.
    monotone: isotonic projection, then clip to [0, 1] (b <=
      MAX_MONOTONE_BINS).
  """
  method = canonical_method(method)
  b = _check_bins(num_bins, method)
  count = checks.choice(count, 'count', COUNTS)
  if consistent and method != 'tree':
    raise ValueError("consistent=True only applies to method='tree'.")
  if monotone and b > MAX_MONOTONE_BINS:
    raise ValueError(f'monotone estimators need O(b^2) memory: num_bins <= '
                     f'{MAX_MONOTONE_BINS}, got {b}.')
  length = encoding_length(method, b)
  noisy_sum = _float64_tensor(noisy_sum, 'noisy_sum')
  if noisy_sum.shape.num_elements() not in (None, length):
    raise ValueError(
        f'noisy_sum must have the {length} entries of one {method!r} '
        f'encoding of {b} bins, got shape {noisy_sum.shape}.')
  noisy_sum = tf.reshape(noisy_sum, [length])
  if num_clients is not None and not isinstance(num_clients, tf.Tensor):
    num_clients = checks.integer(num_clients, 'num_clients', 0)
  cum, estimated_total = _unnormalised_cdf(method, noisy_sum, b, consistent)
  if count == 'exact':
    if num_clients is None:
      raise ValueError("count='exact' needs num_clients.")
    total = tf.cast(num_clients, tf.float64)
  else:
    total = estimated_total
  # A total <= 0 (no clients, or noise) leaves nothing to normalise by.
  cdf = cum / tf.where(total > 0, total, tf.ones_like(total))
  if monotone:
    cdf = tf.clip_by_value(isotonic(cdf), 0.0, 1.0)
  return cdf


def estimated_total(method: str, noisy_sum, num_bins: int) -> tf.Tensor:
  """The noisy total count read from the noisy sum (see `total_norm`)."""
  method = canonical_method(method)
  b = _check_bins(num_bins, method)
  noisy_sum = tf.cast(noisy_sum, tf.float64)
  return {'flat': lambda: tf.reduce_sum(noisy_sum),
          'tree': lambda: noisy_sum[2 * b - 4] + noisy_sum[2 * b - 3],
          'haar': lambda: noisy_sum[0]}[method]()


def quantile_indices(cdf, quantiles: Sequence[float]) -> tf.Tensor:
  """Eq. (1): j*_p = argmin_j |F_j - p| (first j on ties), 0-based, int64."""
  cdf = _check_cdf(cdf)
  p = tf.constant(checks.real_sequence(quantiles, 'quantiles', 0.0, 1.0),
                  tf.float64)
  return tf.argmin(tf.abs(cdf[tf.newaxis, :] - p[:, tf.newaxis]), axis=1)


def _float64_tensor(value, name: str) -> tf.Tensor:
  try:
    return tf.cast(value, tf.float64)
  except (TypeError, ValueError):
    raise TypeError(f'{name} must be a tensor of numbers, got {value!r}.'
                    ) from None


def _check_cdf(cdf, num_bins=None) -> tf.Tensor:
  """cdf as float64 of static shape [num_bins] (any b >= 1 if None)."""
  cdf = _float64_tensor(cdf, 'cdf')
  if cdf.shape.rank != 1 or cdf.shape[0] == 0 or (
      num_bins is not None and cdf.shape[0] not in (None, num_bins)):
    raise ValueError(f'cdf must be a vector of one value per bin'
                     f'{"" if num_bins is None else f" ({num_bins})"}, got '
                     f'shape {cdf.shape}.')
  return cdf


def edges(lower: float, upper: float, num_bins: int) -> np.ndarray:
  """The right bin edges l_1..l_b."""
  lower, upper = check_range(lower, upper)
  num_bins = checks.integer(num_bins, 'num_bins', 1, MAX_BINS)
  # (k / b) first: (upper - lower) k would overflow near the float64 limit.
  return lower + (upper - lower) * (np.arange(1, num_bins + 1) / num_bins)


def quantile_values(cdf, quantiles, lower, upper, num_bins,
                    interpolate: bool = False) -> tf.Tensor:
  """Quantile estimates (float64): the eq. 1 bin edge, or, with
  `interpolate`, the linear interpolation of a monotone CDF inside the first
  bin whose CDF reaches p (F_0 = 0 at `lower`)."""
  right = tf.constant(edges(lower, upper, num_bins))
  cdf = _check_cdf(cdf, int(num_bins))
  quantiles = checks.real_sequence(quantiles, 'quantiles', 0.0, 1.0)
  if not interpolate:
    return tf.gather(right, quantile_indices(cdf, quantiles))
  p = tf.constant(list(quantiles), tf.float64)
  width = (upper - lower) / num_bins
  reached = cdf[tf.newaxis, :] >= p[:, tf.newaxis]
  first = tf.where(tf.reduce_any(reached, axis=1),
                   tf.argmax(tf.cast(reached, tf.int64), axis=1),
                   tf.fill([len(quantiles)], tf.constant(num_bins - 1,
                                                         tf.int64)))
  prev = tf.concat([tf.zeros([1], tf.float64), cdf], 0)
  lo_f = tf.gather(prev, first)
  hi_f = tf.gather(cdf, first)
  frac = tf.clip_by_value(
      tf.math.divide_no_nan(p - lo_f, hi_f - lo_f), 0.0, 1.0)
  return lower + width * (tf.cast(first, tf.float64) + frac)


def quantile_error(true_values, indices, quantiles, lower, upper, num_bins):
  """Eq. (3) for each p: |F_{j*} - p| with F the empirical CDF of the true
  (clipped, finite) values at the right edges (numpy, for evaluation)."""
  v = np.clip(np.asarray(true_values, np.float64), lower, upper)
  idx = np.asarray(bin_index(v, lower, upper, num_bins))
  f = np.cumsum(np.bincount(idx, minlength=num_bins)) / len(v)
  return np.abs(f[np.asarray(indices)] - np.asarray(quantiles))
