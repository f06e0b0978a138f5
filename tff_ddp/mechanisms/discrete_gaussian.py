"""Exact sampling from the discrete Gaussian N_Z(0, s) with TensorFlow ops.

Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential
Privacy" (CKS), Algorithms 1-3, implemented so that every random decision is
made by comparing uniformly random *integers* with *integers* computed exactly
in int64 arithmetic. See `sample_discrete_gaussian` for the guarantees.

Host-side constants (all exact Python integers, computed once per scale):

* variance s = N / 2^q >= scale^2 (`discrete_gaussian_variance_parameter`);
* proposal centre mu = m / 2^k (an integer for scale >= 1, a dyadic rational
  close to s for scale < 1);
* discrete Laplace scale t = s / mu = a / b (reduced fraction);
* acceptance exponent gamma(y) = (|y| - mu)^2 / (2 s) = z^2 * P / C with
  z = 2^k |y| - m;
* truncation point x_max and geometric cap v_cap (see `_Params`).
"""

import dataclasses
import fractions
import functools
import math
import numbers
from typing import Sequence, Union

import numpy as np
import tensorflow as tf

from tff_ddp.utils import tensors

# --- Limits of the exact integer representation (all documented in the API).
# s = N / 2^q with N <= 2^_MAX_N_BITS and q <= _MAX_Q_BITS; q is maximal.
_MAX_N_BITS = 50
_MAX_Q_BITS = 40
# x_max is the smallest integer with x_max^2 >= 2 * _TAIL_EXPONENT * s, so the
# truncated mass is <= 2 exp(-_TAIL_EXPONENT) < exp(-1000).
_TAIL_EXPONENT = 1001
# The largest scale with N <= 2^50 at q = 0 is exactly 2^25; all int64 bounds
# below are checked on the host for every scale (and hold up to 2^25).
_MAX_SCALE = float(2**25)

# Random words: uniform in [0, 2^62) (the low 62 bits of a full int64 word).
_WORD_BITS = 62
_TWO62 = 1 << _WORD_BITS
_WORD_MASK = _TWO62 - 1
# Largest modulus used with `_mod_uniform` (keeps rejection rates <= 2^-10).
_MAX_MODULUS = 1 << 52
# Most samples one call draws (static shapes; `tensors.static_shape`).
MAX_SAMPLES = tensors.MAX_SAMPLES
# Bernoulli(1/j), j = 1..L, of CKS Algorithm 1 come from one uniform F in
# [0, L!): kfact = #{j <= L: F < L!/j!} has P(kfact >= j) = 1/j!, exactly the
# law of the number of leading successes of Bern(1/1), Bern(1/2), ...
_FACT_L = 12
_FACT_MOD = math.factorial(_FACT_L)
_FACT_T = {j: _FACT_MOD // math.factorial(j) for j in range(1, _FACT_L + 1)}

# The TF code below has no tensor-dependent Python control flow (it uses
# tf.while_loop / tf.cond explicitly); skipping AutoGraph's source
# transformation cuts tf.function tracing time several-fold.
_no_autograph = tf.autograph.experimental.do_not_convert

# Fold-in constants naming the call sites inside one round.
_SITE_D, _SITE_V, _SITE_G, _SITE_R = 1, 2, 3, 4


def _limit(modulus: int) -> int:
  """Words w < limit give w mod `modulus` exactly uniform."""
  return (_TWO62 // modulus) * modulus


def scale_fraction(scale) -> fractions.Fraction:
  """Validates `scale` (in [0, 2^25]) and returns it as an exact Fraction.

  A Python or numpy real, or a constant scalar tensor; TypeError for other
  types (bools, strings, non-constant or non-scalar tensors), ValueError for
  values that are negative, not finite or above max_supported_scale().
  """
  if isinstance(scale, (tf.Tensor, tf.Variable)):
    value = tf.get_static_value(scale)
    if value is None:
      raise TypeError(
          'scale must be a Python number or a constant tensor, got a '
          f'non-constant tensor {scale!r}.')
    if np.ndim(value) != 0:
      raise TypeError(f'scale must be a scalar, got a tensor of shape '
                      f'{np.shape(value)}.')
    scale = value.item() if isinstance(value, np.ndarray) else value
  if isinstance(scale, np.ndarray) and scale.ndim == 0:
    scale = scale.item()
  if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
    raise TypeError(f'scale must be a real number, got {scale!r}.')
  if isinstance(scale, numbers.Integral):
    value = fractions.Fraction(int(scale))
  else:
    as_float = float(scale)
    if not math.isfinite(as_float):
      raise ValueError(
          f'scale must be finite and in [0, {_MAX_SCALE}], got {scale!r}.')
    value = fractions.Fraction(as_float)
  if value < 0 or value > _MAX_SCALE:
    raise ValueError(
        f'scale must be in [0, {_MAX_SCALE}] (max_supported_scale()), got '
        f'{scale!r}.')
  return value


def _variance_numerator(sigma: fractions.Fraction):
  """(N, q): N = ceil(sigma^2 2^q) <= 2^50 with q <= 40 maximal."""
  var = sigma * sigma
  for q in range(_MAX_Q_BITS, -1, -1):
    n = math.ceil(var * (1 << q))
    if n <= (1 << _MAX_N_BITS):
      return n, q
  raise ValueError(f'scale must be at most {_MAX_SCALE}, got {float(sigma)}.')


@dataclasses.dataclass(frozen=True)
class _Params:
  """Exact integer constants of the sampler for one (positive) scale."""
  n: int  # s = n / 2^q
  q: int
  k: int  # mu = m / 2^k
  m: int
  a: int  # Laplace scale t = s / mu = a / b
  b: int
  p: int  # gamma(y) = z^2 p / c, z = 2^k |y| - m
  c: int
  x_max: int  # output conditioned on |x| <= x_max
  v_cap: int  # V >= v_cap implies |Y| > x_max
  success_prob: float  # float estimate, only used to size batches


@functools.lru_cache(maxsize=256)
def _params(sigma: fractions.Fraction) -> _Params:
  """Computes and checks the integer constants (sigma > 0)."""
  n, q = _variance_numerator(sigma)
  if sigma >= 1:
    k, m = 0, math.floor(sigma)
  else:
    # q == 40 here (sigma^2 < 1 so N <= 2^40). mu = m / 2^k ~= s keeps the
    # acceptance numerator z^2 p small: z = 2^k|y| - m, p = 2^(q - 2k - 1).
    k = (q - 1) // 2
    m = max(1, round(fractions.Fraction(n, 1 << (q - k))))
  # t = s / mu = (n / 2^q) / (m / 2^k) = n / (m 2^(q - k)).
  a, b = n, m << (q - k)
  g = math.gcd(a, b)
  a, b = a // g, b // g
  # gamma = (|y| - m/2^k)^2 2^q / (2n) = z^2 2^(q - 2k - 1) / n.
  e = q - 2 * k - 1
  p, c = (1 << e, n) if e >= 0 else (1, n << -e)
  g = math.gcd(p, c)
  p, c = p // g, c // g
  # Smallest x_max with x_max^2 >= 2 * 1001 * s = 2002 n / 2^q.
  t = -(-(2 * _TAIL_EXPONENT * n) // (1 << q))
  x_max = math.isqrt(t - 1) + 1
  v_cap = -(-((x_max + 1) * b) // a)
  z_max = max(m, (x_max << k) - m)
  checks = {
      'z^2 p': z_max * z_max * p <= _TWO62,
      'c': c <= _MAX_MODULUS,
      'a': a <= _MAX_MODULUS,
      'x': a * (v_cap + 2) <= _TWO62,
      'y': (x_max << k) < _TWO62,
  }
  failed = [name for name, ok in checks.items() if not ok]
  if failed:  # Cannot happen for scale <= 2^25; kept as a safety net.
    raise ValueError(
        f'scale {float(sigma)} exceeds the int64 range of the exact sampler '
        f'(failed bounds: {failed}); scale must be in [0, {_MAX_SCALE}].')
  # Batch sizing only (never a random decision): float success estimate.
  s_f = n / 2.0**q
  mu_f = m / 2.0**k
  lam = b / a
  rho = math.exp(-lam)
  p_d = -math.expm1(-1.0) / (a * -math.expm1(-1.0 / a))
  if s_f > 1e4:
    z_sum = math.sqrt(2 * math.pi * s_f)
  else:
    y = np.arange(-int(50 * math.sqrt(s_f)) - 3, int(50 * math.sqrt(s_f)) + 4)
    z_sum = float(np.sum(np.exp(-(y.astype(np.float64)**2) / (2 * s_f))))
  success = p_d * (1 - rho) / 2 * math.exp(-mu_f**2 / (2 * s_f)) * z_sum
  return _Params(n=n,
                 q=q,
                 k=k,
                 m=m,
                 a=a,
                 b=b,
                 p=p,
                 c=c,
                 x_max=x_max,
                 v_cap=v_cap,
                 success_prob=min(1.0, max(success, 1e-3)))


def discrete_gaussian_variance_parameter(scale) -> fractions.Fraction:
  """The exact variance parameter s = N / 2^q sampled for `scale`.

  s is sigma^2 = scale^2 rounded *up* to a multiple of 2^-q, where q <= 40 is
  the largest exponent with N = ceil(sigma^2 2^q) <= 2^50. Hence
  sigma^2 <= s < sigma^2 + 2^-q and (s - sigma^2) / sigma^2 < 1 / N, which is
  <= 2^-40 for scale >= 1 and <= 2^-40 / scale^2 for scale < 1. Privacy
  accounting should use this s (the sampler's pmf is prop. to exp(-x^2/(2s))).

  Args:
    scale: the requested standard-deviation-like parameter sigma, in
      [0, max_supported_scale()].

  Returns:
    s as a `fractions.Fraction` (0 for scale 0).
  """
  sigma = scale_fraction(scale)
  if sigma == 0:
    return fractions.Fraction(0)
  n, q = _variance_numerator(sigma)
  return fractions.Fraction(n, 1 << q)


def max_supported_scale() -> float:
  """Largest supported scale: 2^25 (s = N/2^q needs N <= 2^50 at q = 0)."""
  return _MAX_SCALE


# ----------------------------------------------------------------------------
# TensorFlow helpers. All integers are int64; all seeds are shape-[2] int64.


def _fold(seed, data):
  return tf.random.experimental.stateless_fold_in(seed, tf.cast(data, tf.int64))


def _raw_words(n, seed):
  """n full-range int64 words (all 64 bits uniform)."""
  return tf.random.stateless_uniform(tf.reshape(tf.cast(n, tf.int32), [1]),
                                     seed=seed,
                                     dtype=tf.int64,
                                     minval=None,
                                     maxval=None)


def _words(n, seed):
  """n independent uniform integers in [0, 2^62)."""
  return tf.bitwise.bitwise_and(_raw_words(n, seed), _WORD_MASK)


def _mod_uniform(words, modulus):
  """(u, valid): u = words mod modulus is exactly uniform given `valid`.

  Modulo reduction with rejection of the incomplete top block: for words
  uniform in [0, 2^62), w < limit = floor(2^62 / R) R happens with
  probability >= 1 - R / 2^62 and then w mod R is exactly uniform on [0, R).
  (TF's own minval/maxval sampling reduces modulo without rejecting, which is
  biased.) Callers redraw, or reject the whole candidate, when not valid.
  """
  if isinstance(modulus, int):
    limit = tf.constant(_limit(modulus), tf.int64)
    modulus_t = tf.constant(modulus, tf.int64)
  else:
    modulus_t = modulus
    limit = (tf.constant(_TWO62, tf.int64) // modulus) * modulus
  return words % modulus_t, words < limit


def _fact_uniform(n, seed):
  """(F, valid): F uniform on [0, L!) given valid (one word each)."""
  return _mod_uniform(_words(n, seed), _FACT_MOD)


def _kfact(f):
  """kfact = #{j in 1..L: F < L!/j!}, so P(kfact >= j) = 1/j!.

  The outcomes of Bern(1/1), ..., Bern(1/L) in CKS Algorithm 1 are then
  "j <= kfact" (if kfact == L, the steps beyond L are not decided by F).
  """
  return 1 + tf.add_n(
      [tf.cast(f < _FACT_T[j], tf.int64) for j in range(2, _FACT_L + 1)])


@_no_autograph
def _bern_exp_loop(r, c: int, kfact, known, j0, seed):
  """CKS Algorithm 1 for Bernoulli(exp(-r/c)), 0 <= r <= c, from step j0.

  Precondition: steps 1..j0-1 succeeded. Step K is Bern(r/c) AND Bern(1/K),
  independent: Bern(r/c) = [u < r] for u exactly uniform on [0, c);
  Bern(1/K) = "K <= kfact" for K <= known, else [u' == 0] for u' exactly
  uniform on [0, K). A draw in a rejection block repeats the step. Returns
  "final K odd". Works on the shrinking set of unfinished elements; used only
  for the minority of elements not decided by the dense first passes.
  """
  n = tf.size(r, out_type=tf.int64)

  def cond(it, out, idx, r, j, kfact, known):
    del it, out, r, j, kfact, known
    return tf.size(idx) > 0

  def body(it, out, idx, r, j, kfact, known):
    m = tf.size(idx, out_type=tf.int64)
    w = _words(2 * m, _fold(seed, it))
    if c == 1:
      a_ok = tf.ones_like(j, tf.bool)
      a_valid = a_ok
    else:
      u, a_valid = _mod_uniform(w[m:], c)
      a_ok = u < r
    fresh = j > known
    u1, b_valid = _mod_uniform(w[:m], j)
    b_ok = tf.where(fresh, tf.equal(u1, 0), j <= kfact)
    valid = a_valid & (b_valid | ~fresh)
    success = a_ok & b_ok
    advance = valid & success
    j_new = j + tf.cast(advance, tf.int64)
    # The next step fails for sure when its Bern(1/K) is already known.
    next_fails = advance & (j_new <= known) & (j_new > kfact)
    finished = (valid & ~success) | next_fails
    out = tf.tensor_scatter_nd_update(
        out,
        tf.boolean_mask(idx, finished)[:, None],
        tf.equal(tf.boolean_mask(j_new, finished) % 2, 1))
    keep = ~finished
    return (it + 1, out, tf.boolean_mask(idx, keep), tf.boolean_mask(r, keep),
            tf.boolean_mask(j_new, keep), tf.boolean_mask(kfact, keep),
            tf.boolean_mask(known, keep))

  init = (tf.constant(0, tf.int64), tf.zeros([n], tf.bool),
          tf.range(n, dtype=tf.int64), r, j0, kfact, known)
  return tf.while_loop(cond,
                       body,
                       init,
                       shape_invariants=(tf.TensorShape([]),) +
                       (tf.TensorShape([None]),) * 6)[1]


@_no_autograph
def _patch(dense, todo, fix_fn):
  """dense with the elements where `todo` replaced by fix_fn(indices)."""
  idx = tf.where(todo)
  return tf.tensor_scatter_nd_update(dense, idx, fix_fn(idx))


@_no_autograph
def _bern_exp(r, c: int, seed):
  """Exact Bernoulli(exp(-r/c)) for an int64 tensor r, 0 <= r <= c.

  CKS Algorithm 1 (see `_bern_exp_loop`). A dense first pass decides the
  first two steps for every element: Bern(1/2), Bern(1/3) from one factorial
  uniform F ("F < L!/2", "F < L!/3"), Bern(r/c) from two uniforms on [0, c).
  The remaining elements (mostly those whose first two steps succeed and whose
  Bern(1/3) succeeds, probability <= (r/c)^2 / 6) continue in the loop with
  everything F decides about Bern(1/K), K <= L.
  """
  n = tf.size(r, out_type=tf.int64)
  f, f_valid = _fact_uniform(n, _fold(seed, 0))
  u, u_valid = _mod_uniform(_words(2 * n, _fold(seed, 1)), c)
  ok1 = u_valid[:n] & (u[:n] < r)
  ok2 = u_valid[n:] & (u[n:] < r)
  ge2 = f < _FACT_T[2]
  ge3 = f < _FACT_T[3]
  s2 = ok1 & ge2  # steps 1 and 2 pass the Bern(1/K) part
  lead2 = s2 & ok2  # two leading successes
  # Decided: failure at step 1 (valid draw), at step 2 (Bern(1/2) or a valid
  # Bern(r/c) draw), or at step 3 through Bern(1/3).
  decided = f_valid & ((u_valid[:n] & ~ok1) | (ok1 & ~ge2) |
                       (s2 & u_valid[n:] & ~ok2) | (lead2 & ~ge3))
  # K = 1 + #leading successes is odd iff the count (0, 1 or 2) is even.
  dense = ~(ok1 & ~lead2)

  def fix(idx):
    fi = tf.gather_nd(f, idx)
    valid = tf.gather_nd(f_valid, idx)
    one = tf.ones_like(fi)
    kfact = tf.where(valid, _kfact(fi), one)
    known = tf.where(valid, _FACT_L * one, one)
    # Restart from step 1 if F was rejected (independent of the outcome);
    # otherwise resume after the leading successes already drawn.
    done = (tf.cast(tf.gather_nd(ok1, idx), tf.int64) +
            tf.cast(tf.gather_nd(lead2, idx), tf.int64))
    j0 = tf.where(valid, done + 1, one)
    return _bern_exp_loop(tf.gather_nd(r, idx), c, kfact, known, j0,
                          _fold(seed, 2))

  return _patch(dense, ~decided, fix)


@_no_autograph
def _bern_exp_minus_one(n, seed):
  """n exact Bernoulli(exp(-1)) bits, one factorial uniform F each.

  For r = c = 1 every Bern(r/c) succeeds, so Algorithm 1 stops at
  K = kfact + 1: the result is "kfact even", i.e. the XOR of the L - 1
  comparisons F < L!/j!, whenever F is valid and kfact < L (probability
  > 1 - 1/L! - 2^-33); the rest go to `_bern_exp_loop` (under tf.cond).
  """
  f, valid = _fact_uniform(n, _fold(seed, 0))
  dense = f < _FACT_T[2]
  for j in range(3, _FACT_L + 1):
    dense = tf.math.logical_xor(dense, f < _FACT_T[j])
  rare = ~valid | (f < _FACT_T[_FACT_L])

  def fix(idx):
    one = tf.ones_like(idx[:, 0])
    valid_i = tf.gather_nd(valid, idx)
    return _bern_exp_loop(one, 1, tf.where(valid_i, _FACT_L * one, one),
                          tf.where(valid_i, _FACT_L * one, one),
                          tf.where(valid_i, (_FACT_L + 1) * one, one),
                          _fold(seed, 1))

  return tf.cond(tf.reduce_any(rare), lambda: _patch(dense, rare, fix),
                 lambda: dense)


@_no_autograph
def _capped_geometric_exp_minus_one(cap, seed):
  """min(G, cap) per element, G = #successes of Bern(exp(-1)) before failure.

  P(G >= v) = exp(-v); cap is an int64 tensor >= 0. A dense pass draws two
  Bernoulli(exp(-1)) bits per element; elements with two successes and
  cap > 2 (probability <= e^-2) continue in a loop, two bits at a time.
  """
  n = tf.size(cap, out_type=tf.int64)
  bits = _bern_exp_minus_one(2 * n, _fold(seed, 0))
  b1, b2 = bits[:n], bits[n:]
  lead2 = b1 & b2
  dense = tf.minimum(tf.cast(b1, tf.int64) + tf.cast(lead2, tf.int64), cap)
  loop_seed = _fold(seed, 1)

  def fix(idx):

    def cond(it, out, sub, count, cap):
      del it, out, count, cap
      return tf.size(sub) > 0

    def body(it, out, sub, count, cap):
      m = tf.size(sub, out_type=tf.int64)
      bits = _bern_exp_minus_one(2 * m, _fold(loop_seed, it))
      b1, b2 = bits[:m], bits[m:]
      lead2 = b1 & b2
      count = tf.minimum(
          count + tf.cast(b1, tf.int64) + tf.cast(lead2, tf.int64), cap)
      finished = ~lead2 | (count >= cap)
      out = tf.tensor_scatter_nd_update(out,
                                        tf.boolean_mask(sub, finished)[:, None],
                                        tf.boolean_mask(count, finished))
      keep = ~finished
      return (it + 1, out, tf.boolean_mask(sub, keep),
              tf.boolean_mask(count, keep), tf.boolean_mask(cap, keep))

    k = tf.shape(idx, out_type=tf.int64)[0]
    init = (tf.constant(0, tf.int64), tf.zeros([k], tf.int64),
            tf.range(k, dtype=tf.int64), tf.fill([k], tf.constant(2, tf.int64)),
            tf.gather_nd(cap, idx))
    return tf.while_loop(cond,
                         body,
                         init,
                         shape_invariants=(tf.TensorShape([]),) +
                         (tf.TensorShape([None]),) * 4)[1]

  return _patch(dense, lead2 & (cap > 2), fix)


@_no_autograph
def _round(num_candidates, prm: _Params, seed):
  """Runs `num_candidates` independent trials; returns the accepted values.

  One trial = one pass of CKS Algorithm 2 (discrete Laplace, scale a/b) and
  Algorithm 3's acceptance test, with every restart condition (D = 0,
  (B, Y) = (1, 0), |Y| > x_max, rejection block of the uniform U, Gaussian
  rejection) turned into "trial fails". The accepted values of a round are
  iid N_Z(0, s) conditioned on |x| <= x_max; they are returned in trial order.
  """
  raw = _raw_words(num_candidates, _fold(seed, 0))
  u, ok = _mod_uniform(tf.bitwise.bitwise_and(raw, _WORD_MASK), prm.a)
  # B = bit 62 of the same word, independent of its low 62 bits; it rides
  # along in bit 62 of `packed` (u < 2^52).
  packed = tf.bitwise.bitwise_or(
      u, tf.bitwise.bitwise_and(raw, tf.constant(1 << _WORD_BITS, tf.int64)))
  if prm.a > 1:  # D ~ Bernoulli(exp(-U/a)); for a == 1, U = 0 and D = 1.
    ok &= _bern_exp(u, prm.a, _fold(seed, _SITE_D))
  packed = tf.boolean_mask(packed, ok)
  u = tf.bitwise.bitwise_and(packed, _WORD_MASK)
  negative = tf.not_equal(
      tf.bitwise.bitwise_and(packed, tf.constant(1 << _WORD_BITS, tf.int64)), 0)

  # V ~ Geometric: #successes of Bernoulli(exp(-1)); V >= v_cap => |Y| > x_max.
  v = _capped_geometric_exp_minus_one(
      tf.fill(tf.shape(u), tf.constant(prm.v_cap, tf.int64)),
      _fold(seed, _SITE_V))
  y = (u + prm.a * v) // prm.b
  ok = (y <= prm.x_max) & ~(negative & tf.equal(y, 0))
  y = tf.minimum(y, prm.x_max)  # rejected anyway; keeps z^2 p in range

  # Accept with probability exp(-gamma), gamma = z^2 p / c = g + rem / c.
  z = tf.bitwise.left_shift(y, prm.k) - prm.m
  zz = z * z * prm.p  # <= 2^62 by the host-side checks
  g = zz // prm.c
  rem = zz - g * prm.c
  g = tf.where(ok, g, tf.zeros_like(g))  # no draws for rejected proposals
  ok &= tf.equal(_capped_geometric_exp_minus_one(g, _fold(seed, _SITE_G)), g)
  ok &= _bern_exp(rem, prm.c, _fold(seed, _SITE_R))
  return tf.boolean_mask(tf.where(negative, -y, y), ok)


@_no_autograph
def sample_discrete_gaussian(shape: Union[Sequence[int], tf.TensorShape,
                                          tf.Tensor], scale: float,
                             seed) -> tf.Tensor:
  """Samples iid discrete Gaussian noise N_Z(0, s), s ~= scale^2, as int64.

  The pmf is P(x) prop. to exp(-x^2 / (2 s)) on the integers (CKS 2020,
  "The Discrete Gaussian for Differential Privacy", Algorithms 1-3), where

  * s = `discrete_gaussian_variance_parameter(scale)` = N / 2^q is scale^2
    rounded *up* (never down, so privacy is never weaker than requested) to a
    multiple of 2^-q, with N <= 2^50 and q <= 40 maximal: the relative
    increase (s - scale^2) / scale^2 is < 1/N (<= 2^-40 for scale >= 1). It is
    *not* scale rounded up to an integer. Account privacy with this s.
  * The output is exactly N_Z(0, s) conditioned on |x| <= x_max, with x_max
    the smallest integer such that x_max^2 >= 2002 s. N_Z(0, s) is
    s-sub-Gaussian (E[e^{tX}] <= e^{t^2 s / 2}), so the excluded mass is at
    most 2 exp(-x_max^2 / (2 s)) <= 2 e^-1001 < e^-1000 for every supported
    scale. This truncation is what makes int64 overflow impossible; the
    geometric count V of Algorithm 2 is likewise capped at a value v_cap that
    already forces |Y| > x_max, so the cap changes nothing beyond the
    truncation.

  How exactness is achieved: all random decisions compare exactly uniform
  integers with integers computed exactly in int64. Uniform integers on
  [0, R) come from the low 62 bits of full-range int64 words by modular
  reduction with rejection of the incomplete top block (exact). The proposal
  is the discrete Laplace with rational scale t = s/mu = a/b (Algorithm 2
  generalised to rational t), centre mu = floor(scale) for scale >= 1 (a
  dyadic rational ~= s for scale < 1), and Algorithm 3 accepts with
  probability exp(-(|Y| - mu)^2 / (2 s)) = exp(-(g + r/c)) with integer g, r,
  c computed exactly: [G >= g] for a geometric G (P(G >= g) = e^-g) and
  Bernoulli(exp(-r/c)) by Algorithm 1, whose Bernoulli(r/(cK)) is split into
  independent Bernoulli(r/c) and Bernoulli(1/K) so no product cK is formed.
  Floating point is never used for a random decision (floats leak through
  the tails, cf. Mironov 2012); it only sizes the candidate batches (how many
  trials to run per round), which does not affect the output distribution
  because every trial is iid and the first accepted trials are kept in order.

  Seeds: the output is a deterministic function of (shape, scale, seed); all
  random ops use distinct seeds derived with
  `tf.random.experimental.stateless_fold_in`. In a distributed-DP protocol
  each client MUST use its own, secret, independent noise seed: never share a
  noise seed between clients -- a client that knows another client's seed can
  recompute and subtract that noise (and with a shared seed, cancel everyone's
  noise from the aggregate).

  Works eagerly and inside `tf.function` (only TF ops and `tf.while_loop`).

  Args:
    shape: static output shape (list/tuple of ints, fully defined
      `TensorShape`, or a 1-D int tensor).
    scale: Python int/float sigma in [0, max_supported_scale()] = [0, 2^25];
      0 gives zeros.
    seed: a stateless seed, shape-[2] int32/int64 tensor or pair of ints.

  Returns:
    An int64 tensor of the given shape.

  Raises:
    TypeError: scale, shape or seed of the wrong type (a float shape entry,
      a float seed).
    ValueError: `scale` negative, not finite or > max_supported_scale(); a
      negative shape entry; a seed not of shape [2].
  """
  sigma = scale_fraction(scale)
  out_shape, n = tensors.output_shape(shape)
  seed = tensors.stateless_seed(seed)
  if sigma == 0:
    return tf.zeros(out_shape, tf.int64)
  prm = _params(sigma)

  inv_p = 1.0 / prm.success_prob

  def cond(it, filled, out):
    del it, out
    return filled < n

  def body(it, filled, out):
    need = n - filled
    need_f = tf.cast(need, tf.float64)
    # Batch size only (floats never decide an outcome): mean + 5 sd margin.
    num = tf.cast(
        tf.math.ceil(need_f * inv_p * 1.02 + 5.0 * tf.sqrt(need_f * inv_p) +
                     8.0), tf.int64)
    values = _round(num, prm, _fold(seed, it))[:need]
    taken = tf.size(values, out_type=tf.int64)
    out = tf.tensor_scatter_nd_update(
        out, (filled + tf.range(taken, dtype=tf.int64))[:, None], values)
    return it + 1, filled + taken, out

  _, _, out = tf.while_loop(cond, body, (tf.constant(
      0, tf.int64), tf.constant(0, tf.int64), tf.zeros([n], tf.int64)))
  return tf.reshape(out, out_shape)
