"""The accountant's epsilons agree on dp-accounting 0.4.3 and 0.6.0.

The core supports both (the TFF lane has 0.4.3, TFF 0.87's pin; the core
lane 0.6.0). `EPSILONS` holds the epsilons of a set of events, both
adversaries, two deltas, computed on the TFF lane's stack (dp-accounting
0.4.3) and written by

  .venv/bin/python -m tff_ddp_tests.accounting.cross_version_test --write

Each lane recomputes them and compares:

* events whose curves are tff_ddp's own (DDG, Skellam, cPBM, Gaussian
  without sampling, and their compositions) meet dp-accounting only in its
  public RDP-to-epsilon conversion: equal to a relative 1e-9 on any
  version (float64 round-off of numpy/scipy kernels, which differ between
  CPUs in the last bits, is ~1e-15 relative per operation);
* events on dp-accounting's tight sampled-Gaussian RDP (Poisson and
  self-sampled Gaussian against the release) differ by design: at
  fractional orders 0.6.0 sums the series of Mironov, Talwar & Zhang
  (arXiv:1908.10530, Sec. 3.3) with every term added, an upper bound of
  the signed sum that 0.4.3 computes (`SampledGaussianRdpTest` checks both
  against quadrature). So on 0.6.0 these epsilons are never below the
  reference and at most 0.1% above it; on 0.4.3 equal to 1e-9.
"""

import importlib.metadata
import json
import os
import sys

from absl.testing import parameterized
import dp_accounting
import mpmath
import numpy as np

from tff_ddp import accounting
from tff_ddp.accounting import dp_accounting_adapter
from tff_ddp.accounting import events

_REFERENCE = os.path.join(os.path.dirname(__file__),
                          'cross_version_epsilons.json')
_REFERENCE_VERSION = '0.4.3'
_SAME = 1e-9
_SAMPLED_GAUSSIAN_ABOVE = 1e-3

_DDG = events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=64.0,
                                                 local_stddev=20.0,
                                                 num_clients=100,
                                                 dimension=1024,
                                                 sampler_tv_distance=2.0**-100)
_SKELLAM = events.DistributedSkellamDpEvent(l2_sensitivity=40.0,
                                            local_variance=900.0,
                                            num_clients=50,
                                            dimension=100,
                                            l1_sensitivity=400.0)
_PBM = events.PoissonBinomialDpEvent(0.25, 16, 100, 1)
_GAUSS = dp_accounting.GaussianDpEvent(1.0)


def _self(event, count):
  return dp_accounting.SelfComposedDpEvent(event, count)


# name -> (event, whether it reaches dp-accounting's sampled Gaussian).
CASES = {
    'ddg_100_rounds': (_self(_DDG, 100), False),
    'skellam_10_rounds': (_self(_SKELLAM, 10), False),
    'cpbm_one_shot': (_PBM, False),
    'ddg_self_sampled': (_self(events.SelfSampledDpEvent(0.01, _DDG),
                               100), False),
    'ddg_poisson': (_self(dp_accounting.PoissonSampledDpEvent(0.05, _DDG),
                          50), False),
    'cpbm_without_replacement':
        (_self(dp_accounting.SampledWithoutReplacementDpEvent(1000, 100, _PBM),
               20), False),
    'gaussian_composed':
        (dp_accounting.ComposedDpEvent([_GAUSS, _self(_DDG, 3)]), False),
    'gaussian_poisson_emnist':
        (_self(dp_accounting.PoissonSampledDpEvent(100 / 3400, _GAUSS),
               1500), True),
    'gaussian_self_sampled': (_self(
        events.SelfSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(0.7)),
        300), True),
    'gaussian_without_replacement': (_self(
        dp_accounting.SampledWithoutReplacementDpEvent(3400, 100, _GAUSS),
        100), True),
}
DELTAS = (1e-5, 1e-9)


def epsilons():
  """{'case/adversary/delta': epsilon} on this stack."""
  out = {}
  for name, (event, _) in CASES.items():
    for adversary in accounting.ADVERSARIES:
      acc = accounting.RdpAccountant(adversary=adversary).compose(event)
      for delta in DELTAS:
        out[f'{name}/{adversary}/{delta:g}'] = acc.get_epsilon(delta)
  return out


class CrossVersionTest(parameterized.TestCase):

  def test_reference_was_made_on_the_reference_version(self):
    with open(_REFERENCE, encoding='utf-8') as f:
      reference = json.load(f)
    self.assertEqual(reference['dp_accounting'], _REFERENCE_VERSION)
    self.assertEqual(set(reference['epsilons']), set(epsilons()))

  def test_epsilons_agree_with_the_reference(self):
    with open(_REFERENCE, encoding='utf-8') as f:
      reference = json.load(f)['epsilons']
    version = importlib.metadata.version('dp-accounting')
    for key, ours in epsilons().items():
      theirs = reference[key]
      self.assertTrue(np.isfinite(theirs), key)
      sampled_gaussian = CASES[key.split('/')[0]][1]
      ratio = ours / theirs
      if sampled_gaussian and version != _REFERENCE_VERSION:
        self.assertBetween(ratio,
                           1 - _SAME,
                           1 + _SAMPLED_GAUSSIAN_ABOVE,
                           msg=key)
      else:
        self.assertBetween(ratio, 1 - _SAME, 1 + _SAME, msg=key)


def _exact_poisson_gaussian_rdp(q, sigma, order):
  """RDP of the Poisson-subsampled Gaussian at `order` by quadrature:
  D_order(q N(1, s^2) + (1-q) N(0, s^2) || N(0, s^2)), the larger direction
  (Mironov, Talwar & Zhang, arXiv:1908.10530, Thm. 4)."""
  mpmath.mp.dps = 30
  q, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(order)
  f = lambda z: mpmath.npdf(z, 0, s) * (1 - q + q * mpmath.exp((2 * z - 1) /
                                                               (2 * s**2)))**a
  value = mpmath.quad(f, [-mpmath.inf, -10 * s, 0, 1, 10 * s, mpmath.inf])
  return float(mpmath.log(value) / (a - 1))


class SampledGaussianRdpTest(parameterized.TestCase):
  """dp-accounting's sampled-Gaussian curve, as reached by the adapter, is
  an upper bound of the exact value on either version, up to the series'
  truncation (and exact to 1e-6 relative at integer orders)."""

  @parameterized.parameters((100 / 3400, 1.0), (0.01, 0.7), (0.2, 2.0))
  def test_at_least_the_exact_value(self, q, sigma):
    orders = [1.05, 1.5, 2.0, 2.75, 4.0, 8.0]
    curve = dp_accounting_adapter.poisson_sampled_gaussian_rdp(q, sigma, orders)
    for order, value in zip(orders, curve):
      exact = _exact_poisson_gaussian_rdp(q, sigma, order)
      # Both versions stop the series at terms below e^-30 ~ 1e-13 of the
      # moment A (a geometric tail): the curve log(A) / (order - 1) may sit
      # below the exact value by at most ~1e-12 / (order - 1).
      self.assertGreaterEqual(value, exact - 1e-12 / (order - 1),
                              (q, sigma, order))
      if float(order).is_integer():
        self.assertAlmostEqual(value / exact, 1.0, delta=1e-6)


def _write():
  reference = {
      'dp_accounting': importlib.metadata.version('dp-accounting'),
      'numpy': np.__version__,
      'epsilons': epsilons(),
  }
  if reference['dp_accounting'] != _REFERENCE_VERSION:
    sys.exit(f'write the reference with dp-accounting {_REFERENCE_VERSION}')
  with open(_REFERENCE, 'w', encoding='utf-8') as f:
    json.dump(reference, f, indent=1, sort_keys=True)
    f.write('\n')


if __name__ == '__main__' and '--write' in sys.argv:
  _write()
  sys.exit(0)
