"""Conditional randomized rounding (DDG paper, Algorithm 1).

Each coordinate of x'' is rounded to floor(x'') + 1 with probability
frac(x'') and to floor(x'') otherwise, so E[x~] = x'' and
||x~ - x''||_inf < 1. The *conditional* version repeats the rounding, with
fresh randomness, until ||x~||_2^2 <= threshold, the squared norm bound of
Theorem 5 eq. (3); the privacy analysis needs only that the accepted vector
satisfies the bound, which is checked here in exact int64 arithmetic.

Worked example: x'' = (42.3, -0.5). Coordinate 0 becomes 43 w.p. 0.3 and 42
w.p. 0.7; coordinate 1 becomes 0 or -1 w.p. 1/2 each.

Random bits. A coordinate's coin is drawn from k bits of one random word
(`round_with_words`): up iff r < frac(x) 2^k, with r the word's low k bits,
k = `ROUNDING_BITS` of x's dtype (24 for float32, 31 for float64). Both
sides are exact floats, so P(up) = ceil(frac(x) 2^k) / 2^k, in
[frac(x), frac(x) + 2^-k): the rounding is unbiased up to 2^-k per
coordinate (and frac(x) itself is exact for |x| >= 1, within u/2 of the
real fraction below, u the dtype's unit roundoff). That is the whole
difference to Algorithm 1's exactly unbiased coin; the privacy analysis
does not use unbiasedness (only the accepted norm), the utility analysis
sees a bias below 2^-k gamma per coordinate and client. float64 uniforms
(two 32-bit words each) bought 2^-52 for twice the random bits.
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
      seed=tf.random.experimental.stateless_fold_in(seed,
                                                    tf.cast(attempt, tf.int64)),
      dtype=tf.float64)


def randomized_round(x: tf.Tensor, uniforms: tf.Tensor) -> tf.Tensor:
  """Unbiased randomized rounding of float64 `x` to int64 with given uniforms."""
  floor = tf.floor(x)
  up = tf.cast(uniforms < (x - floor), tf.float64)
  return tf.cast(floor + up, tf.int64)


# Coin bits per coordinate (k above): the most that keep r and frac(x) 2^k
# exact in the dtype and fit a 32-bit word's low bits.
ROUNDING_BITS = {tf.float32: 24, tf.float64: 31}


def integer_dtype(float_dtype) -> tf.DType:
  """int32 for float32 (the mechanisms' int32 path), else int64."""
  return tf.int32 if float_dtype == tf.float32 else tf.int64


def rounding_words(shape, seed: tf.Tensor, attempt) -> tf.Tensor:
  """Uniform 32-bit words (int32) of rounding attempt `attempt`."""
  return tf.random.stateless_uniform(
      shape,
      seed=tf.random.experimental.stateless_fold_in(seed,
                                                    tf.cast(attempt, tf.int64)),
      dtype=tf.int32,
      minval=None,
      maxval=None)


def round_with_words(x: tf.Tensor, words: tf.Tensor, bits=None) -> tf.Tensor:
  """Randomized rounding of float `x` with the low `bits` bits of `words`.

  floor(x) + [r < (x - floor(x)) 2^bits], r = words & (2^bits - 1): P(up)
  = ceil(frac 2^bits) / 2^bits (module docstring, "Random bits"). `bits`
  defaults to `ROUNDING_BITS[x.dtype]`. Returns `integer_dtype(x.dtype)`;
  float32 x must have |x| < 2^31 - 1 (the mechanisms check it at
  construction).
  """
  bits = ROUNDING_BITS[x.dtype] if bits is None else int(bits)
  if not 1 <= bits <= ROUNDING_BITS[x.dtype]:
    raise ValueError(f'bits must be in [1, {ROUNDING_BITS[x.dtype]}] for '
                     f'{x.dtype.name}, got {bits}.')
  r = tf.cast(
      tf.bitwise.bitwise_and(words, tf.constant((1 << bits) - 1, words.dtype)),
      x.dtype)
  floor = tf.floor(x)
  up = r < (x - floor) * tf.constant(2.0**bits, x.dtype)
  out = integer_dtype(x.dtype)
  return tf.cast(floor, out) + tf.cast(up, out)


def conditional_randomized_round(x: tf.Tensor,
                                 threshold: int,
                                 seed: tf.Tensor,
                                 max_attempts: int = MAX_ROUNDING_ATTEMPTS,
                                 first_words=None):
  """Rounds float `x` until the squared l2 norm is <= `threshold`.

  Attempt i draws its words with `rounding_words(shape, seed, i)` (attempt
  0: `first_words` when given, words the caller drew, independent of
  everything else the client computes from them) and rounds with
  `round_with_words`. The norm is checked exactly in int64.

  Args:
    x: float32 or float64 rank-1 tensor (the scaled, rotated client vector;
      float32 values must stay below 2^31 - 1).
    threshold: integer bound on ||x~||_2^2 (must keep the sum of squares
      below 2^63; the factories check this).
    seed: the client's private stateless seed (never shared).
    max_attempts: give up after this many attempts.
    first_words: optional int32 or int64 words of x's shape for attempt 0.

  Returns:
    (x~ as `integer_dtype(x.dtype)`, number of attempts used, success as
    bool). When no attempt succeeds, x~ is all zeros (norm 0 satisfies any
    bound).
  """
  threshold = tf.constant(int(threshold), tf.int64)

  def accepted(rounded):
    wide = tf.cast(rounded, tf.int64)
    return tf.reduce_sum(wide * wide) <= threshold

  def attempt(i):
    rounded = round_with_words(x, rounding_words(tf.shape(x), seed, i))
    return rounded, accepted(rounded)

  def cond(i, rounded, ok):
    del rounded
    return tf.logical_and(tf.logical_not(ok), i < max_attempts)

  def body(i, rounded, ok):
    del rounded, ok
    new_rounded, new_ok = attempt(i)
    return i + 1, new_rounded, new_ok

  if first_words is None:
    first, first_ok = attempt(tf.constant(0, tf.int64))
  else:
    first = round_with_words(x, first_words)
    first_ok = accepted(first)
  attempts, rounded, ok = tf.while_loop(
      cond, body, (tf.constant(1, tf.int64), first, first_ok))
  rounded = tf.cond(ok, lambda: rounded, lambda: tf.zeros_like(rounded))
  return rounded, attempts, ok


def rounded_l2_norm_bound_squared(scaled_l2_clip: float, dimension: int,
                                  beta: float) -> float:
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
    conditional = (c * c + dimension / 4.0 +
                   math.sqrt(2.0 * math.log(1.0 / beta)) * (c + sqrt_d / 2.0))
    bound = min(bound, conditional)
  return bound
