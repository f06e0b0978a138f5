"""Exact Binomial(m, p) sampling in TensorFlow at a cost independent of m.

`sample_binomial(probs, num_trials, seed)` has the contract of
`tff_ddp.mechanisms.poisson_binomial.sample_binomial` (per-element float64
p in [1/4, 3/4], Python int m, shape-[2] stateless seed, int64 output in
[0, m]) but costs O(1) expected work per element: rejection from a
two-sided geometric-of-blocks envelope (Devroye, "Non-Uniform Random Variate
Generation", 1986, ch. II and X), accepted by a Stirling-series test with a
rigorous error bound (Robbins 1955; Higham, "Accuracy and Stability of
Numerical Algorithms", ch. 3) and an exact big-integer fallback, so the
output law is exactly Binomial(m, p). `expected_candidates` gives the
rejection constant.

Algorithm, envelope proof, rounding-error bound and costs:
docs/notes/exact_samplers.md.
"""

import dataclasses
import decimal
import functools
import math
import numbers

import numpy as np
import tensorflow as tf

from tff_ddp.utils import tensors

MAX_NUM_TRIALS = 1 << 30
# m below this uses direct Bernoulli trials (one word each).
_REJECTION_MIN_TRIALS = 64
_DIRECT_CHUNK = 16
_P_BITS = 54  # float64 p in [1/4, 3/4] is a multiple of 2^-54
_TWO54 = 1 << _P_BITS
_HALF_P_BITS = 27
_WORD_BITS = 62
_WORD_MASK = (1 << _WORD_BITS) - 1
_V_BITS = 52  # bits of V used by the fast decision (w + 1 <= 2^52 exact)
_V_MASK = (1 << _V_BITS) - 1
_K_SHIFT = 20  # K = K_num / 2^20
_TABLE_SIZE = 256  # ln n! from a host table below this
# Relative safety margin of the float64 evaluation
# (docs/notes/exact_samplers.md, "Rounding error").
_ERR_FACTOR = 2.0**-40
_LN2 = math.log(2.0)
_HALF_LN_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT2 = math.sqrt(2.0)
# Big integers: little-endian limbs of 24 bits in int64.
_LIMB_BITS = 24
_LIMB_MASK = (1 << _LIMB_BITS) - 1

_no_autograph = tf.autograph.experimental.do_not_convert

# ---------------------------------------------------------------------------
# Host-side constants.


@dataclasses.dataclass(frozen=True)
class _Params:
  num_trials: int
  width: int  # L
  k_num: int  # K = k_num / 2^20
  ln_k_num: float  # ln(k_num), float64 rounded


def _decimal_context():
  return decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN)


@functools.lru_cache(maxsize=64)
def _params(num_trials: int) -> _Params:
  """L and K for m = num_trials (see the envelope proof)."""
  n = num_trials
  c_f = 7.0 / (6.0 * (n + 1))

  def cost(width):  # rejection constant up to factors independent of L
    b = _LN2 / width
    return width * math.exp((c_f + b)**2 / (4 * c_f))

  guess = max(1, int(0.454 * math.sqrt(n + 1)))
  lo, hi = max(1, guess // 2), 2 * guess + 2
  width = min(range(lo, hi + 1), key=cost)
  with decimal.localcontext(_decimal_context()):
    c = decimal.Decimal(7) / (decimal.Decimal(6) * (n + 1))
    b = decimal.Decimal(2).ln() / width
    ln_k = (c + b)**2 / (4 * c)
    k_num = int(
        (ln_k.exp() *
         (1 << _K_SHIFT)).to_integral_value(rounding=decimal.ROUND_CEILING)) + 1
    ln_k_num = float(decimal.Decimal(k_num).ln())
  return _Params(num_trials=n, width=width, k_num=k_num, ln_k_num=ln_k_num)


@functools.lru_cache(maxsize=1)
def _log_factorial_table() -> np.ndarray:
  """ln n! for n < 256, each correctly rounded to float64."""
  with decimal.localcontext(_decimal_context()):
    return np.array([
        float(decimal.Decimal(math.factorial(k)).ln())
        for k in range(_TABLE_SIZE)
    ], np.float64)


def expected_candidates(num_trials: int, prob: float) -> float:
  """Expected proposals per output, 4 L K f(M) (float; for documentation)."""
  prm = _params(num_trials)
  n = num_trials
  mode = math.floor((n + 1) * prob)
  log_f = (math.lgamma(n + 1) - math.lgamma(mode + 1) -
           math.lgamma(n - mode + 1) + mode * math.log(prob) +
           (n - mode) * math.log1p(-prob))
  return 4 * prm.width * prm.k_num / 2**_K_SHIFT * math.exp(log_f)


# ---------------------------------------------------------------------------
# float64 kernels with rigorous error bounds (only +, -, *, / and bit ops).


def _log_pos(x):
  """ln x for positive normal float64 x; abs error <= 2^-47 (1 + |ln x|).

  x = 2^e m exactly (bit fields), m moved into [1/sqrt2, sqrt2] (exact
  halving); s = (m-1)/(m+1) (m - 1 exact by Sterbenz), |s| <= 0.1716;
  ln m = 2 s sum_k s^2k / (2k+1), 13 terms (truncation < 2^-64).
  """
  bits = tf.bitcast(x, tf.int64)
  e = tf.bitwise.right_shift(bits, 52) - 1023
  mant = tf.bitwise.bitwise_or(tf.bitwise.bitwise_and(bits, (1 << 52) - 1),
                               1023 << 52)
  m = tf.bitcast(mant, tf.float64)
  big = m > _SQRT2
  m = tf.where(big, m * 0.5, m)
  e = tf.cast(e + tf.cast(big, tf.int64), tf.float64)
  s = (m - 1.0) / (m + 1.0)
  z = s * s
  poly = z * 0.0 + 1.0 / 25.0
  for k in range(11, -1, -1):
    poly = poly * z + 1.0 / (2 * k + 1)
  return e * _LN2 + 2.0 * s * poly


def _log1p(z):
  """ln(1 + z) for z > -1; abs error <= 2^-46 |ln(1+z)| + 2^-47.

  |z| <= 1/2: 2 atanh(s), s = z / (2 + z) in [-1/3, 1/5] (relative error
  small, no cancellation; 22 terms, truncation < 2^-64). Else _log_pos(1+z)
  (1 + z exact for z in (-1, -1/2) by Sterbenz, relative u otherwise, and
  |ln(1+z)| >= 0.4 there).
  """
  small = tf.abs(z) <= 0.5
  zs = tf.where(small, z, tf.zeros_like(z))
  s = zs / (2.0 + zs)
  q = s * s
  poly = q * 0.0 + 1.0 / 45.0
  for k in range(21, -1, -1):
    poly = poly * q + 1.0 / (2 * k + 1)
  series = 2.0 * s * poly
  direct = _log_pos(tf.where(small, tf.ones_like(z), 1.0 + z))
  return tf.where(small, series, direct)


def _phi(x):
  """phi(x) = (1+x) ln(1+x) - x >= 0 for x > -1.

  x in [-1/2, 1]: s = x/(2+x) in [-1/3, 1/3] and
  phi = 2 s^2/(1-s) sum_{j>=1} s^(2j-2) (1/(2j-1) + s/(2j+1)), all terms
  positive (20 terms, truncation < 2^-64 relative). Else the direct form,
  whose two parts are at most 9 phi(x) in magnitude there.
  """
  series_ok = (x >= -0.5) & (x <= 1.0)
  xs = tf.where(series_ok, x, tf.zeros_like(x))
  s = xs / (2.0 + xs)
  z = s * s
  kmax = 20
  poly = 1.0 / (2 * kmax - 1) + s / (2 * kmax + 1)
  for j in range(kmax - 1, 0, -1):
    poly = poly * z + (1.0 / (2 * j - 1) + s / (2 * j + 1))
  series = 2.0 * z / (1.0 - s) * poly
  xd = tf.where(series_ok, tf.ones_like(x), x)
  direct = (1.0 + xd) * _log_pos(1.0 + xd) - xd
  return tf.where(series_ok, series, direct)


def _beta(n):
  """Midpoint of Robbins/Stirling's bracket for beta(n), n >= 256."""
  inv = 1.0 / n
  inv2 = inv * inv
  return inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 / 2520.0))


def _log_factorial(n_int, table):
  """(ln n!, scale): table for n < 256, Stirling otherwise (n >= 0)."""
  use_table = n_int < _TABLE_SIZE
  tab = tf.gather(table, tf.where(use_table, n_int, tf.zeros_like(n_int)))
  nf = tf.cast(n_int, tf.float64)
  nf = tf.where(use_table, tf.ones_like(nf) * float(_TABLE_SIZE), nf)
  log_n = _log_pos(nf)
  stirling = (nf + 0.5) * log_n - nf + _HALF_LN_2PI + _beta(nf)
  value = tf.where(use_table, tab, stirling)
  scale = tf.where(use_table, tf.abs(tab), (nf + 1.0) * (log_n + 1.0))
  return value, scale


def _log_ratio_direct(mode, mode_c, d, log_p, log_q, table):
  """(ln r(D), scale) from four ln n! values (table or Stirling)."""
  df = tf.cast(d, tf.float64)
  f1, s1 = _log_factorial(mode, table)
  f2, s2 = _log_factorial(mode + d, table)
  f3, s3 = _log_factorial(mode_c, table)
  f4, s4 = _log_factorial(mode_c - d, table)
  value = (f1 - f2) + (f3 - f4) + df * (log_p - log_q)
  scale = (s1 + s2 + s3 + s4 + tf.abs(df) * (tf.abs(log_p) + tf.abs(log_q)) +
           1.0)
  return value, scale


def _log_ratio(mode,
               mode_c,
               d,
               log1p_eps,
               log_p,
               log_q,
               table,
               phi_possible=True):
  """(ln r(D), scale) with |error| <= 2^-42 scale; -M <= D <= M'.

  The phi form where M, M', M+D, M'-D are all >= 256, the direct form on
  the (gathered) rest; `phi_possible=False` (m < 512) skips the phi form.
  """
  if not phi_possible:
    return _log_ratio_direct(mode, mode_c, d, log_p, log_q, table)
  mf = tf.cast(mode, tf.float64)
  mcf = tf.cast(mode_c, tf.float64)
  df = tf.cast(d, tf.float64)
  a1 = mode + d
  a2 = mode_c - d
  phi_ok = ((tf.minimum(mode, a1) >= _TABLE_SIZE) &
            (tf.minimum(mode_c, a2) >= _TABLE_SIZE))
  zero = tf.zeros_like(df)
  x = tf.where(phi_ok, df / mf, zero)
  y = tf.where(phi_ok, -df / mcf, zero)
  t1 = mf * _phi(x)
  t2 = mcf * _phi(y)
  l1 = _log1p(x)
  l2 = _log1p(y)
  safe = tf.ones_like(df) * float(_TABLE_SIZE)
  a1f = tf.where(phi_ok, tf.cast(a1, tf.float64), safe)
  a2f = tf.where(phi_ok, tf.cast(a2, tf.float64), safe)
  m_safe = tf.where(phi_ok, mf, safe)
  mc_safe = tf.where(phi_ok, mcf, safe)
  betas = (_beta(m_safe) + _beta(mc_safe)) - (_beta(a1f) + _beta(a2f))
  de = df * log1p_eps
  value = -(t1 + t2) - 0.5 * (l1 + l2) + betas + de
  scale = (t1 + t2 + tf.abs(l1) + tf.abs(l2) + tf.abs(de) + tf.abs(df * l1) +
           tf.abs(df * l2) + 1.0)

  def patch():
    sub = tf.where(~phi_ok)
    v, s = _log_ratio_direct(tf.gather_nd(mode, sub), tf.gather_nd(mode_c, sub),
                             tf.gather_nd(d, sub), tf.gather_nd(log_p, sub),
                             tf.gather_nd(log_q, sub), table)
    return (tf.tensor_scatter_nd_update(value, sub, v),
            tf.tensor_scatter_nd_update(scale, sub, s))

  return tf.cond(tf.reduce_all(phi_ok), lambda: (value, scale), patch)


# ---------------------------------------------------------------------------
# Big integers (1-D int64 tensors of 24-bit limbs; the top limb is signed).


def _bn_carry(x):
  """One carry pass (value unchanged; the top limb absorbs the carry)."""
  low = x[:-1]
  carry = tf.bitwise.right_shift(low, _LIMB_BITS)  # arithmetic: floor
  low = tf.bitwise.bitwise_and(low, _LIMB_MASK)
  return (tf.concat([low, x[-1:]], 0) +
          tf.concat([tf.zeros([1], tf.int64), carry], 0))


def _bn_normalize(x):
  """Carries until every limb but the top one is in [0, 2^24)."""

  def cond(x):
    low = x[:-1]
    return tf.reduce_any((low < 0) | (low > _LIMB_MASK))

  return tf.while_loop(cond, lambda x: (_bn_carry(x),), (x,))[0]


def _bn_shift_limbs(x, k):
  """x * 2^(24 k); the dropped top limbs must be zero (capacity)."""
  n = tf.size(x)
  return tf.concat([tf.zeros([k], tf.int64), x[:n - k]], 0)


def _bn_mul(x, v):
  """x * v for x with limbs < 2^24 + 2^7 and a scalar 0 <= v < 2^62.

  Three 24-bit chunks of v; the partial products are < 3 * 2^49, and two
  carry passes bring every limb back below 2^24 + 2^7.
  """
  v = tf.cast(v, tf.int64)
  y = x * tf.bitwise.bitwise_and(v, _LIMB_MASK)
  y += _bn_shift_limbs(
      x * tf.bitwise.bitwise_and(tf.bitwise.right_shift(v, 24), _LIMB_MASK), 1)
  y += _bn_shift_limbs(x * tf.bitwise.right_shift(v, 48), 2)
  return _bn_carry(_bn_carry(y))


def _bn_mul_pow2(x, e):
  e = tf.cast(e, tf.int32)
  x = _bn_shift_limbs(x, e // _LIMB_BITS)
  return _bn_mul(
      x,
      tf.bitwise.left_shift(tf.constant(1, tf.int64),
                            tf.cast(e % _LIMB_BITS, tf.int64)))


def _bn_sign(x):
  """Sign of a normalized big integer: -1, 0 or 1 (int64)."""
  top = x[-1]
  rest = tf.reduce_any(x[:-1] > 0)
  one = tf.constant(1, tf.int64)
  return tf.where(
      top > 0, one,
      tf.where(top < 0, -one, tf.where(rest, one, tf.constant(0, tf.int64))))


@_no_autograph
def exact_ratio_accept(num, den, count, g, w, k_num, seed):
  """Exact test V < a for a = 2^(g+20) prod_j a_j / (K_num prod_j b_j).

  The products run over j = 1..count with a_j = (num[0] + num[1] j) num[2]
  and b_j = (den[0] + den[1] j) den[2] (int64 scalars; each affine part in
  [0, 2^31), each multiplier in [0, 2^54), so a factor has < 85 bits). V is
  uniform on [0, 1) with its first 52 bits w: V = (w + V') / 2^52 with V'
  independent of the fast path, so V < a iff V' B < Delta := 2^52 A - w B.
  While 0 < Delta < B the next 24-bit chunk c of V' = (c + V'')/2^24 gives
  Delta <- 2^24 Delta - c B (each chunk decides with probability
  >= 1 - 2^-23). Returns a scalar bool.
  """
  # Capacity: A, B < 2^(g + 20 + 85 count + 24); Delta < 2^(52+24) B.
  bits = g + 20 + 85 * count + 24 + 52 + 24 + 48
  n_limbs = tf.cast(bits // _LIMB_BITS + 3, tf.int32)
  one = tf.concat([tf.ones([1], tf.int64),
                   tf.zeros([n_limbs - 1], tf.int64)], 0)

  def prod_body(j, a, b):
    a = _bn_mul(_bn_mul(a, num[0] + num[1] * j), num[2])
    b = _bn_mul(_bn_mul(b, den[0] + den[1] * j), den[2])
    return j + 1, a, b

  shape = tf.TensorShape([None])
  _, a, b = tf.while_loop(lambda j, a, b: j <= count,
                          prod_body, (tf.constant(1, tf.int64), one, one),
                          shape_invariants=(tf.TensorShape([]), shape, shape))
  a = _bn_mul_pow2(a, g + _K_SHIFT)
  b = _bn_normalize(_bn_mul(b, k_num))
  delta = _bn_normalize(_bn_mul_pow2(a, _V_BITS) - _bn_mul(b, w))

  def undecided(delta):
    return (_bn_sign(delta) > 0) & (_bn_sign(_bn_normalize(delta - b)) < 0)

  def refine_body(step, delta):
    chunk = tf.bitwise.bitwise_and(
        tf.random.stateless_uniform(
            [],
            seed=tf.random.experimental.stateless_fold_in(seed, step),
            dtype=tf.int64,
            minval=None,
            maxval=None), _LIMB_MASK)
    delta = _bn_normalize(_bn_mul_pow2(delta, _LIMB_BITS) - _bn_mul(b, chunk))
    return step + 1, delta

  _, delta = tf.while_loop(lambda step, delta: undecided(delta),
                           refine_body, (tf.constant(0, tf.int64), delta),
                           shape_invariants=(tf.TensorShape([]), shape))
  return _bn_sign(_bn_normalize(delta - b)) >= 0


@_no_autograph
def _exact_accept(mode, mode_c, d, g, p_int, w, k_num, seed):
  """Exact test V < a(D) for one binomial candidate (`exact_ratio_accept`).

  a(D) = A / B with, for D >= 0 (mirror for D < 0, P <-> Q = 2^54 - P):
  A = 2^(G+20) prod_{j<=D} (M'-j+1) P,  B = K_num prod_{j<=D} (M+j) Q.
  """
  q_int = _TWO54 - p_int
  pos = d >= 0
  one = tf.constant(1, tf.int64)
  num = (tf.where(pos, mode_c, mode) + 1, -one, tf.where(pos, p_int, q_int))
  den = (tf.where(pos, mode, mode_c), one, tf.where(pos, q_int, p_int))
  return exact_ratio_accept(num, den, tf.abs(d), g, w, k_num, seed)


def fast_decision(v_prefix, log_a, err, inside):
  """(accept, reject) of "V < a" from V's first 52 bits, where certain.

  V in [w, w+1) / 2^52; ln a is known to within err. The logarithms of
  the interval's ends carry their own error allowance. Elements in neither
  set go to the exact test.
  """
  wf = tf.cast(v_prefix, tf.float64)
  log_top = _log_pos(wf + 1.0) - _V_BITS * _LN2
  log_bottom = _log_pos(tf.maximum(wf, 1.0)) - _V_BITS * _LN2
  err_v = _ERR_FACTOR * (1.0 + 2 * _V_BITS * _LN2)
  accept = inside & (log_top + err_v <= log_a - err)
  reject = (~inside) | ((v_prefix > 0) & (log_bottom - err_v >= log_a + err))
  return accept, reject


def accept_candidates(v_prefix,
                      log_a,
                      err,
                      inside,
                      it_seed,
                      exact_fn,
                      force_exact=False):
  """Which candidates are accepted: `fast_decision` where it is certain,
  `exact_fn(j, seed) -> bool` (the exact big-integer test of candidate j,
  with its own seed folded from the round's) for the rest, one at a time.

  `force_exact` (testing hook) sends every in-support candidate to
  `exact_fn`. Shared by the binomial and Poisson samplers.
  """
  accept, reject = fast_decision(v_prefix, log_a, err, inside)
  if force_exact:
    accept = tf.zeros_like(accept)
    reject = ~inside
  todo = ~(accept | reject)

  def fix():
    sub = tf.where(todo)[:, 0]
    fb_seed = tf.random.experimental.stateless_fold_in(it_seed, 2)

    def one(i):
      j = sub[i]
      return exact_fn(j, tf.random.experimental.stateless_fold_in(fb_seed, j))

    exact = tf.map_fn(one,
                      tf.range(tf.size(sub, out_type=tf.int64)),
                      fn_output_signature=tf.bool,
                      parallel_iterations=1)
    return tf.tensor_scatter_nd_update(accept, sub[:, None], exact)

  return tf.cond(tf.reduce_any(todo), fix, lambda: accept)


# ---------------------------------------------------------------------------
# Samplers.


def _ctz_sum(words):
  """Trailing zeros of a 64-bit word (64 for 0), as int64."""
  lowest = tf.bitwise.bitwise_and(words, -words)
  return tf.cast(tf.raw_ops.PopulationCount(x=lowest - 1), tf.int64)


@_no_autograph
def _geometric_half(words, seed):
  """G with P(G = g) = 2^-(g+1): trailing zeros of a stream of 64-bit words.

  `words` supplies the first word of each element; the (probability 2^-64)
  elements whose word is 0 continue with fresh words.
  """
  g = _ctz_sum(words)

  def more(g):
    idx = tf.where(tf.equal(words, 0))[:, 0]

    def body(it, idx, acc):
      w = tf.random.stateless_uniform(
          tf.shape(idx),
          seed=tf.random.experimental.stateless_fold_in(seed, it),
          dtype=tf.int64,
          minval=None,
          maxval=None)
      acc = tf.tensor_scatter_nd_add(acc, idx[:, None], _ctz_sum(w))
      keep = tf.equal(w, 0)
      return it + 1, tf.boolean_mask(idx, keep), acc

    return tf.while_loop(lambda it, idx, acc: tf.size(idx) > 0,
                         body, (tf.constant(0, tf.int64), idx, g),
                         shape_invariants=(tf.TensorShape([]),
                                           tf.TensorShape([None]), g.shape))[2]

  return tf.cond(tf.reduce_any(tf.equal(words, 0)), lambda: more(g), lambda: g)


@_no_autograph
def _direct(p_int, num_trials, seed):
  """Sum of m exact Bernoulli(p) trials: [W < P 2^8] for W uniform on 2^62.

  P 2^8 = p 2^62 is an integer, so P(W < P 2^8) = p exactly. Chunks of
  _DIRECT_CHUNK trials per loop step bound the memory at that many words
  per element.
  """
  threshold = tf.bitwise.left_shift(p_int, _WORD_BITS - _P_BITS)[:, None]
  num = tf.size(p_int)

  def body(c, total):
    words = tf.bitwise.bitwise_and(
        tf.random.stateless_uniform(
            tf.stack([num, _DIRECT_CHUNK]),
            seed=tf.random.experimental.stateless_fold_in(seed, c),
            dtype=tf.int64,
            minval=None,
            maxval=None), _WORD_MASK)
    trial = c * _DIRECT_CHUNK + tf.range(_DIRECT_CHUNK, dtype=tf.int64)
    hit = (words < threshold) & (trial < num_trials)[None, :]
    return c + 1, total + tf.reduce_sum(tf.cast(hit, tf.int64), axis=1)

  chunks = -(-num_trials // _DIRECT_CHUNK)
  # The invariant keeps a statically known length (a single element: the
  # zeros are [1] while the loop's draws have an unknown length) legal.
  return tf.while_loop(lambda c, total: c < chunks,
                       body,
                       (tf.constant(0, tf.int64), tf.zeros([num], tf.int64)),
                       shape_invariants=(tf.TensorShape([]),
                                         tf.TensorShape([None])))[1]


def _element_constants(p_int, num_trials):
  """Per-element [M, M', ln(1 + eps), ln P, ln Q] for P = p 2^54 (int64)."""
  n = num_trials
  # Mode M = floor((m+1) P / 2^54), exactly (products < 2^58).
  p_hi = tf.bitwise.right_shift(p_int, _HALF_P_BITS)
  p_lo = tf.bitwise.bitwise_and(p_int, (1 << _HALF_P_BITS) - 1)
  mode = tf.bitwise.right_shift((n + 1) * p_hi + tf.bitwise.right_shift(
      (n + 1) * p_lo, _HALF_P_BITS), _HALF_P_BITS)
  mode_c = n - mode
  # eps = (m p - M) / (M (1-p)); numerator = (m P_hi - M 2^27) 2^-27
  # + m P_lo 2^-54 with the first part exact (absolute error < 2^-48).
  eps_num = (tf.cast(n * p_hi - mode *
                     (1 << _HALF_P_BITS), tf.float64) * 2.0**-_HALF_P_BITS +
             tf.cast(n * p_lo, tf.float64) * 2.0**-_P_BITS)
  q_f = tf.cast(_TWO54 - p_int, tf.float64)
  p_f = tf.cast(p_int, tf.float64)
  mode_f = tf.cast(tf.maximum(mode, 1), tf.float64)
  log1p_eps = _log1p(eps_num / (mode_f * q_f * 2.0**-_P_BITS))
  return [mode, mode_c, log1p_eps, _log_pos(p_f), _log_pos(q_f)]


def _log_accept(consts, d, g, prm, table):
  """(ln a(D), err): |computed - exact ln a(D)| <= err, -M <= D <= M'."""
  mode, mode_c, log1p_eps, log_p, log_q = consts
  log_r, scale = _log_ratio(mode,
                            mode_c,
                            d,
                            log1p_eps,
                            log_p,
                            log_q,
                            table,
                            phi_possible=prm.num_trials >= 2 * _TABLE_SIZE)
  gf = tf.cast(g + _K_SHIFT, tf.float64)
  log_a = log_r + gf * _LN2 - prm.ln_k_num
  err = _ERR_FACTOR * (scale + gf * _LN2 + prm.ln_k_num + 1.0)
  return log_a, err


@dataclasses.dataclass(frozen=True)
class Proposal:
  """One rejection round's words for the candidates `idx`.

  Steps 2 and 4 of the algorithm in docs/notes/exact_samplers.md.

  it_seed: the round's seed; v_prefix: the first 52 bits of V; right: the
  fair side bit; u_word: 62 uniform bits for U (with u_ok: below the
  largest multiple of the block width L); g_word: the word for G.
  """
  it_seed: tf.Tensor
  v_prefix: tf.Tensor
  right: tf.Tensor
  u_word: tf.Tensor
  u_ok: tf.Tensor
  g_word: tf.Tensor


@_no_autograph
def rejection_loop(num, start, seed, width: int, round_fn):
  """Rejection rounds until every index of `start` has a value.

  The loop of this module's and `poisson`'s samplers: round `it` draws
  three words per remaining index from fold_in(seed, it) (`Proposal`);
  `round_fn(proposal, idx)` returns (accept, values) for them; accepted
  values are written at their index, the others go to the next round.
  `start` (all of [0, num)) must come from a data-dependent op, or Grappler
  specialises the loop body to the first round's static size (it then
  folds shape-dependent ops wrongly). Returns int64 [num].
  """
  limit = ((1 << _WORD_BITS) // width) * width

  def body(it, out, idx):
    k = tf.size(idx, out_type=tf.int64)
    it_seed = tf.random.experimental.stateless_fold_in(seed, it)
    words = tf.random.stateless_uniform(tf.stack([k, 3]),
                                        seed=it_seed,
                                        dtype=tf.int64,
                                        minval=None,
                                        maxval=None)
    w_v, w_u, w_g = words[:, 0], words[:, 1], words[:, 2]
    u_word = tf.bitwise.bitwise_and(w_u, _WORD_MASK)
    proposal = Proposal(it_seed=it_seed,
                        v_prefix=tf.bitwise.bitwise_and(w_v, _V_MASK),
                        right=tf.equal(
                            tf.bitwise.bitwise_and(w_v, 1 << _V_BITS), 0),
                        u_word=u_word,
                        u_ok=u_word < limit,
                        g_word=w_g)
    accept, values = round_fn(proposal, idx)
    out = tf.tensor_scatter_nd_update(out,
                                      tf.boolean_mask(idx, accept)[:, None],
                                      tf.boolean_mask(values, accept))
    return it + 1, out, tf.boolean_mask(idx, ~accept)

  _, out, _ = tf.while_loop(
      lambda it, out, idx: tf.size(idx) > 0,
      body, (tf.constant(0, tf.int64), tf.zeros([num], tf.int64), start),
      shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]),
                        tf.TensorShape([None])))
  return out


@_no_autograph
def _rejection(p_int, num_trials, seed, force_exact=False):
  """Exact Binomial(m, P/2^54) for a 1-D int64 tensor P, by rejection."""
  prm = _params(num_trials)
  n = num_trials
  width = prm.width
  table = tf.constant(_log_factorial_table())
  num = tf.size(p_int, out_type=tf.int64)
  consts = _element_constants(p_int, n)

  def round_fn(proposal, idx):
    it_seed, v_prefix = proposal.it_seed, proposal.v_prefix
    u = proposal.u_word % width
    g = _geometric_half(proposal.g_word,
                        tf.random.experimental.stateless_fold_in(it_seed, 1))
    g = tf.minimum(g, n + 1)  # G > m puts t beyond the support anyway
    t = width * g + u
    d = tf.where(proposal.right, t, -1 - t)
    e_consts = [tf.gather(c, idx) for c in consts]
    e_mode, e_mode_c = e_consts[0], e_consts[1]
    inside = proposal.u_ok & (d >= -e_mode) & (d <= e_mode_c)
    d = tf.where(inside, d, tf.zeros_like(d))
    g = tf.where(inside, g, tf.zeros_like(g))
    log_a, err = _log_accept(e_consts, d, g, prm, table)

    def exact(j, seed):
      return _exact_accept(e_mode[j], e_mode_c[j], d[j], g[j],
                           tf.gather(p_int, idx[j]), v_prefix[j], prm.k_num,
                           seed)

    accept = accept_candidates(v_prefix, log_a, err, inside, it_seed, exact,
                               force_exact)
    return accept, e_mode + d

  # The initial index set comes from a data-dependent op (`tf.where`).
  return rejection_loop(num, tf.where(p_int >= 0)[:, 0], seed, width, round_fn)


# ---------------------------------------------------------------------------
# Public API.


def _check_num_trials(num_trials) -> int:
  if isinstance(
      num_trials,
      (bool, np.bool_)) or not isinstance(num_trials, numbers.Integral):
    raise TypeError(
        f'num_trials must be a Python int, got {num_trials!r} of type '
        f'{type(num_trials).__name__}.')
  num_trials = int(num_trials)
  if not 1 <= num_trials <= MAX_NUM_TRIALS:
    raise ValueError(f'num_trials must be in [1, {MAX_NUM_TRIALS}] (2^30), got '
                     f'{num_trials}.')
  return num_trials


def _check_probs(probs) -> tf.Tensor:
  if isinstance(probs, (str, bytes)):
    raise TypeError(f'probs must be a float tensor, got {probs!r}.')
  try:
    probs = tf.convert_to_tensor(probs)
  except (TypeError, ValueError) as e:
    raise TypeError(f'probs must be a float tensor, got {probs!r}.') from e
  if not probs.dtype.is_floating:
    raise TypeError(
        f'probs must have a floating dtype (float16/32/64, converted to '
        f'float64 exactly), got dtype {probs.dtype.name}.')
  probs = tf.cast(probs, tf.float64)
  value = tf.get_static_value(probs)
  if value is not None:
    bad = ~((value >= 0.25) & (value <= 0.75))
    if np.any(bad):
      raise ValueError(
          'probs must lie in [0.25, 0.75] (cPBM probabilities; NaN not '
          f'allowed), got {value[bad].ravel()[:5].tolist()} among the values.')
  return probs


@_no_autograph
def sample_binomial(probs, num_trials: int, seed, *, _force_exact=False):
  """Exact Binomial(num_trials, p) per element of `probs`, as int64.

  Same contract as `poisson_binomial.sample_binomial`, with expected cost
  independent of num_trials (see docs/notes/exact_samplers.md, section on
  binomial.py, for the algorithm, the exactness argument, cost and memory).

  Args:
    probs: float tensor (any shape) of probabilities in [1/4, 3/4]; float16/
      float32 are converted to float64 exactly. Each element is its own p.
      Static values are checked on the host (ValueError); dynamic values are
      checked by `tf.debugging` assertions (InvalidArgumentError).
    num_trials: m, a Python int in [1, 2^30].
    seed: shape-[2] int32/int64 stateless seed (private to the client).
    _force_exact: testing hook; sends every candidate through the exact big
      integer test (same distribution, much slower).

  Returns:
    int64 tensor of probs' shape with values in [0, num_trials].

  Raises:
    TypeError: probs not floating, num_trials not an int, seed not an
      integer tensor.
    ValueError: probs outside [1/4, 3/4], num_trials outside [1, 2^30],
      seed not of shape [2].
  """
  num_trials = _check_num_trials(num_trials)
  probs = _check_probs(probs)
  seed = tensors.stateless_seed(seed)
  if tf.get_static_value(probs) is None:
    checks = [
        tf.debugging.assert_greater_equal(
            probs,
            tf.constant(0.25, tf.float64),
            message='probs must lie in [0.25, 0.75]'),
        tf.debugging.assert_less_equal(probs,
                                       tf.constant(0.75, tf.float64),
                                       message='probs must lie in [0.25, 0.75]')
    ]
    with tf.control_dependencies(checks):
      probs = tf.identity(probs)
  shape = tf.shape(probs)
  flat = tf.reshape(probs, [-1])
  # P = p 2^54 exactly (power-of-two scaling of a multiple of 2^-54).
  p_int = tf.cast(flat * float(_TWO54), tf.int64)
  if num_trials < _REJECTION_MIN_TRIALS and not _force_exact:
    out = _direct(p_int, num_trials, seed)
  else:
    out = _rejection(p_int, num_trials, seed, force_exact=_force_exact)
  return tf.reshape(out, shape)
