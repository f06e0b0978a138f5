"""Exact Poisson(mu) and symmetric Skellam sampling in TensorFlow.

`sample_poisson(shape, mean, seed)` returns int64 draws whose law is
*exactly* Poisson(mu) for mu = `sampled_mean(mean)` (the mean rounded up to
a multiple of 2^-20), at an expected cost per element independent of mu for
mu <= 2^30: rejection from a geometric-of-blocks envelope (Devroye,
"Non-Uniform Random Variate Generation", 1986, ch. X) decided by
`binomial`'s certified float64 test and exact fallback; `expected_candidates`
gives the rejection constant. `sample_skellam(shape, mean, seed)` is the
difference of two draws: the noise of the distributed Skellam mechanism
(Agarwal, Kairouz & Liu, "The Skellam Mechanism for Differentially Private
Federated Learning", NeurIPS 2021, arXiv 2110.04995), variance 2 mu.

Algorithm, envelope proof, float64 evaluation: docs/notes/exact_samplers.md.
"""

import dataclasses
import decimal
import fractions
import functools
import math
import numbers

import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import binomial
from tff_ddp.utils import tensors

MEAN_GRID_BITS = 20  # mu is a multiple of 2^-20
MIN_MEAN = 2.0**-MEAN_GRID_BITS
# One rejection sampler's mean; larger means are sums of chunks.
MAX_CHUNK_MEAN = 2.0**30
# Largest mean accepted at all (2^10 chunks).
MAX_MEAN = 2.0**40
_GRID = 1 << MEAN_GRID_BITS
_K_SHIFT = binomial._K_SHIFT  # pylint: disable=protected-access  # binomial's sampler, shared
_G_CAP = 64  # trailing zeros of one 64-bit word
_TABLE_SIZE = binomial._TABLE_SIZE  # pylint: disable=protected-access  # binomial's sampler, shared
_ERR_FACTOR = binomial._ERR_FACTOR  # pylint: disable=protected-access  # binomial's sampler, shared
_LN2 = math.log(2.0)
_no_autograph = tf.autograph.experimental.do_not_convert
_log_pos = binomial._log_pos  # pylint: disable=protected-access  # binomial's sampler, shared
_log1p = binomial._log1p  # pylint: disable=protected-access  # binomial's sampler, shared
_phi = binomial._phi  # pylint: disable=protected-access  # binomial's sampler, shared
_beta = binomial._beta  # pylint: disable=protected-access  # binomial's sampler, shared
_log_factorial = binomial._log_factorial  # pylint: disable=protected-access  # binomial's sampler, shared


@dataclasses.dataclass(frozen=True)
class _Params:
  mean_num: int  # P, mu = P / 2^20
  mode: int  # M = floor(mu)
  width: int  # L
  k_num: int  # K = k_num / 2^20
  ln_k_num: float
  ln_mean: float  # ln mu
  ln_ratio: float  # ln(mu / M) (0 when M = 0, unused then)


def _check_mean(mean) -> float:
  if isinstance(mean, (bool, np.bool_)) or not isinstance(mean, numbers.Real):
    raise TypeError(f'mean must be a real number, got {mean!r} of type '
                    f'{type(mean).__name__}.')
  mean = float(mean)
  if not MIN_MEAN <= mean <= MAX_MEAN:
    raise ValueError(f'mean must be in [2^-20, 2^40], got {mean!r}.')
  return mean


def _chunks(mean: float):
  """(number of chunks c, P) with nu = P / 2^20 >= mean / c, P >= 1."""
  count = max(1, math.ceil(mean / MAX_CHUNK_MEAN))
  num = math.ceil(fractions.Fraction(mean) * _GRID / count)
  return count, max(1, num)


def sampled_mean(mean) -> float:
  """The mean the samplers draw for a requested `mean` (>= it).

  c nu with c = ceil(mean / 2^30) chunks and nu = mean / c rounded up to a
  multiple of 2^-20 (relative increase < 2^-20 / nu). Returned as the
  largest float64 not above that rational (exact below 2^30, where it has
  at most 50 significant bits), so an accountant given it never credits
  more noise than is drawn; it is still >= `mean`.
  """
  count, num = _chunks(_check_mean(mean))
  exact = fractions.Fraction(count * num, _GRID)
  value = float(exact)
  if fractions.Fraction(value) > exact:
    value = math.nextafter(value, 0.0)
  return value


def _ln_k_bound(mu: fractions.Fraction, width: int) -> decimal.Decimal:
  """ln K for mean mu and block width L, 60 digits.

  K, L and the bound: docs/notes/exact_samplers.md, section on poisson.py,
  "Envelope proof (K)".
  """
  dmu = decimal.Decimal(mu.numerator) / decimal.Decimal(mu.denominator)
  b = decimal.Decimal(2).ln() / width
  beta = b.exp() - 1
  c = (1 - beta / 2) / dmu

  def q_right(j):
    return j * b - c * j * (j - 1) / 2

  def q_left(x):
    return x * b - x * (x + 1) / (2 * dmu)

  best = decimal.Decimal(0)
  star = int(
      (b / c +
       decimal.Decimal('0.5')).to_integral_value(rounding=decimal.ROUND_FLOOR))
  for j in (star, star + 1):
    if j >= 1:
      best = max(best, q_right(decimal.Decimal(j)))
  star = int(
      (dmu * b -
       decimal.Decimal('0.5')).to_integral_value(rounding=decimal.ROUND_FLOOR))
  for x in (star, star + 1):
    if x >= 0:
      best = max(best, q_left(decimal.Decimal(x)))
  return best


@functools.lru_cache(maxsize=64)
def _params(mean_num: int) -> _Params:
  """L and K (and the host logarithms) for mu = mean_num / 2^20."""
  mu = fractions.Fraction(mean_num, _GRID)
  mode = mean_num >> MEAN_GRID_BITS
  mu_f = float(mu)

  def cost(width):  # 4 L K up to f(M), from float approximations
    b = _LN2 / width
    return width * math.exp(min(700.0, max(mu_f * b * b / 2, b)))

  guess = max(1, int(0.69 * math.sqrt(mu_f)))
  lo, hi = max(1, guess // 2), 2 * guess + 2
  width = min(range(lo, hi + 1), key=cost)
  with decimal.localcontext(binomial._decimal_context()):  # pylint: disable=protected-access  # binomial's sampler, shared
    ln_k = _ln_k_bound(mu, width)
    k_num = int(
        (ln_k.exp() *
         (1 << _K_SHIFT)).to_integral_value(rounding=decimal.ROUND_CEILING)) + 1
    ln_k_num = float(decimal.Decimal(k_num).ln())
    dmu = decimal.Decimal(mean_num) / _GRID
    ln_mean = float(dmu.ln())
    ln_ratio = float((dmu / mode).ln()) if mode > 0 else 0.0
  return _Params(mean_num=mean_num,
                 mode=mode,
                 width=width,
                 k_num=k_num,
                 ln_k_num=ln_k_num,
                 ln_mean=ln_mean,
                 ln_ratio=ln_ratio)


def expected_candidates(mean) -> float:
  """Expected proposals per draw of one chunk, 4 L K f(M) (documentation)."""
  _, num = _chunks(_check_mean(mean))
  prm = _params(num)
  mu = num / _GRID
  log_f = -mu + prm.mode * math.log(mu) - math.lgamma(prm.mode + 1)
  return 4 * prm.width * prm.k_num / 2**_K_SHIFT * math.exp(log_f)


def _log_ratio(d, prm, table):
  """(ln r(D), scale) with |error| <= 2^-42 scale, for M + D >= 0."""
  mode = prm.mode
  df = tf.cast(d, tf.float64)
  upper = tf.constant(mode, tf.int64) + d

  def direct(d, upper):
    df = tf.cast(d, tf.float64)
    f1, s1 = _log_factorial(tf.fill(tf.shape(d), tf.constant(mode, tf.int64)),
                            table)
    f2, s2 = _log_factorial(upper, table)
    value = (f1 - f2) + df * prm.ln_mean
    scale = s1 + s2 + tf.abs(df) * abs(prm.ln_mean) + 1.0
    return value, scale

  if mode < 2 * _TABLE_SIZE:
    return direct(d, upper)
  phi_ok = upper >= _TABLE_SIZE
  mf = float(mode)
  x = tf.where(phi_ok, df / mf, tf.zeros_like(df))
  t1 = mf * _phi(x)
  l1 = _log1p(x)
  upper_f = tf.where(phi_ok, tf.cast(upper, tf.float64), tf.ones_like(df) * mf)
  betas = _beta(mf) - _beta(upper_f)
  de = df * prm.ln_ratio
  value = de - t1 - 0.5 * l1 + betas
  scale = t1 + tf.abs(l1) + tf.abs(de) + tf.abs(df * l1) + 1.0

  def patch():
    sub = tf.where(~phi_ok)
    v, s = direct(tf.gather_nd(d, sub), tf.gather_nd(upper, sub))
    return (tf.tensor_scatter_nd_update(value, sub, v),
            tf.tensor_scatter_nd_update(scale, sub, s))

  return tf.cond(tf.reduce_all(phi_ok), lambda: (value, scale), patch)


def _log_accept(d, g_eff, prm, table):
  """(ln a(D), err): |computed - exact ln a(D)| <= err, for M + D >= 0."""
  log_r, scale = _log_ratio(d, prm, table)
  gf = tf.cast(g_eff + _K_SHIFT, tf.float64)
  log_a = log_r + gf * _LN2 - prm.ln_k_num
  err = _ERR_FACTOR * (scale + gf * _LN2 + prm.ln_k_num + 1.0)
  return log_a, err


@_no_autograph
def _exact_accept(d, g_eff, w, prm, seed):
  """Exact test V < a(D) for one candidate.

  Step 4 of the algorithm in docs/notes/exact_samplers.md, section on
  poisson.py.
  """
  one = tf.constant(1, tf.int64)
  zero = tf.constant(0, tf.int64)
  big_p = tf.constant(prm.mean_num, tf.int64)
  grid = tf.constant(_GRID, tf.int64)
  mode = tf.constant(prm.mode, tf.int64)
  pos = d >= 0
  num = (tf.where(pos, one,
                  mode + 1), tf.where(pos, zero,
                                      -one), tf.where(pos, big_p, grid))
  den = (tf.where(pos, mode, one), tf.where(pos, one,
                                            zero), tf.where(pos, grid, big_p))
  return binomial.exact_ratio_accept(num, den, tf.abs(d), g_eff, w, prm.k_num,
                                     seed)


@_no_autograph
def _rejection(num, mean_num, seed, force_exact=False):
  """`num` exact Poisson(mean_num / 2^20) draws (1-D int64), by rejection."""
  prm = _params(mean_num)
  width = prm.width
  table = tf.constant(binomial._log_factorial_table())  # pylint: disable=protected-access  # binomial's sampler, shared

  def round_fn(proposal, idx):
    del idx  # every candidate has the same mean
    it_seed, v_prefix = proposal.it_seed, proposal.v_prefix
    g = binomial._ctz_sum(proposal.g_word)  # pylint: disable=protected-access  # binomial's sampler, shared
    t = width * g + proposal.u_word % width
    d = tf.where(proposal.right, t, -1 - t)
    inside = proposal.u_ok & (d >= -prm.mode)
    d = tf.where(inside, d, tf.zeros_like(d))
    g_eff = tf.where(inside, tf.minimum(g, _G_CAP - 1), tf.zeros_like(g))
    log_a, err = _log_accept(d, g_eff, prm, table)

    def exact(j, seed):
      return _exact_accept(d[j], g_eff[j], v_prefix[j], prm, seed)

    accept = binomial.accept_candidates(v_prefix, log_a, err, inside, it_seed,
                                        exact, force_exact)
    return accept, prm.mode + d

  # The initial index set must be data-dependent (`binomial.rejection_loop`):
  # all of [0, num), computed from random words Grappler cannot fold.
  marks = tf.random.stateless_uniform(
      [num],
      seed=tf.random.experimental.stateless_fold_in(seed, -1),
      dtype=tf.int64,
      minval=None,
      maxval=None)
  start = tf.where(tf.not_equal(tf.bitwise.bitwise_or(marks, 1), 0))[:, 0]
  return binomial.rejection_loop(num, start, seed, width, round_fn)


@_no_autograph
def sample_poisson(shape, mean, seed, *, _force_exact=False) -> tf.Tensor:
  """Exact Poisson(sampled_mean(mean)) draws of `shape`, as int64.

  Args:
    shape: the output shape (a list or 1-D int tensor).
    mean: the requested mean, a Python number in [2^-20, 2^40]; the law is
      Poisson of `sampled_mean(mean)` (>= mean, by < 2^-20 absolutely per
      chunk).
    seed: shape-[2] int32/int64 stateless seed (private to the client).
    _force_exact: testing hook; sends every candidate through the exact big
      integer test (same distribution, much slower).

  Returns:
    int64 tensor of `shape` with values >= 0.

  Raises:
    TypeError / ValueError: mean not a number or outside [2^-20, 2^40]; seed
      not an integer tensor of shape [2].
  """
  count, num_p = _chunks(_check_mean(mean))
  seed = tensors.stateless_seed(seed)
  shape = tf.cast(tf.reshape(shape, [-1]), tf.int64)
  size = tf.reduce_prod(shape)
  total = tf.zeros([size], tf.int64)
  for chunk in range(count):
    total += _rejection(size,
                        num_p,
                        tf.random.experimental.stateless_fold_in(seed, chunk),
                        force_exact=_force_exact)
  return tf.reshape(total, shape)


def sample_skellam(shape, mean, seed) -> tf.Tensor:
  """Symmetric Skellam draws Pois(mu) - Pois(mu), mu = sampled_mean(mean).

  Variance 2 mu (`sampled_mean`). The two Poisson draws use seeds split
  from `seed` (full 64-bit words, so they are independent).
  """
  seed = tensors.stateless_seed(seed)
  seeds = tf.random.experimental.stateless_split(seed, 2)
  return (sample_poisson(shape, mean, seeds[0]) -
          sample_poisson(shape, mean, seeds[1]))
