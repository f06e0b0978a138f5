"""`DiscreteGaussianSumFactory`: distributed discrete Gaussian sum for TFF.

A thin, argument-validating wrapper: the math is the mechanism
`tff_ddp.mechanisms.distributed_discrete_gaussian` (Algorithms 1-2 of
Kairouz, Liu & Steinke 2021), the TFF placement is
`tff_ddp.aggregators.secure_sum` (client encode, one
`federated_secure_modular_sum`, server decode).

Two ways in, one per kind of caller:

* `DiscreteGaussianSumFactory(request, encoder=..., adaptive_clipping=...,
  **options)`: the mechanism's `Request` (clip, noise multiplier, clients,
  bits, ring and rounding knobs, noise sampler), the encoder by name, an
  optional `AdaptiveClipping`, and the round's options
  (`secure_sum.ROUND_OPTIONS`) with the encoder's (`registry.
  KASHIN_OPTIONS`).
* `DiscreteGaussianSumFactory.from_tff_arguments(...)`: the keywords of
  TFF's internal `tff.aggregators.distributed_dp.DistributedDpSumFactory`
  (`noise_multiplier`, `expected_clients_per_round`, `bits`, `l2_clip`,
  `modclip_prob`, `beta`, `mechanism`, `rotation_type`, `auto_l2_*`), mapped
  once onto the constructor, so switching is a one-line change, e.g. in
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
# The noise and ring of a factory (shared by the DDG and the Skellam).
Request = ddg_mechanism.Request
_NAME = 'DiscreteGaussianSumFactory'
# TFF's DistributedDpSumFactory keywords and what they mean here.
TFF_MECHANISMS = {
    'distributed_dgauss': base.Kind.DISCRETE_GAUSSIAN,
    'distributed_skellam': base.Kind.SKELLAM
}
TFF_NAMES = {kind: keyword for keyword, kind in TFF_MECHANISMS.items()}
_TFF_ROTATIONS = {'hd': 'hadamard', 'dft': 'dft'}
# TFF's adaptive-clipping keywords and their defaults (TFF's).
TFF_ADAPTIVE_KEYWORDS = {
    'auto_l2_clip': False,
    'auto_l2_target_quantile': 0.5,
    'auto_l2_lr': 0.2,
    'auto_l2_clip_count_stddev': None
}
# TFF's keywords that only `from_tff_arguments` takes.
_TFF_ONLY_KEYWORDS = frozenset(TFF_ADAPTIVE_KEYWORDS) | {'rotation_type'}


def tff_encoder(rotation_type: str) -> str:
  """The encoder TFF's `rotation_type` names: 'hd' -> 'hadamard', 'dft' ->
  'dft' (TypeError / ValueError otherwise)."""
  return _TFF_ROTATIONS[checks.choice(rotation_type, 'rotation_type',
                                      tuple(_TFF_ROTATIONS))]


def tff_adaptive_clipping(
    auto_l2_clip, auto_l2_target_quantile, auto_l2_lr,
    auto_l2_clip_count_stddev) -> Optional[adaptive_clip.AdaptiveClipping]:
  """The `AdaptiveClipping` of TFF's auto_l2_* keywords (None unless
  auto_l2_clip), each checked under its TFF name whether auto_l2_clip is
  set or not, as TFF does."""
  checks.real(auto_l2_target_quantile, 'auto_l2_target_quantile', 0.0, 1.0)
  checks.positive(auto_l2_lr, 'auto_l2_lr')
  if auto_l2_clip_count_stddev is not None:
    checks.nonnegative(auto_l2_clip_count_stddev, 'auto_l2_clip_count_stddev')
  if not checks.boolean(auto_l2_clip, 'auto_l2_clip'):
    return None
  return _TffAdaptiveClipping(auto_l2_target_quantile, auto_l2_lr,
                              auto_l2_clip_count_stddev)


@dataclasses.dataclass(frozen=True, repr=False)
class _TffAdaptiveClipping(adaptive_clip.AdaptiveClipping):
  """An `AdaptiveClipping` built from TFF's keywords: its messages name
  auto_l2_clip_count_stddev."""

  def __repr__(self):
    fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    return repr(adaptive_clip.AdaptiveClipping(**fields))


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

  Errors: argument types and ranges are checked at construction (TypeError /
  ValueError, before any noise is drawn); what depends on the dimension (the
  noise scale, int64 overflow) is checked at `create(value_type)` /
  `dp_event(value_type)`.

  Example (TFF's keywords; `tff_ddp.aggregators.Request` and the
  constructor for everything else):
    >>> factory = DiscreteGaussianSumFactory.from_tff_arguments(
    ...     noise_multiplier=1.0, expected_clients_per_round=100, bits=16,
    ...     l2_clip=1.0)
    >>> process = factory.create(tff.TensorType(np.float32, [1024]))
    >>> kashin = DiscreteGaussianSumFactory(
    ...     Request(l2_clip=1.0, noise_multiplier=1.0,
    ...             expected_clients_per_round=100, bits=16),
    ...     encoder='kashin', redundancy=1.5)
  """

  # The noise of the class's rounds (`mechanism=` chooses another).
  _KIND = base.Kind.DISCRETE_GAUSSIAN

  def __init__(
      self,
      request: ddg_mechanism.Request,
      encoder: str = 'hadamard',
      adaptive_clipping: Optional[adaptive_clip.AdaptiveClipping] = None,
      *,
      mechanism=None,
      **options,
  ):
    """Validates and stores the configuration (dimension-free checks).

    Args:
      request: a `Request` (`tff_ddp.mechanisms.distributed_discrete_gaussian.
        Request`, also `tff_ddp.aggregators.Request`), validated when built:
        l2_clip (> 0, the clip of a client's whole flattened value; with
        adaptive clipping the initial clip), noise_multiplier (central noise
        stddev / l2_clip, >= 0; 0: no noise, the rounds are then not
        private), expected_clients_per_round (>= 1, the clients whose noise
        shares form the central noise), bits (the secure sum modulus is
        2^bits, 1 <= bits <= 30), modclip_prob (target probability of a sum
        coordinate wrapping around; 1e-4 as in TFF), beta (conditional
        rounding bias in [0, 1); 0 as in TFF, exp(-1/2) is the paper's
        choice), granularity (gamma instead of the Section 6 heuristic; the
        ring is then checked against the worst-case sum; with encoder
        'none', an integer value type and an integer 1/gamma no rounding
        happens and the sensitivity is not inflated), linf_clip (also clip
        each input coordinate; the ring check then uses it) and
        noise_sampler ('table', the default: an alias-table sampler,
        per-sample TV distance < 2^-231 carried by the event and added to
        delta by the accountant, the exact sampler above its range; or
        'exact').
      encoder: 'hadamard' (randomized Walsh-Hadamard with zero padding to a
        power of two), 'dft' (`tff_ddp.encoders.dft`, padding to an even
        length), 'kashin' (Kashin's representation over a randomized
        Hadamard frame of dimension D > d; `l2_clip` then also bounds the
        representation's norm, and the privacy event is over D
        coordinates), or 'none' (no transform: for inputs whose coordinates
        are bounded already, with `linf_clip`).
      adaptive_clipping: an `AdaptiveClipping` (target quantile, learning
        rate, count stddev, zeroing), private and accounted
        (`tff_ddp.aggregators.adaptive_clip`): request.l2_clip is the
        initial clip; the geometric update of Andrew et al. (2021,
        arXiv:1905.03871) moves it towards the target quantile of the
        clients' norms from their indicators, summed with discrete Gaussian
        noise in the same secure sum; their event is composed into the
        round's. As in TFF, the value's noise multiplier is raised so that
        value and count together have request.noise_multiplier. Not with
        granularity, linf_clip or client_sampling_rate. None: a fixed clip.
      mechanism: the noise, a `base.Kind` (or TFF's name,
        'distributed_dgauss' / 'distributed_skellam'); None: the class's
        (the discrete Gaussian here, the Skellam for `SkellamSumFactory`).
      **options: the round's (`secure_sum.ROUND_OPTIONS`:
        client_sampling_rate, count_noise_multiplier, debug_measurements,
        entropy, seed, on_wrap; see `tff_ddp.aggregators.secure_sum`;
        on_wrap='raise', the default, refuses a round with more clients in
        the secure sum than the ring holds, `capacity(value_type)`) and,
        with encoder='kashin', `KashinEncoder`'s (redundancy, eta, delta,
        iterations, frame). Anything else is a TypeError.
    """
    if not isinstance(request, ddg_mechanism.Request):
      raise TypeError(
          'request must be a tff_ddp.aggregators.Request(l2_clip=..., '
          'noise_multiplier=..., expected_clients_per_round=..., bits=...), '
          f'got {request!r}; for TFF\'s keywords use '
          f'{type(self).__name__}.from_tff_arguments(...).')
    tff_keywords = sorted(set(options) & _TFF_ONLY_KEYWORDS)
    if tff_keywords:
      raise TypeError(
          f'unexpected keyword argument(s) {tff_keywords}: TFF\'s keywords '
          f'go through {type(self).__name__}.from_tff_arguments(...); the '
          'constructor takes encoder= and adaptive_clipping=.')
    self._kind = (self._KIND if mechanism is None else base.as_kind(
        mechanism, TFF_MECHANISMS))
    round_options, kashin_options = secure_sum.split_round_options(options)
    self._encoder = registry.encoder_spec(encoder, kashin_options)
    adaptive, value_z = self._adaptive_clip(adaptive_clipping, request)
    self._describe = dict(dataclasses.asdict(request),
                          encoder=encoder,
                          **kashin_options)
    if request.noise_sampler is ddg_mechanism.DEFAULT_SAMPLER:
      del self._describe['noise_sampler']
    else:
      self._describe['noise_sampler'] = request.noise_sampler.value
    if request.l0_clip is None:
      del self._describe['l0_clip']
    if self._kind is not base.Kind.DISCRETE_GAUSSIAN:
      self._describe['mechanism'] = TFF_NAMES[self._kind]
    if adaptive is not None:
      self._describe.update(adaptive_clipping=adaptive_clipping,
                            value_noise_multiplier=value_z)
      # The mechanism's request: unit clip (the clip lives in the state),
      # the value's share of the noise.
      request = dataclasses.replace(request,
                                    l2_clip=1.0,
                                    noise_multiplier=value_z)
    elif request.noise_multiplier == 0:
      # (With adaptive clipping, adaptive_clip.configure says it.)
      warnings.warn(
          f'{self._OWNER or type(self).__name__}(noise_multiplier=0) adds '
          'no noise: the sums are released exact and the rounds are NOT '
          'differentially private (their dp_event is NonPrivateDpEvent, '
          'infinite epsilon). Use noise_multiplier > 0 for privacy.')
    # Each value type's mechanism is derived from it (`_make`).
    self._request = request
    super().__init__(self._make,
                     name=type(self).__name__,
                     adaptive_clip=adaptive,
                     **round_options)

  @classmethod
  def from_tff_arguments(cls,
                         noise_multiplier: float,
                         expected_clients_per_round: int,
                         bits: int,
                         l2_clip: float,
                         modclip_prob: float = 1e-4,
                         beta: float = 0.0,
                         mechanism: Optional[str] = None,
                         rotation_type: str = 'hd',
                         **options):
    """The factory of TFF's `DistributedDpSumFactory` keywords.

    `tff.aggregators.DistributedDpSumFactory(...)` ->
    `DiscreteGaussianSumFactory.from_tff_arguments(...)` with the same
    keywords; each is mapped here once onto the constructor. TFF's
    signature, the library's one drop-in: its first eight parameters are
    named here, its four `auto_l2_*` keywords come through `**options` by
    name (`TFF_ADAPTIVE_KEYWORDS`, TFF's defaults).

    Args:
      noise_multiplier, expected_clients_per_round, bits, l2_clip,
        modclip_prob, beta: the `Request`'s (the defaults are TFF's).
      mechanism: 'distributed_dgauss' or 'distributed_skellam' (exact
        Skellam noise, `tff_ddp.mechanisms.distributed_skellam`); None (the
        default): the class's own, the discrete Gaussian for this class
        (TFF defaults to 'distributed_skellam': pass it to get TFF's noise)
        and the Skellam for `SkellamSumFactory`.
      rotation_type: 'hd' (the default here: encoder 'hadamard') or 'dft'
        (encoder 'dft', TFF's default).
      **options: TFF's adaptive clipping, auto_l2_clip (default False),
        auto_l2_target_quantile (0.5), auto_l2_lr (0.2) and
        auto_l2_clip_count_stddev (None: 0.05 * expected_clients_per_round;
        0: exact, the rounds are then not private), mapped onto an
        `AdaptiveClipping` (each checked under its name whether
        auto_l2_clip is set or not, as TFF does); and the round's options
        (`secure_sum.ROUND_OPTIONS`). Anything else is a TypeError.

    Returns:
      An instance of `cls`.
    """
    tff_adaptive = {
        k: options.pop(k, default)
        for k, default in TFF_ADAPTIVE_KEYWORDS.items()
    }
    unknown = sorted(set(options) - set(secure_sum.ROUND_OPTIONS))
    if unknown:
      raise TypeError(
          f'{cls.__name__}.from_tff_arguments: unexpected keyword '
          f'argument(s) {unknown}; it takes TFF\'s DistributedDpSumFactory '
          f'keywords and the round\'s {secure_sum.ROUND_OPTIONS} (for '
          'encoder, granularity, linf_clip, noise_sampler or Kashin options '
          f'use {cls.__name__}(Request(...), ...)).')
    encoder = tff_encoder(rotation_type)
    clipping = tff_adaptive_clipping(**tff_adaptive)
    if mechanism is not None:
      options['mechanism'] = mechanism
    request = ddg_mechanism.Request(
        l2_clip=l2_clip,
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=expected_clients_per_round,
        bits=bits,
        modclip_prob=modclip_prob,
        beta=beta)
    return cls(request, encoder, clipping, **options)

  # What adaptive clipping's messages call the factory (None: its class
  # name) and its parameter for the clip count's noise (None: none in its
  # signature), for an `AdaptiveClipping` from TFF's keywords and for one
  # handed as an object; `tff_ddp.learning.ddp_secure_aggregator` overrides
  # them.
  _OWNER: Optional[str] = None
  _COUNT_STDDEV_PARAMETER: Optional[str] = 'auto_l2_clip_count_stddev'
  _object_count_stddev_parameter: Optional[str] = (
      'adaptive_clipping.count_stddev')

  def _adaptive_clip(self, clipping, request):
    """(the AdaptiveClip the rounds run, the value's noise multiplier)
    (`tff_ddp.aggregators.adaptive_clip`); (None, None) without one."""
    if clipping is None:
      return None, None
    if not isinstance(clipping, adaptive_clip.AdaptiveClipping):
      raise TypeError('adaptive_clipping must be an adaptive_clip.'
                      f'AdaptiveClipping or None, got {clipping!r}.')
    for name in ('granularity', 'linf_clip'):
      value = getattr(request, name)
      if value is not None:
        raise ValueError(
            f'{name}={value} is in absolute units and cannot follow an '
            'adaptive clip: give adaptive clipping (auto_l2_clip=True or '
            'adaptive_clipping) or ' + name + ', not both.')
    parameter = (self._COUNT_STDDEV_PARAMETER if isinstance(
        clipping, _TffAdaptiveClipping) else
                 self._object_count_stddev_parameter)
    return clipping.resolve(request.l2_clip, request.noise_multiplier,
                            request.expected_clients_per_round, self._OWNER or
                            type(self).__name__, parameter)

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
        capacity=min(mechanism.max_clients(), others),
        owner=self._name,
        sized_for=(f'expected_clients_per_round='
                   f'{request.expected_clients_per_round}, bits='
                   f'{request.bits}, modclip_prob={request.modclip_prob}'),
        bits=tuple(by_bits))

  def _make(self,
            spec: secure_sum.ValueSpec,
            bits: Optional[int] = None,
            encoder=None):
    encoder = encoder or self._encoder.make(spec.dim)
    request = self._request
    if bits is not None:
      request = dataclasses.replace(request, bits=bits)
    granularity = request.granularity
    integer_inputs = (spec.is_integer and self._encoder.is_identity and
                      granularity is not None and
                      float(1.0 / granularity).is_integer())
    mechanism_class = (skellam_mechanism.DistributedSkellam
                       if self._kind is base.Kind.SKELLAM else
                       ddg_mechanism.DistributedDiscreteGaussian)
    return mechanism_class.compute_parameters(spec.dim,
                                              request,
                                              encoder=encoder,
                                              integer_inputs=integer_inputs)


class SkellamSumFactory(DiscreteGaussianSumFactory):
  """Sums client values with distributed Skellam noise and SecAgg.

  `DiscreteGaussianSumFactory` with `mechanism='distributed_skellam'`
  under its own name: the same client (clip, scale, rotate, round, reduce mod
  2^bits) with symmetric Skellam noise Pois(mu) - Pois(mu) of variance
  (sigma/gamma)^2, drawn by default from a certified alias table
  (noise_sampler='table', per-sample TV distance < 2^-231 added to delta;
  'exact': the exact Poisson sampler) (`tff_ddp.mechanisms.
  distributed_skellam`; Agarwal, Kairouz & Liu 2021, arXiv 2110.04995).
  Each round's `dp_event` is a `DistributedSkellamDpEvent`, accounted with
  the paper's RDP bound against the adversary you name (zero-out
  neighbours). Takes the arguments of `DiscreteGaussianSumFactory` and its
  `from_tff_arguments` except `mechanism`.

  Example:
    >>> factory = SkellamSumFactory.from_tff_arguments(
    ...     noise_multiplier=1.0, expected_clients_per_round=100, bits=20,
    ...     l2_clip=1.0)
    >>> process = factory.create(tff.TensorType(np.float32, [1024]))
  """

  _KIND = base.Kind.SKELLAM

  def __init__(self,
               request,
               encoder='hadamard',
               adaptive_clipping=None,
               *,
               mechanism=None,
               **options):
    if mechanism is not None:
      raise TypeError('SkellamSumFactory takes no mechanism= (its noise is '
                      'the Skellam\'s; DiscreteGaussianSumFactory takes '
                      'mechanism=).')
    super().__init__(request, encoder, adaptive_clipping, **options)
