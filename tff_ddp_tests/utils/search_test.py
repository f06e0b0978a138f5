"""search.boundary: the last point of a monotone predicate, from either side."""

import math

from absl.testing import parameterized

from tff_ddp.utils import search


class BoundaryTest(parameterized.TestCase):

  @parameterized.parameters((1e-4,), (1e-13,))
  def test_largest_point_below_a_threshold(self, rel_tol):
    # holds up to sqrt(2): the result holds and is within rel_tol * 2 (the
    # larger end's magnitude bounds every later bracket) of the threshold.
    result = search.boundary(lambda x: x * x <= 2.0, 1.0, 2.0, rel_tol)
    self.assertLessEqual(result * result, 2.0)
    self.assertLess(math.sqrt(2.0) - result, 2.0 * rel_tol)

  def test_least_point_above_a_threshold(self):
    # good above, bad below (a least reachable scale): the result is the
    # good end, at or above the threshold.
    result = search.boundary(lambda x: x >= 0.3, 1.0, 0.0, 1e-6)
    self.assertGreaterEqual(result, 0.3)
    self.assertLess(result - 0.3, 1e-6)

  def test_brute_force_on_a_grid(self):
    # Every threshold on a grid of 64 steps of 1/64 (exact binary
    # fractions): the bisection's midpoints are grid points down to 2^-6,
    # so with the tolerance below one step the boundary is the threshold.
    for k in range(1, 64):
      threshold = k / 64
      result = search.boundary(lambda x, t=threshold: x <= t, 0.0, 1.0, 1 / 128)
      self.assertEqual(result, threshold)
