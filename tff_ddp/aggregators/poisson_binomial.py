"""`PoissonBinomialSumFactory`: clipped Poisson binomial (cPBM) sum for TFF.

A one-layer aggregator (`one_layer.build_process`): client encode
(Algorithms 1 and 3 of the federated frequency estimation paper), one
`federated_secure_modular_sum`, server decode (Algorithm 2). The math lives
in `tff_ddp.mechanisms.poisson_binomial`; this module only places it.
"""

import collections
from typing import Optional

import dp_accounting
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import one_layer
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import poisson_binomial as pbm

ENCODERS = registry.NAMES
_NAME = 'PoissonBinomialSumFactory'


class PoissonBinomialSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Sums client values with the clipped Poisson binomial mechanism and SecAgg.

  Each round every client flattens its value x (d scalars), encodes it to
  y in R^D (Kashin's representation over a randomized Hadamard frame by
  default, public seed new each round), clips ||y||_2 to `l2_clip` = C, and
  sends Z[k] ~ Binomial(m, 1/2 + theta y[k] / C) for each coordinate k, with
  m = `num_trials`. The server sees only sum_i Z_i mod 2^bits, with
  2^bits > max_clients_per_round * m so the sum is recovered exactly, and
  returns decode(C / (m theta) (S - n m / 2)), with n the number of
  participating clients counted through the secure sum: an unbiased estimate
  of sum_i clip(y_i) mapped back to the value's structure, with variance at
  most n C^2 / (4 m theta^2) per representation coordinate (eq. 3).

  Note that `l2_clip` bounds the norm of the *representation*, which for the
  Kashin encoder is larger than the input's (||y|| >= ||x||, typically by a
  small factor; see `tff_ddp.encoders.KashinEncoder`): an input of norm
  below C can still be scaled down. `clipped_clients` counts such clients.

  Privacy (per round): `dp_event(value_type)` returns the
  `PoissonBinomialDpEvent(theta, m, n, D)` (D replaced by min(D, l0_clip)
  with an l0 clip, and replace_one_dimension = min(D, 2 l0_clip)) that
  `tff_ddp.accounting.RdpAccountant` turns into RDP / (eps, delta): the
  zero-out curve (a client's input replaced by zeros, its Binomial(m, 1/2)
  draws still in the sum) under its default relation, Lemma 2's replace-one
  curve under REPLACE_ONE. It assumes `expected_clients_per_round` clients;
  the measurements carry the event with the *measured* count.

  Measurements each round: l2_clip, theta, coordinate_bound (B), num_trials,
  modulus, output_dimension, participating_clients, nonfinite_clients,
  clipped_clients, clipped_fraction, inexact_encodings (clients whose
  representation did not reconstruct their input to 1e-6 relative),
  sum_may_wrap (more clients than the ring was sized for) and dp_event.

  Example:
    >>> factory = PoissonBinomialSumFactory(
    ...     l2_clip=1.0, theta=0.25, num_trials=16,
    ...     expected_clients_per_round=100)
    >>> process = factory.create(tff.TensorType(np.float32, [256]))
  """

  def __init__(
      self,
      l2_clip: float,
      theta: float,
      num_trials: int,
      expected_clients_per_round: int,
      encoder: str = 'kashin',
      max_clients_per_round: Optional[int] = None,
      seed: Optional[int] = None,
      scaling: str = 'l2',
      linf_clip: Optional[float] = None,
      l0_clip: Optional[int] = None,
      **kashin_options,
  ):
    """Validates and stores the configuration (dimension-free checks).

    Args:
      l2_clip: C > 0, clip of the representation's l2 norm.
      theta: bias scale in (0, 1/4]; the privacy cost grows with theta.
      num_trials: m >= 1 Bernoulli trials per coordinate.
      expected_clients_per_round: n >= 1, the clients the privacy event
        assumes per round.
      encoder: 'kashin' (default; Kashin's representation over a
        randomized Hadamard frame) or 'hadamard' (randomized Walsh-Hadamard
        rotation, D = next power of two; no l_inf guarantee) or 'none'
        (identity, for coordinatewise-bounded inputs with linf_clip).
      max_clients_per_round: most clients a round may have; sizes the ring
        (default expected_clients_per_round).
      seed: for tests only: makes the frame and the client draws
        deterministic (see `one_layer`). Never set it in a deployment.
      scaling: 'l2' (Algorithm 3 as published: p = 1/2 + theta y / C) or
        'linf' (p = 1/2 + theta y / B, B = K C / sqrt(D) the l_inf bound
        the Kashin representation guarantees; same privacy event, variance
        smaller by D / K^2; needs encoder='kashin'). See
        `tff_ddp.mechanisms.poisson_binomial`.
      linf_clip: with scaling='linf', the coordinate bound B itself (for
        inputs bounded coordinatewise, e.g. with encoder='none').
      l0_clip: optional k: each client keeps its k largest-magnitude
        representation coordinates (counted in clipped_clients if it had
        more), and the privacy event composes Lemma 2 over min(k, D)
        coordinates instead of D (zero-out neighbours: the other
        coordinates send Binomial(m, 1/2) either way). For sparse inputs
        with encoder='none', e.g. histogram encodings.
      **kashin_options: passed to `KashinEncoder` (redundancy, eta, delta,
        iterations).
    """
    # Every dimension-free check now (dim = output_dim = 1 stands in).
    if encoder not in ENCODERS:
      raise ValueError(f'encoder must be one of {ENCODERS}, got {encoder!r}.')
    probe = registry.make_encoder(encoder, 1, **kashin_options)  # validates
    pbm.compute_parameters(1, 1, l2_clip, theta, num_trials,
                           expected_clients_per_round, max_clients_per_round,
                           scaling, getattr(probe, 'level', None), linf_clip,
                           l0_clip)
    self._seed = one_layer.check_test_seed(seed, _NAME)
    self._l2_clip = float(l2_clip)
    self._theta = float(theta)
    self._num_trials = int(num_trials)
    self._expected_clients = int(expected_clients_per_round)
    self._max_clients = max_clients_per_round
    self._encoder = encoder
    self._scaling = scaling
    self._linf_clip = linf_clip
    self._l0_clip = l0_clip
    self._kashin_options = dict(kashin_options)

  def encoder(self, value_type):
    """The encoder used for `value_type`."""
    _, dim = one_layer.float_structure(value_type, _NAME)
    return registry.make_encoder(self._encoder, dim, **self._kashin_options)

  def parameters(self, value_type) -> pbm.PbmParameters:
    """The derived parameters (ring size, probability bounds) for value_type."""
    encoder = self.encoder(value_type)
    return pbm.compute_parameters(
        encoder.dim, encoder.output_dim, self._l2_clip, self._theta,
        self._num_trials, self._expected_clients, self._max_clients,
        self._scaling, getattr(encoder, 'level', None), self._linf_clip,
        self._l0_clip)

  def dp_event(self, value_type, num_clients=None) -> dp_accounting.DpEvent:
    """The DP event of one round on `value_type` (zero-out neighbours)."""
    return self.parameters(value_type).dp_event(num_clients)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    encoder = self.encoder(value_type)
    params = self.parameters(value_type)

    def client_encode(flat, round_seed, noise_seed):
      z, counters = pbm.client_encode(flat, params, encoder, round_seed,
                                      noise_seed)
      return collections.OrderedDict(encoded=z, counters=counters)

    def server_decode(summed, round_seed):
      counters = summed['counters']
      n = counters[0]
      decoded, may_wrap = pbm.server_decode(
          summed['encoded'], n, params, encoder, round_seed)
      measurements = collections.OrderedDict(
          l2_clip=tf.constant(params.l2_clip, tf.float64),
          theta=tf.constant(params.theta, tf.float64),
          coordinate_bound=tf.constant(params.coordinate_bound, tf.float64),
          num_trials=tf.constant(params.num_trials, tf.int64),
          modulus=tf.constant(params.modulus, tf.int64),
          output_dimension=tf.constant(params.output_dim, tf.int64),
          **{name: counters[i] for i, name in enumerate(pbm.COUNTERS)},
          clipped_fraction=tf.cast(counters[2], tf.float64) / tf.cast(
              tf.maximum(n, 1), tf.float64),
          sum_may_wrap=may_wrap,
          dp_event=collections.OrderedDict(
              theta=tf.constant(params.effective_theta, tf.float64),
              num_trials=tf.constant(params.num_trials, tf.int64),
              num_clients=n,
              dimension=tf.constant(params.sensitive_coordinates, tf.int64),
              replace_one_dimension=tf.constant(
                  params.replace_one_coordinates, tf.int64)),
      )
      return decoded, measurements

    moduli = collections.OrderedDict(
        encoded=params.modulus, counters=one_layer.COUNTER_MODULUS)
    return one_layer.build_process(value_type, _NAME, client_encode, moduli,
                                   server_decode, self._seed)
