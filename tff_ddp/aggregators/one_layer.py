"""The one-layer skeleton every tff_ddp aggregator shares.

client encode -> one `federated_secure_modular_sum` -> server decode, with a
flat state (round counter and a public rotation seed). TFF's own distributed
DP factory nests about eight aggregation layers, which breaks protobuf's
nesting limit inside `build_unweighted_fed_avg` (SPEC); a single layer does
not. The mechanism modules supply the TF math; this module only places it:

  state = (round, rotation_seed)            # SERVER, public
  seed  = fold_in(rotation_seed, round)     # the round's public randomness
  client: flatten value -> float64 [dim]; noise seed (private, per client);
          encoded = client_encode(flat, seed, noise_seed)   # dict of int64
  secure: summed = federated_secure_modular_sum(encoded as int32, moduli)
  server: flat, measurements = server_decode(summed as int64, seed)
          result = flat restored to the value's structure and dtypes

Noise seeds. By default each client draws its noise seed from the operating
system's entropy (`NonDeterministicInts`, unaffected by `tf.random.set_seed`),
so no two clients share one. With a test seed the noise seed is derived from
(test seed, round, a fingerprint of the client's input): repeatable, and two
clients with equal inputs get equal noise -- for tests only.

The test backend's secure sum wants int32 (SPEC): values are cast to int32 at
the boundary; with power-of-two moduli <= 2^30 the int32 wrap-around of the
plain sum does not change the residue, and the server reduces mod M again.
"""

import collections
import warnings
from typing import Callable, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# Moduli of the secure sum must be powers of two no larger than this.
MAX_MODULUS = 2**30
# Modulus of the per-client counters (participating clients, ...).
COUNTER_MODULUS = 2**30

ClientEncode = Callable[[tf.Tensor, tf.Tensor, tf.Tensor],
                        Mapping[str, tf.Tensor]]
ServerDecode = Callable[[Mapping[str, tf.Tensor], tf.Tensor],
                        Tuple[tf.Tensor, Mapping[str, tf.Tensor]]]


def float_structure(value_type, owner: str):
  """(nested TensorSpecs, total number of elements) of a float value type.

  Raises TypeError (naming `owner`) for non-float, non-tensor or partially
  defined types.
  """
  value_type = tff.types.to_type(value_type)
  if not tff.types.is_structure_of_tensors(value_type):
    raise TypeError(
        f'{owner} needs a tensor or a (nested) structure of tensors; got '
        f'{value_type}.')
  if not tff.types.is_structure_of_floats(value_type):
    raise TypeError(f'{owner} sums float tensors; got {value_type}.')
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  flat = tf.nest.flatten(specs)
  if not all(s.shape.is_fully_defined() for s in flat):
    raise TypeError(
        f'{owner} needs fully defined shapes; got {value_type}.')
  dim = sum(int(np.prod(s.shape.as_list())) for s in flat)
  if dim < 1:
    raise TypeError(f'value_type has no elements: {value_type}.')
  return specs, dim


def check_test_seed(seed, owner: str) -> Optional[int]:
  """Validates an optional test seed and warns that it is for tests only."""
  if seed is None:
    return None
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise TypeError(f'seed must be an int or None, got {seed!r}.')
  warnings.warn(
      f'{owner}(seed=...) makes client noise a function of the seed and the '
      'client input: for tests only, never deploy.')
  return int(seed)


def build_process(
    value_type,
    owner: str,
    client_encode: ClientEncode,
    moduli: Mapping[str, int],
    server_decode: ServerDecode,
    test_seed: Optional[int] = None,
) -> tff.templates.AggregationProcess:
  """Builds the one-layer AggregationProcess around a mechanism.

  Args:
    value_type: the clients' value type (float tensors, possibly nested).
    owner: the factory's name, for error messages.
    client_encode: (flat float64 [dim], round_seed, noise_seed) -> ordered
      mapping of int64 tensors, each in [0, moduli[key]).
    moduli: the secure-sum modulus of each key of client_encode's output;
      powers of two <= MAX_MODULUS.
    server_decode: (summed mapping of int64 tensors, round_seed) ->
      (flat float64 [dim] estimate of the sum, measurements mapping).
    test_seed: None (fresh OS entropy per client) or a test seed.

  Returns:
    A `tff.templates.AggregationProcess` with state (round, rotation_seed).
  """
  for key, modulus in moduli.items():
    if modulus < 2 or modulus > MAX_MODULUS or modulus & (modulus - 1):
      raise ValueError(
          f'secure-sum modulus of {key!r} must be a power of two in '
          f'[2, 2^30], got {modulus}.')
  value_type = tff.types.to_type(value_type)
  specs, _ = float_structure(value_type, owner)
  flat_specs = tf.nest.flatten(specs)
  sizes = [int(np.prod(s.shape)) for s in flat_specs]

  @tff.tensorflow.computation
  def init_fn():
    if test_seed is None:
      base = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
    else:
      base = tf.constant([test_seed, 0x5EED], tf.int64)
    return collections.OrderedDict(
        round=tf.constant(0, tf.int64), rotation_seed=base)

  state_type = init_fn.type_signature.result
  seed_type = state_type.rotation_seed

  @tff.tensorflow.computation(state_type)
  def round_seed_fn(state):
    # Public randomness of this round: the same at clients and server.
    return tf.random.experimental.stateless_fold_in(
        state['rotation_seed'], state['round'])

  @tff.tensorflow.computation(value_type, seed_type)
  def client_fn(value, round_seed):
    flat = tf.concat(
        [tf.reshape(tf.cast(t, tf.float64), [-1])
         for t in tf.nest.flatten(value)], axis=0)
    if test_seed is None:
      noise_seed = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
    else:
      digest = tf.bitcast(
          tf.fingerprint(tf.reshape(tf.bitcast(flat, tf.uint8), [1, -1]))[0],
          tf.int64)
      noise_seed = tf.random.experimental.stateless_fold_in(round_seed, digest)
    encoded = client_encode(flat, round_seed, noise_seed)
    return collections.OrderedDict(
        (key, tf.cast(encoded[key], tf.int32)) for key in moduli)

  secure_moduli = collections.OrderedDict(
      (key, int(moduli[key])) for key in moduli)

  @tff.tensorflow.computation(
      client_fn.type_signature.result, state_type, seed_type)
  def server_fn(summed, state, round_seed):
    summed = collections.OrderedDict(
        (key, tf.math.floormod(tf.cast(summed[key], tf.int64),
                               secure_moduli[key]))
        for key in secure_moduli)
    decoded, measurements = server_decode(summed, round_seed)
    parts = tf.split(decoded, sizes)
    result = tf.nest.pack_sequence_as(specs, [
        tf.cast(tf.reshape(p, s.shape), s.dtype)
        for p, s in zip(parts, flat_specs)])
    new_state = collections.OrderedDict(
        round=state['round'] + 1, rotation_seed=state['rotation_seed'])
    return new_state, result, measurements

  @tff.federated_computation
  def init_federated():
    return tff.federated_eval(init_fn, tff.SERVER)

  @tff.federated_computation(
      init_federated.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS))
  def next_fn(state, value):
    seed = tff.federated_map(round_seed_fn, state)
    encoded = tff.federated_map(
        client_fn, (value, tff.federated_broadcast(seed)))
    summed = tff.backends.mapreduce.federated_secure_modular_sum(
        encoded, secure_moduli)
    new_state, result, measurements = tff.federated_map(
        server_fn, (summed, state, seed))
    return tff.templates.MeasuredProcessOutput(
        state=new_state, result=result, measurements=measurements)

  return tff.templates.AggregationProcess(init_federated, next_fn)
