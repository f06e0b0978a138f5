"""The mechanism interface every distributed-DP mechanism of tff_ddp implements.

A mechanism is the math of one secure-sum round, written once, with no TFF
placement in it:

  client:  x (float64 [dim])  --client_encode(x, round_seed, noise_seed)-->
           integers in [0, modulus) per secure-sum key, and 0/1 flags
  secure:  the integers of all clients summed modulo each key's modulus
  server:  summed --server_decode(summed, num_clients, round_seed)-->
           float64 [dim] estimate of the sum, post-processing measurements
  privacy: dp_event(num_clients) -- what one round releases, as a
           dp-accounting event that `tff_ddp.accounting` turns into epsilon

A mechanism object is a frozen value built by the mechanism module's own
`compute_parameters` (which validates everything and draws nothing), so two
mechanisms with equal parameters are interchangeable. The generic factory
`tff_ddp.aggregators.secure_sum` places any mechanism into one TFF
aggregation process (client encode, one `federated_secure_modular_sum`,
server decode); adding a mechanism touches one new module here and a thin
factory there.

Capacity: every mechanism says how many clients its secure sum holds,
`max_clients()` -- the largest n whose sum cannot wrap around the ring by
the mechanism's own criterion, computed once in Python -- and its
`server_decode` reports `sum_may_wrap` exactly when the number of clients
in the sum exceeds it. The factory refuses (or flags) a round above it.

An empty round (no client in the secure sum) releases nothing about
anyone: `dp_event(0)` is `dp_accounting.NoOpDpEvent()`.

What a mechanism may release (its `public_measurements` and the
measurements of `server_decode`): configuration constants, and functions of
the noisy sum and of the number of clients in the secure sum (which the
server running the protocol knows anyway). Data-dependent per-client facts
(was the value clipped, non-finite, ...) are *flags*: the mechanism computes
them, and the factory withholds them, noises and accounts them, or releases
them under `debug_measurements=True` only (which marks the round not
private).
"""

import enum
import math
from typing import Callable, Mapping, Optional, Protocol, Sequence, Tuple

import dp_accounting
import tensorflow as tf

from tff_ddp.encoders import base as encoders_base
from tff_ddp.utils import checks

# The ring limit of every secure sum here: TFF's test backend sums int32
# values, and power-of-two moduli up to 2^30 survive int32 wrap-around of the
# plain sum (the residue mod 2^b of a sum is unchanged by wrapping mod 2^32).
MAX_RING_BITS = 30
MAX_MODULUS = 2**MAX_RING_BITS


class Kind(enum.StrEnum):
  """The one name of each mechanism: its module's, and the `name` of its
  `Mechanism` objects.

  Public entry points keep their own spellings (TFF's
  `DistributedDpSumFactory(mechanism='distributed_dgauss')`, the CLI's
  `--mechanism ddg`, the quantile processes' 'discrete_gaussian') and map
  them once to a Kind (`as_kind`); below them only the Kind travels.
  """

  DISCRETE_GAUSSIAN = 'distributed_discrete_gaussian'
  SKELLAM = 'distributed_skellam'
  POISSON_BINOMIAL = 'poisson_binomial'


def as_kind(value,
            spellings: Mapping[str, Kind],
            name: str = 'mechanism') -> Kind:
  """The Kind an entry point's `value` names.

  Args:
    value: one of the entry point's `spellings`, or a Kind among their
      values (what an inner call passes on).
    spellings: the entry point's accepted names and the Kind of each.
    name: the argument's name, for the message.

  Raises:
    TypeError / ValueError naming the accepted spellings: anything else,
    a spelling of another entry point included.
  """
  if isinstance(value, Kind) and value in spellings.values():
    return value
  return spellings[checks.choice(value, name, tuple(spellings))]


class Mechanism(Protocol):
  """One distributed-DP mechanism: client encode, server decode, DP event.

  Attributes:
    name: short name ('distributed_discrete_gaussian', ...).
    dim: number of float64 scalars a client's flattened value has.
    encoder: the public, seeded transform applied before discretisation
      (`tff_ddp.encoders.base.Encoder`).
    flag_names: names of the 0/1 flags `client_encode` returns, in order.
    expected_clients_per_round: the number of clients the planning event
      (`dp_event()` without an argument) assumes.
  """

  name: str
  dim: int
  encoder: encoders_base.Encoder
  flag_names: Tuple[str, ...]
  expected_clients_per_round: int

  def secure_moduli(self) -> Mapping[str, int]:
    """The secure-sum modulus of each key `client_encode` returns."""

  def public_measurements(self) -> Mapping[str, object]:
    """Configuration constants to report every round (Python scalars)."""

  def client_encode(
      self, x: tf.Tensor, round_seed: tf.Tensor,
      noise_seed: tf.Tensor) -> Tuple[Mapping[str, tf.Tensor], tf.Tensor]:
    """One client's contribution.

    Args:
      x: float64 [dim], the client's flattened value.
      round_seed: shape-[2] int64, the round's public randomness.
      noise_seed: shape-[2] int64, this client's private randomness. Never
        shared between clients.

    Returns:
      (encoded, flags): int64 tensors in [0, modulus) per key of
      `secure_moduli()`, and int64 [len(flag_names)] of 0/1 flags.
    """

  def server_decode(
      self, summed: Mapping[str, tf.Tensor], num_clients: tf.Tensor,
      round_seed: tf.Tensor) -> Tuple[tf.Tensor, Mapping[str, tf.Tensor]]:
    """The estimate of the sum and post-processing measurements.

    Args:
      summed: per key, the secure sum reduced into [0, modulus) (int64).
      num_clients: int64 scalar, the number of clients in the secure sum.
      round_seed: the round's public seed.

    Returns:
      (float64 [dim] estimate of the sum of the clients' (clipped) values,
      measurements computed from `summed` and `num_clients` only).
    """

  def dp_event(self,
               num_clients: Optional[int] = None) -> dp_accounting.DpEvent:
    """The event of one round with `num_clients` clients in the sum
    (`NoOpDpEvent` for 0: an empty round releases nothing)."""

  def max_clients(self) -> int:
    """The most clients whose secure sum cannot wrap around the ring.

    By the mechanism's own criterion (a worst case, or a tail bound the
    mechanism was sized with); at least `expected_clients_per_round`.
    `server_decode`'s `sum_may_wrap` is exactly `num_clients >
    max_clients()`.
    """

  def output_range(self) -> Tuple[float, float]:
    """(clip, bound): the magnitudes the output dtype must represent.

    `bound`: no coordinate of `server_decode`'s estimate exceeds it in
    magnitude, whatever the inputs, the noise and the number of clients
    (`decoded_bound` of the centred ring). `clip`: the largest norm one
    client's value keeps; below the dtype's smallest normal number every
    client's contribution is lost. The factory refuses a value type whose
    dtypes cannot hold [clip, bound] (float: the sum would come back as
    +-inf or as zeros; integer: saturated at the dtype's limits).
    """


def decoded_bound(encoder: encoders_base.Encoder, ring_bound: float) -> float:
  """Bounds every coordinate of `encoder.decode(y)` if all |y_k| <= ring_bound.

  ||decode(y)||_inf <= ||decode(y)||_2 <= ||y||_2 <= ring_bound sqrt(D): the
  encoders' decode maps do not increase the l2 norm (Hadamard: orthogonal,
  then truncation; Kashin: U y with U U^T = I, so ||U|| = 1). The sqrt(D) is
  attained by the Hadamard rotation (a coordinate of H y / sqrt(D) with
  every |y_k| = ring_bound and matching signs). An encoder may state a
  smaller gain as `linf_gain` (the identity: 1).
  """
  gain = getattr(encoder, 'linf_gain', None)
  if gain is None:
    gain = math.sqrt(encoder.output_dim)
  return float(ring_bound) * float(gain)


def largest_count(fits: Callable[[int], bool],
                  limit: int = MAX_MODULUS - 1) -> int:
  """The largest n in [0, limit] with fits(n), for a `fits` that holds up
  to some n and fails beyond it (monotone); 0 if fits(1) fails.

  Exponential then binary search: O(log limit) calls. Used for
  `Mechanism.max_clients` with criteria in float64, whose operations are
  monotone, so the answer is exact for the criterion as computed.
  """
  if not fits(1):
    return 0
  low, high = 1, 2
  while high <= limit and fits(high):
    low, high = high, 2 * high
  high = min(high, limit + 1)  # fits(low), not fits(high) or beyond limit
  while high - low > 1:
    middle = (low + high) // 2
    if fits(middle):
      low = middle
    else:
      high = middle
  return low


def flag_vector(flags: Sequence[tf.Tensor]) -> tf.Tensor:
  """Stacks boolean flags into the int64 0/1 vector `client_encode` returns."""
  return tf.stack([tf.cast(f, tf.int64) for f in flags])


def ring_residue(value: tf.Tensor, modulus: int) -> tf.Tensor:
  """value mod modulus, in [0, modulus), as int64.

  For a power-of-two modulus M = 2^b (every secure-sum ring here) the
  residue is the low b bits, value & (M - 1): in two's complement,
  value = q 2^b + (value & (M - 1)) with the masked part in [0, M), also for
  negative values, so it equals floormod(value, M) exactly -- in one
  bitwise pass instead of a division.
  """
  value = tf.cast(value, tf.int64)
  modulus = int(modulus)
  if modulus > 0 and modulus & (modulus - 1) == 0:
    return tf.bitwise.bitwise_and(value, tf.constant(modulus - 1, tf.int64))
  return tf.math.floormod(value, modulus)


def centre(residue: tf.Tensor, modulus: int) -> tf.Tensor:
  """The representative in {-M/2 + 1, ..., M/2} of a residue mod M.

  Worked example (M = 8): 6 -> -2 (6 > M/2 = 4); 4 -> 4; 3 -> 3.
  """
  z = ring_residue(residue, modulus)
  return tf.where(z > modulus // 2, z - modulus, z)
