"""Fast discrete Gaussian sampling with an exactly built alias table.

`sample_discrete_gaussian_table(shape, scale, seed)` draws iid int64 samples
within a proved total-variation distance (`tv_distance_bound(scale)`,
< 2^-231) of N_Z(0, s), s = `discrete_gaussian.
discrete_gaussian_variance_parameter(scale)`, the exact sampler's parameter;
scales up to `max_supported_scale()`. The tail bound uses the sub-Gaussianity
of the discrete Gaussian (Canonne, Kamath & Steinke, "The Discrete Gaussian
for Differential Privacy", 2020); the table is `alias_table`'s.

Brackets, truncation, the TV proof, cap and cost:
docs/notes/certified_tables.md.
"""

import fractions
import functools
import math
from typing import Sequence, Union

import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import alias_table as core
from tff_ddp.mechanisms import discrete_gaussian
from tff_ddp.utils import tensors

LOG2_MAX_COLUMNS = core.LOG2_MAX_COLUMNS
MAX_COLUMNS = core.MAX_COLUMNS
AliasTable = core.AliasTable
column_weights = core.column_weights
# P(|X| > T) <= 2 exp(-G) < 2^-232 with G = 233 * (upper bound of ln 2).
# ln 2 = 0.693147180559945309417232..., so this is an upper bound.
_LN2_UPPER = fractions.Fraction('0.69314718055994530942')
_G = (core.TAIL_BITS + 1) * _LN2_UPPER
# Fixed-point bits of the host-side brackets of e(x).
_FIX_BITS = 320

# ----------------------------------------------------------------------------
# Argument validation.


def _validate_scale(scale) -> fractions.Fraction:
  """scale as an exact non-negative Fraction (TypeError / ValueError)."""
  try:
    value = discrete_gaussian.scale_fraction(scale)
  except ValueError:
    raise ValueError(
        f'scale must be finite and in [0, {max_supported_scale()}] '
        f'(max_supported_scale()), got {scale!r}.') from None
  if value > discrete_gaussian.max_supported_scale() or not _fits(
      discrete_gaussian.discrete_gaussian_variance_parameter(value)):
    raise ValueError(
        f'scale must be in [0, {max_supported_scale()}] '
        f'(max_supported_scale()), got {scale!r}: the alias table would '
        f'need more than {MAX_COLUMNS} = 2^{LOG2_MAX_COLUMNS} columns (the '
        'cap). Use discrete_gaussian.sample_discrete_gaussian (exact, scale '
        f'up to {discrete_gaussian.max_supported_scale()}) instead.')
  return value


# ----------------------------------------------------------------------------
# Host-side table construction (exact Python integers).


def _tail_m(s: fractions.Fraction) -> int:
  """m = T + 1: the smallest integer >= 1 with m^2 >= 2 s G."""
  v = math.ceil(2 * s * _G)  # m^2 >= 2 s G  iff  m^2 >= ceil(2 s G)
  return math.isqrt(v - 1) + 1 if v >= 1 else 1


def _fits(s: fractions.Fraction) -> bool:
  """Whether the table for s has at most MAX_COLUMNS columns."""
  if s == 0:
    return True
  k = 2 * (_tail_m(s) - 1) + 1
  return k <= MAX_COLUMNS


def _bracket_weights(s: fractions.Fraction, t: int):
  """lo(x) <= 2^320 exp(-x^2 / (2s)) <= hi(x) for x = 0..t (module step 2)."""
  lo, hi = [1 << _FIX_BITS], [1 << _FIX_BITS]
  if t == 0:
    return lo, hi
  beta = 1 / (2 * s)
  r_lo, r_hi = core.fixed_exp_neg_bounds(beta, _FIX_BITS)  # exp(-beta)
  q_lo, q_hi = core.fixed_exp_neg_bounds(2 * beta, _FIX_BITS)
  e_lo = e_hi = 1 << _FIX_BITS
  f = _FIX_BITS
  for _ in range(t):
    e_lo = (e_lo * r_lo) >> f
    e_hi = -((-e_hi * r_hi) >> f)
    lo.append(e_lo)
    hi.append(e_hi)
    r_lo = (r_lo * q_lo) >> f
    r_hi = -((-r_hi * q_hi) >> f)
  return lo, hi


def _tail_bound(s: fractions.Fraction, m: int) -> fractions.Fraction:
  """2 exp(-min(m^2 / (2s), 1000)) from above (proof step (i))."""
  _, hi = core.exp_neg_bounds(
      min(fractions.Fraction(m * m) / (2 * s), fractions.Fraction(1000)))
  return 2 * hi


def _build(s: fractions.Fraction) -> AliasTable:
  m = _tail_m(s)
  t = m - 1
  lo, hi = _bracket_weights(s, t)
  gap = (hi[0] - lo[0]) + 2 * sum(h - l for h, l in zip(hi[1:], lo[1:]))
  return core.build(s, lo[:0:-1] + lo, gap, _tail_bound(s, m))


@functools.lru_cache(maxsize=16)
def _cached_table(s: fractions.Fraction) -> AliasTable:
  return _build(s)


def alias_table(scale) -> AliasTable:
  """The (cached) alias table for `scale` > 0.

  Its brackets, truncation and TV proof: docs/notes/certified_tables.md,
  section on discrete_gaussian_table.py.
  """
  sigma = _validate_scale(scale)
  if sigma == 0:
    raise ValueError('scale must be > 0 for alias_table, got 0 (scale 0 '
                     'samples zeros without a table).')
  return _cached_table(
      discrete_gaussian.discrete_gaussian_variance_parameter(sigma))


# A bound on tv_distance_bound(scale) valid for every supported scale (proof
# step (iii)); events use it so that planning never has to build a table.
TV_DISTANCE_UPPER_BOUND = core.TV_DISTANCE_UPPER_BOUND


def tv_distance_bound(scale) -> float:
  """Proved upper bound on TV(output law, N_Z(0, s)) per sample.

  s = `discrete_gaussian.discrete_gaussian_variance_parameter(scale)`. The
  bound is 1/2 (Q + rho) + tail of the proof in docs/notes/certified_tables.md
  (PROOF OF THE TV BOUND, section on discrete_gaussian_table.py), computed
  exactly from the built table and rounded up to a float; it is < 2^-231
  for every supported scale and 0 for scale 0. n independent samples (e.g.
  clients x dimension x rounds) are within n times it of N_Z(0, s)^n (TV is
  subadditive over products); in (eps, delta) accounting add (1 + e^eps) n
  times it to delta (`alias_table`).

  Args:
    scale: as for `sample_discrete_gaussian_table`.

  Returns:
    A float >= the total-variation distance of one sample.
  """
  sigma = _validate_scale(scale)
  if sigma == 0:
    return 0.0
  return core.round_up_float(alias_table(sigma).tv_bound)


@functools.lru_cache(maxsize=1)
def max_supported_scale() -> float:
  """The largest float scale whose table has <= MAX_COLUMNS columns.

  About 29178.6 (s <= 2^37 / G). s is non-decreasing in scale, and the table
  size in s, so this is found by bisection over the float64 bit patterns.
  """

  def fits(x: float) -> bool:
    return _fits(discrete_gaussian.discrete_gaussian_variance_parameter(x))

  to_bits = lambda x: int(np.float64(x).view(np.int64))
  from_bits = lambda i: float(np.int64(i).view(np.float64))
  lo, hi = to_bits(1.0), to_bits(discrete_gaussian.max_supported_scale())
  core.check(
      fits(from_bits(lo)) and not fits(from_bits(hi)), 'bisection bracket')
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if fits(from_bits(mid)):
      lo = mid
    else:
      hi = mid
  return from_bits(lo)


# ----------------------------------------------------------------------------
# Sampling (TensorFlow).


@tf.autograph.experimental.do_not_convert
def sample_discrete_gaussian_table(shape: Union[Sequence[int], tf.TensorShape,
                                                tf.Tensor], scale: float,
                                   seed) -> tf.Tensor:
  """Samples iid N_Z(0, s) up to a proved TV distance, as int64.

  s = `discrete_gaussian.discrete_gaussian_variance_parameter(scale)` (scale^2
  rounded up to a multiple of 2^-q, the exact sampler's s). Each sample's law
  p_hat is within `tv_distance_bound(scale)` (< 2^-231) of N_Z(0, s) in total
  variation (proof: docs/notes/certified_tables.md, PROOF OF THE TV BOUND);
  p_hat is supported on [-T, T] with
  T + 1 = ceil(sqrt(2 s * 233 * 0.69314718055994530942)) ~= 17.97 scale.

  Walker/Vose alias method over 2^b <= 2^20 columns with 252-bit integer
  weights (`alias_table`): one uniform 64-bit word per sample (four more
  only on a threshold tie, probability <= 2^-43), one table gather; the
  table is built on the host in exact integer arithmetic and cached per s.

  Seeds: the output is a deterministic function of (shape, scale, seed). In
  distributed DP each client must use its own secret, independent seed.

  Works eagerly, inside `tf.function` and inside TFF TensorFlow computations
  (only stateless TF ops and one `tf.cond`).

  Args:
    shape: output shape: list/tuple of ints, fully defined `TensorShape`, or
      a 1-D int tensor.
    scale: Python int/float (or constant scalar tensor) in
      [0, max_supported_scale()] (~29178.6; table cap 2^20 columns); 0 gives
      zeros. For larger scales use `discrete_gaussian.sample_discrete_gaussian`.
    seed: a stateless seed, shape-[2] int32/int64 tensor or pair of ints.

  Returns:
    An int64 tensor of the given shape.

  Raises:
    TypeError: if scale, shape or seed has the wrong type.
    ValueError: if scale is negative, not finite or above
      max_supported_scale(), a shape entry is negative, the shape has more
      than discrete_gaussian.MAX_SAMPLES elements, or seed is not of shape
      [2].
  """
  sigma = _validate_scale(scale)
  out_shape, n = tensors.output_shape(shape)
  seed = tensors.stateless_seed(seed)
  if sigma == 0:
    return tf.zeros(out_shape, tf.int64)
  table = _cached_table(
      discrete_gaussian.discrete_gaussian_variance_parameter(sigma))
  return tf.reshape(core.sample(n, table, seed), out_shape)
