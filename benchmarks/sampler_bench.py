"""Discrete Gaussian samplers: ms per 65,536 samples, same run.

* exact: `discrete_gaussian.sample_discrete_gaussian` (CKS rejection sampling
  in exact int64 arithmetic; N_Z(0, s) conditioned on |x| <= x_max, excluded
  mass < e^-1000).
* table: `discrete_gaussian_table.sample_discrete_gaussian_table` (alias
  method, same s, TV distance <= `tv_distance_bound(scale)` < 2^-231).
* TF Privacy: `discrete_gaussian_utils.sample_discrete_gaussian` with the
  integer scale ceil(scale), as TFF's DDG query calls it (so its variance is
  ceil(scale)^2, not s; stateful randomness, float acceptance probabilities).

Each sampler runs inside its own tf.function (seed as an argument where it
takes one), two warm-up calls, then --reps calls interleaved round-robin
across the samplers (fairer on a shared machine); the median is reported,
including the `.numpy()` copy. "build" is the alias-table build time for the
scale (host side, once per scale per process, cache cleared first).

  .venv/bin/python benchmarks/sampler_bench.py [--reps 15] [--n 65536]
"""

import argparse
import math
import statistics
import time

import _common  # pylint: disable=unused-import  # sets sys.path and the worker guard

_SCALES = (0.7, 3.3, 50.0, 785.0, 4000.0)


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--reps', type=int, default=15)
  parser.add_argument('--n', type=int, default=65536)
  parser.add_argument('--scales', type=float, nargs='*', default=_SCALES)
  args = parser.parse_args()

  import tensorflow as tf
  from tensorflow_privacy.privacy.dp_query import discrete_gaussian_utils
  from tff_ddp.mechanisms import discrete_gaussian as dg
  from tff_ddp.mechanisms import discrete_gaussian_table as dgt

  n = args.n
  seed = tf.constant([1, 2], tf.int64)
  rows = []
  for scale in args.scales:
    supported = scale <= dgt.max_supported_scale()
    build = table = None
    if supported:
      dgt._cached_table.cache_clear()  # pylint: disable=protected-access  # resets private state between cases
      start = time.perf_counter()
      table = dgt.alias_table(scale)
      build = time.perf_counter() - start

    samplers = {
        'exact': (tf.function(
            lambda s, sc=scale: dg.sample_discrete_gaussian([n], sc, s)),
                  (seed,)),
        'tfp': (tf.function(lambda sc=math.ceil(scale): discrete_gaussian_utils.
                            sample_discrete_gaussian(sc, [n], tf.int64)), ()),
    }
    if supported:
      samplers['table'] = (tf.function(
          lambda s, sc=scale: dgt.sample_discrete_gaussian_table([n], sc, s)),
                           (seed,))
    for fn, fn_args in samplers.values():
      fn(*fn_args).numpy()
      fn(*fn_args).numpy()
    times = {name: [] for name in samplers}
    for _ in range(args.reps):
      for name, (fn, fn_args) in samplers.items():
        start = time.perf_counter()
        fn(*fn_args).numpy()
        times[name].append(time.perf_counter() - start)
    ms = {name: 1e3 * statistics.median(v) for name, v in times.items()}
    rows.append((scale, ms, build, table))
    print(f'done scale {scale}', flush=True)

  print(f'\nms per {n:,} samples, median of {args.reps} calls inside '
        'tf.function after warm-up (same run; a shared 2-core machine gives '
        'noisy absolute numbers, compare within a row)\n')
  header = (f'{"scale":>8} {"exact":>8} {"table":>8} {"TFP":>8} '
            f'{"table/TFP":>9} {"exact/TFP":>9} {"build s":>8} '
            f'{"columns":>8} {"TV bound":>9}')
  print(header)
  print('-' * len(header))
  for scale, ms, build, table in rows:
    if table is None:
      print(f'{scale:>8g} {ms["exact"]:>8.2f} {"-":>8} {ms["tfp"]:>8.2f} '
            f'{"-":>9} {ms["exact"] / ms["tfp"]:>9.2f} {"-":>8} {"-":>8} '
            f'{"-":>9}  (above the table cap)')
      continue
    bound = dgt.tv_distance_bound(scale)
    print(f'{scale:>8g} {ms["exact"]:>8.2f} {ms["table"]:>8.2f} '
          f'{ms["tfp"]:>8.2f} {ms["table"] / ms["tfp"]:>9.2f} '
          f'{ms["exact"] / ms["tfp"]:>9.2f} {build:>8.3f} '
          f'{2**table.log2_columns:>8d} 2^{math.log2(bound):>6.1f}')


if __name__ == '__main__':
  try:
    main()
  finally:
    _common.end_workers()
