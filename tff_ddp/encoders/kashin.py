"""Kashin's representation over a tight frame (Lyubarskii-Vershynin).

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper), Definition 3, Lemma 1 and App. B (the algorithm of
Lyubarskii & Vershynin 2010). `KashinEncoder` maps x in R^d to y in R^D
with x = U y and ||y||_inf <= K / sqrt(D) ||x||_2 for a tight frame U
(`Frame`: 'hadamard', the default, or 'dense'), built from the round's
public seed; the level is enforced, and a missed x is reported as a
residual (`KashinEncoder.encode_with_residual`).

The definition, the algorithm, why the level holds, the frames and a worked
example: docs/notes/kashin_encoder.md.
"""

import enum
import math

import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp.utils import checks
from tff_ddp.utils import tensors


class Frame(enum.StrEnum):
  """The tight frame U of the representation: HADAMARD, d rows of a
  randomized Walsh-Hadamard matrix (O(D log D) per transform); DENSE, a
  random D x d matrix with orthonormal columns (QR; small d only)."""

  HADAMARD = 'hadamard'
  DENSE = 'dense'


# Largest input dimension of the dense frame (O(D d^2) QR, O(D d) memory),
# and the most entries its D x d matrix may have.
MAX_DENSE_DIM = 4096
MAX_DENSE_ENTRIES = 2**26
# Truncation steps: each shrinks the residual by eta; 100 is far beyond use.
MAX_ITERATIONS = 100
# Levels are shrunk by this relative amount so float64 sums of clipped steps
# never exceed the stated level.
_LEVEL_SLACK = 1e-12


def output_dimension(dim: int, redundancy: float) -> int:
  """D: the smallest power of two >= dim (1 + redundancy) and > dim.

  Raises TypeError / ValueError for a bad dim or redundancy, and ValueError
  when D would exceed hadamard.MAX_OUTPUT_DIM.
  """
  dim = checks.integer(dim, 'dim', 1)
  redundancy = checks.real(redundancy, 'redundancy', low=0.0, low_open=True)
  target = max(dim * (1.0 + redundancy), dim + 1.0)
  if target > hadamard.MAX_OUTPUT_DIM:
    raise ValueError(
        f'dim={dim} with redundancy={redundancy} needs an output dimension '
        f'>= {target:.6g} > {hadamard.MAX_OUTPUT_DIM} (the largest encoding '
        'a client holds); lower the redundancy or split the value.')
  return 2**math.ceil(math.log2(target) - 1e-12)


_norm = tensors.overflow_safe_norm


def _fold(seed, data: int):
  return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64),
                                                  tf.constant(data, tf.int64))


class KashinEncoder:
  """Kashin's representation y in R^D of x in R^d, and back (x = U y).

  Attributes:
    dim: d, input dimension.
    output_dim: D, a power of two with D >= d (1 + redundancy), D > d.
    level: K = 1 / ((1 - eta) sqrt(delta)); ||encode(x)||_inf <=
      K ||x||_2 / sqrt(D) for every x.
    eta, delta, iterations, redundancy: the configuration; frame: its
      `Frame`.
  """

  def __init__(self,
               dim: int,
               redundancy: float = 1.0,
               eta: float = 0.5,
               delta: float = 0.8,
               iterations: int = 8,
               frame: str = Frame.HADAMARD):
    """Configures the encoder.

    Defaults (redundancy 1, i.e. D >= 2d; eta = 1/2, delta = 0.8, so
    K = 2 / sqrt(0.8) ~ 2.24; 8 steps) reconstruct random, sparse, spiky
    and constant inputs to float64 precision for d from 1 to 2^16 (see the
    tests; with D / d = 1.5 some inputs keep a residual ~1e-3, so the
    default redundancy is 1). The benchmark reports levels and times.

    Args:
      dim: d >= 1.
      redundancy: lambda > 0 with D >= d (1 + lambda).
      eta: level decay in (0, 1).
      delta: in (0, 1]; the first level is ||x|| / sqrt(delta D).
      iterations: truncation steps in [1, 100] (two Walsh-Hadamard transforms of
        size D each).
      frame: 'hadamard' or 'dense' (d <= 4096), or a `Frame`.

    Raises:
      ValueError: for an argument outside its range (the message says it).
    """
    self.dim = checks.integer(dim, 'dim', 1)
    checks.real(redundancy, 'redundancy', low=0.0, low_open=True)
    checks.probability(eta, 'eta', allow_one=False)
    checks.real(delta, 'delta', 0.0, 1.0, low_open=True)
    checks.integer(iterations, 'iterations', 1, MAX_ITERATIONS)
    frame = checks.member(frame, 'frame', Frame)
    if frame is Frame.DENSE and self.dim > MAX_DENSE_DIM:
      raise ValueError(
          f"frame='dense' supports dim <= {MAX_DENSE_DIM} (O(D d^2) to "
          f"build), got dim={self.dim}; use frame='hadamard'.")
    self.redundancy = float(redundancy)
    self.eta = float(eta)
    self.delta = float(delta)
    self.iterations = int(iterations)
    self.frame = frame
    self.output_dim = output_dimension(self.dim, self.redundancy)
    if frame is Frame.DENSE and self.output_dim * self.dim > MAX_DENSE_ENTRIES:
      raise ValueError(
          f"frame='dense' with dim={self.dim} and redundancy={redundancy} "
          f'holds a {self.output_dim} x {self.dim} matrix, more than '
          f"{MAX_DENSE_ENTRIES} entries; use frame='hadamard'.")
    self.level = 1.0 / ((1.0 - self.eta) * math.sqrt(self.delta))

  is_isometry = False

  def __repr__(self):
    return (f'KashinEncoder(dim={self.dim}, redundancy={self.redundancy}, '
            f'eta={self.eta}, delta={self.delta}, '
            f'iterations={self.iterations}, frame={self.frame.value!r})')

  # -- The frame: U (synthesis, R^D -> R^d) and U^T (analysis). ------------

  def _rows(self, seed):
    """The d frame rows chosen from H_D D_xi: a random injective map."""
    keys = tf.random.stateless_uniform([self.output_dim],
                                       _fold(seed, 1),
                                       dtype=tf.float64)
    return tf.argsort(keys, stable=True)[:self.dim]

  def _dense(self, seed, dtype):
    """U^T, a D x d matrix with orthonormal columns (QR of a Gaussian)."""
    g = tf.random.stateless_normal([self.output_dim, self.dim],
                                   _fold(seed, 2),
                                   dtype=tf.float64)
    q, r = tf.linalg.qr(g)
    # Sign fix makes Q Haar distributed (and deterministic given g).
    q *= tf.sign(tf.linalg.diag_part(r))[tf.newaxis, :]
    return tf.cast(q, dtype)

  def _frame_ops(self, seed, dtype):
    """(analysis U^T: R^d -> R^D, synthesis U: R^D -> R^d) for one seed.

    Both act on the last axis, so they take one vector or a batch [n, .].
    """
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
    if self.frame is Frame.DENSE:
      ut = self._dense(seed, dtype)
      return (lambda v: tf.linalg.matvec(ut, v),
              lambda w: tf.linalg.matvec(ut, w, transpose_a=True))
    signs = hadamard.random_signs(self.output_dim, _fold(seed, 0), dtype)
    row_signs = hadamard.random_signs(self.dim, _fold(seed, 3), dtype)
    rows = self._rows(seed)
    # The scatter of the d signed inputs into D slots, as a gather (batch
    # friendly): slot rows[i] reads input i, every other slot the zero
    # appended at index d.
    source = tf.tensor_scatter_nd_update(
        tf.fill([self.output_dim], tf.constant(self.dim, rows.dtype)),
        rows[:, tf.newaxis], tf.range(self.dim, dtype=rows.dtype))

    def analysis(v):
      padded = tf.concat([row_signs * v, tf.zeros_like(v[..., :1])], -1)
      scattered = tf.gather(padded, source, axis=-1)
      return signs * hadamard.fast_walsh_hadamard(scattered)

    def synthesis(w):
      return row_signs * tf.gather(
          hadamard.fast_walsh_hadamard(signs * w), rows, axis=-1)

    return analysis, synthesis

  # -- Public API. ----------------------------------------------------------

  def levels(self):
    """The truncation levels of the steps, in units of ||x||_2 / sqrt(D)."""
    m0 = (1.0 - _LEVEL_SLACK) / math.sqrt(self.delta)
    out = [m0 * self.eta**j for j in range(self.iterations - 1)]
    out.append(m0 * self.eta**(self.iterations - 1) / (1.0 - self.eta))
    return out

  def encode_with_residual(self, x, seed):
    """(y, ||x - U y||_2): the representation and what it misses.

    Args:
      x: rank-1 float tensor of length dim.
      seed: shape-[2] integer tensor, the round's public seed.

    Returns:
      y (shape [output_dim], x's dtype) with ||y||_inf <= level ||x|| /
      sqrt(D), and the residual norm (x's dtype).
    """
    x = self._check_input(x)
    return self._eager_as_traced('encode_with_residual', self._encode_one)(x,
                                                                           seed)

  def _encode_one(self, x, seed):
    y, residual = self._encode_rows(tf.reshape(x, [1, self.dim]), seed)
    return tf.reshape(y, [self.output_dim]), tf.reshape(residual, [])

  def _eager_as_traced(self, name, fn):
    """`fn`, run as a `tf.function` (cached on this encoder) when called
    eagerly, else `fn` itself (inside a tf.function or TFF computation it
    is traced into the caller's graph).

    Op by op, an encode at d = 2^14 dispatches ~500 small ops (16
    Walsh-Hadamard transforms of a few tensordots each, 8 clip steps):
    eager calls cost ~3x the traced graph. Tracing once per input
    signature makes an eager call run the same graph as a traced one, so
    eager and traced outputs agree bit for bit (op by op they differed in
    the last ulp: `RepresentationTest.test_eager_equals_traced`).
    """
    if not tf.executing_eagerly():
      return fn
    functions = self.__dict__.setdefault('_functions', {})
    if name not in functions:
      functions[name] = tf.function(fn, autograph=False, reduce_retracing=True)
    return lambda *args: functions[name](
        *[tf.convert_to_tensor(a) for a in args])

  def encode_batch(self, x, seed):
    """`encode_with_residual` of each row of x ([n, dim]) with one frame.

    The same computation as one call per row (row i of the result equals
    `encode_with_residual(x[i], seed)` up to float rounding), done as
    batched products: for simulating many clients of one round.

    Returns:
      (y [n, output_dim], residual norms [n]), x's dtype.
    """
    x = self._check_input(x)
    return self._eager_as_traced('encode_batch', self._encode_batch)(x, seed)

  def _encode_batch(self, x, seed):
    return self._encode_rows(tf.reshape(x, [-1, self.dim]), seed)

  def _check_input(self, x):
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
      raise TypeError(f'x must be a float tensor, got {x.dtype}.')
    return x

  def _encode_rows(self, x, seed):
    """The algorithm on each row of x [n, dim].

    Lyubarskii & Vershynin's, with the last step's budget enforcing the
    level: docs/notes/kashin_encoder.md, "Algorithm".
    """
    analysis, synthesis = self._frame_ops(seed, x.dtype)
    unit = _norm(x, axis=-1)[:, tf.newaxis] / tf.constant(
        math.sqrt(self.output_dim), x.dtype)
    y = tf.zeros([tf.shape(x)[0], self.output_dim], x.dtype)
    r = x
    for level in self.levels():  # static: `iterations` steps
      m = unit * tf.constant(level, x.dtype)
      t = tf.clip_by_value(analysis(r), -m, m)
      y += t
      r -= synthesis(t)
    return y, _norm(r, axis=-1)

  def encode(self, x, seed):
    """Kashin's representation y of x (shape [output_dim]); x = U y."""
    return self.encode_with_residual(x, seed)[0]

  def decode(self, y, seed):
    """U y (shape [dim]); the exact inverse of `encode` up to the residual."""
    y = tf.convert_to_tensor(y)
    if not y.dtype.is_floating:
      raise TypeError(f'y must be a float tensor, got {y.dtype}.')
    return self._eager_as_traced('decode', self._decode)(y, seed)

  def _decode(self, y, seed):
    _, synthesis = self._frame_ops(seed, y.dtype)
    return synthesis(tf.reshape(y, [self.output_dim]))

  def frame_matrix(self, seed):
    """U as a dense d x D tensor (float64), for tests and small d."""
    _, synthesis = self._frame_ops(seed, tf.float64)
    eye = tf.eye(self.output_dim, dtype=tf.float64)
    return tf.transpose(tf.map_fn(synthesis, eye))
