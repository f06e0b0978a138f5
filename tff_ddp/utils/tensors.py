"""Small numeric helpers on tensors shared by encoders and mechanisms."""

import math
import numbers
from typing import Tuple

import numpy as np
import tensorflow as tf


def overflow_safe_norm(v: tf.Tensor, axis=None) -> tf.Tensor:
  """||v||_2 without overflow or underflow (scaled by max |v_i|).

  tf.norm squares the coordinates first, so a float64 vector with a
  coordinate of 1e200 has norm inf and one with all coordinates 1e-200 has
  norm 0; dividing by the largest magnitude first keeps both exact to a few
  ulps. A vector of zeros has norm 0; one with a NaN or inf entry has norm
  NaN (callers zero non-finite values first). TF flushes subnormals to zero.
  `axis=None` is the norm of all of v; an integer axis gives the norms along
  it (e.g. -1: one per row), each NaN exactly when its own slice is
  non-finite.
  """
  big = tf.reduce_max(tf.abs(v), axis=axis, keepdims=True)
  safe = tf.where(big > 0, big, tf.ones_like(big))
  norm = safe * tf.norm(v / safe, axis=axis, keepdims=True)
  out = tf.where(big > 0, norm, tf.zeros_like(big))
  # tf.reduce_max may skip a NaN: say NaN rather than a norm of the rest.
  finite = tf.reduce_all(tf.math.is_finite(v), axis=axis, keepdims=True)
  out = tf.where(finite, out, tf.constant(float('nan'), v.dtype))
  return (tf.reshape(out, []) if axis is None else tf.squeeze(out, axis=axis))


def clip_to_norm(v: tf.Tensor, clip: float) -> Tuple[tf.Tensor, tf.Tensor]:
  """(v scaled to l2 norm <= clip, whether it was scaled), overflow-safe.

  Works on v / max|v_i| (entries in [-1, 1], norm in [1, sqrt(d)]), so a
  coordinate of 1e200 is clipped to the right direction instead of giving
  inf / inf = NaN or zeros: ||v|| > clip iff ||v / big|| > clip / big.
  v is a vector (one norm, one flag). max|v_i| is max(max v, -min v) (no
  |v| copy), and an unclipped v is returned as it is (a `tf.cond`, no
  select pass); the outputs are those of the element-wise form bit for bit.
  """
  big = tf.maximum(tf.reduce_max(v), -tf.reduce_min(v))
  positive = big > 0
  safe = tf.where(positive, big, tf.ones_like(big))
  unit = v / safe
  unit_norm = tf.norm(unit)
  clipped = positive & (unit_norm > clip / safe)
  scaled = tf.cond(clipped, lambda: unit * (clip / unit_norm), lambda: v)
  return scaled, clipped


# The most samples one sampler call draws: one client's encoding at most
# (encoders cap their output at 2^26 coordinates). Larger requests are
# refused before anything is allocated.
MAX_SAMPLES = 2**26


def keep_largest(v: tf.Tensor, k: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """(v with all but its k largest-magnitude coordinates zeroed, whether
  more than k were non-zero): an l0 clip of a 1-D tensor. v is returned
  unchanged when it has at most k non-zero coordinates."""
  clipped = tf.math.count_nonzero(v) > k
  _, keep = tf.math.top_k(tf.abs(v), k=k)
  kept = tf.scatter_nd(keep[:, tf.newaxis], tf.gather(v, keep),
                       tf.shape(v, out_type=tf.int32))
  return tf.where(clipped, kept, v), clipped


def static_shape(shape):
  """A list of ints, or None for a non-constant 1-D shape tensor.

  Refuses float, bool and negative dims (TypeError / ValueError) and more
  than MAX_SAMPLES elements (ValueError), before anything is allocated.
  """
  if isinstance(shape, tf.TensorShape):
    if not shape.is_fully_defined():
      raise ValueError(f'shape must be fully defined, got {shape}.')
    dims = shape.as_list()
  elif isinstance(shape, (tf.Tensor, tf.Variable, np.ndarray)):
    if not (shape.dtype.is_integer if hasattr(shape.dtype, 'is_integer') else
            np.issubdtype(shape.dtype, np.integer)):
      raise TypeError(f'shape must have an integer dtype, got {shape.dtype}.')
    if len(shape.shape) != 1:
      raise ValueError(f'shape must be a 1-D tensor, got rank '
                       f'{len(shape.shape)}.')
    value = tf.get_static_value(shape)
    if value is None:
      return None
    dims = [int(d) for d in value]
  elif isinstance(shape, (list, tuple)):
    dims = list(shape)
  else:
    raise TypeError(
        f'shape must be a list/tuple of ints, a TensorShape or a 1-D int '
        f'tensor, got {shape!r}.')
  for d in dims:
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, numbers.Integral):
      raise TypeError(f'shape entries must be ints, got {d!r} in {shape!r}.')
    if d < 0:
      raise ValueError(f'shape entries must be >= 0, got {d} in {shape!r}.')
  dims = [int(d) for d in dims]
  if math.prod(dims) > MAX_SAMPLES:
    raise ValueError(
        f'shape {dims} asks for {math.prod(dims)} samples, more than '
        'MAX_SAMPLES = 2^26 per call (one client encoding at most); draw '
        'them in several calls.')
  return dims


def stateless_seed(seed) -> tf.Tensor:
  """seed as a shape-[2] int64 tensor."""
  try:
    tensor = tf.convert_to_tensor(seed)
  except (TypeError, ValueError) as e:
    raise TypeError(
        f'seed must be a shape-[2] int32/int64 tensor or a pair of ints, got '
        f'{seed!r}.') from e
  if tensor.dtype not in (tf.int32, tf.int64):
    raise TypeError(
        f'seed must be a shape-[2] int32/int64 tensor or a pair of ints, got '
        f'dtype {tensor.dtype.name}.')
  if not tensor.shape.is_compatible_with([2]):
    raise ValueError(f'seed must have shape [2], got shape {tensor.shape}.')
  return tf.cast(tensor, tf.int64)


def output_shape(shape):
  """(shape to reshape to, int64 number of elements) of a sampler's shape.

  Validated by `static_shape`; a non-constant 1-D int tensor passes through.
  """
  static = static_shape(shape)
  if static is not None:
    return static, tf.constant(int(np.prod(static, dtype=np.int64)), tf.int64)
  out = tf.cast(shape, tf.int64)
  return out, tf.reduce_prod(out)
