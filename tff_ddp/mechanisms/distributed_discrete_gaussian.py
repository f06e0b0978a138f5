"""The distributed discrete Gaussian (DDG) mechanism: parameters, client, server.

Kairouz, Liu & Steinke (2021), "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation" (arXiv:2102.06387): Algorithm 1
(client), Algorithm 2 (server), Theorem 5 (privacy) and the Section 6
heuristic for the granularity gamma. This module is the one place these
formulas live (the privacy curve is in `tff_ddp.accounting.ddg_rdp`); the TFF
factory only places them. `DistributedDiscreteGaussian.compute_parameters`
resolves a `Request` (granularity, float32 path, sampler: `Sampler`); the
client clips, scales, rotates, rounds conditionally (||x~||^2 <= T, checked
exactly in int64: all the privacy rests on it), noises and reduces mod 2^bits.

The data flow, the float32 path and why it is safe, the server, a worked
example: docs/notes/ddg_encode.md.
"""

import dataclasses
import enum
import math
from typing import Any, Optional, Tuple

import dp_accounting
import numpy as np
import scipy.special
import tensorflow as tf

from tff_ddp.accounting import events
from tff_ddp.encoders import base as encoders_base
from tff_ddp.encoders import hadamard
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import discrete_gaussian
from tff_ddp.mechanisms import discrete_gaussian_table
from tff_ddp.mechanisms import rounding
from tff_ddp.utils import checks
from tff_ddp.utils import tensors

MIN_BITS = 1
MAX_BITS = base.MAX_RING_BITS
# Client integers (rounded values, squared norms) are kept below this.
_INT64_SAFE = 2**62
# Scaled clip norms above this would make float64 rounding coarse (resolution
# 2^-10 at 2^42); no sensible configuration comes near it.
_MAX_SCALED_CLIP = 2.0**42
# Integer inputs: the squared-norm threshold is floor(scaled_clip^2 (1 + this))
# so that float rounding of scaled_clip^2 never puts it one below an integer
# input's exact squared norm.
_INTEGER_SLACK = 2.0**-40
# Relative tolerance of the ring check for the number of clients the ring was
# sized for (the heuristic makes k * sum_stddev == M / 2 exactly).
_RING_TOLERANCE = 1e-9
# The float32 path (docs/notes/ddg_encode.md, "Precision") needs c/gamma below
# this, so that rounded coordinates (<= c/gamma + 1) and ring residues fit
# int32.
_FLOAT32_MAX_SCALED_CLIP = 2.0**30
# ... and its l2 error over n clients at most this fraction of their noise.
_FLOAT32_NOISE_FRACTION = 2.0**-10
# Float64 sums of squares are exact to (d + 10) 2^-53 relative; below this
# many, tiny coordinates flush to zero (TF flushes subnormals), so the
# fast clip leaves such inputs to `tensors.clip_to_norm`.
_FAST_CLIP_MIN_SQUARED_NORM = 2.0**-900


class Sampler(enum.StrEnum):
  """The clients' noise sampler (`Request.noise_sampler`).

  TABLE: the alias method (per-sample TV < 2^-231, added to delta by the
  accountant; DDG scales up to ~29172, beyond which EXACT runs). EXACT:
  DDG: Canonne-Kamath-Steinke rejection (up to 2^25); Skellam: the exact
  Poisson sampler.
  """

  TABLE = 'table'
  EXACT = 'exact'


DEFAULT_SAMPLER = Sampler.TABLE
# The per-sample TV distance of each resolved sampler (the tables' proved
# bound, the same for the Skellam table: `alias_table`).
_SAMPLER_TV = {
    Sampler.TABLE: discrete_gaussian_table.TV_DISTANCE_UPPER_BOUND,
    Sampler.EXACT: 0.0
}
# The least scaled local stddev sigma/gamma of the privacy analysis (DDG
# paper Theorem 9 / Proposition 10 need sigma/gamma >= 1/2).
MIN_SCALED_LOCAL_STDDEV = 0.5


def local_stddev(noise_multiplier: float, l2_clip: float,
                 num_clients: int) -> float:
  """sigma = z c / sqrt(n): each of n clients' share of central noise z c.

  The sum of n independent shares of variance sigma^2 has variance
  n sigma^2 = (z c)^2, the central Gaussian's with noise multiplier z.
  """
  return noise_multiplier * l2_clip / math.sqrt(num_clients)


def as_sampler(noise_sampler) -> Sampler:
  """`noise_sampler` ('table', 'exact' or a Sampler) as a Sampler."""
  return checks.member(noise_sampler, 'noise_sampler', Sampler)


def resolve_noise_sampler(noise_sampler, scaled_local_stddev: float) -> Sampler:
  """The sampler a client runs for `noise_sampler` at this scale.

  TABLE up to the alias table's largest scale
  (`discrete_gaussian_table.max_supported_scale()`, ~29172), EXACT above
  it and for EXACT. The one place this choice is made: the mechanism and
  `release_event` (the CLI's events) both call it, so both put the same
  `sampler_tv_distance` on the event.
  """
  if as_sampler(noise_sampler) is Sampler.TABLE and (
      scaled_local_stddev <= discrete_gaussian_table.max_supported_scale()):
    return Sampler.TABLE
  return Sampler.EXACT


def sampler_tv_distance(resolved_sampler) -> float:
  """Per-sample TV distance from the ideal noise of a resolved sampler
  (`resolve_noise_sampler`, or the Skellam's): the tables' proved bound
  (< 2^-231), or 0 for the exact samplers."""
  return _SAMPLER_TV[resolved_sampler]


# The smallest modclip_prob accepted (2^-1022, the smallest normal float64):
# k = sqrt(2) erfcinv(p) is ~37.5 there and inf for denormal p.
MIN_MODCLIP_PROB = 2.0**-1022


def num_stddevs_for_modclip_prob(modclip_prob: float) -> float:
  """k with P(|N(0,1)| > k) = modclip_prob, i.e. k = sqrt(2) erfcinv(p)."""
  return float(math.sqrt(2.0) * scipy.special.erfcinv(modclip_prob))


def _heuristic_gamma(l2_clip, noise_multiplier, n, dim, bits,
                     k) -> Optional[float]:
  """gamma with 2 k sigma_hat / gamma = 2^bits (Section 6 heuristic).

  sigma_hat^2 = c^2 n^2 / d + (gamma^2/4 + sigma^2) n is the variance proxy of
  a coordinate of sum_i (x~_i + y_i) in real units under the general bound
  ||sum x_i|| <= c n. With a = 2^bits / (2k), solving
  sigma_hat^2 = a^2 gamma^2 for gamma gives
  gamma = sqrt((c^2 n^2 / d + sigma^2 n) / (a^2 - n/4)), defined iff a^2 > n/4;
  with sigma^2 n = (z c)^2 that is c hypot(n / sqrt(d), z) / sqrt(a^2 - n/4),
  computed in that form so that no square overflows.
  """
  a_sq = (2.0**bits / (2.0 * k))**2
  if a_sq <= n / 4.0:
    return None
  return (l2_clip * math.hypot(n / math.sqrt(dim), noise_multiplier) /
          math.sqrt(a_sq - n / 4.0))


def sum_stddev(scaled_l2_clip, scaled_local_stddev, num_clients, dim):
  """Variance proxy sqrt(c'^2 n^2 / d + (1/4 + sigma'^2) n) of a coordinate
  of the integer sum (c', sigma' in integer units), for numbers or tensors."""
  return (scaled_l2_clip * scaled_l2_clip * num_clients * num_clients / dim +
          (0.25 + scaled_local_stddev * scaled_local_stddev) * num_clients)**0.5


def worst_case_statistic(num_clients, coordinate, scaled_local_stddev,
                         k_stddevs):
  """n (B/gamma + 1) + 1 + k sqrt(n) sigma/gamma: the worst case of a sum
  coordinate with a given granularity (`coordinate` = B/gamma, the largest
  scaled input coordinate; +1 per client for rounding), the ring statistic
  that must stay below M/2 (`DistributedDiscreteGaussian.wrap_statistic`).
  Numbers or float64 tensors."""
  return (num_clients * (coordinate + 1.0) + 1.0 +
          k_stddevs * num_clients**0.5 * scaled_local_stddev)


def granularity_fits(granularity: float,
                     l2_clip: float,
                     noise_multiplier: float,
                     expected_clients_per_round: int,
                     bits: int,
                     linf_clip: Optional[float] = None,
                     modclip_prob: float = 1e-4) -> bool:
  """Whether the ring holds this given granularity: the ring check of
  `compute_parameters(..., granularity=granularity)` (`wrap_statistic`
  of expected_clients_per_round < M/2), made with the same floating-point
  operations without building the mechanism.

  For callers that choose the granularity themselves (the integer scaling c
  = 1/granularity of the quantile paper's Algorithms 1-2): they ask the
  mechanism what its ring holds instead of building factories until one is
  accepted. The statistic grows with 1/granularity and with the noise, so
  searches over either are exact. Other refusals of `compute_parameters`
  (the noise range) are not part of this answer. Arguments as for
  `compute_parameters`, assumed valid.
  """
  k = num_stddevs_for_modclip_prob(modclip_prob)
  scaled = _scaled(bits, l2_clip, noise_multiplier, expected_clients_per_round,
                   1, k, granularity)
  return worst_case_statistic(
      expected_clients_per_round,
      min(l2_clip, linf_clip or math.inf) / scaled.gamma, scaled.scaled_local,
      k) < 2.0**bits / 2


def largest_integer_scaling(l2_clip: float,
                            noise_multiplier: float,
                            expected_clients_per_round: int,
                            bits: int,
                            linf_clip: Optional[float] = None,
                            modclip_prob: float = 1e-4) -> int:
  """The largest integer c whose granularity 1/c the ring holds
  (`granularity_fits`); 0 if no c >= 1 does."""
  return base.largest_count(
      lambda c: granularity_fits(1.0 / c, l2_clip, noise_multiplier,
                                 expected_clients_per_round, bits, linf_clip,
                                 modclip_prob), 2**bits)


@dataclasses.dataclass(frozen=True)
class Request:
  """The dimension-free arguments of `compute_parameters`, as one value.

  Validated at construction (`check_arguments`: every refusal a TypeError
  or ValueError naming the argument and a value that works), before
  anything is built or drawn. A factory builds it once in its `__init__`
  and hands it to `compute_parameters` for each value type; the same class
  serves the distributed Skellam (whose `noise_sampler` chooses the
  Skellam's sampler).

  Attributes:
    l2_clip: c > 0, the l2 clip norm of a client's (flattened) value.
    noise_multiplier: central noise stddev / c; 0 disables noise.
    expected_clients_per_round: n >= 1, the number of clients whose noise
      shares make up the central noise; each adds sigma = z c / sqrt(n).
    bits: log2 of the secure-sum modulus, in [1, 30].
    modclip_prob: target probability that a coordinate of the sum falls
      outside the ring, in [2^-1022, 1) (`MIN_MODCLIP_PROB`); sets
      k = sqrt(2) erfcinv(modclip_prob).
    beta: conditional rounding bias in [0, 1); exp(-1/2) is the paper's
      choice, 0 (the default, as in TFF) means unconditional rounding with
      the worst-case norm bound.
    granularity: gamma itself (1/gamma = the integer scaling c of the
      quantile paper's Algorithms 1-2) instead of the Section 6 heuristic.
      The ring is then checked against the worst case: n (B/gamma + 1) + 1 +
      k sqrt(n) sigma/gamma < M/2, with B = linf_clip (or l2_clip) the
      largest input coordinate, +1 per client for rounding.
    linf_clip: clip every input coordinate to [-linf_clip, linf_clip] as
      well (before the l2 clip); meant for encoder 'none', with which the
      event carries the scaled bound (`linf_sensitivity`) and the privacy
      loss distribution shifts each coordinate by at most that much.
    noise_sampler: a `Sampler`, given as it or its value: 'table' (the
      default: an alias-table sampler built by
      `alias_table`, per-sample TV distance < 2^-231 from the ideal noise,
      which the event carries and the accountant adds to delta; DDG:
      `discrete_gaussian_table`, ~10x faster than exact, for scaled noise
      up to ~29172; Skellam: `skellam_table`, ~30x faster, for Poisson
      means up to ~4.25e8; the exact sampler above) or 'exact' (DDG:
      Canonne-Kamath-Steinke rejection sampling; Skellam: the exact Poisson
      sampler; no delta).
    l0_clip: optional k >= 1: a client keeps only the k largest-magnitude
      coordinates of its encoded vector (the others zeroed, the client
      flagged as clipped), so zero-out neighbours differ in at most k
      coordinates (the event's `l0_sensitivity`; the privacy loss
      distribution composes k coordinates instead of the dimension). For
      inputs with at most k non-zero coordinates through encoder 'none'
      (one-hot histograms: k = 1) it changes nothing.
  """

  l2_clip: float
  noise_multiplier: float
  expected_clients_per_round: int
  bits: int
  modclip_prob: float = 1e-4
  beta: float = 0.0
  granularity: Optional[float] = None
  linf_clip: Optional[float] = None
  noise_sampler: Sampler = DEFAULT_SAMPLER
  l0_clip: Optional[int] = None

  def __post_init__(self):
    clean, _ = check_arguments(self.l2_clip, self.noise_multiplier,
                               self.expected_clients_per_round, self.bits,
                               self.modclip_prob, self.beta, self.granularity,
                               self.linf_clip)
    for name, value in clean.items():
      object.__setattr__(self, name, value)
    object.__setattr__(self, 'noise_sampler', as_sampler(self.noise_sampler))
    object.__setattr__(self, 'l0_clip',
                       checks.optional_integer(self.l0_clip, 'l0_clip', 1))

  @property
  def k_stddevs(self) -> float:
    """k = sqrt(2) erfcinv(modclip_prob)."""
    return num_stddevs_for_modclip_prob(self.modclip_prob)


# (smallest scaled local stddev, as text, largest, why the smallest), DDG:
# Theorem 9's condition and the exact sampler's range.
_DGAUSS_NOISE_RANGE = (
    MIN_SCALED_LOCAL_STDDEV, '1/2', discrete_gaussian.max_supported_scale(),
    'below the range of the privacy theorem (DDG paper Theorem 9 needs '
    'sigma/gamma >= 1/2; tau explodes below ~1)')


@dataclasses.dataclass(frozen=True)
class DistributedDiscreteGaussian:
  """The DDG mechanism with derived, validated parameters (Algorithms 1-2).

  Build with `compute_parameters`. Real-domain quantities: l2_clip (c),
  local_stddev (sigma), gamma. Integer-domain (scaled) quantities:
  scaled_l2_clip (c/gamma), scaled_local_stddev (sigma/gamma), norm_threshold
  (T, the exact integer bound on ||x~||_2^2 checked by the client),
  l2_sensitivity (sqrt(T)). float32_rotation: x' and x'' in float32 and the
  integers in int32 (why that is safe: docs/notes/ddg_encode.md,
  "Precision"), else float64 and int64.
  """

  encoder: encoders_base.Encoder
  dim: int
  output_dim: int
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
  linf_clip: Optional[float] = None
  granularity_given: bool = False
  integer_inputs: bool = False
  noise_sampler: Sampler = Sampler.EXACT
  float32_rotation: bool = False
  l0_clip: Optional[int] = None

  name = base.Kind.DISCRETE_GAUSSIAN
  flag_names = ('nonfinite', 'clipped', 'rounding_failed')
  event_type = events.DistributedDiscreteGaussianDpEvent
  # The scaled local noise `compute_parameters` accepts (see derive).
  noise_range = _DGAUSS_NOISE_RANGE

  @property
  def modulus(self) -> int:
    return 2**self.bits

  @property
  def scale_factor(self) -> float:
    """1/gamma, the factor from real to integer units."""
    return 1.0 / self.gamma

  def secure_moduli(self):
    return {'encoded': self.modulus}

  def noise_stddev(self, num_clients=None) -> float:
    """Stddev of the added noise per coordinate of the decoded sum.

    sqrt(n) sigma/gamma shares of discrete Gaussian noise, times gamma: the
    central noise z c (at the expected n). The discrete Gaussian's variance
    is at most its variance parameter, so this is an upper bound; rounding
    adds at most gamma/2 per client and coordinate (nothing for integer
    inputs).
    """
    n = self.expected_clients_per_round if num_clients is None else (
        num_clients)
    return math.sqrt(n) * self.scaled_local_stddev * self.gamma

  def public_measurements(self):
    """Configuration constants (also under the names TFF's
    DistributedDpSumFactory reports: padded_dim, scaled_inflated_l2)."""
    return dict(
        l2_clip=self.l2_clip,
        scale_factor=self.scale_factor,
        scaled_local_stddev=self.scaled_local_stddev,
        bits=np.int32(self.bits),
        output_dimension=np.int64(self.output_dim),
        padded_dim=np.int64(self.output_dim),
        scaled_inflated_l2=self.l2_sensitivity,
    )

  def dp_event(self, num_clients=None) -> dp_accounting.DpEvent:
    """One round with `num_clients` noise shares (default: expected).

    Zero-out neighbours (see `tff_ddp.accounting.ddg_rdp`); a
    NonPrivateDpEvent when noise_multiplier is 0; NoOpDpEvent for 0
    clients (an empty round releases nothing about anyone).
    """
    n = (self.expected_clients_per_round if num_clients is None else
         checks.integer(num_clients, 'num_clients', 0))
    if n == 0:
      return dp_accounting.NoOpDpEvent()  # an empty round released nothing
    if self.noise_multiplier == 0:
      return dp_accounting.NonPrivateDpEvent()
    return events.DistributedDiscreteGaussianDpEvent(
        l2_sensitivity=self.l2_sensitivity,
        local_stddev=self.scaled_local_stddev,
        num_clients=n,
        dimension=self.output_dim,
        sampler_tv_distance=self.sampler_tv_distance or None,
        l0_sensitivity=self.l0_sensitivity,
        linf_sensitivity=self.linf_sensitivity)

  def _scaled_linf_bound(self) -> Optional[float]:
    """B = linf_clip * `input_scale` in the dtype the client rounds in, the
    bound `client_rounded` clamps every scaled coordinate to; None unless
    the encoder is the identity and `linf_clip` is set (a rotation mixes
    coordinates: its outputs have no per-coordinate bound)."""
    if self.linf_clip is None or not isinstance(self.encoder,
                                                registry.Identity):
      return None
    bound = self.linf_clip * self.input_scale
    return float(np.float32(bound)) if self.float32_rotation else bound

  @property
  def linf_sensitivity(self) -> Optional[int]:
    """The event's bound on every coordinate of a client's rounded vector:
    ceil(B) (`_scaled_linf_bound`). A coordinate in [-B, B] rounds to its
    floor or its ceiling, never past ceil(B) in magnitude. None without an
    l_inf clip through the identity encoder."""
    bound = self._scaled_linf_bound()
    return None if bound is None else math.ceil(bound)

  @property
  def l0_sensitivity(self) -> Optional[int]:
    """The event's bound on the coordinates one client moves: the l0 clip
    where it is below the output dimension, else None."""
    if self.l0_clip is None or self.l0_clip >= self.output_dim:
      return None
    return self.l0_clip

  @classmethod
  def compute_parameters(
      cls,
      dim: int,
      request: 'Request',
      encoder: Optional[encoders_base.Encoder] = None,
      integer_inputs: bool = False,
  ):
    """Validates a configuration and derives gamma, the noise and bounds.

    For this class and its subclasses (`distributed_skellam`): the same
    checks and derivation; the scaled local noise sigma/gamma must lie in
    the class's `noise_range` (DDG: [1/2, 2^25], Theorem 9 and the exact
    sampler; Skellam: the Poisson sampler's [sqrt(2^-19), 2^20.5]), and
    `with_resolved_noise` fixes the noise (the Skellam's Poisson mean) and
    the sampler that runs at that scale. Every refusal is a TypeError (wrong
    type) or ValueError (range) that names the argument to change and a
    value that works. Nothing random happens.

    Args:
      dim: number of scalars a client sends (before encoding); >= 1.
      request: a `Request`, the dimension-free arguments (validated when
        it was built: a factory builds it once, in its `__init__`).
      encoder: the public transform (default: randomized Hadamard of `dim`).
        The noise, the sensitivity and the privacy event are over its
        output dimension.
      integer_inputs: the inputs are integer vectors, the encoder is the
        identity and 1/granularity an integer, so the scaled vector is
        already integral: rounding is the identity for unclipped inputs and
        the sensitivity is the scaled clip itself, T = floor(c'^2), not the
        rounding-inflated bound of Theorem 5 (3).

    Returns:
      An instance of the class.
    """
    return derive(dim, request, encoder, integer_inputs, cls)

  @classmethod
  def release_event(
      cls,
      l2_sensitivity: float,
      local_stddev: float,  # pylint: disable=redefined-outer-name  # the API's keyword
      num_clients: int,
      dimension: int,
      l1_sensitivity: Optional[float] = None,
      noise_sampler=DEFAULT_SAMPLER,
  ) -> dp_accounting.DpEvent:
    """The event of one release, from its integer-domain numbers.

    What `dp_event` states for a built mechanism, from the accountant's
    numbers alone (the CLI's `tff-ddp privacy --mechanism ddg|skellam`, a
    calibration over `local_stddev`): l2 sensitivity Delta_2 (TFF:
    scaled_inflated_l2), the scaled local stddev (DDG: sigma/gamma >= 1/2;
    Skellam: the stddev sqrt(2 mu) of each client's noise, TFF's
    scaled_local_stddev), the clients in the sum, the noised dimension
    (TFF: padded_dim), an optional Delta_1, and the sampler the clients run
    ('table', the factories' default, or 'exact'), whose per-sample TV
    distance the event carries (`release_noise`).
    """
    noise, sampler = cls.release_noise(local_stddev, noise_sampler)
    return cls.event_type(
        l2_sensitivity=checks.positive(l2_sensitivity, 'l2_sensitivity'),
        num_clients=checks.integer(num_clients, 'num_clients', 1),
        dimension=checks.integer(dimension, 'dimension', 1),
        l1_sensitivity=checks.optional_positive(l1_sensitivity,
                                                'l1_sensitivity'),
        sampler_tv_distance=sampler_tv_distance(sampler) or None,
        **noise)

  @staticmethod
  def release_noise(local_stddev, noise_sampler):  # pylint: disable=redefined-outer-name  # the API's keyword
    """(the event's noise field, the resolved sampler) of `release_event`:
    local_stddev >= 1/2 and `resolve_noise_sampler` at it."""
    local_stddev = checks.real(local_stddev,
                               'local_stddev',
                               low=MIN_SCALED_LOCAL_STDDEV)
    return (dict(local_stddev=local_stddev),
            resolve_noise_sampler(noise_sampler, local_stddev))

  def with_resolved_noise(self):
    """This mechanism with `noise_sampler` resolved at its scale ('table'
    up to the table's largest scale, `resolve_noise_sampler`)."""
    return dataclasses.replace(self,
                               noise_sampler=resolve_noise_sampler(
                                   self.noise_sampler,
                                   self.scaled_local_stddev))

  def output_range(self):
    """(l2_clip, gamma M/2 times the encoder's gain: sqrt(D), 1 for the
    identity): the centred ring is in (-M/2, M/2]
    (`tff_ddp.mechanisms.base.Mechanism.output_range`, `decoded_bound`)."""
    return self.l2_clip, base.decoded_bound(self.encoder,
                                            self.gamma * self.modulus / 2)

  @property
  def sampler_tv_distance(self) -> float:
    """Per-sample TV distance of the noise sampler (0: exact)."""
    if self.noise_multiplier == 0:
      return 0.0
    return sampler_tv_distance(self.noise_sampler)

  def sample_noise(self, seed, count=None) -> tf.Tensor:
    """One client's noise, int64 [output_dim] (see `noise_sampler`); with
    `count`, that many clients' iid shares, [count, output_dim]."""
    shape = noise_shape(self.output_dim, count)
    if self.noise_sampler is Sampler.TABLE:
      return discrete_gaussian_table.sample_discrete_gaussian_table(
          shape, self.scaled_local_stddev, seed)
    return discrete_gaussian.sample_discrete_gaussian(shape,
                                                      self.scaled_local_stddev,
                                                      seed)

  def sum_of_zero_inputs(self, count, seed) -> tf.Tensor:
    """The ring residue of `count` clients' encodings of the zero vector.

    Equal in law to summing `client_encode(zeros)` over `count` clients with
    independent noise seeds: a zero input stays exactly zero through the
    clips, the (linear) encoder and the rounding (floor(0) + [U < 0] = 0,
    accepted at the first attempt), so such a client sends its noise share
    alone (`client_encode` then returns ring_residue(sample_noise(s)) for
    its sampling seed s; tested). The `count` shares are drawn in one call.
    For simulations of self-sampled rounds
    (`tff_ddp.aggregators.simulation.BatchedSum`), where most clients send
    zeros. Returns int64 [output_dim].
    """
    if self.noise_multiplier == 0:
      return tf.zeros([self.output_dim], tf.int64)
    noise = self.sample_noise(seed, count)
    return base.ring_residue(
        tf.reduce_sum(base.ring_residue(noise, self.modulus), axis=0),
        self.modulus)

  def wrap_statistic(self, num_clients):
    """The quantity that must stay below M/2 for the sum not to wrap.

    Section 6 heuristic (gamma derived): k times the variance proxy of a sum
    coordinate with `num_clients` clients (equal to M/2 at the expected
    number). Given granularity: the worst case n (B/gamma + 1) +
    k sqrt(n) sigma/gamma of Theorems 1-2 of the quantile paper. Works on
    numbers and on float64 tensors.
    """
    if self.granularity_given:
      return worst_case_statistic(
          num_clients,
          min(self.l2_clip, self.linf_clip or math.inf) / self.gamma,
          self.scaled_local_stddev, self.k_stddevs)
    return self.k_stddevs * sum_stddev(
        self.scaled_l2_clip, self.scaled_local_stddev, num_clients,
        self.output_dim) / (1.0 + _RING_TOLERANCE)

  def max_clients(self) -> int:
    """The largest n with `wrap_statistic(n)` < M/2: the most clients the
    ring holds by the criterion it was sized with (Section 6 heuristic:
    `expected_clients_per_round` itself, whatever the bits, since gamma is
    derived for that number; given granularity: the worst case of
    Theorems 1-2, which `compute_parameters` checked at the expected
    number). `wrap_statistic` increases with n, so the search is exact.
    """
    half = self.modulus / 2.0
    return base.largest_count(lambda n: self.wrap_statistic(n) < half)

  @property
  def input_scale(self) -> float:
    """The factor from a clipped input to x': 1/gamma, times (1 - 2 eps) on the
    float32 path (docs/notes/ddg_encode.md, "Precision"); exactly the integer
    1/gamma for integer inputs."""
    if self.integer_inputs:
      return float(round(1.0 / self.gamma))
    scale = 1.0 / self.gamma
    if self.float32_rotation:
      # Set only for an encoder with a float32 error bound, an attribute
      # the Encoder protocol does not have (`_float32_rotation`).
      scale *= 1.0 - 2.0 * getattr(self.encoder, 'float32_error')
    return scale

  def client_encode(self, x, round_seed, noise_seed):
    """Algorithm 1 for one client (flags: nonfinite, clipped, rounding_failed).

    A client whose input has a NaN or +-Inf contributes zeros (plus its noise
    share): the zero-out neighbour. An encoder that is not an isometry
    (Kashin) has its *output* clipped to the scaled clip norm as well, so the
    norm bound of Theorem 5 (3) holds for the vector that is rounded.
    Returns 'encoded' as int64 in [0, M).
    """
    rounding_seed, sampling_seed = client_subseeds(noise_seed)
    rounded, flags = self.client_rounded(x, round_seed, rounding_seed)
    noise = None
    if self.noise_multiplier > 0:
      noise = self.sample_noise(sampling_seed)
    z = self.ring_sum(rounded, noise)
    return {'encoded': z}, flags

  def client_rounded(self, x, round_seed, rounding_seed):
    """(the rounded integer vector, flags): everything `client_encode`
    computes before it adds the client's noise share (`ring_sum`). For an
    input the scaling makes integer (integer inputs, granularity 1/c) the
    rounding is the identity, whatever `rounding_seed` (a batched round
    relies on it and checks it: `tff_ddp.analytics.quantiles.rounds`)."""
    x, finite, clipped = self.clip_and_scale(x)
    encoded = self.encoder.encode(x, round_seed)
    if not self.encoder.is_isometry:
      encoded, more = tensors.clip_to_norm(encoded, self.scaled_l2_clip)
      clipped |= more
    l0 = self.l0_sensitivity
    if l0 is not None:
      # Rounding keeps a zero coordinate zero, so the rounded vector has at
      # most l0 non-zero coordinates too.
      encoded, more = tensors.keep_largest(encoded, l0)
      clipped |= more
    bound = self._scaled_linf_bound()
    if bound is not None:
      # x' is within ulps of [-B, B] (clipped, then scaled in float); the
      # clamp makes the event's `linf_sensitivity` hold exactly.
      encoded = tf.clip_by_value(encoded, tf.constant(-bound, encoded.dtype),
                                 tf.constant(bound, encoded.dtype))
    rounded, _, ok = rounding.conditional_randomized_round(
        encoded, self.norm_threshold, rounding_seed)
    return rounded, base.flag_vector(
        [tf.logical_not(finite), clipped,
         tf.logical_not(ok)])

  def clip_and_scale(self, x):
    """(x' = x clipped to l2_clip (and linf_clip) times `input_scale`, in the
    rotation's dtype; finite; clipped), the first line of Algorithm 1.

    A non-finite x becomes zeros (finite False). The norm is one float64
    sum of squares when that is exact enough (finite and >= 2^-900: no
    overflow, no flushed subnormals that matter); otherwise
    `tensors.clip_to_norm`'s overflow-safe form decides (huge or tiny
    coordinates, NaN, +-Inf). Both are within a few ulps of ||x||_2.
    """
    x = tf.reshape(tf.cast(x, tf.float64), [self.dim])
    beyond = tf.constant(False)
    finite_before = tf.constant(True)
    if self.linf_clip is not None:
      finite_before = tf.reduce_all(tf.math.is_finite(x))
      x = tf.where(finite_before, x, tf.zeros_like(x))
      beyond = tf.reduce_any(tf.abs(x) > self.linf_clip)
      x = tf.clip_by_value(x, -self.linf_clip, self.linf_clip)
    squared_norm = tf.reduce_sum(tf.square(x))
    fast = tf.math.is_finite(squared_norm) & (squared_norm
                                              >= _FAST_CLIP_MIN_SQUARED_NORM)
    scale = tf.constant(self.input_scale, tf.float64)
    clip = tf.constant(self.l2_clip, tf.float64)

    def direct():
      norm = tf.sqrt(squared_norm)
      clipped = norm > clip
      factor = tf.where(clipped, clip / norm, tf.ones_like(norm)) * scale
      return x * factor, tf.constant(True), clipped

    def careful():
      finite = tf.reduce_all(tf.math.is_finite(x))
      clipped_x, clipped = tensors.clip_to_norm(
          tf.where(finite, x, tf.zeros_like(x)), self.l2_clip)
      return clipped_x * scale, finite, clipped

    x, finite, clipped = tf.cond(fast, direct, careful)
    dtype = tf.float32 if self.float32_rotation else tf.float64
    return tf.cast(x, dtype), finite & finite_before, clipped | beyond

  def ring_sum(self, rounded, noise=None):
    """(rounded + noise) mod M, int64 in [0, M); `noise` None: no noise.

    int32 `rounded` (the float32 path): the noise's residue and the sum
    are formed in uint32, exact mod M (2^32 is a multiple of M; see
    docs/notes/ddg_encode.md, "Precision"); int64: in int64.
    """
    if noise is None:
      return base.ring_residue(rounded, self.modulus)
    noise = base.ring_residue(noise, self.modulus)
    if rounded.dtype == tf.int32:
      total = (tf.bitcast(rounded, tf.uint32) + tf.cast(noise, tf.uint32)
              )  # noise in [0, M): exact
      return tf.cast(
          tf.bitwise.bitwise_and(total, tf.constant(self.modulus - 1,
                                                    tf.uint32)), tf.int64)
    return base.ring_residue(rounded + noise, self.modulus)

  def server_decode(self, summed, num_clients, round_seed):
    """Algorithm 2: centre the ring, decode, rescale.

    Measurements: `sum_may_wrap`, True when `num_clients` (the number in the
    secure sum, public) is more than the ring was sized for, so that a sum
    coordinate may wrap around with probability above `modclip_prob`
    (`num_clients > max_clients()`, i.e. `wrap_statistic` >= M/2).
    """
    centred = base.centre(summed['encoded'], self.modulus)
    decoded = self.encoder.decode(tf.cast(centred, tf.float64), round_seed)
    may_wrap = tf.cast(num_clients, tf.int64) > self.max_clients()
    return decoded * self.gamma, {'sum_may_wrap': may_wrap}


def noise_shape(dim: int, count=None):
  """[dim], or [count, dim] for `count` clients (an int or int tensor)."""
  if count is None:
    return [dim]
  return tf.stack([tf.cast(count, tf.int32), tf.constant(dim, tf.int32)])


def client_subseeds(noise_seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """(rounding seed, noise sampling seed) derived from a client's seed.

  `stateless_split` draws full 64-bit words for both halves of each new
  seed, so distinct clients' derived seeds collide only if their 128-bit
  seeds do.
  """
  seeds = tf.random.experimental.stateless_split(tf.cast(noise_seed, tf.int64),
                                                 2)
  return seeds[0], seeds[1]


def check_arguments(l2_clip,
                    noise_multiplier,
                    expected_clients_per_round,
                    bits,
                    modclip_prob,
                    beta,
                    granularity=None,
                    linf_clip=None):
  """The dimension-free checks of `compute_parameters`; returns them clean.

  Raises TypeError / ValueError naming the argument and what works.
  """
  clean: dict[str, Any] = dict(
      l2_clip=checks.positive(l2_clip, 'l2_clip'),
      noise_multiplier=checks.nonnegative(noise_multiplier, 'noise_multiplier'),
      expected_clients_per_round=checks.integer(expected_clients_per_round,
                                                'expected_clients_per_round', 1,
                                                base.MAX_MODULUS),
      bits=checks.integer(bits, 'bits', MIN_BITS, MAX_BITS),
      # Below the smallest normal float erfcinv's k is inf (denormals).
      modclip_prob=checks.real(modclip_prob,
                               'modclip_prob',
                               MIN_MODCLIP_PROB,
                               1.0,
                               high_open=True),
      beta=checks.real(beta, 'beta', 0.0, 1.0, high_open=True),
      granularity=checks.optional_positive(granularity, 'granularity'),
      linf_clip=checks.optional_positive(linf_clip, 'linf_clip'),
  )
  k = num_stddevs_for_modclip_prob(clean['modclip_prob'])
  n, bits = clean['expected_clients_per_round'], clean['bits']
  if (2.0**bits / (2.0 * k))**2 <= n / 4.0:
    need = math.floor(math.log2(k * math.sqrt(n))) + 1
    raise ValueError(
        f'bits={bits} is too small for expected_clients_per_round={n} and '
        f'modclip_prob={clean["modclip_prob"]}: the ring must hold '
        f'k*sqrt(n) = {k * math.sqrt(n):.4g} rounding standard deviations. '
        f'Use bits >= {need} (or fewer clients per round, or a larger '
        'modclip_prob).')
  if clean['noise_multiplier'] > 0:
    sigma = local_stddev(clean['noise_multiplier'], clean['l2_clip'], n)
    if not math.isfinite(sigma) or sigma == 0:
      raise ValueError(
          f'noise_multiplier={noise_multiplier} with l2_clip={l2_clip} '
          f'gives a per-client noise stddev of {sigma!r}, outside the '
          'float64 range; use values of moderate size.')
  return clean, k


@dataclasses.dataclass(frozen=True)
class _Scaled:
  gamma: float
  scaled_local: float
  scaled_clip: float


def _scaled(bits, l2_clip, z, n, output_dim, k, granularity):
  """gamma and the integer-domain clip and noise at `bits` (None: no gamma).

  Raises ValueError when the real-domain numbers leave the float64 range.
  """
  if granularity is not None:
    gamma = granularity
  else:
    gamma = _heuristic_gamma(l2_clip, z, n, output_dim, bits, k)
    if gamma is None:
      return None
  scaled = _Scaled(gamma, local_stddev(z, l2_clip, n) / gamma, l2_clip / gamma)
  if not all(
      math.isfinite(v) and v >= 0
      for v in (scaled.gamma, scaled.scaled_local,
                scaled.scaled_clip)) or (scaled.gamma == 0):
    raise ValueError(
        f'l2_clip={l2_clip} and noise_multiplier={z} leave the float64 range '
        f'(gamma = {scaled.gamma!r}); use values of moderate size (scale '
        'the data instead).')
  return scaled


def _float32_rotation(encoder, z, n, output_dim, scaled: _Scaled,
                      integer_inputs: bool) -> bool:
  """Whether x' and x'' are float32 and the integers int32
  (docs/notes/ddg_encode.md, "Precision"): an encoder with a float32 error
  bound eps, noise on, 1 <= c/gamma < 2^30, and
  n 2 eps c/gamma <= 2^-10 sqrt(n D) sigma/gamma."""
  eps = getattr(encoder, 'float32_error', None)
  if eps is None or z == 0 or integer_inputs or not (1.0 <= scaled.scaled_clip <
                                                     _FLOAT32_MAX_SCALED_CLIP):
    return False
  error = n * 2.0 * eps * scaled.scaled_clip
  noise = math.sqrt(n * output_dim) * scaled.scaled_local
  return error <= _FLOAT32_NOISE_FRACTION * noise


compute_parameters = DistributedDiscreteGaussian.compute_parameters
release_event = DistributedDiscreteGaussian.release_event


def derive(dim, request: Request, encoder, integer_inputs, mechanism_class):
  """`compute_parameters` for any mechanism of this clip-scale-rotate-round
  family: validates, derives gamma, the threshold and the sensitivity, and
  builds `mechanism_class` (a `DistributedDiscreteGaussian` or subclass)
  with its noise resolved (`with_resolved_noise`).

  `mechanism_class.noise_range` = (smallest scaled local stddev, the same as
  text, largest, why the smallest) the mechanism's theorem and sampler
  allow.
  """
  dim = checks.integer(dim, 'dim', 1)
  checks.instance(
      request, Request, 'compute_parameters takes request='
      'distributed_discrete_gaussian.Request(l2_clip, noise_multiplier, '
      'expected_clients_per_round, bits, ...)')
  integer_inputs = checks.boolean(integer_inputs, 'integer_inputs')
  encoder = encoder or hadamard.RandomizedHadamard(dim)
  if encoder.dim != dim:
    raise ValueError(f'encoder.dim = {encoder.dim} differs from dim = {dim}.')
  l2_clip, z = request.l2_clip, request.noise_multiplier
  n, bits, beta = request.expected_clients_per_round, request.bits, (
      request.beta)
  granularity, linf_clip = request.granularity, request.linf_clip
  k = request.k_stddevs
  output_dim = int(encoder.output_dim)
  sigma = local_stddev(z, l2_clip, n)
  if integer_inputs:
    scaling = None if granularity is None else 1.0 / granularity
    if (encoder.output_dim != dim or not encoder.is_isometry or
        encoder.level is not None or scaling is None or
        scaling != math.floor(scaling)):
      raise ValueError(
          'integer_inputs=True needs the identity encoder and a granularity '
          f'1/c with an integer c, got encoder {encoder!r} and granularity '
          f'{granularity!r}.')

  def at(b):
    return _scaled(b, l2_clip, z, n, output_dim, k, granularity)

  scaled = at(bits)
  low, low_text, high, why = mechanism_class.noise_range
  if z > 0 and scaled.scaled_local < low:
    better = next((b for b in range(bits + 1, MAX_BITS + 1)
                   if at(b) is not None and at(b).scaled_local >= low), None)
    hint = (f'Use bits >= {better}' if better else
            'Increase noise_multiplier or lower expected_clients_per_round')
    raise ValueError(f'bits={bits} gives a scaled local noise sigma/gamma = '
                     f'{scaled.scaled_local:.4g} < {low_text}, {why}. {hint}.')
  if z > 0 and scaled.scaled_local > high:
    raise ValueError(
        f'bits={bits} gives a scaled local noise {scaled.scaled_local:.4g} '
        f'above the exact sampler range {high:.4g}; use fewer bits.')

  def threshold(s: _Scaled) -> float:
    if integer_inputs:
      return math.floor(s.scaled_clip * s.scaled_clip * (1.0 + _INTEGER_SLACK))
    return math.floor(
        rounding.rounded_l2_norm_bound_squared(s.scaled_clip, output_dim, beta))

  def fits(s: _Scaled) -> bool:
    return (s.scaled_clip <= _MAX_SCALED_CLIP and threshold(s) < _INT64_SAFE)

  if not fits(scaled):
    fitting = next((b for b in range(bits - 1, MIN_BITS - 1, -1)
                    if at(b) is not None and fits(at(b))), None)
    raise ValueError(
        f'bits={bits} makes the scaled clip norm c/gamma = '
        f'{scaled.scaled_clip:.4g} so large that the squared norm of a '
        f'rounded client vector could overflow int64. Use bits <= {fitting}.'
        if fitting else
        f'l2_clip={l2_clip} with dim={dim} overflows int64 arithmetic.')
  mechanism = mechanism_class(float32_rotation=_float32_rotation(
      encoder, z, n, output_dim, scaled, integer_inputs),
                              encoder=encoder,
                              dim=dim,
                              output_dim=output_dim,
                              l2_clip=l2_clip,
                              noise_multiplier=z,
                              expected_clients_per_round=n,
                              bits=bits,
                              modclip_prob=request.modclip_prob,
                              beta=beta,
                              k_stddevs=k,
                              local_stddev=sigma,
                              gamma=scaled.gamma,
                              scaled_l2_clip=scaled.scaled_clip,
                              scaled_local_stddev=scaled.scaled_local,
                              norm_threshold=int(threshold(scaled)),
                              l2_sensitivity=math.sqrt(threshold(scaled)),
                              linf_clip=linf_clip,
                              granularity_given=granularity is not None,
                              integer_inputs=integer_inputs,
                              noise_sampler=request.noise_sampler,
                              l0_clip=request.l0_clip).with_resolved_noise()
  if granularity is not None:
    worst = mechanism.wrap_statistic(n)
    if worst >= 2.0**bits / 2:
      need = math.floor(math.log2(worst)) + 2  # 2^(need-1) > worst
      raise ValueError(
          f'bits={bits} is too small for granularity={granularity}: a sum '
          f'coordinate can reach n (B/gamma + 1) + 1 + k sqrt(n) sigma/gamma '
          f'= {worst:.6g} >= M/2 = {2.0**bits / 2:.6g}. Use bits >= {need} '
          'or a larger granularity.')
  return mechanism
