"""Client metrics of TFF's learning builders: withheld, or noised and accounted.

TFF's default `metrics_aggregator` (`tff.learning.metrics.sum_then_finalize`)
sums the clients' unfinalized metrics exactly, so a round is not
differentially private against the server whatever its model aggregator
does. Two aggregators with TFF's `metrics_aggregator` signature replace it:
`withhold_metrics` (the default this library recommends: nothing leaves the
clients) and `noised_metrics(noise_multiplier, expected_clients_per_round,
metric_bounds)` (the distributed discrete Gaussian of Kairouz, Liu & Steinke
2021, arXiv:2102.06387, Algorithms 1-2 and Theorem 5, in one secure sum).
`round_dp_event(output.metrics)` gathers every event of a round.

How a client's metrics are bounded, the neighbours, the cost:
docs/notes/tff_integration.md.
"""

import collections
import math
from typing import Mapping, Optional, Sequence, Union

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import event_io
from tff_ddp.aggregators import discrete_gaussian
from tff_ddp.aggregators import secure_sum
from tff_ddp.utils import checks

# Keys of the released metrics besides the model's own.
DP_EVENT = event_io.DP_EVENT
# The keys of a TFF learning process's metrics this module reads.
_CLIENT_WORK, _AGGREGATOR = 'client_work', 'aggregator'
SECURE_SUM_MEASUREMENTS = 'secure_sum_measurements'
_NAME = 'noised_metrics'

Bound = Union[float, Sequence[float]]


def _check_finalizers(metric_finalizers):
  # TFF's own check (an OrderedDict of callables keyed by name, or a
  # callable); its messages name `metric_finalizers`.
  from tensorflow_federated.python.learning.metrics import aggregation_utils
  aggregation_utils.check_metric_finalizers(metric_finalizers)


def withhold_metrics(metric_finalizers, local_unfinalized_metrics_type=None):
  """TFF's `metrics_aggregator` that releases no client metric.

  Pass it as it is (as TFF's `tff.learning.metrics.sum_then_finalize`):

    tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=...,
        model_aggregator=tff_ddp.learning.ddp_secure_aggregator(...),
        metrics_aggregator=tff_ddp.learning.withhold_metrics)

  The clients' metrics are not sent; `output.metrics['client_work']
  ['train']` is an empty OrderedDict. No privacy cost.

  Args:
    metric_finalizers: what TFF passes (checked as TFF checks it).
    local_unfinalized_metrics_type: unused (as in TFF).

  Returns:
    A federated computation: client metrics -> OrderedDict() at SERVER.
  """
  del local_unfinalized_metrics_type  # As TFF: unused.
  _check_finalizers(metric_finalizers)

  @tff.federated_computation
  def withheld(client_local_unfinalized_metrics):
    del client_local_unfinalized_metrics  # Never leaves the clients.
    return tff.federated_value(collections.OrderedDict(), tff.SERVER)

  return withheld


def _metric_bounds(metric_bounds) -> 'collections.OrderedDict[str, list]':
  """{name: [bound, ...]} (one bound: every tensor of the metric)."""
  if not isinstance(metric_bounds, Mapping) or not metric_bounds:
    raise TypeError(
        'metric_bounds must be a non-empty mapping from metric name to the '
        'bound of its unfinalized values (a number, or one number per '
        'tensor), e.g. {"num_examples": 100, "loss": [500.0, 100]}; got '
        f'{metric_bounds!r}. To release no metric use '
        'tff_ddp.learning.withhold_metrics.')
  clean = collections.OrderedDict()
  for name, bound in metric_bounds.items():
    if not isinstance(name, str):
      raise TypeError(f'metric_bounds keys must be metric names (str), got '
                      f'{name!r}.')
    if name in (DP_EVENT, SECURE_SUM_MEASUREMENTS):
      raise ValueError(f'metric_bounds names a metric {name!r}, a key the '
                       'released metrics use for the secure sum; rename '
                       'the metric.')
    if isinstance(
        bound, (Sequence, np.ndarray)) and not isinstance(bound, (str, bytes)):
      clean[name] = checks.real_sequence(bound,
                                         f'metric_bounds[{name!r}]',
                                         low=0.0,
                                         low_open=True)
    else:
      clean[name] = [checks.positive(bound, f'metric_bounds[{name!r}]')]
  return clean


def _check_names(bounds, names):
  unknown = [name for name in bounds if name not in names]
  if unknown:
    raise ValueError(
        f'metric_bounds names {unknown}, which the model does not report; '
        f'its metrics are {names}.')


class _Layout:
  """The released metrics' coordinates: per metric its ValueSpec and the
  bound of each coordinate (float64 [k] in metric order)."""

  def __init__(self, metrics_type, bounds, finalizers):
    from tensorflow_federated.python.learning.metrics import aggregation_utils
    aggregation_utils.check_local_unfinalized_metrics_type(metrics_type)
    names = [name for name, _ in tff.structure.iter_elements(metrics_type)]
    _check_names(bounds, names)
    if callable(finalizers) and set(bounds) != set(names):
      raise ValueError(
          'this model finalizes its metrics with one function '
          '(tff.learning.models.FunctionalModel.finalize_metrics), which '
          'needs all of them: metric_bounds must bound every metric '
          f'{names}; it lacks {[n for n in names if n not in bounds]}.')
    self.specs = collections.OrderedDict()
    coordinate_bounds = []
    for name in names:
      if name not in bounds:
        continue
      spec = secure_sum.ValueSpec(metrics_type[name], _NAME)
      bound = bounds[name]
      if len(bound) == 1:
        bound = bound * len(spec.leaves)
      if len(bound) != len(spec.leaves):
        raise ValueError(
            f'metric_bounds[{name!r}] has {len(bound)} bounds, the metric '
            f'{len(spec.leaves)} unfinalized tensors ({spec.value_type}): '
            'give one number, or one per tensor.')
      self.specs[name] = spec
      for b, size in zip(bound, spec.sizes):
        coordinate_bounds.extend([b] * size)
    self.bounds = np.array(coordinate_bounds, np.float64)
    self.dim = len(coordinate_bounds)

  def normalise(self, metrics) -> tf.Tensor:
    """float64 [k]: each coordinate divided by its bound (a client's)."""
    flat = tf.concat(
        [spec.flatten(metrics[name]) for name, spec in self.specs.items()], 0)
    return flat / tf.constant(self.bounds)

  def restore(self, flat) -> 'collections.OrderedDict':
    """The unfinalized metrics (their dtypes) from a normalised sum."""
    flat = tf.cast(flat, tf.float64) * tf.constant(self.bounds)
    parts = tf.split(flat, [spec.dim for spec in self.specs.values()])
    return collections.OrderedDict(
        (name, spec.unflatten(part))
        for (name, spec), part in zip(self.specs.items(), parts))


class NoisedMetrics:
  """TFF's `metrics_aggregator` with distributed-DP noise (module doc).

  Built by `noised_metrics`; called by TFF's learning builders with the
  model's finalizers.
  """

  def __init__(self, noise_multiplier, expected_clients_per_round,
               metric_bounds, bits, seed, entropy):
    self._bounds = _metric_bounds(metric_bounds)
    self._arguments = dict(
        noise_multiplier=checks.positive(noise_multiplier, 'noise_multiplier'),
        expected_clients_per_round=expected_clients_per_round,
        bits=bits,
        seed=seed,
        entropy=entropy)
    # The factory's own checks (bits, clients, ring), before any tracing.
    self.factory(1)

  def factory(
      self,
      num_coordinates: int) -> discrete_gaussian.DiscreteGaussianSumFactory:
    """The DDG sum of `num_coordinates` normalised metric coordinates."""
    k = checks.integer(num_coordinates, 'num_coordinates', 1)
    args = self._arguments
    return discrete_gaussian.DiscreteGaussianSumFactory(
        discrete_gaussian.Request(
            l2_clip=math.sqrt(k),
            noise_multiplier=args['noise_multiplier'],
            expected_clients_per_round=args['expected_clients_per_round'],
            bits=args['bits'],
            linf_clip=1.0),
        encoder='none',
        seed=args['seed'],
        entropy=args['entropy'])

  def dp_event(self,
               num_coordinates: int,
               num_clients: Optional[int] = None) -> dp_accounting.DpEvent:
    """The planning event of one round releasing `num_coordinates`
    coordinates (`num_clients`: default the expected number)."""
    k = checks.integer(num_coordinates, 'num_coordinates', 1)
    return self.factory(k).dp_event(tff.TensorType(np.float64, [k]),
                                    num_clients)

  def noise_stddevs(
      self, num_coordinates: int) -> 'collections.OrderedDict[str, list]':
    """Metric name -> z * sqrt(k) * b for each of its bounds b: the noise
    stddev of a released coordinate's sum, in the metric's units, when
    `num_coordinates` = k coordinates are released."""
    k = checks.integer(num_coordinates, 'num_coordinates', 1)
    z = self._arguments['noise_multiplier']
    return collections.OrderedDict(
        (name, [z * math.sqrt(k) * b
                for b in bounds])
        for name, bounds in self._bounds.items())

  def __call__(self, metric_finalizers, local_unfinalized_metrics_type=None):
    """The federated computation TFF's builders call each round."""
    del local_unfinalized_metrics_type  # As TFF: unused.
    _check_finalizers(metric_finalizers)
    if not callable(metric_finalizers):
      _check_names(self._bounds, list(metric_finalizers))
    bounds = self._bounds

    @tff.federated_computation
    def noised(client_local_unfinalized_metrics):
      metrics_type = client_local_unfinalized_metrics.type_signature.member
      layout = _Layout(metrics_type, bounds, metric_finalizers)
      value_type = tff.TensorType(np.float64, [layout.dim])
      process = self.factory(layout.dim).create_with_client_preprocessing(
          value_type, metrics_type, layout.normalise)
      output = process.next(process.initialize(),
                            client_local_unfinalized_metrics)

      @tff.tensorflow.computation(
          process.next.type_signature.result.result.member,
          process.next.type_signature.result.measurements.member)
      def finalize(noisy_sum, measurements):
        unfinalized = layout.restore(noisy_sum)
        if callable(metric_finalizers):
          released = collections.OrderedDict(metric_finalizers(unfinalized))
        else:
          released = collections.OrderedDict(
              (name, metric_finalizers[name](value))
              for name, value in unfinalized.items())
        released[SECURE_SUM_MEASUREMENTS] = collections.OrderedDict(
            (key, value)
            for key, value in measurements.items()
            if key != DP_EVENT)
        released[DP_EVENT] = measurements[DP_EVENT]
        return released

      return tff.federated_map(finalize, (output.result, output.measurements))

    return noised

  def __repr__(self):
    args = self._arguments
    options = ''.join(
        f', {key}={args[key]!r}' for key in ('seed',) if args[key] is not None)
    return (f'{_NAME}(noise_multiplier={args["noise_multiplier"]!r}, '
            f'expected_clients_per_round='
            f'{args["expected_clients_per_round"]!r}, '
            f'metric_bounds={dict(self._bounds)!r}, bits={args["bits"]!r}'
            f'{options})')


def noised_metrics(
    noise_multiplier: float,
    expected_clients_per_round: int,
    metric_bounds: Mapping[str, Bound],
    bits: int = 20,
    *,
    seed: Optional[int] = None,
    entropy=None,
) -> NoisedMetrics:
  """TFF's `metrics_aggregator`: client metrics with distributed DP noise.

  Example (a Keras model from `tff.learning.models.from_keras_model`, at
  most 100 examples and a per-example loss of at most 5 per client):

    metrics_aggregator = tff_ddp.learning.noised_metrics(
        noise_multiplier=5.0, expected_clients_per_round=100,
        metric_bounds={'loss': [500.0, 100], 'num_examples': 100})

  Args:
    noise_multiplier: z > 0, the noise stddev of the sum over the l2 bound
      sqrt(k) of the k normalised coordinates (docs/notes/tff_integration.md,
      "How a client's metrics are bounded").
    expected_clients_per_round: clients per round whose noise shares form
      the central noise, >= 1 (as for the model aggregator).
    metric_bounds: metric name -> the bound of each coordinate of its
      unfinalized values: one number for all of its tensors, or one per
      tensor (for Keras' `loss`: [max loss sum, max examples]). Values are
      clipped to [-bound, bound]. Metrics not named are withheld.
    bits: the secure sum's modulus is 2^bits.
    seed, entropy: tests only / a production runtime's noise entropy (see
      `tff_ddp.aggregators.secure_sum`).

  Returns:
    A `NoisedMetrics`, to pass as `metrics_aggregator=`. Each round's
    `client_work/train` then holds the finalized noisy metrics named in
    `metric_bounds`, `secure_sum_measurements` (configuration and the
    public participant count) and `dp_event`.
  """
  return NoisedMetrics(noise_multiplier, expected_clients_per_round,
                       metric_bounds, bits, seed, entropy)


# ---------------------------------------------------------------------------
# One event per round


def _uncovered_leaves(value, path):
  """Paths of leaves not under a mapping that holds a `dp_event`."""
  mapping = event_io.as_mapping(value)
  if mapping is None:
    if isinstance(value, (list, tuple)):
      return [
          leaf for i, v in enumerate(value)
          for leaf in _uncovered_leaves(v, f'{path}/{i}')
      ]
    return [path]
  if DP_EVENT in mapping:
    return []
  return [
      leaf for key, v in mapping.items()
      for leaf in _uncovered_leaves(v, f'{path}/{key}')
  ]


def round_dp_event(metrics) -> dp_accounting.DpEvent:
  """The DP event of everything one round of a learning process released.

  For the metrics of `tff.learning.algorithms.build_*` (FedAvg, FedProx,
  FedSGD: `distributor`, `client_work`, `aggregator`, `finalizer`) and of
  `tff_ddp.learning`'s processes. Composes every `dp_event` of the metrics
  (`tff_ddp.accounting.extract_dp_event`), after checking that nothing
  else in them came from the clients:

  * `client_work` holds no value outside a mapping with a `dp_event`
    (TFF's default `metrics_aggregator` sums client metrics exactly: use
    `withhold_metrics` or `noised_metrics`);
  * `aggregator` has a `dp_event` (a model aggregator of tff_ddp).

  `distributor` and `finalizer` run at the server on server values (the
  model, the aggregated update: TFF's `compose_learning_process`), so what
  they measure (e.g. `update_non_finite`) is post-processing.

  Raises:
    ValueError: client values released without an event (names them and
      the fix), or no event at all.
  """
  mapping = event_io.as_mapping(metrics)
  if mapping is None:
    raise TypeError('metrics must be the metrics of one round (a mapping, '
                    f'`output.metrics`), got {type(metrics).__name__}.')
  if DP_EVENT not in mapping and _CLIENT_WORK in mapping:
    exact = _uncovered_leaves(mapping[_CLIENT_WORK], _CLIENT_WORK)
    if exact:
      raise ValueError(
          f'these metrics release client values without noise: {exact} '
          '(TFF\'s default metrics_aggregator, sum_then_finalize, sums them '
          'exactly): the round is not differentially private against the '
          'server. Build the process with metrics_aggregator='
          'tff_ddp.learning.withhold_metrics (release none) or '
          'tff_ddp.learning.noised_metrics(...) (noised and accounted).')
    if _AGGREGATOR in mapping:
      try:
        event_io.extract_dp_event(mapping[_AGGREGATOR])
      except event_io.NoDpEventError:
        raise ValueError(
            'metrics[\'aggregator\'] holds no dp_event: the model updates '
            'were aggregated without distributed DP. Use model_aggregator='
            'tff_ddp.learning.ddp_secure_aggregator(...) (or another '
            'tff_ddp factory).') from None
  return event_io.extract_dp_event(mapping)
