"""Distributed Skellam vs the DDG at equal epsilon, and vs TFF's Skellam.

Same run, same data: d = 2^16, 100 clients with vectors on the unit sphere,
l2 clip 1, beta = exp(-1/2), one round's epsilon at delta = 1e-5 against the
server (zero-out neighbours). For each target epsilon the noise multiplier of
each mechanism is calibrated to it (`tff_ddp.aggregators.calibrated`, the
factories' own events: the Skellam RDP bound and the DDG's Theorem 5), then
R rounds run through the factories in TFF's C++ test context; MSE is
||estimate - sum||^2 / d averaged over rounds. The central Gaussian row uses
TFF's `DifferentiallyPrivateFactory.gaussian_fixed` at the Skellam's noise
multiplier (the utility the distributed noise tries to match). With d = 2^16
coordinates per round the MSE ratios' standard error is about
sqrt(2 / (d R)) * sqrt(2) (0.7% at R = 3).

Timing rows (unless --no-timing): seconds per round of our Skellam factory
and TFF's `DistributedDpSumFactory(mechanism='distributed_skellam',
rotation_type='hd')` at noise multiplier 1, 16 bits, the first round
(tracing) excluded; and the noise of one client alone (2 x d Poisson draws
at the scale of that configuration) from our exact sampler and from TF's
`tf.random.stateless_poisson` (float rejection, not exact), both in a
`tf.function`, median of 10 calls.

  .venv/bin/python benchmarks/skellam_vs_ddg.py [--rounds 3] [--eps 2 8]
"""

import argparse
import math
import statistics

import _common
import numpy as np


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--clients', type=int, default=100)
  parser.add_argument('--dim', type=int, default=2**16)
  parser.add_argument('--bits', type=int, default=16)
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--eps', type=float, nargs='+', default=[2.0, 8.0])
  parser.add_argument('--delta', type=float, default=1e-5)
  parser.add_argument('--no-timing', dest='timing', action='store_false')
  args = parser.parse_args()

  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.aggregators import calibrated  # pylint: disable=g-import-not-at-top
  from tff_ddp.aggregators import SkellamSumFactory  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()

  rng = np.random.default_rng(0)
  data = rng.normal(size=(args.clients, args.dim))
  data /= np.linalg.norm(data, axis=1, keepdims=True)
  data = data.astype(np.float32)
  true_sum = data.astype(np.float64).sum(0)
  value_type = tff.TensorType(np.float32, [args.dim])
  common = dict(expected_clients_per_round=args.clients, bits=args.bits,
                l2_clip=1.0, beta=math.exp(-0.5))

  def mse(results, scale=1.0):
    return float(np.mean([np.mean((np.asarray(r, np.float64) * scale
                                   - true_sum) ** 2) for r in results]))

  rows, timing = [], []
  try:
    for eps in args.eps:
      row = {'eps': eps}
      for name, mechanism in (('ddg', 'distributed_dgauss'),
                              ('skellam', 'distributed_skellam')):
        cal = calibrated.discrete_gaussian(
            value_type, eps, args.delta, mechanism=mechanism, **common)
        results, _ = _common.time_rounds(cal.factory.create(value_type),
                                         list(data), args.rounds)
        row[name] = (cal.value, cal.epsilon, mse(results))
      gaussian = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          noise_multiplier=row['skellam'][0], clients_per_round=args.clients,
          clip=1.0)
      results, _ = _common.time_rounds(gaussian.create(value_type),
                                       list(data), args.rounds)
      row['gauss'] = mse(results, args.clients)  # it returns the mean
      rows.append(row)
    if args.timing:
      both = dict(common, noise_multiplier=1.0, beta=0.0)
      factories = {
          'tff_ddp SkellamSumFactory': SkellamSumFactory(**both),
          'TFF DistributedDpSumFactory (skellam, hd)':
              tff.aggregators.distributed_dp.DistributedDpSumFactory(
                  mechanism='distributed_skellam', rotation_type='hd',
                  **both),
      }
      for name, factory in factories.items():
        _, seconds = _common.time_rounds(factory.create(value_type),
                                         list(data), args.rounds + 1)
        timing.append((name, statistics.median(seconds[1:])))
      sampler = _sampler_timing(
          factory=factories['tff_ddp SkellamSumFactory'],
          value_type=value_type)
  finally:
    _common.end_workers()

  se = math.sqrt(2.0 / (args.dim * args.rounds)) * math.sqrt(2.0)
  print(f'\n{args.clients} clients, d = {args.dim}, {args.bits} bits, '
        f'{args.rounds} rounds; one round at delta = {args.delta} against the '
        f'server (zero-out); MSE ratio standard error ~ {se:.3f}\n')
  print(f'{"target":>6s} {"z DDG":>7s} {"z Sk":>7s} {"MSE DDG":>10s} '
        f'{"MSE Skellam":>11s} {"MSE Gauss(z Sk)":>15s} {"Sk/DDG":>7s} '
        f'{"Sk/Gauss":>8s}')
  for r in rows:
    z_d, _, m_d = r['ddg']
    z_s, _, m_s = r['skellam']
    print(f'{r["eps"]:6.2f} {z_d:7.4f} {z_s:7.4f} {m_d:10.4e} {m_s:11.4e} '
          f'{r["gauss"]:15.4e} {m_s / m_d:7.3f} {m_s / r["gauss"]:8.3f}')
  if timing:
    print('\nseconds per round (median, noise multiplier 1, beta 0)')
    for name, sec in timing:
      print(f'  {name:45s} {sec:8.2f}')
    print(f'  ratio ours / TFF: {timing[0][1] / timing[1][1]:.2f}')
    mean, ours, tf_time = sampler
    print(f'\none client\'s noise, 2 x {args.dim} Poisson draws of mean '
          f'{mean:.6g} (ms, median of 10)')
    print(f'  exact sampler (tff_ddp.mechanisms.poisson) {ours * 1e3:8.1f}')
    print(f'  tf.random.stateless_poisson (inexact)      {tf_time * 1e3:8.1f}')
    print(f'  ratio: {ours / tf_time:.2f}')


def _sampler_timing(factory, value_type):
  """(Poisson mean, seconds of our Skellam noise, seconds of TF's two
  Poisson draws) for one client of `factory`'s mechanism."""
  import time  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_ddp.mechanisms import poisson  # pylint: disable=g-import-not-at-top
  mechanism = factory.mechanism(value_type)
  mean, size = mechanism.poisson_mean, mechanism.output_dim
  ours = tf.function(lambda s: poisson.sample_skellam([size], mean, s))
  theirs = tf.function(lambda s: tf.random.stateless_poisson(
      [2, size], s, tf.constant(mean, tf.float64), dtype=tf.int64))

  def median_seconds(fn):
    fn(tf.constant([0, 0], tf.int64))
    times = []
    for i in range(10):
      start = time.perf_counter()
      fn(tf.constant([1, i], tf.int64))
      times.append(time.perf_counter() - start)
    return statistics.median(times)

  return mean, median_seconds(ours), median_seconds(theirs)


if __name__ == '__main__':
  main()
