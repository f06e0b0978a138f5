"""RDP orders: the default grid and their validation (one home)."""

import functools

import numpy as np

from tff_ddp.utils import checks

# Orders used when the caller gives none: dense near 1 (steps of 1/20, then
# 1/4 up to 12), then sparse up to 1024. dp-accounting's default grid
# (steps of 1/10 up to 11, every integer to 63) is coarser below 2 and finer
# from 12 to 63, where it can give ~1% less epsilon (e.g. a DDG round at
# eps ~ 1, optimal order ~16); pass `orders=` to any accountant for another
# grid.
DEFAULT_ORDERS = tuple([1.0 + x / 20.0 for x in range(1, 20)] +
                       [2.0 + x / 4.0 for x in range(0, 40)] + [
                           12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 48.0, 64.0,
                           96.0, 128.0, 256.0, 512.0, 1024.0
                       ])
# Orders above this make exp((alpha - 1) eps) computations meaningless and
# the generic subsampling bounds cost O(alpha^2).
MAX_ORDER = 2.0**16


def check_orders(orders) -> np.ndarray:
  """RDP orders as a float64 array; each a finite number in (1, 2^16].

  The accountants validate the same grid on every call (a cPBM calibration
  checks DEFAULT_ORDERS ~10^5 times, most of its time when checked element
  by element), so a grid of Python floats (a tuple or list of `float`s, or
  a 1-d float64 array) that passed is remembered: the check depends only on
  those values. Anything else is checked element by element as before.
  """
  key = _float_key(orders)
  if key is not None:
    return np.array(_checked_floats(key))
  return _check(orders)


def _check(orders) -> np.ndarray:
  values = checks.real_sequence(orders,
                                'orders',
                                low=1.0,
                                high=MAX_ORDER,
                                low_open=True)
  return np.asarray(values, dtype=np.float64)


def _float_key(orders):
  """`orders` as a tuple of Python floats if it is exactly that kind of
  grid (so that validating the key validates `orders`), else None."""
  if isinstance(orders, np.ndarray):
    if orders.dtype == np.float64 and orders.ndim == 1:
      return tuple(orders.tolist())
    return None
  if type(orders) in (tuple, list) and all(
      type(x) is float  # pylint: disable=unidiomatic-typecheck  # exact types only: no subclasses
      for x in orders):
    return tuple(orders)
  return None


@functools.lru_cache(maxsize=64)
def _checked_floats(key) -> np.ndarray:
  checked = _check(key)
  checked.flags.writeable = False  # callers get copies
  return checked
