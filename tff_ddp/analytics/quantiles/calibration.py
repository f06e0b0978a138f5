"""Calibration of the aggregator behind a federated quantile process.

For a budget (epsilon, delta) over `rounds` rounds of
`expected_clients_per_round` clients, against the named adversary, for a
histogram encoding (`tff_ddp.analytics.quantiles.encodings`): the discrete
Gaussian's least noise multiplier with the largest integer scaling its ring
allows (the wrap-around condition of Theorems 1-2 of the quantile paper and
the DDG's own ring check: `largest_scaling`, `ring_holds`), or the Poisson
binomial's theta by Lemma 2 composed over the encoding's l0 sensitivity.
`quantile_parameters` calibrates to a budget, `parameters_for_noise` to a
given noise multiplier; both return a `QuantileParameters`.

Both constructions step by step: docs/notes/histogram_encodings.md.
"""

import dataclasses
import math
from typing import ClassVar, Optional, Union

import numpy as np
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import pld_accountant
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import discrete_gaussian as ddg_factory
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
from tff_ddp.mechanisms import poisson_binomial as pbm_mechanism
from tff_ddp.utils import checks
from tff_ddp.utils import search

MECHANISMS = ('discrete_gaussian', 'poisson_binomial')
# The DDG factories' wrap-around probability per sum coordinate (the
# factory's default), passed to them and to the ring question alike.
_MODCLIP_PROB = 1e-4
# The lower end of the noise multipliers the DDG calibration searches.
_MIN_NOISE_MULTIPLIER = 1e-3


@dataclasses.dataclass(frozen=True)
class DdgNoise:
  """The DDG's noise (arXiv:2102.06387): scaling c = 1/gamma, multiplier z."""

  kind: ClassVar[base.Kind] = base.Kind.DISCRETE_GAUSSIAN
  scaling: int
  noise_multiplier: float

  def describe(self) -> str:
    return f'c={self.scaling} z={self.noise_multiplier:.3f}'


@dataclasses.dataclass(frozen=True)
class CpbmNoise:
  """The cPBM's noise ("Federated frequency estimation", Alg. 3): theta, m."""

  kind: ClassVar[base.Kind] = base.Kind.POISSON_BINOMIAL
  theta: float
  num_trials: int

  def describe(self) -> str:
    return f'theta={self.theta:.4f} m={self.num_trials}'


@dataclasses.dataclass(frozen=True)
class QuantileParameters:
  """What the calibration chose.

  Attributes:
    encoding: the histogram encoding (`encodings.Flat`, `Tree`, `Haar`);
      `method`, `num_bins` and `l2_sensitivity` are its name, bins and l2.
    noise: the mechanism's noise, a `DdgNoise` (the central noise stddev in
      count units is z * l2_sensitivity) or a `CpbmNoise`; `mechanism` is
      its `base.Kind`.
    bits: log2 of the ring.
    factory: the aggregation factory (DDG or cPBM).
    value_type: the encodings' type (int32 [encoding length]).
    epsilon: eps of all rounds at `delta` (<= the target), against
      `adversary`, zero-out neighbours.
    delta: the target delta.
    adversary: an `Adversary` ('server' or 'release' at the entry points).
  """

  encoding: hg.Encoding
  noise: Union[DdgNoise, CpbmNoise]
  bits: int
  factory: object
  value_type: object
  epsilon: float
  delta: float
  adversary: accountant.Adversary

  @property
  def mechanism(self) -> base.Kind:
    """The noise's mechanism (DISCRETE_GAUSSIAN or POISSON_BINOMIAL)."""
    return self.noise.kind

  @property
  def method(self) -> str:
    """The encoding's name ('flat', 'tree' or 'haar')."""
    return self.encoding.name

  @property
  def num_bins(self) -> int:
    return self.encoding.num_bins

  @property
  def l2_sensitivity(self) -> float:
    """Of one client's encoding."""
    return self.encoding.l2

  def aggregator_mechanism(self):
    """The mechanism (derived parameters) of the aggregator."""
    return self.factory.mechanism(self.value_type)

  def noise_stddev(self, num_clients: Optional[int] = None) -> float:
    """Noise stddev per coordinate of the noisy count sum (count units)."""
    return self.aggregator_mechanism().noise_stddev(num_clients)

  def ring_capacity(self,
                    owner: str = 'build_quantile_process'
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


def encoding_type(method: Union[str, hg.Encoding],
                  num_bins: Optional[int] = None):
  """The clients' encoding type: int32 [encoding length]."""
  return tff.TensorType(np.int32, [hg.encoding(method, num_bins).length])


def _encoding(value, owner) -> hg.Encoding:
  """`value` if it is an encoding (these helpers take the object the
  entry points resolved, not a method's name)."""
  if not isinstance(value, hg.Encoding):
    raise TypeError(f'{owner} takes an encodings.Encoding '
                    f'(encodings.encoding(method, num_bins)), got {value!r}.')
  return value


def ring_needs(encoding: hg.Encoding, c, sigma, n, delta):
  """Right-hand side of the wrap-around condition of Theorems 1-2."""
  k = _encoding(encoding, 'ring_needs').ring_constant
  return 2 + 2 * c * n + 2 * n * math.sqrt(
      2 * sigma**2 * math.log(k * n * encoding.num_bins / delta))


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


def _theorem_scaling(encoding, num_clients, noise_multiplier, delta, bits):
  """The largest c meeting Theorems 1-2 for noise z: with
  sigma = z l2 c / sqrt(n) the condition is linear in c,
  M - 2 >= c (2 n + 2 sqrt(n) z l2 sqrt(2 log(K n b / delta)))."""
  per_c = 2 * num_clients + 2 * math.sqrt(num_clients) * noise_multiplier * (
      encoding.l2 * math.sqrt(2 * math.log(
          encoding.ring_constant * num_clients * encoding.num_bins / delta)))
  return int((2**bits - 2) // per_c)


def ring_holds(encoding: hg.Encoding, num_clients: int, noise_multiplier: float,
               scaling: int, delta: float, bits: int) -> bool:
  """Whether the ring 2^bits holds integer scaling c at noise z: Theorems
  1-2 (the encoding's ring constant) and the DDG mechanism's own ring check
  for granularity 1/c, asked of it (`granularity_fits`). Decreasing in z
  and in c."""
  return scaling <= _theorem_scaling(
      encoding, num_clients, noise_multiplier, delta,
      bits) and (ddg_mechanism.granularity_fits(1.0 / scaling,
                                                encoding.l2,
                                                noise_multiplier,
                                                num_clients,
                                                bits,
                                                linf_clip=1.0,
                                                modclip_prob=_MODCLIP_PROB))


def largest_scaling(encoding: hg.Encoding, num_clients: int,
                    noise_multiplier: float, delta: float, bits: int) -> int:
  """The largest integer c the ring 2^bits allows for noise z (`ring_holds`),
  stepped down to a c whose reciprocal round-trips (`exact_scaling`). May
  be 0."""
  encoding = _encoding(encoding, 'largest_scaling')
  theorem = _theorem_scaling(encoding, num_clients, noise_multiplier, delta,
                             bits)
  mechanism = ddg_mechanism.largest_integer_scaling(encoding.l2,
                                                    noise_multiplier,
                                                    num_clients,
                                                    bits,
                                                    linf_clip=1.0,
                                                    modclip_prob=_MODCLIP_PROB)
  return exact_scaling(min(theorem, mechanism))


def _largest_noise(encoding, num_clients, scaling, delta, bits) -> float:
  """The largest z at which the ring holds scaling c (`ring_holds`; to
  float precision by bisection: it is decreasing in z); 0 if not even
  z = 0 fits."""

  def holds(z):
    return ring_holds(encoding, num_clients, z, scaling, delta, bits)

  if not holds(0.0):
    return 0.0
  low, high = 0.0, 1.0
  while holds(high):
    low, high = high, 2.0 * high
  return search.boundary(holds, low, high, 1e-13)


def _ddg_factory(encoding, n, bits, z, c, seed, rate=None):
  # l0_clip: the encoding touches l0 bins (flat 1, tree and Haar one per
  # level), so the accountant composes that many coordinates.
  return ddg_factory.DiscreteGaussianSumFactory(ddg_factory.Request(
      l2_clip=encoding.l2,
      noise_multiplier=z,
      expected_clients_per_round=n,
      bits=bits,
      modclip_prob=_MODCLIP_PROB,
      beta=0.0,
      granularity=1.0 / c,
      linf_clip=1.0,
      l0_clip=int(encoding.l0)),
                                                encoder='none',
                                                seed=seed,
                                                client_sampling_rate=rate,
                                                on_wrap='flag')


def _common(method, num_bins, expected_clients_per_round, delta, bits,
            adversary):
  """The validated (encoding, n, delta, bits, adversary) of an entry point."""
  encoding = hg.encoding(method, num_bins)
  n = checks.integer(expected_clients_per_round, 'expected_clients_per_round',
                     1, base.MAX_MODULUS - 1)
  delta = checks.probability(delta, 'delta', allow_one=False)
  bits = checks.integer(bits, 'bits', 2, base.MAX_RING_BITS)
  adversary = accountant.as_adversary(adversary)
  return encoding, n, delta, bits, adversary


def parameters_for_noise(
    method: Union[str, hg.Encoding],
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
  for it (`largest_scaling`) at failure probability `delta`. `epsilon` of
  the result is that of ONE round at `delta` against `adversary`
  (unsampled, or self-sampled with `client_sampling_rate`: every one of the
  `expected_clients_per_round` clients in the sum keeps its encoding with a
  private coin, the factory's own) -- a description, not a budget: the
  caller accounts the rounds it runs.

  Args:
    method: 'flat', 'tree' (or 'hierarchical') or 'haar', or a
      `encodings.Encoding` of `num_bins` bins.
    num_bins, expected_clients_per_round, noise_multiplier, delta, bits,
      adversary, seed, client_sampling_rate: as above.

  Raises:
    TypeError / ValueError: bad arguments, or no c >= 1 fits (the message
      gives the bits that work).
  """
  encoding, n, delta, bits, adversary = _common(method, num_bins,
                                                expected_clients_per_round,
                                                delta, bits, adversary)
  z = checks.positive(noise_multiplier, 'noise_multiplier')
  c = largest_scaling(encoding, n, z, delta, bits)
  if c < 1:
    need = next((b for b in range(bits + 1, base.MAX_RING_BITS + 1)
                 if largest_scaling(encoding, n, z, delta, b) >= 1), None)
    advice = (f'use bits >= {need}' if need is not None else
              'no ring fits: use fewer clients or less noise')
    raise ValueError(
        f'bits={bits} cannot hold {n} clients\' histograms with '
        f'noise_multiplier={z:g}: no integer scaling c >= 1 meets the '
        f'wrap-around condition of Theorems 1-2; {advice}.')
  value_type = encoding_type(encoding)
  factory = _ddg_factory(encoding, n, bits, z, c, seed, client_sampling_rate)
  return QuantileParameters(
      encoding, DdgNoise(c, z), bits, factory, value_type,
      pld_accountant.epsilon(factory.dp_event(value_type), delta, adversary)[0],
      delta, adversary)


@dataclasses.dataclass(frozen=True)
class QuantileSetting:
  """What a quantile process's aggregator is calibrated to (as
  `frequency.setting.FrequencySetting` for the frequency protocols): one
  value, validated at construction, before anything is built or drawn.

  Attributes:
    expected_clients_per_round: n, the clients of each round.
    epsilon, delta: the budget of all `rounds` rounds, against `adversary`
      ('server', the default, or 'release'; an `accounting.Adversary`
      after construction), zero-out neighbours.
    bits: log2 of the ring (the quantile paper uses 18).
    rounds: rounds the budget covers.
    num_trials: Poisson binomial only: trials m per coordinate (None: the
      most the ring holds); theta is calibrated to the budget either way.
    seed: for tests only (see the aggregators).
  """

  expected_clients_per_round: int
  epsilon: float
  delta: float
  bits: int = 18
  rounds: int = 1
  adversary: str = 'server'
  num_trials: Optional[int] = None
  seed: Optional[int] = None

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    set_(
        'expected_clients_per_round',
        checks.integer(self.expected_clients_per_round,
                       'expected_clients_per_round', 1, base.MAX_MODULUS - 1))
    set_('epsilon', checks.positive(self.epsilon, 'epsilon'))
    set_('delta', checks.probability(self.delta, 'delta', allow_one=False))
    set_('bits', checks.integer(self.bits, 'bits', 2, base.MAX_RING_BITS))
    set_('rounds', checks.integer(self.rounds, 'rounds', 1))
    set_('adversary', accountant.as_adversary(self.adversary))
    set_('num_trials', checks.optional_integer(self.num_trials, 'num_trials',
                                               1))
    set_('seed', checks.seed(self.seed))


def quantile_parameters(
    method: Union[str, hg.Encoding],
    mechanism: str,
    num_bins: int,
    setting: QuantileSetting,
) -> QuantileParameters:
  """Calibrates the aggregator for a quantile process (module docstring;
  step by step: docs/notes/histogram_encodings.md, section on calibration.py).

  Args:
    method: 'flat', 'tree' (or 'hierarchical') or 'haar', or a
      `encodings.Encoding` of `num_bins` bins.
    mechanism: 'discrete_gaussian' or 'poisson_binomial'.
    num_bins: b, the histogram's bins.
    setting: a `QuantileSetting`: the clients per round, the budget and
      the ring.

  Raises:
    TypeError / ValueError: bad arguments, bits too small, or an unreachable
      target (the message says what works).
  """
  setting = as_setting(setting, 'quantile_parameters')
  encoding = hg.encoding(method, num_bins)
  calibrate = _CALIBRATORS[checks.choice(mechanism, 'mechanism', MECHANISMS)]
  return calibrate(encoding, setting)


def as_setting(value, owner: str) -> QuantileSetting:
  """`value` if it is a `QuantileSetting`; else a TypeError saying how to
  make one (`owner` names the entry point)."""
  return checks.instance(
      value, QuantileSetting,
      f'{owner} takes setting=quantiles.QuantileSetting('
      'expected_clients_per_round, epsilon, delta, bits=18, rounds=1, '
      "adversary='server', num_trials=None, seed=None)")


def _poisson_binomial(encoding, setting: QuantileSetting):
  """`quantile_parameters` for cPBM (docs/notes/histogram_encodings.md,
  section on calibration.py, "Poisson binomial")."""
  n, bits = setting.expected_clients_per_round, setting.bits
  num_trials = setting.num_trials
  m = pbm_mechanism.max_num_trials(n, bits)
  if m < 1:
    raise ValueError(
        f'bits={bits} cannot hold {n} clients: the ring needs 2^bits > n '
        f'm with m >= 1; use bits >= {int(n).bit_length()}.')
  if num_trials is not None:
    if num_trials > m:
      raise ValueError(
          f'num_trials={num_trials} does not fit the ring: 2^bits = '
          f'2^{bits} holds at most {m} trials for {n} clients; use '
          f'num_trials <= {m} or bits >= '
          f'{int(n * num_trials).bit_length()}.')
    m = num_trials
  _, l2, l0 = encoding.sensitivities()
  value_type = encoding_type(encoding)
  result = calibrated.poisson_binomial(value_type,
                                       target_epsilon=setting.epsilon,
                                       target_delta=setting.delta,
                                       parameter='theta',
                                       rounds=setting.rounds,
                                       adversary=setting.adversary,
                                       num_trials=m,
                                       expected_clients_per_round=n,
                                       l2_clip=l2,
                                       encoder='none',
                                       divisor='linf',
                                       linf_clip=1.0,
                                       l0_clip=int(l0),
                                       seed=setting.seed,
                                       on_wrap='flag')
  return QuantileParameters(encoding, CpbmNoise(result.value, m), bits,
                            result.factory, value_type, result.epsilon,
                            setting.delta, setting.adversary)


def _discrete_gaussian(encoding, setting: QuantileSetting):
  """`quantile_parameters` for the DDG: the least z meeting the budget, with
  the largest c its ring allows.

  A larger c at the same z only lowers epsilon (the scaled noise z l2 c /
  sqrt(n) grows, so the tau term of the DDG shrinks), so for each c the
  best z is the largest the ring allows, z_max(c) (`_largest_noise`); and
  epsilon(z_max(c), c) grows with c (z_max(c) falls, and so does the scaled
  noise there, the ring being full). The least noise is therefore at the
  largest c* meeting the budget at z_max(c*) -- a monotone search over c --
  and is the least z <= z_max(c*) meeting it at c* (epsilon falls with z).
  No z below it meets the budget with any c the ring allows, and c* =
  `largest_scaling(z)`: `parameters_for_noise(z)` builds the same factory.
  """
  if setting.num_trials is not None:
    raise ValueError("num_trials applies to mechanism='poisson_binomial' "
                     "only, not 'discrete_gaussian'.")
  n, bits, epsilon = (setting.expected_clients_per_round, setting.bits,
                      setting.epsilon)
  delta, adversary = setting.delta, setting.adversary
  budget = _DdgBudget(encoding, n, epsilon, delta, setting.rounds, adversary,
                      setting.seed)
  c = budget.largest_scaling(bits)
  if c < 1:
    # The smallest ring that works (a larger ring holds a larger c at every
    # z, so meeting the budget is monotone in the bits).
    need = next((b for b in range(bits + 1, base.MAX_RING_BITS + 1)
                 if budget.meets(b, 1)), None)
    advice = (f'use bits >= {need}' if need is not None else
              f'no ring up to 2^{base.MAX_RING_BITS} fits: use fewer clients '
              'or a larger epsilon')
    raise ValueError(
        f'bits={bits} is too small for {n} clients at epsilon={epsilon}: no '
        f'integer scaling c >= 1 meets the wrap-around condition of Theorems '
        f'1-2 at a noise that meets the budget; {advice}.')
  z_max = _largest_noise(encoding, n, c, delta, bits)
  # The calibrated parameter is t, the noise's fraction below z_max:
  # z = z_max (1 - t), epsilon grows with t, and t = 0 meets the budget.
  low = min(_MIN_NOISE_MULTIPLIER / z_max, 1.0)
  result = calibration.calibrate(
      lambda: pld_accountant.tightest(adversary=adversary),
      lambda t: budget.event(bits, z_max * (1.0 - t), c), epsilon, delta,
      calibration.Parameter.signal('noise reduction below z_max', 0.0,
                                   1.0 - low))
  z = z_max * (1.0 - result.value)
  return QuantileParameters(encoding, DdgNoise(c, z), bits,
                            budget.factory(bits, z, c), budget.value_type,
                            result.epsilon, delta, adversary)


@dataclasses.dataclass(frozen=True)
class _DdgBudget:
  """A DDG quantile configuration without its ring and noise: the questions
  `_discrete_gaussian` asks of each (bits, z, c)."""

  encoding: hg.Encoding
  n: int
  target: float
  delta: float
  rounds: int
  adversary: accountant.Adversary
  seed: Optional[int]

  @property
  def value_type(self):
    return encoding_type(self.encoding)

  def factory(self, bits, z, c):
    return _ddg_factory(self.encoding, self.n, bits, z, c, self.seed)

  def event(self, bits, z, c):
    """The event of `rounds` rounds of the factory at (bits, z, c); a
    ValueError if the factory refuses it (scaled noise outside the range of
    the DDG theorem and samplers)."""
    return calibration.rounds_event(
        self.factory(bits, z, c).dp_event(self.value_type), self.rounds)

  def meets(self, bits, c) -> bool:
    """Whether the budget is met at scaling c with the most noise the ring
    allows for it. Monotone (decreasing) in c: exact_scaling is
    non-decreasing (a c whose reciprocal does not round-trip would not give
    integer inputs), and a factory that refuses the noise (below the
    theorem's range: large c) meets nothing."""
    c = exact_scaling(c)
    z = _largest_noise(self.encoding, self.n, c, self.delta, bits)
    if z == 0:
      return False
    try:
      event = self.event(bits, z, c)
    except ValueError:
      return False
    return pld_accountant.epsilon(event, self.delta,
                                  self.adversary)[0] <= self.target

  def largest_scaling(self, bits) -> int:
    """c*: the largest c (whose reciprocal round-trips) that `meets` the
    budget; 0 if none."""
    limit = largest_scaling(self.encoding, self.n, 0.0, self.delta, bits)
    return exact_scaling(
        base.largest_count(lambda c: self.meets(bits, c), max(limit, 1)))


# mechanism -> its calibration (`quantile_parameters`).
_CALIBRATORS = {
    'discrete_gaussian': _discrete_gaussian,
    'poisson_binomial': _poisson_binomial
}
