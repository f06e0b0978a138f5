"""BatchedSum: the factory's round without TFF, bit for bit."""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow_federated as tff

from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.aggregators import simulation
from tff_ddp_tests import harness


@pytest.mark.slow
class BatchedSumTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('ddg_hadamard', lambda: DiscreteGaussianSumFactory(
          2.0, 16, 16, 1.0, seed=3)),
      ('ddg_kashin', lambda: DiscreteGaussianSumFactory(
          2.0, 16, 18, 1.0, encoder='kashin', seed=4)),
      ('cpbm', lambda: PoissonBinomialSumFactory(
          1.0, 0.2, 64, 16, seed=5)))
  def test_reproduces_the_process_under_the_test_seed(self, make):
    factory = make()
    value_type = tff.StructWithPythonType(
        [tff.TensorType(np.float32, [7, 3]), tff.TensorType(np.float32, [5])],
        list)
    rng = np.random.default_rng(0)
    values = [[rng.normal(size=(7, 3)).astype(np.float32) * 0.2,
               rng.normal(size=5).astype(np.float32) * 0.2]
              for _ in range(11)]
    process = factory.create(value_type)
    batched = simulation.BatchedSum(factory, value_type)
    flat = np.stack([np.concatenate([v[0].reshape(-1), v[1]])
                     for v in values]).astype(np.float64)
    state = process.initialize()
    for round_index in range(2):
      out = process.next(state, values)
      state = out.state
      decoded, post = batched(flat, round_index, factory._seed, 'factory')  # pylint: disable=protected-access
      result = np.concatenate([np.asarray(out.result[0]).reshape(-1),
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
    factory = DiscreteGaussianSumFactory(2.0, 16, 20, 1.0)
    value_type = tff.TensorType(np.float32, [64])
    batched = simulation.BatchedSum(factory, value_type)
    samples = np.stack([batched(np.zeros((16, 64)), r, 99)[0]
                        for r in range(40)])
    variance = samples.var()
    self.assertLess(variance, 4.0 * (1 + 4 * 0.028))
    self.assertGreater(variance, 0.95 * 4.0 * (1 - 4 * 0.028))
    # Different rounds and seeds give different noise.
    self.assertFalse(np.array_equal(batched(np.zeros((16, 64)), 0, 1)[0],
                                    batched(np.zeros((16, 64)), 0, 2)[0]))

  def test_refused(self):
    value_type = tff.TensorType(np.float32, [4])
    with self.assertRaisesRegex(TypeError, 'MechanismSumFactory'):
      simulation.BatchedSum(object(), value_type)
    with self.assertRaisesRegex(ValueError, 'client_sampling_rate'):
      simulation.BatchedSum(DiscreteGaussianSumFactory(
          1.0, 4, 16, 1.0, client_sampling_rate=0.5), value_type)
    batched = simulation.BatchedSum(DiscreteGaussianSumFactory(
        1.0, 4, 16, 1.0), value_type)
    with self.assertRaisesRegex(ValueError, 'values must be'):
      batched(np.zeros((3, 5)), 0, 1)
    with self.assertRaisesRegex(ValueError, 'derive'):
      batched(np.zeros((3, 4)), 0, 1, 'fingerprint')


if __name__ == '__main__':
  harness.main()
