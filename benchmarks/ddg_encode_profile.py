"""Where one client's DDG encode of ~1M weights spends its CPU, today's code
beside the code of main before issue 34, and the floor.

One client at the configuration of `model_scale.py` (954,010 weights,
Hadamard padded to D = 2^20, noise multiplier 1, 50 clients, 20 bits,
clip 1, the alias-table sampler). Each stage is a `tf.function` (graph
mode, grappler on, as in TFF's worker), TensorFlow on --threads threads
(intra- and inter-op; 1 by default: CPU time is then the work itself, and a
busy machine slows it less than it slows wall time). Every call is timed in
CPU seconds of this process (`time.process_time`, all threads); the
variants run round-robin, one call each per repeat, so the machine's load
falls on all of them alike; the table shows medians.

Rows (today = main at 55e504f, frozen in `_ddg_encode_baseline.py`; new =
the library as it is):

  clip and scale   cast, finite check, l2 clip, 1/gamma (new: one float64
                   sum of squares; x' cast to the rotation's dtype)
  signs            the public signs (today: one 32-bit word per sign; new:
                   one byte per 8 signs)
  rotation         pad, signs, Hadamard (today: float64 tensordot per block;
                   new: float32 or float64 matmul chain, `float32_rotation`)
  rounding coins   the rounding's random words (today: float64 uniforms,
                   64 bits each; new: one 32-bit word)
  rounding         conditional randomized rounding incl. its coins and the
                   exact norm check
  noise            the discrete Gaussian noise (today's reads a table of
                   55e504f's shape, truncated at 2^-110 tail mass; new: the
                   certified table, ~18 scales wide, 2^20 columns at this
                   scale: `_ddg_encode_baseline`)
  noise + residue  adding the noise and the ring residue (new: int32/uint32)
  client_encode    the whole encode (the sum of the above and glue)

and the floor no encode of D coordinates can beat in plain TF ops: one
float32 add of D elements (one pass over the data) and one Philox draw of D
64-bit words (the random bits of the noise alone).

  .venv/bin/python benchmarks/ddg_encode_profile.py [--repeats 15]

Target (issue 34): new client_encode <= 0.65 x today's, in the same run.
"""

import statistics
import time

import _harness as harness
import numpy as np

TARGET = 0.65


def run(repeats=15, dim=954_010, clients=50, bits=20, threads=1):
  import tensorflow as tf
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  import _ddg_encode_baseline as baseline
  from tff_ddp.encoders import hadamard
  from tff_ddp.mechanisms import discrete_gaussian
  from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
  from tff_ddp.mechanisms import rounding

  if repeats < 1:
    raise harness.UsageError('--repeats must be >= 1')
  mech = ddg.compute_parameters(
      dim,
      ddg.Request(l2_clip=1.0,
                  noise_multiplier=1.0,
                  expected_clients_per_round=clients,
                  bits=bits))
  d = mech.output_dim
  today = baseline.Encode(
      mech,
      baseline.truncation(
          discrete_gaussian.discrete_gaussian_variance_parameter(
              mech.scaled_local_stddev)))
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=dim) / 1000.0)
  seed = tf.constant([3, 4], tf.int64)
  dtype = tf.float32 if mech.float32_rotation else tf.float64

  # Inputs of the later stages: each variant gets its own pipeline's.
  old_scaled = today.clip(x)[0]
  old_rotated = today.rotate(old_scaled, seed)
  old_rounded = today.round(old_rotated, seed)[0]
  new_scaled = mech.clip_and_scale(x)[0]
  new_rotated = mech.encoder.encode(new_scaled, seed)
  new_rounded = rounding.conditional_randomized_round(new_rotated,
                                                      mech.norm_threshold,
                                                      seed)[0]
  noise = mech.sample_noise(seed)

  f = tf.function
  stages = [
      ('clip and scale', f(lambda v: today.clip(v)[0]), (x,),
       f(lambda v: mech.clip_and_scale(v)[0]), (x,)),
      ('signs', f(lambda s: baseline.random_signs(d, s)), (seed,),
       f(lambda s: hadamard.random_signs(d, s, dtype, d**-0.5)), (seed,)),
      ('rotation', f(today.rotate), (old_scaled, seed), f(mech.encoder.encode),
       (new_scaled, seed)),
      ('rounding coins', f(lambda s: baseline.rounding_uniforms([d], s, 0)),
       (seed,), f(lambda s: rounding.rounding_words([d], s, 0)), (seed,)),
      ('rounding', f(lambda v, s: today.round(v, s)[0]), (old_rotated, seed),
       f(lambda v, s: rounding.conditional_randomized_round(
           v, mech.norm_threshold, s)[0]), (new_rotated, seed)),
      ('noise', f(today.noise), (seed,), f(mech.sample_noise), (seed,)),
      ('noise + residue', f(today.residue), (old_rounded, noise),
       f(mech.ring_sum), (new_rounded, noise)),
      ('client_encode', f(lambda v, s: today(v, s, s)[0]), (x, seed),
       f(lambda v, s: mech.client_encode(v, s, s)[0]['encoded']), (x, seed)),
  ]
  x32 = tf.constant(rng.normal(size=d), tf.float32)
  floor = [
      ('float32 add', f(lambda v: v + v), (x32,)),
      ('Philox, D int64 words',
       f(lambda s: tf.random.stateless_uniform(
           [d], seed=s, dtype=tf.int64, minval=None, maxval=None)), (seed,)),
  ]
  calls = []  # (stage, variant), function, arguments
  for name, old_fn, old_args, new_fn, new_args in stages:
    calls += [((name, 'today'), old_fn, old_args),
              ((name, 'new'), new_fn, new_args)]
  calls += [((name, 'floor'), fn, args) for name, fn, args in floor]

  def call(fn, args):
    out = fn(*args)
    for tensor in tf.nest.flatten(out):
      np.asarray(tensor)

  for _, fn, args in calls:  # trace and warm up
    call(fn, args)
  seconds = {key: [] for key, _, _ in calls}
  for _ in range(repeats):
    for key, fn, args in calls:
      start = time.process_time()
      call(fn, args)
      seconds[key].append(time.process_time() - start)
  ms = {key: 1000 * statistics.median(v) for key, v in seconds.items()}

  table = harness.Table(
      [('stage', 'stage', 's'), ('today', 'today ms', '.2f'),
       ('new', 'new ms', '.2f'), ('ratio', 'new / today', '.2f')],
      title=(f'one client, {dim:,} weights -> D = {d:,}; CPU ms, median of '
             f'{repeats} round-robin calls, {threads} TF thread(s); new '
             f'rotation {dtype.name}'))
  for name, *_ in stages:
    table.add(stage=name,
              today=ms[(name, 'today')],
              new=ms[(name, 'new')],
              ratio=ms[(name, 'new')] / ms[(name, 'today')])
  floor_ms = sum(ms[(name, 'floor')] for name, _, _ in floor)
  for name, _, _ in floor:
    table.add(stage=f'floor: {name}', new=ms[(name, 'floor')])
  ratio = ms[('client_encode', 'new')] / ms[('client_encode', 'today')]
  table.notes.append(
      f'\nclient_encode new / today = {ratio:.2f} (target <= {TARGET}: '
      f'{"met" if ratio <= TARGET else "not met"}); '
      f'new / floor ({floor_ms:.1f} ms) = '
      f'{ms[("client_encode", "new")] / floor_ms:.1f}')
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               repeats='timed calls per variant',
               dim='weights of the client value',
               clients='clients per round',
               bits='secure-sum bits',
               threads='TF intra/inter-op threads')
