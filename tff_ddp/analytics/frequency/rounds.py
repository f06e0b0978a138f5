"""Frequency releases over many clients without TFF's per-client calls.

`tff_ddp.analytics.frequency.process` runs each user as TFF calls (~2 ms
for d = 100: 10^5 users take minutes). This module runs the same rounds of
'two_phase' (TFFE), 'normalize' and 'fixed' in batches of clients, with the
protocols' and the mechanisms' own pieces, so the releases have the
processes' distribution (not their bits):

* the round's public seed (the Kashin frame) fresh from the kernel, as the
  process's state would give it;
* each client's Bernoulli probabilities p_i = those of
  `PoissonBinomial.client_probabilities` on its input (the protocol's
  `client_values`, or x / C for TFFE's scaled release), computed for a
  batch at once: the Kashin encoder's `encode_batch` (its rows are
  `encode_with_residual`'s) and the clip and probability steps row by row
  (`batch_probabilities`; the tests check them against the client code);
* each client's Z_i[k] ~ Binomial(m, p_i[k]) from the clients' exact
  sampler (`binomial.sample_binomial`), a chunk of clients per call, each
  call's seed fresh from the kernel's CSPRNG; their sum mod M in int64;
* the server's `server_decode`; TFFE's phase 1 is the batched quantile
  round (`quantiles.rounds.run_round`) on the clients' `norm_message`s,
  and its clip rule is the process's (C-hat if the status is 'ok' and it
  is finite and positive, else the histogram's upper bound).

Refusals first: more clients than the protocol's rings hold is refused
(`RoundRefusedError`) before anything is drawn. 'multi_round' and 'sample'
are not batched (their client steps carry more state or randomness): they
run through TFF.
"""

import dataclasses
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from tff_ddp.analytics.frequency import two_phase
from tff_ddp.analytics.quantiles import rounds as qr
from tff_ddp.mechanisms import binomial
from tff_ddp.utils import entropy
from tff_ddp.utils import tensors

PROTOCOLS = ('two_phase', 'normalize', 'fixed')
# Clients per sampler call ([CHUNK, D] probabilities and draws).
CHUNK = 4096


@dataclasses.dataclass(frozen=True)
class Release:
  estimate: np.ndarray  # float64 [d]: the estimate of sum_i x_i
  clip: float  # the clip C used
  status: str  # TFFE: phase 1's quantile status; else 'ok'


def _seed(noise_seed: Optional[int], stream: int, index: int) -> tf.Tensor:
  if noise_seed is None:
    return entropy.os_entropy_seed()
  return tf.cast(
      tf.random.experimental.stateless_fold_in(
          tf.constant([noise_seed, stream], tf.int64), index), tf.int64)


def batch_probabilities(mechanism, xs, round_seed):
  """`mechanism.client_probabilities` of each row of xs ([k, d] float64),
  with one frame: the client's steps (non-finite rows as zeros, the
  encoder, the l2 clip to C, p = 1/2 + theta y / B kept in [p_low,
  p_high]) row by row, the encoder's `encode_batch` for the encoding."""
  if mechanism.l0_clip is not None and (mechanism.l0_clip
                                        < mechanism.output_dim):
    raise ValueError('batch_probabilities does not implement l0_clip.')
  xs = tf.cast(xs, tf.float64)
  finite = tf.reduce_all(tf.math.is_finite(xs), axis=1, keepdims=True)
  xs = tf.where(finite, xs, tf.zeros_like(xs))
  y, _ = mechanism.encoder.encode_batch(xs, round_seed)
  # tensors.clip_to_norm, one row at a time.
  big = tf.maximum(tf.reduce_max(y, axis=1, keepdims=True),
                   -tf.reduce_min(y, axis=1, keepdims=True))
  positive = big > 0
  safe = tf.where(positive, big, tf.ones_like(big))
  unit = y / safe
  unit_norm = tf.norm(unit, axis=1, keepdims=True)
  clip = tf.constant(mechanism.l2_clip, tf.float64)
  clipped = positive & (unit_norm > clip / safe)
  y = tf.where(clipped, unit * (clip / unit_norm), y)
  ratio = y / mechanism.coordinate_bound
  return tf.clip_by_value(0.5 + mechanism.theta * ratio, mechanism.p_low,
                          mechanism.p_high)


_TRACED = {}


def _traced(key, build):
  """`build()`'s tf.function, traced once per (kind, object): the objects
  (mechanisms, parameters) are kept with it, so their ids stay theirs."""
  kind, owner = key
  if (kind, id(owner)) not in _TRACED:
    _TRACED[kind, id(owner)] = (owner, build())
  return _TRACED[kind, id(owner)][1]


def _release(params, inputs_fn, num_clients, round_seed, noise_seed, progress,
             what):
  """The decoded sum of one cPBM release: clients [start, stop) send
  `inputs_fn(start, stop)` ([k, d] float64) to the frequency aggregator."""
  mechanism = params.mechanism()
  modulus = mechanism.modulus
  encode = _traced(('release', mechanism), lambda: tf.function(
      lambda xs, rs, seed: tf.reduce_sum(binomial.sample_binomial(
          batch_probabilities(mechanism, xs, rs), mechanism.num_trials, seed),
                                         axis=0),
      input_signature=[
          tf.TensorSpec([None, params.dim], tf.float64),
          tf.TensorSpec([2], tf.int64),
          tf.TensorSpec([2], tf.int64)
      ]))
  total = np.zeros([mechanism.output_dim], np.int64)
  for index, start in enumerate(range(0, num_clients, CHUNK)):
    stop = min(start + CHUNK, num_clients)
    part = encode(tf.constant(inputs_fn(start, stop), tf.float64), round_seed,
                  _seed(noise_seed, 0xF4E, index))
    total = np.mod(total + part.numpy(), modulus)
    progress(what, stop, num_clients)
  decoded, _ = mechanism.server_decode(
      {'encoded': tf.constant(total, tf.int64)},
      tf.constant(num_clients, tf.int64), round_seed)
  return np.asarray(decoded, np.float64)


def _norms(params, x, round_seed):
  """TFFE phase 1's client values (`norm_message` of ||Kashin(x)||),
  float32 [n]."""
  encoder = params.encoder()
  fn = _traced(
      ('norms', encoder),
      lambda: tf.function(lambda xs, rs: two_phase.norm_message(
          tf.reshape(
              tensors.overflow_safe_norm(encoder.encode_batch(
                  tf.where(
                      tf.reduce_all(tf.math.is_finite(xs), 1, keepdims=True),
                      xs, tf.zeros_like(xs)), rs)[0],
                                         axis=-1), [-1]),
          tf.reduce_all(tf.math.is_finite(xs), 1)),
                          input_signature=[
                              tf.TensorSpec([None, params.dim], tf.float64),
                              tf.TensorSpec([2], tf.int64)
                          ]))
  return np.concatenate([
      fn(tf.constant(x[start:start + CHUNK], tf.float64), round_seed).numpy()
      for start in range(0, len(x), CHUNK)
  ])


def run(params,
        x,
        *,
        noise_seed: Optional[int] = None,
        progress: Callable[[str, int, int], None] = lambda *a: None) -> Release:
  """One run of `params.protocol` (PROTOCOLS) on the users' count vectors
  x ([n, d]); `noise_seed` None (private) or an integer (reproducible,
  NOT private)."""
  from tff_ddp.analytics.quantiles import process as q
  if params.protocol not in PROTOCOLS:
    raise ValueError(f'{params.protocol!r} is not batched; run its TFF '
                     'process.')
  x = np.asarray(x)
  n = x.shape[0]
  params.ring_capacity().check(n)
  round_seed = _seed(noise_seed, 0x5EED, 0)
  protocol = params.protocol
  if not isinstance(params, two_phase.TwoPhaseParameters):
    prepare = _traced(
        ('prepare', params),
        lambda: tf.function(lambda xs, rs: tf.vectorized_map(
            lambda v: params.client_values(v, rs), xs),
                            input_signature=[
                                tf.TensorSpec([None, params.dim], tf.float64),
                                tf.TensorSpec([2], tf.int64)
                            ]))
    estimate = _release(
        params,
        lambda a, b: prepare(tf.constant(x[a:b], tf.float64), round_seed), n,
        round_seed, noise_seed, progress, protocol)
    return Release(estimate, float(params.clip), 'ok')
  norms = _norms(params, x, round_seed)
  options = q.read_out_options(params.quantile.encoding, 0.0,
                               params.upper_bound, [params.target_quantile],
                               q.QuantileEstimation(count='exact'))
  phase_one = qr.run_round(
      params.quantile,
      options,
      norms,
      on_wrap='flag',
      noise_seed=None if noise_seed is None else noise_seed + 1,
      progress=lambda done, total: progress('two_phase: phase 1', done, total))
  c = float(phase_one.result[0])
  usable = phase_one.status == 'ok' and np.isfinite(c) and c > 0
  clip = c if usable else float(params.upper_bound)
  estimate = _release(params, lambda a, b: x[a:b].astype(np.float64) / clip, n,
                      round_seed, noise_seed, progress, 'two_phase: phase 2')
  return Release(estimate * clip, clip, phase_one.status)
