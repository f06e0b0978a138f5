"""The one place tff_ddp touches dp-accounting internals, with a version check.

dp-accounting 0.4.3 computes the tight RDP of the Poisson-subsampled Gaussian
(Mironov, Talwar & Zhang 2019) and of the Gaussian sampled without
replacement (Wang, Balle & Kasiviswanathan 2019) in private functions of
`dp_accounting.rdp.rdp_privacy_accountant`; tff_ddp's accountant keeps
Gaussian events on those tight paths. Their names and signatures are not
part of dp-accounting's API, so they are reached only through this module,
which refuses a dp-accounting version it was not checked against.
"""

import importlib.metadata
from typing import Sequence

import numpy as np

# dp-accounting versions whose private functions below were read and tested.
SUPPORTED_VERSIONS = ('0.4.3', '0.6.0')


def _module():
  version = importlib.metadata.version('dp-accounting')
  if version not in SUPPORTED_VERSIONS:
    raise RuntimeError(
        f'tff_ddp reaches into dp-accounting internals checked for versions '
        f'{SUPPORTED_VERSIONS}, found {version}; install dp-accounting=='
        f'{SUPPORTED_VERSIONS[-1]} (requirements/lock.txt) or update '
        'tff_ddp/accounting/dp_accounting_adapter.py.')
  from dp_accounting.rdp import rdp_privacy_accountant
  return rdp_privacy_accountant


def _nonnegative(curve) -> np.ndarray:
  """A Renyi divergence is >= 0; dp-accounting's log-space sums return
  values like -3e-30 for tiny rates (q = 2^-50), which would make the
  conversion refuse the curve. Round-off, clipped to 0."""
  return np.maximum(np.asarray(curve, np.float64), 0.0)


def poisson_sampled_gaussian_rdp(q: float, noise_multiplier: float,
                                 orders: Sequence[float]) -> np.ndarray:
  """Tight RDP of the Poisson-subsampled Gaussian (add/remove neighbours)."""
  return _nonnegative(_module()._compute_rdp_poisson_subsampled_gaussian(  # pylint: disable=protected-access  # dp_accounting has no public per-order form
      q=q,
      noise_multiplier=noise_multiplier,
      orders=orders))


def without_replacement_gaussian_rdp(q: float, noise_multiplier: float,
                                     orders: Sequence[float]) -> np.ndarray:
  """RDP of the Gaussian sampled without replacement (WBK19 Theorem 27):
  replace-one neighbours, `noise_multiplier` = noise stddev over their
  distance (for `GaussianDpEvent(z)`, whose replace-one neighbours differ
  by twice the per-record bound: z / 2)."""
  return _nonnegative(_module()._compute_rdp_sample_wor_gaussian(  # pylint: disable=protected-access  # dp_accounting has no public per-order form
      q=q,
      noise_multiplier=noise_multiplier,
      orders=orders))
