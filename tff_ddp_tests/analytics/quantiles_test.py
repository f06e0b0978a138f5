"""Tests of the federated quantile process: calibration, types, execution."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.accounting import events
from tff_ddp.accounting import pld_accountant
from tff_ddp.aggregators import discrete_gaussian as ddg_factory
from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import process as q
from tff_ddp.analytics.quantiles import simulation
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.utils import rounds

_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def _epsilon(event, delta, rounds=1):
  # What the calibrations meet: the tightest valid bound (min of the
  # privacy loss distribution and RDP, `tff_ddp.accounting.epsilon`).
  acc = pld_accountant.tightest()
  acc.compose(event, rounds)
  return acc.get_epsilon(delta)


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class ParametersTest(parameterized.TestCase):

  @parameterized.product(method=hg.METHODS, eps=(1.0, 5.0), n=(128, 512))
  def test_ddg_meets_budget_and_ring_bound(self, method, eps, n):
    p = q.quantile_parameters(method, 'discrete_gaussian', 32,
                              q.QuantileSetting(n, eps, 1e-5))
    self.assertLessEqual(p.epsilon, eps * (1 + 1e-9))
    self.assertGreaterEqual(p.noise.scaling, 1)
    # The factory's own event, re-accounted here, meets the target.
    event = p.factory.dp_event(p.value_type)
    self.assertIsInstance(event, events.DistributedDiscreteGaussianDpEvent)
    self.assertLessEqual(_epsilon(event, 1e-5), eps * (1 + 1e-6))
    # Integer encodings: no rounding, the sensitivity is c * l2 exactly.
    mechanism = p.aggregator_mechanism()
    self.assertTrue(mechanism.integer_inputs)
    self.assertAlmostEqual(event.l2_sensitivity,
                           p.noise.scaling * p.l2_sensitivity,
                           places=6)
    # Wrap-around condition of Theorems 1-2 with the calibrated noise.
    sigma = ddg.local_stddev(p.noise.noise_multiplier,
                             p.l2_sensitivity * p.noise.scaling, n)
    self.assertAlmostEqual(sigma, mechanism.scaled_local_stddev)
    self.assertLessEqual(
        qc.ring_needs(p.encoding, p.noise.scaling, sigma, n, 1e-5), 2**18)
    # c is (nearly) the largest that fits: 10% more would not.
    bigger = int(p.noise.scaling * 1.1) + 1
    self.assertGreater(
        qc.ring_needs(p.encoding, bigger, sigma * bigger / p.noise.scaling, n,
                      1e-5), 2**18)

  @parameterized.parameters(*hg.METHODS)
  def test_pbm_event_counts_only_sensitive_coordinates(self, method):
    p = q.quantile_parameters(method, 'poisson_binomial', 32,
                              q.QuantileSetting(128, 2.0, 1e-5))
    event = p.factory.dp_event(p.value_type)
    self.assertEqual(event.dimension,
                     hg.encoding(method, 32).sensitivities()[2])
    self.assertIsInstance(p.noise, qc.CpbmNoise)
    self.assertIs(p.mechanism, p.aggregator_mechanism().name)
    self.assertEqual(p.mechanism, 'poisson_binomial')
    self.assertEqual(p.noise.num_trials, (2**18 - 1) // 128)
    self.assertEqual(p.noise.describe(),
                     f'theta={p.noise.theta:.4f} m={p.noise.num_trials}')
    self.assertLessEqual(_epsilon(event, 1e-5), 2.0 * (1 + 1e-6))

  def test_pbm_given_num_trials(self):
    # The frequency paper's m' = 3: theta is calibrated for that m.
    # (theta = 1/4 with m = 3 costs 0.107 here: 0.05 is inside the range.)
    p = q.quantile_parameters(
        'haar', 'poisson_binomial', 64,
        q.QuantileSetting(10000, 0.05, 1e-4, num_trials=3))
    event = p.factory.dp_event(p.value_type)
    self.assertEqual((p.noise.num_trials, event.num_trials), (3, 3))
    self.assertLessEqual(_epsilon(event, 1e-4), 0.05 * (1 + 1e-6))
    self.assertGreater(_epsilon(event, 1e-4), 0.05 * (1 - 2e-3))
    ring = q.quantile_parameters('haar', 'poisson_binomial', 64,
                                 q.QuantileSetting(10000, 0.05, 1e-4))
    self.assertEqual(ring.noise.num_trials, (2**18 - 1) // 10000)
    self.assertLess(ring.noise.theta,
                    p.noise.theta)  # more trials, less bias per trial
    with self.assertRaisesRegex(ValueError, r'num_trials <= 26 or bits >= 19'):
      q.quantile_parameters('haar', 'poisson_binomial', 64,
                            q.QuantileSetting(10000, 0.3, 1e-4, num_trials=27))
    with self.assertRaisesRegex(ValueError, 'poisson_binomial'):
      q.quantile_parameters('haar', 'discrete_gaussian', 64,
                            q.QuantileSetting(100, 0.3, 1e-4, num_trials=3))
    with self.assertRaisesRegex(ValueError, 'num_trials'):
      q.quantile_parameters('haar', 'poisson_binomial', 64,
                            q.QuantileSetting(100, 0.3, 1e-4, num_trials=0))

  def test_build_from_parameters_is_the_same_process(self):
    p = q.quantile_parameters('flat', 'poisson_binomial', 32,
                              q.QuantileSetting(16, 1.0, 1e-5, seed=11))
    built = q.build_quantile_process_from_parameters(p,
                                                     0.0,
                                                     10.0,
                                                     _QUANTILES,
                                                     rounds=1)
    direct = _process('flat', 'poisson_binomial', 16)
    self.assertEqual(str(built.next.type_signature),
                     str(direct.next.type_signature))
    values = list(np.linspace(0.1, 9.9, 16).astype(np.float32))
    a = built.next(built.initialize(), values)
    b = direct.next(direct.initialize(), values)
    np.testing.assert_array_equal(a.result, b.result)  # same test seed
    with self.assertRaisesRegex(TypeError, 'QuantileParameters'):
      q.build_quantile_process_from_parameters(p.factory, 0.0, 10.0, _QUANTILES)
    with self.assertRaisesRegex(ValueError, 'consistent_tree'):
      q.build_quantile_process_from_parameters(
          p, 0.0, 10.0, _QUANTILES, q.QuantileEstimation(consistent_tree=True))

  def test_hierarchical_is_tree(self):
    a = q.quantile_parameters('hierarchical', 'discrete_gaussian', 32,
                              q.QuantileSetting(128, 2.0, 1e-5))
    b = q.quantile_parameters('tree', 'discrete_gaussian', 32,
                              q.QuantileSetting(128, 2.0, 1e-5))
    self.assertEqual((a.method, a.noise.scaling, a.noise.noise_multiplier),
                     (b.method, b.noise.scaling, b.noise.noise_multiplier))
    process = _process('hierarchical', 'discrete_gaussian', 16)
    self.assertEqual(
        process.next.type_signature.result.measurements.member['cdf'],
        tff.TensorType(np.float64, [32]))

  def test_release_adversary_and_many_trials(self):
    server = q.quantile_parameters('flat', 'discrete_gaussian', 32,
                                   q.QuantileSetting(128, 2.0, 1e-5))
    release = q.quantile_parameters(
        'flat', 'discrete_gaussian', 32,
        q.QuantileSetting(128, 2.0, 1e-5, adversary='release'))
    # No sampling: the two adversaries see the same release.
    self.assertEqual(server.noise.noise_multiplier,
                     release.noise.noise_multiplier)
    self.assertEqual(release.adversary, 'release')
    # 30 bits for 4 clients: the ring would allow 2^28 trials; the sampler's
    # limit caps them.
    wide = q.quantile_parameters('flat', 'poisson_binomial', 32,
                                 q.QuantileSetting(4, 1.0, 1e-5, bits=30))
    self.assertEqual(wide.noise.num_trials, 2**20)

  def test_more_rounds_cost_more_noise(self):
    one = q.quantile_parameters('flat', 'discrete_gaussian', 32,
                                q.QuantileSetting(128, 2.0, 1e-5))
    ten = q.quantile_parameters('flat', 'discrete_gaussian', 32,
                                q.QuantileSetting(128, 2.0, 1e-5, rounds=10))
    self.assertGreater(ten.noise.noise_multiplier,
                       2 * one.noise.noise_multiplier)

  def test_small_ring_refused_with_bits_that_work(self):
    with self.assertRaisesRegex(ValueError, r'bits >= (\d+)') as cm:
      q.quantile_parameters('flat', 'discrete_gaussian', 32,
                            q.QuantileSetting(512, 1.0, 1e-5, bits=8))
    need = int(
        cm.exception.args[0].split('bits >= ')[1].split()[0].rstrip(';.'))
    q.quantile_parameters('flat', 'discrete_gaussian', 32,
                          q.QuantileSetting(512, 1.0, 1e-5, bits=need))
    with self.assertRaisesRegex(ValueError, 'bits >= 9'):
      q.quantile_parameters('flat', 'poisson_binomial', 32,
                            q.QuantileSetting(300, 1.0, 1e-5, bits=8))

  @parameterized.named_parameters(
      ('method', dict(method='median'), 'method'),
      ('mechanism', dict(mechanism='laplace'), 'mechanism'),
      ('tree_bins', dict(method='tree', num_bins=24), 'power of two'),
      ('haar_bins', dict(method='haar', num_bins=24), 'power of two'),
      ('bins', dict(num_bins=1), 'num_bins'),
      ('quantile_range', dict(quantiles=[0.5, 1.0]), 'quantiles'),
      ('quantile_empty', dict(quantiles=[]), 'quantiles'),
      ('bounds', dict(lower_bound=1.0, upper_bound=1.0), 'lower_bound'),
      ('bounds_inf', dict(upper_bound=float('inf')), 'upper_bound'),
      ('count', dict(count='noisy'), 'count'),
      ('estimator', dict(estimator='median'), 'estimator'),
      ('consistent', dict(consistent_tree=True), 'consistent_tree'),
      ('clients', dict(expected_clients_per_round=0),
       'expected_clients_per_round'),
      ('bits', dict(bits=40), 'bits'),
      ('epsilon', dict(epsilon=-1.0), 'epsilon'),
  )
  def test_refused(self, override, message):
    args = dict(method='flat',
                mechanism='discrete_gaussian',
                lower_bound=0.0,
                upper_bound=10.0,
                num_bins=32,
                quantiles=[0.5],
                expected_clients_per_round=16,
                epsilon=1.0,
                delta=1e-5)
    args.update(override)
    with self.assertRaisesRegex(ValueError, message):
      _build_flat(**args)

  @parameterized.named_parameters(
      ('bins_float', dict(num_bins=32.0), 'num_bins'),
      ('quantiles_string', dict(quantiles='0.5'), 'quantiles'),
      ('clients_bool', dict(expected_clients_per_round=True),
       'expected_clients_per_round'),
      ('consistent_int', dict(method='tree',
                              consistent_tree=1), 'consistent_tree'))
  def test_refused_types(self, override, message):
    args = dict(method='flat',
                mechanism='discrete_gaussian',
                lower_bound=0.0,
                upper_bound=10.0,
                num_bins=32,
                quantiles=[0.5],
                expected_clients_per_round=16,
                epsilon=1.0,
                delta=1e-5)
    args.update(override)
    with self.assertRaisesRegex(TypeError, message):
      _build_flat(**args)

  def test_many_bins_are_built_without_quadratic_memory(self):
    process = q.build_quantile_process(
        'haar', 'discrete_gaussian', 0.0, 1.0, 2**14, [0.5],
        q.QuantileSetting(64, 1.0, 1e-5, bits=30))
    self.assertEqual(
        process.next.type_signature.result.measurements.member['cdf'],
        tff.TensorType(np.float64, [2**14]))
    with self.assertRaisesRegex(ValueError, 'O\\(b\\^2\\)'):
      q.build_quantile_process('flat', 'discrete_gaussian', 0.0, 1.0, 4096,
                               [0.5], q.QuantileSetting(64, 1.0, 1e-5),
                               q.QuantileEstimation(estimator='monotone'))

  def test_estimator_is_a_member_given_as_string_or_member(self):
    by_name = q.QuantileEstimation(estimator='interpolate')
    self.assertIs(by_name.estimator, q.Estimator.INTERPOLATE)
    self.assertEqual(by_name,
                     q.QuantileEstimation(estimator=q.Estimator.INTERPOLATE))
    self.assertEqual([(q.QuantileEstimation(estimator=e).monotone,
                       q.QuantileEstimation(estimator=e).interpolate)
                      for e in q.ESTIMATORS], [(False, False), (True, False),
                                               (True, True)])
    with self.assertRaisesRegex(
        ValueError, r"estimator must be one of \('paper', 'monotone', "
        r"'interpolate'\), got 'median'"):
      q.QuantileEstimation(estimator='median')


class ParametersForNoiseTest(parameterized.TestCase):

  @parameterized.product(method=hg.METHODS, z=(0.5, 3.0, 40.0))
  def test_largest_scaling_that_fits(self, method, z):
    n, b = 100, 16
    p = qc.parameters_for_noise(method, b, n, z, 1e-5)
    # The DDG's noise is a DdgNoise; the mechanism is its Kind, the
    # aggregator's.
    self.assertIsInstance(p.noise, qc.DdgNoise)
    self.assertIs(p.mechanism, p.aggregator_mechanism().name)
    self.assertEqual(p.mechanism, 'distributed_discrete_gaussian')
    self.assertEqual(p.noise.noise_multiplier, z)
    self.assertEqual(p.noise.describe(), f'c={p.noise.scaling} z={z:.3f}')
    mechanism = p.aggregator_mechanism()
    self.assertTrue(mechanism.integer_inputs)
    # The central noise in count units is z times the encoding's l2.
    self.assertAlmostEqual(p.noise_stddev(n), z * p.l2_sensitivity)
    # The ring holds the worst case of Theorems 1-2; the next scaling whose
    # reciprocal round-trips (exact_scaling) would not, up to the factory's
    # rounding term (n per coordinate) that can step c down once more.
    sigma = mechanism.scaled_local_stddev
    self.assertLessEqual(
        qc.ring_needs(p.encoding, p.noise.scaling, sigma, n, 1e-5), 2**18)
    bigger = p.noise.scaling + 1
    while 1.0 / (1.0 / bigger) != bigger:
      bigger += 1
    self.assertGreater(
        qc.ring_needs(p.encoding, bigger, sigma * bigger / p.noise.scaling, n,
                      1e-5), 2**18 - 2 * n)
    # Exactly: at the next such scaling either Theorems 1-2 fail or the
    # DDG factory refuses the granularity (its own ring check, which
    # `largest_scaling` asks of the mechanism instead of probing).
    try:
      ddg_factory.DiscreteGaussianSumFactory(
          ddg_factory.Request(l2_clip=p.l2_sensitivity,
                              noise_multiplier=z,
                              expected_clients_per_round=n,
                              bits=18,
                              granularity=1.0 / bigger,
                              linf_clip=1.0),
          encoder='none').dp_event(p.value_type)
      refused = ''
    except ValueError as e:
      refused = str(e)
    self.assertTrue(
        qc.ring_needs(p.encoding, bigger, sigma * bigger / p.noise.scaling, n,
                      1e-5) > 2**18 or 'granularity' in refused, refused)
    self.assertEqual(qc.exact_scaling(49), 48)
    self.assertEqual(qc.exact_scaling(50), 50)
    # epsilon describes one unsampled round.
    self.assertAlmostEqual(p.epsilon,
                           _epsilon(p.factory.dp_event(p.value_type), 1e-5))

  def test_agrees_with_the_calibrated_parameters(self):
    calibrated = q.quantile_parameters('tree', 'discrete_gaussian', 16,
                                       q.QuantileSetting(100, 2.0, 1e-5))
    fixed = qc.parameters_for_noise('tree', 16, 100,
                                    calibrated.noise.noise_multiplier, 1e-5)
    self.assertGreaterEqual(fixed.noise.scaling, calibrated.noise.scaling)
    self.assertAlmostEqual(fixed.epsilon, calibrated.epsilon, places=3)
    # The calibration builds, for each z, the factory parameters_for_noise
    # builds: the same scaling and the same event.
    self.assertEqual(fixed.noise.scaling, calibrated.noise.scaling)
    self.assertEqual(fixed.factory.dp_event(fixed.value_type),
                     calibrated.factory.dp_event(calibrated.value_type))

  def test_refused(self):
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      qc.parameters_for_noise('flat', 16, 100, 0.0, 1e-5)
    with self.assertRaisesRegex(ValueError, r'use bits >= \d+'):
      qc.parameters_for_noise('flat', 16, 5000, 1.0, 1e-5, bits=12)
    with self.assertRaisesRegex(TypeError, 'parameters'):
      q.build_quantile_process_from_parameters({}, 0.0, 1.0, [0.5])
    # The ring helpers take the resolved encoding, and say so.
    with self.assertRaisesRegex(TypeError, r'encodings.encoding\(method, '
                                r'num_bins\)'):
      qc.largest_scaling('flat', 100, 1.0, 1e-5, 18)


def _process(method, mechanism, n, epsilon=1.0, **estimation):
  return q.build_quantile_process(method, mechanism, 0.0, 10.0, 32, _QUANTILES,
                                  q.QuantileSetting(n, epsilon, 1e-5, seed=11),
                                  q.QuantileEstimation(**estimation))


_SETTING_FIELDS = ('expected_clients_per_round', 'epsilon', 'delta', 'bits',
                   'rounds', 'adversary', 'num_trials', 'seed')


def _build_flat(method, mechanism, lower_bound, upper_bound, num_bins,
                quantiles, **fields):
  """build_quantile_process with every field named flat (the refusal tests
  override one at a time): the setting's fields into `QuantileSetting`,
  the rest into `QuantileEstimation`, each refused by the object's own
  validation or by the builder."""
  setting = {k: fields.pop(k) for k in _SETTING_FIELDS if k in fields}
  return q.build_quantile_process(method, mechanism, lower_bound, upper_bound,
                                  num_bins, quantiles,
                                  q.QuantileSetting(**setting),
                                  q.QuantileEstimation(**fields))


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class TypeTest(parameterized.TestCase):

  def assertAllClose(self, a, b):  # pylint: disable=invalid-name  # unittest's name
    np.testing.assert_allclose(a, b)

  @parameterized.product(method=hg.METHODS, mechanism=q.MECHANISMS)
  def test_secure_only_and_types(self, method, mechanism):
    process = _process(method, mechanism, 16)
    self.assertIsInstance(process, tff.templates.MeasuredProcess)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    result = process.next.type_signature.result
    self.assertEqual(result.result.placement, tff.SERVER)
    self.assertEqual(result.result.member,
                     tff.TensorType(np.float64, [len(_QUANTILES)]))
    self.assertEqual(result.measurements.member['cdf'],
                     tff.TensorType(np.float64, [32]))
    # The round's DP event travels in the measurements (raises if absent).
    event_type = result.measurements.member['aggregator']['dp_event']
    self.assertEqual(event_type['num_clients'], tff.TensorType(np.int64))
    # Nothing about the clients beyond the public count and the noisy
    # output: no per-client counts.
    names = {
        n for n, _ in tff.structure.iter_elements(
            result.measurements.member['aggregator'])
    }
    self.assertFalse({'nonfinite_clients', 'clipped_clients', 'debug_counts'} &
                     names)


def _bins(values, num_bins=32):
  return np.clip(np.floor(np.asarray(values) / (10.0 / num_bins)), 0,
                 num_bins - 1).astype(int)


def _true_cdf(values, num_bins=32):
  return np.cumsum(np.bincount(_bins(values), minlength=num_bins)) / len(values)


def _noise_stddev(params, mechanism, n, groups):
  """Stddev bound of one coordinate of the decoded noisy sum (count units).

  One client's noise has stddev <= s1 per coordinate (DDG: sigma / c =
  z l2 / sqrt(n); cPBM: B / (2 theta sqrt(m)) with B = 1), the mechanism's
  noise_stddev(1). The test seed derives a client's noise seed from its
  input, so clients with the same encoding (same bin) draw the *same* noise:
  a group of g such clients adds g times one draw. Hence stddev
  = s1 sqrt(sum_groups g^2).
  """
  del mechanism, n
  s1 = params.noise_stddev(1)
  return s1 * math.sqrt(float(np.sum(np.square(groups))))


def _cdf_matrix(method, b):
  """The dense reference K with CDF * n = K @ noisy_sum."""
  return hg.encoding(method, b).cdf_matrix()


@pytest.mark.slow
class ExecutionTest(parameterized.TestCase):

  def assertAllClose(self, a, b):  # pylint: disable=invalid-name  # unittest's name
    np.testing.assert_allclose(a, b)

  @parameterized.product(method=hg.METHODS, mechanism=q.MECHANISMS)
  def test_cdf_within_noise_bound_and_estimates_follow(self, method, mechanism):
    n = 64
    values = np.random.default_rng(3).uniform(0, 10, n).astype(np.float32)
    process = _process(method, mechanism, n, epsilon=8.0, count='exact')
    params = q.quantile_parameters(method, mechanism, 32,
                                   q.QuantileSetting(n, 8.0, 1e-5, seed=11))
    out = process.next(process.initialize(), list(values))
    cdf = np.asarray(out.measurements['cdf'])
    # Each CDF value is (a linear map K of the noisy encoding) / n, with
    # noise independent across coordinates of stddev <= s (see
    # _noise_stddev), so CDF[j] has stddev <= s ||K[j]||_2 / n. The counts
    # are integers times c, so rounding adds nothing; 6 stddevs.
    s = _noise_stddev(params, mechanism, n,
                      np.bincount(_bins(values), minlength=32))
    k = _cdf_matrix(method, 32)
    bound = 6 * s * np.linalg.norm(k, axis=1) / n
    np.testing.assert_array_less(np.abs(cdf - _true_cdf(values)), bound)
    # The estimates are eq. 1 applied to that CDF, in the requested order.
    expected = hg.edges(
        0.0, 10.0, 32)[[int(np.argmin(np.abs(cdf - p))) for p in _QUANTILES]]
    np.testing.assert_allclose(out.result, expected)
    agg = out.measurements['aggregator']
    self.assertEqual(agg['participating_clients'], n)
    self.assertEqual(out.measurements['status'], b'ok')
    self.assertEqual(accounting.extract_dp_event(agg),
                     params.factory.dp_event(params.value_type))
    self.assertTrue(out.measurements['within_budget'])
    # A second round runs on the new state, beyond the 1-round budget.
    out2 = process.next(out.state, list(values))
    self.assertEqual(out2.result.shape, (len(_QUANTILES),))
    self.assertFalse(out2.measurements['within_budget'])

  @parameterized.parameters(*q.MECHANISMS)
  def test_nonfinite_and_out_of_range(self, mechanism):
    n = 24
    values = [np.nan, np.inf, -np.inf] + [-50.0] * 10 + [99.0] * 11
    # The test seed gives clients with equal encodings equal noise (groups
    # of 10 and 11 here); epsilon 30 keeps that correlated noise small.
    process = _process('flat',
                       mechanism,
                       n,
                       epsilon=30.0,
                       count='exact',
                       min_total_stddevs=0.0)
    out = process.next(process.initialize(), [np.float32(v) for v in values])
    agg = out.measurements['aggregator']
    self.assertEqual(agg['participating_clients'], n)
    # Out-of-range values are clipped into the end bins, not dropped, and
    # so are -inf and +inf (values beyond the known range); the NaN is in
    # the public count n but in no bin: CDF ~ 11/24 from the first bin on,
    # 23/24 at the last.
    cdf = np.asarray(out.measurements['cdf'])
    params = q.quantile_parameters('flat', mechanism, 32,
                                   q.QuantileSetting(n, 30.0, 1e-5))
    # Groups of identical encodings: 1 NaN (zeros), 11 in bin 0, 12 in bin
    # 31 (see _noise_stddev).
    s = _noise_stddev(params, mechanism, n, [1, 11, 12])
    bound = 6 * s * np.sqrt(np.arange(1, 33)) / 24
    truth = np.full(32, 11 / 24)
    truth[-1] = 23 / 24
    np.testing.assert_array_less(np.abs(cdf - truth), bound)
    self.assertTrue(np.all(np.isfinite(out.result)))
    self.assertEqual(out.measurements['status'], b'ok')
    self.assertEqual(out.measurements['status'], 'ok')  # a str as well

  def test_from_parameters_is_the_same_process_without_a_budget(self):
    n = 48
    values = list(np.random.default_rng(9).uniform(0, 10, n).astype(np.float32))
    params = q.quantile_parameters('tree', 'discrete_gaussian', 32,
                                   q.QuantileSetting(n, 4.0, 1e-5, seed=11))
    calibrated = q.build_quantile_process(
        'tree', 'discrete_gaussian', 0.0, 10.0, 32, _QUANTILES,
        q.QuantileSetting(n, 4.0, 1e-5, seed=11),
        q.QuantileEstimation(count='exact'))
    given = q.build_quantile_process_from_parameters(
        params, 0.0, 10.0, _QUANTILES, q.QuantileEstimation(count='exact'))
    a = calibrated.next(calibrated.initialize(), values)
    b = given.next(given.initialize(), values)
    # Same aggregator, same test seed: the same noisy output.
    np.testing.assert_array_equal(a.result, b.result)
    np.testing.assert_array_equal(a.measurements['cdf'], b.measurements['cdf'])
    self.assertIn('within_budget', a.measurements)
    self.assertNotIn('within_budget', b.measurements)

  @parameterized.parameters(*q.MECHANISMS)
  def test_empty_rounds_are_nan_and_say_why(self, mechanism):
    process = _process('flat', mechanism, 16, epsilon=2.0)
    out = process.next(process.initialize(), [])
    self.assertTrue(np.all(np.isnan(out.result)))
    self.assertEqual(out.measurements['status'], b'no_clients')
    # No valid client (only NaN, "no value"): the noisy total is pure
    # noise. The status comes from the noisy total and the public n only
    # (how many values were NaN is not released), by the rule
    # total < min_total_stddevs * stddev, checked here against the released
    # total. (With the fixed test seed the 16 clients, which all send the
    # same "no value" message, draw the same noise: the total's stddev is 4
    # times the released one, so the rule may go either way.)
    nan_round = [np.float32(np.nan)] * 16
    out = process.next(process.initialize(), nan_round)
    total = float(out.measurements['noisy_total'])
    stddev = float(out.measurements['noisy_total_stddev'])
    if total < 2.0 * stddev or total <= 0:
      self.assertEqual(out.measurements['status'], 'too_few_values')
      self.assertTrue(np.all(np.isnan(out.result)))
    else:
      self.assertEqual(out.measurements['status'], 'ok')
    # The NaN path itself, at 6 stddevs with each client's own secret seed
    # (seed=None: the production noise law the stddev is computed for). The
    # noise is sub-Gaussian with its variance (discrete Gaussian: Canonne et
    # al. 2020; binomial: Hoeffding), so a zero total reaches 6 stddevs
    # with probability <= exp(-18) ~ 1.5e-8.
    strict = q.build_quantile_process(
        'flat', mechanism, 0.0, 10.0, 32, _QUANTILES,
        q.QuantileSetting(16, 2.0, 1e-5),
        q.QuantileEstimation(min_total_stddevs=6.0))
    out = strict.next(strict.initialize(), nan_round)
    self.assertTrue(np.all(np.isnan(out.result)))
    self.assertEqual(out.measurements['status'], 'too_few_values')
    self.assertEqual(out.measurements['aggregator']['participating_clients'],
                     16)
    self.assertNotIn('nonfinite', str(list(out.measurements['aggregator'])))
    # An empty round released nothing: its event composes as nothing.
    out = process.next(process.initialize(), [])
    self.assertEqual(accounting.extract_dp_event(out.measurements),
                     dp_accounting.NoOpDpEvent())

  def test_estimators_agree_with_histogram_math(self):
    n = 64
    values = list(np.random.default_rng(5).chisquare(4, n).astype(np.float32))
    for estimator in q.ESTIMATORS:
      process = _process('tree',
                         'discrete_gaussian',
                         n,
                         epsilon=4.0,
                         estimator=estimator,
                         consistent_tree=True)
      out = process.next(process.initialize(), values)
      cdf = np.asarray(out.measurements['cdf'])
      self.assertTrue(np.all((out.result >= 0) & (out.result <= 10)))
      # Every estimator is the histogram math applied to its reported CDF.
      self.assertAllClose(
          out.result,
          hg.quantile_values(cdf,
                             _QUANTILES,
                             0.0,
                             10.0,
                             32,
                             interpolate=estimator == 'interpolate'))
      if estimator != 'paper':  # a projected CDF is monotone in [0, 1]
        self.assertTrue(np.all(np.diff(out.result) >= 0))
        self.assertTrue(np.all(np.diff(cdf) >= -1e-12))
        self.assertTrue(np.all((cdf >= 0) & (cdf <= 1)))


class EncodeValueTest(parameterized.TestCase):
  """Each client's message: +-inf are values (end bins), NaN is none."""

  @parameterized.product(method=hg.METHODS, num_bins=(2, 8))
  def test_infinities_go_to_the_end_bins_nan_to_zeros(self, method, num_bins):

    def encode(v):
      return q.encode_value(method, tf.constant(v, tf.float32), 0.0, 10.0,
                            num_bins).numpy()

    np.testing.assert_array_equal(encode(np.inf), encode(1e30))
    np.testing.assert_array_equal(encode(np.inf), encode(10.0))
    np.testing.assert_array_equal(encode(-np.inf), encode(-1e30))
    np.testing.assert_array_equal(encode(-np.inf), encode(0.0))
    self.assertFalse(np.array_equal(encode(np.inf), encode(-np.inf)))
    np.testing.assert_array_equal(encode(np.nan), 0)
    # The simulator encodes as the process does.
    values = [np.inf, -np.inf, np.nan, 3.0]
    np.testing.assert_array_equal(
        simulation.encodings(method, values, 0.0, 10.0, num_bins),
        np.stack([encode(v) for v in values]))


@pytest.mark.slow  # TFF rounds, one of 2000 clients
class RingCapacityTest(parameterized.TestCase):
  """More values than the histogram's ring holds."""

  def test_issue_reproduction_is_refused(self):
    # This process fed 2000 lognormal values returned
    # [3.28 9.51 13.45] (truth [0.50 0.98 2.00]) with status b'ok'.
    process = q.build_quantile_process(
        'flat', 'discrete_gaussian', 0.0, 20.0, 32, [0.25, 0.5, 0.75],
        q.QuantileSetting(20, 2.0, 1e-6, seed=3),
        q.QuantileEstimation(estimator='interpolate'))
    values = np.random.default_rng(0).lognormal(size=2000).astype(np.float32)
    capacity = q.quantile_parameters('flat', 'discrete_gaussian', 32,
                                     q.QuantileSetting(20, 2.0,
                                                       1e-6)).ring_capacity()
    self.assertLess(capacity.capacity, 2000)
    with self.assertRaises(rounds.RoundRefusedError) as raised:
      process.next(process.initialize(), list(values))
    message = str(raised.exception)
    self.assertIn('build_quantile_process: 2000 clients', message)
    self.assertIn(f'more than the {capacity.capacity} its ring holds', message)
    self.assertIn('expected_clients_per_round >= 2000', message)

  @parameterized.parameters(*q.MECHANISMS)
  def test_flag_never_says_ok(self, mechanism):
    params = q.quantile_parameters('flat', mechanism, 32,
                                   q.QuantileSetting(8, 8.0, 1e-5, seed=5))
    capacity = params.ring_capacity().capacity
    process = q.build_quantile_process_from_parameters(params,
                                                       0.0,
                                                       10.0,
                                                       _QUANTILES,
                                                       on_wrap='flag')
    values = [np.float32(5.0)] * (capacity + 1)
    out = process.next(process.initialize(), values)
    self.assertEqual(out.measurements['status'], 'sum_may_wrap')
    self.assertTrue(out.measurements['aggregator']['sum_may_wrap'])
    out = process.next(process.initialize(), values[:capacity])
    self.assertNotEqual(out.measurements['status'], 'sum_may_wrap')
    self.assertIn(out.measurements['status'], q.STATUSES)
    self.assertIsInstance(out.measurements['status'], str)


class SimulatorCapacityTest(parameterized.TestCase):

  def test_simulator_refuses_like_the_process(self):
    params = q.quantile_parameters('flat', 'poisson_binomial', 32,
                                   q.QuantileSetting(8, 8.0, 1e-5))
    capacity = params.ring_capacity().capacity
    codes = simulation.encodings('flat', [5.0] * (capacity + 1), 0.0, 10.0, 32)
    with self.assertRaisesRegex(rounds.RoundRefusedError,
                                f'{capacity + 1} clients'):
      simulation.noisy_sum('poisson_binomial', codes, params)
    simulation.noisy_sum('poisson_binomial', codes, params, on_wrap='flag')
    with self.assertRaisesRegex(ValueError, 'on_wrap'):
      q.build_quantile_process('flat',
                               'poisson_binomial',
                               0.0,
                               1.0,
                               4, [0.5],
                               q.QuantileSetting(8, 1.0, 1e-5),
                               on_wrap='warn')
