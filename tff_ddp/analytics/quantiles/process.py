"""Federated quantiles with distributed DP: a TFF MeasuredProcess.

The federated DP quantiles paper: Algorithm 1 (flat histograms), Algorithm 2
(hierarchical histograms), Theorems 1-2 (privacy, ring size); Chen et al.,
"Federated frequency estimation", Section 4.2 for the Haar variant. The math
is in `tff_ddp.analytics.quantiles.encodings`, the calibration in
`calibration`; the noise and the secure sum are the aggregators of
`tff_ddp.aggregators`, composed. `build_quantile_process` builds it
(`QuantileParameters`: its configuration); `STATUSES` name how a round
ended; a NaN value, encoded as zeros, is the neighbours' "no value".

The data flow, what a round releases, clients, neighbours, empty rounds,
ring capacity, statuses: docs/notes/federated_quantiles.md.
"""

import collections
import dataclasses
import enum
from typing import Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import calibration
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles.calibration import MECHANISMS
from tff_ddp.analytics.quantiles.calibration import parameters_for_noise
from tff_ddp.analytics.quantiles.calibration import quantile_parameters
from tff_ddp.analytics.quantiles.calibration import QuantileParameters
from tff_ddp.analytics.quantiles.calibration import QuantileSetting
from tff_ddp.utils import checks
from tff_ddp.utils import rounds as rounds_lib


class Estimator(enum.StrEnum):
  """How the server reads a quantile off the noisy CDF: PAPER, eq. 1 of
  Algorithm 1 on the raw CDF; MONOTONE, its isotonic projection first;
  INTERPOLATE, isotonic, then linear inside the bin where it reaches p."""

  PAPER = 'paper'
  MONOTONE = 'monotone'
  INTERPOLATE = 'interpolate'

  @property
  def monotone(self) -> bool:
    """The CDF is projected onto the monotone ones first."""
    return self is not Estimator.PAPER

  @property
  def interpolate(self) -> bool:
    """The quantile is interpolated inside its bin."""
    return self is Estimator.INTERPOLATE


ESTIMATORS = tuple(e.value for e in Estimator)
# Every status an analytics process reports (the frequency processes use
# 'ok', 'no_clients' and 'sum_may_wrap').
STATUSES = ('ok', 'no_clients', 'too_few_values', 'sum_may_wrap')

__all__ = [
    'build_quantile_process', 'build_quantile_process_from_parameters',
    'quantile_parameters', 'parameters_for_noise', 'QuantileSetting',
    'QuantileEstimation', 'QuantileParameters', 'MECHANISMS', 'Estimator',
    'ESTIMATORS', 'STATUSES'
]


@dataclasses.dataclass(frozen=True)
class QuantileEstimation:
  """How the server reads quantiles off the noisy histogram: one value,
  validated at construction (its choices resolved once; the checks that
  need the histogram's encoding are made by the builders).

  Attributes:
    count: 'estimated' (Algorithm 1 option 1: normalise by the noisy
      total) or 'exact' (option 2: by the number of clients in the secure
      sum, which is public by protocol; non-finite values:
      docs/notes/federated_quantiles.md, section on process.py, "Clients").
    estimator: an `Estimator` or its value: 'paper' (eq. 1 on the raw
      CDF), 'monotone' (isotonic projection of the CDF first; at most 2048
      bins) or 'interpolate' (isotonic, then linear interpolation inside
      the bin where the CDF reaches p).
    consistent_tree: for method 'tree', the least-squares consistent tree
      first.
    min_total_stddevs: below this many noise standard deviations of the
      estimated total, the round returns NaN with status 'too_few_values'.
  """

  count: str = 'estimated'
  estimator: Estimator = Estimator.PAPER
  consistent_tree: bool = False
  min_total_stddevs: float = 2.0

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    hg.exact_count(self.count)
    set_('estimator', checks.member(self.estimator, 'estimator', Estimator))
    set_('consistent_tree',
         checks.boolean(self.consistent_tree, 'consistent_tree'))
    set_('min_total_stddevs',
         checks.nonnegative(self.min_total_stddevs, 'min_total_stddevs'))

  @property
  def exact_count(self) -> bool:
    """count='exact': normalise by n (Algorithm 1, option 2)."""
    return hg.exact_count(self.count)

  @property
  def monotone(self) -> bool:
    """estimator 'monotone' or 'interpolate': the isotonic CDF."""
    return self.estimator.monotone

  @property
  def interpolate(self) -> bool:
    """estimator 'interpolate'."""
    return self.estimator.interpolate


def build_quantile_process(
    method: Union[str, hg.Encoding],
    mechanism: str,
    lower_bound: float,
    upper_bound: float,
    num_bins: int,
    quantiles: Sequence[float],
    setting: QuantileSetting,
    estimation: QuantileEstimation = QuantileEstimation(),
    *,
    on_wrap: str = 'raise',
) -> tff.templates.MeasuredProcess:
  """A process estimating `quantiles` of one float per client.

  For example, the quartiles of values in [0, 20] over 64 tree bins, for
  1000 clients a round at epsilon 1 (one round, against the server):

    build_quantile_process(
        'tree', 'discrete_gaussian', 0.0, 20.0, 64, [0.25, 0.5, 0.75],
        QuantileSetting(expected_clients_per_round=1000, epsilon=1.0,
                    delta=1e-6),
        QuantileEstimation(estimator='interpolate'))

  Args:
    method: 'flat' (Algorithm 1), 'hierarchical' or its alias 'tree'
      (Algorithm 2) or 'haar' (discrete Haar wavelet); hierarchical and
      Haar need num_bins a power of two. Resolved here, once, into a
      `encodings.Encoding` (one may be passed instead of the name).
    mechanism: 'discrete_gaussian' or 'poisson_binomial'.
    lower_bound, upper_bound: the range; values outside are clipped.
    num_bins: b in [2, 2^16] (monotone estimators: at most 2048).
    quantiles: levels p in (0, 1); the result has one estimate each, in
      this order.
    setting: a `QuantileSetting`: the clients of each round, the budget
      (epsilon, delta) of all its `rounds` rounds against its `adversary`
      (zero-out neighbours), the ring's bits, cPBM's num_trials, a test
      seed.
    estimation: a `QuantileEstimation` (default: count 'estimated',
      estimator 'paper', no consistent tree, min_total_stddevs 2).
    on_wrap: a round with more clients than the ring holds: 'raise' (the
      default: `RoundRefusedError`, state untouched) or 'flag' (status
      'sum_may_wrap'); see docs/notes/federated_quantiles.md, section on
      process.py, "More clients than the ring holds".

  Returns:
    A `tff.templates.MeasuredProcess`: `next(state, values)` with `values`
    one float32 per client returns the estimates in `result` (float64
    [len(quantiles)]) and measurements `aggregator` (the aggregator's,
    including the round's `dp_event`), `cdf` (the estimated CDF at the
    right bin edges), `status` (one of STATUSES; a str from Python
    calls), `noisy_total` (the estimated count) and
    `noisy_total_stddev` (its noise), and `within_budget` (False
    from round `rounds` + 1 on: the (epsilon, delta) guarantee covers the
    first `rounds` rounds only; compose the measured events with
    `tff_ddp.accounting.RdpAccountant` for the cost of more).
  """
  setting = calibration.as_setting(setting, 'build_quantile_process')
  encoding = hg.encoding(method, num_bins)
  options = _read_out(encoding, lower_bound, upper_bound, quantiles, estimation)
  on_wrap = secure_sum.check_on_wrap(on_wrap)
  params = quantile_parameters(encoding, mechanism, num_bins, setting)
  return _build(params, options, rounds=setting.rounds, on_wrap=on_wrap)


def build_quantile_process_from_parameters(
    parameters: QuantileParameters,
    lower_bound: float,
    upper_bound: float,
    quantiles: Sequence[float],
    estimation: QuantileEstimation = QuantileEstimation(),
    rounds: Optional[int] = None,
    *,
    on_wrap: str = 'raise',
) -> tff.templates.MeasuredProcess:
  """The process of `build_quantile_process` on given parameters.

  For callers that choose the noise themselves and account the rounds
  together with other releases (`calibration.parameters_for_noise`;
  DP-Delta-FL composes the quantile with the model update of each round).
  Also for callers that calibrate once (`quantile_parameters`) and split a
  budget between the quantile and another release (TFFE's first phase).
  Without `rounds` no budget comes with the process: the measurements have
  no `within_budget`; every round's event is in
  `measurements['aggregator']['dp_event']`, as always.

  Args:
    parameters: from `quantile_parameters` or `parameters_for_noise`.
    lower_bound, upper_bound, quantiles, estimation, on_wrap: as for
      `build_quantile_process`.
    rounds: the rounds `parameters` were calibrated for, if any: then the
      measurements have `within_budget` as in `build_quantile_process`.
  """
  if not isinstance(parameters, QuantileParameters):
    raise TypeError('parameters must be a QuantileParameters (from '
                    'quantile_parameters or parameters_for_noise), got '
                    f'{type(parameters).__name__}.')
  options = _read_out(parameters.encoding, lower_bound, upper_bound, quantiles,
                      estimation)
  if rounds is not None:
    rounds = checks.integer(rounds, 'rounds', 1)
  return _build(parameters,
                options,
                rounds=rounds,
                on_wrap=secure_sum.check_on_wrap(on_wrap))


@dataclasses.dataclass(frozen=True)
class _Options:
  """The server's read-out: the range, the levels and the
  `QuantileEstimation`, checked against the encoding (`_read_out`)."""

  lower_bound: float
  upper_bound: float
  quantiles: Sequence[float]
  estimation: QuantileEstimation


def _read_out(encoding, lower_bound, upper_bound, quantiles,
              estimation) -> _Options:
  """The validated read-out options of `encoding`'s process."""
  if not isinstance(estimation, QuantileEstimation):
    raise TypeError(
        'estimation must be a quantiles.QuantileEstimation(count=..., '
        'estimator=..., consistent_tree=..., min_total_stddevs=...), got '
        f'{estimation!r}.')
  lower_bound, upper_bound = hg.check_range(lower_bound, upper_bound)
  quantiles = checks.real_sequence(quantiles,
                                   'quantiles',
                                   0.0,
                                   1.0,
                                   low_open=True,
                                   high_open=True)
  if estimation.consistent_tree and not encoding.has_consistent_estimator:
    raise ValueError(f'consistent_tree only applies to method=\'tree\', not '
                     f'{encoding.name!r}.')
  if estimation.monotone and encoding.num_bins > hg.MAX_MONOTONE_BINS:
    raise ValueError(
        f"estimator={estimation.estimator.value!r} needs O(b^2) memory: num_bins <= "
        f"{hg.MAX_MONOTONE_BINS}, got {encoding.num_bins}; use "
        "estimator='paper'.")
  return _Options(lower_bound, upper_bound, quantiles, estimation)


# The validated read-out options (for `rounds.run_round`).
read_out_options = _read_out


def encode_value(method: Union[str, hg.Encoding], value, lower_bound: float,
                 upper_bound: float, num_bins: int) -> tf.Tensor:
  """A client's message (int32): the encoding of its value's bin (values
  outside the range, +-inf included, clipped into the end bins), zeros for
  NaN (the neighbouring relation's "no value")."""
  encoding = hg.encoding(method, num_bins)
  present = tf.logical_not(tf.math.is_nan(value))
  index = hg.bin_index(tf.where(present, value, tf.zeros_like(value)),
                       lower_bound, upper_bound, encoding.num_bins)
  vector = tf.cast(encoding.encode(index), tf.int32)
  return tf.where(present, vector, tf.zeros([encoding.length], tf.int32))


def server_read_out(params: QuantileParameters, options: _Options, noisy_sum, n,
                    on_wrap: secure_sum.OnWrap):
  """The server's read-out of a round from the decoded noisy sum and the
  public count n: (estimates, cdf, status code's name, noisy total, its
  stddev). The process's server computation, and that of the batched
  round (`tff_ddp.analytics.quantiles.rounds`): one code for both."""
  encoding = params.encoding
  num_bins = encoding.num_bins
  lower_bound, upper_bound = options.lower_bound, options.upper_bound
  quantiles = options.quantiles
  num_quantiles = len(quantiles)
  ring = params.ring_capacity()
  mechanism = params.aggregator_mechanism()
  may_wrap = ring.may_wrap(n)
  if on_wrap is secure_sum.OnWrap.RAISE:
    with tf.control_dependencies([ring.assertion(n)]):
      n = tf.identity(n)
      noisy_sum = tf.identity(noisy_sum)
  noisy_sum = tf.cast(noisy_sum, tf.float64)
  estimation = options.estimation
  cdf = encoding.cdf(noisy_sum,
                     n if estimation.exact_count else None,
                     consistent=estimation.consistent_tree,
                     monotone=estimation.monotone)
  values = hg.quantile_values(cdf,
                              quantiles,
                              lower_bound,
                              upper_bound,
                              num_bins,
                              interpolate=estimation.interpolate)
  total = encoding.estimated_total(noisy_sum)
  # The total's noise stddev: the per-coordinate stddev (proportional to
  # sqrt(n) for both mechanisms; n public) times ||t||_2 of the total.
  stddev = (mechanism.noise_stddev(1) * encoding.total_norm *
            tf.sqrt(tf.cast(n, tf.float64)))

  def code(name):
    return tf.constant(STATUSES.index(name), tf.int32)

  status = tf.where(
      tf.equal(n, 0), code('no_clients'),
      tf.where(
          may_wrap, code('sum_may_wrap'),
          tf.where(
              (total < estimation.min_total_stddevs * stddev) | (total <= 0),
              code('too_few_values'), code('ok'))))
  # Estimates with 'ok', and flagged ones with 'sum_may_wrap' (on_wrap=
  # 'flag': the caller handles them); NaN otherwise.
  usable = tf.equal(status, code('ok')) | tf.equal(status, code('sum_may_wrap'))
  nan = tf.fill([num_quantiles], tf.constant(np.nan, tf.float64))
  values = tf.where(usable, values, nan)
  cdf = tf.where(usable, cdf,
                 tf.fill([num_bins], tf.constant(np.nan, tf.float64)))
  return (values, cdf, tf.gather(tf.constant(list(STATUSES)),
                                 status), total, stddev)


def _build(params: QuantileParameters, options: _Options, *, rounds, on_wrap):
  encoding = params.encoding
  num_bins = encoding.num_bins
  lower_bound, upper_bound = options.lower_bound, options.upper_bound

  def client_encode(value):
    return encode_value(encoding, value, lower_bound, upper_bound, num_bins)

  # The histogram encoding runs inside the aggregator's client call (one
  # TF call per client and round instead of two).
  aggregator = params.factory.create_with_client_preprocessing(
      params.value_type, np.float32, client_encode)

  summed_type = aggregator.next.type_signature.result.result.member
  measurement_type = (aggregator.next.type_signature.result.measurements.member)

  @tff.tensorflow.computation(summed_type, measurement_type)
  def server_estimate(noisy_sum, measurements):
    n = tf.cast(measurements['participating_clients'], tf.int64)
    return server_read_out(params, options, noisy_sum, n, on_wrap)

  @tff.federated_computation
  def init_fn():
    return aggregator.initialize()

  @tff.tensorflow.computation(init_fn.type_signature.result.member)
  def within_budget(state):
    # The aggregator counts its rounds; this round is covered by the
    # calibration iff fewer than `rounds` came before it.
    return state['round'] < (rounds or 0)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, values):
    output = aggregator.next(state, values)
    estimates = tff.federated_map(server_estimate,
                                  (output.result, output.measurements))
    budget = ({} if rounds is None else dict(
        within_budget=tff.federated_map(within_budget, state)))
    measurements = tff.federated_zip(
        collections.OrderedDict(**budget,
                                status=tff.federated_map(
                                    tff.tensorflow.computation(lambda r: r[2]),
                                    estimates),
                                noisy_total=tff.federated_map(
                                    tff.tensorflow.computation(lambda r: r[3]),
                                    estimates),
                                noisy_total_stddev=tff.federated_map(
                                    tff.tensorflow.computation(lambda r: r[4]),
                                    estimates),
                                aggregator=output.measurements,
                                cdf=tff.federated_map(
                                    tff.tensorflow.computation(lambda r: r[1]),
                                    estimates)))
    result = tff.federated_map(tff.tensorflow.computation(lambda r: r[0]),
                               estimates)
    return tff.templates.MeasuredProcessOutput(output.state, result,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(init_fn, next_fn))
