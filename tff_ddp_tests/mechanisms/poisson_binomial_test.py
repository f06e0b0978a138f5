"""cPBM math: parameters, exact binomial sampler, client/server vs numpy."""

import fractions
import math

from absl.testing import parameterized
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp.mechanisms import binomial
from tff_ddp.mechanisms import poisson_binomial as pbm
from tff_ddp.utils import tensors


class PaddingEncoder:
  """R^d -> R^D by zero padding (an isometry), with a chosen Kashin level,
  for testing the mechanism without a representation."""

  is_isometry = True

  def __init__(self, dim, output_dim=None, level=None):
    self.dim = dim
    self.output_dim = output_dim or dim
    self.level = level

  def encode_with_residual(self, x, seed):
    y = self.encode(x, seed)
    return y, tf.zeros([], y.dtype)

  def encode(self, x, seed):
    del seed
    return tf.pad(tf.reshape(x, [self.dim]), [[0, self.output_dim - self.dim]])

  def decode(self, y, seed):
    del seed
    return tf.reshape(y, [self.output_dim])[:self.dim]


def _params(output_dim=None, level=None, **kwargs):
  args = dict(dim=8,
              l2_clip=1.0,
              theta=0.25,
              num_trials=16,
              expected_clients_per_round=10)
  args.update(kwargs)
  encoder = PaddingEncoder(args['dim'], output_dim, level)
  dim = args.pop('dim')
  # pylint: disable-next=unexpected-keyword-arg  # 'dim' is popped from args above
  return pbm.compute_parameters(dim, pbm.Request(**args), encoder)


class ParametersTest(parameterized.TestCase):

  @parameterized.parameters(0.25, 0.1, 0.2, 1e-3, 0.1234567891234, 2**-30)
  def test_probability_bounds_are_exact_and_inside(self, theta):
    low, high = pbm.probability_bounds(theta)
    exact = fractions.Fraction(theta)
    self.assertLessEqual(fractions.Fraction(high),
                         fractions.Fraction(1, 2) + exact)
    self.assertGreaterEqual(fractions.Fraction(low),
                            fractions.Fraction(1, 2) - exact)
    self.assertEqual(fractions.Fraction(low) + fractions.Fraction(high), 1)
    # At most one float step below the ideal bound.
    self.assertGreater(math.nextafter(high, 1.0), 0.5 + theta - 1e-15)

  def test_ring_holds_every_sum(self):
    p = _params(num_trials=16, expected_clients_per_round=10)
    self.assertEqual(p.bits, 8)  # 2^8 = 256 > 160
    self.assertGreater(p.modulus, 10 * 16)
    self.assertEqual(
        _params(num_trials=3, expected_clients_per_round=5).modulus, 16)
    p = _params(max_clients_per_round=100)
    self.assertGreater(p.modulus, 100 * 16)

  def test_dp_event(self):
    p = _params(theta=0.25, output_dim=32, dim=20)
    event = p.dp_event()
    self.assertEqual(
        (event.theta, event.num_trials, event.num_clients, event.dimension),
        (0.25, 16, 10, 32))
    self.assertEqual(p.dp_event(num_clients=7).num_clients, 7)
    self.assertLessEqual(_params(theta=0.1).dp_event().theta, 0.1)

  @parameterized.named_parameters(
      ('theta_zero', dict(theta=0.0), 'theta'),
      ('theta_large', dict(theta=0.26), 'theta'),
      ('theta_nan', dict(theta=float('nan')), 'theta'),
      ('clip', dict(l2_clip=0.0), 'l2_clip'),
      ('clip_inf', dict(l2_clip=float('inf')), 'l2_clip'),
      ('trials', dict(num_trials=0), 'num_trials'),
      ('clients', dict(expected_clients_per_round=0),
       'expected_clients_per_round'),
      ('max_clients', dict(max_clients_per_round=5), 'max_clients_per_round'),
      ('theta_tiny', dict(theta=1e-300), 'theta'),
      ('ring', dict(num_trials=2**15, expected_clients_per_round=2**
                    15), r'num_trials must be an integer in \[1, 32767\]'),
      ('sampler_cost', dict(num_trials=2**21),
       r'num_trials must be an integer in \[1, 1048576\]'),
  )
  def test_refused(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _params(**kwargs)

  def test_a_request_that_is_not_one_says_what_to_pass(self):
    with self.assertRaisesRegex(TypeError, r'poisson_binomial.Request\('):
      pbm.compute_parameters(8, 1.0)

  def test_divisor_is_a_member_given_as_string_or_member(self):
    by_name = _params(divisor='linf', level=1.5)
    self.assertIs(by_name.divisor, pbm.Divisor.LINF)
    self.assertEqual(
        by_name.coordinate_bound,
        _params(divisor=pbm.Divisor.LINF, level=1.5).coordinate_bound)
    self.assertEqual(pbm.Request(1.0, 0.25, 16, 10, divisor='linf'),
                     pbm.Request(1.0, 0.25, 16, 10, divisor=pbm.Divisor.LINF))
    self.assertIs(_params().divisor, pbm.Divisor.L2)
    with self.assertRaisesRegex(
        ValueError, r"divisor must be one of \('l2', 'linf'\), got 'l1'"):
      pbm.Request(1.0, 0.25, 16, 10, divisor='l1')

  @parameterized.named_parameters(
      ('trials_float', dict(num_trials=2.5), 'num_trials'),
      ('clients_bool', dict(expected_clients_per_round=True),
       'expected_clients_per_round'),
      ('theta_string', dict(theta='0.1'), 'theta'),
      ('divisor', dict(divisor=2), 'divisor'))
  def test_refused_types(self, kwargs, message):
    with self.assertRaisesRegex(TypeError, message):
      _params(**kwargs)


class SampleBinomialTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((0.25, 1), (0.5, 7), (0.6, 40), (0.75, 13))
  def test_goodness_of_fit(self, p, m):
    # Chi-square test at level 1e-4 on 40k draws (fixed seed): a correct
    # sampler fails with probability 1e-4; a bias of ~1% in p is caught.
    n = 40000
    draws = pbm.sample_binomial(tf.fill([n], tf.constant(p, tf.float64)), m,
                                [7, m]).numpy()
    self.assertEqual(draws.dtype, np.int64)
    self.assertTrue(np.all((draws >= 0) & (draws <= m)))
    observed = np.bincount(draws, minlength=m + 1)
    expected = n * scipy.stats.binom.pmf(np.arange(m + 1), m, p)
    keep = expected >= 5  # merge sparse tail cells into their neighbours
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
      obs, exp = obs[:-1], exp[:-1]
    _, p_value = scipy.stats.chisquare(obs, exp)
    self.assertGreater(p_value, 1e-4)

  def test_per_element_probabilities(self):
    probs = tf.constant([0.25, 0.75] * 20000, tf.float64)
    draws = pbm.sample_binomial(probs, 4, [1, 2]).numpy()
    # Means 1 and 3, stddev of each mean sqrt(4 * 3/16 / 20000) ~ 0.0061.
    self.assertAllClose([draws[0::2].mean(), draws[1::2].mean()], [1.0, 3.0],
                        atol=5 * math.sqrt(0.75 / 20000))

  def test_seeds(self):
    probs = tf.fill([64], tf.constant(0.5, tf.float64))
    a = pbm.sample_binomial(probs, 8, [1, 2])
    self.assertAllEqual(a, pbm.sample_binomial(probs, 8, [1, 2]))
    self.assertNotAllEqual(a, pbm.sample_binomial(probs, 8, [1, 3]))

  def test_graph_mode_equals_eager(self):
    probs = tf.constant(np.linspace(0.25, 0.75, 33))
    fn = tf.function(lambda p: pbm.sample_binomial(p, 5, [4, 5]))
    self.assertAllEqual(fn(probs), pbm.sample_binomial(probs, 5, [4, 5]))


def reference_client(x, p, seed):
  """numpy Algorithm 3 up to the probabilities, then the same exact sampler
  (tested on its own in binomial_test): equal outputs mean equal
  probabilities, bit for bit.

  The l2 clip's norm is a float reduction, whose last bits vary between
  machines (and between numpy and TF): the clip is TF's
  (`tensors.clip_to_norm`, checked against a reference in
  encode_bits_test), the rest is element-wise and correctly rounded, the
  same in numpy."""
  x = np.asarray(x, np.float64)
  if not np.all(np.isfinite(x)):
    x = np.zeros_like(x)
  if p.l0_clip is not None and np.count_nonzero(x) > p.l0_clip:
    keep = np.argsort(-np.abs(x), kind='stable')[:p.l0_clip]
    x = np.where(np.isin(np.arange(len(x)), keep), x, 0.0)
  y = tensors.clip_to_norm(tf.pad(tf.constant(x), [[0, p.output_dim - p.dim]]),
                           p.l2_clip)[0]
  y = y.numpy()
  probs = np.clip(0.5 + p.theta * np.clip(y / p.coordinate_bound, -1, 1),
                  p.p_low, p.p_high)
  return binomial.sample_binomial(tf.constant(probs), p.num_trials,
                                  seed).numpy()


def _encode(p, x, seed):
  encoded, flags = p.client_encode(tf.constant(x), seed, seed)
  return encoded['encoded'], flags


def _decode(p, total, n):
  estimate, post = p.server_decode({'encoded': tf.constant(total)},
                                   tf.constant(n, tf.int64),
                                   tf.constant([0, 0], tf.int64))
  return estimate, post['sum_may_wrap']


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class ClientServerTest(tf.test.TestCase, parameterized.TestCase):

  def test_client_matches_reference_exactly(self):
    p = _params(dim=6, l2_clip=2.0, theta=0.2, num_trials=9)
    rng = np.random.default_rng(0)
    seed = tf.constant([3, 4], tf.int64)
    for x in (rng.normal(size=6) * 0.1, rng.normal(size=6) * 10,
              np.array([np.nan] + [1.0] * 5)):
      z, flags = _encode(p, x, seed)
      self.assertAllEqual(z, reference_client(x, p, seed))
      finite = np.all(np.isfinite(x))
      clipped = finite and np.linalg.norm(x) > 2.0
      self.assertAllEqual(flags, [int(not finite), int(clipped), 0])

  def test_linf_scaling_matches_reference_and_counts_beyond_bound(self):
    # B = K C / sqrt(D) = 2 * 2 / sqrt(4) = 2 would equal C; K = 1.5 gives
    # B = 1.5 < C = 2.
    p = _params(dim=4,
                l2_clip=2.0,
                theta=0.2,
                num_trials=9,
                divisor='linf',
                level=1.5)
    self.assertAlmostEqual(p.coordinate_bound, 1.5)
    self.assertEqual(p.divisor, 'linf')
    seed = tf.constant([3, 5], tf.int64)
    for x, clipped in ((np.array([0.5, -0.5, 0.25,
                                  1.0]), False), (np.array([1.8, 0.0, 0.0,
                                                            0.0]), True)):
      z, flags = _encode(p, x, seed)
      self.assertAllEqual(z, reference_client(x, p, seed))
      self.assertEqual(flags.numpy()[1], int(clipped))
    # Same Lemma 2 event as 'l2' (the probabilities stay in
    # [1/2 -+ theta]); the l2 promise is C / B = 2 / 1.5 instead of 1.
    l2_event = _params(dim=4, l2_clip=2.0, theta=0.2, num_trials=9).dp_event()
    self.assertEqual(p.dp_event().theta, l2_event.theta)
    self.assertEqual(p.dp_event().dimension, l2_event.dimension)
    self.assertEqual(p.dp_event().num_trials, l2_event.num_trials)
    self.assertAlmostEqual(p.dp_event().l2_bound, 2.0 / 1.5, places=5)
    self.assertAlmostEqual(l2_event.l2_bound, 1.0, places=5)
    self.assertAlmostEqual(p.noise_stddev(3),
                           1.5 * math.sqrt(3 / (4 * 9)) / 0.2)
    with self.assertRaisesRegex(ValueError, 'kashin'):
      _params(divisor='linf')
    explicit = _params(dim=4, l2_clip=2.0, divisor='linf', linf_clip=0.5)
    self.assertEqual(explicit.coordinate_bound, 0.5)
    with self.assertRaisesRegex(ValueError, "divisor='linf'"):
      _params(linf_clip=0.5)

  def test_l0_clip_keeps_largest_and_shrinks_event(self):
    p = _params(dim=6,
                l2_clip=2.0,
                theta=0.2,
                num_trials=9,
                divisor='linf',
                linf_clip=1.0,
                l0_clip=2)
    self.assertEqual(p.sensitive_coordinates, 2)
    self.assertEqual(p.dp_event().dimension, 2)
    self.assertEqual(p.dp_event().replace_one_dimension, 4)  # disjoint sets
    self.assertEqual(_params(l0_clip=100).dp_event().dimension, 8)
    self.assertEqual(_params(l0_clip=3).dp_event().replace_one_dimension, 6)
    self.assertEqual(_params(l0_clip=5).dp_event().replace_one_dimension, 8)
    self.assertIsNone(_params().dp_event().replace_one_dimension)
    seed = tf.constant([7, 1], tf.int64)
    for x, clipped in ((np.array([0.0, 1.0, 0.0, 0.0, -1.0, 0.0]), False),
                       (np.array([0.3, 0.9, 0.0, -0.5, 0.0, 0.0]), True)):
      z, flags = _encode(p, x, seed)
      self.assertAllEqual(z, reference_client(x, p, seed))
      self.assertEqual(flags.numpy()[1], int(clipped))
    # The dropped coordinate (0.3) sends exactly what a zero sends.
    z, _ = _encode(p, np.array([0.3, 0.9, 0.0, -0.5, 0.0, 0.0]), seed)
    z0, _ = _encode(p, np.array([0.0, 0.9, 0.0, -0.5, 0.0, 0.0]), seed)
    self.assertAllEqual(z, z0)
    for bad in (0, -2):
      with self.assertRaisesRegex(ValueError, 'l0_clip'):
        _params(l0_clip=bad)
    with self.assertRaisesRegex(TypeError, 'l0_clip'):
      _params(l0_clip=1.5)

  def test_recover_sum_exhaustive(self):
    p = _params(num_trials=3, expected_clients_per_round=2)  # M = 8
    self.assertEqual(p.modulus, 8)
    for n in range(3):
      for s in range(n * 3 + 1):
        self.assertEqual(p.recover_sum(s % 8, n).numpy(), s)
    # More clients than the ring was sized for: exact near the mean.
    self.assertEqual(p.recover_sum(7 % 8, 4).numpy(), 7)
    self.assertEqual(p.recover_sum(9 % 8, 4).numpy(), 9)

  def test_docstring_example(self):
    p = _params(dim=1,
                l2_clip=1.0,
                theta=0.25,
                num_trials=4,
                expected_clients_per_round=2)
    # S = 4.5 is not an integer; S = 5 and 4 average to it.
    estimates = [_decode(p, [s], 2)[0].numpy()[0] for s in (4, 5)]
    self.assertAllClose(estimates, [0.0, 1.0])

  def test_hadamard_round_trip_without_noise_limit(self):
    # theta = 1/4 and m large: the estimate concentrates on the clipped sum.
    d = 12
    encoder = hadamard.RandomizedHadamard(d)
    p = pbm.compute_parameters(d,
                               pbm.Request(l2_clip=1.0,
                                           theta=0.25,
                                           num_trials=2**14,
                                           expected_clients_per_round=4),
                               encoder=encoder)
    seed = tf.constant([5, 6], tf.int64)
    encode = tf.function(lambda x, s: p.client_encode(x, seed, s)[0]['encoded'])
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=d) * 0.2 for _ in range(4)]
    total = np.zeros(16, np.int64)
    for i, x in enumerate(xs):
      total += encode(tf.constant(x), tf.constant([i, 1], tf.int64)).numpy()
    estimate, post = p.server_decode(
        {'encoded': tf.constant(total % p.modulus)}, tf.constant(4, tf.int64),
        seed)
    self.assertFalse(post['sum_may_wrap'])
    truth = sum(x * min(1.0, 1.0 / np.linalg.norm(x)) for x in xs)
    bound = p.noise_stddev(4)  # per rotated coordinate, and per x coord
    self.assertAllClose(estimate, truth, atol=5 * bound)

  @parameterized.parameters('l2', 'linf')
  def test_unbiased_and_variance_matches_formula(self, divisor):
    # R independent rounds of n clients through the math (no TFF). Per
    # coordinate the exact variance is v = (C/(m theta))^2 sum_i m p_i(1-p_i)
    # <= n C^2 / (4 m theta^2) (eq. 3, for the sum). The mean error over R
    # rounds and D coordinates has stddev sqrt(mean v / (R D)); the pooled
    # ratio of sample to exact variance has stddev ~ sqrt(2 / ((R-1) D)).
    n, d, m, theta, c = 10, 16, 8, 0.2, 1.0
    rounds = 400
    # 'linf': level 2 gives B = 2 C / sqrt(16) = C / 2.
    level = 2.0 if divisor == 'linf' else None
    p = _params(dim=d,
                l2_clip=c,
                theta=theta,
                num_trials=m,
                expected_clients_per_round=n,
                divisor=divisor,
                level=level)
    b = p.coordinate_bound
    rng = np.random.default_rng(2)
    xs = rng.uniform(-b, b, size=(n, d))
    xs /= np.maximum(1.0, np.linalg.norm(xs, axis=1, keepdims=True))
    encode = tf.function(lambda x, s: p.client_encode(x, s, s)[0]['encoded'])
    estimates = np.zeros((rounds, d))
    for r in range(rounds):
      total = sum(
          encode(tf.constant(x), tf.constant([r, i], tf.int64))
          for i, x in enumerate(xs))
      estimates[r] = _decode(p, total % p.modulus, n)[0].numpy()
    probs = 0.5 + theta * xs / b
    exact_var = (b / (m * theta))**2 * np.sum(m * probs * (1 - probs), axis=0)
    self.assertTrue(np.all(exact_var <= p.noise_stddev(n)**2 + 1e-12))
    errors = estimates - xs.sum(axis=0)
    self.assertLess(abs(errors.mean()),
                    5 * math.sqrt(exact_var.mean() / (rounds * d)))
    ratio = np.mean(errors.var(axis=0, ddof=1) / exact_var)
    self.assertLess(abs(ratio - 1), 5 * math.sqrt(2 / ((rounds - 1) * d)))
