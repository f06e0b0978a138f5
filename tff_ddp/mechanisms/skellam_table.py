"""Fast symmetric Skellam sampling with an exactly built alias table.

`sample_skellam_table(shape, mean, seed)` draws iid int64 samples within a
proved total-variation distance (< 2^-231) of Pois(mu) - Pois(mu),
mu = `poisson.sampled_mean(mean)`, for means up to `max_supported_mean()`:
the noise of the distributed Skellam mechanism (Agarwal, Kairouz & Liu, "The
Skellam Mechanism for Differentially Private Federated Learning", NeurIPS
2021, arXiv 2110.04995) at one random word and one gather a sample. The
brackets come from one exact big-integer convolution; the table is
`alias_table`'s.

Truncation, brackets, the gap bound, cap and cost:
docs/notes/certified_tables.md.
"""

import decimal
import fractions
import functools
import math

import tensorflow as tf

from tff_ddp.mechanisms import alias_table as core
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import poisson
from tff_ddp.utils import tensors

_GRID_BITS = poisson.MEAN_GRID_BITS
_FIX_BITS = 288
# The bracket walk stops once r(j) < 2^-_STOP_BITS.
_STOP_BITS = 260
TV_DISTANCE_UPPER_BOUND = core.TV_DISTANCE_UPPER_BOUND
_TAIL_LIMIT = fractions.Fraction(1, 2**core.TAIL_BITS)


def exact_mean(mean) -> fractions.Fraction:
  """mu, the mean `poisson.sampled_mean(mean)` stands for, as a Fraction."""
  count, num = poisson._chunks(poisson._check_mean(mean))  # pylint: disable=protected-access  # poisson's chunking, shared
  return fractions.Fraction(count * num, 1 << _GRID_BITS)


# ----------------------------------------------------------------------------
# Step 1: the truncation point.


def _asinh(x: fractions.Fraction) -> fractions.Fraction:
  """asinh(x) to ~40 digits, as an exact rational (any s > 0 is valid)."""
  with decimal.localcontext() as ctx:
    ctx.prec = 40
    d = decimal.Decimal(x.numerator) / decimal.Decimal(x.denominator)
    return fractions.Fraction((d + (d * d + 1).sqrt()).ln())


def _tail(mu: fractions.Fraction, m: int) -> fractions.Fraction:
  """A rational >= P(|X| >= m) for the symmetric Skellam of mean mu each."""
  s = _asinh(fractions.Fraction(m) / (2 * mu))
  if s <= 0:
    return fractions.Fraction(2)
  e_neg_lo, e_neg_hi = core.exp_neg_bounds(s)
  exponent = s * m - mu * (1 / e_neg_lo + e_neg_hi - 2)
  if exponent <= 0:
    return fractions.Fraction(2)
  return 2 * core.exp_neg_bounds(min(exponent, fractions.Fraction(1000)))[1]


@functools.lru_cache(maxsize=64)
def _truncation(mu: fractions.Fraction):
  """(m, tail): the least m (search of step 1) with tail(m) < 2^-232."""
  # The bound decreases in m: the last m - 1 that fails, plus one.
  m = base.largest_count(lambda m: _tail(mu, m) >= _TAIL_LIMIT,
                         limit=1 << 40) + 1
  return m, _tail(mu, m)


def fits(mean) -> bool:
  """Whether the table for `mean` has at most 2^20 columns."""
  m, _ = _truncation(exact_mean(mean))
  return 2 * (m - 1) + 1 <= core.MAX_COLUMNS


@functools.lru_cache(maxsize=1)
def max_supported_mean() -> float:
  """The largest mean on the 2^-20 grid whose table fits (about 4.25e8)."""
  grid = 1 << _GRID_BITS
  units = base.largest_count(lambda p: fits(p / grid),
                             limit=(1 << 30) * grid)  # 2^30 does not fit
  return units / grid


# ----------------------------------------------------------------------------
# Steps 2-4: brackets, window tail, convolution.


def _poisson_brackets(mu: fractions.Fraction, t: int):
  """(L, lo list, hi list) over the window [L, H] of step 2."""
  big_p = mu.numerator << (_GRID_BITS - (mu.denominator.bit_length() - 1))
  core.check(fractions.Fraction(big_p, 1 << _GRID_BITS) == mu, 'mu = P/2^20')
  mode = big_p >> _GRID_BITS
  one = 1 << _FIX_BITS
  stop = 1 << (_FIX_BITS - _STOP_BITS)
  up_lo, up_hi = [one], [one]
  j = mode
  while up_hi[-1] >= stop:
    den = (j + 1) << _GRID_BITS
    up_lo.append(up_lo[-1] * big_p // den)
    up_hi.append(-(-up_hi[-1] * big_p // den))
    j += 1
  down_lo, down_hi = [], []
  lo_j, hi_j, j = one, one, mode
  while j > 0 and hi_j >= stop:
    lo_j = (lo_j * j << _GRID_BITS) // big_p
    hi_j = -(-(hi_j * j << _GRID_BITS) // big_p)
    down_lo.append(lo_j)
    down_hi.append(hi_j)
    j -= 1
  low_end = mode - len(down_lo)
  lo = down_lo[::-1] + up_lo
  hi = down_hi[::-1] + up_hi
  j = low_end + len(lo) - 1
  while len(lo) - 1 < t:  # lags up to t (tiny mu): extend upwards
    den = (j + 1) << _GRID_BITS
    lo.append(lo[-1] * big_p // den)
    hi.append(-(-hi[-1] * big_p // den))
    j += 1
  return low_end, lo, hi


def _window_tail(mu: fractions.Fraction, low_end: int,
                 hi) -> fractions.Fraction:
  """R of step 3 (a rational >= the mass of r outside the window)."""
  top = low_end + len(hi) - 1
  rho_u = mu / (top + 1)
  core.check(rho_u < 1, 'mu < H + 1')
  tail = fractions.Fraction(hi[-1], 1 << _FIX_BITS) * rho_u / (1 - rho_u)
  if low_end > 0:
    rho_d = low_end / mu
    core.check(rho_d < 1, 'L < mu')
    tail += fractions.Fraction(hi[0], 1 << _FIX_BITS) * rho_d / (1 - rho_d)
  return tail


def _autocorrelation(lo, t: int):
  """[a(0), ..., a(t)], a(k) = sum_i lo[i] lo[i + k] (step 4, exact)."""
  n = len(lo)
  slot = len(str(n << (2 * _FIX_BITS))) + 1
  forward = ''.join(str(v).zfill(slot) for v in lo)  # B: lo[0] on top
  backward = ''.join(str(v).zfill(slot) for v in reversed(lo))  # A
  digits = slot * (2 * n)
  ctx = decimal.Context(
      prec=digits + 1,
      Emax=decimal.MAX_EMAX,
      Emin=decimal.MIN_EMIN,
      traps=[decimal.Inexact, decimal.Rounded, decimal.InvalidOperation])
  product = ctx.multiply(decimal.Decimal(backward), decimal.Decimal(forward))
  text = format(product, 'f').zfill((2 * n - 1) * slot)
  core.check(len(text) == (2 * n - 1) * slot, 'no carry out of the top slot')
  # Slot p (from the least significant, p = 0) holds sum_{i+l=p} A_i B_l;
  # a(k) sits at p = n - 1 - k.
  out = []
  for k in range(t + 1):
    p = n - 1 - k
    end = len(text) - p * slot
    out.append(int(text[end - slot:end]) if k < n else 0)
  return out


def _build(mu: fractions.Fraction) -> core.AliasTable:
  m, tail = _truncation(mu)
  t = m - 1
  core.check(2 * t + 1 <= core.MAX_COLUMNS, 'the table fits')
  low_end, lo, hi = _poisson_brackets(mu, t)
  corr = _autocorrelation(lo, t)
  one = 1 << _FIX_BITS
  big_r = _window_tail(mu, low_end, hi)
  sum_hi, sum_lo = sum(hi), sum(lo)
  gap = math.ceil(sum_hi * sum_hi - sum_lo * sum_lo + one * one * 2 * big_r *
                  (fractions.Fraction(sum_hi, one) + big_r))
  return core.build(mu, corr[:0:-1] + corr, gap, tail)


@functools.lru_cache(maxsize=16)
def _cached_table(mu: fractions.Fraction) -> core.AliasTable:
  return _build(mu)


def _validate_mean(mean) -> fractions.Fraction:
  mu = exact_mean(mean)
  if not fits(mean):
    raise ValueError(
        f'mean must be in [2^-20, {max_supported_mean()}] '
        f'(max_supported_mean()), got {mean!r}: the alias table would need '
        f'more than {core.MAX_COLUMNS} = 2^{core.LOG2_MAX_COLUMNS} columns '
        '(the cap). Use poisson.sample_skellam (exact, means up to 2^40) '
        'instead.')
  return mu


def alias_table(mean) -> core.AliasTable:
  """The (cached) alias table of the Skellam law for `mean`."""
  return _cached_table(_validate_mean(mean))


def tv_distance_bound(mean) -> float:
  """Proved upper bound on TV(output law, Skellam(mu)) per sample, < 2^-231.

  mu = `poisson.sampled_mean(mean)`; (Q + rho) / 2 + tail of the built
  table, rounded up to a float (the proof: docs/notes/certified_tables.md,
  section on skellam_table.py).
  """
  return core.round_up_float(alias_table(mean).tv_bound)


@tf.autograph.experimental.do_not_convert
def sample_skellam_table(shape, mean, seed) -> tf.Tensor:
  """Symmetric Skellam draws, up to a proved TV distance, as int64.

  The law is within `tv_distance_bound(mean)` (< 2^-231) of Pois(mu) -
  Pois(mu), mu = `poisson.sampled_mean(mean)` (variance 2 mu), i.e. of the
  law of `poisson.sample_skellam(shape, mean, seed)`.

  Args:
    shape: the output shape (a list, `TensorShape` or 1-D int tensor).
    mean: the requested Poisson mean, a Python number in
      [2^-20, max_supported_mean()] (~4.2e8).
    seed: shape-[2] int32/int64 stateless seed (private to the client).

  Returns:
    int64 tensor of `shape`.

  Raises:
    TypeError / ValueError: mean not a number, outside the range, or a bad
      shape or seed.
  """
  table = alias_table(mean)
  out_shape, n = tensors.output_shape(shape)
  seed = tensors.stateless_seed(seed)
  return tf.reshape(core.sample(n, table, seed), out_shape)
