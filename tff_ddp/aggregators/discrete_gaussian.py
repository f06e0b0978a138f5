"""`DiscreteGaussianSumFactory`: distributed discrete Gaussian sum for TFF.

A thin, argument-validating wrapper: the math is the mechanism
`tff_ddp.mechanisms.distributed_discrete_gaussian` (Algorithms 1-2 of
Kairouz, Liu & Steinke 2021), the TFF placement is
`tff_ddp.aggregators.secure_sum` (client encode, one
`federated_secure_modular_sum`, server decode).

It takes the arguments of TFF's internal
`tff.aggregators.distributed_dp.DistributedDpSumFactory` (`noise_multiplier`,
`expected_clients_per_round`, `bits`, `l2_clip`, `modclip_prob`, `beta`,
`mechanism='distributed_dgauss'`, `rotation_type='hd'`), so switching is a
one-line change, e.g. in
`tff.learning.algorithms.build_unweighted_fed_avg(model_aggregator=...)`.
"""

import dataclasses
import warnings
from typing import Optional

from tff_ddp.aggregators import adaptive_clip
from tff_ddp.aggregators import secure_sum
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
from tff_ddp.mechanisms import distributed_skellam as skellam_mechanism
from tff_ddp.utils import checks

ENCODERS = registry.NAMES
_NAME = 'DiscreteGaussianSumFactory'
# TFF's DistributedDpSumFactory keywords and what they mean here.
TFF_MECHANISMS = {'distributed_dgauss': base.Kind.DISCRETE_GAUSSIAN,
                  'distributed_skellam': base.Kind.SKELLAM}
TFF_NAMES = {kind: keyword for keyword, kind in TFF_MECHANISMS.items()}
_TFF_ROTATIONS = {'hd': 'hadamard', 'dft': 'dft'}
_DEFAULT_ENCODER = 'hadamard'


class DiscreteGaussianSumFactory(secure_sum.MechanismSumFactory):
  """Sums client values with distributed discrete Gaussian noise and SecAgg.

  Each round, every client clips its (flattened) value to `l2_clip`, scales by
  1/gamma, encodes it (randomized Walsh-Hadamard rotation by default; public
  seed, new each round), rounds to integers under the norm bound of
  Theorem 5 (3), adds discrete Gaussian noise of scale sigma/gamma with
  sigma = noise_multiplier * l2_clip / sqrt(expected_clients_per_round), and
  reduces mod 2^bits. The server sees only the modular sum, centres it,
  decodes and rescales. gamma follows the Section 6 heuristic so that k
  standard deviations of a sum coordinate fit in the ring, with
  P(|N(0,1)| > k) = modclip_prob.

  Privacy (per round, zero-out neighbours; DDG paper Theorem 5 /
  Proposition 10): `dp_event(value_type)` is the planning event (expected
  number of clients), and every round's measurements carry the event with
  the *measured* number of clients in the secure sum
  (`tff_ddp.accounting.extract_dp_event`). Accounted by
  `tff_ddp.accounting.RdpAccountant` against the adversary you name.

  Measurements each round: configuration (l2_clip, scale_factor = 1/gamma,
  scaled_local_stddev, bits, output_dimension; TFF's names padded_dim and
  scaled_inflated_l2 too), participating_clients (= actual_num_clients, the
  number in the secure sum: public by protocol), sum_may_wrap (more clients
  than the ring was sized for, computed from that number) and dp_event.
  Per-client counts (non-finite, clipped, rounding failures) are withheld
  unless noised (`count_noise_multiplier`) or debugged
  (`debug_measurements`, not private); see `secure_sum`.

  Errors: argument types and ranges are checked here (TypeError /
  ValueError); what depends on the dimension (the noise scale, int64
  overflow) is checked at `create(value_type)` / `dp_event(value_type)`.

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
      encoder: str = 'hadamard',
      granularity: Optional[float] = None,
      linf_clip: Optional[float] = None,
      *,
      client_sampling_rate: Optional[float] = None,
      count_noise_multiplier: Optional[float] = None,
      debug_measurements: bool = False,
      entropy=None,
      seed: Optional[int] = None,
      mechanism: str = 'distributed_dgauss',
      rotation_type: Optional[str] = None,
      auto_l2_clip: bool = False,
      auto_l2_target_quantile: float = 0.5,
      auto_l2_lr: float = 0.2,
      auto_l2_clip_count_stddev: Optional[float] = None,
      noise_sampler: str = 'table',
      on_wrap: str = 'raise',
      adaptive_clipping: Optional[adaptive_clip.AdaptiveClipping] = None,
      l0_clip: Optional[int] = None,
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
      encoder: 'hadamard' (randomized Walsh-Hadamard with zero padding to a
        power of two), 'kashin' (Kashin's representation over a randomized
        Hadamard frame of dimension D > d; `l2_clip` then also bounds the
        representation's norm, and the privacy event is over D
        coordinates), or 'none' (no transform: for inputs whose coordinates
        are bounded already, with `linf_clip`).
      granularity: gamma, instead of the Section 6 heuristic (1/gamma is
        the integer scaling factor c of the quantile paper); the ring is
        then checked against the worst-case sum. With encoder 'none', an
        integer value type and an integer 1/gamma, no rounding happens and
        the sensitivity is not inflated.
      linf_clip: also clip each input coordinate to [-linf_clip,
        linf_clip]; the ring check then uses it.
      client_sampling_rate, count_noise_multiplier, debug_measurements,
        entropy, seed: see `tff_ddp.aggregators.secure_sum`.
      mechanism: TFF's keyword: 'distributed_dgauss' (the default here)
        or 'distributed_skellam' (TFF's default: the same client with
        exact Skellam noise, `SkellamSumFactory`,
        `tff_ddp.mechanisms.distributed_skellam`).
      rotation_type: TFF's keyword; 'hd' means encoder='hadamard', 'dft'
        encoder='dft' (`tff_ddp.encoders.dft`, padding to an even length).
      auto_l2_clip, auto_l2_target_quantile, auto_l2_lr,
        auto_l2_clip_count_stddev: TFF's adaptive clipping, private and
        accounted (`tff_ddp.aggregators.adaptive_clip`); the keywords build
        an `AdaptiveClipping` (see `adaptive_clipping`): l2_clip is the
        initial clip; the geometric update of Andrew et al. (2021,
        arXiv:1905.03871) moves it towards the target quantile of the
        clients' norms from their indicators, summed with discrete Gaussian
        noise of stddev auto_l2_clip_count_stddev (default 0.05 *
        expected_clients_per_round; 0: exact, the rounds are then not
        private) in the same secure sum; their event is composed into the
        round's. As in TFF, the value's noise multiplier is raised so that
        value and count together have noise_multiplier. Not with
        granularity, linf_clip or client_sampling_rate.
      noise_sampler: 'table' (default: an alias-table sampler, per-sample
        TV distance < 2^-231 carried by the event and added to delta by the
        accountant; the exact sampler above its range: DDG scale ~29172,
        Skellam Poisson mean ~4.25e8) or 'exact' (DDG: Canonne-Kamath-Steinke
        rejection sampling; Skellam: the exact Poisson sampler); see
        `tff_ddp.mechanisms.distributed_discrete_gaussian` and
        `distributed_skellam`.
      on_wrap: 'raise' (default) refuses a round with more clients in the
        secure sum than the ring holds (`capacity(value_type)`; with the
        Section 6 heuristic exactly expected_clients_per_round) with
        `tff_ddp.utils.rounds.RoundRefusedError`; 'flag' returns it with
        `sum_may_wrap=True` (see `tff_ddp.aggregators.secure_sum`).
      adaptive_clipping: an `adaptive_clip.AdaptiveClipping`: the same
        adaptive clipping as an object (target quantile, learning rate,
        count stddev, zeroing), instead of the auto_l2_* keywords; l2_clip
        is the initial clip.
      l0_clip: optional k >= 1: each client keeps the k largest-magnitude
        coordinates of its encoded vector, so the round's event bounds the
        coordinates one client moves (`Request.l0_clip`): a one-hot
        histogram through encoder 'none' with l0_clip=1 is one coordinate
        to the accountant.
      **kashin_options: passed to `KashinEncoder` (redundancy, eta, delta,
        iterations, frame); only with encoder='kashin'.
    """
    self._kind = base.as_kind(mechanism, TFF_MECHANISMS)
    if rotation_type is not None:
      checks.choice(rotation_type, 'rotation_type', tuple(_TFF_ROTATIONS))
      if encoder != _DEFAULT_ENCODER:
        raise ValueError('give encoder= or TFF\'s rotation_type=, not both.')
      encoder = _TFF_ROTATIONS[rotation_type]
    clipping, count_parameter = self._clipping(
        adaptive_clipping, auto_l2_clip, auto_l2_target_quantile, auto_l2_lr,
        auto_l2_clip_count_stddev)
    adaptive, requested_z = None, noise_multiplier
    if clipping is not None:
      adaptive, noise_multiplier, l2_clip = self._adaptive_arguments(
          clipping, count_parameter, l2_clip, noise_multiplier,
          expected_clients_per_round, granularity, linf_clip)
    # The mechanism's request, validated once; each value type's mechanism
    # is derived from it (`_make`).
    self._request = ddg_mechanism.Request(
        l2_clip, noise_multiplier, expected_clients_per_round, bits,
        modclip_prob, beta, granularity, linf_clip, noise_sampler, l0_clip)
    clean = dataclasses.asdict(self._request)
    del clean['noise_sampler']  # described below, only if not the default
    if adaptive is None and clean['noise_multiplier'] == 0:
      # (With auto_l2_clip, adaptive_clip.configure says it, as TFF's
      # keywords.)
      warnings.warn(
          f'{self._OWNER or type(self).__name__}(noise_multiplier=0) adds '
          'no noise: the sums are released exact and the rounds are NOT '
          'differentially private (their dp_event is NonPrivateDpEvent, '
          'infinite epsilon). Use noise_multiplier > 0 for privacy.')
    self._encoder = registry.encoder_spec(encoder, kashin_options)
    self._describe = dict(clean, encoder=encoder, **kashin_options)
    if self._kind is not base.Kind.DISCRETE_GAUSSIAN:
      self._describe['mechanism'] = TFF_NAMES[self._kind]
    if self._request.noise_sampler is not ddg_mechanism.DEFAULT_SAMPLER:
      self._describe['noise_sampler'] = self._request.noise_sampler.value
    if adaptive_clipping is not None:
      self._describe.update(
          l2_clip=adaptive.initial_clip, noise_multiplier=requested_z,
          adaptive_clipping=adaptive_clipping,
          value_noise_multiplier=clean['noise_multiplier'])
    elif adaptive is not None:
      self._describe.update(
          l2_clip=adaptive.initial_clip, noise_multiplier=requested_z,
          auto_l2_clip=True,
          auto_l2_target_quantile=adaptive.target_quantile,
          auto_l2_lr=adaptive.learning_rate,
          auto_l2_clip_count_stddev=adaptive.count_stddev,
          value_noise_multiplier=clean['noise_multiplier'])
    super().__init__(
        self._make, client_sampling_rate=client_sampling_rate,
        count_noise_multiplier=count_noise_multiplier,
        debug_measurements=debug_measurements, entropy=entropy, seed=seed,
        name=type(self).__name__, adaptive_clip=adaptive, on_wrap=on_wrap)

  # What adaptive clipping's messages call the factory (None: its class
  # name) and its parameter for the clip count's noise (None: none in its
  # signature); `tff_ddp.learning.ddp_secure_aggregator` overrides both.
  _OWNER: Optional[str] = None
  _COUNT_STDDEV_PARAMETER: Optional[str] = 'auto_l2_clip_count_stddev'
  # The same, for adaptive clipping handed as an object.
  _object_count_stddev_parameter: Optional[str] = (
      'adaptive_clipping.count_stddev')

  def _clipping(self, adaptive_clipping, auto_l2_clip, target_quantile,
                learning_rate, count_stddev):
    """(the AdaptiveClipping of the arguments or None, the name of its
    count stddev for messages): the object, or TFF's keywords' (checked
    with their names whether auto_l2_clip is set or not, as TFF does)."""
    checks.real(target_quantile, 'auto_l2_target_quantile', 0.0, 1.0)
    checks.positive(learning_rate, 'auto_l2_lr')
    if count_stddev is not None:
      checks.nonnegative(count_stddev, 'auto_l2_clip_count_stddev')
    keywords = checks.boolean(auto_l2_clip, 'auto_l2_clip')
    if adaptive_clipping is None:
      if not keywords:
        return None, None
      return (adaptive_clip.AdaptiveClipping(target_quantile, learning_rate,
                                             count_stddev),
              self._COUNT_STDDEV_PARAMETER)
    if keywords:
      raise ValueError('give adaptive_clipping= or TFF\'s auto_l2_clip=True, '
                       'not both.')
    if not isinstance(adaptive_clipping, adaptive_clip.AdaptiveClipping):
      raise TypeError('adaptive_clipping must be an adaptive_clip.'
                      f'AdaptiveClipping or None, got {adaptive_clipping!r}.')
    return adaptive_clipping, self._object_count_stddev_parameter

  @classmethod
  def _adaptive_arguments(cls, clipping, count_parameter, l2_clip,
                          noise_multiplier, num_clients, granularity,
                          linf_clip):
    """(AdaptiveClip, the value's noise multiplier, 1.0: the mechanism's
    clip; see `tff_ddp.aggregators.adaptive_clip`)."""
    for name, value in (('granularity', granularity),
                        ('linf_clip', linf_clip)):
      if value is not None:
        raise ValueError(
            f'{name}={value} is in absolute units and cannot follow an '
            'adaptive clip: give adaptive clipping (auto_l2_clip=True or '
            'adaptive_clipping) or ' + name + ', not both.')
    adaptive, value_z = clipping.resolve(
        l2_clip, noise_multiplier, num_clients, cls._OWNER or cls.__name__,
        count_parameter)
    return adaptive, value_z, 1.0

  def _ring_capacity(self, spec, mechanism, others):
    """The refusal names expected_clients_per_round and, computed, the bits
    that would hold n clients with every other argument unchanged (none
    with the Section 6 heuristic: gamma follows the ring, which then holds
    expected_clients_per_round clients at any bits)."""
    request = self._request
    by_bits = []
    for bits in range(request.bits + 1, ddg_mechanism.MAX_BITS + 1):
      try:
        wider = self._make(spec, bits=bits, encoder=mechanism.encoder)
      except ValueError:  # e.g. the scaled clip would overflow int64
        continue
      by_bits.append((bits, min(wider.max_clients(), others)))
    return secure_sum.RingCapacity(
        capacity=min(mechanism.max_clients(), others), owner=self._name,
        sized_for=(f'expected_clients_per_round='
                   f'{request.expected_clients_per_round}, bits='
                   f'{request.bits}, modclip_prob={request.modclip_prob}'),
        bits=tuple(by_bits))

  def _make(self, spec: secure_sum.ValueSpec, bits: Optional[int] = None,
            encoder=None):
    encoder = encoder or self._encoder.make(spec.dim)
    request = self._request
    if bits is not None:
      request = dataclasses.replace(request, bits=bits)
    granularity = request.granularity
    integer_inputs = (spec.is_integer and self._encoder.is_identity
                      and granularity is not None
                      and float(1.0 / granularity).is_integer())
    mechanism_class = (skellam_mechanism.DistributedSkellam
                       if self._kind is base.Kind.SKELLAM else
                       ddg_mechanism.DistributedDiscreteGaussian)
    return mechanism_class.compute_parameters(
        spec.dim, request, encoder=encoder, integer_inputs=integer_inputs)


class SkellamSumFactory(DiscreteGaussianSumFactory):
  """Sums client values with distributed Skellam noise and SecAgg.

  `DiscreteGaussianSumFactory(mechanism='distributed_skellam')` under its
  own name: the same client (clip, scale, rotate, round, reduce mod 2^bits)
  with symmetric Skellam noise Pois(mu) - Pois(mu) of variance
  (sigma/gamma)^2, drawn by default from a certified alias table
  (noise_sampler='table', per-sample TV distance < 2^-231 added to delta;
  'exact': the exact Poisson sampler) (`tff_ddp.mechanisms.
  distributed_skellam`; Agarwal, Kairouz & Liu 2021, arXiv 2110.04995).
  Each round's `dp_event` is a `DistributedSkellamDpEvent`, accounted with
  the paper's RDP bound against the adversary you name (zero-out
  neighbours). Takes every argument of `DiscreteGaussianSumFactory` except
  `mechanism`.

  Example:
    >>> factory = SkellamSumFactory(
    ...     noise_multiplier=1.0, expected_clients_per_round=100, bits=20,
    ...     l2_clip=1.0)
    >>> process = factory.create(tff.TensorType(np.float32, [1024]))
  """

  def __init__(self, noise_multiplier, expected_clients_per_round, bits,
               l2_clip, *args, mechanism=None, **kwargs):
    if mechanism is not None:
      raise TypeError('SkellamSumFactory takes no mechanism= (its noise is '
                      'the Skellam\'s; DiscreteGaussianSumFactory takes '
                      'mechanism=).')
    super().__init__(noise_multiplier, expected_clients_per_round, bits,
                     l2_clip, *args, mechanism=base.Kind.SKELLAM,
                     **kwargs)
