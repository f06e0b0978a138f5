"""RDP orders: the default grid and their validation (one home)."""

import numpy as np

from tff_ddp.utils import checks

# Orders used when the caller gives none: dense near 1, then geometric up to
# 1024 (dp-accounting's default grid stops at 256 and is coarser near 1).
DEFAULT_ORDERS = tuple(
    [1.0 + x / 20.0 for x in range(1, 20)]
    + [2.0 + x / 4.0 for x in range(0, 40)]
    + [12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 48.0, 64.0, 96.0, 128.0,
       256.0, 512.0, 1024.0])
# Orders above this make exp((alpha - 1) eps) computations meaningless and
# the generic subsampling bounds cost O(alpha^2).
MAX_ORDER = 2.0**16


def check_orders(orders) -> np.ndarray:
  """RDP orders as a float64 array; each a finite number in (1, 2^16]."""
  values = checks.real_sequence(orders, 'orders', low=1.0, high=MAX_ORDER,
                                low_open=True)
  return np.asarray(values, dtype=np.float64)
