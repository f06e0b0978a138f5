"""The one TFF factory skeleton: any mechanism -> one secure-sum process.

`MechanismSumFactory(make_mechanism, ...)` turns a `tff_ddp.mechanisms.base.
Mechanism` into an `AggregationProcess` with one flat layer (TFF's own
distributed-DP factory nests about eight, which breaks protobuf's nesting
limit inside `build_unweighted_fed_avg`): state (round, public seed); each
client encodes with the round's public seed and a private noise seed; one
`federated_secure_modular_sum`; the server decodes. `round_seed(state)` is
the round's public seed; `RingCapacity` and `on_wrap` say what happens when
more clients join than the ring holds.

The round's data flow, what it releases and why, noise seeds, capacity:
docs/notes/secure_sum.md.
"""

import collections
import dataclasses
import enum
import fractions
import math
import warnings
from typing import Any, Callable, Optional, Sequence, Tuple

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import event_io
from tff_ddp.accounting import events
from tff_ddp.aggregators import adaptive_clip as adaptive_lib
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
from tff_ddp.utils import checks
from tff_ddp.utils import entropy as entropy_lib
from tff_ddp.utils import processes
from tff_ddp.utils import rounds

# TFF's workers end with the interpreter (see processes.drop_tff_contexts).
processes.register_tff_cleanup()

# Modulus of the public participant count (and of debug counts).
COUNT_MODULUS = base.MAX_MODULUS
# Bernoulli coins of self-sampling: [W < threshold], W uniform on [0, 2^62).
_COIN_BITS = 62
# The measurement of a mechanism's 1/gamma (real domain per integer unit).
_SCALE_FACTOR = 'scale_factor'


class OnWrap(enum.StrEnum):
  """What a round with more clients than its ring holds does
  (docs/notes/secure_sum.md, "Capacity"): RAISE refuses it, FLAG returns it
  with sum_may_wrap=True."""

  RAISE = 'raise'
  FLAG = 'flag'


def check_on_wrap(on_wrap) -> OnWrap:
  """`on_wrap` ('raise', 'flag' or an OnWrap) as an OnWrap."""
  return checks.member(on_wrap, 'on_wrap', OnWrap)


# `MechanismSumFactory`'s keywords of the round (the factories' docstrings).
ROUND_OPTIONS = ('client_sampling_rate', 'count_noise_multiplier',
                 'debug_measurements', 'entropy', 'seed', 'on_wrap')


def split_round_options(options):
  """(the round's keywords, the others) of a factory's keywords: the
  others are its encoder's options (`registry.KASHIN_OPTIONS`); anything
  else is a TypeError naming both lists."""
  unknown = sorted(
      set(options) - set(ROUND_OPTIONS) - set(registry.KASHIN_OPTIONS))
  if unknown:
    raise TypeError(f'unexpected keyword argument(s) {unknown}; the round '
                    f'takes {ROUND_OPTIONS} and the encoder '
                    f'{registry.KASHIN_OPTIONS} (for encoder=\'kashin\').')
  return ({
      k: v for k, v in options.items() if k in ROUND_OPTIONS
  }, {
      k: v for k, v in options.items() if k not in ROUND_OPTIONS
  })


@dataclasses.dataclass(frozen=True)
class RingCapacity:
  """How many clients a round's secure sums hold, and what to change.

  The one home of the refusal of a round whose count exceeds its ring, for
  the factories, the analytics processes and the simulators that mirror
  them (Python: `check`; inside a TFF computation: `assertion`).

  Attributes:
    capacity: the most clients in the secure sum(s) that cannot wrap
      (the smallest `max_clients()` of the round's mechanisms).
    owner: the entry point the user called, named in the message.
    sized_for: the arguments that sized the ring, as text.
    knob: the owner's argument that, set to >= n, makes room for n clients.
    bits: (bits, capacity at those bits with every other argument
      unchanged), for owners whose `bits` sizes the ring; () otherwise.
  """

  capacity: int
  owner: str
  sized_for: str
  knob: str = 'expected_clients_per_round'
  bits: Tuple[Tuple[int, int], ...] = ()

  def may_wrap(self, num_clients):
    """num_clients > capacity (numbers or int64 tensors)."""
    return num_clients > self.capacity

  def _pieces(self, n_text, bits_pieces) -> Sequence:
    return [
        f'{self.owner}: ', n_text, ' clients are in this round\'s secure '
        f'sum, more than the {self.capacity} its ring holds '
        f'({self.sized_for}); the sum may have wrapped around, so its result '
        f'would be wrong and is not returned. Use {self.knob} >= ', n_text,
        *bits_pieces,
        ", or on_wrap='flag' to get the result flagged (sum_may_wrap). The "
        'server has run this secure sum: against adversary=\'server\' '
        'account the round\'s event with num_clients=', n_text, '.'
    ]

  def _bits_found(self, bits_text):
    return [', or bits >= ', bits_text]

  def _bits_missing(self, n_text):
    return [
        f' (no bits <= {base.MAX_RING_BITS} holds ', n_text,
        ' clients with the other arguments unchanged)'
    ]

  def message(self, num_clients: int) -> str:
    """The refusal's text for a round of `num_clients` (Python)."""
    n_text = str(int(num_clients))
    bits_pieces = []
    if self.bits:
      need = next((b for b, cap in self.bits if cap >= num_clients), None)
      bits_pieces = (self._bits_missing(n_text)
                     if need is None else self._bits_found(str(need)))
    return ''.join(self._pieces(n_text, bits_pieces))

  def check(self, num_clients: int) -> None:
    """Raises RoundRefusedError if `num_clients` exceeds the capacity."""
    if self.may_wrap(num_clients):
      raise rounds.RoundRefusedError(self.message(num_clients))

  def message_tensor(self, num_clients) -> tf.Tensor:
    """`message` inside a TF computation (num_clients an int64 tensor)."""
    n = tf.cast(num_clients, tf.int64)
    n_text = tf.strings.as_string(n)
    bits_pieces = []
    if self.bits:
      fits = tf.constant([cap for _, cap in self.bits], tf.int64) >= n
      need = tf.gather(tf.constant([b for b, _ in self.bits], tf.int64),
                       tf.argmax(tf.cast(fits, tf.int32)))
      bits_pieces = [
          tf.where(
              tf.reduce_any(fits),
              tf.strings.join(self._bits_found(tf.strings.as_string(need))),
              tf.strings.join(self._bits_missing(n_text)))
      ]
    return tf.strings.join(self._pieces(n_text, bits_pieces))

  def assertion(self, num_clients):
    """A TF op failing the computation with `message` if the count exceeds
    the capacity (make the outputs depend on it)."""
    n = tf.cast(num_clients, tf.int64)
    return rounds.refusal_check(tf.logical_not(self.may_wrap(n)),
                                self.message_tensor(n))


class ValueSpec:
  """A value type's flattened layout: specs, sizes, dimension, integer-ness."""

  def __init__(self, value_type, owner: str):
    try:
      value_type = tff.types.to_type(value_type)
    except (TypeError, ValueError) as e:
      raise TypeError(f'{owner}: value_type must be a TFF type or convertible '
                      f'to one, got {value_type!r} ({e}).') from e
    if not tff.types.is_structure_of_tensors(value_type):
      raise TypeError(
          f'{owner}: Expected `value_type` to be a tensor or a (nested) '
          f'structure of tensors; got {value_type}.')
    leaves = ([value_type] if isinstance(value_type, tff.TensorType) else
              [t for _, t in _iter_leaves(value_type)])
    for leaf in leaves:
      dtype = np.dtype(leaf.dtype)
      if not (np.issubdtype(dtype, np.floating) or
              np.issubdtype(dtype, np.integer)) or dtype == np.bool_:
        raise TypeError(f'{owner}: the tensors of value_type must all be '
                        f'integers or floats; it has {leaf} in {value_type}.')
      if leaf.shape is None or any(d is None for d in leaf.shape):
        raise TypeError(f'{owner} needs fully defined shapes: value_type '
                        f'has {leaf} in {value_type}.')
    self.value_type = value_type
    self.leaves = leaves
    # Python integers: a numpy int64 product wraps (2^63 elements read as
    # none) or refuses to convert (2^64).
    self.sizes = [math.prod(int(d) for d in leaf.shape) for leaf in leaves]
    self.dim = int(sum(self.sizes))
    if self.dim < 1:
      raise TypeError(f'{owner}: value_type has no elements: {value_type}.')
    self.is_integer = all(
        np.issubdtype(np.dtype(leaf.dtype), np.integer) for leaf in leaves)

  def flatten(self, value) -> tf.Tensor:
    """float64 [dim] of a client value (tensor, nested structure, Struct)."""
    if isinstance(value, tff.structure.Struct):
      parts = tff.structure.flatten(value)
    else:
      parts = tf.nest.flatten(value)
    return tf.concat([tf.reshape(tf.cast(t, tf.float64), [-1]) for t in parts],
                     axis=0)

  def unflatten(self, flat: tf.Tensor):
    """The value type's structure and dtypes from a float64 [dim]."""
    parts = tf.split(flat, self.sizes)
    tensors = []
    for part, leaf in zip(parts, self.leaves):
      dtype = tf.as_dtype(leaf.dtype)
      if dtype.is_integer:
        part = tf.clip_by_value(tf.round(part), dtype.min, dtype.max)
      tensors.append(tf.cast(tf.reshape(part, list(leaf.shape)), dtype))
    if isinstance(self.value_type, tff.TensorType):
      return tensors[0]
    return _pack(self.value_type, iter(tensors))


def _iter_leaves(struct_type):
  for name, element in tff.structure.iter_elements(struct_type):
    if isinstance(element, tff.StructType):
      yield from _iter_leaves(element)
    else:
      yield name, element


def _pack(struct_type, leaves):
  """Nested python containers (OrderedDict / list) matching struct_type."""
  elements = []
  named = True
  for name, element in tff.structure.iter_elements(struct_type):
    named = named and name is not None
    value = (_pack(element, leaves)
             if isinstance(element, tff.StructType) else next(leaves))
    elements.append((name, value))
  if named:
    return collections.OrderedDict(elements)
  return [v for _, v in elements]


def _constant(value) -> tf.Tensor:
  """A measurement constant: Python floats as float64, numpy keeps dtype."""
  if isinstance(value, (bool, np.bool_)):
    return tf.constant(bool(value))
  if isinstance(value, float):
    return tf.constant(value, tf.float64)
  if isinstance(value, int):
    return tf.constant(value, tf.int64)
  return tf.constant(value)


def coin_threshold(rate: float) -> int:
  """floor(q 2^62): the coin keeps a value iff a uniform W < threshold.

  The coins' exact probability is threshold / 2^62 <= q (equal to q for
  q >= 2^-9, where q 2^62 is an integer); `effective_rate` is that number.
  """
  return math.floor(fractions.Fraction(rate) * (1 << _COIN_BITS))


def coins(rate: float, shape, seed) -> tf.Tensor:
  """Private coins of `shape`: True with probability `effective_rate(rate)`.

  Each coin is a uniform 62-bit word W (a stateless int64 draw from `seed`,
  masked) compared with `coin_threshold(rate)`.
  """
  word = tf.bitwise.bitwise_and(
      tf.random.stateless_uniform(shape,
                                  seed=seed,
                                  dtype=tf.int64,
                                  minval=None,
                                  maxval=None), (1 << _COIN_BITS) - 1)
  return word < coin_threshold(rate)


def effective_rate(rate: float) -> float:
  """The exact keep probability of the coins (a float64, no rounding)."""
  return coin_threshold(rate) / float(1 << _COIN_BITS)


def round_seed(state) -> tf.Tensor:
  """The public seed of the round an aggregator with `state` runs next.

  fold_in(public_seed, round): the same at clients and server, new each
  round, and a function of the (public) state only. A process that composes
  an aggregator can compute it before calling `next` -- e.g. to give its
  clients the encoder (Kashin frame) that round will use (TFFE's first
  phase needs the norm of the representation its second phase clips).

  Args:
    state: the aggregator's state (a mapping with `round` and
      `public_seed`), as tensors.

  Returns:
    shape-[2] int64 tensor.
  """
  return tf.random.experimental.stateless_fold_in(
      tf.cast(state['public_seed'], tf.int64), tf.cast(state['round'],
                                                       tf.int64))


def count_mechanism(flag_names, noise_multiplier, expected_clients):
  """The DDG mechanism that noises the per-client 0/1 flags.

  Flags are integers with l2 norm <= sqrt(k) (k flags), summed with integer
  scaling c (granularity 1/c, identity encoder, integer inputs: no rounding
  inflation). c is the smallest integer with a scaled local noise >= 1, so
  the tau term of the DDG analysis is negligible; 30 bits.
  """
  k = len(flag_names)
  sigma = ddg_mechanism.local_stddev(noise_multiplier, math.sqrt(k),
                                     expected_clients)
  # sigma = z sqrt(k / n); the integer scaling ceil(1/sigma) must fit the
  # count's ring (and not overflow: a denormal z gives 1/sigma = inf).
  smallest = 1.0 / (2.0**base.MAX_RING_BITS * math.sqrt(k / expected_clients))
  if not sigma * 2.0**base.MAX_RING_BITS > 1.0:
    raise ValueError(
        f'count_noise_multiplier={noise_multiplier} is too small: the '
        f'counts\' integer scaling 1/sigma would exceed the '
        f'{base.MAX_RING_BITS}-bit ring. Use count_noise_multiplier >= '
        f'{smallest:.3g} (or none).')
  largest = ddg_mechanism.DistributedDiscreteGaussian.noise_range[2]
  if not sigma <= largest:
    # The scaling is 1 there and the scaled noise sigma itself: beyond the
    # exact sampler's range (the DDG would blame its bits, which the user
    # of the counts never set).
    raise ValueError(
        f'count_noise_multiplier={noise_multiplier} is too large: each '
        f'client\'s count noise stddev {sigma:.4g} exceeds the discrete '
        f'Gaussian sampler\'s range {largest:.4g}. Use count_noise_multiplier'
        f' <= {largest / math.sqrt(k / expected_clients):.4g}.')
  scaling = max(1, math.ceil(1.0 / sigma))
  return ddg_mechanism.compute_parameters(
      k,
      ddg_mechanism.Request(l2_clip=math.sqrt(k),
                            noise_multiplier=noise_multiplier,
                            expected_clients_per_round=expected_clients,
                            bits=base.MAX_RING_BITS,
                            beta=0.0,
                            granularity=1.0 / scaling,
                            linf_clip=1.0),
      encoder=registry.Identity(k),
      integer_inputs=True)


class MechanismSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Sums client values with a distributed-DP mechanism and one secure sum.

  Subclassed by `DiscreteGaussianSumFactory` and `PoissonBinomialSumFactory`
  (which validate their own arguments); usable directly with any mechanism:

    factory = MechanismSumFactory(
        lambda spec: my_mechanism.compute_parameters(spec.dim, request))
  """

  def __init__(
      self,
      make_mechanism: Callable[[ValueSpec], base.Mechanism],
      *,
      client_sampling_rate: Optional[float] = None,
      count_noise_multiplier: Optional[float] = None,
      debug_measurements: bool = False,
      entropy: Optional[entropy_lib.EntropyFn] = None,
      seed: Optional[int] = None,
      name: str = 'MechanismSumFactory',
      adaptive_clip: Optional[adaptive_lib.AdaptiveClip] = None,
      on_wrap: str = OnWrap.RAISE,
  ):
    """Stores the configuration (the round: docs/notes/secure_sum.md).

    Args:
      make_mechanism: ValueSpec -> Mechanism (validates at `create`).
      client_sampling_rate: q in (0, 1]: every client takes part, each keeps
        its value with probability q (private coin), zeros otherwise; the
        round's event is `SelfSampledDpEvent(q, ...)`. None: all values.
      count_noise_multiplier: release the mechanism's flags noised with this
        noise multiplier (DDG), accounted. None: withhold them.
      debug_measurements: release exact flag counts; the round is then NOT
        private (its event is NonPrivateDpEvent). For debugging only.
      entropy: a callable returning a shape-[2] int64 tensor of device
        entropy for the noise seeds (production runtimes); default: kernel
        entropy (`tff_ddp.utils.entropy.os_entropy_seed`).
      seed: tests only: noise from (seed, round, a fingerprint of the
        client's input), so equal inputs get equal noise
        (docs/notes/secure_sum.md, "Noise seeds").
      name: for messages.
      adaptive_clip: private adaptive clipping
        (`tff_ddp.aggregators.adaptive_clip`): `make_mechanism` then builds
        the mechanism for l2_clip = 1, the clip lives in the state, and the
        round's event includes the clip indicators'. None: a fixed clip.
      on_wrap: a round with more clients in the secure sum than its ring
        holds (`capacity`): 'raise' (the default) refuses it with
        `RoundRefusedError` from inside the server computation, the state
        untouched; 'flag' returns the result with `sum_may_wrap=True`
        (docs/notes/secure_sum.md, "Capacity").
    """
    if not callable(make_mechanism):
      raise TypeError(f'make_mechanism must be callable, got '
                      f'{make_mechanism!r}.')
    self._name = str(name)
    self._on_wrap = check_on_wrap(on_wrap)
    self._make_mechanism = make_mechanism
    self._mechanisms = {}  # value type -> its mechanism (see `mechanism`)
    self._rate = (None if client_sampling_rate is None else checks.probability(
        client_sampling_rate, 'client_sampling_rate'))
    if self._rate is not None and coin_threshold(self._rate) == 0:
      raise ValueError(
          f'client_sampling_rate={client_sampling_rate} is below 2^-62, the '
          'resolution of the clients\' coins.')
    self._count_z = (None
                     if count_noise_multiplier is None else checks.positive(
                         count_noise_multiplier, 'count_noise_multiplier'))
    self._debug = checks.boolean(debug_measurements, 'debug_measurements')
    if self._debug and self._count_z is not None:
      raise ValueError('debug_measurements=True releases exact counts; '
                       'count_noise_multiplier would be pointless. Use one.')
    self._entropy = entropy_lib.check_entropy(entropy)
    self._seed = checks.seed(seed)
    if adaptive_clip is not None and not isinstance(adaptive_clip,
                                                    adaptive_lib.AdaptiveClip):
      raise TypeError(f'adaptive_clip must be an adaptive_clip.AdaptiveClip '
                      f'or None, got {adaptive_clip!r}.')
    if adaptive_clip is not None and self._rate is not None:
      raise ValueError(
          'adaptive clipping (auto_l2_clip=True) with client_sampling_rate is '
          'not implemented: an unsampled client would have to send the null '
          'indicator, and the fraction below the clip would need the hidden '
          'number of sampled clients. Use one of them.')
    self._adaptive = adaptive_clip
    if self._seed is not None:
      warnings.warn(
          f'{self._name}(seed=...) makes client noise a function of the seed '
          'and the client input: for tests only, never deploy.')
    if self._debug:
      warnings.warn(
          f'{self._name}(debug_measurements=True) releases exact per-client '
          'counts: the rounds are NOT differentially private (their '
          'dp_event is NonPrivateDpEvent).')

  # -- What a user inspects before running. --------------------------------

  def value_spec(self, value_type) -> ValueSpec:
    return ValueSpec(value_type, self._name)

  def mechanism(self, value_type) -> base.Mechanism:
    """The mechanism (derived parameters) for `value_type`.

    Built once per value type and reused (mechanisms are frozen; reusing
    one keeps the traced functions its encoder caches, e.g. Kashin's
    eager-call `tf.function`, instead of tracing them again per call).
    A configuration that is refused is refused on every call.
    """
    spec = self.value_spec(value_type)
    if spec.value_type not in self._mechanisms:
      self._mechanisms[spec.value_type] = self._make_mechanism(spec)
    return self._mechanisms[spec.value_type]

  def parameters(self, value_type) -> base.Mechanism:
    """The mechanism with its derived parameters (same as `mechanism`)."""
    return self.mechanism(value_type)

  def encoder(self, value_type):
    """The encoder the mechanism uses for `value_type`."""
    return self.mechanism(value_type).encoder

  def check_value_type(self, value_type) -> base.Mechanism:
    """The mechanism for `value_type`, after the checks `create` makes
    (value type, parameters, moduli, the output dtype's range: those of
    `RoundProtocol`, without tracing); raises otherwise."""
    return self.round_protocol(value_type).mechanism

  @property
  def on_wrap(self) -> OnWrap:
    """RAISE or FLAG: what a round above `capacity` does."""
    return self._on_wrap

  def capacity(self, value_type) -> RingCapacity:
    """The most clients a round on `value_type` holds, and the advice.

    `RingCapacity.capacity` is the smallest `max_clients()` of the
    mechanisms in the round's secure sum (the value's; the noised counts'
    and the clip indicators' when enabled) and of the participant count's
    ring.
    """
    return self.round_protocol(value_type).ring

  def _ring_capacity(self, spec: ValueSpec, mechanism: base.Mechanism,
                     others: int) -> RingCapacity:
    """The RingCapacity of a round (subclasses name their own arguments).

    `others`: the capacity of the rest of the secure sum (participant
    count, noised counts, clip indicators); the round holds
    min(mechanism.max_clients(), others).
    """
    del spec
    return RingCapacity(capacity=min(_max_clients(mechanism, self._name),
                                     others),
                        owner=self._name,
                        sized_for='expected_clients_per_round='
                        f'{mechanism.expected_clients_per_round}')

  def _indicator(self):
    if self._adaptive is None:
      return None
    return adaptive_lib.indicator_mechanism(self._adaptive)

  def _counts(self, mechanism):
    if self._count_z is None:
      return None
    return count_mechanism(mechanism.flag_names, self._count_z,
                           mechanism.expected_clients_per_round)

  def dp_event(self,
               value_type,
               num_clients: Optional[int] = None) -> dp_accounting.DpEvent:
    """The event of one round on `value_type` (planning value).

    `num_clients` clients in the secure sum (default: the expected number;
    0: NoOpDpEvent, an empty round releases nothing). Includes
    self-sampling and noised counts; NonPrivateDpEvent with debug
    measurements. The measurements of each round carry the same event with
    the measured number of clients.
    """
    mechanism = self.mechanism(value_type)
    return self._round_event(mechanism, self._counts(mechanism), num_clients,
                             self._indicator())

  def _round_event(self, mechanism, counts, num_clients, indicator=None):
    if self._debug:
      return dp_accounting.NonPrivateDpEvent()
    if self._adaptive is not None and not self._adaptive.is_private:
      return dp_accounting.NonPrivateDpEvent()
    # The accountant's limit on an event's integers, checked here so that
    # no event is handed out that the accountant would refuse.
    if num_clients is not None and checks.integer(
        num_clients, 'num_clients', 0, events.MAX_EVENT_INTEGER) == 0:
      return dp_accounting.NoOpDpEvent()  # an empty round released nothing
    event = mechanism.dp_event(num_clients)
    if indicator is not None:
      event = dp_accounting.ComposedDpEvent(
          [event, indicator.dp_event(num_clients)])
    if counts is not None:
      event = dp_accounting.ComposedDpEvent(
          [event, counts.dp_event(num_clients)])
    if self._rate is not None:
      event = events.SelfSampledDpEvent(effective_rate(self._rate), event)
    return event

  def __repr__(self):
    options = []
    if self._rate is not None:
      options.append(f'client_sampling_rate={self._rate}')
    if self._count_z is not None:
      options.append(f'count_noise_multiplier={self._count_z}')
    if self._debug:
      options.append('debug_measurements=True')
    if self._on_wrap is not OnWrap.RAISE:
      options.append(f'on_wrap={self._on_wrap.value!r}')
    if self._seed is not None:
      options.append(f'seed={self._seed}')
    return f'{self._name}({", ".join(self._repr_arguments() + options)})'

  def _repr_arguments(self):
    """The constructor's arguments for `repr` (subclasses set _describe)."""
    items = getattr(self, '_describe', {})
    return [f'{k}={v!r}' for k, v in items.items() if v is not None]

  # -- The process. ----------------------------------------------------------

  def round_protocol(self,
                     value_type,
                     count_modulus: int = COUNT_MODULUS) -> 'RoundProtocol':
    """The TF logic of one round on `value_type` (see `RoundProtocol`)."""
    return RoundProtocol(self, value_type, count_modulus)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    """The process; its Python `next` raises `RoundRefusedError` for a
    refused round (`tff_ddp.utils.rounds.user_facing`)."""
    return _build(self.round_protocol(value_type))

  def create_with_client_preprocessing(
      self, value_type, input_type,
      preprocess: Callable[[Any], Any]) -> tff.templates.AggregationProcess:
    """`create(value_type)` whose clients first apply `preprocess`.

    The process's `next` takes CLIENTS values of `input_type`; each client
    computes `preprocess(value)` (a TF function returning `value_type`) and
    encodes it in the same TF call. The same as
    `create(value_type).next(state, federated_map(preprocess, values))`,
    one client call fewer per round: in TFF's executors each client call
    costs ~0.3-0.5 ms whatever it does, which dominates rounds of 10^5
    small clients (the quantile processes use this).
    """
    return _build(self.round_protocol(value_type),
                  _Preprocess(tff.types.to_type(input_type), preprocess))


def _max_clients(mechanism: base.Mechanism, owner: str) -> int:
  """mechanism.max_clients(), or a TypeError saying what to implement."""
  max_clients = getattr(mechanism, 'max_clients', None)
  if not callable(max_clients):
    raise TypeError(
        f'{owner}: the mechanism {getattr(mechanism, "name", mechanism)!r} '
        'has no max_clients(); implement it (the largest number of clients '
        'whose secure sum cannot wrap around its ring, see '
        'tff_ddp.mechanisms.base.Mechanism) so that rounds with more '
        'clients are refused or flagged.')
  capacity = max_clients()
  return checks.integer(capacity, f'{owner}: mechanism.max_clients()', 0)


def check_output_range(mechanism: base.Mechanism, spec: ValueSpec,
                       owner: str) -> None:
  """Refuses a value type whose dtypes cannot hold the mechanism's output.

  The estimate is computed in float64 and returned in the value's dtypes.
  `mechanism.output_range()` gives (clip, bound): every coordinate of the
  estimate is at most `bound` in magnitude. A float leaf needs bound <= its
  largest value (else +-inf) and clip >= its smallest normal number (else
  every client's contribution becomes zero or subnormal dust); an integer
  leaf needs bound <= its largest value (else `ValueSpec.unflatten`
  saturates the sum at the dtype's limits, e.g. an int8 sum stuck at 127),
  and -bound >= its smallest (the noisy sum can be negative: unsigned
  dtypes are refused). Checked before anything runs.
  """
  clip, bound = mechanism.output_range()
  dtypes = sorted({np.dtype(leaf.dtype) for leaf in spec.leaves}, key=str)
  for dtype in dtypes:
    is_float = np.issubdtype(dtype, np.floating)
    info = np.finfo(dtype) if is_float else np.iinfo(dtype)
    largest = float(info.max)
    if not bound <= largest:
      consequence = ('it would come back as +-inf' if is_float else
                     'it would be saturated at the dtype\'s limits')
      raise ValueError(
          f'{owner}: with these parameters the noisy sum of the '
          f'{mechanism.name} mechanism can reach {bound:.3g} per coordinate '
          f'(the decoded secure-sum ring: clip, noise and bits together), '
          f'beyond the largest {dtype} ({largest:.3g}) of value_type: '
          f'{consequence}. Use a smaller l2_clip, noise or ring (bits), or '
          f'{_wider(dtype)} values.')
    if not is_float and not -bound >= float(info.min):
      raise ValueError(
          f'{owner}: the noisy sum of the {mechanism.name} mechanism can be '
          f'negative (down to {-bound:.3g} per coordinate), below the '
          f'smallest {dtype} ({info.min}) of value_type: it would be '
          f'saturated at {info.min}. Use a signed dtype.')
    if is_float and not clip >= float(info.tiny):
      raise ValueError(
          f'{owner}: l2_clip={clip:.3g} is below the smallest normal {dtype} '
          f'({float(info.tiny):.3g}) of value_type: every '
          f'client\'s clipped value would be lost in the sum. Use a larger '
          f'l2_clip or {_wider(dtype)} values.')


def _wider(dtype) -> str:
  if np.issubdtype(dtype, np.integer):
    return 'int64' if dtype != np.int64 else 'float64'
  return 'float64' if dtype != np.float64 else 'rescaled'


class RoundProtocol:
  """The TensorFlow of one round, with no TFF placement in it.

  `MechanismSumFactory.create` places it into an AggregationProcess, and
  `tff_ddp.queries` into a TF Privacy DPQuery; both run exactly this code.

    initial_public_seed()             server, once
    client(value, round_seed)         each client -> int32 per secure key
    server(summed, round_seed)        -> (result, measurements)

  Attributes:
    spec: the value type's layout.
    mechanism: the round's mechanism.
    secure_moduli: OrderedDict key -> power-of-two modulus of the secure sum.
    planning_event: the round's event with the expected number of clients.
  """

  def __init__(self,
               factory: 'MechanismSumFactory',
               value_type,
               count_modulus: int = COUNT_MODULUS):
    # pylint: disable=protected-access  # its factory's settings
    self.spec = factory.value_spec(value_type)
    self.mechanism = factory.mechanism(value_type)
    self._counts = factory._counts(self.mechanism)
    self.adaptive = factory._adaptive
    self._indicator = factory._indicator()
    self._test_seed = factory._seed
    self._entropy_fn = factory._entropy
    self._rate = factory._rate
    self._debug = factory._debug
    self.planning_event = factory._round_event(self.mechanism, self._counts,
                                               None, self._indicator)
    check_output_range(
        self.mechanism if self.adaptive is None else adaptive_lib.ClipRange(
            self.mechanism), self.spec, factory._name)
    # pylint: enable=protected-access
    moduli = collections.OrderedDict(self.mechanism.secure_moduli())
    moduli['counts'] = count_modulus
    if self._counts is not None:
      for key, modulus in self._counts.secure_moduli().items():
        moduli['noised_' + key] = modulus
    if self._indicator is not None:
      moduli[adaptive_lib.KEY] = self._indicator.modulus
    for key, modulus in moduli.items():
      if (modulus < 2 or modulus > base.MAX_MODULUS or modulus & (modulus - 1)):
        raise ValueError(
            f'secure-sum modulus of {key!r} must be a power of two in '
            f'[2, 2^{base.MAX_RING_BITS}], got {modulus}.')
    self.secure_moduli = collections.OrderedDict(
        (key, int(modulus)) for key, modulus in moduli.items())
    others = [count_modulus - 1]
    for extra in (self._counts, self._indicator):
      if extra is not None:
        others.append(extra.max_clients())
    self.on_wrap = factory._on_wrap  # pylint: disable=protected-access  # its factory's settings
    self.ring = factory._ring_capacity(  # pylint: disable=protected-access  # its factory's settings
        self.spec, self.mechanism, min(others))

  def initial_public_seed(self) -> tf.Tensor:
    """The process's public seed: kernel entropy (a constant under seed=)."""
    if self._test_seed is None:
      return entropy_lib.os_entropy_seed()
    return tf.constant([self._test_seed, 0x5EED], tf.int64)

  def _noise_seed(self, flat, seed):
    if self._test_seed is not None:
      digest = tf.bitcast(
          tf.fingerprint(tf.reshape(tf.bitcast(flat, tf.uint8), [1, -1]))[0],
          tf.int64)
      return tf.random.experimental.stateless_fold_in(seed, digest)
    if self._entropy_fn is not None:
      return tf.reshape(tf.cast(self._entropy_fn(), tf.int64), [2])
    return entropy_lib.os_entropy_seed()

  def _check_clip(self, clip):
    if (clip is None) != (self.adaptive is None):
      raise ValueError('the round\'s clip is given iff the factory clips '
                       'adaptively (auto_l2_clip=True); the DPQuery form does '
                       'not support adaptive clipping.')

  def client(self,
             value,
             seed,
             clip=None) -> 'collections.OrderedDict[str, tf.Tensor]':
    """One client's int32 contribution per key of `secure_moduli`.

    `clip`: the round's (public) clip C_t with adaptive clipping, else None.
    """
    self._check_clip(clip)
    flat = self.spec.flatten(value)
    seeds = tf.random.experimental.stateless_split(
        self._noise_seed(flat, seed), 3 if self.adaptive is None else 4)
    indicator = None  # with an adaptive clip only (then self._indicator too)
    if self.adaptive is not None:
      flat, indicator = adaptive_lib.client_split(self.adaptive, flat, clip)
    if self._rate is not None:
      keep = coins(self._rate, [], seeds[0])
      flat = tf.where(keep, flat, tf.zeros_like(flat))
    encoded, flags = self.mechanism.client_encode(flat, seed, seeds[1])
    out = collections.OrderedDict((key, tf.cast(encoded[key], tf.int32))
                                  for key in self.mechanism.secure_moduli())
    one = tf.ones([1], tf.int64)
    out['counts'] = tf.cast(
        tf.concat([one, flags] if self._debug else [one], 0), tf.int32)
    if self._counts is not None:
      noised, _ = self._counts.client_encode(tf.cast(flags, tf.float64), seed,
                                             seeds[2])
      for key in self._counts.secure_moduli():
        out['noised_' + key] = tf.cast(noised[key], tf.int32)
    if self._indicator is not None:
      noised, _ = self._indicator.client_encode(indicator, seed, seeds[3])
      out[adaptive_lib.KEY] = tf.cast(noised['encoded'], tf.int32)
    return out

  def server(self, summed, seed, clip=None):
    """(result in the value's structure, measurements) from the sums.

    `summed`: per key, the sum of the clients' contributions modulo a
    multiple of the key's modulus (reduced here again). `clip`: the round's
    clip with adaptive clipping (the measurements then carry `l2_clip`,
    `next_l2_clip` and `below_clip_fraction`), else None.
    """
    self._check_clip(clip)
    summed = collections.OrderedDict(
        (key, base.ring_residue(summed[key], modulus))
        for key, modulus in self.secure_moduli.items())
    n = summed['counts'][0]
    may_wrap = self.ring.may_wrap(n)
    if self.on_wrap is OnWrap.RAISE:
      # Everything the server returns depends on the check (graph-mode TFF
      # computations run only what their outputs need).
      with tf.control_dependencies([self.ring.assertion(n)]):
        summed = collections.OrderedDict(
            (key, tf.identity(value)) for key, value in summed.items())
        n = tf.identity(n)
    mechanism = self.mechanism
    decoded, post = mechanism.server_decode(
        {key: summed[key] for key in mechanism.secure_moduli()}, n, seed)
    if clip is not None:
      clip = tf.cast(clip, tf.float64)
      decoded = decoded * clip
    result = self.spec.unflatten(decoded)
    measurements = collections.OrderedDict()
    for key, value in mechanism.public_measurements().items():
      measurements[key] = _constant(value)
    if clip is not None:
      # The unit-clip mechanism's constants in the real domain of C_t.
      measurements['l2_clip'] = clip
      if _SCALE_FACTOR in measurements:
        measurements[_SCALE_FACTOR] = (
            tf.cast(measurements[_SCALE_FACTOR], tf.float64) / clip)
      noisy, _ = self._indicator.server_decode(
          {'encoded': summed[adaptive_lib.KEY]}, n, seed)
      below, new_clip = adaptive_lib.next_clip(self.adaptive, clip, noisy[0], n)
      measurements['below_clip_fraction'] = below
      measurements['next_l2_clip'] = new_clip
    measurements['participating_clients'] = n
    measurements['actual_num_clients'] = n
    if self._rate is not None:
      measurements['client_sampling_rate'] = tf.constant(
          effective_rate(self._rate), tf.float64)
    for key, value in post.items():
      measurements[key] = value
    # Over every key of the secure sum (the mechanism's own flag covers its
    # key; the counts' rings hold more clients).
    measurements['sum_may_wrap'] = may_wrap
    if self._debug:
      measurements['debug_counts'] = collections.OrderedDict(
          (name, summed['counts'][1 + i])
          for i, name in enumerate(mechanism.flag_names))
    if self._counts is not None:
      keys = self._counts.secure_moduli()
      noisy, _ = self._counts.server_decode(
          {key: summed['noised_' + key] for key in keys}, n, seed)
      measurements['noised_counts'] = collections.OrderedDict(
          (name, noisy[i]) for i, name in enumerate(mechanism.flag_names))
    return result, measurements, n


@dataclasses.dataclass(frozen=True)
class _Preprocess:
  input_type: Any
  fn: Callable[[Any], Any]


def _build(protocol: RoundProtocol, preprocess: Optional[_Preprocess] = None):
  """The AggregationProcess (its round: docs/notes/secure_sum.md)."""
  input_type = (protocol.spec.value_type
                if preprocess is None else preprocess.input_type)

  adaptive = protocol.adaptive

  @tff.tensorflow.computation
  def init_fn():
    state = collections.OrderedDict(round=tf.constant(0, tf.int64),
                                    public_seed=protocol.initial_public_seed())
    if adaptive is not None:
      state['l2_clip'] = tf.constant(adaptive.initial_clip, tf.float64)
    return state

  state_type = init_fn.type_signature.result

  seed_type = state_type.public_seed

  @tff.tensorflow.computation(state_type)
  def round_seed_fn(state):
    return round_seed(state)

  if adaptive is None:

    @tff.tensorflow.computation(input_type, seed_type)
    def client_fn(value, seed):
      if preprocess is not None:
        value = preprocess.fn(value)
      return protocol.client(value, seed)
  else:

    @tff.tensorflow.computation(input_type, seed_type, tf.float64)
    def client_fn(value, seed, clip):
      if preprocess is not None:
        value = preprocess.fn(value)
      return protocol.client(value, seed, clip)

    # The clip the clients receive (public: see adaptive_clip).
    @tff.tensorflow.computation(state_type)
    def clip_fn(state):
      return state['l2_clip']

  @tff.tensorflow.computation(client_fn.type_signature.result, state_type,
                              seed_type)
  def server_fn(summed, state, seed):
    result, measurements, n = protocol.server(
        summed, seed, None if adaptive is None else state['l2_clip'])
    measurements['dp_event'] = event_io.event_structure(protocol.planning_event,
                                                        {'num_clients': n})
    new_state = collections.OrderedDict(round=state['round'] + 1,
                                        public_seed=state['public_seed'])
    if adaptive is not None:
      new_state['l2_clip'] = measurements['next_l2_clip']
    return new_state, result, measurements

  @tff.federated_computation
  def init_federated():
    return tff.federated_eval(init_fn, tff.SERVER)

  @tff.federated_computation(init_federated.type_signature.result,
                             tff.FederatedType(input_type, tff.CLIENTS))
  def next_fn(state, value):
    seed = tff.federated_map(round_seed_fn, state)
    if adaptive is None:
      encoded = tff.federated_map(client_fn,
                                  (value, tff.federated_broadcast(seed)))
    else:
      clip = tff.federated_map(clip_fn, state)
      encoded = tff.federated_map(
          client_fn,
          (value, tff.federated_broadcast(seed), tff.federated_broadcast(clip)))
    summed = tff.backends.mapreduce.federated_secure_modular_sum(
        encoded, protocol.secure_moduli)
    new_state, result, measurements = tff.federated_map(server_fn,
                                                        (summed, state, seed))
    return tff.templates.MeasuredProcessOutput(state=new_state,
                                               result=result,
                                               measurements=measurements)

  return tff.templates.AggregationProcess(rounds.user_facing(init_federated),
                                          rounds.user_facing(next_fn))
