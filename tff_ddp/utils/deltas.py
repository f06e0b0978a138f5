"""The default delta of a run, and when a delta is too large to mean much.

(epsilon, delta)-DP with delta of order 1/N allows a mechanism that
publishes one of N users' data in the clear with probability delta: the
guarantee is void. A delta must be well below 1/N, the inverse population
(the users whose data the run may touch). The rule used everywhere here:

  default delta = min(1e-5, N^-1.1)

the usual 1e-5 where N is small, and below 1/N by a factor N^0.1 (at
least 2 from N = 1000 on: 1e-5 = 1/100000 there) where N is large, e.g.
EMNIST's 3400 writers: 1e-5 (the paper's 1/N is 2.9e-4); Stack Overflow's
342,477 users: 8.3e-7 (the paper's 1e-6). A delta above N^-1.1 given by a
user is kept, with a warning (`delta_warning`).
"""

import math
from typing import Optional

from tff_ddp.utils import checks

# The default's cap and exponent (module docstring).
DELTA_CAP = 1e-5
POPULATION_EXPONENT = 1.1
RULE = 'min(1e-5, N^-1.1)'


def largest_delta(population: int) -> float:
  """N^-1.1: the largest delta that is well below 1/N."""
  population = checks.integer(population, 'population', 1)
  return math.exp(-POPULATION_EXPONENT * math.log(population))


def default_delta(population: int) -> float:
  """min(1e-5, N^-1.1) for a population of N users."""
  return min(DELTA_CAP, largest_delta(population))


def delta_warning(delta: float,
                  population: int,
                  flag: str = '--delta') -> Optional[str]:
  """None if delta <= N^-1.1, else the words of a warning."""
  limit = largest_delta(population)
  if delta <= limit:
    return None
  return (f'{flag} {delta:.3g} is not well below 1/N = 1/{population} '
          f'(N^-1.1 = {limit:.3g}): a mechanism that publishes one user\'s '
          f'data in the clear with probability delta meets it, so the '
          f'epsilon guarantees little. The default is {RULE} = '
          f'{default_delta(population):.3g}.')
