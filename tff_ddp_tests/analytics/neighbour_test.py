"""The analytics processes' neighbouring relations against brute force.

Each process states one relation in user terms -- one user's data removed:
the user still takes part in the secure sums and holds no data -- and
accounts every release on the zero-out curve of its aggregator's event. That
is right only if "no data" sends the zero message of every release. Here we
enumerate, on small inputs, each message a user can send, pair it with the
message the process's own encoding gives for no data, compute the exact
Renyi divergence (cPBM) or the distance (sensitivity-calibrated DDG), and
assert the accounted curve is never below. The paper's encodings (no data
sends -1 / lands in bin 0) are the negative cases: the same brute force
puts them above the zero-out curve, so these tests can fail.
"""

import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_ddp.accounting import pbm_rdp
from tff_ddp.aggregators import poisson_binomial
from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import multi_round
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import process as quantiles
from tff_ddp.encoders import registry
from tff_ddp_tests import neighbours

ORDERS = neighbours.ORDERS


def _indicator_mechanism(theta, m, n):
  # frequency_parameters' indicator: one coordinate, C = 1, divisor linf.
  factory = poisson_binomial.PoissonBinomialSumFactory(
      l2_clip=1.0,
      theta=theta,
      num_trials=m,
      expected_clients_per_round=n,
      encoder='none',
      divisor='linf',
      linf_clip=1.0)
  return factory.mechanism(multi_round._indicator_type())  # pylint: disable=protected-access  # tests a private part


def _haar_mechanism(theta, m, n, b):
  # quantile_parameters' cPBM: l2 = sqrt(l0), linf 1, l0 clip.
  _, l2, l0 = hg.encoding('haar', b).sensitivities()
  factory = poisson_binomial.PoissonBinomialSumFactory(
      l2_clip=l2,
      theta=theta,
      num_trials=m,
      expected_clients_per_round=n,
      encoder='none',
      divisor='linf',
      linf_clip=1.0,
      l0_clip=l0)
  import tensorflow_federated as tff
  return factory.mechanism(tff.TensorType(np.int32, [b]))


def _no_data_norm():
  """||y|| of a user with no items, through the process's Kashin encoder."""
  encoder = registry.make_encoder('kashin', 6)
  y = encoder.encode(tf.zeros([6], tf.float64), tf.constant([3, 4], tf.int64))
  return float(tf.norm(y))


def _bin_values(upper, b):
  """A value in every bin, the edges 0 and upper, and values beyond the
  range (+-inf included: they are values, clipped into the end bins)."""
  width = upper / b
  return ([0.0, upper, -1e30, 2 * upper, -math.inf, math.inf] +
          [(j + 0.5) * width for j in range(b)])


def _encodings(method, values, upper, b):
  return [
      quantiles.encode_value(method, tf.constant(v, tf.float32), 0.0, upper,
                             b).numpy() for v in values
  ]


class MffeIndicatorTest(parameterized.TestCase):

  def test_no_data_sends_zero(self):
    norm = _no_data_norm()
    self.assertEqual(norm, 0.0)
    self.assertEqual(float(fp.indicator_message(norm, 1.5)), 0.0)
    np.testing.assert_array_equal(multi_round.indicator_messages([norm], 1.5),
                                  [0.0])

  @parameterized.product(n=[1, 2, 3], m=[1, 2, 3], theta=[0.05, 0.25])
  def test_zero_out_curve_covers_every_pair(self, n, m, theta):
    mechanism = _indicator_mechanism(theta, m, n)
    clip = 1.5
    norms = [0.0, 1e-3, 0.7, clip, 2.0, 1e6]
    messages = [[float(fp.indicator_message(v, clip))] for v in norms]
    neighbour = [float(fp.indicator_message(_no_data_norm(), clip))]
    brute = neighbours.worst_cpbm_rdp(mechanism, messages, neighbour, n)
    self.assertTrue(np.all(brute > 0))  # the pairs are not trivial
    curve = pbm_rdp.rdp(mechanism.dp_event(n), ORDERS, 'zero_out')
    neighbours.assert_covers(curve, brute, f'indicator n={n} m={m}')

  @parameterized.product(n=[1, 3], m=[1, 3])
  def test_paper_encoding_exceeds_zero_out(self, n, m):
    # The paper's +-1: no data (norm 0 <= C) sends -1; against a user above
    # C that is a replace-one pair, 2.2-4x the zero-out curve here (4x
    # for n = 1, less when the other clients' extremes dilute it) -- a
    # relation mismatch. Replace-one covers it.
    theta = 0.05
    mechanism = _indicator_mechanism(theta, m, n)
    clip = 1.5
    paper = multi_round.indicator_messages([0.0, 2.0], clip, 'paper')
    self.assertEqual(paper.tolist(), [-1.0, 1.0])
    brute = neighbours.worst_cpbm_rdp(mechanism, [[paper[1]]], [paper[0]], n)
    event = mechanism.dp_event(n)
    zero_out = pbm_rdp.rdp(event, ORDERS, 'zero_out')
    self.assertTrue(neighbours.exceeds(zero_out, brute, 2.0),
                    (brute / zero_out))
    neighbours.assert_covers(pbm_rdp.rdp(event, ORDERS, 'replace_one'), brute,
                             'paper indicator, replace-one')


class HaarPhaseOneTest(parameterized.TestCase):
  """TFFE's phase 1 (and the quantile process with cPBM)."""

  def test_no_data_sends_zero(self):
    norm = fp.norm_message(_no_data_norm())
    self.assertTrue(math.isnan(float(norm)))
    for method in ('flat', 'tree', 'haar'):
      np.testing.assert_array_equal(
          _encodings(method, [float(norm)], 10.0, 4)[0], 0)

  @parameterized.product(n=[1, 2], m=[1, 2], b=[2, 4], theta=[0.05, 0.25])
  def test_zero_out_curve_covers_every_pair(self, n, m, b, theta):
    upper = 10.0
    mechanism = _haar_mechanism(theta, m, n, b)
    messages = _encodings('haar', _bin_values(upper, b), upper, b)
    neighbour = _encodings('haar', [float(fp.norm_message(0.0))], upper, b)[0]
    brute = neighbours.worst_cpbm_rdp(mechanism, messages, neighbour, n)
    curve = pbm_rdp.rdp(mechanism.dp_event(n), ORDERS, 'zero_out')
    neighbours.assert_covers(curve, brute, f'Haar n={n} m={m} b={b}')

  @parameterized.parameters(1, 2)
  def test_paper_encoding_exceeds_zero_out(self, m):
    # The old phase 1: a norm of 0 fell in bin 0, (1, +1, ..., +1); against
    # the top bin (b = 4) the level-1 coefficient flips (+1 -> -1, 4x a
    # zero-out shift) and each leaf-level coefficient moves by one: (4 + 1 +
    # 1) / 3 = 2x the zero-out curve of its l0 = 3 coordinates (Gaussian
    # regime; 1.4-2x at these orders).
    b, n, theta, upper = 4, 1, 0.05, 10.0
    mechanism = _haar_mechanism(theta, m, n, b)
    bin0, top = _encodings('haar', [0.0, upper], upper, b)
    brute = neighbours.worst_cpbm_rdp(mechanism, [top], bin0, n)
    event = mechanism.dp_event(n)
    zero_out = pbm_rdp.rdp(event, ORDERS, 'zero_out')
    self.assertTrue(neighbours.exceeds(zero_out, brute, 1.9),
                    (brute / zero_out))
    neighbours.assert_covers(pbm_rdp.rdp(event, ORDERS, 'replace_one'), brute,
                             'old phase 1, replace-one')


class QuantileProcessTest(parameterized.TestCase):
  """The quantile process: no value (NaN) sends zeros, every encoding."""

  @parameterized.product(method=['flat', 'tree', 'haar'], b=[2, 4, 8])
  def test_distances_within_sensitivity(self, method, b):
    # The DDG is calibrated to hg.sensitivities' l2 (and l1): the distance
    # of every pair (bin encoding, no value) must be within it.
    upper = 1.0
    messages = _encodings(method, _bin_values(upper, b), upper, b)
    neighbour = _encodings(method, [float('nan')], upper, b)[0]
    np.testing.assert_array_equal(neighbour, 0)
    l1, l2 = neighbours.max_distances(messages, neighbour)
    want_l1, want_l2, _ = hg.encoding(method, b).sensitivities()
    self.assertLessEqual(l2, want_l2 * (1 + 1e-12))
    self.assertLessEqual(l1, want_l1 * (1 + 1e-12))
    self.assertAlmostEqual(l2, want_l2)  # attained: not vacuous

  @parameterized.parameters('tree', 'haar')
  def test_value_zero_is_not_no_value(self, method):
    # A value 0.0 is bin 0; its pair with the top bin is replace-one:
    # Delta_2^2 doubles for the tree (and the Haar path differs by 2).
    b, upper = 4, 1.0
    bin0, top = _encodings(method, [0.0, upper], upper, b)
    _, l2 = neighbours.max_distances([top], bin0)
    self.assertGreater(l2, hg.encoding(method, b).sensitivities()[1] * 1.4)

  @parameterized.product(n=[1, 2], m=[1, 2], b=[2, 4])
  def test_cpbm_curve_covers_every_pair(self, n, m, b):
    theta, upper = 0.2, 1.0
    mechanism = _haar_mechanism(theta, m, n, b)
    messages = _encodings('haar', _bin_values(upper, b), upper, b)
    neighbour = _encodings('haar', [float('nan')], upper, b)[0]
    brute = neighbours.worst_cpbm_rdp(mechanism, messages, neighbour, n)
    curve = pbm_rdp.rdp(mechanism.dp_event(n), ORDERS, 'zero_out')
    neighbours.assert_covers(curve, brute, f'quantile Haar b={b}')
