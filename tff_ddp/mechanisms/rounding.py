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

import math

import tensorflow as tf

from tff_ddp.utils import checks

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


def rounded_l2_norm_bound_squared(
    scaled_l2_clip: float, dimension: int, beta: float) -> float:
  """Squared l2 bound after conditional randomized rounding, DDG Thm 5 eq. (3).

  In the scaled domain (c/gamma = `scaled_l2_clip`, d = `dimension`) the
  rounding loop of Algorithm 1 accepts x~ only if ||x~||_2^2 is at most

    min{ (c/gamma + sqrt(d))^2,
         (c/gamma)^2 + d/4 + sqrt(2 log(1/beta)) * (c/gamma + sqrt(d)/2) }.

  The first bound holds for every rounding (||x~ - x''||_inf < 1); the second
  is the conditional one and is absent for beta = 0 (log(1/0) = inf).

  Args:
    scaled_l2_clip: c / gamma, the clip norm in integer units; >= 0.
    dimension: d, the (padded) dimension; >= 1.
    beta: conditional rounding bias in [0, 1).

  Returns:
    The squared bound, a float.
  """
  c = checks.nonnegative(scaled_l2_clip, 'scaled_l2_clip')
  dimension = checks.integer(dimension, 'dimension', 1)
  beta = checks.real(beta, 'beta', 0.0, 1.0, high_open=True)
  sqrt_d = math.sqrt(dimension)
  bound = (c + sqrt_d) * (c + sqrt_d)
  if beta > 0.0:
    conditional = (
        c * c + dimension / 4.0
        + math.sqrt(2.0 * math.log(1.0 / beta)) * (c + sqrt_d / 2.0))
    bound = min(bound, conditional)
  return bound
