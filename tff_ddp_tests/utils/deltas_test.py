"""The default delta rule and its warning."""

from absl.testing import parameterized

from tff_ddp.utils import deltas


class DeltasTest(parameterized.TestCase):

  @parameterized.parameters(
      (1, 1e-5),
      (30, 1e-5),
      (3400, 1e-5),
      # N^-1.1 below 1e-5 from N = 10^(5/1.1) ~ 35,000 on.
      (342477, 342477**-1.1),
      (10**6, 10**-6.6))
  def test_default_is_min_of_1e5_and_n_to_the_minus_1_1(self, n, expected):
    self.assertAlmostEqual(deltas.default_delta(n),
                           expected,
                           delta=1e-12 * expected)
    # Always below 1/N, by a factor of at least min(N^0.1, 1e5/N).
    self.assertLess(deltas.default_delta(n), 1.0 / n if n > 1 else 1.0)

  def test_warning(self):
    # tff-ddp train's old default for 30 clients: 1/N.
    text = deltas.delta_warning(1 / 30, 30)
    self.assertIn('--delta 0.0333 is not well below 1/N = 1/30', text)
    self.assertIn('min(1e-5, N^-1.1) = 1e-05', text)
    self.assertIsNone(deltas.delta_warning(deltas.default_delta(30), 30))
    self.assertIsNone(deltas.delta_warning(30**-1.1, 30))
    self.assertIsNotNone(deltas.delta_warning(1e-6, 342477))

  def test_bad_population(self):
    with self.assertRaisesRegex(ValueError, 'population'):
      deltas.default_delta(0)
