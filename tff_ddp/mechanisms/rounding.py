"""Conditional randomized rounding (DDG paper, Algorithm 1).

Each coordinate of x'' is rounded to floor(x'') + 1 with probability
frac(x'') and to floor(x'') otherwise, so E[x~] = x'' and
||x~ - x''||_inf < 1. The *conditional* version repeats the rounding, with
fresh randomness, until ||x~||_2^2 <= threshold, the squared norm bound of
Theorem 5 eq. (3); the privacy analysis needs only that the accepted vector
satisfies the bound, which is checked here in exact int64 arithmetic.

Worked example: x'' = (42.3, -0.5). Coordinate 0 becomes 43 w.p. 0.3 and 42
w.p. 0.7; coordinate 1 becomes 0 or -1 w.p. 1/2 each.
"""

import tensorflow as tf

# Each attempt succeeds with probability >= 1 - beta (>= 0.39 for the
# recommended beta = exp(-1/2), and 1 for beta = 0); after this many failures
# (probability < 1e-200) the client sends zeros instead, which is private.
MAX_ROUNDING_ATTEMPTS = 1000


def rounding_uniforms(shape, seed: tf.Tensor, attempt) -> tf.Tensor:
  """Uniforms in [0, 1) (float64) of rounding attempt `attempt`."""
  return tf.random.stateless_uniform(
      shape,
      seed=tf.random.experimental.stateless_fold_in(
          seed, tf.cast(attempt, tf.int64)),
      dtype=tf.float64)


def randomized_round(x: tf.Tensor, uniforms: tf.Tensor) -> tf.Tensor:
  """Unbiased randomized rounding of float64 `x` to int64 with given uniforms."""
  floor = tf.floor(x)
  up = tf.cast(uniforms < (x - floor), tf.float64)
  return tf.cast(floor + up, tf.int64)


def conditional_randomized_round(
    x: tf.Tensor, threshold: int, seed: tf.Tensor,
    max_attempts: int = MAX_ROUNDING_ATTEMPTS):
  """Rounds float64 `x` until the squared l2 norm is <= `threshold`.

  Args:
    x: float64 rank-1 tensor (the scaled, rotated client vector).
    threshold: integer bound on ||x~||_2^2 (must keep the sum of squares
      below 2^63; the factories check this).
    seed: the client's private stateless seed (never shared).
    max_attempts: give up after this many attempts.

  Returns:
    (x~ as int64, number of attempts used, success as bool). When no attempt
    succeeds, x~ is all zeros (norm 0 satisfies any bound).
  """
  threshold = tf.constant(int(threshold), tf.int64)

  def attempt(i):
    rounded = randomized_round(x, rounding_uniforms(tf.shape(x), seed, i))
    return rounded, tf.reduce_sum(rounded * rounded) <= threshold

  def cond(i, rounded, ok):
    del rounded
    return tf.logical_and(tf.logical_not(ok), i < max_attempts)

  def body(i, rounded, ok):
    del rounded, ok
    new_rounded, new_ok = attempt(i)
    return i + 1, new_rounded, new_ok

  first, first_ok = attempt(tf.constant(0, tf.int64))
  attempts, rounded, ok = tf.while_loop(
      cond, body, (tf.constant(1, tf.int64), first, first_ok))
  rounded = tf.where(ok, rounded, tf.zeros_like(rounded))
  return rounded, attempts, ok
