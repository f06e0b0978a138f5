"""BatchedSum: the factory's round without TFF, bit for bit."""

import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow_federated as tff

from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.aggregators import Request
from tff_ddp.aggregators import simulation


@pytest.mark.slow
class BatchedSumTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('ddg_hadamard', lambda: DiscreteGaussianSumFactory.from_tff_arguments(
          2.0, 16, 16, 1.0, seed=3)),
      ('ddg_kashin',
       lambda: DiscreteGaussianSumFactory(Request(l2_clip=1.0,
                                                  noise_multiplier=2.0,
                                                  expected_clients_per_round=16,
                                                  bits=18),
                                          encoder='kashin',
                                          seed=4)),
      ('cpbm', lambda: PoissonBinomialSumFactory(1.0, 0.2, 64, 16, seed=5)))
  def test_reproduces_the_process_under_the_test_seed(self, make):
    factory = make()
    value_type = tff.StructWithPythonType(
        [tff.TensorType(np.float32, [7, 3]),
         tff.TensorType(np.float32, [5])], list)
    rng = np.random.default_rng(0)
    values = [[
        rng.normal(size=(7, 3)).astype(np.float32) * 0.2,
        rng.normal(size=5).astype(np.float32) * 0.2
    ] for _ in range(11)]
    process = factory.create(value_type)
    batched = simulation.BatchedSum(factory, value_type)
    flat = np.stack([np.concatenate([v[0].reshape(-1), v[1]]) for v in values
                    ]).astype(np.float64)
    state = process.initialize()
    for round_index in range(2):
      out = process.next(state, values)
      state = out.state
      decoded, post = batched(flat, round_index, factory._seed, 'factory')  # pylint: disable=protected-access  # tests a private part
      result = np.concatenate(
          [np.asarray(out.result[0]).reshape(-1),
           np.asarray(out.result[1])])
      # The process returns float32 of the same float64 decode.
      np.testing.assert_array_equal(result, decoded.astype(np.float32))
      for key, value in post.items():
        np.testing.assert_array_equal(out.measurements[key], value)

  def test_independent_streams_have_the_noise_variance(self):
    # 16 clients sending zeros: the decoded sum is pure noise with
    # per-coordinate variance <= (z C)^2 = 4 (a discrete Gaussian's variance
    # is at most its parameter's square) and > 0.95 of it at this scale.
    # Over 64 coordinates x 40 rounds the sample variance has relative
    # stddev sqrt(2/2560) = 0.028: bounds at 0.95 * 4 - 4 sd and 4 + 4 sd.
    factory = DiscreteGaussianSumFactory.from_tff_arguments(2.0, 16, 20, 1.0)
    value_type = tff.TensorType(np.float32, [64])
    batched = simulation.BatchedSum(factory, value_type)
    samples = np.stack(
        [batched(np.zeros((16, 64)), r, 99)[0] for r in range(40)])
    variance = samples.var()
    self.assertLess(variance, 4.0 * (1 + 4 * 0.028))
    self.assertGreater(variance, 0.95 * 4.0 * (1 - 4 * 0.028))
    # Different rounds and seeds give different noise.
    self.assertFalse(
        np.array_equal(
            batched(np.zeros((16, 64)), 0, 1)[0],
            batched(np.zeros((16, 64)), 0, 2)[0]))

  @parameterized.named_parameters(
      ('ddg', lambda rate: DiscreteGaussianSumFactory.from_tff_arguments(
          1.0, 8, 18, 1.0, client_sampling_rate=rate)),
      ('cpbm', lambda rate: PoissonBinomialSumFactory(
          1.0, 0.2, 64, 8, client_sampling_rate=rate)))
  def test_rate_one_is_the_unsampled_round(self, make):
    # Every coin keeps its value: the self-sampled path (kept rows encoded,
    # the rest's noise shares drawn together; no rest here) gives the
    # unsampled round's output bit for bit on the same streams.
    value_type = tff.TensorType(np.float32, [6])
    values = np.random.default_rng(1).normal(size=(8, 6)) * 0.3
    sampled = simulation.BatchedSum(make(1.0), value_type)
    plain = simulation.BatchedSum(make(None), value_type)
    for round_index in range(2):
      np.testing.assert_array_equal(
          sampled(values, round_index, 5)[0],
          plain(values, round_index, 5)[0])

  def test_self_sampled_sum_has_the_sampling_and_noise_moments(self):
    # N = 200 clients each holding v (|v| = 0.5), rate q = 0.1, central
    # noise z C = 0.5. Along v: S.v/|v| = K |v| + g, K ~ Binomial(N, q),
    # g ~ the noise (variance (z C)^2 = 0.25, the rounding's variance
    # < 2^-10 at these bits is left out): mean q N |v| = 10, variance
    # N q (1 - q) |v|^2 + 0.25 = 4.75. Across v: noise only, 0.25. Over
    # R = 300 rounds: the mean has stddev sqrt(4.75 / 300) = 0.126 and a
    # sample variance relative stddev ~ sqrt(2 / 299) = 0.082 (both
    # laws are near-Gaussian here): 4 sd bounds.
    n, q, dim, rounds = 200, 0.1, 8, 300
    # (noise_multiplier 0.5, expected clients n, bits 20, l2_clip 1.)
    factory = DiscreteGaussianSumFactory.from_tff_arguments(
        0.5, n, 20, 1.0, client_sampling_rate=q)
    batched = simulation.BatchedSum(factory, tff.TensorType(np.float32, [dim]))
    v = np.zeros(dim)
    v[0] = 0.5
    sums = np.stack(
        [batched(np.tile(v, (n, 1)), r, 11)[0] for r in range(rounds)])
    along, across = sums[:, 0], sums[:, 1:]
    self.assertLess(abs(along.mean() - 10.0), 4 * math.sqrt(4.75 / rounds))
    self.assertLess(abs(along.var(ddof=1) / 4.75 - 1), 4 * 0.082)
    # 7 x 300 noise-only samples: relative stddev sqrt(2 / 2100) = 0.031.
    self.assertLess(abs(across.var() / 0.25 - 1), 4 * 0.031)

  def test_refused(self):
    value_type = tff.TensorType(np.float32, [4])
    with self.assertRaisesRegex(TypeError, 'MechanismSumFactory'):
      simulation.BatchedSum(object(), value_type)
    sampled = simulation.BatchedSum(
        DiscreteGaussianSumFactory.from_tff_arguments(1.0,
                                                      4,
                                                      16,
                                                      1.0,
                                                      client_sampling_rate=0.5),
        value_type)
    with self.assertRaisesRegex(ValueError, 'client_sampling_rate'):
      sampled(np.zeros((3, 4)), 0, 1, 'factory')
    batched = simulation.BatchedSum(
        DiscreteGaussianSumFactory.from_tff_arguments(1.0, 4, 16, 1.0),
        value_type)
    with self.assertRaisesRegex(ValueError, 'values must be'):
      batched(np.zeros((3, 5)), 0, 1)
    with self.assertRaisesRegex(ValueError, 'derive'):
      batched(np.zeros((3, 4)), 0, 1, 'fingerprint')
