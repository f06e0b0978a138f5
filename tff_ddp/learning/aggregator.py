"""`ddp_secure_aggregator`: TFF's DP-FedAvg aggregator, private and accounted.

The counterpart of `tff.learning.ddp_secure_aggregator(noise_multiplier,
expected_clients_per_round, bits=20, zeroing=True, rotation_type='hd')`, with
its signature and defaults, in one flat secure-sum layer
(`tff_ddp.aggregators.secure_sum`): the distributed discrete Gaussian sum,
adaptive clipping as TFF configures it but private and accounted
(`tff_ddp.aggregators.adaptive_clip`), zeroing above a public threshold
(ZEROING_MULTIPLIER * C_t + ZEROING_INCREMENT) at no privacy cost, and the
mean over the clients in the sum. Build the learning process with
`metrics_aggregator=tff_ddp.learning.withhold_metrics` and take each round's
event from `tff_ddp.learning.round_dp_event(output.metrics)`.

TFF's aggregator against this one, zeroing, measurements, the builders it
fits: docs/notes/tff_integration.md.
"""

import dataclasses
import sys
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import adaptive_clip
from tff_ddp.aggregators import discrete_gaussian
from tff_ddp.aggregators import secure_sum
from tff_ddp.mechanisms import base
from tff_ddp.utils import checks

# TFF's ddp_secure_aggregator configuration (model_update_aggregator.py).
INITIAL_L2_CLIP = 0.1
TARGET_QUANTILE = 0.5
LEARNING_RATE = 0.2
# Zeroing threshold: ZEROING_MULTIPLIER * C_t + ZEROING_INCREMENT.
ZEROING_MULTIPLIER = 10.0
ZEROING_INCREMENT = 1.0

_NAME = 'ddp_secure_aggregator'


class _MeanProtocol(secure_sum.RoundProtocol):
  """The round of the sum, its result divided by the public client count."""

  def server(self, summed, seed, clip=None):
    result, measurements, n = super().server(summed, seed, clip)
    denominator = tf.maximum(tf.cast(n, tf.float64), 1.0)
    result = tf.nest.map_structure(
        lambda t: tf.cast(tf.cast(t, tf.float64) / denominator, t.dtype),
        result)
    return result, measurements, n


class DdpMeanFactory(discrete_gaussian.DiscreteGaussianSumFactory):
  """The factory `ddp_secure_aggregator` returns.

  What it does and how it differs from TFF's: docs/notes/tff_integration.md,
  section on aggregator.py.
  """

  # Messages name ddp_secure_aggregator's parameters (it has no count
  # stddev: TFF's default 0.05 * expected_clients_per_round always).
  _OWNER = _NAME
  _COUNT_STDDEV_PARAMETER = None

  def __init__(self,
               noise_multiplier,
               expected_clients_per_round,
               bits,
               zeroing,
               rotation_type,
               adaptive_clipping=None,
               **kwargs):
    zeroing = checks.boolean(zeroing, 'zeroing')
    if adaptive_clipping is None:
      # TFF's configuration; its signature has no count stddev to name.
      clipping = adaptive_clip.AdaptiveClipping(TARGET_QUANTILE, LEARNING_RATE)
      self._object_count_stddev_parameter = None
    elif isinstance(adaptive_clipping, adaptive_clip.AdaptiveClipping):
      clipping = adaptive_clipping
    else:
      raise TypeError('adaptive_clipping must be an adaptive_clip.'
                      f'AdaptiveClipping or None, got {adaptive_clipping!r}.')
    if zeroing and clipping.zeroing_multiplier is None:
      clipping = dataclasses.replace(clipping,
                                     zeroing_multiplier=ZEROING_MULTIPLIER,
                                     zeroing_increment=ZEROING_INCREMENT)
    super().__init__(
        discrete_gaussian.Request(
            l2_clip=INITIAL_L2_CLIP,
            noise_multiplier=noise_multiplier,
            expected_clients_per_round=expected_clients_per_round,
            bits=bits), discrete_gaussian.tff_encoder(rotation_type), clipping,
        **kwargs)
    self._describe = dict(
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=(expected_clients_per_round),
        bits=bits,
        zeroing=zeroing,
        rotation_type=rotation_type,
        adaptive_clipping=adaptive_clipping)
    if self._kind is not base.Kind.DISCRETE_GAUSSIAN:
      self._describe['mechanism'] = discrete_gaussian.TFF_NAMES[self._kind]
    self._name = _NAME

  @classmethod
  def from_tff_arguments(cls, *args, **kwargs):
    raise TypeError(f'{_NAME} has the signature of TFF\'s tff.learning.'
                    f'ddp_secure_aggregator: call tff_ddp.learning.{_NAME}'
                    '(...).')

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _refuse_dropped_weights()
    return super().create(value_type)

  def round_protocol(self,
                     value_type,
                     count_modulus: int = secure_sum.COUNT_MODULUS):
    spec = self.value_spec(value_type)
    if not all(tf.as_dtype(leaf.dtype).is_floating for leaf in spec.leaves):
      raise TypeError(f'{_NAME} averages model updates: value_type must be '
                      f'floating point, got {spec.value_type}.')
    return _MeanProtocol(self, value_type, count_modulus)

  def __repr__(self):
    return f'{_NAME}({", ".join(self._repr_arguments())})'


# How far up `create`'s callers `_refuse_dropped_weights` looks for TFF's
# wrapper (TFF 0.87: two frames; nesting in other factories adds a few).
_MAX_FRAMES = 32


def _refuse_dropped_weights():
  """A ValueError when a TFF builder weights the clients and TFF's wrapper
  drops the weights, read at build time from the builder's configuration.

  `tff.aggregators.as_weighted_aggregator(factory)` ignores the weights it is
  given (TFF 0.87, `aggregators/factory_utils.py`), and the weight type its
  `create(value_type, weight_type)` receives is float32 whatever the
  weighting, so a `tff.learning.algorithms.build_weighted_fed_avg` with its
  default `client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES` (or a
  weighting function; `build_fed_sgd` always weights by examples) would
  average uniformly without a word. The builder's `client_weighting` is read
  from its frame (the caller of the wrapper's `create`); only configuration
  is read, no client value, so the check costs no privacy. A weighted mean
  would sum the example counts at the server unnoised, hence no weighted
  variant: uniform weights, said explicitly.
  """
  wrapper = type(
      tff.aggregators.as_weighted_aggregator(
          tff.aggregators.UnweightedMeanFactory())).create.__code__
  frame = sys._getframe(1)  # pylint: disable=protected-access  # the caller's frame
  for _ in range(_MAX_FRAMES):
    if frame is None:
      return
    if frame.f_code is wrapper:
      break
    frame = frame.f_back
  else:
    return
  builder = frame.f_back
  if builder is None or not builder.f_globals.get(
      '__name__', '').startswith('tensorflow_federated.'):
    return  # Not inside a TFF builder (e.g. as_uniform_weighted_aggregator).
  weighting = builder.f_locals.get('client_weighting')
  if weighting is tff.learning.ClientWeighting.UNIFORM:
    return
  name = builder.f_code.co_name
  if weighting is tff.learning.ClientWeighting.NUM_EXAMPLES:
    how = 'client_weighting=NUM_EXAMPLES (its default)'
  elif weighting is None:
    how = "the clients' example counts"
  else:
    how = f'client_weighting={weighting!r}'
  raise ValueError(
      f'{name} weights the clients by {how}, but tff.aggregators.'
      f'as_weighted_aggregator({_NAME}(...)) ignores the weights and '
      'averages uniformly (a weighted mean would release the example '
      'counts): pass client_weighting=tff.learning.ClientWeighting.UNIFORM, '
      'use build_unweighted_fed_avg, or wrap with tff_ddp.learning.'
      'as_uniform_weighted_aggregator(...) to average uniformly on purpose.')


class _UniformWeightedFactory(tff.aggregators.WeightedAggregationFactory):
  """`as_uniform_weighted_aggregator`'s factory."""

  def __init__(self, unweighted_factory):
    if not isinstance(unweighted_factory,
                      tff.aggregators.UnweightedAggregationFactory):
      raise TypeError(
          'as_uniform_weighted_aggregator takes a tff.aggregators.'
          'UnweightedAggregationFactory (e.g. tff_ddp.learning.'
          f'ddp_secure_aggregator(...)), got {unweighted_factory!r}.')
    self._factory = unweighted_factory

  def create(self, value_type, weight_type):
    # TFF's wrapper, created here (not by a TFF builder): the check above
    # lets it through.
    return tff.aggregators.as_weighted_aggregator(self._factory).create(
        value_type, weight_type)

  def __repr__(self):
    return f'as_uniform_weighted_aggregator({self._factory!r})'


def as_uniform_weighted_aggregator(
    unweighted_factory: tff.aggregators.UnweightedAggregationFactory,
) -> tff.aggregators.WeightedAggregationFactory:
  """A `tff.aggregators.WeightedAggregationFactory` that ignores the weights.

  TFF's `tff.aggregators.as_weighted_aggregator`, stated: every client
  counts the same whatever the builder's weighting (no weight leaves a
  client). For TFF builders that weight by example counts and cannot be told
  otherwise (`tff.learning.algorithms.build_fed_sgd`), or a
  `build_weighted_fed_avg` whose `client_weighting` should not matter.
  TFF's own wrapper around `ddp_secure_aggregator(...)` is refused in a
  builder that weights the clients (its weights would be dropped silently).

  Args:
    unweighted_factory: a `tff.aggregators.UnweightedAggregationFactory`,
      e.g. `ddp_secure_aggregator(...)`.

  Returns:
    A `tff.aggregators.WeightedAggregationFactory` averaging uniformly.
  """
  return _UniformWeightedFactory(unweighted_factory)


def ddp_secure_aggregator(
    noise_multiplier: float,
    expected_clients_per_round: int,
    bits: int = 20,
    zeroing: bool = True,
    rotation_type: str = 'hd',
    *,
    mechanism: str = 'distributed_dgauss',
    adaptive_clipping: Optional[adaptive_clip.AdaptiveClipping] = None,
) -> DdpMeanFactory:
  """DP-FedAvg's aggregator: zeroing, private adaptive clip, DDG sum, mean.

  TFF's `tff.learning.ddp_secure_aggregator` signature and defaults; see
  docs/notes/tff_integration.md (section on aggregator.py) for what differs
  (the DDG by default instead of the Skellam, a private and accounted clip, a
  public zeroing threshold).

  Args:
    noise_multiplier: noise stddev / clip of value and clip count together
      (as in TFF), >= 0; 0: not private.
    expected_clients_per_round: clients per round whose noise shares form
      the central noise, >= 1.
    bits: the secure-sum modulus is 2^bits, 1 <= bits <= 30 (TFF: <= 22).
    zeroing: zero updates of norm > 10 C_t + 1 (C_t the round's clip).
    rotation_type: 'hd' (randomized Hadamard) or 'dft' (randomized DFT,
      `tff_ddp.encoders.dft`).
    mechanism: not in TFF's signature (TFF always uses the Skellam):
      'distributed_dgauss' (default) or 'distributed_skellam' (exact
      Skellam noise, `tff_ddp.mechanisms.distributed_skellam`).
    adaptive_clipping: not in TFF's signature: an
      `adaptive_clip.AdaptiveClipping` instead of TFF's (target quantile
      0.5, learning rate 0.2, count stddev 0.05 *
      expected_clients_per_round); the initial clip stays 0.1, and
      zeroing=True adds the zeroing above to one that has none.

  Returns:
    A `tff.aggregators.UnweightedAggregationFactory` (one secure-sum layer:
    usable as `model_aggregator` of `build_unweighted_fed_avg` with the
    default protobuf).
  """
  return DdpMeanFactory(noise_multiplier,
                        expected_clients_per_round,
                        bits,
                        zeroing,
                        rotation_type,
                        adaptive_clipping,
                        mechanism=mechanism)
