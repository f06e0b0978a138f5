"""Binomial samplers: ms per 65,536 elements against the number of trials m.

Compares m Bernoulli trials per element (`bernoulli_sum` below: m passes of
one uniform per element, O(m) -- what the cPBM mechanism did before the exact
sampler) with `binomial.sample_binomial` (rejection, O(1) expected per
element; the cPBM mechanism's sampler, re-exported as
`poisson_binomial.sample_binomial`) for m in {2^4, 2^8, 2^12, 2^16, 2^20},
and prints the m = 2^16 / m = 2^8 time ratio of each. Per-element probabilities are spread over [1/4, 3/4].
The O(m) sampler is skipped where its time, extrapolated linearly from
the previous m, would exceed --max-seconds.

Timings are wall-clock medians of --repeats calls of a `tf.function` after a
warm-up call (tracing excluded). On a shared machine, read them as rough.

  python benchmarks/binomial_bench.py [--elements 65536] [--repeats 5]
"""

import argparse
import statistics
import time

import _common  # pylint: disable=unused-import  (sets sys.path)

import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import binomial

TRIALS = (2**4, 2**8, 2**12, 2**16, 2**20)


def bernoulli_sum(probs, num_trials: int, seed):
  """Binomial(m, p) per element as the sum of m Bernoulli(p) trials: O(m)."""
  def body(i, total):
    u = tf.random.stateless_uniform(
        tf.shape(probs), tf.random.experimental.stateless_fold_in(seed, i),
        dtype=tf.float64)
    return i + 1, total + tf.cast(u < probs, tf.int64)
  _, total = tf.while_loop(
      lambda i, _: i < num_trials, body,
      (tf.constant(0, tf.int64), tf.zeros(tf.shape(probs), tf.int64)))
  return total


def _time(fn, probs, repeats):
  fn(probs, tf.constant([0, 1], tf.int64)).numpy()  # trace + warm up
  seconds = []
  for r in range(repeats):
    start = time.perf_counter()
    fn(probs, tf.constant([r + 2, 7], tf.int64)).numpy()
    seconds.append(time.perf_counter() - start)
  return statistics.median(seconds)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--elements', type=int, default=65536)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--max-seconds', type=float, default=30.0,
                      help='skip the O(m) sampler when projected above this')
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  probs = tf.constant(rng.uniform(0.25, 0.75, args.elements), tf.float64)
  samplers = {'m trials O(m)': bernoulli_sum,
              'exact rejection': binomial.sample_binomial}
  results = {name: {} for name in samplers}
  for name, sampler in samplers.items():
    previous = None
    for m in TRIALS:
      if previous is not None and name.startswith('m trials'):
        projected = previous[1] * m / previous[0]
        if projected > args.max_seconds:
          results[name][m] = None
          continue
      fn = tf.function(lambda p, s, m=m, sampler=sampler: sampler(p, m, s))
      seconds = _time(fn, probs, args.repeats if m <= 2**12 or not
                      name.startswith('m trials') else 1)
      results[name][m] = seconds
      previous = (m, seconds)
  print(f'ms per {args.elements} elements (median of {args.repeats}; '
        'shared 2-core machine, rough)')
  print(f'{"m":>9} | ' + ' | '.join(f'{n:>14}' for n in samplers))
  for m in TRIALS:
    cells = []
    for name in samplers:
      s = results[name][m]
      cells.append(f'{"skipped":>14}' if s is None else f'{1e3 * s:14.1f}')
    print(f'{m:>9} | ' + ' | '.join(cells))
  for name in samplers:
    a, b = results[name][2**16], results[name][2**8]
    ratio = 'n/a' if a is None or b is None else f'{a / b:.2f}'
    print(f'{name}: time(m=2^16) / time(m=2^8) = {ratio}')
  _common.end_workers()


if __name__ == '__main__':
  main()
