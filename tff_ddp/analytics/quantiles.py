"""Federated quantiles with distributed DP: a TFF MeasuredProcess.

Private federated quantiles (shared/papers/dp-federated-quantiles.txt):
Algorithm 1 (flat histograms), Algorithm 2 (hierarchical histograms),
Theorems 1-2 (privacy, ring size); the frequency estimation paper's §4.2 for
the Haar variant. The math is in `tff_ddp.analytics.histograms`; the noise
and the secure sum are the aggregators of `tff_ddp.aggregators`, composed:

  client value --bin, encode (flat / tree / Haar)--> count vector
    --DiscreteGaussianSumFactory(rotation='none', granularity=1/c) or
      PoissonBinomialSumFactory(encoder='none', scaling='linf')-->
  noisy sum at the server --CDF estimate, eq. 1--> quantiles

Calibration (`quantile_parameters`), for a budget (epsilon, delta) over
`rounds` rounds of `expected_clients_per_round` clients (zero-out
neighbours: one client's encoding replaced by zeros, as in the aggregators):

* discrete Gaussian: the integer scaling c is the largest the ring allows by
  the wrap-around condition of Theorems 1-2,
  M >= 2 + 2 c n + 2 n sqrt(2 sigma^2 log(K n b / delta)) (K = 8 flat, 16
  tree and Haar), with sigma = z Delta_2 c / sqrt(n) the scaled local noise;
  then the noise multiplier z is calibrated by the accountant for that c
  (`aggregators.calibrated`), which includes the tau term of the
  distributed DG; a large c makes sigma large, so tau is negligible (the
  paper instead fixes sigma^2 = 2 and varies c, where tau matters). If no
  c >= 1 fits, the bits are refused with the number that works.
* Poisson binomial: m = the most trials the ring 2^bits holds for n clients,
  theta calibrated by the accountant: Lemma 2 composed over the l0
  sensitivity of the encoding (1 flat, log2 b tree, log2 b + 1 Haar), not
  over all b coordinates as the paper's Prop. 4 does -- under zero-out
  neighbours a coordinate where the client's encoding is 0 sends
  Binomial(m, 1/2) either way (`PoissonBinomialSumFactory(l0_clip=...)`).

Inputs outside [lower, upper] are clipped into the first / last bin
(not counted: a count would need its own privacy budget). A non-finite
value is sent as a NaN vector, which the aggregator replaces by zeros and
counts (`nonfinite_clients`).
"""

import collections
import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import calibration
from tff_ddp.aggregators import calibrated
from tff_ddp.analytics import histograms as hg

MECHANISMS = ('discrete_gaussian', 'poisson_binomial')
ESTIMATORS = ('paper', 'monotone', 'interpolate')
_RING_CONSTANT = {'flat': 8, 'tree': 16, 'haar': 16}


@dataclasses.dataclass(frozen=True)
class QuantileParameters:
  """What the calibration chose.

  Attributes:
    method, mechanism, num_bins, bits: the configuration.
    factory: the aggregation factory (DDG or cPBM).
    epsilon: eps of all rounds at `delta` (<= the target).
    delta: the target delta.
    scaling: c = 1/gamma (DDG) or None.
    noise_multiplier: z (DDG) or None; the central noise stddev in count
      units is z * l2_sensitivity.
    theta, num_trials: cPBM parameters or None.
    l2_sensitivity: of one client's encoding.
  """

  method: str
  mechanism: str
  num_bins: int
  bits: int
  factory: object
  epsilon: float
  delta: float
  scaling: Optional[int]
  noise_multiplier: Optional[float]
  theta: Optional[float]
  num_trials: Optional[int]
  l2_sensitivity: float


def _ring_needs(method, c, sigma, n, b, delta):
  """Right-hand side of the wrap-around condition of Theorems 1-2."""
  k = _RING_CONSTANT[method]
  return 2 + 2 * c * n + 2 * n * math.sqrt(
      2 * sigma**2 * math.log(k * n * b / delta))


def quantile_parameters(
    method: str,
    mechanism: str,
    num_bins: int,
    expected_clients_per_round: int,
    epsilon: float,
    delta: float,
    bits: int = 18,
    rounds: int = 1,
    seed: Optional[int] = None,
) -> QuantileParameters:
  """Calibrates the aggregator for a quantile process (see module doc).

  Raises:
    ValueError: bad arguments, bits too small, or an unreachable target.
  """
  method = hg.canonical_method(method)
  length = hg.encoding_length(method, num_bins)  # validates method, bins
  if mechanism not in MECHANISMS:
    raise ValueError(f'mechanism must be one of {MECHANISMS}, got '
                     f'{mechanism!r}.')
  n = expected_clients_per_round
  if not isinstance(n, (int, np.integer)) or n < 1:
    raise ValueError(
        f'expected_clients_per_round must be an integer >= 1, got {n!r}.')
  if not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 30:
    raise ValueError(f'bits must be an integer in [2, 30], got {bits!r}.')
  _, l2, l0 = hg.sensitivities(method, num_bins)
  value_type = tff.TensorType(np.float32, [length])
  common = dict(target_epsilon=epsilon, target_delta=delta, rounds=rounds)
  if mechanism == 'poisson_binomial':
    m = (2**bits - 1) // n
    if m < 1:
      raise ValueError(
          f'bits={bits} cannot hold {n} clients: the ring needs 2^bits > n '
          f'm with m >= 1; use bits >= {int(n).bit_length()}.')
    result = calibrated.poisson_binomial(
        value_type, parameter='theta', num_trials=m,
        expected_clients_per_round=n, l2_clip=l2, encoder='none',
        scaling='linf', linf_clip=1.0, l0_clip=int(l0), seed=seed,
        **common)
    return QuantileParameters(
        method=method, mechanism=mechanism, num_bins=num_bins, bits=bits,
        factory=result.factory, epsilon=result.epsilon, delta=delta,
        scaling=None, noise_multiplier=None, theta=result.value,
        num_trials=m, l2_sensitivity=l2)

  # Discrete Gaussian. A first z from the continuous Gaussian of the same
  # sensitivity (tau = 0), with a margin for tau and the rounding bound.
  z_gauss = calibration.calibrate(
      'gaussian', 'noise_multiplier', {}, epsilon, delta,
      rounds=rounds).value

  def fit(ring_bits):
    """(QuantileParameters or None, last calibration error)."""
    modulus = 2**ring_bits

    def largest_c(z):
      per_c = 2 * n + 2 * math.sqrt(n) * z * l2 * math.sqrt(
          2 * math.log(_RING_CONSTANT[method] * n * num_bins / delta))
      return int((modulus - 2) // per_c)

    c = largest_c(1.1 * z_gauss)
    last_error = None
    for _ in range(40):
      if c < 1:
        break
      try:
        result = calibrated.discrete_gaussian(
            value_type, expected_clients_per_round=n, bits=ring_bits,
            l2_clip=l2, beta=math.exp(-0.5), rotation='none',
            granularity=1.0 / c, linf_clip=1.0, seed=seed, **common)
      except ValueError as e:
        last_error = e
        c = int(c * 0.9)
        continue
      sigma = result.value * l2 * c / math.sqrt(n)
      if _ring_needs(method, c, sigma, n, num_bins, delta) <= modulus:
        return QuantileParameters(
            method=method, mechanism=mechanism, num_bins=num_bins,
            bits=ring_bits, factory=result.factory, epsilon=result.epsilon,
            delta=delta, scaling=c, noise_multiplier=result.value,
            theta=None, num_trials=None, l2_sensitivity=l2), None
      c = min(c - 1, largest_c(result.value))
    return None, last_error

  found, last_error = fit(bits)
  if found is not None:
    return found
  # The smallest ring that works, found the same way.
  need = next((b for b in range(bits + 1, 31) if fit(b)[0] is not None),
              None)
  advice = (f'use bits >= {need}' if need is not None else
            'no ring up to 2^30 fits: use fewer clients or a larger epsilon')
  detail = f' (last calibration error: {last_error})' if last_error else ''
  raise ValueError(
      f'bits={bits} is too small for {n} clients at epsilon={epsilon}: no '
      f'integer scaling c >= 1 meets the wrap-around condition of Theorems '
      f'1-2; {advice}.{detail}')


def build_quantile_process(
    method: str,
    mechanism: str,
    lower_bound: float,
    upper_bound: float,
    num_bins: int,
    quantiles: Sequence[float],
    expected_clients_per_round: int,
    epsilon: float,
    delta: float,
    count: str = 'estimated',
    estimator: str = 'paper',
    consistent_tree: bool = False,
    bits: int = 18,
    rounds: int = 1,
    seed: Optional[int] = None,
) -> tff.templates.MeasuredProcess:
  """A process estimating `quantiles` of one float per client.

  Args:
    method: 'flat' (Algorithm 1), 'hierarchical' or its alias 'tree'
      (Algorithm 2) or 'haar' (discrete Haar wavelet); hierarchical and
      Haar need num_bins a power of two.
    mechanism: 'discrete_gaussian' or 'poisson_binomial'.
    lower_bound, upper_bound: the range; values outside are clipped.
    num_bins: b >= 2.
    quantiles: levels p in (0, 1); the result has one estimate each, in
      this order.
    expected_clients_per_round: n, the clients of each round.
    epsilon, delta: the budget of all `rounds` rounds.
    count: 'estimated' (Algorithm 1 option 1: normalise by the noisy
      total) or 'exact' (option 2: by the number of participants with a
      finite value, counted through the secure sum).
    estimator: 'paper' (eq. 1 on the raw CDF), 'monotone' (isotonic
      projection of the CDF first) or 'interpolate' (isotonic, then linear
      interpolation inside the bin where the CDF reaches p).
    consistent_tree: for 'tree', the least-squares consistent tree first.
    bits: log2 of the ring (the paper uses 18).
    rounds: rounds the budget covers.
    seed: for tests only (see the aggregators).

  Returns:
    A `tff.templates.MeasuredProcess`: `next(state, values)` with `values`
    one float32 per client returns the estimates in `result` (float64
    [len(quantiles)]) and measurements `aggregator` (the aggregator's,
    including the round's `dp_event`), `cdf` (the estimated CDF at the
    right bin edges) and `within_budget` (False from round `rounds` + 1 on:
    the (epsilon, delta) guarantee covers the first `rounds` rounds only;
    compose the measured events with `tff_ddp.accounting.RdpAccountant` for
    the cost of more).
  """
  method = hg.canonical_method(method)
  if not (math.isfinite(lower_bound) and math.isfinite(upper_bound)
          and lower_bound < upper_bound):
    raise ValueError('need finite lower_bound < upper_bound, got '
                     f'{lower_bound}, {upper_bound}.')
  quantiles = [float(p) for p in quantiles]
  if not quantiles or not all(0 < p < 1 for p in quantiles):
    raise ValueError(f'quantiles must be levels in (0, 1), got {quantiles}.')
  if count not in hg.COUNTS:
    raise ValueError(f'count must be one of {hg.COUNTS}, got {count!r}.')
  if estimator not in ESTIMATORS:
    raise ValueError(
        f'estimator must be one of {ESTIMATORS}, got {estimator!r}.')
  if consistent_tree and method != 'tree':
    raise ValueError("consistent_tree only applies to method='tree'.")
  params = quantile_parameters(method, mechanism, num_bins,
                               expected_clients_per_round, epsilon, delta,
                               bits, rounds, seed)
  length = hg.encoding_length(method, num_bins)
  vector_type = tff.TensorType(np.float32, [length])
  aggregator = params.factory.create(vector_type)

  @tff.tensorflow.computation(np.float32)
  def client_encode(value):
    finite = tf.math.is_finite(value)
    index = hg.bin_index(tf.where(finite, value, 0.0), lower_bound,
                         upper_bound, num_bins)
    vector = tf.cast(hg.encode(method, index, num_bins), tf.float32)
    return tf.where(finite, vector, tf.fill([length], np.float32(np.nan)))

  summed_type = aggregator.next.type_signature.result.result.member

  @tff.tensorflow.computation(summed_type, np.int64)
  def server_estimate(noisy_sum, participants):
    cdf = hg.estimate_cdf(method, noisy_sum, num_bins, count,
                          num_clients=participants,
                          consistent=consistent_tree,
                          monotone=estimator != 'paper')
    values = hg.quantile_values(cdf, quantiles, lower_bound, upper_bound,
                                num_bins,
                                interpolate=estimator == 'interpolate')
    return values, cdf

  measurement_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(measurement_type)
  def _finite_participants(m):
    # Clients with a finite value: the ones whose one-hot is in the sum.
    return tf.cast(m['participating_clients'] - m['nonfinite_clients'],
                   tf.int64)

  @tff.federated_computation
  def init_fn():
    return aggregator.initialize()

  @tff.tensorflow.computation(init_fn.type_signature.result.member)
  def _within_budget(state):
    # The aggregator counts its rounds; this round is covered by the
    # calibration iff fewer than `rounds` came before it.
    return state['round'] < rounds

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, values):
    encoded = tff.federated_map(client_encode, values)
    output = aggregator.next(state, encoded)
    participants = tff.federated_map(_finite_participants,
                                     output.measurements)
    estimates = tff.federated_map(server_estimate,
                                  (output.result, participants))
    measurements = tff.federated_zip(collections.OrderedDict(
        within_budget=tff.federated_map(_within_budget, state),
        aggregator=output.measurements,
        cdf=tff.federated_map(
            tff.tensorflow.computation(lambda r: r[1]), estimates)))
    result = tff.federated_map(
        tff.tensorflow.computation(lambda r: r[0]), estimates)
    return tff.templates.MeasuredProcessOutput(output.state, result,
                                               measurements)

  return tff.templates.MeasuredProcess(init_fn, next_fn)
