"""Minimal reproducer: XLA (`tf.function(jit_compile=True)`) inside a TFF
`tensorflow.computation` on TFF 0.87's C++ test executor.

Issue "a client encoding fused into few passes" asks whether the clients'
encodings can be compiled with XLA inside the TFF computation. This script
answers with bits, not timings: `x * 3.7 + u` in float64 has a result only
XLA gives (it contracts the multiply-add into one fused multiply-add, which
rounds once), so a TFF computation that returns XLA's bits ran XLA, and one
that returns plain TF's bits did not. It also checks which random draws
keep their bits under XLA (the samplers' proofs and the "same seed, same
output" tests need them to).

  PYTHONPATH=$PWD .venv/bin/python benchmarks/xla_in_tff.py
"""

import os

import _harness as harness
import numpy as np

DIM = 1 << 16


def run():
  """One row per question, its answer beside it."""
  import tensorflow as tf
  import tensorflow_federated as tff

  table = harness.Table([('check', 'check', 's'), ('answer', 'answer', 's')])
  x = tf.random.stateless_normal([DIM], seed=[1, 2], dtype=tf.float64)
  u = tf.random.stateless_normal([DIM], seed=[5, 6], dtype=tf.float64)
  seed = tf.constant([3, 4], tf.int64)
  fma = lambda x, u: x * 3.7 + u
  plain, jit = tf.function(fma), tf.function(fma, jit_compile=True)
  differ = int(tf.math.count_nonzero(plain(x, u) - jit(x, u)))
  table.add(check='x * 3.7 + u, float64, called from Python: elements where '
            'XLA differs from TF',
            answer=f'{differ} of {DIM}',
            differ=differ)

  def same_bits(draw):
    return bool(
        tf.reduce_all(
            tf.function(draw)() == tf.function(draw, jit_compile=True)()))

  for name, draw in (
      ('stateless_uniform float64',
       lambda: tf.random.stateless_uniform([DIM], seed=seed, dtype=tf.float64)),
      ('stateless_uniform float32',
       lambda: tf.random.stateless_uniform([DIM], seed=seed, dtype=tf.float32)),
      ('stateless_uniform int64 (full range)',
       lambda: tf.random.stateless_uniform(
           [DIM], seed=seed, dtype=tf.int64, minval=None, maxval=None)),
      ('stateless_split',
       lambda: tf.random.experimental.stateless_split(seed, 3))):
    table.add(check=f'{name}: same bits under XLA', answer=str(same_bits(draw)))

  value = tff.TensorType(np.float64, [DIM])

  @tff.tensorflow.computation(value, value)
  def in_tff_jit(x, u):
    return jit(x, u)

  out = in_tff_jit(x.numpy(), u.numpy())
  for label, fn in (("XLA's", jit), ("plain TF's", plain)):
    same = bool(np.all(out == fn(x, u).numpy()))
    table.add(check='TFF computation calling the jit function: returns '
              f'{label} bits',
              answer=str(same))
  return table


if __name__ == '__main__':
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  harness.main(run, __doc__, tff=True)
