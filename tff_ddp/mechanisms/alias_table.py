"""Certified alias tables: exact integer construction, TV proof, TF lookup.

The shared core of the table samplers (`discrete_gaussian_table`,
`skellam_table`): `build` takes integer brackets of a law on [-t, t] and a
tail bound, quantises to weights summing to 2^252, lays out Walker's alias
table (A. J. Walker 1977, "An Efficient Method for Generating Discrete
Random Variables with General Distributions"; Vose's linear construction,
M. D. Vose 1991, "A Linear Algorithm for Generating Random Numbers with a
Given Distribution") in exact integer arithmetic and returns an `AliasTable`
with a proved total-variation bound (`tv_bound`, below
`TV_DISTANCE_UPPER_BOUND` = 2^-231); `lookup` and `sample` read it in TF.

Construction, layout, sampling, the TV proof and the table's cost:
docs/notes/certified_tables.md.
"""

import dataclasses
import decimal
import fractions
import functools
import math
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

LOG2_MAX_COLUMNS = 20
MAX_COLUMNS = 1 << LOG2_MAX_COLUMNS
# Callers choose the support so that the mass outside is < 2^-TAIL_BITS.
TAIL_BITS = 232
# Quantised pmf: integer weights summing to W = 2^252 (= M * 2^(252 - b)).
W_BITS = 252
# Bracket error allowed: rho = 2 gap / A <= 2^-240.
_MAX_RHO = fractions.Fraction(1, 2**240)
# The first level's int32 entries: 31 bits (top 31 - b of t(j), b of alias).
FIRST_BITS = 31
# Thresholds below the top field: three 63-bit words.
LOW_WORDS = 3
# Uniform words a tie consumes: the rest of the top field, then LOW_WORDS.
TIE_WORDS = 1 + LOW_WORDS
_LOW63 = (1 << 63) - 1
_LOW_SHIFT = 63 * LOW_WORDS  # 189: where the top field starts in t(j)

# Proof step (iv): tail < 2^-232, Q/2 < 2^-233, rho/2 <= 2^-241.
TV_DISTANCE_UPPER_BOUND = 2.0**-231


def check(condition: bool, what: str):
  """A build-time proof obligation (kept under python -O, unlike assert)."""
  if not condition:
    raise AssertionError(f'alias_table: check failed: {what}')


# ----------------------------------------------------------------------------
# Rigorous brackets of exp (shared by the callers' weight and tail bounds).

# Decimal digits for the exp evaluations; 10^(1 - _DEC_PREC) bounds the
# relative error of a correctly rounded result (twice the guaranteed 1/2 ulp).
_DEC_PREC = 110


def _decimal_context(rounding):
  return decimal.Context(prec=_DEC_PREC,
                         rounding=rounding,
                         Emin=-10**9,
                         Emax=10**9,
                         traps=[
                             decimal.InvalidOperation, decimal.DivisionByZero,
                             decimal.Overflow, decimal.Underflow
                         ])


def exp_neg_bounds(arg: fractions.Fraction):
  """Fractions (lo, hi) with 0 < lo <= exp(-arg) <= hi, for rational arg >= 0.

  arg_lo <= arg <= arg_hi by directed-rounding division; exp(-arg) lies in
  [exp(-arg_hi), exp(-arg_lo)]; `Decimal.exp` is documented as correctly
  rounded (error <= 1/2 ulp <= 1/2 10^(1 - prec) of the result), widened
  here by the full relative 10^(1 - prec) with directed rounding.
  """
  down = _decimal_context(decimal.ROUND_FLOOR)
  up = _decimal_context(decimal.ROUND_CEILING)
  nearest = _decimal_context(decimal.ROUND_HALF_EVEN)
  num, den = decimal.Decimal(arg.numerator), decimal.Decimal(arg.denominator)
  arg_lo, arg_hi = down.divide(num, den), up.divide(num, den)
  # Exact constructions only: unary minus or ** would round in the thread's
  # default 28-digit context; copy_negate() and tuple construction are exact.
  rel = decimal.Decimal((0, (1,), 1 - _DEC_PREC))  # 10^(1 - prec)
  lo = down.multiply(nearest.exp(arg_hi.copy_negate()), down.subtract(1, rel))
  hi = up.multiply(nearest.exp(arg_lo.copy_negate()), up.add(1, rel))
  return fractions.Fraction(lo), fractions.Fraction(hi)


def fixed_exp_neg_bounds(arg: fractions.Fraction, bits: int):
  """Integers (lo, hi) with lo <= 2^bits exp(-arg) <= hi."""
  lo, hi = exp_neg_bounds(arg)
  return math.floor(lo * (1 << bits)), math.ceil(hi * (1 << bits))


def tail_below(tail: fractions.Fraction) -> bool:
  """Whether `tail` is small enough for `build` (< 2^-TAIL_BITS)."""
  return tail < fractions.Fraction(1, 2**TAIL_BITS)


def columns_bits(t: int) -> int:
  """b: the smallest b with 2^b >= 2t + 1 (the table for support [-t, t])."""
  return (2 * t).bit_length()


# ----------------------------------------------------------------------------
# Host-side construction.


@dataclasses.dataclass(frozen=True)
class AliasTable:
  """An alias table over [-t, t] and its exact certificate.

  Layout and proof: docs/notes/certified_tables.md, section on alias_table.py.

  Attributes:
    law: the law's parameter (a Fraction: s for N_Z(0, s), mu for the
      Skellam), for the caller's records.
    t: the support is [-t, t].
    log2_columns: b; the table has 2^b columns.
    packed: int64[2^b], (top << b) | alias index.
    low: int64[K, 3] (K = 2t + 1), the three low 63-bit words of the
      thresholds of columns j < K; those of columns j >= K are 0
      (docs/notes/certified_tables.md, CONSTRUCTION step 3) and not stored.
    tv_bound: exact rational upper bound on TV(p_hat, p), < 2^-231.
    build_seconds: wall-clock seconds of the build (informational).
  """
  law: fractions.Fraction
  t: int
  log2_columns: int
  packed: np.ndarray
  low: np.ndarray
  tv_bound: fractions.Fraction
  build_seconds: float

  @property
  def nbytes(self) -> int:
    return int(self.packed.nbytes + self.low.nbytes)

  @functools.cached_property
  def first_level(self) -> np.ndarray:
    """int32[2^b]: (top 31 - b bits of t(j)) << b | alias(j), i.e. packed[j]
    >> 32 with its low b bits replaced by alias(j)
    (docs/notes/certified_tables.md, SAMPLING: "first level")."""
    b = self.log2_columns
    col_mask = (1 << b) - 1
    first = (((self.packed >> 32) & ~np.int64(col_mask)) |
             (self.packed & col_mask)).astype(np.int32)
    first.setflags(write=False)
    return first


def _quantise(a: Sequence[int], big_a: int):
  """w(i) = floor(W a(i)/A) + largest-remainder units; sum w = W exactly."""
  big_w = 1 << W_BITS
  w, rems = [], []
  for ai in a:
    q, r = divmod(ai << W_BITS, big_a)
    w.append(q)
    rems.append(r)
  left = big_w - sum(w)
  check(0 <= left < len(a), f'left = {left}')
  # Largest remainders first; ties by index (a stable sort, also reversed).
  for i in sorted(range(len(a)), key=rems.__getitem__, reverse=True)[:left]:
    w[i] += 1
  check(sum(w) == big_w, 'sum(w) == W')
  return w


def _vose(w, log2_columns: int):
  """(threshold, alias) lists over 2^b columns realising weights w exactly."""
  m = 1 << log2_columns
  cap = 1 << (W_BITS - log2_columns)
  rem = list(w) + [0] * (m - len(w))
  check(sum(rem) == cap * m, 'sum of weights == W')
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
    check(rem[j] == cap, f'column {j}: {rem[j]} != {cap}')
  return thr, alias


def _pack(thr, alias, log2_columns: int, points: int):
  """The int64 arrays of step 3 (np.array raises on an int64 overflow);
  `low` keeps the first `points` = K rows (step 3: the others are 0)."""
  b = log2_columns
  cap = 1 << (W_BITS - b)
  # A full column: "threshold 0, alias itself" outputs j too.
  alias = [j if tj == cap else aj for j, (tj, aj) in enumerate(zip(thr, alias))]
  thr = [0 if tj == cap else tj for tj in thr]
  check(max(thr) < cap and 0 <= min(thr), '0 <= t(j) < C')
  check(not any(thr[points:]), 't(j) = 0 for the columns j >= K')
  packed = np.array(
      [((tj >> _LOW_SHIFT) << b) | aj for tj, aj in zip(thr, alias)], np.int64)
  low = np.stack([
      np.array([(tj >> shift) & _LOW63
                for tj in thr[:points]], np.int64)
      for shift in range(_LOW_SHIFT - 63, -1, -63)
  ],
                 axis=1)
  packed.setflags(write=False)
  low.setflags(write=False)
  return packed, low


def column_weights(packed: np.ndarray, low: np.ndarray, log2_columns: int):
  """Decodes a table: the integer weight (out of 2^252) of every column.

  Column j keeps t(j) = (packed[j] >> b) 2^189 + low[j, 0] 2^126 +
  low[j, 1] 2^63 + low[j, 2] of its capacity C = 2^(252 - b) and gives
  C - t(j) to alias(j) = packed[j] & (2^b - 1); entry j of the result,
  divided by 2^252, is P(output = j - t). Rows j >= len(low) are read as
  zero words (docs/notes/certified_tables.md, CONSTRUCTION step 3), as
  `lookup` reads them.
  """
  b = log2_columns
  m = 1 << b
  cap = 1 << (W_BITS - b)
  rows = low.shape[0]
  check(
      packed.shape == (m,) and 1 <= rows <= m and
      low.shape == (rows, LOW_WORDS) and np.all(packed >= 0) and
      np.all(low >= 0), 'table shapes, signs')
  # t(j) < 2^(63 - b) 2^189 = C: every column's threshold is in [0, C].
  tops = (packed >> b).tolist()
  aliases = (packed & (m - 1)).tolist()
  low_columns = [column.tolist() + [0] * (m - rows) for column in low.T]
  mass = [0] * m
  for j in range(m):
    tj = tops[j]
    for column in low_columns:
      tj = (tj << 63) | column[j]
    mass[j] += tj
    mass[aliases[j]] += cap - tj
  return mass


def build(law: fractions.Fraction, lower: Sequence[int], gap: int,
          tail: fractions.Fraction) -> AliasTable:
  """The certified table of a law from the caller's proof inputs (a), (b).

  Args:
    law: the law's parameter (recorded on the table).
    lower: a(x) for x = -t..t (odd length 2t + 1 <= 2^20), integers >= 0
      with a(x) <= c p(x) for one c > 0 (docs/notes/certified_tables.md,
      WHAT THE CALLER PROVES (a)).
    gap: an integer >= sum_x (c p(x) - a(x)).
    tail: a rational >= P_p(|X| > t), < 2^-232.

  Returns:
    The AliasTable, whose tv_bound = (Q + rho) / 2 + tail.

  Raises:
    AssertionError: a proof obligation fails (the caller's brackets too
      loose: rho > 2^-240, a tail too large, or too many points).
  """
  start = time.perf_counter()
  k = len(lower)
  check(k % 2 == 1, 'odd support')
  t = k // 2
  b = columns_bits(t)
  check(k <= (1 << b) <= MAX_COLUMNS, 'K <= 2^b <= MAX_COLUMNS')
  check(all(ai >= 0 for ai in lower) and gap >= 0, 'a(x) >= 0, gap >= 0')
  check(tail_below(tail), 'tail < 2^-232')
  big_a = sum(lower)
  check(big_a > 0, 'A > 0')
  rho = fractions.Fraction(2 * gap, big_a)
  check(rho <= _MAX_RHO, f'rho <= 2^-240 (brackets: rho = {float(rho)!r})')
  w = _quantise(lower, big_a)
  big_w = 1 << W_BITS
  q_num = sum(abs(wi * big_a - ai * big_w) for wi, ai in zip(w, lower))
  q = fractions.Fraction(q_num, big_w * big_a)
  check(q < fractions.Fraction(k, big_w), 'Q < K / W')
  tv = (q + rho) / 2 + tail
  check(tv < fractions.Fraction(TV_DISTANCE_UPPER_BOUND), 'tv < 2^-231')
  thr, alias = _vose(w, b)
  packed, low = _pack(thr, alias, b, k)
  check(
      column_weights(packed, low, b) == w + [0] * ((1 << b) - k),
      'the packed table realises the weights w')
  return AliasTable(law=law,
                    t=t,
                    log2_columns=b,
                    packed=packed,
                    low=low,
                    tv_bound=tv,
                    build_seconds=time.perf_counter() - start)


def round_up_float(value: fractions.Fraction) -> float:
  """The least float >= value."""
  f = float(value)
  if fractions.Fraction(f) < value:
    f = math.nextafter(f, math.inf)
  return f


# ----------------------------------------------------------------------------
# Sampling (TensorFlow).


def top_mask(top_bits: int) -> int:
  """The int64 mask of bits 63-k..62, where `lookup` reads U_top."""
  check(1 <= top_bits <= 63, '1 <= top_bits <= 63')
  return _LOW63 ^ ((1 << (63 - top_bits)) - 1)


def words(shape, seed) -> tf.Tensor:
  """Full-range uniform int64 words of `shape` (a list or 1-D tensor)."""
  return tf.random.stateless_uniform(shape,
                                     seed=seed,
                                     dtype=tf.int64,
                                     minval=None,
                                     maxval=None)


def fold(seed, data: int) -> tf.Tensor:
  return tf.random.experimental.stateless_fold_in(seed,
                                                  tf.constant(data, tf.int64))


# A table of 2^b columns with b >= this is read through its first level
# (`lookup`; docs/notes/certified_tables.md, SAMPLING): its 2^b int64 `packed`
# entries (2 MiB and up) no longer fit the L2 cache, and the random gather
# dominates the draw.
FIRST_LEVEL_MIN_BITS = 18


@tf.autograph.experimental.do_not_convert
def lookup(table: AliasTable,
           column,
           u_top,
           tie_words: Callable[[], tf.Tensor],
           top_bits=None,
           unconditional_ties: bool = False,
           first_level=None) -> tf.Tensor:
  """The table's outputs j - t or alias(j) - t.

  As in docs/notes/certified_tables.md, SAMPLING.

  Args:
    table: the `AliasTable`.
    column: int64 tensor, uniform on [0, 2^b) (b = table.log2_columns).
    u_top: int64 tensor of column's shape whose bits 63-k..62 are uniform
      (k = top_bits) and whose other bits are 0 (e.g. `word &
      top_mask(k)`), independent of column.
    tie_words: a callable returning int64 words of shape column.shape +
      [TIE_WORDS] = [..., 4], uniform and independent of (column, u_top);
      called (in a `tf.cond` branch) only if some element's top bits tie,
      or always with `unconditional_ties`.
    top_bits: k in [1, 63 - b]; default 63 - b (a whole word's bits b..62).
    unconditional_ties: resolve ties without a `tf.cond` (same values).
    first_level: read the int32 first level first (same values); default
      iff b >= FIRST_LEVEL_MIN_BITS; needs k >= 31 - b.

  Returns:
    int64 tensor of column's shape.
  """
  b = table.log2_columns
  k = 63 - b if top_bits is None else top_bits
  check(1 <= k <= 63 - b, f'top_bits in [1, {63 - b}], got {k}')
  if first_level is None:
    first_level = b >= FIRST_LEVEL_MIN_BITS and k >= FIRST_BITS - b
  if not first_level:
    return _exact_lookup(table, column, u_top, tie_words, k, unconditional_ties)
  check(k >= FIRST_BITS - b, f'first_level needs top_bits >= {31 - b}')
  col_mask = (1 << b) - 1
  entry = tf.gather(tf.constant(table.first_level), tf.cast(column, tf.int32))
  # U's and t(J)'s top 31 - b bits, as int32 (u_top has bits 63-k..62).
  u_first = tf.cast(tf.bitwise.right_shift(u_top, 32 + b), tf.int32)
  t_first = tf.bitwise.right_shift(entry, b)
  out = tf.where(u_first < t_first, tf.cast(column, tf.int32),
                 tf.bitwise.bitwise_and(entry, col_mask))
  # Where the first bits tie (probability 2^(b - 31) per sample), U < t(J)
  # is decided by the exact lookup on those positions alone.
  at = tf.where(tf.equal(u_first, t_first))
  exact = _exact_lookup(table, tf.gather_nd(column,
                                            at), tf.gather_nd(u_top, at),
                        lambda: tf.gather_nd(tie_words(), at), k,
                        unconditional_ties)
  out = tf.tensor_scatter_nd_update(out, at, tf.cast(exact + table.t, tf.int32))
  return tf.cast(out, tf.int64) - table.t


def _exact_lookup(table: AliasTable, column, u_top, tie_words, k: int,
                  unconditional_ties: bool) -> tf.Tensor:
  """`lookup` through `packed` (and `low` on a tie of the top k bits)."""
  b = table.log2_columns
  col_mask = (1 << b) - 1
  k_mask = top_mask(k)
  mid_mask = _LOW63 ^ k_mask ^ col_mask  # the top field's bits below U_top
  entry = tf.gather(tf.constant(table.packed), column)
  t_top = tf.bitwise.bitwise_and(entry, k_mask)
  stay = u_top < t_top
  tie = tf.equal(u_top, t_top)

  rows = table.low.shape[0]

  def resolve_ties():
    extra = tie_words()
    # `low` holds rows j < K only (docs/notes/certified_tables.md,
    # CONSTRUCTION step 3)
    if rows < (1 << b):
      t_low = tf.gather(tf.constant(table.low),
                        tf.minimum(column, tf.constant(rows - 1, tf.int64)))
    else:
      t_low = tf.gather(tf.constant(table.low), column)
    # Least significant level first: less = (v < t) | (v == t & less).
    less = (tf.bitwise.bitwise_and(extra[..., LOW_WORDS], _LOW63)
            < t_low[..., LOW_WORDS - 1])
    for i in range(LOW_WORDS - 2, -1, -1):
      v = tf.bitwise.bitwise_and(extra[..., i + 1], _LOW63)
      less = (v < t_low[..., i]) | (tf.equal(v, t_low[..., i]) & less)
    if rows < (1 << b):
      # A row beyond `low` is three zero words: (U_1, U_2, U_3) < 0 is false.
      less = less & (column < rows)
    if mid_mask:
      v = tf.bitwise.bitwise_and(extra[..., 0], mid_mask)
      t_mid = tf.bitwise.bitwise_and(entry, mid_mask)
      less = (v < t_mid) | (tf.equal(v, t_mid) & less)
    return stay | (tie & less)

  if unconditional_ties:
    stay = resolve_ties()
  else:
    stay = tf.cond(tf.reduce_any(tie), resolve_ties, lambda: stay)
  alias = tf.bitwise.bitwise_and(entry, col_mask)
  return tf.where(stay, column, alias) - table.t


# Up to this many samples per call, a tie's words are drawn and compared
# unconditionally instead of in a `tf.cond` branch: the same values bit for
# bit (without a tie the comparison changes nothing), a few ops more and one
# branch fewer -- cheaper for a small client (a quantile's 64 bins) whose
# cost is per-op overhead, while a model-sized client would pay a second
# pass over its words.
UNCONDITIONAL_TIES_MAX_SAMPLES = 4096


@tf.autograph.experimental.do_not_convert
def sample(n, table: AliasTable, seed) -> tf.Tensor:
  """n samples (1-D int64) of the table's law from a stateless seed.

  One word per sample from fold(seed, 0): column J = its low b bits, U_top
  = its bits b..62 (k = 63 - b); on a tie, words [n, 4] from fold(seed, 1).
  """
  count = tf.get_static_value(n)
  b = table.log2_columns
  word = words(tf.reshape(n, [1]), fold(seed, 0))
  column = tf.bitwise.bitwise_and(word, (1 << b) - 1)
  u_top = tf.bitwise.bitwise_and(word, top_mask(63 - b))
  return lookup(
      table,
      column,
      u_top,
      lambda: words(tf.stack([tf.cast(n, tf.int64), TIE_WORDS]), fold(seed, 1)),
      unconditional_ties=(count is not None and
                          count <= UNCONDITIONAL_TIES_MAX_SAMPLES))
