"""`PoissonBinomialSumFactory`: clipped Poisson binomial (cPBM) sum for TFF.

A thin, argument-validating wrapper: the math is the mechanism
`tff_ddp.mechanisms.poisson_binomial` (Algorithms 1-3 of the federated
frequency estimation paper), the TFF placement is
`tff_ddp.aggregators.secure_sum`.
"""

from typing import Optional

from tff_ddp.aggregators import secure_sum
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import poisson_binomial as pbm_mechanism

ENCODERS = registry.NAMES
_NAME = 'PoissonBinomialSumFactory'


class PoissonBinomialSumFactory(secure_sum.MechanismSumFactory):
  """Sums client values with the clipped Poisson binomial mechanism and SecAgg.

  Each round every client flattens its value x (d scalars), encodes it to
  y in R^D (Kashin's representation over a randomized Hadamard frame by
  default, public seed new each round), clips ||y||_2 to `l2_clip` = C, and
  sends Z[k] ~ Binomial(m, 1/2 + theta y[k] / C) for each coordinate k, with
  m = `num_trials`. The server sees only sum_i Z_i mod 2^bits, with
  2^bits > max_clients_per_round * m so the sum is recovered exactly, and
  returns decode(C / (m theta) (S - n m / 2)), with n the number of clients
  in the secure sum: an unbiased estimate of sum_i clip(y_i) mapped back to
  the value's structure, with variance at most n C^2 / (4 m theta^2) per
  representation coordinate (eq. 3).

  `l2_clip` bounds the norm of the *representation*, which for the Kashin
  encoder is larger than the input's (||y|| >= ||x||, typically by a small
  factor; see `tff_ddp.encoders.KashinEncoder`).

  Privacy (per round): `dp_event(value_type)` is the
  `PoissonBinomialDpEvent(theta, m, n, D)` (D replaced by min(D, l0_clip)
  with an l0 clip) that `tff_ddp.accounting.RdpAccountant` turns into
  epsilon: the zero-out curve (a client's input replaced by zeros, its
  Binomial(m, 1/2) draws still in the sum) under its default relation,
  Lemma 2's replace-one curve under REPLACE_ONE. The measurements carry it
  with the measured number of clients.

  Measurements each round: l2_clip, theta, coordinate_bound (B), num_trials,
  modulus, output_dimension, participating_clients, sum_may_wrap (more
  clients than the ring was sized for) and dp_event. Per-client counts
  (non-finite, clipped, inexact encodings) are withheld unless noised or
  debugged; see `secure_sum`.

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
      divisor: str = 'l2',
      linf_clip: Optional[float] = None,
      l0_clip: Optional[int] = None,
      **options,
  ):
    """Validates and stores the configuration (dimension-free checks).

    Args:
      l2_clip: C > 0, clip of the representation's l2 norm.
      theta: bias scale in [2^-40, 1/4]; the privacy cost grows with theta.
      num_trials: m >= 1 Bernoulli trials per coordinate (at most
        `tff_ddp.mechanisms.poisson_binomial.MAX_NUM_TRIALS`, and
        max_clients * m < 2^30).
      expected_clients_per_round: n >= 1, the clients the planning event
        assumes per round.
      encoder: 'kashin' (default; Kashin's representation over a
        randomized Hadamard frame), 'hadamard' (randomized Walsh-Hadamard
        rotation, D = next power of two; no l_inf guarantee), 'dft'
        (randomized DFT, D = next even number; no l_inf guarantee) or 'none'
        (identity, for coordinatewise-bounded inputs with linf_clip).
      max_clients_per_round: most clients a round may have; sizes the ring
        (default expected_clients_per_round).
      divisor: 'l2' (Algorithm 3 as published: p = 1/2 + theta y / C) or
        'linf' (p = 1/2 + theta y / B, B = K C / sqrt(D) the l_inf bound
        the Kashin representation guarantees; same privacy event, variance
        smaller by D / K^2). See `tff_ddp.mechanisms.poisson_binomial`.
      linf_clip: with divisor='linf', the coordinate bound B itself (for
        inputs bounded coordinatewise, e.g. with encoder='none').
      l0_clip: optional k: each client keeps its k largest-magnitude
        representation coordinates, and the privacy event composes Lemma 2
        over min(k, D) coordinates instead of D (zero-out neighbours: the
        other coordinates send Binomial(m, 1/2) either way). For sparse
        inputs with encoder='none', e.g. histogram encodings.
      **options: the secure sum's keywords (`secure_sum.ROUND_OPTIONS`:
        client_sampling_rate, count_noise_multiplier, debug_measurements,
        entropy, seed, and on_wrap: 'raise', the default, refuses a round
        with more clients than the ring holds (2^bits > clients *
        num_trials, bits sized by max_clients_per_round) with
        `tff_ddp.utils.rounds.RoundRefusedError`; 'flag' returns it with
        `sum_may_wrap=True`; see `tff_ddp.aggregators.secure_sum`), and
        `KashinEncoder`'s (redundancy, eta, delta, iterations, frame; only
        with encoder='kashin').
    """
    round_options, kashin_options = secure_sum.split_round_options(options)
    self._encoder = registry.encoder_spec(encoder, kashin_options)
    # The mechanism's request, validated once; each value type's mechanism
    # is derived from it (`_make`). Dim 1 stands in for the checks that
    # need the encoder (divisor='linf' needs its level).
    self._request = pbm_mechanism.Request(l2_clip, theta, num_trials,
                                          expected_clients_per_round,
                                          max_clients_per_round, divisor,
                                          linf_clip, l0_clip)
    pbm_mechanism.compute_parameters(1, self._request, self._encoder.make(1))
    self._describe = dict(l2_clip=l2_clip,
                          theta=theta,
                          num_trials=num_trials,
                          expected_clients_per_round=expected_clients_per_round,
                          max_clients_per_round=max_clients_per_round,
                          divisor=self._request.divisor.value,
                          linf_clip=linf_clip,
                          l0_clip=l0_clip,
                          encoder=encoder,
                          **kashin_options)
    super().__init__(self._make, name=_NAME, **round_options)

  def _ring_capacity(self, spec, mechanism, others):
    """The refusal names max_clients_per_round (it sizes the ring)."""
    del spec
    return secure_sum.RingCapacity(
        capacity=min(mechanism.max_clients(), others),
        owner=_NAME,
        sized_for=(f'max_clients_per_round='
                   f'{mechanism.max_clients_per_round}, num_trials='
                   f'{mechanism.num_trials}: 2^{mechanism.bits} > clients x '
                   'num_trials'),
        knob='max_clients_per_round')

  def _make(self, spec: secure_sum.ValueSpec):
    encoder = self._encoder.make(spec.dim)
    return pbm_mechanism.compute_parameters(spec.dim, self._request, encoder)
