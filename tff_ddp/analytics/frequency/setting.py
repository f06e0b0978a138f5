"""What every frequency protocol shares: the setting, the calibration, the
parameters' base class and the protocols' registry.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper). Every protocol releases the clients' count vectors
through a cPBM over Kashin's representation (Algorithms 1-3), one secure
sum, and differs in how it bounds a user's contribution (its clip C). A
protocol is a frozen `FrequencyParameters` class whose classmethod
`calibrate(setting, ...)` is its builder, in the module of its family with
its TFF computations and its simulation: `two_phase` (TFFE, Algorithm 6),
`multi_round` (MFFE, Algorithm 7 and App. D), `single_release` (Algorithm
3 at a given clip and the Table 2 baselines of Section 5.2).
`FrequencySetting` holds what every protocol shares.

The classes and how to add a protocol: docs/notes/frequency_protocols.md.
"""

import abc
import dataclasses
import typing
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple, Union

import dp_accounting
import numpy as np
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration as calibration_lib
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import poisson_binomial as pbm
from tff_ddp.utils import checks

# The neighbouring relation every epsilon here is for (`frequency.process`).
NEIGHBOURS = ("neighbours: one user's data removed (it still takes part in "
              'the secure sums with no items and its noise shares)')
DTYPES = (np.float32, np.float64, np.int32, np.int64)
DEFAULT_NUM_TRIALS = 30
DEFAULT_BUDGET_FRACTION = 1.0 / 11.0  # "about 10:1" (Section 5.2)
# A clip C outside this range makes the estimate (the decoded sum times C,
# the clients' x / C) overflow: C = 1e308 gives NaN estimates. The same range
# bounds the two-phase histogram's [0, K max_items] (float32 on the clients).
CLIP_RANGE = (1e-30, 1e30)
# name -> class of every defined protocol, in the order of definition
# (`FrequencyParameters.__init_subclass__`).
_CLASSES: Dict[str, type] = {}

# ---------------------------------------------------------------------------
# What every protocol shares.


@dataclasses.dataclass(frozen=True)
class CalibrateTheta:
  """The frequency cPBM's m is given; theta is calibrated (the largest
  theta <= 1/4 that meets the budget; at 1/4 the budget may not be spent).

  Attributes:
    num_trials: m (default 30, the paper's Section 5.2).
  """

  num_trials: int = DEFAULT_NUM_TRIALS
  parameter: ClassVar[str] = 'theta'  # `calibrated.poisson_binomial`'s name
  # theta stops at 1/4, so a large budget may be left unspent (`budget`).
  spends_budget: ClassVar[bool] = False

  def __post_init__(self):
    object.__setattr__(self, 'num_trials',
                       checks.integer(self.num_trials, 'num_trials', 1))

  @classmethod
  def from_arguments(cls, num_trials, theta) -> 'CalibrateTheta':
    if theta is not None:
      raise ValueError("theta is what calibrate='theta' chooses; give "
                       "num_trials, or calibrate='num_trials' with theta.")
    return cls(DEFAULT_NUM_TRIALS if num_trials is None else num_trials)

  def fixed_arguments(self) -> Dict[str, Any]:
    """The factory argument held fixed while theta is calibrated."""
    return {'num_trials': self.num_trials}

  def theta_and_trials(self, value) -> tuple:
    """(theta, m) given the calibrated value."""
    return float(value), int(self.num_trials)

  @property
  def fixed_num_trials(self) -> Optional[int]:
    return self.num_trials


@dataclasses.dataclass(frozen=True)
class CalibrateNumTrials:
  """The frequency cPBM's theta is given; m is calibrated (the most trials
  that meet the budget: spends any budget, in integer steps).

  Attributes:
    theta: in (0, 1/4].
  """

  theta: float
  parameter: ClassVar[str] = 'num_trials'
  spends_budget: ClassVar[bool] = True

  def __post_init__(self):
    object.__setattr__(
        self, 'theta', checks.real(self.theta,
                                   'theta',
                                   0.0,
                                   0.25,
                                   low_open=True))

  @classmethod
  def from_arguments(cls, num_trials, theta) -> 'CalibrateNumTrials':
    if num_trials is not None:
      raise ValueError("num_trials is what calibrate='num_trials' chooses; "
                       "give theta, or calibrate='theta' with num_trials.")
    if theta is None:
      raise ValueError("calibrate='num_trials' needs theta.")
    return cls(theta)

  def fixed_arguments(self) -> Dict[str, Any]:
    return {'theta': self.theta}

  def theta_and_trials(self, value) -> tuple:
    return float(self.theta), int(value)

  @property
  def fixed_num_trials(self) -> Optional[int]:
    return None


Calibration = Union[CalibrateTheta, CalibrateNumTrials]


def calibration_from_arguments(calibrate: str = 'theta',
                               num_trials: Optional[int] = None,
                               theta: Optional[float] = None) -> Calibration:
  """`frequency_parameters`' (calibrate, num_trials, theta) as one object,
  `CalibrateTheta` or `CalibrateNumTrials` (the name is resolved here)."""
  choices = {
      CalibrateTheta.parameter: CalibrateTheta,
      CalibrateNumTrials.parameter: CalibrateNumTrials
  }
  chosen = choices[checks.choice(calibrate, 'calibrate', tuple(choices))]
  return chosen.from_arguments(num_trials, theta)


def _value_dtype(value_dtype):
  """One of DTYPES (a numpy type, dtype or its name); None is refused (numpy
  would read it as float64)."""
  allowed = [np.dtype(t).name for t in DTYPES]
  try:
    dtype = None if value_dtype is None else np.dtype(value_dtype)
  except (TypeError, ValueError):
    dtype = None
  if dtype is None or dtype not in [np.dtype(t) for t in DTYPES]:
    raise TypeError(f'value_dtype must be one of {allowed}, got '
                    f'{value_dtype!r:.100}.')
  return dtype.type


def _kashin_options(kashin_options) -> Dict[str, Any]:
  if kashin_options is not None and not isinstance(kashin_options, Mapping):
    raise TypeError('kashin_options must be a dict of KashinEncoder options '
                    f'(or None), got {kashin_options!r:.100}.')
  kashin_options = dict(kashin_options or {})
  try:
    registry.check_options('kashin', kashin_options)
  except (TypeError, ValueError) as e:
    raise type(e)(f'kashin_options: {e}') from None
  return kashin_options


@dataclasses.dataclass(frozen=True)
class FrequencySetting:
  """What every frequency protocol shares (validated on construction).

  Attributes:
    dim: d >= 1, the items.
    expected_clients_per_round: n (N per round for MFFE); the rings are
      sized for it.
    epsilon, delta: the budget (what it covers: `frequency.process`),
      against `adversary`, for the relation NEIGHBOURS.
    calibration: `CalibrateTheta` (default, m = 30) or `CalibrateNumTrials`.
    divisor: 'l2' (Algorithm 3) or 'linf' (docs/notes/frequency_protocols.md,
      section on clipping.py, "The divisor"), a `poisson_binomial.Divisor`
      once built.
    adversary: 'server' or 'release', an `Adversary` once built.
    value_dtype: the clients' dtype (float32, float64, int32, int64).
    seed: tests only (deterministic noise; see the aggregators).
    kashin_options: KashinEncoder options (redundancy, eta, ...).
    level, output_dim: K and D of the frequency release's Kashin encoder
      (derived).
  """

  dim: int
  expected_clients_per_round: int
  epsilon: float
  delta: float
  calibration: Calibration = CalibrateTheta()
  divisor: pbm.Divisor = pbm.Divisor.L2
  adversary: accountant.Adversary = accountant.Adversary.SERVER
  value_dtype: Any = np.float32
  seed: Optional[int] = None
  kashin_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  level: float = dataclasses.field(init=False, repr=False, compare=False)
  output_dim: int = dataclasses.field(init=False, repr=False, compare=False)

  def __post_init__(self):
    checked = dict(dim=checks.integer(self.dim, 'dim', 1),
                   expected_clients_per_round=checks.integer(
                       self.expected_clients_per_round,
                       'expected_clients_per_round', 1, base.MAX_MODULUS - 1),
                   epsilon=checks.positive(self.epsilon, 'epsilon'),
                   delta=checks.probability(self.delta,
                                            'delta',
                                            allow_one=False))
    if not isinstance(self.calibration, typing.get_args(Calibration)):
      raise TypeError('calibration must be CalibrateTheta or '
                      f'CalibrateNumTrials, got {self.calibration!r:.100}.')
    checked.update(divisor=pbm.as_divisor(self.divisor),
                   adversary=accountant.as_adversary(self.adversary),
                   value_dtype=_value_dtype(self.value_dtype),
                   seed=checks.seed(self.seed),
                   kashin_options=_kashin_options(self.kashin_options))
    encoder = registry.make_encoder('kashin', checked['dim'],
                                    **checked['kashin_options'])
    checked.update(level=float(encoder.level),
                   output_dim=int(encoder.output_dim))
    for name, value in checked.items():
      object.__setattr__(self, name, value)

  def release_fields(self, result) -> Dict[str, Any]:
    """The `FrequencyParameters` fields of the frequency release whose
    calibration gave `result` (a `CalibratedFactory`)."""
    theta, num_trials = self.calibration.theta_and_trials(result.value)
    return dict(dim=self.dim,
                value_dtype=self.value_dtype,
                expected_clients_per_round=self.expected_clients_per_round,
                factory=result.factory,
                theta=theta,
                num_trials=num_trials,
                divisor=self.divisor,
                output_dim=self.output_dim,
                level=self.level,
                effective_dim=fq.effective_dimension(self.output_dim,
                                                     self.divisor, self.level),
                delta=self.delta,
                adversary=self.adversary)

  def frequency_calibrator(self, l2_clip: float, rounds: int = 1):
    """eps -> (CalibratedFactory, event) of the frequency release: a cPBM
    over Kashin's representation (Algorithms 1-3) with `l2_clip`, its
    `calibration`'s free parameter calibrated for `rounds` rounds."""
    value_type = tff.TensorType(np.float64, [self.dim])

    def calibrate_fn(eps):
      result = calibrated.poisson_binomial(
          value_type,
          eps,
          self.delta,
          parameter=self.calibration.parameter,
          rounds=rounds,
          adversary=self.adversary,
          l2_clip=l2_clip,
          expected_clients_per_round=self.expected_clients_per_round,
          encoder='kashin',
          divisor=self.divisor,
          seed=self.seed,
          on_wrap='flag',
          **self.calibration.fixed_arguments(),
          **self.kashin_options)
      return result, result.event

    return calibrate_fn

  def split(self,
            first,
            budget_fraction: float,
            release_rounds: int = 1) -> calibration_lib.SplitBudget:
    """The budget split between a first release (calibrator `first`) and
    the frequency release at clip 1 on scaled inputs (`two_phase`,
    `multi_round`): standalone epsilons in the ratio rho : 1 - rho."""
    return calibration_lib.split_budget(
        [first, self.frequency_calibrator(1.0, release_rounds)],
        [budget_fraction, 1.0 - budget_fraction], self.epsilon, self.delta,
        self.adversary)


def checked_clip(clip):
  return checks.real(clip, 'clip', *CLIP_RANGE)


def checked_budget_fraction(budget_fraction):
  return checks.probability(budget_fraction, 'budget_fraction', allow_one=False)


def checked_target_quantile(target_quantile):
  if target_quantile is None:
    return None
  return checks.probability(target_quantile, 'target_quantile', allow_one=False)


# ---------------------------------------------------------------------------
# The protocols' base class and registry.


@dataclasses.dataclass(frozen=True)
class FrequencyParameters(abc.ABC):
  """A calibrated frequency protocol (the configuration is public).

  The base of one class per protocol; these fields are every protocol's.

  Attributes:
    dim: d, items per client vector.
    value_dtype: the clients' dtype.
    expected_clients_per_round: n (TFFE, fixed) or N (MFFE, per round).
    factory: the frequency `PoissonBinomialSumFactory` (l2_clip = 1 on
      scaled inputs for the scaled protocols, the clip otherwise).
    theta, num_trials: its cPBM parameters.
    divisor: 'l2' or 'linf'.
    output_dim, level: D and K of its Kashin encoder.
    effective_dim: D_eff of `frequency.clipping.effective_dimension`.
    epsilon: epsilon of `event` at `delta` against `adversary`, for the
      relation NEIGHBOURS (<= the target).
    delta, adversary: the budget's.
    round_event: the event of one `next` with the expected clients.
    event: the event `epsilon` covers.
  """

  dim: int
  value_dtype: Any
  expected_clients_per_round: int
  factory: Any
  theta: float
  num_trials: int
  divisor: pbm.Divisor
  output_dim: int
  level: float
  effective_dim: float
  epsilon: float
  delta: float
  adversary: accountant.Adversary
  round_event: dp_accounting.DpEvent
  event: dp_accounting.DpEvent

  protocol: ClassVar[str]  # the public name, mapped to the class once
  # Whether clients send x / C to an aggregator with clip 1 (a clip chosen
  # by the server: `computations`).
  scaled: ClassVar[bool] = False

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    name = cls.__dict__.get('protocol')
    if name is None:  # an intermediate base class
      return
    if name in _CLASSES:
      raise TypeError(f'a frequency protocol named {name!r} exists already '
                      f'({_CLASSES[name].__name__}).')
    _CLASSES[name] = cls

  @property
  def value_type(self):
    """The clients' value type: `value_dtype` [d]."""
    return tff.TensorType(self.value_dtype, [self.dim])

  @property
  def aggregated_type(self):
    """What the frequency aggregator sums: float64 [d]."""
    return tff.TensorType(np.float64, [self.dim])

  def mechanism(self):
    """The frequency aggregator's cPBM (derived parameters)."""
    return self.factory.mechanism(self.aggregated_type)

  def encoder(self):
    """The frequency aggregator's encoder (Kashin)."""
    return self.factory.encoder(self.aggregated_type)

  def ring_capacity(self,
                    owner: str = 'build_frequency_process'
                   ) -> secure_sum.RingCapacity:
    """The most clients a round holds: the smallest capacity of its secure
    sums (the frequency release's and the protocol's others), all sized
    for expected_clients_per_round."""
    capacities = [self.factory.capacity(self.aggregated_type).capacity]
    capacities.extend(self._more_capacities())
    return secure_sum.RingCapacity(
        capacity=min(capacities),
        owner=owner,
        sized_for=('expected_clients_per_round='
                   f'{self.expected_clients_per_round}'))

  def describe(self) -> str:
    """One line: the protocol, its parameters and its epsilon (adversary)."""
    parts = [
        f'{self.protocol}: cPBM theta={self.theta:.4f} '
        f'm={self.num_trials} D={self.output_dim} '
        f'divisor={self.divisor.value}'
    ]
    parts.extend(self._describe_parts())
    parts.append(f'epsilon={self.epsilon:.4g} at delta={self.delta:g} '
                 f'against the {self.adversary.value}; {NEIGHBOURS}')
    return '; '.join(parts)

  def simulated_values(self, x: np.ndarray, rng) -> np.ndarray:
    """What the clients release the frequencies of, in numpy (for
    `simulation.fixed`): x itself unless the protocol says otherwise."""
    del rng
    return x

  @abc.abstractmethod
  def build_process(
      self, on_wrap: secure_sum.OnWrap) -> tff.templates.MeasuredProcess:
    """The protocol's process (`on_wrap` resolved by the caller)."""

  @abc.abstractmethod
  def _more_capacities(self) -> List[int]:
    """The capacities of the protocol's secure sums beside the frequency
    release's."""

  @abc.abstractmethod
  def _describe_parts(self) -> List[str]:
    """`describe`'s parts between the frequency cPBM and the epsilon."""


def protocol_names() -> Tuple[str, ...]:
  """The names of the defined protocols, in the order of definition."""
  return tuple(_CLASSES)


def protocol_classes() -> Tuple[type, ...]:
  """The classes of the defined protocols, in the order of definition."""
  return tuple(_CLASSES.values())


def protocol_class(protocol: str) -> type:
  """The parameters class of the protocol named `protocol`: the one place
  a protocol's name is read."""
  return _CLASSES[checks.choice(protocol, 'protocol', protocol_names())]
