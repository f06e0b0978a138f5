"""Each mechanism's ring capacity (`max_clients`) against brute force.

`max_clients()` is the one home of "how many clients can this secure sum
hold": the factories refuse rounds above it, `sum_may_wrap` must say
exactly the same, and the quantile calibration will search with it. Here
it is checked against the criterion it summarises, evaluated for every n
near the answer, and `server_decode`'s flag against both. Pure Python and
eager TF on tiny tensors: no TFF.
"""

import math

from absl.testing import parameterized
import dp_accounting
import tensorflow as tf

from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import distributed_skellam as skellam
from tff_ddp.mechanisms import poisson_binomial as pbm

_SEED = tf.constant([0, 0], tf.int64)


def _ddg_configurations():
  """(name, mechanism): the Section 6 heuristic and given granularities."""
  out = []
  for z, d, n, bits in ((1.0, 64, 10, 16), (0.5, 16, 3, 12),
                        (2.0, 1000, 100, 20), (0.0, 8, 7, 14)):
    out.append((f'heuristic z={z} d={d} n={n} b={bits}',
                ddg.compute_parameters(d, ddg.Request(1.0, z, n, bits))))
  for c, n, bits in ((4, 5, 16), (100, 20, 18), (1, 1, 8)):
    out.append((f'granularity c={c} n={n} b={bits}',
                ddg.compute_parameters(6,
                                       ddg.Request(l2_clip=math.sqrt(3.0),
                                                   noise_multiplier=1.0,
                                                   expected_clients_per_round=n,
                                                   bits=bits,
                                                   granularity=1.0 / c,
                                                   linf_clip=1.0),
                                       encoder=registry.Identity(6),
                                       integer_inputs=True)))
  out.append(('skellam',
              skellam.compute_parameters(64, skellam.Request(1.0, 1.0, 10,
                                                             16))))
  return out


def _flag(mechanism, n):
  zeros = {'encoded': tf.zeros([mechanism.output_dim], tf.int64)}
  _, post = mechanism.server_decode(zeros, tf.constant(n, tf.int64), _SEED)
  return bool(post['sum_may_wrap'])


class LargestCountTest(parameterized.TestCase):

  @parameterized.parameters(0, 1, 2, 3, 7, 8, 1000, 2**29 + 5)
  def test_finds_the_threshold(self, threshold):
    calls = []

    def fits(n):
      calls.append(n)
      return n <= threshold

    self.assertEqual(base.largest_count(fits), threshold)
    self.assertLessEqual(len(calls), 2 * 31 + 2)  # logarithmic

  def test_stops_at_the_limit(self):
    self.assertEqual(base.largest_count(lambda n: True, limit=37), 37)


class DiscreteGaussianCapacityTest(parameterized.TestCase):

  def test_max_clients_is_the_criterion_brute_forced(self):
    # wrap_statistic(n) < M/2 for every n <= max_clients, not above (every
    # n up to 3 past it: the criterion is monotone, so beyond is implied).
    for name, mechanism in _ddg_configurations():
      cap = mechanism.max_clients()
      half = mechanism.modulus / 2.0
      self.assertGreaterEqual(cap, mechanism.expected_clients_per_round, name)
      for n in range(max(1, cap - 50), cap + 4):
        self.assertEqual(
            mechanism.wrap_statistic(n) >= half, n > cap, (name, n))

  def test_sum_may_wrap_says_the_same(self):
    for name, mechanism in _ddg_configurations():
      cap = mechanism.max_clients()
      for n in (0, 1, cap - 1, cap, cap + 1, 10 * cap + 7):
        self.assertEqual(_flag(mechanism, n), n > cap, (name, n))

  def test_heuristic_ring_holds_the_expected_clients_at_any_bits(self):
    # gamma is derived so that k sum stddevs of n clients fill M/2: one
    # client more already exceeds it, and more bits do not add room.
    for bits in (10, 16, 24, 30):
      mechanism = ddg.compute_parameters(256, ddg.Request(1.0, 1.0, 50, bits))
      self.assertEqual(mechanism.max_clients(), 50, bits)

  def test_given_granularity_grows_with_the_ring(self):
    # The worst case n (B/gamma + 1) + 1 + k sqrt(n) sigma/gamma < M/2:
    # with c = 4, B = 1 it is about 5 n, so doubling M about doubles n.
    caps = [
        ddg.compute_parameters(6,
                               ddg.Request(l2_clip=math.sqrt(3.0),
                                           noise_multiplier=1.0,
                                           expected_clients_per_round=5,
                                           bits=bits,
                                           granularity=0.25,
                                           linf_clip=1.0),
                               encoder=registry.Identity(6),
                               integer_inputs=True).max_clients()
        for bits in (12, 13, 14)
    ]
    self.assertLess(caps[0], caps[1])
    self.assertLess(caps[1], caps[2])
    self.assertAlmostEqual(caps[2] / caps[1], 2.0, delta=0.1)


class PoissonBinomialCapacityTest(parameterized.TestCase):

  @parameterized.parameters((1, 1), (5, 16), (100, 30), (3, 2**20))
  def test_max_clients_is_n_m_below_the_modulus(self, n, m):
    mechanism = pbm.compute_parameters(
        4,
        pbm.Request(l2_clip=1.0,
                    theta=0.25,
                    num_trials=m,
                    expected_clients_per_round=n))
    cap = mechanism.max_clients()
    self.assertGreaterEqual(cap, mechanism.max_clients_per_round)
    for k in (cap - 1, cap, cap + 1):
      self.assertEqual(k * m >= mechanism.modulus, k > cap)
      zeros = {'encoded': tf.zeros([mechanism.output_dim], tf.int64)}
      _, post = mechanism.server_decode(zeros, tf.constant(k, tf.int64), _SEED)
      self.assertEqual(bool(post['sum_may_wrap']), k > cap, k)


class EmptyRoundEventTest(parameterized.TestCase):

  def test_zero_clients_is_a_no_op_event(self):
    mechanisms = [m for _, m in _ddg_configurations()] + [
        pbm.compute_parameters(
            4,
            pbm.Request(l2_clip=1.0,
                        theta=0.1,
                        num_trials=4,
                        expected_clients_per_round=3))
    ]
    for mechanism in mechanisms:
      self.assertEqual(mechanism.dp_event(0), dp_accounting.NoOpDpEvent())
      self.assertNotEqual(mechanism.dp_event(1), dp_accounting.NoOpDpEvent())
      with self.assertRaisesRegex(ValueError, 'num_clients'):
        mechanism.dp_event(-1)
