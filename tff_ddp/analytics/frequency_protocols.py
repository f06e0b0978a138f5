"""The frequency protocols: one parameters class and one builder each.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper). Every protocol releases the clients' count vectors
through a cPBM over Kashin's representation (Algorithms 1-3), one secure
sum, and differs in how it bounds a user's contribution (its clip C):
`TwoPhaseParameters` (TFFE, Algorithm 6; Algorithms 4-5, Section 3.3),
`MultiRoundParameters` (MFFE, Algorithm 7 and App. D), `FixedClipParameters`
(Algorithm 3), `NormalizeParameters` and `SampleParameters` (the Table 2
baselines of Section 5.2). Each is a frozen class whose classmethod
`calibrate(setting, ...)` is its builder; `FrequencySetting` holds what
every protocol shares.

The classes and how to add a protocol: docs/notes/frequency_protocols.md.
"""

import abc
import dataclasses
import typing
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple, Union

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration as calibration_lib
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics import frequency as fq
from tff_ddp.analytics import frequency_computations as computations
from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import poisson_binomial as pbm
from tff_ddp.utils import checks
from tff_ddp.utils import entropy as entropy_lib
from tff_ddp.utils import tensors

# The neighbouring relation every epsilon here is for (`frequency_process`).
NEIGHBOURS = ("neighbours: one user's data removed (it still takes part in "
              'the secure sums with no items and its noise shares)')
DTYPES = (np.float32, np.float64, np.int32, np.int64)
DEFAULT_NUM_TRIALS = 30
DEFAULT_BUDGET_FRACTION = 1.0 / 11.0  # "about 10:1" (Section 5.2)
# TFFE phase 1's ring: 2^18 bits (the paper's), or the least that holds
# one trial per user when there are more users (their number is public by
# protocol): `quantile_bits`.
_QUANTILE_BITS = 18


def quantile_bits(num_clients: int) -> int:
  """Phase 1's ring bits for `num_clients` users: 18, or the least b with
  2^b > n (cPBM needs n m < 2^b with m >= 1) above 2^18 - 1 users, where
  18 bits were refused ("use bits >= 19")."""
  return max(_QUANTILE_BITS, int(num_clients).bit_length())


# A clip C outside this range makes the estimate (the decoded sum times C,
# the clients' x / C) overflow: C = 1e308 gives NaN estimates. The same range
# bounds the two-phase histogram's [0, K max_items] (float32 on the clients).
CLIP_RANGE = (1e-30, 1e30)
MAX_LEARNING_RATE = 100.0
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
    epsilon, delta: the budget (what it covers: `frequency_process`),
      against `adversary`, for the relation NEIGHBOURS.
    calibration: `CalibrateTheta` (default, m = 30) or `CalibrateNumTrials`.
    divisor: 'l2' (Algorithm 3) or 'linf' (module doc of `frequency`), a
      `poisson_binomial.Divisor` once built.
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
                   delta=checks.real(self.delta,
                                     'delta',
                                     0.0,
                                     1.0,
                                     low_open=True,
                                     high_open=True))
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
            frequency_rounds: int = 1) -> calibration_lib.SplitBudget:
    """The budget split between a first release (calibrator `first`) and
    the frequency release at clip 1 on scaled inputs (`frequency_
    computations`): standalone epsilons in the ratio rho : 1 - rho."""
    return calibration_lib.split_budget(
        [first, self.frequency_calibrator(1.0, frequency_rounds)],
        [budget_fraction, 1.0 - budget_fraction], self.epsilon, self.delta,
        self.adversary)


def _clip(clip):
  return checks.real(clip, 'clip', *CLIP_RANGE)


def _budget_fraction(budget_fraction):
  return checks.real(budget_fraction,
                     'budget_fraction',
                     0.0,
                     1.0,
                     low_open=True,
                     high_open=True)


def _target_quantile(target_quantile):
  if target_quantile is None:
    return None
  return checks.real(target_quantile,
                     'target_quantile',
                     0.0,
                     1.0,
                     low_open=True,
                     high_open=True)


# ---------------------------------------------------------------------------
# The protocols.


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
    effective_dim: D_eff of `frequency.effective_dimension`.
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
  # by the server: `frequency_computations`).
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
    `frequency_simulation`): x itself unless the protocol says otherwise."""
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


@dataclasses.dataclass(frozen=True)
class TwoPhaseParameters(FrequencyParameters):
  """TFFE (Algorithm 6): a private clip C-hat, then OcPBM with it.

  `next(state, x)` runs both phases on the same clients. Phase 1
  (Algorithms 4-5): each client computes ||y_i||_2 of the Kashin
  representation that phase 2 will use (the frame of the frequency
  aggregator's coming round, `secure_sum.round_seed`); the Haar quantile
  process (2^b bins over [0, B], B = K max_items -- the paper's choice, K
  the Kashin level, since ||y|| <= K ||x||_2 <= K ||x||_1) estimates its
  `target_quantile` (default eq. 5's 1 - sqrt(D / (4 m n theta^2)),
  Algorithm 5 normalising by the public count n; a user without data
  (||y_i|| = 0) sends no bin, `frequency_computations.norm_message`) ->
  C-hat. If the quantile round fails (status not 'ok': too few clients)
  C-hat = B. Phase 2: OcPBM (Section 3.3) with C = C-hat. Event:
  Composed([phase 1, phase 2]) with the measured client counts
  (Proposition 4 composes the same two releases). C_median (Table 2) is
  this protocol with target_quantile=0.5.

  Attributes (beside `FrequencyParameters`'):
    target_quantile: gamma*.
    quantile: the phase-1 `QuantileParameters`.
    num_bins, upper_bound: the phase-1 histogram: 2^b bins over [0, B].
    budget: the `SplitBudget` between the two phases.
  """

  target_quantile: float
  quantile: qc.QuantileParameters
  num_bins: int
  upper_bound: float
  budget: calibration_lib.SplitBudget

  protocol: ClassVar[str] = 'two_phase'
  scaled: ClassVar[bool] = True

  @classmethod
  def calibrate(
      cls,
      setting: FrequencySetting,
      *,
      max_items: float,
      num_bins: int = 64,
      quantile_num_trials: Optional[int] = None,
      budget_fraction: float = DEFAULT_BUDGET_FRACTION,
      target_quantile: Optional[float] = None) -> 'TwoPhaseParameters':
    """Calibrates TFFE to the setting's (epsilon, delta).

    Args:
      setting: a `FrequencySetting`.
      max_items: the public bound on ||x_i||_1 (the most items a user
        holds); the histogram covers [0, K max_items].
      num_bins: 2^b Haar bins (the paper: 64).
      quantile_num_trials: m' of phase 1 (default: the most the 2^18 ring
        holds); theta' is calibrated.
      budget_fraction: rho in (0, 1): phase 1 gets standalone epsilon
        rho s, the frequency release (1 - rho) s, s chosen so that the
        composition meets the budget (`split_budget`). The paper's ~10:1
        is rho = 1/11.
      target_quantile: gamma* (default eq. 5); 0.5 for C_median.
    """
    budget_fraction = _budget_fraction(budget_fraction)
    target_quantile = _target_quantile(target_quantile)
    max_items = checks.positive(max_items, 'max_items')
    level = setting.level
    upper = level * max_items
    if not CLIP_RANGE[0] <= upper <= CLIP_RANGE[1]:
      # The histogram's range [0, K max_items] in float64 and float32 (the
      # norms are float32 on the clients).
      raise ValueError(
          f'max_items must make the histogram range [0, K max_items] (K = '
          f'{level:.4g}, the Kashin level) fit in [1e-30, 1e30], got '
          f'max_items={max_items!r}.')
    encoding = hg.Haar(num_bins)  # Algorithm 4's encoding, validated
    quantile_trials = checks.optional_integer(quantile_num_trials,
                                              'quantile_num_trials', 1)
    n = setting.expected_clients_per_round

    def phase_one(eps):
      try:
        params = qc.quantile_parameters(
            encoding, 'poisson_binomial', encoding.num_bins,
            qc.QuantileSetting(n,
                               eps,
                               setting.delta,
                               bits=quantile_bits(n),
                               adversary=setting.adversary,
                               num_trials=quantile_trials,
                               seed=setting.seed))
      except ValueError as e:
        if quantile_trials is None:
          raise
        # Its message says num_trials: the quantile process's argument.
        raise ValueError(
            f'quantile_num_trials={quantile_trials}: {e}') from None
      return params, params.factory.dp_event(params.value_type)

    budget = setting.split(phase_one, budget_fraction)
    first, frequency = budget.results
    fields = setting.release_fields(frequency)
    if target_quantile is None:
      target_quantile = fq.optimal_quantile(fields['effective_dim'],
                                            fields['num_trials'], n,
                                            fields['theta'])
    return cls(**fields,
               epsilon=budget.epsilon,
               round_event=budget.event,
               event=budget.event,
               target_quantile=target_quantile,
               quantile=first,
               num_bins=encoding.num_bins,
               upper_bound=upper,
               budget=budget)

  @property
  def total_clients(self) -> int:
    """n of eq. 5: the round's clients."""
    return self.expected_clients_per_round

  def build_process(self, on_wrap):
    return computations.two_phase_process(self, on_wrap)

  def _more_capacities(self):
    return [self.quantile.ring_capacity().capacity]

  def _describe_parts(self):
    return [
        f"phase 1 Haar {self.num_bins} bins over "
        f"[0, {self.upper_bound:.4g}] theta'={self.quantile.theta:.4f} "
        f"m'={self.quantile.num_trials}, target quantile "
        f'{self.target_quantile:.4f}'
    ]


@dataclasses.dataclass(frozen=True)
class MultiRoundParameters(FrequencyParameters):
  """MFFE (Algorithm 7, App. D): the clip follows the rounds.

  Each `next(state, x)` is one round on a batch of N clients with the
  current C^(r): OcPBM of x_i / C^(r) and a cPBM (C = 1, theta', m') of
  the indicator s_i = +1 if ||y_i|| > C^(r), -1 if 0 < ||y_i|| <= C^(r),
  and 0 for a user without data (`frequency_computations.
  indicator_message`). The paper's +-1 sends -1 for no data, and its pair
  with +1 is replace-one (4x the RDP of the zero-out pair it was costed
  as); with 0 for no data every pair is zero-out, and users with data send
  what the paper's +-1 sends (4x less variance than {0, 1} at the same
  epsilon; docs/notes/neighbouring_relation.md). A user without data in a
  round counts as half above C in gamma-hat. With S the decoded sum of the
  s_i, the fraction above C is (S / N + 1) / 2, the estimated quantile
  level of C is gamma-hat = 1 - that (clipped to [0, 1]), and C^(r+1) =
  C^(r) exp(-eta (gamma-hat - gamma*)). (Algorithm 7 writes gamma-hat for
  the "current quantile"; with the minus sign of its update it must be
  the level of C -- the fraction *at or below* C -- for C to move towards
  the target, as in Andrew et al. 2021's adaptive clipping.) gamma*
  defaults to Corollary 1's 1 - sqrt(D / (4 m n theta^2)) with n = N R the
  whole population. The result is the running estimate of sum_i x_i over
  all rounds so far.

  Accounting (`disjoint_rounds`): False (the default) composes the R
  rounds, which holds whoever takes part in which rounds. True is the
  paper's assumption (App. D: every user takes part in one round only; the
  whole run is then as private as one round by parallel composition,
  `frequency_process`), which the library cannot check: a user in two
  rounds voids it, and the epsilon of users who repeat is that of the
  composed rounds, several times the one-round figure. Opt in only when
  the batches are disjoint by construction.

  Attributes (beside `FrequencyParameters`'):
    clip: the initial clip C^(1).
    target_quantile: gamma*.
    indicator_factory: the indicator's aggregator.
    indicator_theta, indicator_num_trials: its parameters.
    rounds: the rounds the budget covers (R).
    total_clients: n of the target (N R by default).
    disjoint_rounds: the accounting assumption.
    learning_rate: eta.
    budget: the `SplitBudget` between the indicator and the frequencies.
  """

  clip: float
  target_quantile: float
  indicator_factory: Any
  indicator_theta: float
  indicator_num_trials: int
  rounds: int
  total_clients: int
  disjoint_rounds: bool
  learning_rate: float
  budget: calibration_lib.SplitBudget

  protocol: ClassVar[str] = 'multi_round'
  scaled: ClassVar[bool] = True

  @classmethod
  def calibrate(
      cls,
      setting: FrequencySetting,
      *,
      rounds: int = 1,
      clip: Optional[float] = None,
      total_clients: Optional[int] = None,
      disjoint_rounds: bool = False,
      learning_rate: float = 1.0,
      indicator_num_trials: Optional[int] = None,
      budget_fraction: float = DEFAULT_BUDGET_FRACTION,
      target_quantile: Optional[float] = None) -> 'MultiRoundParameters':
    """Calibrates MFFE to the setting's (epsilon, delta).

    Args:
      setting: a `FrequencySetting` (its expected_clients_per_round is N).
      rounds: R, the rounds the budget covers.
      clip: the initial C^(1) (None: 1, as the paper's App. E.1); in
        CLIP_RANGE. C^(1) matters: with eta = 1 the clip grows by at most
        e^{gamma*} a round, so from 1 to norms in the tens the first rounds
        clip most of their users' mass (on the paper's i.i.d. data C^(1) =
        10 reproduces its Table 3, 1 gives ~1.5x its error); a rough
        public guess of the norms' scale is better.
      total_clients: n of Corollary 1 (default N R).
      disjoint_rounds: the accounting assumption (class docstring;
        default False: the R rounds composed).
      learning_rate: eta in (0, MAX_LEARNING_RATE].
      indicator_num_trials: m' (default the frequency's m, as the paper's
        m' = m = 15; needed when m is calibrated); theta' is calibrated.
      budget_fraction: rho in (0, 1): the indicator's share of the
        standalone epsilons, as `TwoPhaseParameters.calibrate`'s.
      target_quantile: gamma* (default Corollary 1).
    """
    rounds = checks.integer(rounds, 'rounds', 1)
    budget_fraction = _budget_fraction(budget_fraction)
    target_quantile = _target_quantile(target_quantile)
    clip = 1.0 if clip is None else _clip(clip)
    disjoint_rounds = checks.boolean(disjoint_rounds, 'disjoint_rounds')
    # C^(r+1) = C^(r) exp(-eta (gamma-hat - gamma*)): a larger eta can
    # overflow (or zero) the clip in one round.
    learning_rate = checks.real(learning_rate,
                                'learning_rate',
                                0.0,
                                MAX_LEARNING_RATE,
                                low_open=True)
    n = setting.expected_clients_per_round
    if total_clients is None and n * rounds > fq.MAX_COUNT:
      raise ValueError(
          f'rounds * expected_clients_per_round = {n * rounds} is more than '
          f'{fq.MAX_COUNT} clients (the default total_clients); lower '
          'rounds or give total_clients.')
    total = (n * rounds if total_clients is None else checks.integer(
        total_clients, 'total_clients', 1, fq.MAX_COUNT))
    if indicator_num_trials is None:
      indicator_num_trials = setting.calibration.fixed_num_trials
      if indicator_num_trials is None:
        raise ValueError("calibrate='num_trials' needs indicator_num_trials.")
    indicator_trials = checks.integer(indicator_num_trials,
                                      'indicator_num_trials', 1)
    frequency_rounds = 1 if disjoint_rounds else rounds
    indicator_type = tff.TensorType(np.float64, [1])

    def indicator(eps):
      result = calibrated.poisson_binomial(indicator_type,
                                           eps,
                                           setting.delta,
                                           parameter='theta',
                                           rounds=frequency_rounds,
                                           adversary=setting.adversary,
                                           num_trials=indicator_trials,
                                           l2_clip=1.0,
                                           expected_clients_per_round=n,
                                           encoder='none',
                                           divisor='linf',
                                           linf_clip=1.0,
                                           seed=setting.seed,
                                           on_wrap='flag')
      return result, result.event

    budget = setting.split(indicator, budget_fraction, frequency_rounds)
    first, frequency = budget.results
    fields = setting.release_fields(frequency)
    if target_quantile is None:
      target_quantile = fq.optimal_quantile(fields['effective_dim'],
                                            fields['num_trials'], total,
                                            fields['theta'])
    one_round = dp_accounting.ComposedDpEvent([
        frequency.factory.dp_event(tff.TensorType(np.float64, [setting.dim])),
        first.factory.dp_event(indicator_type)
    ])
    return cls(**fields,
               epsilon=budget.epsilon,
               round_event=one_round,
               event=budget.event,
               clip=clip,
               target_quantile=target_quantile,
               indicator_factory=first.factory,
               indicator_theta=first.value,
               indicator_num_trials=indicator_trials,
               rounds=rounds,
               total_clients=total,
               disjoint_rounds=disjoint_rounds,
               learning_rate=learning_rate,
               budget=budget)

  def build_process(self, on_wrap):
    return computations.multi_round_process(self, on_wrap)

  def _more_capacities(self):
    return [
        self.indicator_factory.capacity(tff.TensorType(np.float64,
                                                       [1])).capacity
    ]

  def _describe_parts(self):
    return [
        f"indicator theta'={self.indicator_theta:.4f} "
        f"m'={self.indicator_num_trials}, target quantile "
        f'{self.target_quantile:.4f}, eta={self.learning_rate}, '
        f'R={self.rounds}, disjoint rounds: {self.disjoint_rounds}'
    ]


class SingleReleaseParameters(FrequencyParameters):
  """A protocol of one cPBM release at a clip fixed before the round.

  The clients compute `client_values(x, round_seed)` (TF) and send them to
  the frequency aggregator, built with l2_clip = `clip`; `simulated_values`
  is the numpy mirror the simulator uses. A subclass defines `clip` (a
  field or a property), those two methods, `protocol` and `calibrate`.
  """

  clip: ClassVar[float]  # (a subclass makes it a field or a property)

  @classmethod
  def _calibrated(cls, setting: FrequencySetting, l2_clip: float, **fields):
    """The protocol's parameters (`fields` beside the release's) with the
    frequency release at clip `l2_clip` calibrated to the whole budget."""
    result, event = setting.frequency_calibrator(l2_clip)(setting.epsilon)
    return cls(**setting.release_fields(result),
               epsilon=result.epsilon,
               round_event=event,
               event=event,
               **fields)

  def client_values(self, x: tf.Tensor, round_seed: tf.Tensor) -> tf.Tensor:
    """A client's float64 [d] input to the frequency release (TF), from
    its `value_dtype` [d] vector x and the round's public seed."""
    del round_seed
    return tf.cast(x, tf.float64)

  def build_process(self, on_wrap):
    return computations.single_release_process(self, on_wrap)

  def _more_capacities(self):
    return []

  def _describe_parts(self):
    return [f'C={self.clip:g}']


@dataclasses.dataclass(frozen=True)
class FixedClipParameters(SingleReleaseParameters):
  """cPBM with a given clip C (Algorithm 3 as published).

  Attributes (beside `FrequencyParameters`'):
    clip: C.
  """

  clip: float

  protocol: ClassVar[str] = 'fixed'

  @classmethod
  def calibrate(cls, setting: FrequencySetting, *,
                clip: float) -> 'FixedClipParameters':
    """Calibrates cPBM at clip C (in CLIP_RANGE) to the setting's budget."""
    clip = _clip(clip)
    return cls._calibrated(setting, clip, clip=clip)


@dataclasses.dataclass(frozen=True)
class NormalizeParameters(SingleReleaseParameters):
  """Table 2's Normalize: x / ||x||_2 through cPBM with C = 1, no rescaling
  (`frequency`'s module docstring: the only reading that gives the paper's
  numbers)."""

  protocol: ClassVar[str] = 'normalize'
  clip: ClassVar[float] = 1.0

  @classmethod
  def calibrate(cls, setting: FrequencySetting) -> 'NormalizeParameters':
    """Calibrates Normalize to the setting's budget."""
    return cls._calibrated(setting, cls.clip)

  def client_values(self, x, round_seed):
    del round_seed
    x = tf.cast(x, tf.float64)
    return tf.math.divide_no_nan(x, tensors.overflow_safe_norm(x))

  def simulated_values(self, x, rng):
    del rng
    norms = np.linalg.norm(x, axis=1)
    return x / np.where(norms > 0, norms, 1.0)[:, None]


@dataclasses.dataclass(frozen=True)
class SampleParameters(SingleReleaseParameters):
  """Table 2's Sample(k): each user keeps k of its items drawn without
  replacement (private client randomness), cPBM with C = k (||x||_2 <=
  ||x||_1 <= k, the paper's footnote 7), no rescaling.

  Attributes (beside `FrequencyParameters`'):
    sample_items: k.
  """

  sample_items: int

  protocol: ClassVar[str] = 'sample'

  @classmethod
  def calibrate(cls, setting: FrequencySetting, *,
                sample_items: int) -> 'SampleParameters':
    """Calibrates Sample(k) to the setting's budget."""
    # The clients' top_k takes an int32 k.
    sample_items = checks.integer(sample_items, 'sample_items', 1, 2**31 - 1)
    return cls._calibrated(setting,
                           float(sample_items),
                           sample_items=sample_items)

  @property
  def clip(self) -> float:
    """C = k."""
    return float(self.sample_items)

  def client_values(self, x, round_seed):
    """k item units of x drawn without replacement (a non-finite x: none)."""
    k, dim = self.sample_items, self.dim
    test_seed = self.factory._seed  # pylint: disable=protected-access  # its factory's settings
    x = tf.cast(x, tf.float64)
    counts = tf.cast(tf.maximum(tf.round(x), 0.0), tf.int64)
    counts = tf.where(tf.reduce_all(tf.math.is_finite(x)), counts,
                      tf.zeros_like(counts))
    if test_seed is None:
      noise_seed = entropy_lib.os_entropy_seed()
    else:  # tests only: a function of the round and the input
      digest = tf.bitcast(
          tf.fingerprint(tf.reshape(tf.bitcast(counts, tf.uint8), [1, -1]))[0],
          tf.int64)
      noise_seed = tf.random.experimental.stateless_fold_in(round_seed, digest)
    # A uniformly random k-subset of the item units: the k smallest of
    # iid uniform keys (a random permutation's prefix).
    items = tf.repeat(tf.range(dim, dtype=tf.int64), counts)
    total = tf.shape(items, out_type=tf.int64)[0]
    keys = tf.random.stateless_uniform(tf.reshape(total, [1]),
                                       noise_seed,
                                       dtype=tf.float64)
    keep = tf.minimum(total, k)
    _, chosen = tf.math.top_k(-keys, k=tf.cast(keep, tf.int32))
    picked = tf.gather(items, chosen)
    kept = tf.math.bincount(tf.cast(picked, tf.int32),
                            minlength=dim,
                            maxlength=dim,
                            dtype=tf.int64)
    return tf.reshape(tf.cast(kept, tf.float64), [dim])

  def simulated_values(self, x, rng):
    return fq.sample_items(
        np.asarray(x).astype(np.int64), self.sample_items,
        rng).astype(np.float64)


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
