"""The clipped Poisson binomial mechanism (cPBM): parameters, client, server.

Chen et al., "Federated frequency estimation" (shared/papers/
federated-frequency-estimation-cpbm.txt): Algorithm 1 (client: Kashin
representation, then cPBM), Algorithm 3 (cPBM), Algorithm 2 (server: rescale,
decode), eq. (3) (unbiasedness and variance), Lemma 2 (privacy, computed in
`tff_ddp.accounting.pbm`). This module is the one place these formulas live;
`tff_ddp.aggregators.PoissonBinomialSumFactory` only places them.

One client (d input scalars, D = encoder.output_dim, C = l2_clip):

  x --encode--> y in R^D --clip ||y||_2 to C--> p[k] = 1/2 + theta y[k] / C
    --> Z[k] ~ Binomial(m, p[k])  (exact, integer comparisons)  in [0, m]

Server, from S[k] = sum over the n participating clients of Z[k] (recovered
exactly from the modular sum when n m < M = 2^bits, see `recover_sum`):

  yhat_sum[k] = C / (m theta) * (S[k] - n m / 2)        (Algorithm 2, line 3,
                                                         times n: a *sum*)
  xhat_sum    = encoder.decode(yhat_sum)                (Algorithm 2, line 4)

E[S[k]] = m n / 2 + (m theta / C) sum_i y_i[k], so yhat_sum is unbiased for
sum_i y_i[k] (clipped), with variance
(C / (m theta))^2 sum_i m p_i (1 - p_i) <= n C^2 / (4 m theta^2) per
coordinate -- eq. (3)'s C^2 / (4 n m theta^2) for the mean, times n^2.

Worked example (C = 1, theta = 1/4, m = 4, n = 2, D = 1): y_1 = 1, y_2 = -1/2
give p = 3/4 and 3/8, so E[Z_1] = 3, E[Z_2] = 1.5; with S = 4.5 the server
returns 1 / (4 / 4) * (4.5 - 4) = 0.5 = y_1 + y_2.

Coordinate scaling. Algorithm 3 divides by C: p = 1/2 + theta y[k] / C
(`scaling='l2'`, the default). Lemma 2 only needs p in
[1/2 - theta, 1/2 + theta], i.e. |y[k]| <= B for the divisor B, and the
Kashin representation guarantees |y[k]| <= K ||x||_2 / sqrt(D) with level K;
after the l2 clip that is at most B = K C / sqrt(D) whenever the
representation is exact (||x|| <= ||y||). `scaling='linf'` uses this B
(p = 1/2 + theta clip(y[k] / B, -1, 1), rescaled by B / (m theta) on the
server): the same privacy event, with the per-coordinate variance bound
n B^2 / (4 m theta^2), D / K^2 times smaller than with B = C -- the l_inf
form of the original Poisson binomial mechanism (the paper's ref. [20]),
which Algorithm 3 leaves on the table. Coordinates beyond B (possible only
for inexact representations) are clipped to B and the client is counted as
clipped.

Probabilities are float64 numbers in [p_low, p_high], p_low = 1 - p_high,
p_high the largest float64 <= 1/2 + theta (both exact dyadic rationals), so
every client's Bernoulli probabilities lie in [1/2 - theta, 1/2 + theta]: the
premise of Lemma 2.
"""

import dataclasses
import fractions
import math
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

MIN_BITS = 1
# Power-of-two moduli up to 2^30 survive the test backend's int32 sum.
MAX_BITS = 30
MAX_THETA = 0.25
# Bernoulli(p) = [W < p 2^62] for W uniform on [0, 2^62): exact for every
# float64 p in [1/4, 3/4] (a multiple of 2^-54, so p 2^62 is an integer).
_WORD_BITS = 62
_WORD_MASK = (1 << _WORD_BITS) - 1

# Per-client counters sent through the secure sum beside the encoding.
COUNTERS = ('participating_clients', 'nonfinite_clients', 'clipped_clients',
            'inexact_encodings')
# A representation is 'inexact' when ||x - decode(encode(x))|| exceeds this
# fraction of ||x|| (only the Kashin encoder can be inexact).
INEXACT_RELATIVE_RESIDUAL = 1e-6
SCALINGS = ('l2', 'linf')


@dataclasses.dataclass(frozen=True)
class PbmParameters:
  """Everything Algorithms 1-3 and Lemma 2 need, derived and validated."""

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
  coordinate_bound: float  # B: p = 1/2 + theta y / B (B = C for 'l2')
  scaling: str = 'l2'
  l0_clip: Optional[int] = None  # most non-zero representation coordinates

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

  def sum_stddev_bound(self, num_clients=None) -> float:
    """sqrt(n B^2 / (4 m theta^2)): stddev bound of a coordinate of yhat_sum.

    B = C for scaling 'l2' (eq. 3 times n for a sum).
    """
    n = self.expected_clients_per_round if num_clients is None else num_clients
    return (self.coordinate_bound * math.sqrt(n / (4.0 * self.num_trials))
            / self.theta)

  def dp_event(self, num_clients=None):
    """The per-round PoissonBinomialDpEvent (zero-out; see accounting.pbm)."""
    from tff_ddp.accounting import events  # pylint: disable=g-import-not-at-top
    return events.PoissonBinomialDpEvent(
        theta=self.effective_theta, num_trials=self.num_trials,
        num_clients=int(num_clients or self.expected_clients_per_round),
        dimension=self.sensitive_coordinates,
        replace_one_dimension=(None if self.l0_clip is None
                               else self.replace_one_coordinates))


def probability_bounds(theta: float) -> Tuple[float, float]:
  """(p_low, p_high): floats with 1/2 - theta <= p_low, p_high <= 1/2 + theta.

  p_high is the largest float64 not above 1/2 + theta (checked in exact
  rational arithmetic) and p_low = 1 - p_high, which float64 represents
  exactly for p_high in [1/2, 3/4] (Sterbenz).
  """
  p_high = 0.5 + theta
  if fractions.Fraction(p_high) > fractions.Fraction(0.5) + fractions.Fraction(
      theta):
    p_high = math.nextafter(p_high, 0.0)
  return 1.0 - p_high, p_high


def bits_for(max_clients: int, num_trials: int) -> int:
  """Smallest b with 2^b > max_clients * num_trials (the sum fits the ring)."""
  return max(MIN_BITS, int(max_clients * num_trials).bit_length())


def compute_parameters(
    dim: int,
    output_dim: int,
    l2_clip: float,
    theta: float,
    num_trials: int,
    expected_clients_per_round: int,
    max_clients_per_round=None,
    scaling: str = 'l2',
    level=None,
    linf_clip=None,
    l0_clip=None,
) -> PbmParameters:
  """Validates a cPBM configuration; ValueError names the argument to change.

  Args:
    dim: number of scalars a client holds (>= 1).
    output_dim: D, the encoder's output dimension (>= dim).
    l2_clip: C > 0, the clip of the representation's l2 norm.
    theta: bias scale in (0, 1/4] (Algorithm 3; larger is less private).
    num_trials: m >= 1, Bernoulli trials per coordinate (bits sent per
      coordinate ~ log2(m + 1)).
    expected_clients_per_round: n >= 1, the clients whose draws are in the
      sum; the privacy event assumes this many.
    max_clients_per_round: the most clients a round may have; the ring is
      2^bits with 2^bits > max_clients * m so the sum never wraps. Defaults
      to expected_clients_per_round (a round with more clients is still
      decoded correctly while the sum stays within M/2 of its mean, and is
      flagged in the measurements).
    scaling: 'l2' (Algorithm 3: p = 1/2 + theta y / C) or 'linf'
      (p = 1/2 + theta y / B with B = level C / sqrt(D); see the module
      docstring). Same privacy; 'linf' needs `level`.
    level: the encoder's guaranteed Kashin level K (only for 'linf').
    linf_clip: for 'linf', B itself (any encoder; e.g. 1 for Haar
      coefficients in {-1, 0, 1}); coordinates beyond it are clipped.
    l0_clip: optional k >= 1: a client keeps only its k largest-magnitude
      representation coordinates (others zeroed, client counted as
      clipped), so the privacy event composes Lemma 2 over k coordinates
      instead of D (zero-out neighbours; see `sensitive_coordinates`).
      Meant for sparse inputs with encoder 'none', e.g. histogram
      encodings (one 1 for a flat histogram, log2(b) for a tree).

  Returns:
    A PbmParameters.
  """
  def require(ok, message):
    if not ok:
      raise ValueError(message)

  def is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

  require(is_int(dim) and dim >= 1, f'dim must be an integer >= 1, got {dim!r}.')
  require(is_int(output_dim) and output_dim >= dim,
          f'output_dim must be an integer >= dim = {dim}, got {output_dim!r}.')
  require(_finite(l2_clip) and l2_clip > 0,
          f'l2_clip must be a finite number > 0, got {l2_clip!r}.')
  require(_finite(theta) and 0 < theta <= MAX_THETA,
          f'theta must be in (0, 1/4], got {theta!r}.')
  require(is_int(num_trials) and num_trials >= 1,
          f'num_trials must be an integer >= 1, got {num_trials!r}.')
  require(is_int(expected_clients_per_round) and expected_clients_per_round >= 1,
          'expected_clients_per_round must be an integer >= 1, got '
          f'{expected_clients_per_round!r}.')
  n = int(expected_clients_per_round)
  if max_clients_per_round is None:
    max_clients_per_round = n
  require(is_int(max_clients_per_round) and max_clients_per_round >= n,
          'max_clients_per_round must be an integer >= '
          f'expected_clients_per_round = {n}, got {max_clients_per_round!r}.')
  m = int(num_trials)
  bits = bits_for(int(max_clients_per_round), m)
  if bits > MAX_BITS:
    raise ValueError(
        f'max_clients_per_round * num_trials = '
        f'{max_clients_per_round * m} needs a ring of 2^{bits} > 2^{MAX_BITS} '
        f'(the secure sum runs on int32). Use num_trials <= '
        f'{(2**MAX_BITS - 1) // max_clients_per_round} or fewer clients per '
        'round.')
  require(scaling in SCALINGS,
          f'scaling must be one of {SCALINGS}, got {scaling!r}.')
  bound = float(l2_clip)
  if linf_clip is not None:
    require(scaling == 'linf', "linf_clip needs scaling='linf'.")
    require(_finite(linf_clip) and linf_clip > 0,
            f'linf_clip must be a finite number > 0, got {linf_clip!r}.')
    bound = min(bound, float(linf_clip))
  elif scaling == 'linf':
    require(level is not None and _finite(level) and level >= 1,
            "scaling='linf' needs an encoder with a guaranteed l_inf level "
            "(encoder='kashin') or an explicit linf_clip, got level "
            f'{level!r}.')
    bound = min(bound, float(level) * float(l2_clip) / math.sqrt(output_dim))
  if l0_clip is not None:
    require(is_int(l0_clip) and l0_clip >= 1,
            f'l0_clip must be an integer >= 1, got {l0_clip!r}.')
    l0_clip = int(l0_clip)
  p_low, p_high = probability_bounds(float(theta))
  return PbmParameters(
      dim=int(dim), output_dim=int(output_dim), l2_clip=float(l2_clip),
      theta=float(theta), num_trials=m, expected_clients_per_round=n,
      max_clients_per_round=int(max_clients_per_round), bits=bits,
      p_low=p_low, p_high=p_high, coordinate_bound=bound, scaling=scaling,
      l0_clip=l0_clip)


def sample_binomial(probs: tf.Tensor, num_trials: int, seed) -> tf.Tensor:
  """Exact Binomial(num_trials, p) per element, as int64.

  Each trial is a Bernoulli(p) decided as [W < p 2^62] for W a uniform
  integer in [0, 2^62) (the low 62 bits of a full-range stateless int64
  word). For float64 p in [1/4, 3/4] -- the only probabilities cPBM uses --
  p 2^62 is an integer computed exactly, so P(W < p 2^62) = p exactly: no
  floating point decides an outcome. O(num_trials) passes of one word per
  element.

  Args:
    probs: float64 tensor of probabilities, each in [1/4, 3/4].
    num_trials: m >= 1 (Python int).
    seed: shape-[2] int64 stateless seed; private to the client.

  Returns:
    int64 tensor of probs' shape with values in [0, m].
  """
  probs = tf.convert_to_tensor(probs, tf.float64)
  seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
  threshold = tf.cast(probs * float(2**_WORD_BITS), tf.int64)
  shape = tf.shape(probs)

  def body(t, count):
    words = tf.random.stateless_uniform(
        shape, seed=tf.random.experimental.stateless_fold_in(seed, t),
        dtype=tf.int64, minval=None, maxval=None)
    words = tf.bitwise.bitwise_and(words, _WORD_MASK)
    return t + 1, count + tf.cast(words < threshold, tf.int64)

  _, count = tf.while_loop(
      lambda t, _: t < num_trials, body,
      (tf.constant(0, tf.int64), tf.zeros(shape, tf.int64)))
  return count


def client_encode(
    x: tf.Tensor, params: PbmParameters, encoder, rotation_seed: tf.Tensor,
    noise_seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Algorithms 1 and 3 for one client.

  Args:
    x: the client's flattened value, rank 1 of length params.dim.
    params: from `compute_parameters`.
    encoder: maps R^dim to R^D with the round's public seed (encode /
      decode / output_dim), e.g. `tff_ddp.encoders.KashinEncoder`.
    rotation_seed: the round's public seed (same for all clients, server).
    noise_seed: this client's private seed. Never share it between clients.

  Returns:
    (z, counters): z int64 in [0, m]^D; counters int64 in the order of
    COUNTERS. A client whose input has a NaN or +-Inf encodes zeros (so it
    still sends Binomial(m, 1/2) draws, the zero-out neighbour) and is
    counted.
  """
  x = tf.cast(tf.reshape(x, [-1]), tf.float64)
  finite = tf.reduce_all(tf.math.is_finite(x))
  x = tf.where(finite, x, tf.zeros_like(x))
  y = encoder.encode(x, rotation_seed)
  residual = tf.norm(x - encoder.decode(y, rotation_seed))
  inexact = residual > INEXACT_RELATIVE_RESIDUAL * tf.norm(x)
  # Optional l0 clip: keep the l0_clip largest |y[k]|, so at most that many
  # coordinates differ from Binomial(m, 1/2) (the event's dimension).
  sparse_clipped = tf.constant(False)
  if params.l0_clip is not None and params.l0_clip < params.output_dim:
    sparse_clipped = tf.math.count_nonzero(y) > params.l0_clip
    _, keep = tf.math.top_k(tf.abs(y), k=params.l0_clip)
    kept = tf.scatter_nd(keep[:, tf.newaxis], tf.gather(y, keep),
                         tf.shape(y, out_type=tf.int32))
    y = tf.where(sparse_clipped, kept, y)
  # Algorithm 3, line 3: clip the representation's l2 norm to C.
  norm = tf.norm(y)
  clipped = (norm > params.l2_clip) | sparse_clipped
  y = y * tf.where(clipped, params.l2_clip / tf.maximum(norm, 1e-300), 1.0)
  # Line 5: p = 1/2 + theta y / B (B = C for 'l2', where |y / B| <= 1
  # already). For 'linf', coordinates beyond B (inexact representations
  # only) are clipped and counted.
  ratio = y / params.coordinate_bound
  beyond = tf.reduce_any(tf.abs(ratio) > 1.0)
  clipped = clipped | beyond
  # Kept inside [1/2 - theta, 1/2 + theta] exactly (float rounding of y / B
  # could step outside by an ulp): the premise of Lemma 2, whatever y is.
  probs = tf.clip_by_value(0.5 + params.theta * ratio,
                           params.p_low, params.p_high)
  z = sample_binomial(probs, params.num_trials, noise_seed)
  counters = tf.stack([
      tf.constant(1, tf.int64),
      tf.cast(tf.logical_not(finite), tf.int64),
      tf.cast(clipped, tf.int64),
      tf.cast(inexact, tf.int64),
  ])
  return z, counters


def recover_sum(zbar: tf.Tensor, num_clients: tf.Tensor,
                params: PbmParameters) -> tf.Tensor:
  """The integer sum S from its residue mod M, given n = num_clients.

  S lies in [0, n m]; we return the representative of zbar mod M in the
  window [h - M/2 + 1, h + M/2] around h = floor(n m / 2). When n m < M the
  window contains [0, n m], so S is recovered exactly. (With more clients
  than the ring was sized for, S is still recovered while it stays within
  M/2 of h, which its concentration makes likely; the server flags it.)

  Worked example (M = 8, m = 3, n = 2, S = 5): h = 3, window [0, 7],
  zbar = 5 -> 5. With n = 4 (n m = 12 >= M, S = 7, zbar = 7): h = 6, window
  [3, 10], zbar = 7 -> 7.
  """
  m_ring = params.modulus
  n = tf.cast(num_clients, tf.int64)
  low = (n * params.num_trials) // 2 - m_ring // 2 + 1
  return low + tf.math.floormod(tf.cast(zbar, tf.int64) - low, m_ring)


def server_decode(
    zbar: tf.Tensor, num_clients: tf.Tensor, params: PbmParameters, encoder,
    rotation_seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Algorithm 2 for a sum: rescale with the measured n, then decode.

  Args:
    zbar: the secure modular sum, integer tensor [D].
    num_clients: n, the number of participating clients (measured through
      the secure sum), int64 scalar.
    params: from `compute_parameters`.
    encoder: the clients' encoder.
    rotation_seed: the round's public seed.

  Returns:
    (estimate of sum_i x_i, float64 [dim]; whether n m >= M, i.e. the sum
    may have wrapped around the ring, bool scalar).
  """
  n = tf.cast(num_clients, tf.int64)
  s = recover_sum(zbar, n, params)
  centred = tf.cast(2 * s - n * params.num_trials, tf.float64) / 2.0
  y_sum = centred * (params.coordinate_bound /
                     (params.num_trials * params.theta))
  may_wrap = n * params.num_trials >= params.modulus
  return encoder.decode(y_sum, rotation_seed), may_wrap


def _finite(value) -> bool:
  try:
    return math.isfinite(float(value))
  except (TypeError, ValueError):
    return False
