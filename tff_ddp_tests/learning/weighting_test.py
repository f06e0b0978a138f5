"""The client weightings' math: Algorithm 3 (with the fractional boundary
weight) and Algorithm 1 against independent references, q-FFL, and the
private tail read from a noisy CDF."""

import math

from absl.testing import parameterized
import numpy as np
from scipy import optimize
import tensorflow as tf

from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.learning import weighting


def _lp_superquantile(losses, theta):
  """max_pi sum pi_i F_i over {sum pi = 1, 0 <= pi_i <= 1/(theta n)} by
  scipy's LP solver: the dual representation (eq. 7) directly."""
  n = len(losses)
  result = optimize.linprog(-np.asarray(losses),
                            A_eq=np.ones((1, n)),
                            b_eq=[1.0],
                            bounds=[(0.0, 1.0 / (theta * n))] * n,
                            method='highs')
  assert result.success
  return -result.fun


def _closed_form(losses, theta):
  """Proposition 3 for distinct losses, derived from the LP's greedy
  solution: the floor(theta n) largest get 1/(theta n), the next one
  1 - floor(theta n)/(theta n)."""
  n = len(losses)
  order = np.argsort(-np.asarray(losses))
  k = math.floor(theta * n + 1e-12)
  pi = np.zeros(n)
  pi[order[:k]] = 1.0 / (theta * n)
  if k < n:
    pi[order[k]] = 1.0 - k / (theta * n)
  return pi


class SuperquantileWeightsTest(parameterized.TestCase):

  @parameterized.product(n=(1, 7, 10, 100),
                         theta=(0.05, 0.25, 0.3, 0.5, 0.8, 1.0))
  def test_numpy_reference_is_lp_optimum_and_closed_form(self, n, theta):
    losses = np.random.default_rng(n).exponential(size=n)
    pi = weighting.superquantile_weights(losses, theta)
    # Feasible: a probability vector within the cap.
    self.assertAlmostEqual(pi.sum(), 1.0, places=12)
    self.assertTrue(np.all(pi >= 0))
    self.assertTrue(np.all(pi <= 1.0 / (theta * n) + 1e-12))
    # Optimal: the LP's value (the superquantile, eq. 7).
    self.assertAlmostEqual(pi @ losses,
                           _lp_superquantile(losses, theta),
                           places=7)
    # Distinct losses: the closed form, including the fractional weight.
    np.testing.assert_allclose(pi, _closed_form(losses, theta), atol=1e-12)

  def test_fractional_boundary_weight_by_hand(self):
    # n = 10, theta = 0.25: theta n = 2.5, the two largest get 1/2.5 = 0.4,
    # the third 1 - 2/2.5 = 0.2, the rest 0.
    losses = np.array([0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.0])
    pi = weighting.superquantile_weights(losses, 0.25)
    expected = np.zeros(10)
    expected[[1, 6]] = 0.4
    expected[4] = 0.2
    np.testing.assert_allclose(pi, expected, atol=1e-15)
    self.assertAlmostEqual(weighting.superquantile(losses, 0.25),
                           0.4 * 0.9 + 0.4 * 0.8 + 0.2 * 0.7)

  def test_ties_split_equally(self):
    # theta n = 1.5: cap 2/3; the 1.5 units of mass meet a tie of three at
    # the boundary: 1/3 left, split in three.
    losses = np.array([5.0, 2.0, 2.0, 2.0, 1.0])
    pi = weighting.superquantile_weights(losses, 0.3)
    np.testing.assert_allclose(pi, [2 / 3, 1 / 9, 1 / 9, 1 / 9, 0.0])
    self.assertAlmostEqual(pi @ losses, _lp_superquantile(losses, 0.3))

  def test_threshold_weights(self):
    losses = np.array([0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.0])
    # ceil(2.5) = 3 largest, 1/3 each.
    w = weighting.threshold_weights(losses, 0.25)
    expected = np.zeros(10)
    expected[[1, 6, 4]] = 1 / 3
    np.testing.assert_allclose(w, expected)
    # theta n an integer: Algorithm 1 with the exact quantile is Algorithm 3
    # (Proposition 3 (c)).
    np.testing.assert_allclose(weighting.threshold_weights(losses, 0.5),
                               weighting.superquantile_weights(losses, 0.5),
                               atol=1e-12)
    # theta = 1: FedAvg.
    np.testing.assert_allclose(weighting.threshold_weights(losses, 1.0),
                               np.full(10, 0.1))

  def test_refused(self):
    for theta in (0.0, -0.5, 1.5, float('nan')):
      with self.assertRaisesRegex(ValueError, 'tail_fraction'):
        weighting.superquantile_weights([1.0], theta)
    with self.assertRaisesRegex(TypeError, 'tail_fraction'):
      weighting.threshold_weights([1.0], '0.5')


class TensorFlowWeightsTest(tf.test.TestCase, parameterized.TestCase):

  def _tf_weights(self, losses, theta, exact):
    tau, above, at = weighting.tail_parameters(tf.constant(losses), theta,
                                               exact)
    return np.array([
        float(weighting.client_tail_weight(x, tau, above, at)) for x in losses
    ])

  @parameterized.product(n=(1, 2, 9, 50),
                         theta=(0.1, 0.25, 0.5, 0.8, 1.0),
                         exact=(True, False),
                         ties=(False, True))
  def test_server_parameters_reproduce_the_references(self, n, theta, exact,
                                                      ties):
    rng = np.random.default_rng(100 * n + int(10 * theta))
    losses = rng.exponential(size=n)
    if ties:
      losses = np.round(losses * 2) / 2  # many ties
    pi = self._tf_weights(losses, theta, exact)
    reference = (weighting.superquantile_weights(losses, theta)
                 if exact else weighting.threshold_weights(losses, theta))
    np.testing.assert_allclose(pi, reference, atol=1e-12)

  def test_no_clients(self):
    tau, above, at = weighting.tail_parameters(tf.zeros([0], tf.float64), 0.5,
                                               True)
    self.assertEqual(float(tau), math.inf)
    self.assertEqual(float(weighting.client_tail_weight(3.0, tau, above, at)),
                     0.0)

  def test_qffl_scalars(self):
    losses = np.array([0.5, 1.0, 2.0])
    sq = np.array([0.01, 0.04, 0.09])
    a, h = weighting.qffl_scalars(losses, sq, q=2.0, lipschitz=10.0)
    # q-FedAvg: Delta_k = F^q L u, h_k = q F^(q-1) ||L u||^2 + L F^q.
    np.testing.assert_allclose(a, 10 * losses**2)
    np.testing.assert_allclose(h, 2 * losses * 100 * sq + 10 * losses**2)
    for i in range(3):
      ta, th = weighting.qffl_client_scalars(losses[i], sq[i], 2.0, 10.0)
      self.assertAllClose([float(ta), float(th)], [a[i], h[i]])


class PrivateTailTest(tf.test.TestCase, parameterized.TestCase):

  def test_reads_bin_threshold_count_and_loss(self):
    # 8 bins on [0, 2]: edges 0.25, 0.5, ..., 2. 100 clients, CDF crossing
    # 1/2 at bin 3 (F = 0.48) and 4 (F = 0.6): eq. 1 picks bin 3.
    cdf = np.array([0.1, 0.2, 0.3, 0.48, 0.6, 0.8, 0.9, 1.0])
    out = weighting.private_tail(cdf,
                                 100.0,
                                 100,
                                 0.5,
                                 2.0,
                                 8,
                                 exact_count=True,
                                 histogram_tail_count=True)
    self.assertEqual(int(out['bin']), 3)
    self.assertAllClose(out['threshold'], 1.0)  # right edge of bin 3
    self.assertAllClose(out['histogram_tail_count'], 52.0)
    self.assertAllClose(out['tail_count'], 52.0)
    centres = hg.edges(0.0, 2.0, 8) - 0.125
    mass = np.diff(np.concatenate([[0.0], cdf]))
    self.assertAllClose(out['loss'], mass @ centres)
    self.assertFalse(bool(out['fallback']))
    expected = weighting.private_tail(cdf,
                                      100.0,
                                      100,
                                      0.5,
                                      2.0,
                                      8,
                                      exact_count=True,
                                      histogram_tail_count=False)
    self.assertAllClose(expected['tail_count'], 50.0)  # theta n

  def test_estimated_count_and_clipping(self):
    cdf = np.array([0.9, 0.95, 0.97, 1.0])
    out = weighting.private_tail(cdf,
                                 40.0,
                                 100,
                                 0.25,
                                 1.0,
                                 4,
                                 exact_count=False,
                                 histogram_tail_count=True)
    self.assertEqual(int(out['bin']), 0)  # |0.9 - 0.75| < |0.95 - 0.75|
    self.assertAllClose(out['histogram_tail_count'], 40.0 * 0.1)
    # A negative noisy count is clipped to 1 (never divide by <= 0).
    out = weighting.private_tail(np.array([0.9, 0.95, 1.2, 1.3]),
                                 -5.0,
                                 100,
                                 0.25,
                                 1.0,
                                 4,
                                 exact_count=False,
                                 histogram_tail_count=True)
    self.assertAllClose(out['histogram_tail_count'], 1.0)

  def test_unusable_histogram_falls_back_to_everyone(self):
    out = weighting.private_tail(np.full(4, np.nan),
                                 0.0,
                                 30,
                                 0.5,
                                 1.0,
                                 4,
                                 exact_count=True,
                                 histogram_tail_count=False)
    # The choices are resolved by PrivacyConfig; their names are refused.
    with self.assertRaisesRegex(TypeError, 'exact_count must be True or '
                                'False'):
      weighting.private_tail(np.full(4, np.nan), 0.0, 30, 0.5, 1.0, 4, 'exact',
                             'expected')
    self.assertEqual(int(out['bin']), -1)
    self.assertTrue(bool(out['fallback']))
    self.assertAllClose(out['tail_count'], 30.0)  # n, not theta n
    self.assertTrue(
        np.all(
            weighting.in_tail(np.array([np.nan, 0.0, 5.0]), -1, 1.0, 4).numpy()
            == [True, True, True]))

  def test_in_tail_rule(self):
    # 4 bins on [0, 1], k = 1: the tail is loss >= 0.5 (bins 2, 3), and
    # clipped losses >= 1; k = 3 (the last bin): only losses >= B.
    losses = np.array([0.0, 0.49, 0.5, 0.74, 0.99, 1.0, 7.0, np.nan])
    self.assertAllEqual(weighting.in_tail(losses, 1, 1.0, 4),
                        [False, False, True, True, True, True, True, False])
    self.assertAllEqual(weighting.in_tail(losses, 3, 1.0, 4),
                        [False, False, False, False, False, True, True, False])
