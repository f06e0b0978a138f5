"""Fast discrete Gaussian sampling with an exactly built alias table.

`sample_discrete_gaussian_table(shape, scale, seed)` draws iid int64 samples
whose law p_hat is within a *proved* total-variation (TV) distance of
N_Z(0, s), where s = `discrete_gaussian.discrete_gaussian_variance_parameter(
scale)` is the exact sampler's variance parameter (scale^2 rounded UP to a
multiple of 2^-q), so privacy accounting with s is unchanged up to delta.

Using it in (eps, delta) accounting: with eta = `tv_distance_bound(scale)`
(< 2^-106 for every supported scale) and n samples drawn in total (clients x
coordinates x rounds), the output law under each of two neighbouring inputs
moves by at most n eta in TV (ideal laws P1, P2, actual laws P1', P2'), so
for any event S: P1'(S) <= P1(S) + n eta <= e^eps P2(S) + delta + n eta
<= e^eps P2'(S) + delta + (1 + e^eps) n eta.
Add (1 + e^eps) n eta to delta (not just n eta). This is an (eps, delta)
statement: convert Renyi/PLD accounting to (eps, delta) first, then add it.

References: A. J. Walker (1977), "An Efficient Method for Generating Discrete
Random Variables with General Distributions"; M. D. Vose (1991), "A Linear
Algorithm for Generating Random Numbers with a Given Distribution";
C. Canonne, G. Kamath & T. Steinke (2020), "The Discrete Gaussian for
Differential Privacy" (CKS).

Notation: N_Z(0, s) has pmf p(x) = e(x) / Z on the integers, with
e(x) = exp(-x^2 / (2 s)) and Z = sum_x e(x). W = 2^126.

HOST SIDE (Python integers and `fractions`, once per s, cached)

1. Truncation. m = T + 1 is the smallest integer with m^2 >= 2 s G, where
   G = 111 L and L = 0.69314718055994530942 > ln 2 (a rational constant;
   ln 2 = 0.693147180559945309417...). Support [-T, T], K = 2T + 1 points.
2. Brackets of e(x). With beta = 1/(2s) (rational), integers
   r_lo <= 2^256 exp(-beta) <= r_hi and q_lo <= 2^256 exp(-2 beta) <= q_hi
   come from `decimal` at 100 digits: the argument is bracketed by
   ROUND_FLOOR / ROUND_CEILING divisions, `Decimal.exp` is documented as
   correctly rounded (error <= 1/2 ulp <= 1/2 * 10^-99 of the result), and
   the result is widened by the factor 1 -/+ 10^-99 with directed rounding.
   Then e(x + 1) = e(x) r(x) and r(x + 1) = r(x) exp(-2 beta) with
   r(0) = exp(-beta), because e(x) r(x) = exp(-(x^2 + 2x + 1) beta).
   Multiplying lower bounds with floor and upper bounds with ceiling (all
   factors are >= 0) gives integers lo(x) <= 2^256 e(x) <= hi(x), x = 0..T.
   Put a(x) = lo(|x|), D(x) = hi(|x|) - lo(|x|), A = sum_{|x|<=T} a(x)
   (A >= a(0) = 2^256, as e(0) = 1 is exact).
3. Quantisation. w(x) = floor(W a(x) / A); the W - sum w (< K) units left
   go, one each, to the x with the largest remainders W a(x) mod A. So
   sum w = W and |w(x) - W a(x) / A| < 1 for every x. p_hat(x) = w(x) / W.
4. Alias table (Walker's method, Vose's linear construction, in integers).
   M = 2^b columns, b = ceil(log2 K); column j stands for the value j - T
   (columns j >= K have weight 0) and has capacity C = W / M = 2^(126 - b).
   It keeps t(j) in [0, C] for itself and gives C - t(j) to alias(j). Vose's
   loop pairs a column whose remaining weight is < C with one whose weight is
   >= C; nothing is rounded. The arrays handed to TF are then decoded again
   (`column_weights`) and checked to give exactly w (a build-time check,
   not an `assert`, so it also runs under python -O).

SAMPLING (TF, per sample). One uniform 64-bit word: its low b bits are the
column J, bits b..62 are U_hi, uniform on [0, 2^(63 - b)). With U_lo the low
63 bits of a second word, U = U_hi 2^63 + U_lo is uniform on [0, C) and
independent of J; the output is J - T if U < t(J), else alias(J) - T. Hence
for every integer v, with w(v) = 0 for |v| > T,
P(output = v) = (1/M) sum_j ([j - T = v] t(j) + [alias(j) - T = v]
(C - t(j))) / C = w(v) / W = p_hat(v) (the decoded column masses are w by
step 4). Writing t(J) = t_hi 2^63 + t_lo: U < t(J) iff
U_hi < t_hi, or U_hi = t_hi and U_lo < t_lo. U_lo matters only on a tie
(probability 2^(b - 63) <= 2^-45 per sample), so the second words are drawn
(for the whole batch, from their own fold-in seed) only if some element ties;
the output is the same function of (J, U_hi, U_lo) either way. As anywhere in
TF, the stateless Philox words are modelled as iid uniform bits. Cost per
sample: 1 random word, 1 gather (t_hi and alias(j) packed in one int64; a
full column t(j) = C is stored as "threshold 0, alias itself", which outputs
the same value), ~10 element-wise int64 ops; no loops, no rejection, no
floating point.

PROOF OF THE TV BOUND. Let X ~ N_Z(0, s), tau = P(|X| > T), p_T the law of
X given |X| <= T: p_T(x) = e(x) / E on [-T, T], E = sum_{|y|<=T} e(y).

(i)   TV(p, p_T) = tau: on [-T, T], p_T - p = p tau / (1 - tau) sums to tau;
      outside, p has mass tau; TV is half the sum, tau.
(ii)  tau <= 2 exp(-m^2 / (2s)) <= 2 exp(-G) < 2 exp(-111 ln 2) = 2^-110.
      CKS prove N_Z(0, s) is s-sub-Gaussian (E exp(tX) <= exp(t^2 s / 2)
      for all real t), so by Chernoff P(X >= m) <= exp(-m^2 / (2s)), and
      P(X <= -m) is the same by symmetry.
(iii) Let p_tilde(x) = a(x) / A, eps(x) = a(x) - 2^256 e(x) in [-D(x), 0].
      Substituting a(x) = 2^256 e(x) + eps(x) and A = 2^256 E + sum eps,
      p_tilde(x) - p_T(x) = eps(x) / A - p_T(x) (sum_y eps(y)) / A, so
      rho := sum_{|x|<=T} |p_tilde(x) - p_T(x)| <= 2 sum_x D(x) / A,
      computed exactly and checked <= 2^-200 at build time (it is below
      2^-228 for every supported scale: D(x) is a few units up to ~2^27).
(iv)  Q := sum_{|x|<=T} |p_hat(x) - p_tilde(x)| < K / W by step 3, and
      K <= M <= 2^20, so Q / 2 < 2^-107.
(v)   Step 4 makes the table's law exactly p_hat (zero outside [-T, T]).
      By the triangle inequality for TV,
      TV(p_hat, p) <= TV(p_hat, p_T) + TV(p_T, p) <= (Q + rho) / 2 + tau
      < 2^-107 + 2^-201 + 2^-110 < 2^-106.

`tv_distance_bound(scale)` returns (Q + rho) / 2 + tau_up with Q and rho the
exact rationals of the built table and tau_up = 2 exp(-min(m^2/(2s), 1000))
bracketed from above as in step 2 (>= the bound of (ii)), rounded up to a
float: e.g. ~2^-118 at scale 0.7, ~2^-110 at 785, ~2^-108.4 at the cap.

CAP. M <= 2^20 = 1048576 columns, i.e. T <= 2^19 - 1, i.e. s <= 2^37 / G
(~1.786e9), i.e. scale <= `max_supported_scale()` = 42264.98... (the exact
largest float, found by bisection): the local scales of DDG at model size
(e.g. ~19000 for 2^20 coordinates, 50 clients, 20 bits). Larger scales
raise ValueError; use `discrete_gaussian.sample_discrete_gaussian` (exact,
up to 2^25) there.

TABLE COST. Memory: two int64 arrays of M entries, 16 M bytes: 512 KiB at
scale 785 (T = 9737, M = 2^15), 2 MiB at 4000 (M = 2^17), 8 MiB at 19000
(M = 2^19), 16 MiB at the cap; they become graph constants wherever the
sampler is traced; up to 16 tables are cached. Build time, O(T) big-integer
products plus an O(K log K) sort, once per scale and process: 0.3 s at
scale 785, 3.0 s at 10566, 7.2 s at 19035, 12.7 s at the cap (shared 2-core
machine under load ~10, several times faster when quiet;
`benchmarks/sampler_bench.py` prints it).
"""

import dataclasses
import decimal
import fractions
import functools
import math
import numbers
import time
from typing import Sequence, Union

import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import discrete_gaussian
from tff_ddp.utils import tensors

# --- Table and precision constants (see the module docstring).
LOG2_MAX_COLUMNS = 20
MAX_COLUMNS = 1 << LOG2_MAX_COLUMNS
# P(|X| > T) <= 2 exp(-G) < 2^-110 with G = 111 * (upper bound of ln 2).
_TAIL_BITS = 110
# ln 2 = 0.693147180559945309417232..., so this is an upper bound.
_LN2_UPPER = fractions.Fraction('0.69314718055994530942')
_G = (_TAIL_BITS + 1) * _LN2_UPPER
# Quantised pmf: integer weights summing to W = 2^126 (= M * 2^(126 - b)).
_W_BITS = 126
# Fixed-point bits of the host-side brackets of e(x).
_FIX_BITS = 256
# Decimal digits for the exp evaluations; 10^(1 - _DEC_PREC) bounds the
# relative error of a correctly rounded result (twice the guaranteed 1/2 ulp).
_DEC_PREC = 100
# Step 2's brackets must be at least this tight (checked per table).
_MAX_RHO = fractions.Fraction(1, 2**200)

_LOW63 = (1 << 63) - 1


def _check(condition: bool, what: str):
  """A build-time proof obligation (kept under python -O, unlike assert)."""
  if not condition:
    raise AssertionError(f'discrete_gaussian_table: check failed: {what}')


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


def _decimal_context(rounding):
  return decimal.Context(
      prec=_DEC_PREC, rounding=rounding, Emin=-10**9, Emax=10**9,
      traps=[decimal.InvalidOperation, decimal.DivisionByZero,
             decimal.Overflow, decimal.Underflow])


def _exp_neg_bounds(arg: fractions.Fraction):
  """Decimals (lo, hi) with lo <= exp(-arg) <= hi, for rational arg >= 0.

  arg_lo <= arg <= arg_hi by directed-rounding division; exp(-arg) lies in
  [exp(-arg_hi), exp(-arg_lo)]; `Decimal.exp` is correctly rounded (error
  <= 1/2 ulp <= 1/2 10^(1 - prec) of the result), widened here by the full
  relative 10^(1 - prec) with directed rounding.
  """
  down = _decimal_context(decimal.ROUND_FLOOR)
  up = _decimal_context(decimal.ROUND_CEILING)
  nearest = _decimal_context(decimal.ROUND_HALF_EVEN)
  num, den = decimal.Decimal(arg.numerator), decimal.Decimal(arg.denominator)
  arg_lo, arg_hi = down.divide(num, den), up.divide(num, den)
  # Exact constructions only: unary minus or ** would round in the thread's
  # default 28-digit context; copy_negate() and tuple construction are exact.
  rel = decimal.Decimal((0, (1,), 1 - _DEC_PREC))  # 10^(1 - prec)
  lo = down.multiply(nearest.exp(arg_hi.copy_negate()),
                     down.subtract(1, rel))
  hi = up.multiply(nearest.exp(arg_lo.copy_negate()), up.add(1, rel))
  return lo, hi


def _fixed_bounds(arg: fractions.Fraction):
  """Integers (lo, hi) with lo <= 2^_FIX_BITS exp(-arg) <= hi."""
  lo, hi = _exp_neg_bounds(arg)
  scale = 1 << _FIX_BITS
  return (math.floor(fractions.Fraction(lo) * scale),
          math.ceil(fractions.Fraction(hi) * scale))


@dataclasses.dataclass(frozen=True)
class AliasTable:
  """The alias table of N_Z(0, s) and its exact certificate.

  Attributes:
    s: the variance parameter (Fraction), as in the exact sampler.
    t: truncation point; the support is [-t, t].
    log2_columns: b; the table has 2^b columns.
    packed: int64[2^b], (t_hi << b) | alias index (see module docstring).
    low: int64[2^b], the low 63 bits t_lo of the thresholds.
    tv_bound: exact rational upper bound on TV(p_hat, N_Z(0, s)).
    build_seconds: wall-clock seconds of the build (informational).
  """
  s: fractions.Fraction
  t: int
  log2_columns: int
  packed: np.ndarray
  low: np.ndarray
  tv_bound: fractions.Fraction
  build_seconds: float


def _bracket_weights(s: fractions.Fraction, t: int):
  """lo(x) <= 2^256 exp(-x^2 / (2s)) <= hi(x) for x = 0..t (module step 2)."""
  lo, hi = [1 << _FIX_BITS], [1 << _FIX_BITS]
  if t == 0:
    return lo, hi
  beta = 1 / (2 * s)
  r_lo, r_hi = _fixed_bounds(beta)  # r(0) = exp(-beta)
  q_lo, q_hi = _fixed_bounds(2 * beta)  # exp(-2 beta)
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


def _quantise(a, total_bits: int):
  """w(i) = floor(W a(i)/A) + largest-remainder units; sum w = W exactly."""
  big_w = 1 << total_bits
  big_a = sum(a)
  w, rems = [], []
  for ai in a:
    q, r = divmod(ai << total_bits, big_a)
    w.append(q)
    rems.append(r)
  left = big_w - sum(w)
  _check(0 <= left < len(a), f'left = {left}')
  # Largest remainders first; ties by index (deterministic).
  for i in sorted(range(len(a)), key=lambda i: (-rems[i], i))[:left]:
    w[i] += 1
  _check(sum(w) == big_w, 'sum(w) == big_w')
  return w


def _vose(w, log2_columns: int):
  """(threshold, alias) lists over 2^b columns realising weights w exactly."""
  m = 1 << log2_columns
  cap = 1 << (_W_BITS - log2_columns)
  rem = list(w) + [0] * (m - len(w))
  _check(sum(rem) == cap * m, 'sum of weights == W')
  thr = [cap] * m
  alias = list(range(m))
  small = [j for j in range(m) if rem[j] < cap]
  large = [j for j in range(m) if rem[j] >= cap]
  while small and large:
    lo = small.pop()
    hi = large.pop()
    thr[lo] = rem[lo]
    alias[lo] = hi
    rem[hi] -= cap - rem[lo]
    (small if rem[hi] < cap else large).append(hi)
  # Exact arithmetic: sum(rem over unfinished columns) = cap * #unfinished, so
  # whatever is left has exactly cap (and keeps thr = cap, alias = itself).
  for j in small + large:
    _check(rem[j] == cap, f'column {j}: {rem[j]} != {cap}')
  return thr, alias


def _build(s: fractions.Fraction) -> AliasTable:
  start = time.perf_counter()
  m = _tail_m(s)
  t = m - 1
  k = 2 * t + 1
  b = (k - 1).bit_length()  # smallest b with 2^b >= k
  _check(k <= (1 << b) <= MAX_COLUMNS, 'K <= 2^b <= MAX_COLUMNS')
  lo, hi = _bracket_weights(s, t)
  a_half = lo
  a = a_half[:0:-1] + a_half  # x = -t..t
  d_sum = (hi[0] - lo[0]) + 2 * sum(h - l for h, l in zip(hi[1:], lo[1:]))
  big_a = sum(a)
  rho = fractions.Fraction(2 * d_sum, big_a)
  if rho > _MAX_RHO:  # cannot happen for supported scales; a safety net
    raise AssertionError(f'brackets too loose for s = {s}: rho = {rho}')
  w = _quantise(a, _W_BITS)
  big_w = 1 << _W_BITS
  q_num = sum(abs(wi * big_a - ai * big_w) for wi, ai in zip(w, a))
  q = fractions.Fraction(q_num, big_w * big_a)
  _check(q < fractions.Fraction(k, big_w), 'Q < K / W')
  # tau <= 2 exp(-min(m^2 / (2s), 1000)) (CKS sub-Gaussian tail).
  _, tail_hi = _exp_neg_bounds(min(fractions.Fraction(m * m) / (2 * s),
                                   fractions.Fraction(1000)))
  tau = 2 * fractions.Fraction(tail_hi)
  _check(tau < fractions.Fraction(1, 2**_TAIL_BITS), 'tau < 2^-110')
  tv = (q + rho) / 2 + tau

  thr, alias = _vose(w, b)
  cap = 1 << (_W_BITS - b)
  mask = (1 << b) - 1
  packed = np.empty(1 << b, np.int64)
  low = np.empty(1 << b, np.int64)
  for j, (tj, aj) in enumerate(zip(thr, alias)):
    if tj == cap:  # full column: "threshold 0, alias itself" outputs j too
      tj, aj = 0, j
    t_hi = tj >> 63
    _check(t_hi < (1 << (63 - b)) and 0 <= aj <= mask, 'packing fits')
    packed[j] = (t_hi << b) | aj
    low[j] = tj & _LOW63
  packed.setflags(write=False)
  low.setflags(write=False)
  # Certificate on the arrays TF will use: they realise w exactly.
  _check(column_weights(packed, low, b) == w + [0] * ((1 << b) - k),
         'the packed table realises the weights w')
  return AliasTable(s=s, t=t, log2_columns=b, packed=packed, low=low,
                    tv_bound=tv, build_seconds=time.perf_counter() - start)


def column_weights(packed: np.ndarray, low: np.ndarray, log2_columns: int):
  """Decodes a table: the integer weight (out of 2^126) of every column.

  Column j keeps t(j) = (packed[j] >> b) * 2^63 + low[j] of its capacity
  C = 2^(126 - b) and gives C - t(j) to alias(j) = packed[j] & (2^b - 1);
  entry j of the result, divided by 2^126, is P(output = j - T).
  """
  b = log2_columns
  m = 1 << b
  cap = 1 << (_W_BITS - b)
  mass = [0] * m
  for j in range(m):
    word = int(packed[j])
    tj = ((word >> b) << 63) + int(low[j])
    _check(0 <= tj <= cap, '0 <= tj <= cap')
    mass[j] += tj
    mass[word & (m - 1)] += cap - tj
  return mass


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


def _round_up_float(value: fractions.Fraction) -> float:
  f = float(value)
  if fractions.Fraction(f) < value:
    f = math.nextafter(f, math.inf)
  return f


# A bound on tv_distance_bound(scale) valid for every supported scale (proof
# step (v)); events use it so that planning never has to build a table.
TV_DISTANCE_UPPER_BOUND = 2.0**-106


def tv_distance_bound(scale) -> float:
  """Proved upper bound on TV(output law, N_Z(0, s)) per sample.

  s = `discrete_gaussian.discrete_gaussian_variance_parameter(scale)`. The
  bound is 1/2 (Q + rho) + tau of the module docstring (steps (i)-(v)),
  computed exactly from the built table and rounded up to a float; it is
  < 2^-106 for every supported scale and 0 for scale 0. n independent
  samples (e.g. clients x dimension x rounds) are within n times it of
  N_Z(0, s)^n (TV is subadditive over products); in (eps, delta) accounting
  add (1 + e^eps) n times it to delta (module docstring).

  Args:
    scale: as for `sample_discrete_gaussian_table`.

  Returns:
    A float >= the total-variation distance of one sample.
  """
  sigma = _validate_scale(scale)
  if sigma == 0:
    return 0.0
  return _round_up_float(alias_table(sigma).tv_bound)


@functools.lru_cache(maxsize=1)
def max_supported_scale() -> float:
  """The largest float scale whose table has <= MAX_COLUMNS columns.

  About 42265.0 (s <= 2^37 / G). s is non-decreasing in scale, and the table
  size in s, so this is found by bisection over the float64 bit patterns.
  """
  def fits(x: float) -> bool:
    return _fits(discrete_gaussian.discrete_gaussian_variance_parameter(x))

  to_bits = lambda x: int(np.float64(x).view(np.int64))
  from_bits = lambda i: float(np.int64(i).view(np.float64))
  lo, hi = to_bits(1.0), to_bits(discrete_gaussian.max_supported_scale())
  _check(fits(from_bits(lo)) and not fits(from_bits(hi)), 'bisection bracket')
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if fits(from_bits(mid)):
      lo = mid
    else:
      hi = mid
  return from_bits(lo)


# ----------------------------------------------------------------------------
# Sampling (TensorFlow).


def _words(n, seed):
  """n full-range uniform int64 words."""
  return tf.random.stateless_uniform(
      tf.reshape(n, [1]), seed=seed, dtype=tf.int64,
      minval=None, maxval=None)


def _fold(seed, data: int):
  return tf.random.experimental.stateless_fold_in(
      seed, tf.constant(data, tf.int64))


# Up to this many samples per call, a tie's second words are drawn and
# compared unconditionally instead of in a `tf.cond` branch: the same values
# bit for bit (without a tie the comparison changes nothing), a few ops more
# and one branch fewer -- cheaper for a small client (a quantile's 64 bins)
# whose cost is per-op overhead, while a model-sized client would pay a
# second pass over its words.
_UNCONDITIONAL_TIES_MAX_SAMPLES = 4096


@tf.autograph.experimental.do_not_convert
def _alias_lookup(word, second_words, table: AliasTable,
                  unconditional_ties: bool = False):
  """Values j - T or alias(j) - T for int64 words (module docstring).

  Args:
    word: int64 tensor of uniform 64-bit words (column J and U_hi).
    second_words: a callable returning int64 words of word's shape whose low
      63 bits are U_lo; called (in a `tf.cond` branch) only if some element
      has a tie U_hi = t_hi, or always with `unconditional_ties`.
    table: the `AliasTable`.
    unconditional_ties: resolve ties without a `tf.cond` (same values).
  """
  b = table.log2_columns
  col_mask = tf.constant((1 << b) - 1, tf.int64)
  hi_mask = tf.constant(_LOW63 ^ ((1 << b) - 1), tf.int64)  # bits b..62
  j = tf.bitwise.bitwise_and(word, col_mask)
  u_hi = tf.bitwise.bitwise_and(word, hi_mask)  # U_hi << b
  entry = tf.gather(tf.constant(table.packed), j)
  t_hi = tf.bitwise.bitwise_and(entry, hi_mask)  # t_hi << b
  stay = u_hi < t_hi
  tie = tf.equal(u_hi, t_hi)

  def resolve_ties():
    u_lo = tf.bitwise.bitwise_and(second_words(), _LOW63)
    t_lo = tf.gather(tf.constant(table.low), j)
    return stay | (tie & (u_lo < t_lo))

  if unconditional_ties:
    stay = resolve_ties()
  else:
    stay = tf.cond(tf.reduce_any(tie), resolve_ties, lambda: stay)
  alias = tf.bitwise.bitwise_and(entry, col_mask)
  return tf.where(stay, j, alias) - table.t


def _sample_from_table(n, table: AliasTable, seed):
  count = tf.get_static_value(n)
  return _alias_lookup(
      _words(n, _fold(seed, 0)), lambda: _words(n, _fold(seed, 1)), table,
      unconditional_ties=(count is not None
                          and count <= _UNCONDITIONAL_TIES_MAX_SAMPLES))


@tf.autograph.experimental.do_not_convert
def sample_discrete_gaussian_table(
    shape: Union[Sequence[int], tf.TensorShape, tf.Tensor],
    scale: float,
    seed) -> tf.Tensor:
  """Samples iid N_Z(0, s) up to a proved TV distance, as int64.

  s = `discrete_gaussian.discrete_gaussian_variance_parameter(scale)` (scale^2
  rounded up to a multiple of 2^-q, the exact sampler's s). Each sample's law
  p_hat is within `tv_distance_bound(scale)` (< 2^-106) of N_Z(0, s) in total
  variation (proof: module docstring); p_hat is supported on [-T, T] with
  T + 1 = ceil(sqrt(2 s * 111 * 0.69314718055994530942)) ~= 12.4 scale.

  Walker/Vose alias method over 2^b <= 2^20 columns with 126-bit integer
  thresholds: one uniform 64-bit word per sample (a second one only on a
  threshold tie, probability <= 2^-45), one table gather; the table is built
  on the host in exact integer arithmetic and cached per s.

  Seeds: the output is a deterministic function of (shape, scale, seed). In
  distributed DP each client must use its own secret, independent seed.

  Works eagerly, inside `tf.function` and inside TFF TensorFlow computations
  (only stateless TF ops and one `tf.cond`).

  Args:
    shape: output shape: list/tuple of ints, fully defined `TensorShape`, or
      a 1-D int tensor.
    scale: Python int/float (or constant scalar tensor) in
      [0, max_supported_scale()] (~42265.0; table cap 2^20 columns); 0 gives
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
  return tf.reshape(_sample_from_table(n, table, seed), out_shape)
