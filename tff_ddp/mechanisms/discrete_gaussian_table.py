"""Fast discrete Gaussian sampling with an exactly built alias table.

`sample_discrete_gaussian_table(shape, scale, seed)` draws iid int64 samples
whose law p_hat is within a *proved* total-variation (TV) distance of
N_Z(0, s), where s = `discrete_gaussian.discrete_gaussian_variance_parameter(
scale)` is the exact sampler's variance parameter (scale^2 rounded UP to a
multiple of 2^-q), so privacy accounting with s is unchanged up to delta.

Using it in (eps, delta) accounting: with eta = `tv_distance_bound(scale)`
(< 2^-231 for every supported scale) and n samples drawn in total (clients x
coordinates x rounds), add (1 + e^eps) n eta to delta (the argument is in
`tff_ddp.mechanisms.alias_table`; the accountant does it, `sampler_tv_mass`).

References: C. Canonne, G. Kamath & T. Steinke (2020), "The Discrete
Gaussian for Differential Privacy" (CKS); the alias method's references are
in `alias_table`, which builds, certifies and samples the table from the
brackets and the tail bound proved here.

Notation: N_Z(0, s) has pmf p(x) = e(x) / Z on the integers, with
e(x) = exp(-x^2 / (2 s)) and Z = sum_x e(x).

HOST SIDE (Python integers and `fractions`, once per s, cached)

1. Truncation. m = T + 1 is the smallest integer with m^2 >= 2 s G, where
   G = 233 L and L = 0.69314718055994530942 > ln 2 (a rational constant;
   ln 2 = 0.693147180559945309417...). Support [-T, T], K = 2T + 1 points.
2. Brackets of e(x). With beta = 1/(2s) (rational), integers
   r_lo <= 2^320 exp(-beta) <= r_hi and q_lo <= 2^320 exp(-2 beta) <= q_hi
   (`alias_table.fixed_exp_neg_bounds`: `decimal` at 110 digits, the
   argument bracketed by directed divisions, `Decimal.exp` correctly
   rounded, widened by 1 -/+ 10^-109 with directed rounding).
   Then e(x + 1) = e(x) r(x) and r(x + 1) = r(x) exp(-2 beta) with
   r(0) = exp(-beta), because e(x) r(x) = exp(-(x^2 + 2x + 1) beta).
   Multiplying lower bounds with floor and upper bounds with ceiling (all
   factors are >= 0) gives integers lo(x) <= 2^320 e(x) <= hi(x), x = 0..T.
3. The table: `alias_table.build` with a(x) = lo(|x|), c = 2^320 Z (so
   a(x) <= c p(x)), gap = sum_{|x|<=T} (hi(|x|) - lo(|x|)) and tail =
   2 exp(-min(m^2/(2s), 1000)) bracketed from above (>= the bound of (ii)).
   It quantises to weights summing to 2^252, lays out the alias table over
   2^b columns and checks the arrays realise the weights exactly.

SAMPLING (TF): `alias_table.sample`: one uniform 64-bit word per sample
(low b bits the column, bits b..62 the top of the 252 - b bit threshold
draw), 1 gather (from 2^18 columns on, of the int32 first level, and of
`packed` only where its 31 - b bits tie); four more words only on a tie of
the top bits (probability 2^(b - 63) <= 2^-43 per sample), drawn for the
whole batch from their own fold-in seed. No loops, no rejection, no
floating point.

PROOF OF THE TV BOUND (the steps of `alias_table`, with this law's inputs):

(i)   tau = P(|X| > T) is at most the tail handed over:
      tau <= 2 exp(-m^2 / (2s)) <= 2 exp(-G) < 2 exp(-233 ln 2) = 2^-232.
      CKS prove N_Z(0, s) is s-sub-Gaussian (E exp(tX) <= exp(t^2 s / 2)
      for all real t), so by Chernoff P(X >= m) <= exp(-m^2 / (2s)), and
      P(X <= -m) is the same by symmetry.
(ii)  Step 2 gives a(x) <= 2^320 e(x) = c p(x) <= hi(|x|), so the gap
      bounds sum (c p(x) - a(x)); `alias_table.build` checks rho = 2 gap / A
      <= 2^-240 (it is below 2^-270 for every supported scale: D(x) is a
      few units up to ~2^40 against A >= 2^320).
(iii) `alias_table`'s (iii)-(iv): TV(p_hat, N_Z(0, s)) <= (Q + rho) / 2 +
      tau < 2^-233 + 2^-241 + 2^-232 < 2^-231 (`TV_DISTANCE_UPPER_BOUND`).

`tv_distance_bound(scale)` returns (Q + rho) / 2 + tail of the built table,
rounded up to a float: e.g. ~2^-239 at scale 0.7, ~2^-232 at 785.

CAP. M <= 2^20 = 1048576 columns, i.e. T <= 2^19 - 1, i.e. s <= 2^37 / G
(~8.51e8), i.e. scale <= `max_supported_scale()` = 29178.6... (the exact
largest float, found by bisection): the local scales of DDG at model size
(e.g. ~19000 for 2^20 coordinates, 50 clients, 20 bits). Larger scales
raise ValueError; use `discrete_gaussian.sample_discrete_gaussian` (exact,
up to 2^25) there (the DDG mechanism switches to it by itself).

TABLE COST. Memory: `packed` 8 bytes a column, `low` 24 bytes a point of
the support (K rows, read only on a tie) and from 2^18 columns on the
int32 first level, 4 bytes a column (`alias_table`): 0.9 MiB at scale 785
(T = 14108, M = 2^15), 6.3 MiB at 4000 (M = 2^18), 27.6 MiB at 19000 and
36 MiB at the cap (M = 2^20); they become graph constants wherever the
sampler is traced; up to 16 tables are cached. Build
time, O(T) big-integer products plus an O(K log K) sort, once per scale and
process: `benchmarks/sampler_bench.py` prints it (see benchmarks/RESULTS.md).
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
  _, hi = core.exp_neg_bounds(min(fractions.Fraction(m * m) / (2 * s),
                                  fractions.Fraction(1000)))
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
  """The (cached) alias table for `scale` > 0; see the module docstring."""
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
  bound is 1/2 (Q + rho) + tail of the module docstring's proof, computed
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
  core.check(fits(from_bits(lo)) and not fits(from_bits(hi)),
             'bisection bracket')
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
def sample_discrete_gaussian_table(
    shape: Union[Sequence[int], tf.TensorShape, tf.Tensor],
    scale: float,
    seed) -> tf.Tensor:
  """Samples iid N_Z(0, s) up to a proved TV distance, as int64.

  s = `discrete_gaussian.discrete_gaussian_variance_parameter(scale)` (scale^2
  rounded up to a multiple of 2^-q, the exact sampler's s). Each sample's law
  p_hat is within `tv_distance_bound(scale)` (< 2^-231) of N_Z(0, s) in total
  variation (proof: module docstring); p_hat is supported on [-T, T] with
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
