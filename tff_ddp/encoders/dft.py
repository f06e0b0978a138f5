"""Randomized discrete Fourier transform: TFF's `rotation_type='dft'`.

The rotation TFF 0.87's `DistributedDpSumFactory` uses by default
(`tff.aggregators.DiscreteFourierTransformFactory`), as an encoder here
(`RandomizedDft`): the flattening step of the distributed discrete Gaussian
(Kairouz, Liu & Steinke, "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation", ICML 2021, arXiv 2102.06387,
Section 4; Theorem 5 (3) for the exact norm check after rounding). It pads
to an even length, not to a power of two, and its phases i^k are exact;
every coordinate is sub-Gaussian with the Hadamard's variance proxy.

The map, its inverse, why complex phases and the sub-Gaussian proof, a
worked example: docs/notes/dft_rotation.md.
"""

import math

import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp.utils import checks


def padded_dimension(dim: int) -> int:
  """The even length D >= dim (and >= 2) the input is padded to."""
  dim = checks.integer(dim, 'dim', 1)
  return max(2, dim + dim % 2)


def random_phases(num: int, seed: tf.Tensor) -> tf.Tensor:
  """k_j in {0, 1, 2, 3}, int32 [num]: the public phases i^{k_j}."""
  return tf.random.stateless_uniform([num],
                                     seed=seed,
                                     minval=0,
                                     maxval=4,
                                     dtype=tf.int32)


def _rotate(re, im, k, inverse):
  """(re, im) of i^k (re + i im), or of i^-k with `inverse`; exact."""
  # i^k = c + i s with (c, s) = (1, 0), (0, 1), (-1, 0), (0, -1).
  c = tf.cast(tf.gather([1, 0, -1, 0], k), re.dtype)
  s = tf.cast(tf.gather([0, 1, 0, -1], k), re.dtype)
  if inverse:
    s = -s
  return c * re - s * im, s * re + c * im


class RandomizedDft:
  """x -> (Re, Im) of F diag(i^k) z(x) / sqrt(N) and back.

  An isometry (`is_isometry`), with no guaranteed l_inf level (`level` is
  None): each output coordinate is sub-Gaussian with variance proxy
  ||x||^2 / output_dim, so it is small with high probability only, as for
  the randomized Hadamard. The map, its inverse and that proof:
  docs/notes/dft_rotation.md ("Why complex phases").

  Attributes:
    dim: input dimension.
    output_dim: D, the even length the input is padded to.
  """

  is_isometry = True
  level = None

  def __init__(self, dim: int):
    self.dim = checks.integer(dim, 'dim', 1)
    self.output_dim = padded_dimension(self.dim)
    if self.output_dim > hadamard.MAX_OUTPUT_DIM:
      raise ValueError(
          f'dim={self.dim} pads to {self.output_dim} > '
          f'{hadamard.MAX_OUTPUT_DIM} (hadamard.MAX_OUTPUT_DIM), more than '
          'one client encoding should hold; split the value.')
    self._n = self.output_dim // 2

  def __repr__(self):
    return f'RandomizedDft(dim={self.dim})'

  def _work_dtype(self, dtype):
    """The float the FFT runs in (complex128 for float64 inputs, complex64
    for the narrower floats)."""
    if dtype == tf.float64:
      return tf.float64
    if dtype in (tf.float32, tf.float16, tf.bfloat16):
      return tf.float32
    raise TypeError(f'the DFT rotation needs a float tensor, got {dtype}.')

  def _root_n(self, work):
    """sqrt(N) as a complex constant of `work`'s precision (a Python float
    through tf.cast would pass through float32)."""
    root = tf.constant(math.sqrt(self._n), work)
    return tf.complex(root, tf.zeros([], work))

  def encode_with_residual(self, x: tf.Tensor, seed: tf.Tensor):
    """(encode(x), 0): the rotation is exactly invertible."""
    y = self.encode(x, seed)
    return y, tf.zeros([], y.dtype)

  def encode(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Pads x (shape [dim]) to D and returns (Re w, Im w), shape [D]."""
    x = tf.convert_to_tensor(x)
    dtype = x.dtype
    work = self._work_dtype(dtype)
    x = tf.pad(tf.cast(tf.reshape(x, [self.dim]), work),
               [[0, self.output_dim - self.dim]])
    pairs = tf.reshape(x, [self._n, 2])
    re, im = _rotate(pairs[:, 0],
                     pairs[:, 1],
                     random_phases(self._n, seed),
                     inverse=False)
    w = tf.signal.fft(tf.complex(re, im)) / self._root_n(work)
    return tf.cast(tf.concat([tf.math.real(w), tf.math.imag(w)], 0), dtype)

  def decode(self, y: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """The inverse: conjugate phases of the inverse DFT, padding removed."""
    y = tf.convert_to_tensor(y)
    dtype = y.dtype
    work = self._work_dtype(dtype)
    y = tf.cast(tf.reshape(y, [self.output_dim]), work)
    w = tf.complex(y[:self._n], y[self._n:])
    # tf.signal.ifft divides by N; the unitary inverse divides by sqrt(N).
    z = tf.signal.ifft(w) * self._root_n(work)
    re, im = _rotate(tf.math.real(z),
                     tf.math.imag(z),
                     random_phases(self._n, seed),
                     inverse=True)
    x = tf.reshape(tf.stack([re, im], axis=1), [self.output_dim])
    return tf.cast(x[:self.dim], dtype)
