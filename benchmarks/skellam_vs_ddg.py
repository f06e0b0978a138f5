"""Distributed Skellam: speed vs TFF's Skellam round, utility at equal epsilon.

Same run, same data: 100 clients with vectors on the unit sphere, l2 clip 1.

Speed (unless --no-timing): d = 2^16 (--dim), noise multiplier 1, beta 0,
at each of --bits: our `SkellamSumFactory` with its default sampler (the
certified alias table, `tff_ddp.mechanisms.skellam_table`), ours with
noise_sampler='exact' (the exact Poisson sampler), and TFF's
`DistributedDpSumFactory(mechanism='distributed_skellam',
rotation_type='hd')`, round-robin (one round of each in turn, --rounds
times, after one untimed round each for tracing), in TFF's C++ test context.
Per round: wall seconds and CPU seconds of this process plus its TFF
workers; medians. The MSE column is ||estimate - sum||^2 / d averaged over
the timed rounds; the table and the exact sampler draw the same law up to
TV < 2^-231 per sample, so their MSE ratio must be 1 within its sampling
error: each round's MSE averages d squared coordinate errors (noise plus
rounding, near Gaussian), so its relative sd is sqrt(2 / d) and the ratio
of two independent R-round means has relative sd sqrt(2 / d) sqrt(2 / R);
the check allows 4 of those (fails for a correct sampler with probability
~6e-5, normal approximation).

Noise alone: one client's noise (d coordinates) at the Poisson mean of the
16-bit configuration: the table, the exact sampler, and TF's
`tf.random.stateless_poisson` (float rejection, not exact), in a
`tf.function`, median of 10 calls.

Utility (unless --no-utility): for each target epsilon (one round at delta
against the server, zero-out), the noise multiplier of the DDG and of the
Skellam calibrated to it (`tff_ddp.aggregators.calibrated`), --rounds rounds
each, MSE of the sum; TFF's `DifferentiallyPrivateFactory.gaussian_fixed` at
the Skellam's multiplier is the central reference.

  .venv/bin/python benchmarks/skellam_vs_ddg.py [--bits 16 18] [--rounds 3]
"""

import math
import statistics

import _harness as harness
import numpy as np


def _data(clients, dim):
  rng = np.random.default_rng(0)
  data = rng.normal(size=(clients, dim))
  data /= np.linalg.norm(data, axis=1, keepdims=True)
  return data.astype(np.float32)


def _mse(result, true_sum, scale=1.0):
  return float(np.mean((np.asarray(result, np.float64) * scale - true_sum)**2))


def _speed(clients, dim, bits_list, rounds):
  """The speed table: three processes per bits, round-robin."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import Request
  from tff_ddp.aggregators import SkellamSumFactory
  data = _data(clients, dim)
  true_sum = data.astype(np.float64).sum(0)
  value_type = tff.TensorType(np.float32, [dim])
  table = harness.Table(
      [('bits', 'bits', 'd'), ('name', 'aggregator', 's'),
       ('wall', 's/round', '.3f'), ('cpu', 'CPU s/round', '.3f'),
       ('ratio', 'CPU / TFF', '.2f'), ('mse', 'MSE(sum)', '.4g')],
      title=f'Seconds per round, d = {dim}, {clients} clients, noise '
      f'multiplier 1, {rounds} timed rounds (medians), round-robin')
  for bits in bits_list:
    common = dict(noise_multiplier=1.0,
                  expected_clients_per_round=clients,
                  bits=bits,
                  l2_clip=1.0,
                  beta=0.0)
    factories = {
        'ours, table (default)':
            SkellamSumFactory.from_tff_arguments(**common),
        'ours, exact':
            SkellamSumFactory(Request(**common, noise_sampler='exact')),
        'TFF DistributedDpSumFactory (skellam, hd)':
            tff.aggregators.distributed_dp.DistributedDpSumFactory(
                mechanism='distributed_skellam', rotation_type='hd', **common),
    }
    processes, states = {}, {}
    for name, factory in factories.items():
      processes[name] = factory.create(value_type)
      state = processes[name].initialize()
      states[name] = processes[name].next(state, list(data)).state  # trace
    times = {name: [] for name in factories}
    errors = {name: [] for name in factories}
    for _ in range(rounds):
      for name, process in processes.items():
        with harness.timed() as t:
          out = process.next(states[name], list(data))
        states[name] = out.state
        times[name].append(t)
        errors[name].append(_mse(out.result, true_sum))
    tff_cpu = statistics.median(
        t.cpu + t.workers_cpu for t in times[list(factories)[2]])
    for name in factories:
      cpu = statistics.median(t.cpu + t.workers_cpu for t in times[name])
      table.add(bits=bits,
                name=name,
                wall=statistics.median(t.wall for t in times[name]),
                cpu=cpu,
                ratio=cpu / tff_cpu,
                mse=float(np.mean(errors[name])),
                restarted=any(t.workers_changed for t in times[name]))
    ours, exact = (float(np.mean(errors[n])) for n in list(factories)[:2])
    tolerance = 4 * math.sqrt(2 / dim) * math.sqrt(2 / rounds)
    ok = abs(ours / exact - 1) <= tolerance
    table.failed |= not ok
    table.notes.append(
        f'{bits} bits: MSE table / exact = {ours / exact:.4f} (allowed 1 +- '
        f'{tolerance:.4f}: {"ok" if ok else "FAILED"}); CPU ours (table) / '
        f'TFF = {table.rows[-3]["ratio"]:.2f} (target <= 0.8)')
  return table


def _noise(dim, bits, clients, repeats=10):
  """One client's noise: table, exact, TF's inexact Poisson (ms)."""
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_ddp.aggregators import SkellamSumFactory
  from tff_ddp.mechanisms import poisson
  from tff_ddp.mechanisms import skellam_table
  mechanism = SkellamSumFactory.from_tff_arguments(
      noise_multiplier=1.0,
      expected_clients_per_round=clients,
      bits=bits,
      l2_clip=1.0).mechanism(tff.TensorType(np.float32, [dim]))
  mean, size = mechanism.poisson_mean, mechanism.output_dim
  built = skellam_table.alias_table(mean)
  fns = {
      'table (skellam_table)':
          lambda s: skellam_table.sample_skellam_table([size], mean, s),
      'exact (poisson.sample_skellam)':
          lambda s: poisson.sample_skellam([size], mean, s),
      'tf.random.stateless_poisson x 2 (inexact)':
          lambda s: tf.random.stateless_poisson(
              [2, size], s, tf.constant(mean, tf.float64), dtype=tf.int64),
  }
  table = harness.Table(
      [('name', 'sampler', 's'), ('ms', 'ms', '.2f'),
       ('ratio', '/ table', '.2f')],
      title=f'One client\'s noise, {size} coordinates, Poisson mean '
      f'{mean:.6g} ({bits} bits), median of {repeats}')
  counter = iter(range(10**6))
  first = None
  for name, fn in fns.items():
    graph = tf.function(fn)
    ms = 1e3 * harness.seconds_of(
        lambda g=graph: g(tf.constant([1, next(counter)], tf.int64)), repeats)
    first = first or ms
    table.add(name=name, ms=ms, ratio=ms / first)
  table.notes.append(
      f'table: t = {built.t}, 2^{built.log2_columns} columns, '
      f'{built.nbytes / 2**20:.1f} MiB, built in {built.build_seconds:.2f} s '
      '(once per process and mean)')
  return table


def _utility(clients, dim, bits, rounds, epsilons, delta):
  """MSE at equal epsilon: DDG, Skellam (default sampler), Gaussian."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import calibrated
  data = _data(clients, dim)
  true_sum = data.astype(np.float64).sum(0)
  value_type = tff.TensorType(np.float32, [dim])
  common = dict(expected_clients_per_round=clients,
                bits=bits,
                l2_clip=1.0,
                beta=math.exp(-0.5))
  table = harness.Table(
      [('eps', 'target ε', 'g'), ('z_ddg', 'z DDG', '.4f'),
       ('z_sk', 'z Skellam', '.4f'), ('sk_ddg', 'MSE Skellam / DDG', '.3f'),
       ('sk_gauss', 'MSE Skellam / Gaussian at z', '.3f')],
      title=f'MSE at equal ε (one round, δ = {delta}, server, zero-out), '
      f'{bits} bits, beta = exp(-1/2), {rounds} rounds')
  for eps in epsilons:
    row = {'eps': eps}
    for key, mechanism in (('ddg', 'distributed_dgauss'),
                           ('sk', 'distributed_skellam')):
      cal = calibrated.discrete_gaussian(value_type,
                                         eps,
                                         delta,
                                         mechanism=mechanism,
                                         **common)
      results, _ = harness.time_rounds(cal.factory.create(value_type),
                                       list(data), rounds)
      row['z_' + key] = cal.value
      row['mse_' + key] = float(np.mean([_mse(r, true_sum) for r in results]))
    gaussian = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=row['z_sk'], clients_per_round=clients, clip=1.0)
    results, _ = harness.time_rounds(gaussian.create(value_type), list(data),
                                     rounds)
    row['mse_gauss'] = float(
        np.mean([_mse(r, true_sum, clients) for r in results]))  # it is a mean
    table.add(sk_ddg=row['mse_sk'] / row['mse_ddg'],
              sk_gauss=row['mse_sk'] / row['mse_gauss'],
              **row)
  se = math.sqrt(2.0 / (dim * rounds)) * math.sqrt(2.0)
  table.notes.append(f'MSE ratio standard error ~ {se:.3f}')
  return table


def run(clients=100,
        dim=2**16,
        bits=(16, 18),
        rounds=3,
        epsilons=(2.0, 8.0),
        delta=1e-5,
        timing=True,
        noise=True,
        utility=True):
  tables = []
  if timing:
    tables.append(_speed(clients, dim, bits, rounds))
  if noise:
    tables.append(_noise(dim, bits[0], clients))
  if utility:
    tables.append(_utility(clients, dim, bits[0], rounds, epsilons, delta))
  return tables


# Each parameter's help (`_harness.main` builds the command line from it).
_HELP = {
    'clients': 'clients per round',
    'dim': 'coordinates per client',
    'bits': 'ring bits (speed rows: each)',
    'rounds': 'timed rounds (after one untimed round each)',
    'epsilons': 'target epsilons of the utility rows',
    'delta': 'delta',
    'timing': 'the speed rows (--no-timing: skip)',
    'noise': 'the one-client noise rows (--no-noise: skip)',
    'utility': 'the utility rows (--no-utility: skip)'
}

if __name__ == '__main__':
  harness.main(run, __doc__, tff=True, **_HELP)
