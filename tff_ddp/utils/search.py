"""Searches for the boundary of a monotone predicate over the reals.

One home for the bisection that several calibrations run on a condition
that holds on one side of a threshold and fails on the other (the quantile
calibration's largest noise the ring holds, the budget split's least
reachable scale). The integer counterpart, for client counts, is
`tff_ddp.mechanisms.base.largest_count`.
"""

from typing import Callable


def boundary(holds: Callable[[float], bool], good: float, bad: float,
             rel_tol: float) -> float:
  """The last point where `holds` is true, between `good` and `bad`.

  `holds(good)` is true and `holds(bad)` false (either may be the larger);
  `holds` is monotone between them (true up to a threshold, false beyond
  it, in the direction from good to bad). Bisection at the midpoints
  0.5 (good + bad) until the two ends are within `rel_tol` of the larger
  one's magnitude; the result is the good end, so `holds(result)` is true.

  For example, the largest x with x * x <= 2 between 1 and 2:
  boundary(lambda x: x * x <= 2, 1.0, 2.0, 1e-12) is within 2e-12 of
  sqrt(2), from below.
  """
  while abs(bad - good) > rel_tol * max(abs(good), abs(bad)):
    middle = 0.5 * (good + bad)
    if holds(middle):
      good = middle
    else:
      bad = middle
  return good
