"""The in-graph running epsilon equals the offline accountant."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf

from tff_ddp.accounting import accountant
from tff_ddp.accounting import conversions
from tff_ddp.accounting import events
from tff_ddp.accounting import orders as orders_lib
from tff_ddp.accounting import running

ORDERS = np.asarray(orders_lib.DEFAULT_ORDERS)


def _round(n, tv=None):
  """A DP-Delta-FL-like round: histogram + update, cohort of n of 1000."""
  histogram = events.DistributedDiscreteGaussianDpEvent(200.0,
                                                        400.0 / math.sqrt(n) *
                                                        10,
                                                        n,
                                                        30,
                                                        sampler_tv_distance=tv)
  update = events.DistributedDiscreteGaussianDpEvent(1000.0,
                                                     5000.0 / math.sqrt(n) * 10,
                                                     n, 256)
  return dp_accounting.SampledWithoutReplacementDpEvent(
      1000, n, dp_accounting.ComposedDpEvent([histogram, update]))


class ConversionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(scale=(1e-4, 0.01, 1.0, 30.0), delta=(1e-9, 1e-5, 0.3))
  def test_tf_conversion_is_the_library_conversion(self, scale, delta):
    rdp = scale * ORDERS * (1 + 0.1 * np.sin(ORDERS))
    expected = conversions.rdp_to_epsilon(ORDERS, rdp, delta)[0]
    self.assertAllClose(running.rdp_to_epsilon(ORDERS, rdp, delta),
                        expected,
                        rtol=1e-12)

  def test_edges(self):
    self.assertEqual(
        float(running.rdp_to_epsilon(ORDERS, np.zeros_like(ORDERS), 1e-5)), 0.0)
    self.assertEqual(
        float(running.rdp_to_epsilon(ORDERS, np.full_like(ORDERS, np.inf),
                                     1e-5)), math.inf)
    self.assertEqual(float(running.rdp_to_epsilon(ORDERS, ORDERS * 0.01, 0.0)),
                     math.inf)


class TabulatedAccountantTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(adversary=('server', 'release'),
                         tv=(None, 1e-30, 1e-9))
  def test_running_epsilon_equals_offline_accountant(self, adversary, tv):
    table = running.TabulatedAccountant(lambda n: _round(n, tv), 12, adversary)
    counts = [12, 3, 0, 7, 12, 1]
    state = table.initial_state()
    offline = accountant.RdpAccountant(adversary=adversary)
    for n in counts:
      state = table.compose(state, tf.constant(n, tf.int64))
      if n:
        offline.compose(_round(n, tv))
      for delta in (1e-6, 1e-3):
        self.assertAllClose(table.epsilon(state, delta),
                            offline.get_epsilon(delta),
                            rtol=1e-10)
    self.assertAllClose(table.epsilon(state, 1e-6),
                        table.numpy_epsilon(counts, 1e-6),
                        rtol=1e-10)
    # One round alone.
    self.assertAllClose(table.round_epsilon(tf.constant(7, tf.int64), 1e-6),
                        accountant.epsilon(_round(7, tv), 1e-6, adversary)[0],
                        rtol=1e-10)

  def test_tv_mass_that_eats_delta_is_infinite(self):
    table = running.TabulatedAccountant(lambda n: _round(n, 1e-3), 4)
    state = table.compose(table.initial_state(), 4)
    self.assertEqual(float(table.epsilon(state, 1e-6)), math.inf)
    self.assertEqual(table.numpy_epsilon([4], 1e-6), math.inf)

  def test_more_clients_than_tabulated_is_uncovered(self):
    table = running.TabulatedAccountant(_round, 5)
    state = table.compose(table.initial_state(), 5)
    self.assertTrue(math.isfinite(float(table.epsilon(state, 1e-6))))
    state = table.compose(state, 6)
    self.assertTrue(bool(state['uncovered']))
    self.assertEqual(float(table.epsilon(state, 1e-6)), math.inf)
    # ... and stays so.
    state = table.compose(state, 1)
    self.assertEqual(float(table.epsilon(state, 1e-6)), math.inf)
    self.assertEqual(table.numpy_epsilon([5, 6], 1e-6), math.inf)

  def test_refused(self):
    with self.assertRaisesRegex(TypeError, 'event_fn'):
      running.TabulatedAccountant(3, 5)
    with self.assertRaisesRegex(ValueError, 'max_clients'):
      running.TabulatedAccountant(_round, 0)
    with self.assertRaisesRegex(ValueError, 'adversary'):
      running.TabulatedAccountant(_round, 3, 'analyst')
    with self.assertRaisesRegex(TypeError, 'not a DpEvent'):
      running.TabulatedAccountant(lambda n: 'event', 3)
