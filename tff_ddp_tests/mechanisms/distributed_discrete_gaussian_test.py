"""DDG parameters and Algorithms 1-2 against a numpy reference."""

import math

from absl.testing import parameterized
import numpy as np
import scipy.linalg
import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import distributed_skellam
from tff_ddp.mechanisms import rounding
from tff_ddp_tests.mechanisms import ddg_parameters

# ---------------------------------------------------------------------------
# numpy reference of Algorithms 1 and 2. Randomness is injected: the signs
# xi, the words of each rounding attempt and the noise vector come from the
# same TF draws the implementation makes, so the integers must agree
# exactly. x' and x'' are float reductions and matrix products, whose last
# bits vary between machines (and between numpy and TF): the reference
# checks TF's against its own float64 ones within a bound (float32: the
# proved one) and rounds TF's x'' (the rounding is exact given x'').


def _np_fwht(x):
  """Orthonormal Walsh-Hadamard as a dense matrix product (an independent
  implementation: float results agree with ours to rounding error)."""
  d = x.shape[0]
  return scipy.linalg.hadamard(d) @ x / np.sqrt(d)


def base_centre(z, modulus):
  return np.where(z > modulus // 2, z - modulus, z)


def reference_scale(x, p):
  """x' = x clipped to c, times 1/gamma (and 1 - 2 eps when float32)."""
  x = np.asarray(x, np.float64)
  if not np.all(np.isfinite(x)):
    x = np.zeros_like(x)
  big = np.max(np.abs(x))
  if big > 0 and big * np.linalg.norm(x / big) > p.l2_clip:
    x = (x / big) * (p.l2_clip / np.linalg.norm(x / big))
  scale = 1.0 / p.gamma
  if p.float32_rotation:
    scale *= 1.0 - 2.0 * p.encoder.float32_error
  return x * scale


def reference_round(x, p, words):
  """Conditional randomized rounding of x'' with the attempts' words."""
  bits = 24 if x.dtype == np.float32 else 31
  for attempt in range(rounding.MAX_ROUNDING_ATTEMPTS):
    r = (words(attempt) & (2**bits - 1)).astype(x.dtype)
    fl = np.floor(x)
    rounded = fl.astype(np.int64) + (r < (x - fl) * x.dtype.type(2**bits))
    if np.sum(rounded * rounded) <= p.norm_threshold:
      return rounded
  return np.zeros_like(rounded)


def reference_client(p, words, noise, rotated):
  """z = (x~ + y) mod M for TF's x'' `rotated` (checked by the caller)."""
  return np.mod(reference_round(rotated, p, words) + noise, p.modulus)


def reference_server(zbar, p, signs):
  z = np.mod(np.asarray(zbar, np.int64), p.modulus)
  z = np.where(z > p.modulus // 2, z - p.modulus, z)  # centre the ring
  return (p.gamma * signs * _np_fwht(z.astype(np.float64)))[:p.dim]


class ReferenceAgreementTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("hadamard_padded", 100, 1.0, 'table', True),
                                  ("power_of_two", 64, 0.5, 'exact', True),
                                  ('no_noise', 30, 0.0, 'table', False),
                                  ('huge_coordinate', 16, 1.0, 'table', True))
  def test_client_and_server_match_reference_exactly(self, dim, noise_mult,
                                                     sampler, float32):
    p = ddg_parameters.make(dim=dim,
                            noise_multiplier=noise_mult,
                            noise_sampler=sampler)
    self.assertEqual(p.noise_sampler, sampler)
    self.assertEqual(p.float32_rotation, float32)
    rng = np.random.default_rng(dim)
    xs = [rng.normal(size=dim) * s for s in (0.01, 0.3, 5.0)]
    if dim == 16:  # ||x|| overflows float64 unless computed with care
      xs[2][3] = 1e200
    rotation_seed = tf.constant([11, 12], tf.int64)
    # Public signs: their law is hadamard_test's; here they are fed in.
    signs = hadamard.random_signs(p.output_dim, rotation_seed).numpy()
    total = np.zeros(p.output_dim, np.int64)
    for i, x in enumerate(xs):
      noise_seed = tf.constant([i, 99], tf.int64)
      encoded, flags = p.client_encode(tf.constant(x), rotation_seed,
                                       noise_seed)
      round_seed, sampling_seed = ddg.client_subseeds(noise_seed)
      words = lambda a, s=round_seed: rounding.rounding_words([p.output_dim], s,
                                                              a).numpy()
      noise = p.sample_noise(sampling_seed).numpy() if noise_mult > 0 else 0
      scaled = reference_scale(x, p)
      tf_scaled = p.clip_and_scale(tf.constant(x))[0]
      self.assertEqual(tf_scaled.dtype, tf.float32 if float32 else tf.float64)
      rotated = p.encoder.encode(tf_scaled, rotation_seed).numpy()
      exact = _np_fwht(signs * np.pad(scaled, (0, p.output_dim - dim)))
      if float32:
        # The float32 cast of x': relative 2^-24, plus 2^-126 where
        # tiny coordinates flush to zero (the 1e200 case).
        self.assertLessEqual(
            np.linalg.norm(tf_scaled.numpy() - scaled),
            2**-23 * np.linalg.norm(scaled) + np.sqrt(dim) * 2**-126)
        # The cast (in the bound) plus the rotation's bound.
        self.assertLessEqual(
            np.linalg.norm(rotated - exact),
            p.encoder.float32_error * np.linalg.norm(scaled) +
            hadamard.float32_flush_error(p.output_dim))
        # The premise of the rounding analysis: ||x''|| <= c / gamma.
        self.assertLessEqual(np.linalg.norm(rotated.astype(np.float64)),
                             p.scaled_l2_clip)
      else:
        # float64 (D = 32): TF's x'' within 70 u of H D x' (the float32
        # bound's argument with u = 2^-53), numpy's dense product within
        # sqrt(D) gamma_D = 181 u, x' (a norm, a few products) within
        # (D + 5) u, all relative to ||x'||: 1e-12 (9000 u) is wider.
        self.assertLessEqual(np.linalg.norm(tf_scaled.numpy() - scaled),
                             1e-12 * np.linalg.norm(scaled))
        self.assertLessEqual(np.linalg.norm(rotated - exact),
                             1e-12 * np.linalg.norm(scaled))
      expected = reference_client(p, words, noise, rotated)
      self.assertEqual(encoded['encoded'].dtype, tf.int64)
      self.assertAllEqual(encoded['encoded'].numpy(), expected)
      clipped = int(
          np.linalg.norm(x / np.abs(x).max()) * np.abs(x).max() > p.l2_clip)
      self.assertAllEqual(flags.numpy(), [0, clipped, 0])
      total = np.mod(total + expected, p.modulus)
    decoded, post = p.server_decode({'encoded': tf.constant(total)},
                                    tf.constant(3, tf.int64), rotation_seed)
    # The integer messages agree exactly; the decoded floats to rounding.
    self.assertAllClose(decoded.numpy(),
                        reference_server(total, p, signs),
                        rtol=1e-12,
                        atol=1e-12 * p.gamma * p.modulus)
    self.assertFalse(post['sum_may_wrap'])

  def test_int32_path_at_the_largest_scaled_clip(self):
    # c/gamma just under 2^30, the float32 path's limit, and inputs whose
    # rotation is +-c/gamma e_j (x a column of (H D)^-1 = D H): a rounded
    # coordinate near +-2^30 plus a noise residue near 2^30 must still give
    # the exact residue mod M (the sum is formed in uint32; a signed int32
    # sum would overflow where the int64 reference does not).
    p = ddg.compute_parameters(
        64,
        ddg.Request(l2_clip=1.0,
                    noise_multiplier=0.03,
                    expected_clients_per_round=1,
                    bits=30))
    self.assertTrue(p.float32_rotation)
    self.assertGreater(p.scaled_l2_clip, 0.999 * 2**30)
    seed = tf.constant([3, 1], tf.int64)
    signs = hadamard.random_signs(64, seed).numpy()
    for j, sign in ((5, 1.0), (40, -1.0), (63, 1.0)):
      x = sign * signs * scipy.linalg.hadamard(64)[:, j] / 8.0  # ||x|| = c
      noise_seed = tf.constant([j, 2], tf.int64)
      encoded, flags = p.client_encode(tf.constant(x), seed, noise_seed)
      rotated = p.encoder.encode(p.clip_and_scale(tf.constant(x))[0],
                                 seed).numpy()
      self.assertGreater(np.abs(rotated).max(), 0.998 * 2**30)
      round_seed, sampling_seed = ddg.client_subseeds(noise_seed)
      words = lambda a, s=round_seed: rounding.rounding_words([64], s, a).numpy(
      )
      noise = p.sample_noise(sampling_seed).numpy()
      self.assertAllEqual(encoded['encoded'],
                          reference_client(p, words, noise, rotated))
      self.assertAllEqual(flags, [0, 0, 0])

  def test_float32_rotation_only_where_it_costs_nothing(self):
    # Hadamard with noise.
    self.assertTrue(ddg_parameters.make().float32_rotation)
    self.assertFalse(ddg_parameters.make(noise_multiplier=0.0).float32_rotation)
    for name in ('kashin', 'dft', 'none'):
      self.assertFalse(
          ddg_parameters.make(dim=12, encoder=registry.make_encoder(
              name, 12)).float32_rotation, name)
    # c/gamma >= 2^30: rounded values might not fit int32.
    big = ddg.compute_parameters(
        64,
        ddg.Request(l2_clip=1.0,
                    noise_multiplier=0.01,
                    expected_clients_per_round=1,
                    bits=30))
    self.assertGreater(big.scaled_l2_clip, 2**30)
    self.assertFalse(big.float32_rotation)
    # n 2 eps c/gamma vs 2^-10 sqrt(n D) sigma/gamma: 0.55 of it at 100
    # clients (float32), 1.10 at 200 (float64).
    small, many = (ddg.compute_parameters(
        4,
        ddg.Request(l2_clip=1.0,
                    noise_multiplier=0.1,
                    expected_clients_per_round=n,
                    bits=20)) for n in (100, 200))
    self.assertTrue(small.float32_rotation)
    self.assertFalse(many.float32_rotation)

  def test_float32_path_releases_at_most_the_claimed_sensitivity(self):
    # The privacy argument of the float32 path (docs/notes/ddg_encode.md,
    # "Precision"): whatever the float32 rotation computed, the integer vector a
    # client adds its noise to has ||x~||^2 <= T, the squared sensitivity the
    # event claims. Recovered here from the output (z - y mod M, centred) for
    # inputs at, beyond and far beyond the clip, spikes and heavy tails.
    p = ddg_parameters.make(dim=1000, bits=20, expected_clients_per_round=5)
    self.assertTrue(p.float32_rotation)
    self.assertEqual(p.l2_sensitivity, math.sqrt(p.norm_threshold))
    self.assertLess(p.scaled_l2_clip + 1, p.modulus / 2)  # centring is exact
    rng = np.random.default_rng(1)
    spike = np.zeros(1000)
    spike[3] = -1e6
    seed = tf.constant([2, 9], tf.int64)
    for i, x in enumerate(
        (rng.normal(size=1000) * 1e-3, rng.normal(size=1000) * 10.0, spike,
         rng.standard_cauchy(size=1000) * 1e20)):
      noise_seed = tf.constant([i, 4], tf.int64)
      encoded, flags = p.client_encode(tf.constant(x), seed, noise_seed)
      noise = p.sample_noise(ddg.client_subseeds(noise_seed)[1]).numpy()
      rounded = base_centre(
          np.mod(encoded['encoded'].numpy() - noise, p.modulus), p.modulus)
      self.assertLessEqual(int(np.sum(rounded * rounded)), p.norm_threshold)
      self.assertEqual(int(flags[2]), 0)  # accepted, not zeroed

  def test_float32_rotation_keeps_the_rounding_premise(self):
    # ||x''||_2 <= c/gamma (Algorithm 1's premise, which the clip's
    # (1 - 2 eps) buys) for inputs at and far beyond the clip, with the
    # float32 norm computed exactly (float32 squares are exact in float64,
    # math.fsum rounds the sum once).
    p = ddg_parameters.make(dim=1000, bits=20, expected_clients_per_round=5)
    self.assertTrue(p.float32_rotation)
    rng = np.random.default_rng(0)
    spike = np.zeros(1000)
    spike[17] = 3.0
    for x in (rng.normal(size=1000), spike, np.ones(1000) * 1e30,
              rng.standard_cauchy(size=1000)):
      x = x / np.linalg.norm(x) * p.l2_clip * (1 + rng.uniform())
      for seed in range(3):
        rotated = p.encoder.encode(
            p.clip_and_scale(tf.constant(x))[0], tf.constant([seed, 5],
                                                             tf.int64))
        squares = np.square(rotated.numpy().astype(np.float64))
        self.assertLessEqual(math.fsum(squares), p.scaled_l2_clip**2)

  def test_nonfinite_client_sends_zeros_and_is_flagged(self):
    p = ddg_parameters.make(dim=8, noise_multiplier=0.0)
    x = tf.constant([1.0, np.nan, 0, 0, 0, 0, 0, np.inf], tf.float64)
    encoded, flags = p.client_encode(x, tf.constant([1, 2], tf.int64),
                                     tf.constant([3, 4], tf.int64))
    self.assertAllEqual(encoded['encoded'], np.zeros(p.output_dim))
    self.assertAllEqual(flags, [1, 0, 0])
    self.assertEqual(p.flag_names, ('nonfinite', 'clipped', 'rounding_failed'))

  @parameterized.named_parameters(
      ('hadamard', {}), ('kashin', dict(encoder='kashin')),
      ('dft', dict(encoder='dft')), ('none', dict(encoder='none')),
      ('skellam', dict(mechanism='skellam')))
  def test_a_zero_input_sends_its_noise_share_alone(self, kwargs):
    # What sum_of_zero_inputs relies on: client_encode(0) is exactly the
    # residue of sample_noise at the client's sampling seed.
    kwargs = dict(kwargs)
    mechanism = kwargs.pop('mechanism', 'dgauss')
    if 'encoder' in kwargs:
      kwargs['encoder'] = registry.make_encoder(kwargs['encoder'], 12)
    if mechanism == 'skellam':
      p = ddg_parameters.compute(distributed_skellam,
                                 dim=12,
                                 l2_clip=1.0,
                                 noise_multiplier=1.0,
                                 expected_clients_per_round=10,
                                 bits=16,
                                 **kwargs)
    else:
      p = ddg_parameters.make(dim=12, **kwargs)
    for seed in range(3):
      noise_seed = tf.constant([seed, 7], tf.int64)
      encoded, flags = p.client_encode(tf.zeros([12], tf.float64),
                                       tf.constant([1, 2], tf.int64),
                                       noise_seed)
      _, sampling_seed = ddg.client_subseeds(noise_seed)
      self.assertAllEqual(
          encoded['encoded'],
          np.mod(p.sample_noise(sampling_seed).numpy(), p.modulus))
      self.assertAllEqual(flags, [0, 0, 0])
    self.assertAllEqual(p.sum_of_zero_inputs(0, noise_seed),
                        np.zeros(p.output_dim))
    one = p.sum_of_zero_inputs(1, noise_seed).numpy()
    self.assertTrue(np.all((one >= 0) & (one < p.modulus)))

  def test_sum_of_zero_inputs_has_the_shares_variance(self):
    # k clients' shares: per coordinate variance k s^2 (s the scaled local
    # stddev; the discrete Gaussian's variance is within 1e-9 of s^2 at
    # s >= 1). Over D = 128 coordinates x 40 draws the sample variance has
    # relative stddev sqrt(2 / 5120) = 0.020: 4 sd.
    p = ddg_parameters.make(dim=128,
                            noise_multiplier=2.0,
                            expected_clients_per_round=4,
                            bits=16)
    self.assertEqual(p.noise_sampler, 'table')
    k = 9
    draw = tf.function(lambda seed: p.sum_of_zero_inputs(k, seed))
    draws = np.stack([
        base_centre(draw(tf.constant([r, 1], tf.int64)).numpy(), p.modulus)
        for r in range(40)
    ])
    expected = k * p.scaled_local_stddev**2
    self.assertLess(abs(draws.var() / expected - 1.0), 4 * 0.020)
    self.assertLess(abs(draws.mean()), 4 * math.sqrt(expected / draws.size))

  @parameterized.parameters(ddg, distributed_skellam)
  def test_l0_clip_keeps_the_largest_coordinates(self, module):
    # Identity encoder, scaling 4: a vector with three non-zero
    # coordinates keeps its two largest (flagged clipped); one with two is
    # sent as it is. The event says a client moves at most 2 coordinates.
    def build(noise_multiplier, l0_clip):
      return ddg_parameters.compute(module,
                                    5,
                                    encoder=registry.Identity(5),
                                    integer_inputs=True,
                                    l2_clip=3.0,
                                    noise_multiplier=noise_multiplier,
                                    expected_clients_per_round=4,
                                    bits=16,
                                    granularity=0.25,
                                    linf_clip=2.0,
                                    l0_clip=l0_clip)

    p = build(0.0, 2)
    seeds = (tf.constant([1, 2], tf.int64), tf.constant([3, 4], tf.int64))
    encoded, flags = p.client_encode(
        tf.constant([1.0, 0.0, -2.0, 0.5, 0.0], tf.float64), *seeds)
    self.assertAllEqual(encoded['encoded'], np.mod([4, 0, -8, 0, 0], p.modulus))
    self.assertAllEqual(flags, [0, 1, 0])
    encoded, flags = p.client_encode(
        tf.constant([0.0, 1.0, 0.0, 0.0, -1.0], tf.float64), *seeds)
    self.assertAllEqual(encoded['encoded'], np.mod([0, 4, 0, 0, -4], p.modulus))
    self.assertAllEqual(flags, [0, 0, 0])
    self.assertEqual(build(1.0, 2).dp_event().l0_sensitivity, 2)
    # An l0 clip of the whole dimension bounds nothing.
    self.assertIsNone(build(1.0, 5).dp_event().l0_sensitivity)
    with self.assertRaisesRegex(ValueError, 'l0_clip'):
      module.Request(l2_clip=1.0,
                     noise_multiplier=1.0,
                     expected_clients_per_round=4,
                     bits=16,
                     l0_clip=0)

  @parameterized.parameters(ddg, distributed_skellam)
  def test_linf_sensitivity(self, module):
    # The event's l_inf bound is the scaled clip: exactly c for integer
    # inputs at scaling c, the ceiling of B = linf_clip / gamma on the float
    # path, where no rounded coordinate goes beyond it; none through a
    # rotation (it mixes coordinates) or without an l_inf clip.
    def build(encoder, linf_clip, granularity=0.25, integer_inputs=True):
      return ddg_parameters.compute(module,
                                    4,
                                    encoder=encoder,
                                    integer_inputs=integer_inputs,
                                    l2_clip=3.0,
                                    noise_multiplier=1.0,
                                    expected_clients_per_round=4,
                                    bits=16,
                                    granularity=granularity,
                                    linf_clip=linf_clip)

    self.assertEqual(
        build(registry.Identity(4), 2.0).dp_event().linf_sensitivity, 8)
    p = build(registry.Identity(4), 0.7, 0.3, False)
    bound = 0.7 / p.gamma
    self.assertEqual(p.dp_event().linf_sensitivity, math.ceil(bound))
    seeds = tf.constant([1, 2], tf.int64)
    x = tf.constant([0.7, -0.7, 0.69, 5.0], tf.float64)
    rounded = np.stack([
        p.client_rounded(x, seeds, tf.constant([3, i], tf.int64))[0]
        for i in range(50)
    ])
    self.assertLessEqual(np.abs(rounded).max(), math.ceil(bound))
    self.assertIsNone(
        build(hadamard.RandomizedHadamard(4), 2.0, None,
              False).dp_event().linf_sensitivity)
    self.assertIsNone(
        build(registry.Identity(4), None).dp_event().linf_sensitivity)

  def test_integer_inputs_are_not_rounded_and_not_inflated(self):
    # Identity encoder, scaling c = 4: an integer vector of norm <= l2_clip
    # is sent exactly (times c) and the sensitivity is c * l2_clip itself.
    p = ddg.compute_parameters(5,
                               ddg.Request(l2_clip=math.sqrt(3.0),
                                           noise_multiplier=0.0,
                                           expected_clients_per_round=4,
                                           bits=16,
                                           granularity=0.25,
                                           linf_clip=1.0),
                               encoder=registry.Identity(5),
                               integer_inputs=True)
    self.assertEqual(p.norm_threshold, 16 * 3)
    self.assertAlmostEqual(p.l2_sensitivity, 4 * math.sqrt(3.0))
    x = tf.constant([1.0, 0.0, -1.0, 1.0, 0.0], tf.float64)
    encoded, flags = p.client_encode(x, tf.constant([1, 2], tf.int64),
                                     tf.constant([3, 4], tf.int64))
    self.assertAllEqual(encoded['encoded'], np.mod([4, 0, -4, 4, 0], p.modulus))
    self.assertAllEqual(flags, [0, 0, 0])
    with self.assertRaisesRegex(ValueError, 'integer_inputs'):
      ddg.compute_parameters(5,
                             ddg.Request(l2_clip=1.0,
                                         noise_multiplier=0.0,
                                         expected_clients_per_round=4,
                                         bits=16,
                                         granularity=0.3),
                             encoder=registry.Identity(5),
                             integer_inputs=True)

  def test_more_clients_than_the_ring_was_sized_for_may_wrap(self):
    p = ddg_parameters.make(dim=64)
    seed = tf.constant([0, 0], tf.int64)
    zeros = {'encoded': tf.zeros([p.output_dim], tf.int64)}
    for n, wraps in ((10, False), (5, False), (11, True), (1000, True)):
      _, post = p.server_decode(zeros, tf.constant(n, tf.int64), seed)
      self.assertEqual(bool(post['sum_may_wrap']), wraps, n)

  def test_noise_free_round_trip_recovers_the_sum(self):
    # With no noise, only rounding (|error| < 1 per coordinate per client in
    # integer units, i.e. gamma * sqrt(d n) in l2) separates the estimate
    # from the sum.
    p = ddg_parameters.make(dim=300,
                            noise_multiplier=0.0,
                            bits=24,
                            expected_clients_per_round=5)
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=300) / 30 for _ in range(5)]
    seed = tf.constant([5, 6], tf.int64)
    total = sum(
        p.client_encode(tf.constant(x), seed, tf.constant([i, 0], tf.int64))[0]
        ['encoded'] for i, x in enumerate(xs))
    decoded, _ = p.server_decode({'encoded': total}, tf.constant(5, tf.int64),
                                 seed)
    error = np.linalg.norm(decoded.numpy() - np.sum(xs, axis=0))
    self.assertLess(error, p.gamma * math.sqrt(p.output_dim * 5))


class ParametersTest(parameterized.TestCase):

  def test_a_request_that_is_not_one_says_what_to_pass(self):
    with self.assertRaisesRegex(TypeError, r'distributed_discrete_gaussian'
                                r'.Request\('):
      ddg.compute_parameters(8, 1.0)
    # The request is validated when it is built, before any mechanism.
    with self.assertRaisesRegex(ValueError, 'bits'):
      ddg.Request(1.0, 1.0, 10, 40)

  def test_heuristic_fits_k_stddevs_in_the_ring(self):
    # Section 6: 2 k sigma_hat / gamma = 2^bits.
    p = ddg_parameters.make()
    sum_stddev = ddg.sum_stddev(p.scaled_l2_clip, p.scaled_local_stddev,
                                p.expected_clients_per_round, p.output_dim)
    self.assertAlmostEqual(2 * p.k_stddevs * sum_stddev / 2**p.bits,
                           1.0,
                           places=9)
    self.assertAlmostEqual(p.k_stddevs, 3.890591886, places=6)

  def test_sensitivity_is_the_integer_threshold(self):
    p = ddg_parameters.make()
    self.assertEqual(p.l2_sensitivity, math.sqrt(p.norm_threshold))
    self.assertLessEqual(
        p.l2_sensitivity**2,
        rounding.rounded_l2_norm_bound_squared(p.scaled_l2_clip, p.output_dim,
                                               p.beta))

  def test_local_noise_split(self):
    p = ddg_parameters.make(noise_multiplier=2.0,
                            l2_clip=3.0,
                            expected_clients_per_round=16)
    self.assertAlmostEqual(p.local_stddev, 2.0 * 3.0 / 4.0)
    self.assertAlmostEqual(p.scaled_local_stddev, p.local_stddev / p.gamma)
    # The central noise of the decoded sum is z c again.
    self.assertAlmostEqual(p.noise_stddev(), 2.0 * 3.0)

  def test_accepts_thirty_bits(self):
    p = ddg_parameters.make(bits=30, dim=1000, expected_clients_per_round=100)
    self.assertEqual(p.modulus, 2**30)

  @parameterized.named_parameters(
      ('bits_low', dict(bits=0), 'bits must be'),
      ('bits_high', dict(bits=31), 'bits must be'),
      ('clip', dict(l2_clip=0.0), 'l2_clip'),
      ('clip_nan', dict(l2_clip=float('nan')), 'l2_clip'),
      ('clip_huge', dict(l2_clip=1e300,
                         noise_multiplier=1e300), 'float64 range'),
      ('noise', dict(noise_multiplier=-1.0), 'noise_multiplier'),
      ('clients', dict(expected_clients_per_round=0),
       'expected_clients_per_round'),
      ('prob', dict(modclip_prob=1.0), 'modclip_prob'),
      # A denormal probability has k = inf (found by the fuzz test).
      ('prob_denormal', dict(modclip_prob=5e-324), 'modclip_prob'),
      ('beta', dict(beta=1.0), 'beta'),
      ('ring_too_small', dict(bits=3, expected_clients_per_round=100),
       r'bits=3 is too small .* Use bits >= 6'),
      ("noise_too_coarse", dict(bits=4, expected_clients_per_round=10),
       r'sigma/gamma = .* < 1/2.* Use bits >= '),
  )
  def test_refuses_bad_configurations(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      ddg_parameters.make(**kwargs)

  @parameterized.named_parameters(
      ('bits_float', dict(bits=16.0), 'bits must be an integer'),
      ('clients_bool', dict(expected_clients_per_round=True),
       'expected_clients_per_round'),
      ('clip_string', dict(l2_clip='1'), 'l2_clip'),
      ('noise_array', dict(noise_multiplier=np.array([1.0])),
       'noise_multiplier'), ('sampler', dict(noise_sampler=3), 'noise_sampler'))
  def test_refuses_wrong_types(self, kwargs, message):
    with self.assertRaisesRegex(TypeError, message):
      ddg_parameters.make(**kwargs)

  def test_noise_sampler_is_a_member_given_as_string_or_member(self):
    by_name = ddg.Request(1.0, 1.0, 10, 16, noise_sampler='exact')
    self.assertIs(by_name.noise_sampler, ddg.Sampler.EXACT)
    self.assertEqual(
        by_name, ddg.Request(1.0, 1.0, 10, 16, noise_sampler=ddg.Sampler.EXACT))
    self.assertIs(ddg_parameters.make().noise_sampler, ddg.Sampler.TABLE)
    with self.assertRaisesRegex(
        ValueError, r"noise_sampler must be one of \('table', 'exact'\), "
        r"got 'fast'"):
      ddg.Request(1.0, 1.0, 10, 16, noise_sampler='fast')

  def test_numpy_scalars_are_accepted(self):
    p = ddg_parameters.make(dim=np.int64(100),
                            bits=np.int32(16),
                            expected_clients_per_round=np.int64(10),
                            l2_clip=np.float32(1.0))
    self.assertEqual(p.bits, 16)
    self.assertIsInstance(p.dim, int)

  def test_suggested_bits_work(self):
    with self.assertRaisesRegex(ValueError, r'Use bits >= (\d+)') as cm:
      ddg_parameters.make(bits=4, expected_clients_per_round=10)
    import re
    suggested = int(re.search(r'Use bits >= (\d+)', str(cm.exception))[1])
    self.assertGreaterEqual(
        ddg_parameters.make(bits=suggested,
                            expected_clients_per_round=10).scaled_local_stddev,
        0.5)
