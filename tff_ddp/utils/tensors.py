"""Small numeric helpers on tensors shared by encoders and mechanisms."""

from typing import Tuple

import tensorflow as tf


def overflow_safe_norm(v: tf.Tensor, axis=None) -> tf.Tensor:
  """||v||_2 without overflow or underflow (scaled by max |v_i|).

  tf.norm squares the coordinates first, so a float64 vector with a
  coordinate of 1e200 has norm inf and one with all coordinates 1e-200 has
  norm 0; dividing by the largest magnitude first keeps both exact to a few
  ulps. A vector of zeros has norm 0. `axis=None` is the norm of all of v;
  an integer axis gives the norms along it (e.g. -1: one per row).
  """
  big = tf.reduce_max(tf.abs(v), axis=axis, keepdims=True)
  safe = tf.where(big > 0, big, tf.ones_like(big))
  norm = safe * tf.norm(v / safe, axis=axis, keepdims=True)
  out = tf.where(big > 0, norm, tf.zeros_like(big))
  return (tf.reshape(out, []) if axis is None
          else tf.squeeze(out, axis=axis))


def clip_to_norm(v: tf.Tensor, clip: float) -> Tuple[tf.Tensor, tf.Tensor]:
  """(v scaled to l2 norm <= clip, whether it was scaled), overflow-safe.

  Works on v / max|v_i| (entries in [-1, 1], norm in [1, sqrt(d)]), so a
  coordinate of 1e200 is clipped to the right direction instead of giving
  inf / inf = NaN or zeros: ||v|| > clip iff ||v / big|| > clip / big.
  """
  big = tf.reduce_max(tf.abs(v))
  positive = big > 0
  safe = tf.where(positive, big, tf.ones_like(big))
  unit = v / safe
  unit_norm = tf.norm(unit)
  clipped = positive & (unit_norm > clip / safe)
  scaled = unit * (clip / tf.where(clipped, unit_norm, tf.ones_like(big)))
  return tf.where(clipped, scaled, v), clipped
