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

import _harness as harness  # (sets sys.path)

import numpy as np
import tensorflow as tf

from tff_ddp.mechanisms import binomial

TRIALS = (2**4, 2**8, 2**12, 2**16, 2**20)


def bernoulli_sum(probs, num_trials: int, seed):
  """Binomial(m, p) per element as the sum of m Bernoulli(p) trials: O(m)."""

  def body(i, total):
    u = tf.random.stateless_uniform(tf.shape(probs),
                                    tf.random.experimental.stateless_fold_in(
                                        seed, i),
                                    dtype=tf.float64)
    return i + 1, total + tf.cast(u < probs, tf.int64)

  _, total = tf.while_loop(
      lambda i, _: i < num_trials, body,
      (tf.constant(0, tf.int64), tf.zeros(tf.shape(probs), tf.int64)))
  return total


def _time(fn, probs, repeats):
  """Median seconds of `repeats` calls after a warm-up (trace) call."""
  seeds = iter([[0, 1]] + [[r + 2, 7] for r in range(repeats)])
  return harness.seconds_of(
      lambda: fn(probs, tf.constant(next(seeds), tf.int64)).numpy(), repeats)


def _ms(key):
  return lambda row: 'skipped' if row[key] is None else f'{row[key]:.1f}'


def run(elements=65536, repeats=5, max_seconds=30.0):
  """One row per m: ms per `elements` draws of each sampler."""
  rng = np.random.default_rng(0)
  probs = tf.constant(rng.uniform(0.25, 0.75, elements), tf.float64)
  samplers = {
      'm trials O(m)': bernoulli_sum,
      'exact rejection': binomial.sample_binomial
  }
  table = harness.Table(
      [('m', 'm', 'd')] + [(name, name, _ms(name)) for name in samplers],
      rows=[dict(m=m) for m in TRIALS],
      title=f'ms per {elements} elements (median of {repeats}; shared '
      '2-core machine, rough)')
  for name, sampler in samplers.items():
    previous = None
    for row in table.rows:
      m = row['m']
      if previous is not None and name.startswith('m trials'):
        # pylint: disable-next=unsubscriptable-object  # a tuple once set; checked for None above
        projected = previous[1] * m / previous[0]
        if projected > max_seconds:
          row[name] = None
          continue
      fn = tf.function(lambda p, s, m=m, sampler=sampler: sampler(p, m, s))
      seconds = _time(
          fn, probs,
          repeats if m <= 2**12 or not name.startswith('m trials') else 1)
      row[name] = 1e3 * seconds
      previous = (m, seconds)
  by_m = {row['m']: row for row in table.rows}
  for name in samplers:
    a, b = by_m[2**16][name], by_m[2**8][name]
    ratio = 'n/a' if a is None or b is None else f'{a / b:.2f}'
    table.notes.append(f'{name}: time(m=2^16) / time(m=2^8) = {ratio}')
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               elements='elements per call',
               repeats='timed calls per sampler and m',
               max_seconds='skip the O(m) sampler when projected above this')
