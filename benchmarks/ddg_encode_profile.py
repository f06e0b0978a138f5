"""Where one client's DDG encoding of ~1M weights spends its time.

Times (each a `tf.function`, median of --repeats calls after a warm-up) the
parts of `DistributedDiscreteGaussian.client_encode` at the configuration of
`model_scale.py` (954,010 weights, Hadamard padded to 2^20, noise
multiplier 1, 20 bits, clip 1, the alias-table noise sampler) and the
cheaper variants issue 23 asks to measure:

  signs      the rotation's public signs: one int32 Philox word per sign
             (`stateless_uniform(maxval=2)`) vs 64 signs per word (bits of
             d / 64 int64 words)
  rotation   the randomized Hadamard in float64 vs float32
  rounding   the rounding's uniforms: float64 (two 32-bit words each) vs
             one 32-bit word compared with frac * 2^32
  noise      the alias-table sampler (one int64 word + a gather each)
  encode     the whole client_encode

  PYTHONPATH=$PWD .venv/bin/python benchmarks/ddg_encode_profile.py
"""

import argparse
import time

import _common  # pylint: disable=unused-import
import numpy as np

DIM = 954_010


def timed(fn, args, repeats):
  fn(*args)  # trace + warm up
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = fn(*args)
    if isinstance(out, (list, tuple)):
      out = out[0]
    if isinstance(out, dict):
      out = next(iter(out.values()))
    np.asarray(out)
    seconds.append(time.perf_counter() - start)
  return float(np.median(seconds))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=15)
  parser.add_argument('--threads', type=int, default=1)
  args = parser.parse_args()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  tf.config.threading.set_inter_op_parallelism_threads(args.threads)
  from tff_ddp.encoders import hadamard  # pylint: disable=g-import-not-at-top
  from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg  # pylint: disable=g-import-not-at-top
  from tff_ddp.mechanisms import rounding  # pylint: disable=g-import-not-at-top

  mech = ddg.compute_parameters(
      dim=DIM, l2_clip=1.0, noise_multiplier=1.0,
      expected_clients_per_round=50, bits=20)
  d = mech.output_dim
  x = tf.constant(np.random.default_rng(0).normal(size=DIM) / 1000.0)
  seed = tf.constant([3, 4], tf.int64)
  x64 = tf.constant(np.random.default_rng(1).normal(size=d) * 5.0)
  x32 = tf.cast(x64, tf.float32)

  @tf.function
  def signs_int32(s):
    return hadamard.random_signs(d, s)

  @tf.function
  def signs_packed(s):
    words = tf.random.stateless_uniform([d // 64], seed=s, dtype=tf.int64,
                                        minval=None, maxval=None)
    shifts = tf.range(64, dtype=tf.int64)
    bits = tf.bitwise.bitwise_and(
        tf.bitwise.right_shift(words[:, None], shifts[None, :]), 1)
    return tf.cast(2 * tf.reshape(bits, [d]) - 1, tf.float64)

  @tf.function
  def hadamard64(v):
    return hadamard.fast_walsh_hadamard(v)

  @tf.function
  def hadamard32(v):
    return hadamard.fast_walsh_hadamard(v)

  @tf.function
  def uniforms64(s):
    return rounding.rounding_uniforms([d], s, 0)

  @tf.function
  def words32(s):
    return tf.random.stateless_uniform([d], seed=s, dtype=tf.int32,
                                       minval=None, maxval=None)

  @tf.function
  def round64(v, s):
    return rounding.randomized_round(v, rounding.rounding_uniforms([d], s, 0))

  @tf.function
  def round32(v, s):
    words = tf.random.stateless_uniform([d], seed=s, dtype=tf.int32,
                                        minval=None, maxval=None)
    floor = tf.floor(v)
    up = (tf.cast(words, tf.float64) + 2147483648.0 <
          (v - floor) * 4294967296.0)
    return tf.cast(floor, tf.int64) + tf.cast(up, tf.int64)

  @tf.function
  def conditional(v, s):
    return rounding.conditional_randomized_round(v, mech.norm_threshold, s)[0]

  @tf.function
  def noise(s):
    return mech.sample_noise(s)

  @tf.function
  def int64_words(s):
    return tf.random.stateless_uniform([d], seed=s, dtype=tf.int64,
                                       minval=None, maxval=None)

  @tf.function
  def residue(v):
    return tf.math.floormod(v, mech.modulus)

  @tf.function
  def encode(v, s):
    return mech.client_encode(v, s, s)[0]['encoded']

  rows = [
      ('signs: int32 word per sign', signs_int32, (seed,)),
      ('signs: 64 per int64 word', signs_packed, (seed,)),
      ('Hadamard float64', hadamard64, (x64,)),
      ('Hadamard float32', hadamard32, (x32,)),
      ('rounding uniforms float64', uniforms64, (seed,)),
      ('rounding words int32', words32, (seed,)),
      ('randomized round float64 u', round64, (x64, seed)),
      ('randomized round int32 u', round32, (x64, seed)),
      ('conditional round (current)', conditional, (x64, seed)),
      ('noise: int64 words alone', int64_words, (seed,)),
      ('noise: alias sampler', noise, (seed,)),
      ('ring residue (floormod)', residue,
       (tf.constant(np.arange(d, dtype=np.int64)),)),
      ('client_encode (current)', encode, (x, seed)),
  ]
  print(f'one client, {DIM:,} weights -> D = {d:,}; median of '
        f'{args.repeats} calls, {args.threads} thread(s)')
  for name, fn, fn_args in rows:
    print(f'  {name:32s} {1000 * timed(fn, fn_args, args.repeats):8.2f} ms',
          flush=True)


if __name__ == '__main__':
  main()
