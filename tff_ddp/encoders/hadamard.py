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
  if d < 1 or d & (d - 1):
    raise ValueError(f'length must be a power of two, got {d}.')
  k = d.bit_length() - 1
  dims = []
  while k > 0:
    step = min(_BLOCK_LOG2, k)
    dims.append(2**step)
    k -= step
  y = tf.reshape(x, [-1, d])
  for m in dims:
    y = tf.matmul(tf.reshape(y, [-1, m, d // m]),
                  tf.constant(_sylvester(m), x.dtype), transpose_a=True)
  if x.shape.rank == 1:
    shape = [d]
  elif x.shape.is_fully_defined():
    shape = x.shape.as_list()
  else:
    shape = tf.shape(x)
  return tf.reshape(y, shape) / tf.constant(math.sqrt(d), dtype=x.dtype)


def random_signs(dim: int, seed: tf.Tensor, dtype=tf.float64) -> tf.Tensor:
  """The public sign vector xi in {-1, +1}^dim derived from a round seed."""
  bits = tf.random.stateless_uniform(
      [dim], seed=seed, minval=0, maxval=2, dtype=tf.int32)
  return tf.cast(2 * bits - 1, dtype)


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

  def encode(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Pads x (shape [dim]) with zeros and returns H D_xi x, shape [padded]."""
    x = tf.pad(tf.reshape(x, [self.dim]), [[0, self.output_dim - self.dim]])
    return fast_walsh_hadamard(random_signs(self.output_dim, seed, x.dtype) * x)

  def decode(self, y: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Returns D_xi H^T y with the padding removed, shape [dim]."""
    y = tf.reshape(y, [self.output_dim])
    x = random_signs(self.output_dim, seed, y.dtype) * fast_walsh_hadamard(y)
    return x[:self.dim]
