"""Randomized Walsh-Hadamard rotation x'' = H_d D_xi x (DDG paper, Algorithm 1).

H_d is the orthonormal Walsh-Hadamard matrix (entries +-1/sqrt(d), H^T H = I,
symmetric, so H^{-1} = H) and D_xi a diagonal of random signs xi. The signs are
*shared public randomness*: the clients and the server derive them from the
same round seed, so the server can invert the rotation (Algorithm 2:
y = D_xi H^T z). The rotation "flattens" a vector: each coordinate of H D x is
sub-Gaussian with variance proxy ||x||^2 / d, so ||x''||_inf ~ ||x||_2/sqrt(d)
with high probability, which keeps the modular sum from wrapping around.

Worked example (d = 2, xi = (+1, -1)): x = (3, 1) -> D x = (3, -1) ->
H D x = ((3 - 1)/sqrt2, (3 + 1)/sqrt2) = (1.414.., 2.828..); applying
D H to that gives back (3, 1).

Inputs whose length is not a power of two are zero-padded to the next one.
The transform is O(d log d) with d/2 butterflies per level.

The signs: one Philox byte gives eight (`random_signs`: sign j of byte v is
+1 iff bit j of v is set, looked up in a 256 x 8 table); each byte is
uniform on {0, ..., 255}, so its bits, hence the signs, are iid uniform,
the law of Algorithm 1's xi. The table's entries are +-1/sqrt(d), which
folds the normalisation of H into the sign pass.

Precision. `encode` works in its input's dtype. In float32 its error is
bounded, for every x: ||encode32(x) - H D_xi x||_2 <= eps ||x||_2 with
eps = `float32_error_bound(d)` (about 60 u per 16-block and 3 u more,
u = 2^-24; 1.8e-5 at d = 2^20; proof there). The mechanisms that rotate in
float32 use eps to keep ||x''||_2 <= c/gamma, the premise of the DDG
paper's rounding analysis; their privacy never rests on it (the norm of the
*rounded* vector is checked exactly, Theorem 5 (3)).
"""

import functools
import math

import numpy as np
import tensorflow as tf

from tff_ddp.utils import checks

# Largest encoded dimension of any encoder: a few float64 vectors of this
# length (512 MiB each at 2^26) are what one client's encoding holds.
MAX_OUTPUT_DIM = 2**26


def padded_dimension(dim: int) -> int:
  """Smallest power of two >= dim (and >= 1)."""
  dim = checks.integer(dim, 'dim', 0)
  return 1 if dim <= 1 else 1 << (dim - 1).bit_length()


# Sylvester blocks used by `fast_walsh_hadamard`: H_d = H_b (x) ... (x) H_b.
_BLOCK_LOG2 = 4


@functools.lru_cache(maxsize=None)
def _sylvester(m: int) -> np.ndarray:
  """Unnormalized Walsh-Hadamard matrix of size m = 2^j (entries +-1); built
  once per size (read-only), not per transform."""
  h = np.ones([1, 1])
  while h.shape[0] < m:
    h = np.block([[h, h], [h, -h]])
  h.setflags(write=False)
  return h


def _hadamard_blocks(x: tf.Tensor) -> tf.Tensor:
  """sqrt(d) H x along the last axis (the unnormalized transform, +-1
  entries), d = 2^k; see `fast_walsh_hadamard`."""
  d = int(x.shape[-1])
  if d < 1 or d & (d - 1):
    raise ValueError(f'length must be a power of two, got {d}.')
  y = tf.reshape(x, [-1, d])
  for m in _block_sizes(d):
    y = tf.matmul(tf.reshape(y, [-1, m, d // m]),
                  tf.constant(_sylvester(m), x.dtype),
                  transpose_a=True)
  if x.shape.rank == 1:
    shape = [d]
  elif x.shape.is_fully_defined():
    shape = x.shape.as_list()
  else:
    shape = tf.shape(x)
  return tf.reshape(y, shape)


def _block_sizes(d: int):
  """The Sylvester block sizes m (16, ..., 16, 2^r) whose Kronecker product
  is H_d, d = 2^k."""
  k = d.bit_length() - 1
  dims = []
  while k > 0:
    step = min(_BLOCK_LOG2, k)
    dims.append(2**step)
    k -= step
  return dims


def fast_walsh_hadamard(x: tf.Tensor) -> tf.Tensor:
  """Orthonormal Walsh-Hadamard transform H x along the last axis of x.

  x has shape [d] or [..., d] (a batch of vectors, each transformed); the
  length d = 2^k must be a power of two. H_d is the k-fold Kronecker
  power of H_2, so the transform factors into small dense Hadamard blocks of
  size 2^4 applied along each axis of x reshaped to [batch, 16, 16, ...,
  2^r]: O(d log d) work per vector done by a few matrix products instead of
  k butterfly passes. H is symmetric and orthonormal, so this function is
  its own inverse.

  Each block contracts the first axis after the batch, y[b, i, rest] ->
  sum_i y[b, i, rest] H_m[i, j], written as one `matmul(y, H_m,
  transpose_a=True)` of y viewed as [batch, m, rest]: the product comes out
  as [batch, rest, m], so the contracted axis moves last and after all
  blocks the original order is back. The transpose happens inside the
  matrix product (no transposed copy of y is written, as `tensordot` did);
  the sums are the same, and the outputs are those of the tensordot form
  bit for bit (checked: tff_ddp_tests/mechanisms/encode_bits_test.py).
  """
  d = int(x.shape[-1])
  return _hadamard_blocks(x) / tf.constant(math.sqrt(d), dtype=x.dtype)


# Row v: the eight signs of the byte v, +1 where bit j of v is set.
_BYTE_SIGNS = np.array(
    [[1.0 if (v >> j) & 1 else -1.0 for j in range(8)] for v in range(256)])
_BYTE_SIGNS.setflags(write=False)


def random_signs(dim: int,
                 seed: tf.Tensor,
                 dtype=tf.float64,
                 magnitude: float = 1.0) -> tf.Tensor:
  """The public sign vector xi in {-1, +1}^dim derived from a round seed,
  times `magnitude` (rounded to `dtype`).

  ceil(dim / 8) uniform bytes (Philox words reduced mod 256, exactly
  uniform as 256 divides 2^32), eight signs each: sign 8i + j is +1 iff bit
  j of byte i is set, so the signs are iid uniform on {-1, +1}. One gather
  of a 256 x 8 table per byte instead of one 32-bit word and three
  element-wise passes per sign.
  """
  count = -(-int(dim) // 8)
  values = tf.random.stateless_uniform([count],
                                       seed=seed,
                                       minval=0,
                                       maxval=256,
                                       dtype=tf.int32)
  table = tf.constant(_BYTE_SIGNS * magnitude, dtype)
  return tf.reshape(tf.gather(table, values), [8 * count])[:dim]


_U32 = 2.0**-24  # unit roundoff of float32


def float32_error_bound(d: int) -> float:
  """eps with ||encode(x) - H D_xi x||_2 <= eps ||x||_2 in float32, any x.

  `RandomizedHadamard.encode` of a float32 x (itself exact: the bound is
  about the rotation) is: pad (exact); multiply by the signs +-s,
  s = fl(1/sqrt(d)) (relative error <= u in s and <= u in the product,
  u = 2^-24, so l2 relative error <= (1 + u)^2 - 1); then for each block
  size m of `_block_sizes(d)`, one product by the +-1 matrix H_m. An
  output of that product is a sum of m terms +-a_i (the products by +-1 are
  exact, with or without fused multiply-adds), and a float sum of m terms
  in any order is within gamma_{m-1} sum_i |a_i| of the exact sum,
  gamma_n = n u / (1 - n u) (Higham, "Accuracy and Stability of Numerical
  Algorithms", 2nd ed., eq. 4.4 ff.). Over one block of m outputs that is an
  l2 error <= sqrt(m) gamma_{m-1} ||a_block||_1 <= m gamma_{m-1}
  ||a_block||_2, and over all blocks <= m gamma_{m-1} ||a||_2, while the
  exact product has norm sqrt(m) ||a||_2: relative error
  r_m = sqrt(m) gamma_{m-1} per stage. Errors of successive stages compound
  multiplicatively ((1 + r)(1 + r') - 1), so

    eps = (1 + u)^3 prod_m (1 + sqrt(m) gamma_{m-1}) - 1,

  one more factor (1 + u) for the cast of a float64 input to float32 done
  by the mechanisms before the call. Rounded up: 303 u = 1.8e-5 at
  d = 2^20, 123 u at 2^8. (A worst case: typical errors are far smaller.)

  That is for values in float32's normal range. TF flushes subnormal results
  to zero, an absolute error below 2^-126 per operation:
  `float32_flush_error(d)` bounds its l2 total, so in general
  ||encode32(x) - H D_xi x||_2 <= eps ||x||_2 + float32_flush_error(d).
  """
  total = (1.0 + _U32)**3
  for m in _block_sizes(int(d)):
    gamma = (m - 1) * _U32 / (1.0 - (m - 1) * _U32)
    total *= 1.0 + math.sqrt(m) * gamma
  return math.nextafter((total - 1.0) * (1.0 + 1e-9), math.inf)


def float32_flush_error(d: int) -> float:
  """An l2 bound on what flushing subnormals to zero adds to the float32
  rotation's error (`float32_error_bound`): 2^-125 d (2 + sum_m (m - 1)).

  A flushed result is off by less than 2^-126. The cast and the sign
  product flush at most once per coordinate (l2 <= sqrt(d) 2^-126 each);
  a block product's m - 1 additions per output at most m - 1 times (l2 <=
  (m - 1) sqrt(d) 2^-126). An error entering a stage leaves it multiplied
  by at most sqrt(m) (1 + r_m) (the stage's norm and relative error), so
  by at most sqrt(d) (1 + eps) <= 2 sqrt(d) by the end: the total is
  below 2 sqrt(d) * sqrt(d) 2^-126 (2 + sum_m (m - 1)). 2^-93 at d = 2^26.
  """
  d = int(d)
  return 2.0**-125 * d * (2 + sum(m - 1 for m in _block_sizes(d)))


class RandomizedHadamard:
  """x -> H D_xi [x, 0...] and back, for a fixed input dimension.

  An isometry (`is_isometry`), with no guaranteed l_inf level (`level` is
  None): each output coordinate is sub-Gaussian with variance proxy
  ||x||^2 / output_dim, so it is small with high probability only.

  Attributes:
    dim: input dimension.
    output_dim: the power of two the input is padded to.
  """

  is_isometry = True
  level = None

  def __init__(self, dim: int):
    self.dim = checks.integer(dim, 'dim', 1)
    self.output_dim = padded_dimension(self.dim)
    if self.output_dim > MAX_OUTPUT_DIM:
      raise ValueError(
          f'dim={self.dim} pads to {self.output_dim} > {MAX_OUTPUT_DIM} '
          '(hadamard.MAX_OUTPUT_DIM), more than one client encoding should '
          'hold; split the value.')

  def __repr__(self):
    return f'RandomizedHadamard(dim={self.dim})'

  def encode_with_residual(self, x: tf.Tensor, seed: tf.Tensor):
    """(encode(x), 0): the rotation is exactly invertible."""
    y = self.encode(x, seed)
    return y, tf.zeros([], y.dtype)

  @property
  def float32_error(self) -> float:
    """`float32_error_bound(output_dim)`: encode in float32 is within this
    relative l2 error of the exact rotation."""
    return float32_error_bound(self.output_dim)

  def encode(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Pads x (shape [dim]) with zeros and returns H D_xi x, shape [padded],
    in x's dtype (the signs carry H's factor 1/sqrt(padded))."""
    x = tf.pad(tf.reshape(x, [self.dim]), [[0, self.output_dim - self.dim]])
    return _hadamard_blocks(self._signs(seed, x.dtype) * x)

  def decode(self, y: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Returns D_xi H^T y with the padding removed, shape [dim]."""
    y = tf.reshape(y, [self.output_dim])
    x = self._signs(seed, y.dtype) * _hadamard_blocks(y)
    return x[:self.dim]

  def _signs(self, seed, dtype):
    return random_signs(self.output_dim, seed, dtype,
                        1.0 / math.sqrt(self.output_dim))
