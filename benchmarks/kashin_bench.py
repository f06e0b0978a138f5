"""Kashin encode + decode: our fast frame vs a dense frame vs TFMOT.

For d = 2^10 ... 2^16 (D = 2d), one vector, inside tf.function, after a
warm-up call; median seconds of encode + decode over --reps calls:

* ours: `KashinEncoder(d)` (signed, row-sampled randomized Hadamard frame,
  O(D log D) per product; eta 1/2, delta 0.8, 8 steps, level enforced).
* dense: the same algorithm and the *same* frame, materialized as a d x D
  float64 matrix and applied with matvec (O(D d) per product): the cost of
  a dense frame, for d up to --dense-max (2^14 needs 4 GiB).
* dense QR: `KashinEncoder(d, frame='dense')`, a random orthonormal frame
  (QR of a Gaussian, the paper's construction), d <= 2^11 (building it is
  O(D d^2)); its time excludes building the frame.
* TFMOT: `KashinHadamardEncodingStage(num_iters=8, eta=0.5, delta=0.8,
  last_iter_clip=False)` from tensorflow_model_optimization (its default,
  lossless: the last step is not clipped, so no level is guaranteed).

Level: the worst max_k |y_k| sqrt(D) / ||x||_2 over Gaussian, constant,
one-hot and spiky inputs (for ours and dense, <= K = 2.24 by construction);
residual: the worst ||x - decode(encode(x))|| / ||x||.

Then, at d = 2^14 (--check-log2), eager calls of ours and of the dense frame
(what `enc.encode(x, seed)` costs outside a tf.function), and a regression
check: the run fails (exit status 1) if ours, traced or eager, takes more
than REGRESSION_FACTOR = 1.5 times the time recorded in
benchmarks/kashin_baseline.json (`--record-baseline` rewrites it).

  .venv/bin/python benchmarks/kashin_bench.py [--reps 5] [--record-baseline]
"""

import json
import math
import os
import time

import _harness as harness
import numpy as np

# kashin_bench fails (exit status 1) when ours, traced or eager, at
# d = 2^check_log2 takes more than this times the recorded baseline.
REGRESSION_FACTOR = 1.5


def _inputs(d, rng):
  onehot = np.zeros(d)
  onehot[d // 3] = 1.0
  spiky = rng.normal(size=d) * 1e-3
  spiky[:max(1, d // 50)] = 10.0
  return [rng.normal(size=d), np.ones(d), onehot, spiky]


def _cell(key, index, spec, per=None):
  """Item `index` of `key`'s (seconds, level, residual), divided by `per`'s
  seconds if given; '-' where `key` was not measured."""

  def cell(row):
    if row.get(key) is None:
      return '-'
    return format(row[key][index] / (row[per][0] if per else 1.0), spec)

  return cell


def run(min_log2=10,
        max_log2=16,
        dense_max_log2=14,
        qr_max_log2=11,
        reps=5,
        check_log2=14,
        record_baseline=False):
  """One row per d; then the eager timing and the regression check."""
  import tensorflow as tf
  from tensorflow_model_optimization.python.core.internal.tensor_encoding.stages.research import kashin as tfmot_kashin
  from tff_ddp.encoders import KashinEncoder

  seed = tf.constant([1, 2], tf.int64)

  class MaterializedFrame(KashinEncoder):
    """Our algorithm and frame, with U stored as a dense matrix."""

    def __init__(self, dim, matrix):
      super().__init__(dim)
      self._u = tf.constant(matrix)

    def _frame_ops(self, seed, dtype):
      del seed, dtype
      return (lambda v: tf.linalg.matvec(self._u, v, transpose_a=True),
              lambda w: tf.linalg.matvec(self._u, w))

  def materialize(enc):
    """U of `enc`'s Hadamard frame, d x D, built from the frame's pieces."""
    d, big = enc.dim, enc.output_dim
    fold = lambda k: tf.random.experimental.stateless_fold_in(
        seed, tf.constant(k, tf.int64))
    signs = (2 * tf.random.stateless_uniform(
        [big], seed=fold(0), minval=0, maxval=2, dtype=tf.int32) - 1).numpy()
    row_signs = (2 * tf.random.stateless_uniform(
        [d], seed=fold(3), minval=0, maxval=2, dtype=tf.int32) - 1).numpy()
    rows = enc._rows(seed).numpy()  # pylint: disable=protected-access  # measures a private part
    cols = np.arange(big, dtype=np.int64)
    u = np.empty((d, big), np.float64)
    for start in range(0, d, 256):  # H[i, j] = (-1)^popcount(i & j) / sqrt D
      a = rows[start:start + 256, None] & cols[None, :]
      parity = np.zeros(a.shape, np.int64)
      while np.any(a):
        parity ^= a & 1
        a >>= 1
      u[start:start + 256] = (1 - 2 * parity) * signs[None, :]
      u[start:start + 256] *= row_signs[start:start + 256, None]
    return u / math.sqrt(big)

  def measure(encode, decode, output_dim, inputs):
    """(median seconds of encode+decode, worst level, worst residual)."""
    level, residual = 0.0, 0.0
    for x in inputs:
      y = encode(tf.constant(x))
      back = decode(y).numpy()
      y = y.numpy()
      level = max(level,
                  np.max(np.abs(y)) * math.sqrt(output_dim) / np.linalg.norm(x))
      residual = max(residual, np.linalg.norm(x - back) / np.linalg.norm(x))
    x = tf.constant(inputs[0])
    seconds = harness.seconds_of(lambda: decode(encode(x)).numpy(),
                                 reps,
                                 warmup=False)
    return seconds, level, residual

  table = harness.Table(
      [('d', 'd', 'd'), ('D', 'D', 'd'),
       ('ours', 'ours s', _cell('ours', 0, '.5f')),
       ('ours', 'K', _cell('ours', 1, '.2f')),
       ('ours', 'res', _cell('ours', 2, '.0e')),
       ('dense', 'dense s', _cell('dense', 0, '.5f')),
       ('dense', 'x ours', _cell('dense', 0, '.1f', per='ours')),
       ('qr', 'QR s', _cell('qr', 0, '.5f')),
       ('qr', 'K', _cell('qr', 1, '.2f')),
       ('tfmot', 'TFMOT s', _cell('tfmot', 0, '.5f')),
       ('tfmot', 'x ours', _cell('tfmot', 0, '.2f', per='ours')),
       ('tfmot', 'K', _cell('tfmot', 1, '.2f')),
       ('tfmot', 'res', _cell('tfmot', 2, '.0e'))],
      title=f'Kashin encode + decode, median of {reps} (tf.function, one '
      'vector); level K = worst max|y| sqrt(D)/||x|| over 4 inputs; res = '
      'worst relative residual; (seconds, K, res) per frame in the rows')
  rows = table.rows
  for k in range(min_log2, max_log2 + 1):
    d = 2**k
    inputs = _inputs(d, np.random.default_rng(k))
    ours = KashinEncoder(d)
    row = {'d': d, 'D': ours.output_dim}
    row['ours'] = measure(tf.function(lambda x, e=ours: e.encode(x, seed)),
                          tf.function(lambda y, e=ours: e.decode(y, seed)),
                          ours.output_dim, inputs)
    if k <= dense_max_log2:
      dense = MaterializedFrame(d, materialize(ours))
      enc = tf.function(lambda x, e=dense: e.encode(x, seed))
      dec = tf.function(lambda y, e=dense: e.decode(y, seed))
      row['dense'] = measure(enc, dec, dense.output_dim, inputs)
      del dense, enc, dec
    if k <= qr_max_log2:
      qr = KashinEncoder(d, frame='dense')
      frame = qr._dense(seed, tf.float64)  # pylint: disable=protected-access  # measures a private part
      qr_fixed = MaterializedFrame(d, tf.transpose(frame).numpy())
      row['qr'] = measure(tf.function(lambda x, e=qr_fixed: e.encode(x, seed)),
                          tf.function(lambda y, e=qr_fixed: e.decode(y, seed)),
                          qr.output_dim, inputs)
    stage = tfmot_kashin.KashinHadamardEncodingStage(num_iters=8,
                                                     eta=0.5,
                                                     delta=0.8,
                                                     last_iter_clip=False)
    enc_params, dec_params = stage.get_params()
    dec_params = {key: tf.constant(v.numpy()) for key, v in dec_params.items()}
    enc_params = {
        key: (tf.constant(v.numpy()) if tf.is_tensor(v) else v)
        for key, v in enc_params.items()
    }
    enc_params['seed'] = dec_params['seed']
    shape = tf.constant([d])
    tf_enc = tf.function(
        lambda x, s=stage, p=enc_params: s.encode(x, p)[s.ENCODED_VALUES_KEY])
    tf_dec = tf.function(lambda y, s=stage, p=dec_params: s.decode(
        {s.ENCODED_VALUES_KEY: y}, p, shape=shape))
    pad = stage._get_pad_dim(d)  # pylint: disable=protected-access  # measures a private part
    row['tfmot'] = measure(tf_enc, tf_dec, pad, inputs)
    rows.append(row)
    print(f'done d = {d}', flush=True)

  # Eager calls (what a user typing enc.encode(x, seed) gets) at the
  # regression-check dimension, ours vs the dense frame, and the check.
  d = 2**check_log2
  if min_log2 <= check_log2 <= min(max_log2, dense_max_log2):
    inputs = _inputs(d, np.random.default_rng(check_log2))
    ours = KashinEncoder(d)
    dense = MaterializedFrame(d, materialize(ours))
    eager_ours = measure(lambda x: ours.encode(x, seed),
                         lambda y: ours.decode(y, seed), ours.output_dim,
                         inputs)[0]
    eager_dense = measure(lambda x: dense.encode(x, seed),
                          lambda y: dense.decode(y, seed), dense.output_dim,
                          inputs)[0]
    traced = next(r for r in rows if r['d'] == d)
    now = {
        'traced_s': traced['ours'][0],
        'eager_s': eager_ours,
        'traced_x_dense': traced['dense'][0] / traced['ours'][0],
        'eager_x_dense': eager_dense / eager_ours
    }
    table.notes.append(
        f'd = {d}: ours traced {now["traced_s"]:.5f} s '
        f'({now["traced_x_dense"]:.1f}x the dense frame), eager '
        f'{now["eager_s"]:.5f} s ({now["eager_x_dense"]:.1f}x the dense '
        'frame, both eager)')
    baseline_path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 'kashin_baseline.json')
    if record_baseline:
      with open(baseline_path, 'w', encoding='utf-8') as f:
        json.dump(dict(now,
                       d=d,
                       recorded=time.strftime('%Y-%m-%d %H:%M UTC',
                                              time.gmtime())),
                  f,
                  indent=1)
        f.write('\n')
      table.notes.append(f'baseline written to {baseline_path}')
    elif os.path.exists(baseline_path):
      with open(baseline_path, encoding='utf-8') as f:
        base = json.load(f)
      if base.get('d') != d:
        table.notes.append(
            f'no regression check: the baseline is for d = {base.get("d")}')
        return table
      worse = [
          f'{key}: {now[key]:.5f} s vs baseline {base[key]:.5f} s '
          f'({now[key] / base[key]:.2f}x)'
          for key in ('traced_s', 'eager_s')
          if now[key] > REGRESSION_FACTOR * base[key]
      ]
      if worse:
        table.notes.append(
            f'REGRESSION (> {REGRESSION_FACTOR}x the baseline recorded '
            f'{base.get("recorded")}): ' + '; '.join(worse))
        table.failed = True  # the script exits with status 1
        return table
      table.notes.append(
          f'no regression: within {REGRESSION_FACTOR}x of the baseline '
          f'recorded {base.get("recorded")} (traced '
          f'{now["traced_s"] / base["traced_s"]:.2f}x, eager '
          f'{now["eager_s"] / base["eager_s"]:.2f}x)')
  return table


if __name__ == '__main__':
  harness.main(
      run,
      __doc__,
      min_log2='smallest log2 d',
      max_log2='largest log2 d',
      dense_max_log2='largest log2 d of the dense (materialized) frame',
      qr_max_log2='largest log2 d of the dense QR frame',
      reps='timed calls per frame and d',
      check_log2='log2 d of the eager timing and of the regression check '
      'against kashin_baseline.json',
      record_baseline='write kashin_baseline.json instead of checking')
