"""The sweep simulator: gradients, the DP-FedAvg noise, the private tail."""

import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.learning import privacy as privacy_lib
from tff_ddp.learning import simulation
from tff_ddp.learning import tasks
from tff_ddp.learning import weighting


@pytest.mark.slow
class SimulationTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.task = tasks.b3_task()
    cls.sim = simulation.LinearSimulator(cls.task)

  def test_loss_and_update_are_keras_autodiff(self):
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(20, 10)) * 0.1
    bias = rng.normal(size=10) * 0.1
    x, y = self.task.train.x[:3].astype(np.float64), self.task.train.y[:3]
    loss, uk, ub = simulation.softmax_loss_and_update(kernel, bias, x, y, 0.1,
                                                      2)
    for i in range(3):
      k = tf.Variable(kernel)
      b = tf.Variable(bias)
      for step in range(2):
        with tf.GradientTape() as tape:
          logits = tf.constant(x[i]) @ k + b
          value = tf.reduce_mean(
              tf.nn.sparse_softmax_cross_entropy_with_logits(y[i], logits))
        if step == 0:
          self.assertAllClose(value, loss[i])
        gk, gb = tape.gradient(value, [k, b])
        k.assign_sub(0.1 * gk)
        b.assign_sub(0.1 * gb)
      self.assertAllClose(kernel - k.numpy(), uk[i], atol=1e-12)
      self.assertAllClose(bias - b.numpy(), ub[i], atol=1e-12)

  def test_dp_fedavg_round_is_mean_plus_central_noise(self):
    # One round from w = 0 on a fixed cohort, 30 noise draws: the mean of
    # the steps is the mean clipped update, each coordinate's noise stddev
    # z C / n. 210 coordinates x 30 draws: the pooled sample variance is
    # within 4 * sqrt(2/6300) = 7% of (z C / n)^2 (DDG variance <= its
    # parameter's, rounding adds < gamma^2/4 per client: negligible).
    n, clip, z = 50, 0.05, 2.0
    cohort = np.arange(n)
    config = privacy_lib.PrivacyConfig(clients_per_round=n,
                                       l2_clip=clip,
                                       noise_multiplier=z,
                                       population=2500)
    _, uk, ub = simulation.softmax_loss_and_update(
        np.zeros((20, 10)), np.zeros(10),
        self.task.train.x[cohort].astype(np.float64), self.task.train.y[cohort],
        0.1, 1)
    u = np.concatenate([uk.reshape(n, -1), ub], 1)
    norms = np.linalg.norm(u, axis=1)
    clipped = u * np.minimum(1, clip / norms)[:, None]
    steps = []
    for seed in range(30):
      out = self.sim.run('fedavg', 1, n, seed, privacy=config, cohorts=[cohort])
      steps.append(-np.concatenate([out.kernel.reshape(-1), out.bias]))
    steps = np.array(steps)
    noise = steps - clipped.mean(0)
    sigma = z * clip / n
    self.assertLess(abs(noise.var() / sigma**2 - 1),
                    4 * np.sqrt(2 / 6300) + 0.01)
    self.assertLess(np.abs(noise.mean(0)).max(), 6 * sigma / np.sqrt(30))

  def test_self_sampled_dp_fedavg_round(self):
    # sampling='self': all N = 2500 clients in the sum, each keeping its
    # clipped update u_i with a coin of rate q = 100 / N; the step is
    # sum_kept u_i / (q N) + noise. Its mean over draws is mean_i u_i; per
    # coordinate variance (q (1 - q) sum_i u_ij^2 + (z C)^2) / (q N)^2.
    # Standardised, 210 coordinates x 20 draws: the mean square is within
    # 4 * sqrt(2 / 4200) of 1 (near-Gaussian: 2500 coins and the noise).
    big_n, n, clip, z, draws = 2500, 100, 0.05, 2.0, 20
    config = privacy_lib.PrivacyConfig(clients_per_round=n,
                                       l2_clip=clip,
                                       noise_multiplier=z,
                                       population=big_n,
                                       sampling='self')
    q = config.expected_contributors(1.0)
    _, uk, ub = simulation.softmax_loss_and_update(
        np.zeros((20, 10)), np.zeros(10), self.task.train.x.astype(np.float64),
        self.task.train.y, 0.1, 1)
    u = np.concatenate([uk.reshape(big_n, -1), ub], 1)
    clipped = u * np.minimum(1, clip / np.linalg.norm(u, axis=1))[:, None]
    steps = np.array([
        -np.concatenate([out.kernel.reshape(-1), out.bias])
        for out in (self.sim.run('fedavg', 1, n, seed, privacy=config)
                    for seed in range(draws))
    ])
    variance = ((q * (1 - q) * (clipped**2).sum(0) + (z * clip)**2) /
                (q * big_n)**2)
    standard = (steps - clipped.mean(0)) / np.sqrt(variance)
    self.assertLess(abs((standard**2).mean() - 1), 4 * np.sqrt(2 / 4200))
    self.assertLess(np.abs(standard.mean(0)).max(), 6 / np.sqrt(draws))
    with self.assertRaisesRegex(ValueError, 'no cohorts'):
      self.sim.run('fedavg', 1, n, 0, privacy=config, cohorts=[[0, 1]])
    with self.assertRaisesRegex(ValueError, 'population'):
      self.sim.run('fedavg',
                   1,
                   n,
                   0,
                   privacy=privacy_lib.PrivacyConfig(clients_per_round=n,
                                                     l2_clip=clip,
                                                     noise_multiplier=z,
                                                     population=3000,
                                                     sampling='self'))

  def test_private_tail_with_negligible_noise_is_the_bin_rule(self):
    # z_q = 1e-2 (the least the 18-bit ring allows: the scaled local noise
    # must stay >= 1/2 for DDG paper Theorem 9): the histogram's noise
    # (stddev 0.022 counts per node, the CDF moves by ~1e-3 of a client)
    # cannot move eq. 1; the simulated round must select exactly the clients
    # whose loss is in a bin above the true eq. 1 bin, and divide by
    # theta n.
    rng = np.random.default_rng(4)
    kernel = rng.normal(size=(20, 10)) * 0.05
    config = privacy_lib.PrivacyConfig(clients_per_round=100,
                                       l2_clip=1.0,
                                       noise_multiplier=1.0,
                                       quantile_noise_multiplier=1e-2,
                                       loss_upper_bound=4.0,
                                       num_bins=32,
                                       population=2500)
    reader = simulation._tail_reader(config, 0.25)  # pylint: disable=protected-access  # tests a private part
    losses, _, _ = simulation.softmax_loss_and_update(
        kernel, np.zeros(10), self.task.train.x[:100].astype(np.float64),
        self.task.train.y[:100], 0.1, 1)
    losses = losses.astype(np.float32)
    tail, mask = reader(losses, 0, 3)
    bins = np.clip(np.floor(losses / (4.0 / 32)), 0, 31).astype(int)
    cdf = np.cumsum(np.bincount(bins, minlength=32)) / 100
    k = int(np.argmin(np.abs(cdf - 0.75)))
    self.assertEqual(tail['bin'], k)
    np.testing.assert_array_equal(mask, (bins > k).astype(float))
    self.assertEqual(tail['tail_count'], 25.0)
    self.assertAllEqual(mask.astype(bool),
                        weighting.in_tail(losses, k, 4.0, 32))
