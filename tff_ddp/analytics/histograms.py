"""The math of federated DP quantiles: client encodings and CDF estimators.

Papers: "Private federated quantiles" (shared/papers/dp-federated-quantiles.txt,
Algorithm 1 flat histograms, Algorithm 2 hierarchical histograms, eq. 1 the
nearest-bin-edge rule, eq. 3 the error) and the frequency estimation paper
(shared/papers/federated-frequency-estimation-cpbm.txt, §4.2, eq. 6-7, the
discrete Haar wavelet transform).

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

Server estimators: every method's estimate is linear in the noisy sum
(a matrix built once in numpy, applied in TF), followed by optional
post-processing:

* flat: F_j = cumsum(h)_j / N;
* tree: F_j = sum of the nodes of the maximal dyadic partition of [0, j)
  (Algorithm 2, <= L nodes) / N; or, with `consistent=True`, the
  least-squares consistent tree (Hay et al. 2010): the leaves x minimising
  ||A x - H||_2 for the node-sum matrix A, then F = cumsum(x) / N;
* haar: F_j = cumsum(haar_decode(H))_j / N;

with N the exact count n (`count='exact'`, Algorithm 1 option 2) or the
estimated total (`count='estimated'`, option 1: sum of bins / of the two top
nodes / the base coefficient). `quantile_indices` then applies eq. 1;
`monotone=True` first replaces F by its isotonic (non-decreasing,
least-squares) projection clipped to [0, 1], which the papers do not do.
"""

import math
from typing import Sequence

import numpy as np
import tensorflow as tf

METHODS = ('flat', 'tree', 'haar')
ALIASES = {'hierarchical': 'tree'}  # the quantile paper's name for 'tree'
COUNTS = ('estimated', 'exact')


def canonical_method(method: str) -> str:
  """'flat', 'tree' or 'haar'; 'hierarchical' is accepted for 'tree'."""
  method = ALIASES.get(method, method)
  if method not in METHODS:
    raise ValueError(
        f'method must be one of {METHODS + tuple(ALIASES)}, got {method!r}.')
  return method


def _check_bins(num_bins: int, method: str = 'flat') -> int:
  method = canonical_method(method)
  if not isinstance(num_bins, (int, np.integer)) or num_bins < 2:
    raise ValueError(f'num_bins must be an integer >= 2, got {num_bins!r}.')
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


def bin_index(x, lower: float, upper: float, num_bins: int) -> tf.Tensor:
  """The bin of each value (int64), values outside [lower, upper] clipped.

  NaN maps to bin 0; callers exclude non-finite values before.
  """
  if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
    raise ValueError(
        f'need finite lower < upper, got lower={lower}, upper={upper}.')
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
# Linear maps (numpy, built once per (method, num_bins)).


def tree_matrix(num_bins: int) -> np.ndarray:
  """A: (2b - 2) x b, node = sum of its bins (the tree layout above)."""
  b = _check_bins(num_bins, 'tree')
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
  b = _check_bins(num_bins, 'haar')
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
  b = _check_bins(num_bins, 'tree')
  levels = b.bit_length() - 1
  offsets = [sum(b >> s for s in range(r)) for r in range(levels)]
  p = np.zeros((b, 2 * b - 2))
  for j in range(1, b + 1):  # prefix of j bins
    if j == b:
      p[j - 1, offsets[levels - 1]] = p[j - 1, offsets[levels - 1] + 1] = 1.0
      continue
    for r in range(levels - 1, -1, -1):
      if j & (1 << r):
        p[j - 1, offsets[r] + (j >> r) - 1] = 1.0
  return p


def cdf_matrix(method: str, num_bins: int, consistent: bool = False):
  """(K, t): unnormalised CDF = K @ noisy_sum; estimated total = t @ sum."""
  b = _check_bins(num_bins, method)
  cum = np.tril(np.ones((b, b)))
  if method == 'flat':
    k = cum
  elif method == 'tree':
    if consistent:
      k = cum @ np.linalg.pinv(tree_matrix(b))
    else:
      k = dyadic_prefix_matrix(b)
  else:
    k = cum @ haar_decode_matrix(b)
  return k, k[-1]


# ---------------------------------------------------------------------------
# TF estimators.


def isotonic(f: tf.Tensor) -> tf.Tensor:
  """Least-squares non-decreasing fit of a rank-1 tensor (O(b^2) min-max).

  The isotonic regression is g_j = max_{i <= j} min_{k >= j} mean(f[i..k])
  (e.g. Robertson, Wright & Dykstra 1988, Thm 1.4.4), computed from prefix
  sums on a b x b grid.
  """
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
    monotone: isotonic projection, then clip to [0, 1].
  """
  if count not in COUNTS:
    raise ValueError(f'count must be one of {COUNTS}, got {count!r}.')
  if consistent and method != 'tree':
    raise ValueError("consistent=True only applies to method='tree'.")
  k, t = cdf_matrix(method, num_bins, consistent)
  noisy_sum = tf.cast(noisy_sum, tf.float64)
  cum = tf.linalg.matvec(tf.constant(k), noisy_sum)
  if count == 'exact':
    if num_clients is None:
      raise ValueError("count='exact' needs num_clients.")
    total = tf.cast(num_clients, tf.float64)
  else:
    total = tf.tensordot(tf.constant(t), noisy_sum, 1)
  # A total <= 0 (no clients, or noise) leaves nothing to normalise by.
  cdf = cum / tf.where(total > 0, total, tf.ones_like(total))
  if monotone:
    cdf = tf.clip_by_value(isotonic(cdf), 0.0, 1.0)
  return cdf


def quantile_indices(cdf, quantiles: Sequence[float]) -> tf.Tensor:
  """Eq. (1): j*_p = argmin_j |F_j - p| (first j on ties), 0-based, int64."""
  cdf = tf.cast(cdf, tf.float64)
  p = tf.constant(list(quantiles), tf.float64)
  return tf.argmin(tf.abs(cdf[tf.newaxis, :] - p[:, tf.newaxis]), axis=1)


def edges(lower: float, upper: float, num_bins: int) -> np.ndarray:
  """The right bin edges l_1..l_b."""
  return lower + (upper - lower) * np.arange(1, num_bins + 1) / num_bins


def quantile_values(cdf, quantiles, lower, upper, num_bins,
                    interpolate: bool = False) -> tf.Tensor:
  """Quantile estimates (float64): the eq. 1 bin edge, or, with
  `interpolate`, the linear interpolation of a monotone CDF inside the first
  bin whose CDF reaches p (F_0 = 0 at `lower`)."""
  cdf = tf.cast(cdf, tf.float64)
  right = tf.constant(edges(lower, upper, num_bins))
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
