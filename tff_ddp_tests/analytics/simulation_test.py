"""The round simulator's output has the aggregators' mean and variance."""

import math

from absl.testing import parameterized
import numpy as np
import pytest

from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import process as q
from tff_ddp.analytics.quantiles import simulation as sim

_REPS = 300


def _codes(method, n=32, b=16):
  values = np.random.default_rng(1).uniform(0, 10, n)
  return sim.encodings(method, values, 0.0, 10.0, b)


def _check_moments(test, errors, variance):
  """errors [reps, L] iid over reps with per-coordinate `variance` [L].

  Mean: each coordinate's average has stddev sqrt(var / reps); pooled over
  coordinates, the standardised mean is N(0, 1/L) -> 5 / sqrt(L) bound.
  Variance: sum over reps and coordinates of e^2 / var has mean R L and
  (near-Gaussian noise) variance 2 R L -> 5 standard errors.
  """
  reps, length = errors.shape
  z_mean = errors.mean(axis=0) / np.sqrt(variance / reps)
  test.assertLess(abs(z_mean.mean()), 5 / math.sqrt(length))
  test.assertLess(np.max(np.abs(z_mean)), 5.0)
  ratio = np.sum(errors**2 / variance) / (reps * length)
  test.assertLess(abs(ratio - 1), 5 * math.sqrt(2 / (reps * length)))


class EncodingsTest(parameterized.TestCase):

  @parameterized.parameters(*hg.METHODS)
  def test_matches_encode_of_bin_index(self, method):
    values = np.array([-3.0, 0.0, 4.99, 5.0, 9.99, 12.0])
    codes = sim.encodings(method, values, 0.0, 10.0, 16)
    idx = hg.bin_index(values, 0.0, 10.0, 16).numpy()
    for row, i in zip(codes, idx):
      np.testing.assert_array_equal(row,
                                    hg.encoding(method, 16).encode(i).numpy())


class RefusalTest(parameterized.TestCase):

  def test_refuses_params_of_another_mechanism_before_drawing(self):
    # What each setting needs, named, instead of an AttributeError or a
    # TypeError from deep inside the draw.
    codes = _codes('flat')
    ddg = q.quantile_parameters('flat', 'discrete_gaussian', 16,
                                q.QuantileSetting(32, 2.0, 1e-5))
    with self.assertRaisesRegex(
        ValueError, r"'poisson_binomial' needs .*"
        r'CpbmNoise\), got DdgNoise'):
      sim.noisy_sum('poisson_binomial', codes, ddg)
    with self.assertRaisesRegex(ValueError, 'DdgNoise.*got NoneType'):
      sim.noisy_sum('discrete_gaussian', codes)
    with self.assertRaisesRegex(TypeError, 'central_z'):
      sim.noisy_sum('central', codes, l2_sensitivity=1.0)


@pytest.mark.slow
class MomentsTest(parameterized.TestCase):

  @parameterized.parameters(*hg.METHODS)
  def test_discrete_gaussian(self, method):
    codes = _codes(method)
    p = q.quantile_parameters(method, 'discrete_gaussian', 16,
                              q.QuantileSetting(32, 2.0, 1e-5))
    errors = np.array([
        sim.noisy_sum('discrete_gaussian', codes, p, seed=s) - codes.sum(0)
        for s in range(_REPS)
    ])
    # Sum of n iid N_Z(0, sigma^2) over c^2: variance n sigma^2 / c^2
    # = (z l2)^2 (the discrete Gaussian's variance equals sigma^2 up to
    # e^{-2 pi^2 sigma^2}, nothing here).
    variance = np.full(codes.shape[1], sim.noise_stddev(p, 32)**2)
    _check_moments(self, errors, variance)

  @parameterized.parameters(*hg.METHODS)
  def test_poisson_binomial(self, method):
    codes = _codes(method)
    p = q.quantile_parameters(method, 'poisson_binomial', 16,
                              q.QuantileSetting(32, 2.0, 1e-5))
    fp = p.aggregator_mechanism()
    errors = np.array([
        sim.noisy_sum('poisson_binomial', codes, p, seed=s) - codes.sum(0)
        for s in range(_REPS)
    ])
    # Exact: sum over clients of m p (1 - p) per coordinate, scaled by
    # (B / (m theta))^2; the mean is exact only up to p_high = 1/2 + theta
    # rounded down by < 1 ulp, far below the tolerance.
    m, scale = p.noise.num_trials, fp.coordinate_bound / (p.noise.num_trials *
                                                          fp.theta)
    prob = np.where(codes == 1, fp.p_high, np.where(codes == -1, fp.p_low, 0.5))
    variance = (m * prob * (1 - prob)).sum(axis=0) * scale**2
    _check_moments(self, errors, variance)
    # The stated stddev is the largest variance (every coordinate at p =
    # 1/2); the two float paths to it differ by rounding (~32 ulps over
    # the clients' sum), hence the relative 1e-13.
    self.assertLessEqual(variance.max(),
                         sim.noise_stddev(p, 32)**2 * (1 + 1e-13))

  def test_central(self):
    codes = _codes('tree')
    l2 = hg.encoding('tree', 16).sensitivities()[1]
    errors = np.array([
        sim.noisy_sum(
            'central', codes, central_z=2.0, l2_sensitivity=l2, seed=s) -
        codes.sum(0) for s in range(_REPS)
    ])
    _check_moments(self, errors, np.full(codes.shape[1], (2.0 * l2)**2))

  def test_unknown_setting(self):
    with self.assertRaisesRegex(
        ValueError, r"setting must be one of \('discrete_gaussian', "
        r"'poisson_binomial', 'central'\), got 'laplace'"):
      sim.noisy_sum('laplace', _codes('flat'))

  def test_setting_given_as_string_or_member(self):
    codes = _codes('flat')
    by_name, by_member = (sim.noisy_sum(setting,
                                        codes,
                                        central_z=2.0,
                                        l2_sensitivity=1.0,
                                        seed=3)
                          for setting in ('central', sim.Setting.CENTRAL))
    np.testing.assert_array_equal(by_name, by_member)


@pytest.mark.slow
class SimulatorVsProcessTest(parameterized.TestCase):
  """The simulator and the real TFF process give the same noisy sums.

  Both decode with the mechanism's own server_decode, so the question is the
  noise: R rounds of each, errors of every coordinate standardised by the
  predicted per-coordinate stddev; both pooled variances must be 1 within
  5 standard errors (sqrt(2 / (R L)) each; the process's rounds use a test
  seed per round, all clients with distinct inputs so no two share noise),
  and their difference within 5 standard errors of a difference.
  """

  @parameterized.parameters(*q.MECHANISMS)
  def test_same_noise_law(self, mechanism):
    n, b, rounds = 16, 16, 30
    values = (np.arange(n) + 0.5) * (10.0 / n)  # one client per bin
    params = q.quantile_parameters('flat', mechanism, b,
                                   q.QuantileSetting(n, 2.0, 1e-5, seed=5))
    codes = sim.encodings('flat', values, 0.0, 10.0, b)
    truth = codes.sum(axis=0)
    stddev = params.noise_stddev(n)
    aggregator = params.factory.create(params.value_type)
    state = aggregator.initialize()
    process_errors, sim_errors = [], []
    for r in range(rounds):
      output = aggregator.next(state, list(codes.astype(np.int32)))
      state = output.state
      process_errors.append(np.asarray(output.result, np.float64) - truth)
      sim_errors.append(sim.noisy_sum(mechanism, codes, params, seed=r) - truth)
    ratios = []
    for errors in (process_errors, sim_errors):
      z = np.asarray(errors) / stddev
      ratios.append(np.mean(z**2))
      self.assertLess(abs(np.mean(z)), 5 / math.sqrt(rounds * b))
    se = math.sqrt(2 / (rounds * b))
    # cPBM's stddev is a bound (p(1 - p) <= 1/4): its ratio may be below 1.
    upper = 1 + 5 * se
    lower = 1 - 5 * se if mechanism == 'discrete_gaussian' else 0.5
    for ratio in ratios:
      self.assertLess(ratio, upper)
      self.assertGreater(ratio, lower)
    self.assertLess(abs(ratios[0] - ratios[1]), 5 * math.sqrt(2) * se)
