"""The distributed discrete Gaussian (DDG) mechanism: parameters, client and
server procedures.

Kairouz, Liu & Steinke (2021), "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation": Algorithm 1 (client),
Algorithm 2 (server), Theorem 5 (privacy) and the Section 6 heuristic for the
granularity gamma. This module is the one place these formulas live; the TFF
factory in `tff_ddp.aggregators` only moves tensors between placements.

Data flow for one client (d = padded dimension, M = 2^bits):

  x  --clip to c-->  --/gamma-->  x'  --H D_xi-->  x''  --conditional
  randomized rounding-->  x~ (int64, ||x~||^2 <= T)  --+ N_Z(0, (sigma/gamma)^2)^d-->
  --mod M-->  z in [0, M)^d

Server: zbar = sum z mod M, centred into {-M/2+1, ..., M/2}, then
y = gamma D_xi H^T zbar', unpadded.

Worked example of the centring (M = 8): a coordinate zbar = 6 means the sum
was 6 - 8 = -2 (6 > M/2 = 4); zbar = 4 stays 4; zbar = 3 stays 3.
"""

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np
import scipy.special
import tensorflow as tf

from tff_ddp.accounting import ddg as ddg_accounting
from tff_ddp.encoders import hadamard
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import discrete_gaussian
from tff_ddp.mechanisms import rounding

MIN_BITS = 1
# The test backend's secure modular sum runs on int32 and the modulus must be
# an int32 value: power-of-two moduli up to 2^30 stay exact under wrap-around.
MAX_BITS = 30
# Client integers (rounded values, squared norms) are kept below this.
_INT64_SAFE = 2**62
# Scaled clip norms above this would make float64 rounding coarse (resolution
# 2^-10 at 2^42); no sensible configuration comes near it.
_MAX_SCALED_CLIP = 2.0**42


def num_stddevs_for_modclip_prob(modclip_prob: float) -> float:
  """k with P(|N(0,1)| > k) = modclip_prob, i.e. k = sqrt(2) erfcinv(p)."""
  return float(math.sqrt(2.0) * scipy.special.erfcinv(modclip_prob))


@dataclasses.dataclass(frozen=True)
class DdgParameters:
  """Everything Algorithms 1-2 and Theorem 5 need, derived and validated.

  Real-domain quantities: l2_clip (c), local_stddev (sigma), gamma.
  Integer-domain (scaled) quantities: scaled_l2_clip (c/gamma),
  scaled_local_stddev (sigma/gamma), norm_threshold (T, the exact integer
  bound on ||x~||_2^2 checked by the client), l2_sensitivity (sqrt(T)).
  """

  dim: int
  padded_dim: int
  l2_clip: float
  noise_multiplier: float
  expected_clients_per_round: int
  bits: int
  modclip_prob: float
  beta: float
  k_stddevs: float
  local_stddev: float
  gamma: float
  scaled_l2_clip: float
  scaled_local_stddev: float
  norm_threshold: int
  l2_sensitivity: float
  sum_stddev: float
  linf_clip: Optional[float] = None
  granularity_given: bool = False

  @property
  def modulus(self) -> int:
    return 2**self.bits

  @property
  def scale(self) -> float:
    """1/gamma, the factor from real to integer units."""
    return 1.0 / self.gamma

  @property
  def boundary_margin(self) -> float:
    """Decoded coordinates with |zbar'| > M/2 - margin are 'near the ring
    boundary'; margin = (k/2) * the predicted stddev of a sum coordinate."""
    return 0.5 * self.k_stddevs * self.sum_stddev

  def dp_event(self, num_clients=None):
    """The per-round event (zero-out neighbours); see tff_ddp.accounting."""
    import dp_accounting  # pylint: disable=g-import-not-at-top
    from tff_ddp.accounting import events  # pylint: disable=g-import-not-at-top
    if self.noise_multiplier == 0:
      return dp_accounting.NonPrivateDpEvent()
    return events.DistributedDiscreteGaussianDpEvent(
        l2_sensitivity=self.l2_sensitivity,
        local_stddev=self.scaled_local_stddev,
        num_clients=int(num_clients or self.expected_clients_per_round),
        dimension=self.padded_dim)


def _granularity(l2_clip, local_stddev, n, padded_dim, bits, k):
  """gamma with 2 k sigma_hat / gamma = 2^bits (Section 6 heuristic).

  sigma_hat^2 = c^2 n^2 / d + (gamma^2/4 + sigma^2) n is the variance proxy of
  a coordinate of sum_i (x~_i + y_i) in real units under the general bound
  ||sum x_i|| <= c n. With a = 2^bits / (2k), solving
  sigma_hat^2 = a^2 gamma^2 for gamma gives
  gamma = sqrt((c^2 n^2 / d + sigma^2 n) / (a^2 - n/4)), defined iff a^2 > n/4.
  """
  a_sq = (2.0**bits / (2.0 * k)) ** 2
  if a_sq <= n / 4.0:
    return None
  return math.sqrt(
      (l2_clip**2 * n**2 / padded_dim + local_stddev**2 * n) / (a_sq - n / 4.0))


def validate_arguments(
    l2_clip: float,
    noise_multiplier: float,
    expected_clients_per_round: int,
    bits: int,
    modclip_prob: float,
    beta: float,
) -> float:
  """The checks of `compute_parameters` that do not need the dimension.

  Returns k = sqrt(2) erfcinv(modclip_prob). Raises ValueError naming the
  argument and what works.
  """
  _require(_finite(l2_clip) and l2_clip > 0,
           f'l2_clip must be a finite number > 0, got {l2_clip!r}.')
  _require(_finite(noise_multiplier) and noise_multiplier >= 0,
           f'noise_multiplier must be a finite number >= 0, got '
           f'{noise_multiplier!r}.')
  _require(isinstance(expected_clients_per_round, (int, np.integer))
           and expected_clients_per_round >= 1,
           'expected_clients_per_round must be an integer >= 1, got '
           f'{expected_clients_per_round!r}.')
  _require(isinstance(bits, (int, np.integer)) and MIN_BITS <= bits <= MAX_BITS,
           f'bits must be an integer in [{MIN_BITS}, {MAX_BITS}], got {bits!r}.')
  _require(_finite(modclip_prob) and 0 < modclip_prob < 1,
           f'modclip_prob must be in the open interval (0, 1), got '
           f'{modclip_prob!r}.')
  _require(_finite(beta) and 0 <= beta < 1,
           f'beta must be in [0, 1), got {beta!r}.')
  k = num_stddevs_for_modclip_prob(modclip_prob)
  n = int(expected_clients_per_round)
  if (2.0**bits / (2.0 * k)) ** 2 <= n / 4.0:
    need = math.floor(math.log2(k * math.sqrt(n))) + 1
    raise ValueError(
        f'bits={bits} is too small for expected_clients_per_round={n} and '
        f'modclip_prob={modclip_prob}: the ring must hold k*sqrt(n) = '
        f'{k * math.sqrt(n):.4g} rounding standard deviations. Use bits >= '
        f'{need} (or fewer clients per round, or a larger modclip_prob).')
  return k


def compute_parameters(
    dim: int,
    l2_clip: float,
    noise_multiplier: float,
    expected_clients_per_round: int,
    bits: int,
    modclip_prob: float = 1e-4,
    beta: float = 0.0,
    output_dim: Optional[int] = None,
    granularity: Optional[float] = None,
    linf_clip: Optional[float] = None,
) -> DdgParameters:
  """Validates a DDG configuration and derives gamma, the noise and bounds.

  Every refusal is a ValueError that names the argument to change and a value
  that works. Nothing random happens here.

  Args:
    dim: number of scalars a client sends (before padding); >= 1.
    l2_clip: c > 0, the l2 clip norm of a client's (flattened) value.
    noise_multiplier: central noise stddev / c; 0 disables noise.
    expected_clients_per_round: n >= 1, the number of clients whose noise
      shares make up the central noise; each adds sigma = z c / sqrt(n).
    bits: log2 of the secure-sum modulus, in [1, 30].
    modclip_prob: target probability that a coordinate of the sum falls
      outside the ring, in (0, 1); sets k = sqrt(2) erfcinv(modclip_prob).
    beta: conditional rounding bias in [0, 1); exp(-1/2) is the paper's
      choice, 0 (the default, as in TFF) means unconditional rounding with
      the worst-case norm bound.
    output_dim: the number of integer coordinates a client sends, the
      encoder's output dimension (default: dim padded to a power of two, the
      randomized Hadamard rotation's). The noise, the sensitivity and the
      privacy event are over this many coordinates.
    granularity: gamma itself (1/gamma = the integer scaling c of the
      quantile paper's Algorithms 1-2) instead of the Section 6 heuristic.
      The ring is then checked against the worst case: n (B/gamma + 1) +
      k sqrt(n) sigma/gamma < M/2 - 1, with B = linf_clip (or l2_clip) the
      largest input coordinate, +1 per client for rounding.
    linf_clip: clip every input coordinate to [-linf_clip, linf_clip] as
      well (before the l2 clip); meant for rotation 'none'.

  Returns:
    A DdgParameters.
  """
  _require(isinstance(dim, (int, np.integer)) and dim >= 1,
           f'dim must be an integer >= 1, got {dim!r}.')
  k = validate_arguments(l2_clip, noise_multiplier,
                         expected_clients_per_round, bits, modclip_prob, beta)
  n = int(expected_clients_per_round)
  if output_dim is None:
    output_dim = hadamard.padded_dimension(int(dim))
  _require(isinstance(output_dim, (int, np.integer)) and output_dim >= dim,
           f'output_dim must be an integer >= dim = {dim}, got '
           f'{output_dim!r}.')
  padded_dim = int(output_dim)
  local_stddev = noise_multiplier * l2_clip / math.sqrt(n)
  if granularity is not None:
    _require(_finite(granularity) and granularity > 0,
             f'granularity must be a finite number > 0, got {granularity!r}.')
  if linf_clip is not None:
    _require(_finite(linf_clip) and linf_clip > 0,
             f'linf_clip must be a finite number > 0, got {linf_clip!r}.')

  def derive(b):
    if granularity is not None:
      return (float(granularity), local_stddev / granularity,
              l2_clip / granularity)
    gamma = _granularity(l2_clip, local_stddev, n, padded_dim, b, k)
    if gamma is None:
      return None
    return gamma, local_stddev / gamma, l2_clip / gamma

  derived = derive(bits)
  gamma, scaled_local, scaled_clip = derived

  if noise_multiplier > 0 and scaled_local < 0.5:
    better = next((b for b in range(bits + 1, MAX_BITS + 1)
                   if derive(b) and derive(b)[1] >= 0.5), None)
    hint = (f'Use bits >= {better}' if better else
            'Increase noise_multiplier or lower expected_clients_per_round')
    raise ValueError(
        f'bits={bits} gives a scaled local noise sigma/gamma = '
        f'{scaled_local:.4g} < 1/2, below the range of the privacy theorem '
        f'(DDG paper Theorem 9 needs sigma/gamma >= 1/2; tau explodes below '
        f'~1). {hint}.')
  if noise_multiplier > 0 and scaled_local > discrete_gaussian.max_supported_scale():
    raise ValueError(
        f'bits={bits} gives a scaled local noise {scaled_local:.4g} above the '
        f'exact sampler range {discrete_gaussian.max_supported_scale():.4g}; '
        f'use fewer bits.')
  threshold = math.floor(ddg_accounting.rounded_l2_norm_bound_squared(
      scaled_clip, padded_dim, beta))
  if threshold >= _INT64_SAFE or scaled_clip > _MAX_SCALED_CLIP:
    fits = next((b for b in range(bits - 1, MIN_BITS - 1, -1)
                 if derive(b) and ddg_accounting.rounded_l2_norm_bound_squared(
                     derive(b)[2], padded_dim, beta) < _INT64_SAFE), None)
    raise ValueError(
        f'bits={bits} makes the scaled clip norm c/gamma = {scaled_clip:.4g} so '
        f'large that the squared norm of a rounded client vector could '
        f'overflow int64. Use bits <= {fits}.' if fits else
        f'l2_clip={l2_clip} with dim={dim} overflows int64 arithmetic.')
  if granularity is not None:
    coord = min(l2_clip, linf_clip or math.inf) / gamma
    worst = n * (coord + 1.0) + k * math.sqrt(n) * scaled_local
    if worst >= 2.0**bits / 2 - 1:
      need = math.ceil(math.log2(2 * (worst + 1))) + 1
      raise ValueError(
          f'bits={bits} is too small for granularity={granularity}: a sum '
          f'coordinate can reach n (B/gamma + 1) + k sqrt(n) sigma/gamma = '
          f'{worst:.6g} >= M/2 - 1 = {2.0**bits / 2 - 1:.6g}. Use bits >= '
          f'{need} or a larger granularity.')
  sum_stddev = math.sqrt(
      scaled_clip**2 * n**2 / padded_dim + (0.25 + scaled_local**2) * n)
  return DdgParameters(
      dim=int(dim), padded_dim=padded_dim, l2_clip=float(l2_clip),
      noise_multiplier=float(noise_multiplier), expected_clients_per_round=n,
      bits=int(bits), modclip_prob=float(modclip_prob), beta=float(beta),
      k_stddevs=k, local_stddev=local_stddev, gamma=gamma,
      scaled_l2_clip=scaled_clip, scaled_local_stddev=scaled_local,
      norm_threshold=int(threshold), l2_sensitivity=math.sqrt(threshold),
      sum_stddev=sum_stddev,
      linf_clip=None if linf_clip is None else float(linf_clip),
      granularity_given=granularity is not None)


# Indices of the per-client counters sent beside the encoded vector.
COUNTERS = ('participating_clients', 'nonfinite_clients', 'clipped_clients',
            'rounding_failures')


def client_subseeds(noise_seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """(rounding seed, noise sampling seed) derived from a client's seed.

  `stateless_split` draws full 64-bit words for both halves of each new
  seed, so distinct clients' derived seeds collide only if their 128-bit
  seeds do.
  """
  seeds = tf.random.experimental.stateless_split(
      tf.cast(noise_seed, tf.int64), 2)
  return seeds[0], seeds[1]


def client_encode(
    x: tf.Tensor, params: DdgParameters, rotation_seed: tf.Tensor,
    noise_seed: tf.Tensor, encoder=None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Algorithm 1 for one client.

  Args:
    x: the client's flattened value, rank 1 of length params.dim, any float.
    params: from `compute_parameters`.
    rotation_seed: the round's public seed (same for all clients and server).
    noise_seed: this client's private seed. Never share it between clients: a
      shared noise seed lets one client cancel everyone's noise.
    encoder: the rotation, with encode/decode(., seed) and output_dim ==
      params.padded_dim; default the randomized Hadamard rotation. An
      encoder that is not an isometry (Kashin) has its *output* clipped to
      the scaled clip norm as well, so the norm bound of Theorem 5 (3)
      holds for the vector that is rounded.

  Returns:
    (z, counters): z int64 in [0, 2^bits)^padded_dim; counters int64 [4] in
    the order of COUNTERS (1, non-finite input, clipped, rounding gave up).
    A client whose input has a NaN or +-Inf contributes zeros (plus its
    noise share) and is counted.
  """
  x = tf.cast(tf.reshape(x, [-1]), tf.float64)
  finite = tf.reduce_all(tf.math.is_finite(x))
  x = tf.where(finite, x, tf.zeros_like(x))
  if params.linf_clip is not None:
    beyond = tf.reduce_any(tf.abs(x) > params.linf_clip)
    x = tf.clip_by_value(x, -params.linf_clip, params.linf_clip)
  else:
    beyond = tf.constant(False)
  # Clip and scale: x' = min(1, c/||x||) x / gamma.
  norm = tf.norm(x)
  clipped = (norm > params.l2_clip) | beyond
  factor = tf.where(clipped, params.l2_clip / tf.maximum(norm, 1e-300), 1.0)
  x_scaled = x * (factor / params.gamma)
  # Flatten: x'' = H D_xi x'.
  encoder = encoder or hadamard.RandomizedHadamard(params.dim)
  rotated = encoder.encode(x_scaled, rotation_seed)
  if not registry.is_isometry(encoder):
    rotated_norm = tf.norm(rotated)
    clipped |= rotated_norm > params.scaled_l2_clip
    rotated *= tf.minimum(
        tf.constant(1.0, tf.float64),
        params.scaled_l2_clip / tf.maximum(rotated_norm, 1e-300))
  # Two independent 128-bit sub-seeds of the client's private seed.
  rounding_seed, sampling_seed = client_subseeds(noise_seed)
  # Conditional randomized rounding with ||x~||^2 <= T, exact in int64.
  rounded, _, ok = rounding.conditional_randomized_round(
      rotated, params.norm_threshold, rounding_seed)
  if params.noise_multiplier > 0:
    noise = discrete_gaussian.sample_discrete_gaussian(
        [params.padded_dim], params.scaled_local_stddev, sampling_seed)
    rounded = rounded + noise
  z = tf.math.floormod(rounded, params.modulus)
  counters = tf.stack([
      tf.constant(1, tf.int64),
      tf.cast(tf.logical_not(finite), tf.int64),
      tf.cast(clipped, tf.int64),
      tf.cast(tf.logical_not(ok), tf.int64),
  ])
  return z, counters


def server_decode(
    zbar: tf.Tensor, params: DdgParameters, rotation_seed: tf.Tensor,
    encoder=None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Algorithm 2: centre the ring, un-rotate, rescale, unpad.

  Args:
    zbar: the secure modular sum, integer tensor [padded_dim] (any integer
      dtype; reduced mod 2^bits here, so an int32 wrap-around is harmless for
      power-of-two moduli).
    params: from `compute_parameters`.
    rotation_seed: the round's public seed.
    encoder: the clients' rotation (default randomized Hadamard).

  Returns:
    (estimate of sum_i x_i as float64 [dim], number of centred coordinates
    within params.boundary_margin of the ring boundary, int64).
  """
  m = params.modulus
  z = tf.math.floormod(tf.cast(zbar, tf.int64), m)
  centred = tf.where(z > m // 2, z - m, z)
  near = tf.reduce_sum(tf.cast(
      tf.abs(tf.cast(centred, tf.float64)) > m / 2 - params.boundary_margin,
      tf.int64))
  encoder = encoder or hadamard.RandomizedHadamard(params.dim)
  decoded = encoder.decode(tf.cast(centred, tf.float64), rotation_seed)
  return decoded * params.gamma, near


def _finite(value) -> bool:
  try:
    return math.isfinite(float(value))
  except (TypeError, ValueError):
    return False


def _require(condition: bool, message: str):
  if not condition:
    raise ValueError(message)
