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
from typing import Optional

import dp_accounting
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import one_layer
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg

ROTATIONS = registry.NAMES
_NAME = 'DiscreteGaussianSumFactory'


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
      granularity: Optional[float] = None,
      linf_clip: Optional[float] = None,
      **kashin_options,
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
        power of two) or 'kashin' (Kashin's representation over a
        randomized Hadamard frame of dimension D > d; then `l2_clip` bounds
        the representation's norm, which is >= the input's, and the
        privacy event is over D coordinates), or 'none' (no rotation: for
        inputs whose coordinates are bounded already, with `linf_clip`).
      seed: for tests only. Makes the rotation and the client noise
        deterministic: each client's noise seed is derived from (seed, round,
        a fingerprint of its input), so two clients with equal inputs get
        equal noise. Never set it in a deployment; by default every client
        draws its noise seed from the operating system's entropy.
      granularity: gamma, instead of the Section 6 heuristic (1/gamma is
        the integer scaling factor c of the quantile paper); the ring is
        then checked against the worst-case sum (see
        `mechanisms.distributed_discrete_gaussian.compute_parameters`).
      linf_clip: also clip each input coordinate to [-linf_clip,
        linf_clip]; the ring check then uses it.
      **kashin_options: passed to `KashinEncoder` (redundancy, eta, delta,
        iterations); only with rotation='kashin'.
    """
    # Dimension-independent checks now; the rest (noise scale, overflow) in
    # `create` / `parameters`, when the dimension is known.
    ddg.validate_arguments(l2_clip, noise_multiplier,
                           expected_clients_per_round, bits, modclip_prob,
                           beta)
    if rotation not in ROTATIONS:
      raise ValueError(
          f'rotation must be one of {ROTATIONS}, got {rotation!r}.')
    registry.make_encoder(rotation, 1, **kashin_options)  # validates options
    seed = one_layer.check_test_seed(seed, _NAME)
    self._noise_multiplier = float(noise_multiplier)
    self._expected_clients = int(expected_clients_per_round)
    self._bits = int(bits)
    self._l2_clip = float(l2_clip)
    self._modclip_prob = float(modclip_prob)
    self._beta = float(beta)
    self._rotation = rotation
    self._kashin_options = dict(kashin_options)
    self._seed = seed
    self._granularity = granularity
    self._linf_clip = linf_clip

  def encoder(self, value_type):
    """The rotation (encoder) used for `value_type`."""
    _, dim = one_layer.float_structure(value_type, _NAME)
    return registry.make_encoder(self._rotation, dim, **self._kashin_options)

  def parameters(self, value_type) -> ddg.DdgParameters:
    """The derived parameters (gamma, scaled noise, bounds) for `value_type`."""
    encoder = self.encoder(value_type)
    return ddg.compute_parameters(
        encoder.dim, self._l2_clip, self._noise_multiplier,
        self._expected_clients, self._bits, self._modclip_prob, self._beta,
        output_dim=encoder.output_dim, granularity=self._granularity,
        linf_clip=self._linf_clip)

  def dp_event(self, value_type, num_clients=None) -> dp_accounting.DpEvent:
    """The DP event of one round on `value_type` (zero-out neighbours)."""
    return self.parameters(value_type).dp_event(num_clients)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    encoder = self.encoder(value_type)
    params = self.parameters(value_type)

    def client_encode(flat, round_seed, noise_seed):
      z, counters = ddg.client_encode(flat, params, round_seed, noise_seed,
                                      encoder)
      return collections.OrderedDict(encoded=z, counters=counters)

    def server_decode(summed, round_seed):
      decoded, near = ddg.server_decode(summed['encoded'], params,
                                        round_seed, encoder)
      counters = summed['counters']
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
      return decoded, measurements

    moduli = collections.OrderedDict(
        encoded=params.modulus, counters=one_layer.COUNTER_MODULUS)
    return one_layer.build_process(value_type, _NAME, client_encode, moduli,
                                   server_decode, self._seed)
