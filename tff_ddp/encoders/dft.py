"""Randomized discrete Fourier transform: TFF's `rotation_type='dft'`.

The rotation TFF 0.87's `DistributedDpSumFactory` uses by default
(`tff.aggregators.DiscreteFourierTransformFactory`), as an encoder here: the
flattening step of the distributed discrete Gaussian (Kairouz, Liu & Steinke,
"The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation", ICML 2021, arXiv 2102.06387, Section 4: a random
rotation makes every coordinate sub-Gaussian with variance proxy
||x||_2^2 / D, so that the modular clipping of the sum is rare). Its
advantage over the randomized Walsh-Hadamard transform is the padding: to an
*even* length D = dim + (dim mod 2), not to a power of two, so at
dim = 2^k + 1 the noise runs over 2^k + 2 coordinates instead of 2^(k+1).

The map, for x in R^dim and a public round seed:

1. pad x with at most one zero to D = 2N and read it as N complex numbers
   z_j = x_{2j} + i x_{2j+1};
2. multiply each by a public random phase i^{k_j}, k_j uniform in
   {0, 1, 2, 3} (2-bit integers from the seed: the phase is exact, a sign
   change and/or a swap of real and imaginary part, no rounding);
3. apply the unitary DFT, w = F z / sqrt(N);
4. output (Re w, Im w) in R^D.

Steps 1, 2 and 4 are permutations and sign changes and step 3 is unitary, so
the map is an isometry of R^D; `decode` applies the inverse DFT, the
conjugate phases and drops the padding: an exact inverse up to float
rounding: ~1e-15 relative at float64 for smooth lengths, up to ~1e-12 at
N with large prime factors (TensorFlow's FFT there; measured 6e-12 at
d = 2^14 + 1). That slack does not touch the privacy analysis: the DDG
checks the norm of the *rounded* vector exactly (conditional rounding,
Theorem 5 (3) of the DDG paper).

Why complex phases and not the Hadamard's real +-1 signs. TFF's
`DiscreteFourierTransformFactory` also multiplies by a random phase, but a
continuous one, e^{i theta} with theta uniform in [0, 2 pi) computed in
complex64 (its own comment notes that 2 bits would do); here the phase is
i^k, exact in any precision. Real signs would not do. Output coordinate m is Re or Im of (1/sqrt N) sum_j omega^{jm}
i^{k_j} z_j. With signs only, a term's real part is +-Re(omega^{jm} z_j),
whose size depends on the phase of omega^{jm} z_j: for x = e_0, w_0 =
x_0 / sqrt(N) is real, so Re w_0 has variance 2 ||x||^2 / D, twice the
rotation's nominal ||x||^2 / D, for every seed. With the random phase, the
term u_j = Re(i^{k_j} a_j) (a_j = omega^{jm} z_j / sqrt N = p + i q) takes
the values p, -q, -p, q with probability 1/4 each: mean 0, variance
|a_j|^2 / 2, and the coordinates' variance is exactly ||x||^2 / D for every
input. Sub-Gaussian with the same proxy as the Hadamard's: the moment
generating function of u_j is (cosh(t p) + cosh(t q)) / 2, and since
s -> cosh(t sqrt(s)) is convex (its power series in s has positive
coefficients), over p^2 + q^2 = r^2 it is largest at (p, q) = (r, 0):
(cosh(t r) + 1) / 2 = cosh^2(t r / 2) <= exp(t^2 r^2 / 4). So
E exp(t w_m) <= exp(t^2 sum_j |a_j|^2 / 4) = exp(t^2 ||x||^2 / (2 D)):
variance proxy ||x||^2 / D, as for `hadamard.RandomizedHadamard`.

A worked example: x = (3, 4), so D = 2, N = 1, z_0 = 3 + 4i; with
k_0 = 1 the phase gives i z_0 = -4 + 3i, the DFT of length 1 is the
identity, and encode(x) = (-4, 3); decode multiplies -4 + 3i by
i^-1 = -i: 3 + 4i, i.e. (3, 4).
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
  return tf.random.stateless_uniform(
      [num], seed=seed, minval=0, maxval=4, dtype=tf.int32)


def _rotate(re, im, k, inverse):
  """(re, im) of i^k (re + i im), or of i^-k with `inverse`; exact."""
  # i^k = c + i s with (c, s) = (1, 0), (0, 1), (-1, 0), (0, -1).
  c = tf.cast(tf.gather([1, 0, -1, 0], k), re.dtype)
  s = tf.cast(tf.gather([0, 1, 0, -1], k), re.dtype)
  if inverse:
    s = -s
  return c * re - s * im, s * re + c * im


class RandomizedDft:
  """x -> (Re, Im) of F diag(i^k) z(x) / sqrt(N) and back (module doc).

  An isometry (`is_isometry`), with no guaranteed l_inf level (`level` is
  None): each output coordinate is sub-Gaussian with variance proxy
  ||x||^2 / output_dim (module docstring), so it is small with high
  probability only, as for the randomized Hadamard.

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
    re, im = _rotate(pairs[:, 0], pairs[:, 1],
                     random_phases(self._n, seed), inverse=False)
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
    re, im = _rotate(tf.math.real(z), tf.math.imag(z),
                     random_phases(self._n, seed), inverse=True)
    x = tf.reshape(tf.stack([re, im], axis=1), [self.output_dim])
    return tf.cast(x[:self.dim], dtype)
