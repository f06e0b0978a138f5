"""The distributed Skellam's RDP curve against exact Renyi divergences."""

import itertools
import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
from scipy import special

from tff_ddp import accounting
from tff_ddp.accounting import event_io
from tff_ddp.accounting import events
from tff_ddp.accounting import skellam_rdp

_ORDERS = np.array([1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0])


def _exact_1d(variance, shift, orders):
  """D_alpha(Sk_V || Sk_V + shift), exactly from the PMF (per order).

  Sk_V = Pois(V/2) - Pois(V/2): P(k) = exp(-V) I_|k|(V) = ive(|k|, V). The
  window reaches ~60 standard deviations and 30 alpha beyond the shift, where
  the terms are below e^-700 of the largest (checked: widening it changes
  nothing at double precision)."""
  width = int(60 * math.sqrt(variance) + 60 + 2 * abs(shift) + 30 * max(orders))
  k = np.arange(-width, width + 1)
  with np.errstate(divide='ignore'):
    log_p = np.log(special.ive(np.abs(k), variance))
    log_q = np.log(special.ive(np.abs(k - shift), variance))
  keep = np.isfinite(log_p) & np.isfinite(log_q)
  out = []
  for a in orders:
    out.append(
        special.logsumexp(a * log_p[keep] + (1 - a) * log_q[keep]) / (a - 1))
  return np.array(out)


def _event(l2, l1, variance, n=1, d=1):
  return events.DistributedSkellamDpEvent(l2_sensitivity=l2,
                                          local_variance=variance / n,
                                          num_clients=n,
                                          dimension=d,
                                          l1_sensitivity=l1)


class BruteForceTest(parameterized.TestCase):

  def test_one_dimension_never_below_the_truth(self):
    closest = 0.0
    for variance in (1.0, 2.0, 4.0, 10.0, 40.0, 100.0, 400.0):
      for shift in (1, 2, 3, 5, 10):
        truth = _exact_1d(variance, shift, _ORDERS)
        bound = skellam_rdp.rdp(_event(shift, shift, variance), _ORDERS)
        self.assertTrue(np.all(truth <= bound * (1 + 1e-12)),
                        msg=f'V={variance} shift={shift}: {truth} > {bound}')
        closest = max(closest, float(np.max(truth / bound)))
    # The bound is tight (small shifts, small orders): within 0.3%.
    self.assertGreater(closest, 0.99)

  def test_vectors_never_below_the_truth(self):
    # Integer vectors in 2 and 3 dimensions with ||v||_2 <= 3, among them
    # the axis (1-sparse) and the diagonal, the extremes of l1 vs l2; the
    # coordinates' noises are independent, so the exact divergence is the
    # sum of the 1-D ones. The bound with the vector's own (l2, l1).
    variance = 3.0
    cache = {}
    for d in (2, 3):
      for v in itertools.product(range(-3, 4), repeat=d):
        if not any(v) or sum(x * x for x in v) > 9:
          continue
        truth = sum(
            cache.setdefault(abs(x), _exact_1d(variance, abs(x), _ORDERS))
            for x in v)
        l2 = math.sqrt(sum(x * x for x in v))
        l1 = float(sum(abs(x) for x in v))
        bound = skellam_rdp.rdp(_event(l2, l1, variance, d=d), _ORDERS)
        self.assertTrue(np.all(truth <= bound * (1 + 1e-12)),
                        msg=f'v={v}: {truth} > {bound}')

  def test_replace_one_doubles_the_sensitivities(self):
    # Two clients' rounded vectors u, w with |u|, |w| <= 2 in one
    # coordinate: the released sums differ by u - w, up to 4. The
    # replace-one curve of sensitivity 2 covers every pair; zero-out
    # does not cover (2, -2).
    variance = 5.0
    event = _event(2.0, 2.0, variance)
    replace = skellam_rdp.rdp(event, _ORDERS, 'replace_one')
    for u, w in itertools.product(range(-2, 3), repeat=2):
      if u != w:
        truth = _exact_1d(variance, u - w, _ORDERS)
        self.assertTrue(np.all(truth <= replace * (1 + 1e-12)), msg=(u, w))
    zero_out = skellam_rdp.rdp(event, _ORDERS, 'zero_out')
    self.assertTrue(np.any(_exact_1d(variance, 4, _ORDERS) > zero_out))

  def test_clients_share_the_variance(self):
    # n clients of variance V/n release the same sum as one of variance V.
    one = skellam_rdp.rdp(_event(3.0, 5.0, 50.0), _ORDERS)
    many = skellam_rdp.rdp(_event(3.0, 5.0, 50.0, n=25), _ORDERS)
    np.testing.assert_allclose(one, many, rtol=1e-14)


class EventTest(parameterized.TestCase):

  def test_default_l1_is_the_integer_bound(self):
    event = events.DistributedSkellamDpEvent(l2_sensitivity=3.0,
                                             local_variance=10.0,
                                             num_clients=4,
                                             dimension=100)
    self.assertEqual(skellam_rdp.l1_sensitivity(event), 9.0)  # min(30, 9)
    wide = events.DistributedSkellamDpEvent(l2_sensitivity=30.0,
                                            local_variance=10.0,
                                            num_clients=4,
                                            dimension=4)
    self.assertEqual(skellam_rdp.l1_sensitivity(wide), 60.0)  # min(60, 900)
    explicit = event_io.explicit(event)
    self.assertEqual(explicit.l1_sensitivity, 9.0)
    np.testing.assert_array_equal(skellam_rdp.rdp(event, _ORDERS),
                                  skellam_rdp.rdp(explicit, _ORDERS))

  @parameterized.named_parameters(
      ('variance_zero', dict(local_variance=0.0), 'local_variance'),
      ('variance_nan', dict(local_variance=math.nan), 'local_variance'),
      ('l2_negative', dict(l2_sensitivity=-1.0), 'l2_sensitivity'),
      ('clients', dict(num_clients=0), 'num_clients'),
      ('dimension', dict(dimension=0), 'dimension'),
      ('l1', dict(l1_sensitivity=-2.0), 'l1_sensitivity'))
  def test_bad_fields(self, change, name):
    fields = dict(l2_sensitivity=1.0,
                  local_variance=1.0,
                  num_clients=2,
                  dimension=3)
    fields.update(change)
    with self.assertRaisesRegex((TypeError, ValueError), name):
      skellam_rdp.rdp(events.DistributedSkellamDpEvent(**fields), _ORDERS)

  def test_accountant(self):
    # The accountant composes it and names the relation: replace-one costs
    # more; more noise costs less; 10 rounds cost more than one.
    event = events.DistributedSkellamDpEvent(l2_sensitivity=100.0,
                                             local_variance=100.0**2,
                                             num_clients=100,
                                             dimension=1024)
    eps, _ = accounting.epsilon(event, 1e-5)
    self.assertTrue(0 < eps < math.inf)
    replace = accounting.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    replace.compose(event)
    self.assertGreater(replace.get_epsilon(1e-5), eps)
    noisier = events.DistributedSkellamDpEvent(l2_sensitivity=100.0,
                                               local_variance=2 * 100.0**2,
                                               num_clients=100,
                                               dimension=1024)
    self.assertLess(accounting.epsilon(noisier, 1e-5)[0], eps)
    self.assertGreater(
        accounting.epsilon(dp_accounting.SelfComposedDpEvent(event, 10),
                           1e-5)[0], eps)
    # At this noise (central stddev 10x the sensitivity) it is within 1% of
    # the Gaussian of the same variance: the excess term is tiny.
    # (RDP both: the Skellam's d-dimensional release is accounted by RDP.)
    gauss = accounting.RdpAccountant().compose(
        dp_accounting.GaussianDpEvent(10.0)).get_epsilon(1e-5)
    self.assertAlmostEqual(eps / gauss, 1.0, delta=0.01)
