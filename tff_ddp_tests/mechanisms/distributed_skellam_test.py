"""The distributed Skellam mechanism: parameters, client/server, noise, event.

Statistical checks use fixed seeds; their tolerances are Z = 5 standard
errors (a correct mechanism fails one for a random seed with probability
below 1e-6 each, normal approximation).
"""

import math

from absl.testing import parameterized
import attr
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.accounting import accountant
from tff_ddp.accounting import events
from tff_ddp.mechanisms import distributed_skellam as skellam
from tff_ddp.mechanisms import poisson
from tff_ddp_tests.mechanisms import ddg_parameters

Z = 5.0


class ParametersTest(parameterized.TestCase):

  def test_same_client_as_the_ddg_with_skellam_noise(self):
    mech = ddg_parameters.make(skellam)
    ref = ddg_parameters.make(noise_sampler='exact')
    for field in ('gamma', 'scaled_l2_clip', 'scaled_local_stddev',
                  'norm_threshold', 'l2_sensitivity', 'output_dim', 'bits'):
      self.assertEqual(getattr(mech, field), getattr(ref, field), field)
    self.assertEqual(mech.name, 'distributed_skellam')
    want = poisson.sampled_mean(ref.scaled_local_stddev**2 / 2)
    self.assertEqual(mech.poisson_mean, want)
    self.assertGreaterEqual(mech.local_variance, ref.scaled_local_stddev**2)
    self.assertLess(mech.local_variance - ref.scaled_local_stddev**2,
                    2 * 2.0**-20)

  def test_event_and_epsilon(self):
    mech = ddg_parameters.make(skellam)
    event = mech.dp_event(7)
    self.assertIsInstance(event, events.DistributedSkellamDpEvent)
    self.assertEqual(event.num_clients, 7)
    self.assertEqual(event.local_variance, mech.local_variance)
    self.assertEqual(event.l2_sensitivity, mech.l2_sensitivity)
    self.assertEqual(event.dimension, 128)  # Hadamard padding of 100
    eps = accountant.RdpAccountant(adversary='server').compose(
        mech.dp_event()).get_epsilon(1e-5)
    self.assertTrue(math.isfinite(eps) and eps > 0)
    self.assertEqual(
        type(ddg_parameters.make(skellam,
                                 noise_multiplier=0).dp_event()).__name__,
        'NonPrivateDpEvent')

  def test_small_scaled_noise_is_allowed(self):
    # The DDG refuses sigma/gamma < 1/2 (its Theorem 9); the Skellam bound
    # holds at any variance, so the same configuration runs.
    args = dict(noise_multiplier=0.05, bits=10, expected_clients_per_round=50)
    with self.assertRaisesRegex(ValueError, 'Theorem 9'):
      ddg_parameters.make(**args)
    mech = ddg_parameters.make(skellam, **args)
    self.assertLess(mech.scaled_local_stddev, 0.5)

  def test_refuses_noise_beyond_the_sampler(self):
    with self.assertRaisesRegex(ValueError, 'sampler range.*fewer bits'):
      ddg_parameters.make(skellam,
                          bits=30,
                          expected_clients_per_round=1,
                          noise_multiplier=1000.0)

  def test_public_measurements_report_the_drawn_stddev(self):
    mech = ddg_parameters.make(skellam)
    self.assertEqual(mech.public_measurements()['scaled_local_stddev'],
                     math.sqrt(mech.local_variance))


class SamplerTest(parameterized.TestCase):
  """The noise sampler: the certified table by default, exact on request;
  the event carries the table's TV distance and the epsilon it costs."""

  def test_table_by_default_exact_on_request(self):
    table = ddg_parameters.make(skellam)
    exact = ddg_parameters.make(skellam, noise_sampler='exact')
    self.assertEqual(table.noise_sampler, 'table')
    self.assertEqual(exact.noise_sampler, 'exact')
    self.assertEqual(table.poisson_mean, exact.poisson_mean)
    self.assertEqual(table.sampler_tv_distance, 2.0**-231)
    self.assertEqual(exact.sampler_tv_distance, 0.0)
    self.assertEqual(table.dp_event().sampler_tv_distance, 2.0**-231)
    self.assertIsNone(exact.dp_event().sampler_tv_distance)
    # The event a caller builds from the numbers (TFF's measurement
    # scaled_local_stddev = sqrt(2 mu)) is the mechanism's, up to the float
    # rounding of sqrt(2 mu)^2.
    for mech in (table, exact):
      event = skellam.release_event(mech.l2_sensitivity,
                                    math.sqrt(mech.local_variance),
                                    10,
                                    mech.output_dim,
                                    noise_sampler=mech.noise_sampler)
      self.assertAlmostEqual(event.local_variance / mech.local_variance,
                             1.0,
                             places=14)
      self.assertEqual(attr.evolve(event, local_variance=mech.local_variance),
                       mech.dp_event())
    with self.assertRaisesRegex(ValueError, 'noise_sampler'):
      ddg_parameters.make(skellam, noise_sampler='fast')

  def test_the_table_costs_no_visible_epsilon(self):
    # 50 rounds of 10 clients x 128 coordinates: the table's delta term
    # (1 + e^eps) N 2^-231 is ~1e-60 of delta, below float64 resolution of
    # the conversion, so both samplers give the same epsilon.
    eps = {}
    for sampler in ('table', 'exact'):
      mech = ddg_parameters.make(skellam, noise_sampler=sampler)
      acc = accountant.RdpAccountant(adversary='server').compose(
          mech.dp_event(), 50)
      eps[sampler] = acc.get_epsilon(1e-5)
      if sampler == 'table':
        self.assertEqual(acc.sampler_tv_mass, 50 * 10 * 128 * 2.0**-231)
    self.assertTrue(math.isfinite(eps['exact']))
    self.assertAlmostEqual(eps['table'], eps['exact'], places=9)
    self.assertGreaterEqual(eps['table'], eps['exact'])

  def test_sample_noise_runs_the_resolved_sampler(self):
    # Same seed: the table's draws are the table sampler's, the exact
    # mechanism's the Poisson sampler's (bit for bit).
    from tff_ddp.mechanisms import skellam_table
    seed = tf.constant([3, 5], tf.int64)
    for sampler, fn in (('table', skellam_table.sample_skellam_table),
                        ('exact', poisson.sample_skellam)):
      mech = ddg_parameters.make(skellam, dim=16, noise_sampler=sampler)
      np.testing.assert_array_equal(
          mech.sample_noise(seed).numpy(),
          fn([mech.output_dim], mech.poisson_mean, seed).numpy())


@pytest.mark.slow  # statistical
class NoiseTest(tf.test.TestCase):

  def test_decoded_sum_is_unbiased_with_the_stated_noise(self):
    # 10 clients with the same vector; the noise of the decoded sum per
    # coordinate has variance n 2 mu gamma^2 plus the rounding's, at most
    # n gamma^2 / 4. Over D * rounds coordinates its mean and variance are
    # checked to Z standard errors.
    n, dim, rounds = 10, 64, 20
    mech = ddg_parameters.make(skellam,
                               dim=dim,
                               expected_clients_per_round=n,
                               bits=20,
                               noise_multiplier=2.0)
    x = np.linspace(-1, 1, dim) / np.sqrt(dim) * 0.9
    # Traced once (eager == traced is poisson_test's): eager op-by-op calls
    # of the exact sampler made this test take minutes.
    encode = tf.function(mech.client_encode)
    errors = []
    for r in range(rounds):
      round_seed = tf.constant([r, 1], tf.int64)
      summed = tf.zeros([mech.output_dim], tf.int64)
      for i in range(n):
        enc, flags = encode(tf.constant(x), round_seed,
                            tf.constant([r, 100 + i], tf.int64))
        self.assertAllEqual(flags, [0, 0, 0])
        summed = (summed + enc['encoded']) % mech.modulus
      est, meas = mech.server_decode({'encoded': summed},
                                     tf.constant(n, tf.int64), round_seed)
      self.assertFalse(bool(meas['sum_may_wrap']))
      errors.append(est.numpy() - n * x)
    errors = np.concatenate(errors)
    noise_var = n * mech.local_variance * mech.gamma**2
    upper_var = noise_var + n * mech.gamma**2 / 4
    self.assertLess(abs(errors.mean()), Z * math.sqrt(upper_var / errors.size))
    self.assertAllClose(mech.noise_stddev(n)**2, noise_var)
    # The sample variance lies within Z standard errors of [noise, upper]
    # (Gaussian-like fourth moment: sd of s^2 ~ var sqrt(2 / N)).
    s2 = errors.var(ddof=1)
    sd = upper_var * math.sqrt(2.0 / errors.size)
    self.assertGreater(s2, noise_var - Z * sd)
    self.assertLess(s2, upper_var + Z * sd)
