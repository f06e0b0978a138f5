"""The clipped Poisson binomial mechanism (cPBM): parameters, client, server.

Chen, Choquette-Choo, Kairouz & Suresh, "Federated frequency estimation"
(the clipped Poisson binomial mechanism paper): Algorithm 1 (client: Kashin
representation, then cPBM), Algorithm 3 (cPBM), Algorithm 2 (server: rescale,
decode), eq. (3) (unbiasedness and variance), Lemma 2 (privacy, computed in
`tff_ddp.accounting.pbm_rdp`). This module is the one place these formulas
live; `tff_ddp.aggregators.PoissonBinomialSumFactory` only places them.
`PoissonBinomial` is the mechanism, `compute_parameters` builds it,
`Divisor` ('l2', Algorithm 3's; 'linf', the Kashin level's bound) sets the
scale, `probability_bounds(theta)` keeps every p in [1/2 - theta,
1/2 + theta] as Lemma 2 needs.

One client and the server, a worked example, the divisor:
docs/notes/cpbm_accounting.md.
"""

import dataclasses
import enum
import fractions
import math
from typing import Optional, Tuple, cast

import dp_accounting
import numpy as np
import tensorflow as tf

from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp
from tff_ddp.encoders import base as encoders_base
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms.binomial import sample_binomial
from tff_ddp.utils import checks
from tff_ddp.utils import tensors

MIN_BITS = 1
MAX_BITS = base.MAX_RING_BITS
# theta's range, [2^-40, 1/4] (one home: `pbm_rdp`).
MAX_THETA = pbm_rdp.MAX_THETA
MIN_THETA = pbm_rdp.MIN_THETA
# The exact sampler (`binomial.sample_binomial`) costs O(1) expected per
# coordinate for any m, but its rare exact fallback (one candidate in
# ~10^8) costs O(m) limb operations; up to 2^20 trials that is < 0.3 s.
MAX_NUM_TRIALS = 2**20

# A representation is 'inexact' when ||x - decode(encode(x))|| exceeds this
# fraction of ||x|| (only the Kashin encoder can be inexact).
INEXACT_RELATIVE_RESIDUAL = 1e-6


class Divisor(enum.StrEnum):
  """What Algorithm 3 divides a representation coordinate by: L2 the clip C
  (as published), LINF the coordinate bound B (docs/notes/cpbm_accounting.md,
  "The divisor")."""

  L2 = 'l2'
  LINF = 'linf'


DIVISORS = tuple(d.value for d in Divisor)


def as_divisor(divisor) -> Divisor:
  """`divisor` ('l2', 'linf' or a Divisor) as a Divisor."""
  return checks.member(divisor, 'divisor', Divisor)


@dataclasses.dataclass(frozen=True)
class PoissonBinomial:
  """The cPBM mechanism with validated parameters (Algorithms 1-3, Lemma 2).

  Build with `compute_parameters`.
  """

  encoder: encoders_base.Encoder
  dim: int
  output_dim: int
  l2_clip: float
  theta: float
  num_trials: int
  expected_clients_per_round: int
  max_clients_per_round: int
  bits: int
  p_low: float
  p_high: float
  coordinate_bound: float  # B: p = 1/2 + theta y / B (B = C for L2)
  divisor: Divisor = Divisor.L2
  l0_clip: Optional[int] = None  # most non-zero representation coordinates

  name = base.Kind.POISSON_BINOMIAL
  flag_names = ('nonfinite', 'clipped', 'inexact_encoding')

  @property
  def sensitive_coordinates(self) -> int:
    """Coordinates in which zero-out neighbours' draws can differ.

    A coordinate where the client's representation is 0 sends
    Binomial(m, 1/2) whether or not the client is zeroed out, so it adds
    nothing to the divergence; with `l0_clip` = k at most k coordinates
    differ (zero-out; a replace-one neighbour moves up to 2k).
    """
    if self.l0_clip is None:
      return self.output_dim
    return min(self.output_dim, self.l0_clip)

  @property
  def replace_one_coordinates(self) -> int:
    """Coordinates in which replace-one neighbours' draws can differ."""
    if self.l0_clip is None:
      return self.output_dim
    return min(self.output_dim, 2 * self.l0_clip)

  @property
  def modulus(self) -> int:
    return 2**self.bits

  @property
  def effective_theta(self) -> float:
    """p_high - 1/2 <= theta: the bias scale the Bernoullis actually use."""
    return self.p_high - 0.5

  def noise_stddev(self, num_clients=None) -> float:
    """sqrt(n B^2 / (4 m theta^2)): stddev bound of a coordinate of yhat_sum.

    B = C for divisor 'l2' (eq. 3 times n for a sum); the binomials' variance
    m p (1 - p) is at most m / 4.
    """
    n = self.expected_clients_per_round if num_clients is None else num_clients
    return (self.coordinate_bound * math.sqrt(n / (4.0 * self.num_trials)) /
            self.theta)

  def secure_moduli(self):
    return {'encoded': self.modulus}

  def public_measurements(self):
    return dict(
        l2_clip=self.l2_clip,
        theta=self.theta,
        coordinate_bound=self.coordinate_bound,
        num_trials=np.int64(self.num_trials),
        modulus=np.int64(self.modulus),
        output_dimension=np.int64(self.output_dim),
    )

  @property
  def l2_bound(self) -> float:
    """L with ||p - 1/2||_2 <= effective_theta * L for every client.

    `client_encode` clips ||y||_2 to C and sends p_k = 1/2 + theta y_k / B
    (then clipped into [p_low, p_high], which only shrinks |p_k - 1/2|), so
    the offsets have l2 norm <= theta C / B -- the l2 promise of the event
    (`tff_ddp.accounting.pbm_rdp.l2_rdp`). Margins for float64: the clipped
    norm exceeds C by at most a relative D 2^-53 < 2^-20 (D <= 2^26
    coordinates), y / B, theta times it and 1/2 + it round by at most
    2^-52 relative plus 2^-54 absolute per coordinate (sqrt(D) 2^-54 in
    l2), and theta <= effective_theta + 2^-53.
    """
    theta_eff = self.effective_theta
    return ((self.l2_clip / self.coordinate_bound) * (1.0 + 2.0**-20) *
            (1.0 + 2.0**-52 / theta_eff) +
            math.sqrt(self.output_dim) * 2.0**-52 / theta_eff)

  def dp_event(self, num_clients=None) -> dp_accounting.DpEvent:
    """One round with `num_clients` clients in the sum (zero-out; see
    `tff_ddp.accounting.pbm_rdp`): Lemma 2 over the sensitive coordinates,
    and the l2 promise `l2_bound` (the client's l2 clip), whichever the
    accountant finds smaller per order. NoOpDpEvent for 0 clients (an
    empty round releases nothing about anyone)."""
    n = (self.expected_clients_per_round if num_clients is None else
         checks.integer(num_clients, 'num_clients', 0))
    if n == 0:
      return dp_accounting.NoOpDpEvent()
    return events.PoissonBinomialDpEvent(
        theta=self.effective_theta,
        num_trials=self.num_trials,
        num_clients=n,
        dimension=self.sensitive_coordinates,
        replace_one_dimension=(None if self.l0_clip is None else
                               self.replace_one_coordinates),
        l2_bound=self.l2_bound)

  def output_range(self):
    """(l2_clip, (M/2) B / (m theta) times the encoder's gain: sqrt(D), 1
    for the identity): `recover_sum`'s window puts 2S - n m within M of 0,
    so |centred| <= M/2 before the rescaling of `server_decode`
    (`tff_ddp.mechanisms.base.Mechanism.output_range`, `decoded_bound`)."""
    return self.l2_clip, base.decoded_bound(
        self.encoder, self.modulus / 2 * self.coordinate_bound /
        (self.num_trials * self.theta))

  def max_clients(self) -> int:
    """The most clients n with n m < M = 2^bits: the ring then holds every
    possible sum S in [0, n m] (`recover_sum` is exact); at least
    `max_clients_per_round`, which sized the ring."""
    return (self.modulus - 1) // self.num_trials

  def client_encode(self, x, round_seed, noise_seed):
    """Algorithms 1 and 3 for one client.

    Returns z int64 in [0, m]^D and the flags (nonfinite, clipped,
    inexact_encoding). A client whose input has a NaN or +-Inf encodes
    zeros (so it still sends Binomial(m, 1/2) draws: the zero-out
    neighbour).
    """
    probs, flags = self.client_probabilities(x, round_seed)
    z = sample_binomial(probs, self.num_trials, noise_seed)  # exact
    return {'encoded': z}, flags

  def client_probabilities(self, x, round_seed):
    """(p, flags): one client's Bernoulli probabilities p (float64 [D])
    and flags, everything `client_encode` computes before its draws
    Z[k] ~ Binomial(m, p[k]). Deterministic given x and the round's seed:
    clients with equal inputs have equal p (a batched round draws their
    summed Binomial(count m, p) at once, `tff_ddp.analytics.
    quantiles.rounds`)."""
    x = tf.reshape(tf.cast(x, tf.float64), [self.dim])
    finite = tf.reduce_all(tf.math.is_finite(x))
    x = tf.where(finite, x, tf.zeros_like(x))
    y, residual = self.encoder.encode_with_residual(x, round_seed)
    inexact = residual > (INEXACT_RELATIVE_RESIDUAL *
                          tensors.overflow_safe_norm(x))
    # Optional l0 clip: keep the l0_clip largest |y[k]|, so at most that many
    # coordinates differ from Binomial(m, 1/2) (the event's dimension).
    sparse_clipped = tf.constant(False)
    if self.l0_clip is not None and self.l0_clip < self.output_dim:
      y, sparse_clipped = tensors.keep_largest(y, self.l0_clip)
    # Algorithm 3, line 3: clip the representation's l2 norm to C.
    y, clipped = tensors.clip_to_norm(y, self.l2_clip)
    clipped |= sparse_clipped
    # Line 5: p = 1/2 + theta y / B (B = C for 'l2', where |y / B| <= 1
    # already). For 'linf', coordinates beyond B (inexact representations
    # only) are clipped and flagged.
    ratio = y / self.coordinate_bound
    clipped |= tf.reduce_any(tf.abs(ratio) > 1.0)
    # Kept inside [1/2 - theta, 1/2 + theta] exactly (float rounding of y / B
    # could step outside by an ulp): the premise of Lemma 2, whatever y is.
    probs = tf.clip_by_value(0.5 + self.theta * ratio, self.p_low, self.p_high)
    return probs, base.flag_vector([tf.logical_not(finite), clipped, inexact])

  def recover_sum(self, zbar, num_clients):
    """The integer sum S from its residue mod M, given n = num_clients.

    S lies in [0, n m]; we return the representative of zbar mod M in the
    window [h - M/2 + 1, h + M/2] around h = floor(n m / 2). When n m < M the
    window contains [0, n m], so S is recovered exactly. (With more clients
    than the ring was sized for, S is still recovered while it stays within
    M/2 of h, which its concentration makes likely; `sum_may_wrap` says so.)

    Worked example (M = 8, m = 3, n = 2, S = 5): h = 3, window [0, 7],
    zbar = 5 -> 5. With n = 4 (n m = 12 >= M, S = 7, zbar = 7): h = 6, window
    [3, 10], zbar = 7 -> 7.
    """
    n = tf.cast(num_clients, tf.int64)
    low = (n * self.num_trials) // 2 - self.modulus // 2 + 1
    return low + base.ring_residue(tf.cast(zbar, tf.int64) - low, self.modulus)

  def server_decode(self, summed, num_clients, round_seed):
    """Algorithm 2 for a sum: rescale with the measured n, then decode.

    Returns the estimate of sum_i x_i (float64 [dim]) and `sum_may_wrap`
    (n m >= M, i.e. n > `max_clients()`: more clients than the ring was
    sized for).
    """
    n = tf.cast(num_clients, tf.int64)
    s = self.recover_sum(summed['encoded'], n)
    centred = tf.cast(2 * s - n * self.num_trials, tf.float64) / 2.0
    y_sum = centred * (self.coordinate_bound / (self.num_trials * self.theta))
    may_wrap = n > self.max_clients()
    return (self.encoder.decode(y_sum, round_seed), {'sum_may_wrap': may_wrap})


def probability_bounds(theta: float) -> Tuple[float, float]:
  """(p_low, p_high): floats with 1/2 - theta <= p_low, p_high <= 1/2 + theta.

  p_high is the largest float64 not above 1/2 + theta (checked in exact
  rational arithmetic) and p_low = 1 - p_high, which float64 represents
  exactly for p_high in [1/2, 3/4] (Sterbenz).
  """
  p_high = 0.5 + theta
  if fractions.Fraction(
      p_high) > fractions.Fraction(0.5) + fractions.Fraction(theta):
    p_high = math.nextafter(p_high, 0.0)
  return 1.0 - p_high, p_high


def bits_for(max_clients: int, num_trials: int) -> int:
  """Smallest b with 2^b > max_clients * num_trials (the sum fits the ring)."""
  return max(MIN_BITS, int(max_clients * num_trials).bit_length())


def max_num_trials(max_clients: int, bits: int = base.MAX_RING_BITS) -> int:
  """The most trials m per coordinate the sampler and a ring of 2^bits
  allow for `max_clients` clients: the ring holds every sum n m < M
  (`PoissonBinomial.max_clients`). 0 if not even one trial fits."""
  return min(MAX_NUM_TRIALS, (2**bits - 1) // max_clients)


@dataclasses.dataclass(frozen=True)
class Request:
  """The dimension-free arguments of `compute_parameters`, as one value.

  Validated at construction (every refusal a TypeError or ValueError naming
  the argument and a value that works), before anything is built or drawn;
  `PoissonBinomialSumFactory` builds it once and hands it to
  `compute_parameters` for each value type.

  Attributes:
    l2_clip: C > 0, the clip of the representation's l2 norm.
    theta: bias scale in [2^-40, 1/4] (Algorithm 3; larger is less private).
    num_trials: m >= 1, Bernoulli trials per coordinate (bits sent per
      coordinate ~ log2(m + 1)); at most MAX_NUM_TRIALS.
    expected_clients_per_round: n >= 1, the clients whose draws are in the
      sum; the privacy event assumes this many.
    max_clients_per_round: the most clients a round may have; the ring is
      2^bits with 2^bits > max_clients * m so the sum never wraps. Defaults
      to expected_clients_per_round (a round with more clients is still
      decoded correctly while the sum stays within M/2 of its mean, and is
      flagged in the measurements).
    divisor: a `Divisor`, given as it or its value: 'l2' (Algorithm 3:
      p = 1/2 + theta y / C) or 'linf'
      (p = 1/2 + theta y / B with B = level C / sqrt(D); see
      docs/notes/cpbm_accounting.md, "The divisor"). Same privacy; 'linf'
      needs an encoder with a level (Kashin) or `linf_clip`.
    linf_clip: for 'linf', B itself (any encoder; e.g. 1 for Haar
      coefficients in {-1, 0, 1}); coordinates beyond it are clipped.
    l0_clip: optional k >= 1: a client keeps only its k largest-magnitude
      representation coordinates (others zeroed, client flagged as
      clipped), so the privacy event composes Lemma 2 over k coordinates
      instead of D (zero-out neighbours; see `sensitive_coordinates`).
  """

  l2_clip: float
  theta: float
  num_trials: int
  expected_clients_per_round: int
  max_clients_per_round: Optional[int] = None
  divisor: Divisor = Divisor.L2
  linf_clip: Optional[float] = None
  l0_clip: Optional[int] = None

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    set_('l2_clip', checks.positive(self.l2_clip, 'l2_clip'))
    set_('theta', checks.real(self.theta, 'theta', MIN_THETA, MAX_THETA))
    n = checks.integer(self.expected_clients_per_round,
                       'expected_clients_per_round', 1, base.MAX_MODULUS - 1)
    set_('expected_clients_per_round', n)
    max_clients = checks.integer(
        n if self.max_clients_per_round is None else self.max_clients_per_round,
        'max_clients_per_round', n, base.MAX_MODULUS - 1)
    set_('max_clients_per_round', max_clients)
    m = checks.integer(self.num_trials, 'num_trials', 1,
                       max(1, max_num_trials(max_clients)))
    set_('num_trials', m)
    bits = bits_for(max_clients, m)
    if bits > MAX_BITS:
      raise ValueError(
          f'max_clients_per_round * num_trials = {max_clients * m} needs a '
          f'ring of 2^{bits} > 2^{MAX_BITS} (the secure sum runs on int32). '
          f'Use num_trials <= {max_num_trials(max_clients)} or fewer clients '
          'per round.')
    set_('divisor', as_divisor(self.divisor))
    if self.linf_clip is not None:
      if self.divisor is not Divisor.LINF:
        raise ValueError("linf_clip needs divisor='linf'.")
      set_('linf_clip', checks.positive(self.linf_clip, 'linf_clip'))
    set_('l0_clip', checks.optional_integer(self.l0_clip, 'l0_clip', 1))

  @property
  def bits(self) -> int:
    """The ring: the smallest 2^bits > max_clients_per_round * m."""
    # An int once __post_init__ has run (None asks for the expected count).
    return bits_for(cast(int, self.max_clients_per_round), self.num_trials)


def compute_parameters(
    dim: int,
    request: Request,
    encoder: Optional[encoders_base.Encoder] = None,
) -> PoissonBinomial:
  """Validates a cPBM configuration; errors name the argument to change.

  Args:
    dim: number of scalars a client holds (>= 1).
    request: a `Request`, the dimension-free arguments (validated when it
      was built).
    encoder: R^dim -> R^D with the round's public seed (default: the
      identity, D = dim).

  Returns:
    A PoissonBinomial.
  """
  dim = checks.integer(dim, 'dim', 1)
  checks.instance(
      request, Request, 'compute_parameters takes request=poisson_binomial.'
      'Request(l2_clip, theta, num_trials, expected_clients_per_round, ...)')
  encoder = encoder or registry.Identity(dim)
  if encoder.dim != dim:
    raise ValueError(f'encoder.dim = {encoder.dim} differs from dim = {dim}.')
  output_dim = int(encoder.output_dim)
  l2_clip = request.l2_clip
  bound = l2_clip
  if request.linf_clip is not None:
    bound = min(bound, request.linf_clip)
  elif request.divisor is Divisor.LINF:
    if encoder.level is None:
      raise ValueError(
          "divisor='linf' needs an encoder with a guaranteed l_inf level "
          f"(encoder='kashin') or an explicit linf_clip; {encoder!r} has "
          'none.')
    bound = min(bound, float(encoder.level) * l2_clip / math.sqrt(output_dim))
  p_low, p_high = probability_bounds(request.theta)
  return PoissonBinomial(
      encoder=encoder,
      dim=dim,
      output_dim=output_dim,
      l2_clip=l2_clip,
      theta=request.theta,
      num_trials=request.num_trials,
      expected_clients_per_round=request.expected_clients_per_round,
      max_clients_per_round=cast(int, request.max_clients_per_round),
      bits=request.bits,
      p_low=p_low,
      p_high=p_high,
      coordinate_bound=bound,
      divisor=request.divisor,
      l0_clip=request.l0_clip)
