"""What a client's kernel-entropy noise seed costs a TFF round.

Every client of a tff_ddp factory without `seed=`/`entropy=` draws its noise
seed with `tff_ddp.utils.entropy.os_entropy_seed` inside its client
computation (a read of /proc/sys/kernel/random/uuid). This times one
federated round in TFF's C++ test context in which each of --clients clients
one-hot encodes a value into 64 bins, adds a bit of a seed (so the seed is
computed), and the server takes the secure sum; the seed is

  floor       a constant (no entropy: the executor's floor for this round)
  one read    `os_entropy_seed()` (one UUID, 122 kernel bits)
  two reads   the former seed: two UUIDs XORed (128 kernel bits)

each --reps times, interleaved, after a warm-up round of 10 clients.

  PYTHONPATH=$PWD .venv/bin/python benchmarks/entropy_cost.py --clients 10000
"""

import argparse
import time

import _common
import numpy as np


def two_reads():
  """The seed of the previous version: two UUIDs, XORed crosswise."""
  import tensorflow as tf
  from tff_ddp.utils import entropy
  salt = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
  empty = tf.strings.substr(tf.strings.as_string(salt), 0, 0)
  words = entropy._uuid_words  # pylint: disable=protected-access  # measures a private part
  first = words(tf.strings.join([entropy.UUID_PATH, empty[0]]))
  second = words(tf.strings.join([entropy.UUID_PATH, empty[1]]))
  return tf.stack([
      tf.bitwise.bitwise_xor(first[0], second[1]),
      tf.bitwise.bitwise_xor(first[1], second[0])
  ])


def main():
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n', maxsplit=1)[0])
  parser.add_argument('--clients', type=int, default=10000)
  parser.add_argument('--reps', type=int, default=3)
  args = parser.parse_args()
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_ddp.utils import entropy
  from tff_ddp.utils import processes
  processes.raise_worker_stack_limit()
  tff.backends.test.set_sync_test_cpp_execution_context()

  def round_with(seed_fn):

    @tff.tensorflow.computation(np.float32)
    def client(x):
      one_hot = tf.one_hot(tf.cast(x, tf.int32), 64, dtype=tf.int32)
      return one_hot + tf.cast(tf.reduce_sum(seed_fn()) % 2, tf.int32)

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def federated_round(values):
      return tff.backends.mapreduce.federated_secure_modular_sum(
          tff.federated_map(client, values), np.int32(2**24))

    return federated_round

  rounds = {
      'floor': round_with(lambda: tf.constant([1, 2], tf.int64)),
      'one read': round_with(entropy.os_entropy_seed),
      'two reads': round_with(two_reads)
  }
  values = list(
      np.random.default_rng(0).uniform(0, 63, args.clients).astype(np.float32))
  seconds = {name: [] for name in rounds}
  try:
    for comp in rounds.values():
      comp(values[:10])
    for _ in range(args.reps):
      for name, comp in rounds.items():
        start = time.perf_counter()
        comp(values)
        seconds[name].append(time.perf_counter() - start)
  finally:
    _common.end_workers()
  floor = np.median(seconds['floor'])
  print(f'{args.clients} clients, seconds per round (median of {args.reps}; '
        'all runs)')
  for name, s in seconds.items():
    extra = (np.median(s) - floor) / args.clients * 1e6
    print(
        f'  {name:10s} {np.median(s):7.2f}  [{", ".join(f"{t:.2f}" for t in s)}]'
        f'  above the floor: {extra:6.1f} us per client')


if __name__ == '__main__':
  main()
