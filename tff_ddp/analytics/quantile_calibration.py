"""Calibration of the aggregator behind a federated quantile process.

For a budget (epsilon, delta) over `rounds` rounds of
`expected_clients_per_round` clients, against the named adversary (zero-out
neighbours: one client's encoding replaced by zeros, as in the aggregators):

* discrete Gaussian: the integer scaling c is the largest the ring allows by
  the wrap-around condition of Theorems 1-2 of the quantile paper,
  M >= 2 + 2 c n + 2 n sqrt(2 sigma^2 log(K n b / delta)) (K = 8 flat, 16
  tree and Haar), with sigma = z Delta_2 c / sqrt(n) the scaled local noise;
  then the noise multiplier z is calibrated by the accountant for that c
  (`aggregators.calibrated`), which includes the tau term of the
  distributed DG. The encodings are integer vectors summed with the
  identity encoder and integer scaling, so no rounding happens and the
  sensitivity is c times the encoding's l2 norm, not the rounding-inflated
  bound. A large c makes sigma large, so tau is negligible (the paper
  instead fixes sigma^2 = 2 and varies c, where tau matters). If no c >= 1
  fits, the bits are refused with the number that works.
* Poisson binomial: m = the most trials the ring 2^bits holds for n clients
  (at most the sampler's limit), or the `num_trials` given (e.g. the
  frequency paper's m' = 3), theta calibrated by the accountant: Lemma 2
  composed over the l0 sensitivity of the encoding (1 flat, log2 b tree,
  log2 b + 1 Haar), not over all b coordinates as the paper's Prop. 4 does
  -- under zero-out neighbours a coordinate where the client's encoding is 0
  sends Binomial(m, 1/2) either way (`PoissonBinomialSumFactory(l0_clip=)`).

`parameters_for_noise` is the same construction for a *given* noise
multiplier instead of a budget (the largest c the ring allows for it), for
callers that account the quantile together with other releases -- DP-Delta-FL
composes it with the model update of the same round and calibrates both at
once (`tff_ddp.learning.privacy`).

The factories here are built with on_wrap='flag': the quantile process
checks the ring's capacity itself (`QuantileParameters.ring_capacity`) so
that a refusal names the process's own arguments.
"""

import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import discrete_gaussian as ddg_factory
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics import histograms as hg
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
from tff_ddp.mechanisms import poisson_binomial as pbm_mechanism
from tff_ddp.utils import checks

MECHANISMS = ('discrete_gaussian', 'poisson_binomial')
_RING_CONSTANT = {'flat': 8, 'tree': 16, 'haar': 16}


@dataclasses.dataclass(frozen=True)
class QuantileParameters:
  """What the calibration chose.

  Attributes:
    method, mechanism, num_bins, bits: the configuration.
    factory: the aggregation factory (DDG or cPBM).
    value_type: the encodings' type (int32 [encoding length]).
    epsilon: eps of all rounds at `delta` (<= the target), against
      `adversary`, zero-out neighbours.
    delta: the target delta.
    adversary: 'server' or 'release'.
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
  value_type: object
  epsilon: float
  delta: float
  adversary: str
  scaling: Optional[int]
  noise_multiplier: Optional[float]
  theta: Optional[float]
  num_trials: Optional[int]
  l2_sensitivity: float

  def aggregator_mechanism(self):
    """The mechanism (derived parameters) of the aggregator."""
    return self.factory.mechanism(self.value_type)

  def noise_stddev(self, num_clients: Optional[int] = None) -> float:
    """Noise stddev per coordinate of the noisy count sum (count units)."""
    return self.aggregator_mechanism().noise_stddev(num_clients)

  def ring_capacity(self, owner: str = 'build_quantile_process'
                    ) -> secure_sum.RingCapacity:
    """The most clients a round holds (the aggregator's ring, sized for
    expected_clients_per_round), with the advice a quantile user needs:
    more expected clients (bits alone would be re-calibrated into a larger
    scaling c, not into room for more clients)."""
    mechanism = self.aggregator_mechanism()
    return secure_sum.RingCapacity(
        capacity=self.factory.capacity(self.value_type).capacity,
        owner=owner,
        sized_for=(f'expected_clients_per_round='
                   f'{mechanism.expected_clients_per_round}, bits='
                   f'{self.bits}'))


def encoding_type(method: str, num_bins: int):
  """The clients' encoding type: int32 [encoding length]."""
  return tff.TensorType(np.int32, [hg.encoding_length(method, num_bins)])


def ring_needs(method, c, sigma, n, b, delta):
  """Right-hand side of the wrap-around condition of Theorems 1-2."""
  k = _RING_CONSTANT[method]
  return 2 + 2 * c * n + 2 * n * math.sqrt(
      2 * sigma**2 * math.log(k * n * b / delta))


def exact_scaling(c: int) -> int:
  """The largest c' <= c whose granularity 1/c' round-trips: 1/(1/c') == c'.

  The aggregator treats the encodings as integers (no rounding, sensitivity
  not inflated) only if 1/granularity is an integer in floating point; for
  a few c (e.g. 49: 1/(1/49) = 49 - 7e-15) it is not.
  """
  c = int(c)
  while c > 1 and 1.0 / (1.0 / c) != c:
    c -= 1
  return c


def largest_scaling(method: str, num_bins: int, num_clients: int,
                    noise_multiplier: float, delta: float, bits: int) -> int:
  """The largest integer c meeting the wrap-around condition for noise z.

  With sigma = z l2 c / sqrt(n) the condition of Theorems 1-2 is linear in
  c: M - 2 >= c (2 n + 2 sqrt(n) z l2 sqrt(2 log(K n b / delta))). May be 0
  (nothing fits).
  """
  l2 = hg.sensitivities(method, num_bins)[1]
  per_c = 2 * num_clients + 2 * math.sqrt(num_clients) * noise_multiplier * (
      l2 * math.sqrt(2 * math.log(
          _RING_CONSTANT[method] * num_clients * num_bins / delta)))
  return exact_scaling(int((2**bits - 2) // per_c))


def _ddg_factory(method, num_bins, n, bits, z, c, seed, rate=None):
  l2 = hg.sensitivities(method, num_bins)[1]
  return ddg_factory.DiscreteGaussianSumFactory(
      noise_multiplier=z, expected_clients_per_round=n, bits=bits,
      l2_clip=l2, beta=0.0, encoder='none', granularity=1.0 / c,
      linf_clip=1.0, seed=seed, client_sampling_rate=rate, on_wrap='flag')


def parameters_for_noise(
    method: str,
    num_bins: int,
    expected_clients_per_round: int,
    noise_multiplier: float,
    delta: float,
    bits: int = 18,
    adversary: str = 'server',
    seed: Optional[int] = None,
    client_sampling_rate: Optional[float] = None,
) -> QuantileParameters:
  """Discrete Gaussian parameters for a given noise multiplier (no budget).

  The central noise of the count sum is `noise_multiplier` times the
  encoding's l2 sensitivity (count units), as for the calibrated
  parameters; the integer scaling c is the largest the ring 2^bits allows
  for it by the wrap-around condition of Theorems 1-2 at failure
  probability `delta` (`largest_scaling`). `epsilon` of the result is that
  of ONE round at `delta` against `adversary` (unsampled, or self-sampled
  with `client_sampling_rate`: every one of the `expected_clients_per_round`
  clients in the sum keeps its encoding with a private coin, the factory's
  own) -- a description, not a budget: the caller accounts the rounds it
  runs.

  Raises:
    TypeError / ValueError: bad arguments, or no c >= 1 fits (the message
      gives the bits that work).
  """
  method = hg.canonical_method(method)
  hg.encoding_length(method, num_bins)  # validates method, bins
  n = checks.integer(expected_clients_per_round, 'expected_clients_per_round',
                     1, base.MAX_MODULUS - 1)
  z = checks.positive(noise_multiplier, 'noise_multiplier')
  delta = checks.real(delta, 'delta', 0.0, 1.0, low_open=True,
                      high_open=True)
  bits = checks.integer(bits, 'bits', 2, base.MAX_RING_BITS)
  adversary = checks.choice(adversary, 'adversary', accountant.ADVERSARIES)
  _, l2, _ = hg.sensitivities(method, num_bins)
  c = largest_scaling(method, num_bins, n, z, delta, bits)
  if c < 1:
    need = next((b for b in range(bits + 1, base.MAX_RING_BITS + 1)
                 if largest_scaling(method, num_bins, n, z, delta, b) >= 1),
                None)
    advice = (f'use bits >= {need}' if need is not None else
              'no ring fits: use fewer clients or less noise')
    raise ValueError(
        f'bits={bits} cannot hold {n} clients\' histograms with '
        f'noise_multiplier={z:g}: no integer scaling c >= 1 meets the '
        f'wrap-around condition of Theorems 1-2; {advice}.')
  value_type = encoding_type(method, num_bins)
  while True:
    # The factory's own ring check adds the rounding term n per sum
    # coordinate that Theorems 1-2 leave out; step c down until it agrees.
    factory = _ddg_factory(method, num_bins, n, bits, z, c, seed,
                           client_sampling_rate)
    try:
      event = factory.dp_event(value_type)
      break
    except ValueError:
      if c == 1:
        raise
      c = exact_scaling(max(1, min(c - 1, int(c * 0.99))))
  return QuantileParameters(
      method=method, mechanism='discrete_gaussian', num_bins=num_bins,
      bits=bits, factory=factory, value_type=value_type,
      epsilon=accountant.epsilon(event, delta, adversary)[0], delta=delta,
      adversary=adversary, scaling=c, noise_multiplier=z, theta=None,
      num_trials=None, l2_sensitivity=l2)


def quantile_parameters(
    method: str,
    mechanism: str,
    num_bins: int,
    expected_clients_per_round: int,
    epsilon: float,
    delta: float,
    bits: int = 18,
    rounds: int = 1,
    adversary: str = 'server',
    seed: Optional[int] = None,
    num_trials: Optional[int] = None,
) -> QuantileParameters:
  """Calibrates the aggregator for a quantile process (see module doc).

  `num_trials` (Poisson binomial only): the trials m per coordinate; None
  takes the most the ring holds. theta is calibrated either way.

  Raises:
    TypeError / ValueError: bad arguments, bits too small, or an unreachable
      target (the message says what works).
  """
  method = hg.canonical_method(method)
  hg.encoding_length(method, num_bins)  # validates method, bins
  mechanism = checks.choice(mechanism, 'mechanism', MECHANISMS)
  n = checks.integer(expected_clients_per_round, 'expected_clients_per_round',
                     1, base.MAX_MODULUS - 1)
  bits = checks.integer(bits, 'bits', 2, base.MAX_RING_BITS)
  epsilon = checks.positive(epsilon, 'epsilon')
  delta = checks.real(delta, 'delta', 0.0, 1.0, low_open=True,
                      high_open=True)
  rounds = checks.integer(rounds, 'rounds', 1)
  adversary = checks.choice(adversary, 'adversary', accountant.ADVERSARIES)
  _, l2, l0 = hg.sensitivities(method, num_bins)
  value_type = encoding_type(method, num_bins)
  common = dict(target_epsilon=epsilon, target_delta=delta, rounds=rounds,
                adversary=adversary, seed=seed, on_wrap='flag')
  if num_trials is not None and mechanism != 'poisson_binomial':
    raise ValueError("num_trials applies to mechanism='poisson_binomial' "
                     f'only, not {mechanism!r}.')
  if mechanism == 'poisson_binomial':
    m = min((2**bits - 1) // n, pbm_mechanism.MAX_NUM_TRIALS)
    if m < 1:
      raise ValueError(
          f'bits={bits} cannot hold {n} clients: the ring needs 2^bits > n '
          f'm with m >= 1; use bits >= {int(n).bit_length()}.')
    if num_trials is not None:
      num_trials = checks.integer(num_trials, 'num_trials', 1)
      if num_trials > m:
        raise ValueError(
            f'num_trials={num_trials} does not fit the ring: 2^bits = '
            f'2^{bits} holds at most {m} trials for {n} clients; use '
            f'num_trials <= {m} or bits >= '
            f'{int(n * num_trials).bit_length()}.')
      m = num_trials
    result = calibrated.poisson_binomial(
        value_type, parameter='theta', num_trials=m,
        expected_clients_per_round=n, l2_clip=l2, encoder='none',
        divisor='linf', linf_clip=1.0, l0_clip=int(l0), **common)
    return QuantileParameters(
        method=method, mechanism=mechanism, num_bins=num_bins, bits=bits,
        factory=result.factory, value_type=value_type,
        epsilon=result.epsilon, delta=delta, adversary=adversary,
        scaling=None, noise_multiplier=None, theta=result.value,
        num_trials=m, l2_sensitivity=l2)

  # Discrete Gaussian. A first z from the continuous Gaussian of the same
  # sensitivity (tau = 0), with a margin for tau.
  z_gauss = calibration.calibrate_gaussian(
      epsilon, delta, rounds=rounds, adversary=adversary).value

  def fit(ring_bits):
    """(QuantileParameters or None, last calibration error)."""
    modulus = 2**ring_bits

    def largest_c(z):
      return largest_scaling(method, num_bins, n, z, delta, ring_bits)

    c = largest_c(1.1 * z_gauss)
    last_error = None
    for _ in range(40):
      if c < 1:
        break
      try:
        result = calibrated.discrete_gaussian(
            value_type, expected_clients_per_round=n, bits=ring_bits,
            l2_clip=l2, beta=0.0, encoder='none', granularity=1.0 / c,
            linf_clip=1.0, **common)
      except ValueError as e:
        last_error = e
        c = exact_scaling(int(c * 0.9))
        continue
      sigma = ddg_mechanism.local_stddev(result.value, l2 * c, n)
      if ring_needs(method, c, sigma, n, num_bins, delta) <= modulus:
        return QuantileParameters(
            method=method, mechanism=mechanism, num_bins=num_bins,
            bits=ring_bits, factory=result.factory, value_type=value_type,
            epsilon=result.epsilon, delta=delta, adversary=adversary,
            scaling=c, noise_multiplier=result.value, theta=None,
            num_trials=None, l2_sensitivity=l2), None
      c = exact_scaling(min(c - 1, largest_c(result.value)))
    return None, last_error

  found, last_error = fit(bits)
  if found is not None:
    return found
  # The smallest ring that works, found the same way.
  need = next((b for b in range(bits + 1, base.MAX_RING_BITS + 1)
               if fit(b)[0] is not None), None)
  advice = (f'use bits >= {need}' if need is not None else
            f'no ring up to 2^{base.MAX_RING_BITS} fits: use fewer clients '
            'or a larger epsilon')
  detail = f' (last calibration error: {last_error})' if last_error else ''
  raise ValueError(
      f'bits={bits} is too small for {n} clients at epsilon={epsilon}: no '
      f'integer scaling c >= 1 meets the wrap-around condition of Theorems '
      f'1-2; {advice}.{detail}')
