"""The DDG client encode as it was before issue 34 (main at 55e504f), frozen
for `ddg_encode_profile.py`, so that every run measures today's code beside
the code of the day it runs on.

A verbatim copy of the TF ops of that commit's
`DistributedDiscreteGaussian.client_encode` for the randomized Hadamard and
the alias-table sampler, split into the stages the profile prints: the
input check and clip (`tensors.clip_to_norm` of then: |v| copy, select
pass), the public signs (one int32 Philox word per sign), the Hadamard
(`tensordot` per 16-block, a transposed copy each), the conditional
randomized rounding (float64 uniforms, two 32-bit words each), the noise
(one int64 word and ~10 int64 passes per sample, a gather into the table),
and the ring residue (`floormod`).

The noise reads a table of the shape the sampler of then used for this
scale (2^b columns of packed int64 thresholds and aliases, 63-bit low
words) filled with seeded random entries: the lookup's cost depends on the
table's size and the gathers' pattern (a uniform column per sample), not on
its values, and the tie branch is taken as rarely (probability 2^(b-63) per
sample). Timing only: its samples are not discrete Gaussians.
"""

import fractions
import math

import numpy as np
import tensorflow as tf

_LOW63 = (1 << 63) - 1
# 55e504f's table truncated at T = m - 1, m the least integer with
# m^2 >= 2 s G, G = 111 ln 2 (rounded up), s = the variance parameter:
# P(|X| > T) < 2^-110. (The certified table of today is wider, ~18 scales:
# timing today's code with it would not time the code of then.)
_G = 111 * fractions.Fraction('0.69314718055994530942')


def truncation(variance_parameter) -> int:
  """55e504f's T for the exact variance parameter s (a Fraction)."""
  v = math.ceil(2 * fractions.Fraction(variance_parameter) * _G)
  return math.isqrt(v - 1) if v >= 1 else 0


def _clip_to_norm(v, clip):
  big = tf.reduce_max(tf.abs(v))
  positive = big > 0
  safe = tf.where(positive, big, tf.ones_like(big))
  unit = v / safe
  unit_norm = tf.norm(unit)
  clipped = positive & (unit_norm > clip / safe)
  scaled = unit * (clip / tf.where(clipped, unit_norm, tf.ones_like(big)))
  return tf.where(clipped, scaled, v), clipped


def _sylvester(m):
  h = np.ones([1, 1])
  while h.shape[0] < m:
    h = np.block([[h, h], [h, -h]])
  return h


def fast_walsh_hadamard(x):
  d = int(x.shape[-1])
  k = d.bit_length() - 1
  dims = []
  while k > 0:
    step = min(4, k)
    dims.append(2**step)
    k -= step
  y = tf.reshape(x, [-1] + (dims or [1]))
  for m in dims:
    y = tf.tensordot(y, tf.constant(_sylvester(m), x.dtype), axes=[[1], [0]])
  return tf.reshape(y, [d]) / tf.constant(math.sqrt(d), dtype=x.dtype)


def random_signs(dim, seed, dtype=tf.float64):
  bits = tf.random.stateless_uniform([dim],
                                     seed=seed,
                                     minval=0,
                                     maxval=2,
                                     dtype=tf.int32)
  return tf.cast(2 * bits - 1, dtype)


def rounding_uniforms(shape, seed, attempt):
  return tf.random.stateless_uniform(
      shape,
      seed=tf.random.experimental.stateless_fold_in(seed,
                                                    tf.cast(attempt, tf.int64)),
      dtype=tf.float64)


def randomized_round(x, uniforms):
  floor = tf.floor(x)
  up = tf.cast(uniforms < (x - floor), tf.float64)
  return tf.cast(floor + up, tf.int64)


def conditional_randomized_round(x, threshold, seed, max_attempts=1000):
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


class Table:
  """A table of the sampler's shape for truncation point `t` (see above)."""

  def __init__(self, t):
    self.t = int(t)
    self.log2_columns = (2 * self.t).bit_length()
    b = self.log2_columns
    rng = np.random.default_rng(0)
    t_hi = rng.integers(0, 2**(63 - b), 2**b, dtype=np.int64)
    self.packed = (t_hi << b) | rng.integers(0, 2**b, 2**b, dtype=np.int64)
    self.low = rng.integers(0, 2**63 - 1, 2**b, dtype=np.int64)


def _words(n, seed):
  return tf.random.stateless_uniform(tf.reshape(n, [1]),
                                     seed=seed,
                                     dtype=tf.int64,
                                     minval=None,
                                     maxval=None)


def _fold(seed, data):
  return tf.random.experimental.stateless_fold_in(seed,
                                                  tf.constant(data, tf.int64))


def alias_lookup(word, second_words, table):
  b = table.log2_columns
  col_mask = tf.constant((1 << b) - 1, tf.int64)
  hi_mask = tf.constant(_LOW63 ^ ((1 << b) - 1), tf.int64)
  j = tf.bitwise.bitwise_and(word, col_mask)
  u_hi = tf.bitwise.bitwise_and(word, hi_mask)
  entry = tf.gather(tf.constant(table.packed), j)
  t_hi = tf.bitwise.bitwise_and(entry, hi_mask)
  stay = u_hi < t_hi
  tie = tf.equal(u_hi, t_hi)

  def resolve_ties():
    u_lo = tf.bitwise.bitwise_and(second_words(), _LOW63)
    t_lo = tf.gather(tf.constant(table.low), j)
    return stay | (tie & (u_lo < t_lo))

  stay = tf.cond(tf.reduce_any(tie), resolve_ties, lambda: stay)
  alias = tf.bitwise.bitwise_and(entry, col_mask)
  return tf.where(stay, j, alias) - table.t


def noise_words(n, seed):
  return _words(n, _fold(seed, 0))


def sample_noise(n, table, seed):
  return alias_lookup(noise_words(n, seed), lambda: _words(n, _fold(seed, 1)),
                      table)


def client_subseeds(noise_seed):
  seeds = tf.random.experimental.stateless_split(tf.cast(noise_seed, tf.int64),
                                                 2)
  return seeds[0], seeds[1]


class Encode:
  """The stages of the encode of then, for a mechanism's numbers."""

  def __init__(self, mechanism, table_t):
    self.m = mechanism
    self.table = Table(table_t)

  def clip(self, x):
    x = tf.reshape(tf.cast(x, tf.float64), [self.m.dim])
    finite = tf.reduce_all(tf.math.is_finite(x))
    x = tf.where(finite, x, tf.zeros_like(x))
    x, clipped = _clip_to_norm(x, self.m.l2_clip)
    return x / self.m.gamma, finite, clipped

  def rotate(self, x, round_seed):
    d = self.m.output_dim
    x = tf.pad(tf.reshape(x, [self.m.dim]), [[0, d - self.m.dim]])
    return fast_walsh_hadamard(random_signs(d, round_seed, x.dtype) * x)

  def round(self, x, rounding_seed):
    return conditional_randomized_round(x, self.m.norm_threshold, rounding_seed)

  def noise(self, sampling_seed):
    return sample_noise(self.m.output_dim, self.table, sampling_seed)

  def residue(self, rounded, noise):
    return tf.math.floormod(rounded + noise, self.m.modulus)

  def __call__(self, x, round_seed, noise_seed):
    x, finite, clipped = self.clip(x)
    encoded = self.rotate(x, round_seed)
    rounding_seed, sampling_seed = client_subseeds(noise_seed)
    rounded, _, ok = self.round(encoded, rounding_seed)
    z = self.residue(rounded, self.noise(sampling_seed))
    flags = tf.stack([
        tf.cast(f, tf.int64)
        for f in (tf.logical_not(finite), clipped, tf.logical_not(ok))
    ])
    return z, flags
