"""`DiscreteGaussianSumFactory`: distributed discrete Gaussian sum for TFF.

A one-layer aggregator: client encode (Algorithm 1 of the DDG paper), one
`federated_secure_modular_sum`, server decode (Algorithm 2). The math lives in
`tff_ddp.mechanisms.distributed_discrete_gaussian`; this module only places it.

It takes the core arguments of TFF's internal
`tff.aggregators.distributed_dp.DistributedDpSumFactory` (`noise_multiplier`,
`expected_clients_per_round`, `bits`, `l2_clip`, `modclip_prob`, `beta`), so
the two can be swapped, e.g. in
`tff.learning.algorithms.build_unweighted_fed_avg(model_aggregator=...)`.
"""

import collections
import math
import warnings
from typing import Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg

ROTATIONS = ('hadamard',)


class DiscreteGaussianSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Sums client values with distributed discrete Gaussian noise and SecAgg.

  Each round, every client clips its (flattened) value to `l2_clip`, scales by
  1/gamma, rotates with a randomized Walsh-Hadamard transform (public seed,
  new each round), rounds to integers under the norm bound of Theorem 5 (3),
  adds discrete Gaussian noise of scale sigma/gamma with
  sigma = noise_multiplier * l2_clip / sqrt(expected_clients_per_round), and
  reduces mod 2^bits. The server sees only the modular sum, centres it,
  un-rotates and rescales. gamma follows the Section 6 heuristic so that k
  standard deviations of a sum coordinate fit in the ring, with
  P(|N(0,1)| > k) = modclip_prob.

  Privacy (per round, zero-out neighbours, DDG paper Theorem 5 /
  Proposition 10): `dp_event(value_type)` returns the
  `DistributedDiscreteGaussianDpEvent` that `tff_ddp.accounting` turns into
  RDP / (eps, delta). It assumes `expected_clients_per_round` noise shares;
  the measurements carry the event with the *measured* number of
  participating clients, which is the one to account with when fewer clients
  report than expected.

  Measurements each round: l2_clip, scale (1/gamma), scaled_local_stddev,
  bits, padded_dimension, participating_clients, nonfinite_clients,
  clipped_clients, rounding_failures, near_boundary_coordinates (decoded
  coordinates within k/2 predicted standard deviations of the ring boundary:
  a wrap-around warning sign; with worst-case aligned clients about
  2(1 - Phi(k/2)) of the coordinates land there) and dp_event (its fields).
  The counters travel through the same secure sum (modulus 2^30), so the
  server sees only their totals.

  Example:
    >>> factory = DiscreteGaussianSumFactory(
    ...     noise_multiplier=1.0, expected_clients_per_round=100, bits=16,
    ...     l2_clip=1.0)
    >>> process = factory.create(tff.TensorType(np.float32, [1024]))
  """

  def __init__(
      self,
      noise_multiplier: float,
      expected_clients_per_round: int,
      bits: int,
      l2_clip: float,
      modclip_prob: float = 1e-4,
      beta: float = 0.0,
      rotation: str = 'hadamard',
      seed: Optional[int] = None,
  ):
    """Validates and stores the configuration (dimension-free checks).

    Args:
      noise_multiplier: central noise stddev / l2_clip, >= 0 (0: no noise,
        the rounds are then not private).
      expected_clients_per_round: clients per round whose noise shares form
        the central noise, >= 1.
      bits: the secure sum modulus is 2^bits, 1 <= bits <= 30.
      l2_clip: l2 clip norm of a client's whole (flattened) value, > 0.
      modclip_prob: target probability of a sum coordinate wrapping around,
        in (0, 1). Default 1e-4 as in TFF.
      beta: conditional rounding bias in [0, 1). Default 0 as in TFF;
        exp(-1/2) is the paper's choice and gives a smaller sensitivity.
      rotation: 'hadamard' (randomized Walsh-Hadamard with zero padding to a
        power of two).
      seed: for tests only. Makes the rotation and the client noise
        deterministic: each client's noise seed is derived from (seed, round,
        a fingerprint of its input), so two clients with equal inputs get
        equal noise. Never set it in a deployment; by default every client
        draws its noise seed from the operating system's entropy.
    """
    # Dimension-independent checks now; the rest (noise scale, overflow) in
    # `create` / `parameters`, when the dimension is known.
    ddg.validate_arguments(l2_clip, noise_multiplier,
                           expected_clients_per_round, bits, modclip_prob,
                           beta)
    if rotation not in ROTATIONS:
      raise ValueError(
          f'rotation must be one of {ROTATIONS}, got {rotation!r}.')
    if seed is not None:
      if not isinstance(seed, (int, np.integer)):
        raise TypeError(f'seed must be an int or None, got {seed!r}.')
      warnings.warn(
          'DiscreteGaussianSumFactory(seed=...) makes client noise a function '
          'of the seed and the client input: for tests only, never deploy.')
    self._noise_multiplier = float(noise_multiplier)
    self._expected_clients = int(expected_clients_per_round)
    self._bits = int(bits)
    self._l2_clip = float(l2_clip)
    self._modclip_prob = float(modclip_prob)
    self._beta = float(beta)
    self._rotation = rotation
    self._seed = None if seed is None else int(seed)

  def parameters(self, value_type) -> ddg.DdgParameters:
    """The derived parameters (gamma, scaled noise, bounds) for `value_type`."""
    _, dim = _float_structure(value_type)
    return ddg.compute_parameters(
        dim, self._l2_clip, self._noise_multiplier, self._expected_clients,
        self._bits, self._modclip_prob, self._beta)

  def dp_event(self, value_type, num_clients=None) -> dp_accounting.DpEvent:
    """The DP event of one round on `value_type` (zero-out neighbours)."""
    return self.parameters(value_type).dp_event(num_clients)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    specs, _ = _float_structure(value_type)
    params = self.parameters(value_type)
    flat_specs = tf.nest.flatten(specs)
    sizes = [int(np.prod(s.shape)) for s in flat_specs]
    test_seed = self._seed

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
    def client_fn(value, rotation_seed):
      flat = tf.concat(
          [tf.reshape(tf.cast(t, tf.float64), [-1])
           for t in tf.nest.flatten(value)], axis=0)
      if test_seed is None:
        noise_seed = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
      else:
        digest = tf.bitcast(
            tf.fingerprint(tf.reshape(tf.bitcast(flat, tf.uint8), [1, -1]))[0],
            tf.int64)
        noise_seed = tf.random.experimental.stateless_fold_in(
            rotation_seed, digest)
      z, counters = ddg.client_encode(flat, params, rotation_seed, noise_seed)
      return collections.OrderedDict(
          encoded=tf.cast(z, tf.int32), counters=tf.cast(counters, tf.int32))

    moduli = collections.OrderedDict(encoded=params.modulus, counters=2**30)

    @tff.tensorflow.computation(
        client_fn.type_signature.result, state_type, seed_type)
    def server_fn(summed, state, rotation_seed):
      decoded, near = ddg.server_decode(summed['encoded'], params,
                                        rotation_seed)
      parts = tf.split(decoded, sizes)
      result = tf.nest.pack_sequence_as(specs, [
          tf.cast(tf.reshape(p, s.shape), s.dtype)
          for p, s in zip(parts, flat_specs)])
      counters = tf.cast(summed['counters'], tf.int64)
      measurements = collections.OrderedDict(
          l2_clip=tf.constant(params.l2_clip, tf.float64),
          scale=tf.constant(params.scale, tf.float64),
          scaled_local_stddev=tf.constant(params.scaled_local_stddev,
                                          tf.float64),
          bits=tf.constant(params.bits, tf.int32),
          padded_dimension=tf.constant(params.padded_dim, tf.int64),
          **{name: counters[i] for i, name in enumerate(ddg.COUNTERS)},
          near_boundary_coordinates=near,
          dp_event=collections.OrderedDict(
              l2_sensitivity=tf.constant(params.l2_sensitivity, tf.float64),
              local_stddev=tf.constant(params.scaled_local_stddev, tf.float64),
              num_clients=counters[0],
              dimension=tf.constant(params.padded_dim, tf.int64)),
      )
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
          encoded, moduli)
      new_state, result, measurements = tff.federated_map(
          server_fn, (summed, state, seed))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=result, measurements=measurements)

    return tff.templates.AggregationProcess(init_federated, next_fn)


def _float_structure(value_type):
  """(nested TensorSpecs, total number of elements) of a float value type."""
  value_type = tff.types.to_type(value_type)
  if not tff.types.is_structure_of_tensors(value_type):
    raise TypeError(
        'DiscreteGaussianSumFactory needs a tensor or a (nested) structure of '
        f'tensors; got {value_type}.')
  if not tff.types.is_structure_of_floats(value_type):
    raise TypeError(
        f'DiscreteGaussianSumFactory sums float tensors; got {value_type}.')
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  flat = tf.nest.flatten(specs)
  if not all(s.shape.is_fully_defined() for s in flat):
    raise TypeError(
        f'DiscreteGaussianSumFactory needs fully defined shapes; got '
        f'{value_type}.')
  dim = sum(int(np.prod(s.shape.as_list())) for s in flat)
  if dim < 1:
    raise TypeError(f'value_type has no elements: {value_type}.')
  return specs, dim
