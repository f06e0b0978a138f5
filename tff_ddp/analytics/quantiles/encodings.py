"""The math of federated DP quantiles: histogram encodings and CDF estimators.

Papers: the federated DP quantiles paper (Algorithm 1 flat histograms,
Algorithm 2 hierarchical histograms, eq. 1 the nearest-bin-edge rule, eq. 3
the error, Theorems 1-2 the ring) and Chen et al., "Federated frequency
estimation" (Section 4.2, eqs. 6-7, the discrete Haar wavelet transform);
the consistent tree is Hay et al. 2010's least squares. `encoding(method,
num_bins)` returns a frozen `Flat`, `Tree` or `Haar` (subclasses of
`Encoding`; a new method is one new subclass): the one place a method's
name is read, after which callers use the object's methods (`encode`,
`cdf`, `sensitivities`, ...).

Bins, the encodings and their exact inverses, the estimators:
docs/notes/histogram_encodings.md.
"""

import abc
import dataclasses
import math
from typing import ClassVar, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from tff_ddp.utils import checks

# The quantile paper's name for 'tree'.
ALIASES = {'hierarchical': 'tree'}
COUNTS = ('estimated', 'exact')
# Bins: estimators are O(b log b), encodings O(log b) per client.
MAX_BINS = 2**16
# The isotonic projection is O(b^2) in memory (8 MiB per 1024^2 entries).
MAX_MONOTONE_BINS = 2048
# The dense reference matrices are O(b^2).
_MAX_REFERENCE_BINS = 4096
# name -> class of every defined encoding (`Encoding.__init_subclass__`).
_CLASSES: Dict[str, type] = {}
# count option -> normalise by the number of clients (Algorithm 1, option 2)
_EXACT_COUNT = {'estimated': False, 'exact': True}


@dataclasses.dataclass(frozen=True)
class Encoding(abc.ABC):
  """A histogram encoding of `num_bins` bins: what a client sends for its
  bin, and how the server reads the cumulative counts from the noisy sum.

  A subclass (a frozen dataclass) is one histogram method; defining it
  registers `name` with `encoding`. Its checklist:

  * class attributes: `name` (what users pass as `method`);
    `ring_constant` (K of the wrap-around condition of Theorems 1-2 of the
    quantile paper, M >= 2 + 2 c n + 2 n sigma sqrt(2 log(K n b /
    delta)): the union bound over the coordinates the encoding's tail
    bounds are taken on; cite or derive it); `paper_count` (the `count`
    the papers use with it); `needs_power_of_two`;
    `has_consistent_estimator` (the least-squares consistent read-out);
  * `length`, `l0` (coordinates one client touches; `l1` and `l2` follow
    for entries in {-1, 0, 1}, override them otherwise), `total_norm`;
  * `_sparse_encoding(index)`: the positions and values of one client's
    non-zero coordinates (TF, int64);
  * `_cumulative(noisy_sum, consistent)`: the unnormalised CDF at the b
    right edges and the estimated total it is normalised by, and
    `_total(noisy_sum)`: the estimated total alone (TF, float64, structured
    operations only: no dense b x b matrix);
  * the dense references `cdf_matrix()` (K, cumulative = K @ noisy_sum)
    and `total_vector()` (t, total = t . noisy_sum), numpy, small b;
  * tests: one against a brute-force reference of the encoding itself (the
    contract tests check the rest: sensitivities by enumeration, the
    structured read-outs against the references, exact read-out of
    noise-free sums).

  Attributes:
    num_bins: b, an integer in [2, MAX_BINS] (a power of two if
      `needs_power_of_two`).
  """

  num_bins: int

  name: ClassVar[str]
  ring_constant: ClassVar[int]
  paper_count: ClassVar[str]
  needs_power_of_two: ClassVar[bool] = True
  has_consistent_estimator: ClassVar[bool] = False

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    name = cls.__dict__.get('name')
    if name is None:  # an intermediate base class
      return
    if name in _CLASSES or name in ALIASES:
      raise TypeError(f'a histogram encoding named {name!r} exists already '
                      f'({(_CLASSES.get(name) or cls).__name__}).')
    _CLASSES[name] = cls

  def __post_init__(self):
    b = checks.integer(self.num_bins, 'num_bins', 2, MAX_BINS)
    if self.needs_power_of_two and b & (b - 1):
      raise ValueError(
          f"method={self.name!r} needs num_bins to be a power of two (a "
          f"binary tree over the bins), got {b}; use "
          f"{2 ** math.ceil(math.log2(b))} or method='flat'.")
    object.__setattr__(self, 'num_bins', int(b))

  # -- sizes and sensitivities ------------------------------------------

  @property
  def levels(self) -> int:
    """L = log2 b (for b a power of two)."""
    return self.num_bins.bit_length() - 1

  @property
  @abc.abstractmethod
  def length(self) -> int:
    """Length of one client's encoding."""

  @property
  @abc.abstractmethod
  def l0(self) -> int:
    """The number of coordinates one client's encoding touches."""

  @property
  def l1(self) -> float:
    """||encoding||_1 of one client (entries in {-1, 0, 1}: l0)."""
    return float(self.l0)

  @property
  def l2(self) -> float:
    """||encoding||_2 of one client (entries in {-1, 0, 1}: sqrt(l0))."""
    return math.sqrt(self.l0)

  def sensitivities(self) -> Tuple[float, float, int]:
    """(l1, l2, l0) of one client's encoding: the zero-out sensitivities."""
    return self.l1, self.l2, self.l0

  @property
  @abc.abstractmethod
  def total_norm(self) -> float:
    """||t||_2 of the estimated-total functional t (total = t . noisy sum).

    Times the per-coordinate noise stddev it is the stddev of the estimated
    total's noise.
    """

  # -- the client ---------------------------------------------------------

  @abc.abstractmethod
  def _sparse_encoding(self, index: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """(positions, values), int64 [l0] each, of bin `index`'s encoding."""

  def encode(self, index) -> tf.Tensor:
    """One client's encoding of its bin `index` (int64 scalar): int64
    vector [length]."""
    positions, values = self._sparse_encoding(tf.cast(index, tf.int64))
    return tf.scatter_nd(positions[:, tf.newaxis], values, [self.length])

  # -- the server ---------------------------------------------------------

  @abc.abstractmethod
  def _cumulative(self, noisy_sum: tf.Tensor,
                  consistent: bool) -> Tuple[tf.Tensor, tf.Tensor]:
    """(cumulative counts at the b right edges, the estimated total) of a
    float64 [length] noisy sum."""

  @abc.abstractmethod
  def _total(self, noisy_sum: tf.Tensor) -> tf.Tensor:
    """The estimated total of a float64 noisy sum."""

  def estimated_total(self, noisy_sum) -> tf.Tensor:
    """The noisy total count read from the noisy sum (see `total_norm`)."""
    return self._total(tf.cast(noisy_sum, tf.float64))

  def cdf(self,
          noisy_sum,
          num_clients=None,
          consistent: bool = False,
          monotone: bool = False) -> tf.Tensor:
    """CDF estimates at the b right bin edges (float64 [b]).

    Args:
      noisy_sum: the decoded sum of the clients' encodings (float
        [length]).
      num_clients: n, to normalise by it (Algorithm 1, option 2: the exact
        count); None normalises by the estimated total (option 1).
      consistent: the least-squares consistent read-out first (only for
        encodings that have one, `has_consistent_estimator`).
      monotone: isotonic projection, then clip to [0, 1] (b <=
        MAX_MONOTONE_BINS).
    """
    consistent = checks.boolean(consistent, 'consistent')
    monotone = checks.boolean(monotone, 'monotone')
    if consistent and not self.has_consistent_estimator:
      have = [
          name for name, c in _CLASSES.items() if c.has_consistent_estimator
      ]
      raise ValueError(f'consistent=True only applies to method='
                       f'{" or ".join(map(repr, have))}, not {self.name!r}.')
    b = self.num_bins
    if monotone and b > MAX_MONOTONE_BINS:
      raise ValueError(f'monotone estimators need O(b^2) memory: num_bins <= '
                       f'{MAX_MONOTONE_BINS}, got {b}.')
    noisy_sum = _float64_tensor(noisy_sum, 'noisy_sum')
    if noisy_sum.shape.num_elements() not in (None, self.length):
      raise ValueError(f'noisy_sum must have the {self.length} entries of one '
                       f'{self.name!r} encoding of {b} bins, got shape '
                       f'{noisy_sum.shape}.')
    noisy_sum = tf.reshape(noisy_sum, [self.length])
    if num_clients is not None and not isinstance(num_clients, tf.Tensor):
      num_clients = checks.integer(num_clients, 'num_clients', 0)
    cum, estimated = self._cumulative(noisy_sum, consistent)
    total = (estimated if num_clients is None else tf.cast(
        num_clients, tf.float64))
    # A total <= 0 (no clients, or noise) leaves nothing to normalise by.
    cdf = cum / tf.where(total > 0, total, tf.ones_like(total))
    if monotone:
      cdf = tf.clip_by_value(isotonic(cdf), 0.0, 1.0)
    return cdf

  # -- dense references (numpy, small b: tests and documentation) ---------

  def _reference_bins(self) -> int:
    if self.num_bins > _MAX_REFERENCE_BINS:
      raise ValueError(f'reference matrices are O(b^2); num_bins must be <= '
                       f'{_MAX_REFERENCE_BINS}, got {self.num_bins}.')
    return self.num_bins

  @abc.abstractmethod
  def cdf_matrix(self) -> np.ndarray:
    """K: b x length, the cumulative counts are K @ noisy_sum."""

  @abc.abstractmethod
  def total_vector(self) -> np.ndarray:
    """t: [length], the estimated total is t . noisy_sum."""


@dataclasses.dataclass(frozen=True)
class Flat(Encoding):
  """One-hot histogram (Algorithm 1 of the quantile paper)."""

  name: ClassVar[str] = 'flat'
  # Theorem 1: K n b / delta with K = 8.
  ring_constant: ClassVar[int] = 8
  # Algorithm 1's estimated count (option 1).
  paper_count: ClassVar[str] = 'estimated'
  needs_power_of_two: ClassVar[bool] = False

  @property
  def length(self) -> int:
    return self.num_bins

  @property
  def l0(self) -> int:
    return 1

  @property
  def total_norm(self) -> float:
    """The sum of the b bins: sqrt(b)."""
    return math.sqrt(self.num_bins)

  def _sparse_encoding(self, index):
    return index[tf.newaxis], tf.ones([1], tf.int64)

  def _cumulative(self, noisy_sum, consistent):
    del consistent  # no consistent read-out (`cdf` refuses it)
    cum = tf.cumsum(noisy_sum)
    return cum, cum[-1]

  def _total(self, noisy_sum):
    return tf.reduce_sum(noisy_sum)

  def cdf_matrix(self) -> np.ndarray:
    b = self._reference_bins()
    return np.tril(np.ones((b, b)))

  def total_vector(self) -> np.ndarray:
    return np.ones(self._reference_bins())


@dataclasses.dataclass(frozen=True)
class Tree(Encoding):
  """Hierarchical histogram without its root (Algorithm 2 of the quantile
  paper; 'hierarchical' is its alias)."""

  name: ClassVar[str] = 'tree'
  # Theorem 2: K n b / delta with K = 16.
  ring_constant: ClassVar[int] = 16
  # Algorithm 2 divides by n.
  paper_count: ClassVar[str] = 'exact'
  has_consistent_estimator: ClassVar[bool] = True

  @property
  def length(self) -> int:
    return 2 * self.num_bins - 2

  @property
  def l0(self) -> int:
    return self.levels

  @property
  def total_norm(self) -> float:
    """The two top nodes: sqrt(2)."""
    return math.sqrt(2.0)

  def level_offset(self, r: int) -> int:
    """The position of level r's first node: sum_{s<r} b / 2^s."""
    return sum(self.num_bins >> s for s in range(r))

  @property
  def top(self) -> int:
    """The position of the first of the two top nodes (level L - 1): 2b - 4.
    """
    return self.level_offset(self.levels - 1)

  def _sparse_encoding(self, index):
    """Position offset(r) + (index >> r) of the node at each level r
    containing bin `index`; a 1 in each."""
    positions = [
        self.level_offset(r) + tf.bitwise.right_shift(index, r)
        for r in range(self.levels)
    ]
    return tf.stack(positions, axis=-1), tf.ones([self.levels], tf.int64)

  def _cumulative(self, noisy_sum, consistent):
    b = self.num_bins
    total = self._total(noisy_sum)
    if consistent:
      return tf.cumsum(_consistent_leaves(noisy_sum, b)), total
    nodes = tf.constant(self._dyadic_nodes())
    picked = tf.gather(noisy_sum, tf.maximum(nodes, 0))
    cum = tf.reduce_sum(tf.where(nodes >= 0, picked, 0.0), axis=1)
    return cum, total

  def _total(self, noisy_sum):
    return noisy_sum[self.top] + noisy_sum[self.top + 1]

  def _dyadic_nodes(self) -> np.ndarray:
    """[b, L + 1] int64: the tree positions of the maximal dyadic partition
    of the first j + 1 bins (row j), -1 where a level contributes nothing."""
    b, levels = self.num_bins, self.levels
    out = -np.ones((b, levels + 1), np.int64)
    for j in range(1, b + 1):  # prefix of j bins
      if j == b:  # the two top nodes (the root is not sent)
        out[j - 1, 0] = self.top
        out[j - 1, 1] = self.top + 1
        continue
      for r in range(levels - 1, -1, -1):
        if j & (1 << r):
          out[j - 1, r] = self.level_offset(r) + (j >> r) - 1
    return out

  def node_matrix(self) -> np.ndarray:
    """A: (2b - 2) x b, node = sum of its bins (the layout above)."""
    b = self._reference_bins()
    rows = []
    for r in range(self.levels):
      for o in range(b >> r):
        row = np.zeros(b)
        row[o << r:(o + 1) << r] = 1.0
        rows.append(row)
    return np.array(rows)

  def dyadic_prefix_matrix(self) -> np.ndarray:
    """P: b x (2b - 2), (P H)_j = sum over the maximal dyadic partition of
    the first j + 1 bins (Algorithm 2, step 4); row b - 1 uses the two top
    nodes."""
    b = self._reference_bins()
    p = np.zeros((b, self.length))
    for j, nodes in enumerate(self._dyadic_nodes()):
      p[j, nodes[nodes >= 0]] = 1.0
    return p

  def cdf_matrix(self) -> np.ndarray:
    return self.dyadic_prefix_matrix()

  def total_vector(self) -> np.ndarray:
    self._reference_bins()
    t = np.zeros(self.length)
    t[[self.top, self.top + 1]] = 1.0
    return t


@dataclasses.dataclass(frozen=True)
class Haar(Encoding):
  """Discrete Haar wavelet coefficients (the frequency estimation paper,
  Section 4.2)."""

  name: ClassVar[str] = 'haar'
  # As the tree's (Theorem 2): the base and one difference per node are
  # b coordinates, each bounded as a tree node is.
  ring_constant: ClassVar[int] = 16
  paper_count: ClassVar[str] = 'exact'

  @property
  def length(self) -> int:
    return self.num_bins

  @property
  def l0(self) -> int:
    return self.levels + 1

  @property
  def total_norm(self) -> float:
    """The base coefficient: 1."""
    return 1.0

  def _sparse_encoding(self, index):
    """(positions, signs) of the base and the level-1..L nodes above
    `index`. Layout: 0 = base; level l (1..L) node o at
    1 + sum_{s<l} b / 2^s - b + o. Sign +1 if the bin is in the node's
    left half."""
    b = self.num_bins
    pos = [tf.zeros_like(index)]
    sign = [tf.ones_like(index)]
    offset = 1
    for l in range(1, self.levels + 1):
      pos.append(offset + tf.bitwise.right_shift(index, l))
      left = tf.equal(
          tf.bitwise.bitwise_and(tf.bitwise.right_shift(index, l - 1), 1), 0)
      sign.append(tf.where(left, tf.ones_like(index), -tf.ones_like(index)))
      offset += b >> l
    return tf.stack(pos, axis=-1), tf.stack(sign, axis=-1)

  def _cumulative(self, noisy_sum, consistent):
    del consistent  # no consistent read-out (`cdf` refuses it)
    return tf.cumsum(self._leaves(noisy_sum)), noisy_sum[0]

  def _total(self, noisy_sum):
    return noisy_sum[0]

  def _leaves(self, coefficients: tf.Tensor) -> tf.Tensor:
    """The exact inverse of the encoding, top down, O(b)."""
    b = self.num_bins
    sums = coefficients[:1]  # the root's sum: the base coefficient
    start = b  # the level-L node is the last coefficient
    for l in range(self.levels, 0, -1):
      count = b >> l
      start -= count
      diffs = coefficients[start:start + count]
      left, right = (sums + diffs) / 2.0, (sums - diffs) / 2.0
      sums = tf.reshape(tf.stack([left, right], axis=1), [-1])
    return sums

  def decode_matrix(self) -> np.ndarray:
    """Hd: b x b, leaves = Hd @ coefficients (the exact inverse of encode).
    """
    b = self._reference_bins()
    m = np.zeros((b, b))
    m[:, 0] = 1.0 / b
    offset = 1
    for l in range(1, self.levels + 1):
      for v in range(b):
        node = offset + (v >> l)
        sign = 1.0 if ((v >> (l - 1)) & 1) == 0 else -1.0
        m[v, node] = sign / 2.0**l
      offset += b >> l
    return m

  def cdf_matrix(self) -> np.ndarray:
    return np.tril(np.ones(
        (self.num_bins, self.num_bins))) @ self.decode_matrix()

  def total_vector(self) -> np.ndarray:
    t = np.zeros(self._reference_bins())
    t[0] = 1.0
    return t


# Every method defined above, in order.
METHODS = tuple(_CLASSES)


def encoding(method: Union[str, Encoding],
             num_bins: Optional[int] = None) -> Encoding:
  """The encoding a user's `method` names, for `num_bins` bins.

  The one place a method name is read: 'flat', 'tree' (or 'hierarchical')
  or 'haar' (METHODS, ALIASES). An `Encoding` is returned as it is (its
  num_bins must equal `num_bins` if that is given).
  """
  if isinstance(method, Encoding):
    if num_bins is not None and checks.integer(num_bins,
                                               'num_bins') != method.num_bins:
      raise ValueError(f'num_bins={num_bins} differs from the encoding '
                       f'{method}.')
    return method
  return _class(method)(num_bins)


def _class(method: str) -> type:
  checks.choice(method, 'method', tuple(_CLASSES) + tuple(ALIASES))
  return _CLASSES[ALIASES.get(method, method)]


def canonical_method(method: Union[str, Encoding]) -> str:
  """The name of the method: 'hierarchical' is 'tree'."""
  if isinstance(method, Encoding):
    return method.name
  return _class(method).name


def exact_count(count: str) -> bool:
  """Resolves the `count` option: True for 'exact' (Algorithm 1, option
  2: normalise by the number of clients), False for 'estimated' (option 1:
  by the noisy total)."""
  return _EXACT_COUNT[checks.choice(count, 'count', COUNTS)]


# ---------------------------------------------------------------------------
# Bins.


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


# ---------------------------------------------------------------------------
# The tree's least-squares read-out (TF, O(b log b)).


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
  """argmin_x ||A x - h||_2 by conjugate gradients (Hay et al. 2010; the
  steps: docs/notes/histogram_encodings.md, section on encodings.py, "Server
  estimators")."""
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


def quantile_indices(cdf, quantiles: Sequence[float]) -> tf.Tensor:
  """Eq. (1): j*_p = argmin_j |F_j - p| (first j on ties), 0-based, int64."""
  cdf = _check_cdf(cdf)
  p = tf.constant(checks.real_sequence(quantiles, 'quantiles', 0.0, 1.0),
                  tf.float64)
  return tf.argmin(tf.abs(cdf[tf.newaxis, :] - p[:, tf.newaxis]), axis=1)


def _float64_tensor(value, name: str) -> tf.Tensor:
  if isinstance(value,
                (str, bytes)) or (isinstance(value, (tf.Tensor, np.ndarray)) and
                                  value.dtype in (tf.string, np.object_) or
                                  isinstance(value, np.ndarray) and
                                  value.dtype.kind in 'SUO'):
    raise TypeError(f'{name} must be a tensor of numbers, got {value!r}.')
  try:
    return tf.cast(value, tf.float64)
  except (TypeError, ValueError, tf.errors.OpError):
    raise TypeError(
        f'{name} must be a tensor of numbers, got {value!r}.') from None


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
  right = lower + (upper - lower) * (np.arange(1, num_bins + 1) / num_bins)
  # upper - lower is rounded when the range spans more than float64's 53
  # bits (e.g. [-2^53, 1]): the last edge is upper itself, and no rounded
  # edge passes it.
  right = np.minimum(right, upper)
  right[-1] = upper
  return right


def quantile_values(cdf,
                    quantiles,
                    lower,
                    upper,
                    num_bins,
                    interpolate: bool = False) -> tf.Tensor:
  """Quantile estimates (float64): the eq. 1 bin edge, or, with
  `interpolate`, the linear interpolation of a monotone CDF inside the first
  bin whose CDF reaches p (F_0 = 0 at `lower`)."""
  right = tf.constant(edges(lower, upper, num_bins))
  cdf = _check_cdf(cdf, int(num_bins))
  quantiles = checks.real_sequence(quantiles, 'quantiles', 0.0, 1.0)
  if not checks.boolean(interpolate, 'interpolate'):
    return tf.gather(right, quantile_indices(cdf, quantiles))
  p = tf.constant(list(quantiles), tf.float64)
  width = (upper - lower) / num_bins
  reached = cdf[tf.newaxis, :] >= p[:, tf.newaxis]
  first = tf.where(
      tf.reduce_any(reached, axis=1),
      tf.argmax(tf.cast(reached, tf.int64), axis=1),
      tf.fill([len(quantiles)], tf.constant(num_bins - 1, tf.int64)))
  prev = tf.concat([tf.zeros([1], tf.float64), cdf], 0)
  lo_f = tf.gather(prev, first)
  hi_f = tf.gather(cdf, first)
  frac = tf.clip_by_value(tf.math.divide_no_nan(p - lo_f, hi_f - lo_f), 0.0,
                          1.0)
  # Rounded like `edges`, never outside [lower, upper].
  return tf.clip_by_value(lower + width * (tf.cast(first, tf.float64) + frac),
                          lower, upper)


def quantile_error(true_values, indices, quantiles, lower, upper, num_bins):
  """Eq. (3) for each p: |F_{j*} - p| with F the empirical CDF of the true
  (clipped, finite) values at the right edges (numpy, for evaluation)."""
  v = np.clip(np.asarray(true_values, np.float64), lower, upper)
  idx = np.asarray(bin_index(v, lower, upper, num_bins))
  f = np.cumsum(np.bincount(idx, minlength=num_bins)) / len(v)
  return np.abs(f[np.asarray(indices)] - np.asarray(quantiles))
