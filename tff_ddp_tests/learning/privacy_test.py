"""DP-Delta-FL's privacy configuration: events, calibration, corrections."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.accounting import events
from tff_ddp.accounting import pld_accountant
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.learning import privacy

UPDATE = tff.StructWithPythonType(
    [tff.TensorType(np.float32, [20, 10]),
     tff.TensorType(np.float32, [10])], list)


def _config(**kwargs):
  args = dict(clients_per_round=100,
              l2_clip=0.1,
              noise_multiplier=5.0,
              quantile_noise_multiplier=10.0,
              population=2500,
              delta=4e-4)
  args.update(kwargs)
  return privacy.PrivacyConfig(**args)


class ConfigTest(parameterized.TestCase):

  def test_round_event_composes_histogram_and_update(self):
    config = _config()
    event = config.round_event(UPDATE, 37)
    self.assertIsInstance(event, dp_accounting.SampledWithoutReplacementDpEvent)
    self.assertEqual((event.source_dataset_size, event.sample_size), (2500, 37))
    histogram, update = event.event.events
    # The histogram: tree encoding of 16 bins, sensitivity c sqrt(log2 b).
    quantile = config.quantile_parameters()
    self.assertEqual(histogram,
                     quantile.factory.dp_event(quantile.value_type, 37))
    self.assertAlmostEqual(histogram.l2_sensitivity,
                           quantile.noise.scaling * math.sqrt(4))
    self.assertEqual(histogram.dimension, hg.encoding('tree', 16).length)
    # The update: the DDG factory's event over the padded model (256).
    self.assertEqual(update, config.update_factory().dp_event(UPDATE, 37))
    self.assertEqual(update.dimension, 256)
    self.assertEqual(update.num_clients, 37)
    # Central noise in real units: z_w C for the update, z_q l2 (counts).
    mechanism = config.update_factory().mechanism(UPDATE)
    self.assertAlmostEqual(mechanism.noise_stddev(), 5.0 * 0.1)
    self.assertAlmostEqual(quantile.noise_stddev(), 10.0 * 2.0)

  def test_dp_fedavg_and_sampling_variants(self):
    fedavg = _config(quantile_noise_multiplier=None)
    event = fedavg.round_event(UPDATE)
    self.assertIsInstance(event.event,
                          events.DistributedDiscreteGaussianDpEvent)
    poisson = _config(sampling='poisson').round_event(UPDATE)
    self.assertAlmostEqual(poisson.sampling_probability, 100 / 2500)
    none = _config(sampling='none', population=None).round_event(UPDATE)
    self.assertIsInstance(none, dp_accounting.ComposedDpEvent)

  def test_self_sampling(self):
    # All N = 2500 clients in both sums, each release self-sampled at
    # q = 100 / 2500 with its own coins; the noise split over N shares.
    config = _config(sampling='self', count='estimated')
    self.assertEqual(config.clients_in_sum, 2500)
    self.assertAlmostEqual(config.sampling_rate, 0.04)
    self.assertAlmostEqual(config.expected_contributors(2500), 100.0, places=9)
    event = config.round_event(UPDATE)
    self.assertIsInstance(event, dp_accounting.ComposedDpEvent)
    histogram, update = event.events
    for sampled in (histogram, update):
      self.assertIsInstance(sampled, events.SelfSampledDpEvent)
      self.assertAlmostEqual(sampled.sampling_probability, 0.04)
      self.assertEqual(sampled.event.num_clients, 2500)
    mechanism = config.update_factory().mechanism(UPDATE)
    self.assertAlmostEqual(mechanism.noise_stddev(), 5.0 * 0.1)
    self.assertEqual(mechanism.expected_clients_per_round, 2500)
    # Against the server: far less than the same noise on server-picked
    # cohorts (no amplification there).
    self.assertLess(config.epsilon(UPDATE, 10),
                    _config().epsilon(UPDATE, 10) / 2)
    self.assertIn('self (private coins, q=0.04', config.describe())
    # All N clients are in the sums, so N must fit the ring's counts; a
    # population that is only sampled from need not.
    with self.assertRaisesRegex(ValueError, 'population'):
      _config(sampling='self', count='estimated', population=2**30)
    self.assertEqual(_config(population=2**31).population, 2**31)

  def test_epsilon_is_the_accountants(self):
    config = _config()
    expected = accountant.epsilon(
        dp_accounting.SelfComposedDpEvent(config.round_event(UPDATE), 50), 4e-4,
        'server')[0]
    self.assertAlmostEqual(config.epsilon(UPDATE, 50), expected)
    release = _config(adversary='release')
    self.assertNotAlmostEqual(release.epsilon(UPDATE, 50), expected)

  def test_corrected_claim_13(self):
    # A Gaussian with l2 sensitivity C and noise sigma is C^2/(2 sigma^2)-
    # zCDP; sigma_w = z_w C, so the update's rho is 1/(2 z_w^2) -- not
    # sigma^2/(2C^2) as printed. Plus the histogram's 1/(2 z_q^2).
    config = _config(noise_multiplier=4.0, quantile_noise_multiplier=8.0)
    self.assertAlmostEqual(privacy.zcdp_per_round(config), 1 / 32 + 1 / 128)
    # The accountant's curve of one unsampled round is at least that
    # Gaussian bound at every order (the DDG pays for rounding and the
    # discrete sum) and close to it.
    unsampled = _config(noise_multiplier=4.0,
                        quantile_noise_multiplier=8.0,
                        sampling='none',
                        population=None)
    acc = accountant.RdpAccountant()
    curve = acc.curve(unsampled.round_event(UPDATE))
    gaussian = acc.orders * privacy.zcdp_per_round(unsampled)
    self.assertTrue(np.all(curve >= gaussian * (1 - 1e-9)))
    self.assertTrue(np.all(curve <= gaussian * 1.1))

  @parameterized.named_parameters(
      ('clients', dict(clients_per_round=0), ValueError, 'clients_per_round'),
      ('clip', dict(l2_clip=-1.0), ValueError, 'l2_clip'),
      ('noise', dict(noise_multiplier=0.0), ValueError, 'noise_multiplier'),
      ('bins', dict(num_bins=24), ValueError, 'power of two'),
      ('histogram', dict(histogram='wavelet'), ValueError, 'histogram must'),
      ('tail_count', dict(tail_count='raw'), ValueError, 'tail_count'),
      ('sampling', dict(sampling='shuffle'), ValueError, 'sampling'),
      ('population', dict(population=None), ValueError, 'population'),
      ('small_population', dict(population=50), ValueError, 'population'),
      ('adversary', dict(adversary='analyst'), ValueError, 'adversary'),
      ('bits_type', dict(bits=20.0), TypeError, 'bits'),
      ('none_with_population', dict(sampling='none'), ValueError, 'population'),
      ('self_exact_count', dict(sampling='self'), ValueError,
       "count='estimated'"),
      ('self_no_population',
       dict(sampling='self', population=None,
            count='estimated'), ValueError, 'population'))
  def test_refused(self, override, error, message):
    with self.assertRaisesRegex(error, message):
      _config(**override)


class CalibrateTest(parameterized.TestCase):

  @parameterized.parameters((None,), (0.25,), (0.75,))
  def test_meets_target_with_the_budget_ratio(self, ratio):
    result = privacy.calibrate(UPDATE,
                               5.0,
                               4e-4,
                               200,
                               100,
                               0.1,
                               budget_ratio=ratio,
                               population=2500)
    config = result.config
    self.assertLessEqual(result.epsilon, 5.0)
    self.assertGreater(result.epsilon, 5.0 * (1 - 2e-3))
    self.assertAlmostEqual(result.epsilon, config.epsilon(UPDATE, 200))
    if ratio is None:
      self.assertIsNone(config.quantile_noise_multiplier)
    else:
      # rho_q = r rho_w for rho = 1/(2 z^2): z_q = z_w / sqrt(r).
      self.assertAlmostEqual(config.quantile_noise_multiplier,
                             config.noise_multiplier / math.sqrt(ratio))

  def test_final_epsilon_of_the_calibrated_rounds(self):
    result = privacy.calibrate(UPDATE,
                               5.0,
                               4e-4,
                               200,
                               100,
                               0.1,
                               budget_ratio=0.25,
                               population=2500)
    config = result.config
    # The rounds' events as the process reports them (the measured n).
    rounds = [config.round_event(UPDATE, 100) for _ in range(200)]
    final = privacy.final_epsilon(rounds, config)
    self.assertLessEqual(final.epsilon, 5.0)
    self.assertEqual(final.rounds, 200)
    # The tightest accountant over the same events, composed here.
    expected = pld_accountant.tightest('server').compose(
        dp_accounting.SelfComposedDpEvent(rounds[0], 200))
    self.assertEqual((final.epsilon, final.bound),
                     expected.get_epsilon_and_bound(4e-4))
    self.assertEqual(final.bound, result.bound)
    self.assertAlmostEqual(final.epsilon, result.epsilon, places=9)
    self.assertEqual(final.adversary, 'server')
    self.assertTrue(
        final.description.startswith(
            'against the server, zero-out neighbours; bound: '),
        final.description)
    with self.assertRaisesRegex(TypeError, 'round_dp_event'):
      privacy.final_epsilon([1.0], config)

  def test_more_budget_to_the_quantile_costs_update_noise(self):
    small = privacy.calibrate(UPDATE,
                              5.0,
                              4e-4,
                              200,
                              100,
                              0.1,
                              budget_ratio=0.1,
                              population=2500)
    large = privacy.calibrate(UPDATE,
                              5.0,
                              4e-4,
                              200,
                              100,
                              0.1,
                              budget_ratio=0.75,
                              population=2500)
    self.assertLess(small.config.noise_multiplier,
                    large.config.noise_multiplier)
    self.assertGreater(small.config.quantile_noise_multiplier,
                       large.config.quantile_noise_multiplier)

  def test_refused(self):
    with self.assertRaisesRegex(ValueError, 'set by the calibration'):
      privacy.calibrate(UPDATE,
                        5.0,
                        4e-4,
                        10,
                        100,
                        0.1,
                        population=2500,
                        noise_multiplier=3.0)
    with self.assertRaisesRegex(ValueError, 'budget_ratio'):
      privacy.calibrate(UPDATE,
                        5.0,
                        4e-4,
                        10,
                        100,
                        0.1,
                        budget_ratio=0.0,
                        population=2500)
