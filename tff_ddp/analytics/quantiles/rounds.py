"""One quantile round over many clients without TFF's per-client calls.

`build_quantile_process` runs each client as a TFF call (~0.5 ms each, so
10^6 clients take longer than 10 minutes and hold every value as a Python
object). This module computes the same round, for histogram encodings,
with the mechanism's own client and server code, in batches: its output
has exactly the process's distribution (not its bits; `noise_seed` makes a
run reproducible, for tests, and then not private).

Why the distribution is the process's. A client with value v sends, per
key of the secure sum, its message w_i = client(e_i) + noise share (mod M),
with e_i = `process.encode_value(v)` one of b + 1 vectors (one per bin;
zeros for NaN); the server sees sum_i w_i mod M and the public count n.

* The client's part before the noise is computed here by the mechanism's
  own code on each of the b + 1 vectors (`client_rounded`,
  `client_probabilities`), so every client with the same bin sends the
  same pre-noise message, exactly as in the process.
* Discrete Gaussian: w_i = (r(e_i) + xi_i) mod M with r(e) the client's
  rounded integer vector (the rounding is the identity on the integer
  inputs of granularity 1/c: checked here, for every bin, with two
  rounding seeds) and xi_i ~ N_Z(0, s^2) iid per client and coordinate.
  The shares are drawn by the mechanism's sampler (`sample_noise(seed,
  count)`: the clients' sampler, iid draws), one draw per client and
  coordinate, in chunks, each chunk's seed fresh from the kernel's CSPRNG
  (`entropy.os_entropy_seed`); the sum mod M is exact in int64.
* cPBM: w_i[k] ~ Binomial(m, p(e_i)[k]) independently, so per
  coordinate the sum over the clients whose p[k] equals u is
  Binomial(N_u m, u) exactly (a sum of independent binomials with one p).
  It is drawn by the clients' exact sampler (`binomial.sample_binomial`),
  as sums of Binomial(2^(10t), u) draws over the base-1024 digits of N_u m
  (one traced sampler per power), each call's seed fresh from the kernel.
* The server's code is the process's (`mechanism.server_decode`, then
  `process.server_read_out`).

Refusals come first, as in the process: a round with more clients than the
ring holds is refused under on_wrap='raise' before anything is drawn.
Progress: `progress(done, total)` after each chunk of clients.
"""

import dataclasses
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import binomial
from tff_ddp.utils import entropy

# Clients per chunk: their values (float32) are binned and their noise
# shares drawn (int64 [CHUNK, L]) together.
CHUNK = 2**16
# Binomial(N m, u) = sum over the base-2^_DIGIT digits of N m (three
# traced samplers: 2^0, 2^10, 2^20; tracing one costs ~0.2-4 s).
_DIGIT = 10
_MAX_TRIALS = 2**30  # `binomial.sample_binomial`'s limit on m


@dataclasses.dataclass(frozen=True)
class RoundOutput:
  """What `next` of the process returns that the CLI reads."""
  result: np.ndarray  # float64 [len(quantiles)]
  cdf: np.ndarray  # float64 [b]
  status: str
  noisy_total: float
  noisy_total_stddev: float
  num_clients: int


def bin_counts(encoding: hg.Encoding,
               values,
               lower: float,
               upper: float,
               chunk: int = CHUNK):
  """(clients per bin, int64 [b]; clients without a value (NaN)): the
  process's binning (`quantiles.encode_value` of the float32 value),
  chunk by chunk."""
  values = np.asarray(values)
  counts = np.zeros([encoding.num_bins], np.int64)
  missing = 0
  for start in range(0, len(values), chunk):
    part = values[start:start + chunk].astype(np.float32)
    nan = np.isnan(part)
    missing += int(nan.sum())
    index = hg.bin_index(tf.constant(part[~nan]), lower, upper,
                         encoding.num_bins).numpy()
    counts += np.bincount(index, minlength=encoding.num_bins)
  return counts, missing


def _messages(encoding: hg.Encoding) -> tf.Tensor:
  """float64 [b + 1, L]: each bin's client message, then NaN's (zeros):
  the process's int32 encoding, flattened as the aggregator does."""
  table = tf.map_fn(encoding.encode,
                    tf.range(encoding.num_bins, dtype=tf.int64),
                    fn_output_signature=tf.int64)
  table = tf.cast(tf.cast(table, tf.int32), tf.float64)
  return tf.concat([table, tf.zeros([1, encoding.length], tf.float64)], 0)


def _seed(noise_seed: Optional[int], stream: int, index: int) -> tf.Tensor:
  if noise_seed is None:
    return entropy.os_entropy_seed()
  return tf.cast(
      tf.random.experimental.stateless_fold_in(
          tf.constant([noise_seed, stream], tf.int64), index), tf.int64)


def _ddg_sum(mechanism, messages, counts, num_clients, noise_seed, round_seed,
             progress):
  """The secure sum's residue (int64 [L]) of a DDG round."""
  modulus = mechanism.modulus
  rounded = []
  for seed in ([1, 2], [3, 4]):
    r = [
        mechanism.client_rounded(messages[k], round_seed,
                                 tf.constant(seed, tf.int64))[0]
        for k in range(messages.shape[0])
    ]
    rounded.append(np.stack([np.asarray(x, np.int64) for x in r]))
  if not np.array_equal(rounded[0], rounded[1]):
    raise ValueError('the batched round needs integer client messages '
                     '(the rounding an identity); run the TFF process.')
  total = np.mod(counts @ np.mod(rounded[0], modulus), modulus)
  if mechanism.noise_multiplier > 0:
    draw = tf.function(lambda seed, count: base.ring_residue(
        tf.reduce_sum(base.ring_residue(mechanism.sample_noise(seed, count),
                                        modulus),
                      axis=0), modulus))
    done = 0
    for index, start in enumerate(range(0, num_clients, CHUNK)):
      count = min(CHUNK, num_clients - start)
      share = draw(_seed(noise_seed, 0xDD6, index),
                   tf.constant(count, tf.int64)).numpy()
      total = np.mod(total + share, modulus)
      done += count
      progress(done, num_clients)
  return total


_BINOMIALS = {}


def _binomial(power: int):
  """Binomial(2^power, p) per element of p (traced once per power)."""
  if power not in _BINOMIALS:
    _BINOMIALS[power] = tf.function(
        lambda p, seed: binomial.sample_binomial(p, 2**power, seed),
        input_signature=[
            tf.TensorSpec([None], tf.float64),
            tf.TensorSpec([2], tf.int64)
        ])
  return _BINOMIALS[power]


def _pbm_sum(mechanism, messages, counts, num_clients, noise_seed, round_seed,
             progress):
  """The secure sum's residue (int64 [L]) of a cPBM round."""
  m = mechanism.num_trials
  probs = np.stack([
      np.asarray(
          mechanism.client_probabilities(messages[k], round_seed)[0],
          np.float64) for k in range(messages.shape[0])
  ])  # [b + 1, L]
  length = probs.shape[1]
  # (coordinate, p, clients) for each distinct p of each coordinate.
  groups = []
  for j in range(length):
    for u in np.unique(probs[:, j]):
      clients = int(counts[probs[:, j] == u].sum())
      if clients:
        groups.append((j, u, clients * m))
  total = np.zeros([length], np.int64)
  powers = range(0, _MAX_TRIALS.bit_length() + _DIGIT, _DIGIT)
  for step, power in enumerate(powers):
    coords, ps = [], []
    for j, u, trials in groups:
      digit = (trials >> power) & (2**_DIGIT - 1)
      coords += [j] * digit
      ps += [u] * digit
    if ps:
      draws = _binomial(power)(tf.constant(ps, tf.float64),
                               _seed(noise_seed, 0xB1, step)).numpy()
      np.add.at(total, np.asarray(coords, np.int64), draws)
    progress(num_clients * (step + 1) // len(powers), num_clients)
  return np.mod(total, mechanism.modulus)


def run_round(
    process_parameters,
    options,
    values,
    *,
    on_wrap: str = 'raise',
    noise_seed: Optional[int] = None,
    progress: Callable[[int, int],
                       None] = lambda done, total: None) -> RoundOutput:
  """One round of the quantile process on `values` (one float per client).

  Args:
    process_parameters: `calibration.QuantileParameters`.
    options: the process's read-out (`quantiles.read_out_options`).
    values: one value per client (NaN: no value), any float array.
    on_wrap: as the process's.
    noise_seed: None (private: every draw's seed from the kernel's
      CSPRNG) or an integer (reproducible, NOT private).
    progress: called with (clients done, clients) as the round advances.
  """
  from tff_ddp.analytics.quantiles import process as q
  params = process_parameters
  encoding = params.encoding
  mechanism = params.aggregator_mechanism()
  num_clients = len(values)
  on_wrap = secure_sum.check_on_wrap(on_wrap)
  if on_wrap is secure_sum.OnWrap.RAISE:
    params.ring_capacity().check(num_clients)
  counts, missing = bin_counts(encoding, values, options.lower_bound,
                               options.upper_bound)
  counts = np.append(counts, missing)  # NaN's message: zeros
  messages = _messages(encoding)
  round_seed = _seed(noise_seed, 0x5EED, 0)
  summed_fn = (_ddg_sum
               if mechanism.name is base.Kind.DISCRETE_GAUSSIAN else _pbm_sum)
  summed = summed_fn(mechanism, messages, counts, num_clients, noise_seed,
                     round_seed, progress)
  n = tf.constant(num_clients, tf.int64)
  decoded, _ = mechanism.server_decode(
      {'encoded': tf.constant(summed, tf.int64)}, n, round_seed)
  # The aggregator returns the sum in the value's dtype (int32 counts).
  noisy_sum = params.factory.value_spec(params.value_type).unflatten(decoded)
  values_, cdf, status, total, stddev = q.server_read_out(
      params, options, noisy_sum, n, on_wrap)
  return RoundOutput(np.asarray(values_,
                                np.float64), np.asarray(cdf, np.float64),
                     status.numpy().decode(), float(total), float(stddev),
                     num_clients)
