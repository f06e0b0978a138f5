"""Federated frequency estimation processes: TFFE, MFFE, fixed clip, baselines.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): Algorithms 1-3 (cPBM over Kashin's representation),
Section 3.3 (OcPBM: clip at the eq. 5 quantile), Algorithms 4-6 (TFFE: the
quantile by the Haar histogram, then OcPBM), Algorithm 7 and App. D (MFFE),
Section 5.2 (baselines). The math is `tff_ddp.analytics.frequency`; the
pieces are the library's, composed:

* the frequency release is `PoissonBinomialSumFactory` (Kashin encoder) --
  one secure sum;
* TFFE's first phase is the Haar quantile process of
  `tff_ddp.analytics.quantiles` (cPBM over the Haar coefficients) on the
  clients' representation norms -- a second secure sum;
* MFFE's indicator is a second `PoissonBinomialSumFactory` on one
  coordinate;
* budgets are calibrated by `tff_ddp.aggregators.calibrated` and split by
  `tff_ddp.accounting.calibration.split_budget`; every event is the
  aggregators' own, composed.

A data-dependent clip C (TFFE's C-hat, MFFE's C^(r)) is applied by scaling:
clients send x / C to a cPBM aggregator built with l2_clip = 1 and the
server multiplies the decoded sum by C. Kashin's representation is
positively homogeneous (its truncation levels scale with ||x||), so the
representation of x / C is y / C, its clip to 1 is clip_C(y) / C, and the
Bernoulli probabilities 1/2 + theta y'[k] are those of Algorithm 3 with
clip C: the same distribution, from an aggregator whose configuration is
public and fixed. (Its `l2_clip` measurement therefore says 1; the clip in
use is the process's `clip` measurement.) The privacy event does not
depend on C (Lemma 2).

Protocols (`build_frequency_process(protocol=...)`):

* 'two_phase' (TFFE, Algorithm 6): `next(state, x)` runs both phases on the
  same clients. Phase 1: each client computes ||y_i||_2 of the Kashin
  representation that phase 2 will use (the frame of the frequency
  aggregator's coming round, `secure_sum.round_seed`), the Haar quantile
  process (2^b bins over [0, B], B = K max_items -- the paper's choice,
  K the Kashin level, since ||y|| <= K ||x||_2 <= K ||x||_1) estimates its
  `target_quantile` (default eq. 5's 1 - sqrt(D / (4 m n theta^2)),
  Algorithm 5 normalising by the public count n; a user without data
  (||y_i|| = 0) sends no bin, `norm_message`) -> C-hat. If the quantile
  round fails (status not 'ok': too few clients) C-hat = B. Phase 2: OcPBM
  with C = C-hat. Event: Composed([phase 1, phase 2]) with the measured
  client counts (Proposition 4 composes the same two releases).
  `two_phase_computations` gives the two phases as separate computations
  (the CLI runs them one after the other to report progress per phase).
* 'multi_round' (MFFE, Algorithm 7): each `next(state, x)` is one round on
  a batch of N clients with the current C^(r): OcPBM of x_i / C^(r) and a
  cPBM (C = 1, theta', m') of the indicator s_i = +1 if ||y_i|| > C^(r),
  -1 if 0 < ||y_i|| <= C^(r), and 0 for a user without data (y_i = 0;
  `indicator_message`). The paper's +-1 sends -1 for no data, and its pair
  with +1 is replace-one (4x the RDP of the zero-out pair it was costed
  as); with 0 for no data every pair is zero-out, and users with data send
  what the paper's +-1 sends (4x less variance than {0, 1} at the same
  epsilon; benchmarks/RESULTS.md, "Neighbouring relation"). A user without
  data in a round counts as half above C in gamma-hat. With S the decoded
  sum of the s_i, the fraction above C
  is (S / N + 1) / 2, the estimated quantile level of C is gamma-hat = 1 -
  that (clipped to [0, 1]), and C^(r+1) = C^(r) exp(-eta (gamma-hat -
  gamma*)). (Algorithm 7 writes gamma-hat for the "current quantile"; with
  the minus sign of its update it must be the level of C -- the fraction
  *at or below* C -- for C to move towards the target, as in Andrew et
  al. 2021's adaptive clipping.) gamma* defaults to Corollary 1's 1 -
  sqrt(D / (4 m n theta^2)) with n = N R the whole population. The result
  is the running estimate of sum_i x_i over all rounds so far.
* 'fixed': cPBM with the given clip C (Algorithm 3 as published).
* 'normalize', 'sample': the Table 2 baselines on the same aggregator
  (see `tff_ddp.analytics.frequency`): x / ||x||_2 with C = 1; k items
  drawn without replacement (private client randomness) with C = k.
  C_median is 'two_phase' with target_quantile=0.5; the central and local
  Gaussian baselines need a trusted server or no secure sum and are
  simulated (`frequency_simulation`).

Neighbouring relation (`NEIGHBOURS`): one user's data removed -- the user
still takes part in the secure sums (participation is public by protocol),
holds no items (x = 0) and its noise shares stay in the sums. "No data"
sends the zero message of every release: zeros to the frequency cPBM
(x / C = 0), no bin in phase 1 (norm NaN), indicator 0. So every pair
(a user's messages, no data) is a zero-out pair of each release, and the
zero-out curve of each event (`tff_ddp.accounting.pbm_rdp`) is exact for
it -- checked by brute force over every message on small inputs
(tff_ddp_tests/analytics/neighbour_test.py). (Before, no data sent -1 to
the indicator and bin 0 to phase 1: replace-one pairs costed as zero-out.)

Accounting. Every epsilon is against the named adversary ('server' by
default: it runs the protocol, sees who takes part and the secure sums'
outputs), for that relation. 'two_phase' and the single-release protocols
cover one `next` (`within_budget` turns False after it). 'multi_round'
states its assumption with `disjoint_rounds`:

* True (the paper's, App. D): every user takes part in one round only, the
  batches are fixed independently of the data, and the server does not
  learn more than the secure sums' outputs and who took part. A user's
  data then enters one round's release; later rounds depend on it only
  through that round's output (C^(r+1) is computed from it), which is
  post-processing together with other users' independent releases, so the
  whole run is as private as one round (parallel composition, adaptive
  version; the tests check it by brute force on small cases). The budget
  is spent per round -- and covers the R rounds only because nobody comes
  back. A user in two rounds voids it.
* False: users may take part in several rounds; the budget covers R
  rounds composed (`rounds` times the round's event).

Either way each round's measurements carry that round's event, so an
accountant of the actual participation can compose them.

What a round releases: the estimate and the clip (functions of the noisy
sums and of public configuration), the sub-processes' measurements
(configuration, the public client counts, the noisy quantile CDF, their
events), the top-level `dp_event` of the round, `within_budget`, `status`
(from the public count and the configuration). Nothing per client.

Rounds the process does not answer normally (`status`, one of
`quantiles.STATUSES`; a str from a Python call of `next`):

* more clients than the secure sums hold (`FrequencyParameters.
  ring_capacity()`: the rings are sized for expected_clients_per_round):
  with on_wrap='raise' (the default) `next` raises
  `tff_ddp.utils.rounds.RoundRefusedError` (state untouched) saying to
  raise expected_clients_per_round; with on_wrap='flag' the estimate is
  returned with status 'sum_may_wrap' (never 'ok');
* no clients: status 'no_clients' (the estimate is the noise-free zero);
* non-finite client values: the client sends the zero message of every
  release, its "no data" (counted in the public n, in no bin, indicator
  0). How many did so is not released. A round in which no valid client
  remains shows it only through noised quantities: TFFE's phase-1 quantile
  then reports 'too_few_values' from its noisy total (and the clip falls
  back to B, `clip_fallback`); the single-release protocols and MFFE
  release no count of valid clients (their estimate is then noise).
"""

import collections
import dataclasses
from typing import Any, Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import calibration
from tff_ddp.accounting import event_io
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics import budget
from tff_ddp.analytics import frequency as fq
from tff_ddp.analytics import quantile_calibration as qc
from tff_ddp.analytics import quantiles as quantiles_lib
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.utils import checks
from tff_ddp.utils import entropy as entropy_lib
from tff_ddp.utils import rounds as rounds_lib
from tff_ddp.utils import tensors

PROTOCOLS = ('two_phase', 'multi_round', 'fixed', 'normalize', 'sample')
# The neighbouring relation every epsilon here is for (module docstring).
NEIGHBOURS = ("neighbours: one user's data removed (it still takes part in "
              'the secure sums with no items and its noise shares)')
DTYPES = (np.float32, np.float64, np.int32, np.int64)
DEFAULT_NUM_TRIALS = 30
DEFAULT_BUDGET_FRACTION = 1.0 / 11.0  # "about 10:1" (Section 5.2)
_QUANTILE_BITS = 18
# A clip C outside this range makes the estimate (the decoded sum times C,
# the clients' x / C) overflow: C = 1e308 gives NaN estimates. The same range
# bounds the two-phase histogram's [0, K max_items] (float32 on the clients).
CLIP_RANGE = (1e-30, 1e30)
MAX_LEARNING_RATE = 100.0


@dataclasses.dataclass(frozen=True)
class FrequencyParameters:
  """What `frequency_parameters` chose (the configuration is public).

  Attributes:
    protocol: one of PROTOCOLS.
    dim: d, items per client vector.
    value_dtype: the clients' dtype.
    expected_clients_per_round: n (TFFE, fixed) or N (MFFE, per round).
    factory: the frequency `PoissonBinomialSumFactory` (l2_clip = 1 on
      scaled inputs for 'two_phase' / 'multi_round', the clip otherwise).
    theta, num_trials: its cPBM parameters.
    divisor: 'l2' or 'linf'.
    output_dim, level: D and K of its Kashin encoder.
    effective_dim: D_eff of `frequency.effective_dimension`.
    clip: the clip ('fixed', 'normalize', 'sample') or the initial clip
      ('multi_round'); None for 'two_phase'.
    target_quantile: gamma* ('two_phase', 'multi_round').
    quantile: the phase-1 `QuantileParameters` ('two_phase').
    num_bins, upper_bound: the phase-1 histogram: 2^b bins over [0, B].
    indicator_factory: MFFE's indicator aggregator.
    indicator_theta, indicator_num_trials: its parameters.
    rounds: the rounds the budget covers (MFFE: R).
    total_clients: n of the target (MFFE: N R by default).
    disjoint_rounds: MFFE's accounting assumption (module docstring).
    learning_rate: MFFE's eta.
    sample_items: k of 'sample'.
    epsilon: epsilon of `event` at `delta` against `adversary`, for the
      relation `NEIGHBOURS` (<= the target).
    delta, adversary: the budget's.
    round_event: the event of one `next` with the expected clients.
    event: the event `epsilon` covers.
    budget: the `SplitBudget` of a two-release round, else None.
  """

  protocol: str
  dim: int
  value_dtype: Any
  expected_clients_per_round: int
  factory: Any
  theta: float
  num_trials: int
  divisor: str
  output_dim: int
  level: float
  effective_dim: float
  clip: Optional[float]
  target_quantile: Optional[float]
  quantile: Optional[qc.QuantileParameters]
  num_bins: Optional[int]
  upper_bound: Optional[float]
  indicator_factory: Any
  indicator_theta: Optional[float]
  indicator_num_trials: Optional[int]
  rounds: int
  total_clients: int
  disjoint_rounds: bool
  learning_rate: Optional[float]
  sample_items: Optional[int]
  epsilon: float
  delta: float
  adversary: str
  round_event: dp_accounting.DpEvent
  event: dp_accounting.DpEvent
  budget: Optional[calibration.SplitBudget]

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

  def ring_capacity(self, owner: str = 'build_frequency_process'
                    ) -> secure_sum.RingCapacity:
    """The most clients a round holds: the smallest capacity of its secure
    sums (the frequency release's, phase 1's or the indicator's), all
    sized for expected_clients_per_round."""
    capacities = [self.factory.capacity(self.aggregated_type).capacity]
    if self.quantile is not None:
      capacities.append(self.quantile.ring_capacity().capacity)
    if self.indicator_factory is not None:
      capacities.append(self.indicator_factory.capacity(
          tff.TensorType(np.float64, [1])).capacity)
    return secure_sum.RingCapacity(
        capacity=min(capacities), owner=owner,
        sized_for=('expected_clients_per_round='
                   f'{self.expected_clients_per_round}'))

  def encoder(self):
    """The frequency aggregator's encoder (Kashin)."""
    return self.factory.encoder(self.aggregated_type)

  @property
  def scaled(self) -> bool:
    """Whether clients send x / C to an aggregator with clip 1."""
    return self.protocol in ('two_phase', 'multi_round')


def _frequency_calibrator(dim, n, calibrate, fixed, l2_clip, divisor, delta,
                          adversary, rounds, seed, kashin_options):
  """eps -> (CalibratedFactory, event) of the frequency release.

  calibrate: 'theta' (fixed = num_trials) or 'num_trials' (fixed = theta).
  """
  value_type = tff.TensorType(np.float64, [dim])
  other = 'num_trials' if calibrate == 'theta' else 'theta'

  def calibrate_fn(eps):
    result = calibrated.poisson_binomial(
        value_type, eps, delta, parameter=calibrate, rounds=rounds,
        adversary=adversary, l2_clip=l2_clip, expected_clients_per_round=n,
        encoder='kashin', divisor=divisor, seed=seed, on_wrap='flag',
        **{other: fixed}, **kashin_options)
    return result, result.event

  return calibrate_fn


def _theta_and_trials(calibrate, fixed, result):
  if calibrate == 'theta':
    return float(result.value), int(fixed)
  return float(fixed), int(result.value)


@budget.warn_if_underspent  # says when theta's cap leaves budget unspent
def frequency_parameters(
    protocol: str,
    dim: int,
    expected_clients_per_round: int,
    epsilon: float,
    delta: float,
    *,
    num_trials: Optional[int] = None,
    theta: Optional[float] = None,
    calibrate: str = 'theta',
    clip: Optional[float] = None,
    max_items: Optional[float] = None,
    num_bins: int = 64,
    quantile_num_trials: Optional[int] = None,
    budget_fraction: float = DEFAULT_BUDGET_FRACTION,
    target_quantile: Optional[float] = None,
    rounds: int = 1,
    total_clients: Optional[int] = None,
    disjoint_rounds: bool = True,
    learning_rate: float = 1.0,
    indicator_num_trials: Optional[int] = None,
    sample_items: Optional[int] = None,
    divisor: str = 'l2',
    adversary: str = 'server',
    value_dtype=np.float32,
    seed: Optional[int] = None,
    kashin_options: Optional[dict] = None,
) -> FrequencyParameters:
  """Calibrates a frequency protocol to (epsilon, delta) (module docstring).

  Args:
    protocol: one of PROTOCOLS.
    dim: d >= 1, the items.
    expected_clients_per_round: n (N per round for 'multi_round').
    epsilon, delta: the budget (see the module docstring for what it
      covers), against `adversary`, zero-out neighbours.
    num_trials: m of the frequency cPBM when theta is calibrated (default
      30, the paper's).
    theta: theta of the frequency cPBM when num_trials is calibrated.
    calibrate: 'theta' (default: the largest theta <= 1/4 that meets the
      budget for the given m; at theta = 1/4 the budget may not be spent,
      see `epsilon`) or 'num_trials' (the most trials for the given theta:
      spends any budget, in integer steps).
    clip: C for 'fixed'; the initial C^(1) for 'multi_round' (default 1,
      as the paper's App. E.1); in CLIP_RANGE. C^(1) matters: with eta = 1
      the clip grows by at most e^{gamma*} a round, so from 1 to norms in
      the tens the first rounds clip most of their users' mass (on the
      paper's i.i.d. data C^(1) = 10 reproduces its Table 3, 1 gives ~1.5x
      its error); a rough public guess of the norms' scale is better.
    max_items: 'two_phase': the public bound on ||x_i||_1 (the most items
      a user holds); the histogram covers [0, K max_items].
    num_bins: 'two_phase': 2^b Haar bins (the paper: 64).
    quantile_num_trials: m' of phase 1 (default: the most the 2^18 ring
      holds); theta' is calibrated.
    budget_fraction: rho in (0, 1): phase 1 (or the indicator) gets
      standalone epsilon rho s, the frequency release (1 - rho) s, s
      chosen so the composition meets the budget (`split_budget`). The
      paper's ~10:1 is rho = 1/11.
    target_quantile: gamma* (default eq. 5, or Corollary 1 for MFFE);
      e.g. 0.5 for the C_median baseline.
    rounds: 'multi_round': R (the rounds the budget covers).
    total_clients: 'multi_round': n of Corollary 1 (default N R).
    disjoint_rounds: 'multi_round': the accounting assumption.
    learning_rate: 'multi_round': eta in (0, MAX_LEARNING_RATE].
    indicator_num_trials: 'multi_round': m' (default num_trials, as the
      paper's m' = m = 15); theta' is calibrated.
    sample_items: 'sample': k.
    divisor: 'l2' (Algorithm 3) or 'linf' (module doc of `frequency`).
    adversary: 'server' or 'release'.
    value_dtype: the clients' dtype (float32, float64, int32, int64).
    seed: tests only (deterministic noise; see the aggregators).
    kashin_options: KashinEncoder options (redundancy, eta, ...).

  Raises:
    TypeError / ValueError: bad arguments, or a target the accountant
      cannot meet (the message says why).
  """
  protocol = checks.choice(protocol, 'protocol', PROTOCOLS)
  dim = checks.integer(dim, 'dim', 1)
  n = checks.integer(expected_clients_per_round, 'expected_clients_per_round',
                     1, base.MAX_MODULUS - 1)
  epsilon = checks.positive(epsilon, 'epsilon')
  delta = checks.real(delta, 'delta', 0.0, 1.0, low_open=True,
                      high_open=True)
  calibrate = checks.choice(calibrate, 'calibrate', ('theta', 'num_trials'))
  if calibrate == 'theta':
    if theta is not None:
      raise ValueError("theta is what calibrate='theta' chooses; give "
                       "num_trials, or calibrate='num_trials' with theta.")
    fixed = checks.integer(
        DEFAULT_NUM_TRIALS if num_trials is None else num_trials,
        'num_trials', 1)
  else:
    if num_trials is not None:
      raise ValueError("num_trials is what calibrate='num_trials' chooses; "
                       "give theta, or calibrate='theta' with num_trials.")
    if theta is None:
      raise ValueError("calibrate='num_trials' needs theta.")
    fixed = checks.real(theta, 'theta', 0.0, 0.25, low_open=True)
  divisor = checks.choice(divisor, 'divisor', fq.DIVISORS)
  adversary = checks.choice(adversary, 'adversary', ('server', 'release'))
  value_dtype = _value_dtype(value_dtype)
  seed = checks.seed(seed)
  if kashin_options is not None and not isinstance(kashin_options, dict):
    raise TypeError('kashin_options must be a dict of KashinEncoder options '
                    f'(or None), got {kashin_options!r:.100}.')
  kashin_options = dict(kashin_options or {})
  try:
    registry.check_options('kashin', kashin_options)
  except (TypeError, ValueError) as e:
    raise type(e)(f'kashin_options: {e}') from None
  rounds = checks.integer(rounds, 'rounds', 1)
  budget_fraction = checks.real(budget_fraction, 'budget_fraction', 0.0, 1.0,
                                low_open=True, high_open=True)
  encoder = registry.make_encoder('kashin', dim, **kashin_options)
  level, output_dim = float(encoder.level), int(encoder.output_dim)
  effective_dim = fq.effective_dimension(output_dim, divisor, level)
  _refuse_unused(protocol, clip=clip, max_items=max_items,
                 target_quantile=target_quantile, rounds=rounds,
                 total_clients=total_clients, sample_items=sample_items,
                 indicator_num_trials=indicator_num_trials,
                 quantile_num_trials=quantile_num_trials,
                 disjoint_rounds=disjoint_rounds, learning_rate=learning_rate,
                 num_bins=num_bins, budget_fraction=budget_fraction)
  if target_quantile is not None:
    target_quantile = checks.real(target_quantile, 'target_quantile', 0.0,
                                  1.0, low_open=True, high_open=True)
  common = dict(protocol=protocol, dim=dim, value_dtype=value_dtype,
                expected_clients_per_round=n, divisor=divisor,
                output_dim=output_dim, level=level,
                effective_dim=effective_dim, delta=delta,
                adversary=adversary)
  frequency_rounds = 1

  if protocol in ('fixed', 'normalize', 'sample'):
    if protocol == 'fixed':
      if clip is None:
        raise ValueError("protocol='fixed' needs clip (C > 0).")
      clip = _clip(clip)
    elif protocol == 'normalize':
      clip = 1.0
    else:
      if sample_items is None:
        raise ValueError("protocol='sample' needs sample_items (k >= 1).")
      # The clients' top_k takes an int32 k.
      sample_items = checks.integer(sample_items, 'sample_items', 1,
                                    2**31 - 1)
      clip = float(sample_items)
    result, event = _frequency_calibrator(
        dim, n, calibrate, fixed, clip, divisor, delta, adversary, 1, seed,
        kashin_options)(epsilon)
    theta, num_trials = _theta_and_trials(calibrate, fixed, result)
    return FrequencyParameters(
        **common, factory=result.factory, theta=theta,
        num_trials=num_trials, clip=clip, target_quantile=None,
        quantile=None, num_bins=None, upper_bound=None,
        indicator_factory=None, indicator_theta=None,
        indicator_num_trials=None, rounds=1, total_clients=n,
        disjoint_rounds=True, learning_rate=None, sample_items=sample_items,
        epsilon=result.epsilon, round_event=event, event=event, budget=None)

  if protocol == 'two_phase':
    if max_items is None:
      raise ValueError("protocol='two_phase' needs max_items, the public "
                       'bound on the items a user holds (||x||_1).')
    max_items = checks.positive(max_items, 'max_items')
    upper = level * max_items
    if not CLIP_RANGE[0] <= upper <= CLIP_RANGE[1]:
      # The histogram's range [0, K max_items] in float64 and float32 (the
      # norms are float32 on the clients).
      raise ValueError(
          f'max_items must make the histogram range [0, K max_items] (K = '
          f'{level:.4g}, the Kashin level) fit in [1e-30, 1e30], got '
          f'max_items={max_items!r}.')
    num_bins = checks.integer(num_bins, 'num_bins', 2, 2**16)
    quantile_trials = checks.optional_integer(quantile_num_trials,
                                              'quantile_num_trials', 1)

    def phase_one(eps):
      try:
        params = qc.quantile_parameters(
            'haar', 'poisson_binomial', num_bins, n, eps, delta,
            bits=_QUANTILE_BITS, adversary=adversary, seed=seed,
            num_trials=quantile_trials)
      except ValueError as e:
        if quantile_trials is None:
          raise
        # Its message says num_trials: the quantile process's argument.
        raise ValueError(f'quantile_num_trials={quantile_trials}: {e}'
                         ) from None
      return params, params.factory.dp_event(params.value_type)

    calibrators = [phase_one]
    total = n
  else:  # multi_round
    clip = 1.0 if clip is None else _clip(clip)
    disjoint_rounds = checks.boolean(disjoint_rounds, 'disjoint_rounds')
    # C^(r+1) = C^(r) exp(-eta (gamma-hat - gamma*)): a larger eta can
    # overflow (or zero) the clip in one round.
    learning_rate = checks.real(learning_rate, 'learning_rate', 0.0,
                                MAX_LEARNING_RATE, low_open=True)
    if total_clients is None and n * rounds > fq.MAX_COUNT:
      raise ValueError(
          f'rounds * expected_clients_per_round = {n * rounds} is more than '
          f'{fq.MAX_COUNT} clients (the default total_clients); lower '
          'rounds or give total_clients.')
    total = (n * rounds if total_clients is None else
             checks.integer(total_clients, 'total_clients', 1, fq.MAX_COUNT))
    if indicator_num_trials is None and calibrate != 'theta':
      raise ValueError("calibrate='num_trials' needs indicator_num_trials.")
    indicator_trials = checks.integer(
        fixed if indicator_num_trials is None else indicator_num_trials,
        'indicator_num_trials', 1)
    frequency_rounds = 1 if disjoint_rounds else rounds
    indicator_type = tff.TensorType(np.float64, [1])

    def indicator(eps):
      result = calibrated.poisson_binomial(
          indicator_type, eps, delta, parameter='theta',
          rounds=frequency_rounds, adversary=adversary,
          num_trials=indicator_trials, l2_clip=1.0,
          expected_clients_per_round=n, encoder='none', divisor='linf',
          linf_clip=1.0, seed=seed, on_wrap='flag')
      return result, result.event

    calibrators = [indicator]

  calibrators.append(_frequency_calibrator(
      dim, n, calibrate, fixed, 1.0, divisor, delta, adversary,
      frequency_rounds, seed, kashin_options))
  budget = calibration.split_budget(
      calibrators, [budget_fraction, 1.0 - budget_fraction], epsilon, delta,
      adversary)
  first, frequency = budget.results
  theta, num_trials = _theta_and_trials(calibrate, fixed, frequency)
  if target_quantile is None:
    target_quantile = fq.optimal_quantile(effective_dim, num_trials, total,
                                          theta)
  if protocol == 'two_phase':
    round_event = budget.event
    return FrequencyParameters(
        **common, factory=frequency.factory, theta=theta,
        num_trials=num_trials, clip=None, target_quantile=target_quantile,
        quantile=first, num_bins=num_bins, upper_bound=upper,
        indicator_factory=None, indicator_theta=None,
        indicator_num_trials=None, rounds=1, total_clients=n,
        disjoint_rounds=True, learning_rate=None, sample_items=None,
        epsilon=budget.epsilon, round_event=round_event, event=round_event,
        budget=budget)
  one_round = dp_accounting.ComposedDpEvent([
      frequency.factory.dp_event(tff.TensorType(np.float64, [dim])),
      first.factory.dp_event(tff.TensorType(np.float64, [1]))])
  return FrequencyParameters(
      **common, factory=frequency.factory, theta=theta,
      num_trials=num_trials, clip=clip, target_quantile=target_quantile,
      quantile=None, num_bins=None, upper_bound=None,
      indicator_factory=first.factory, indicator_theta=first.value,
      indicator_num_trials=indicator_trials, rounds=rounds,
      total_clients=total, disjoint_rounds=disjoint_rounds,
      learning_rate=learning_rate, sample_items=None,
      epsilon=budget.epsilon, round_event=one_round, event=budget.event,
      budget=budget)


_APPLIES = {
    'clip': ('fixed', 'multi_round'),
    'max_items': ('two_phase',),
    'target_quantile': ('two_phase', 'multi_round'),
    'total_clients': ('multi_round',),
    'sample_items': ('sample',),
    'indicator_num_trials': ('multi_round',),
    'quantile_num_trials': ('two_phase',),
}
_DEFAULTS = {'rounds': (1, ('multi_round',)),
             'disjoint_rounds': (True, ('multi_round',)),
             'learning_rate': (1.0, ('multi_round',)),
             'num_bins': (64, ('two_phase',)),
             'budget_fraction': (DEFAULT_BUDGET_FRACTION,
                                 ('two_phase', 'multi_round'))}


def _clip(clip):
  return checks.real(clip, 'clip', *CLIP_RANGE)


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


def _is_default(value, default) -> bool:
  """value == default, False where == is not a bool (arrays, ...)."""
  try:
    return bool(value == default)
  except (TypeError, ValueError):
    return False


def _refuse_unused(protocol, **given):
  """A ValueError for an argument the protocol would silently ignore."""
  for name, value in given.items():
    if name in _APPLIES:
      if value is not None and protocol not in _APPLIES[name]:
        raise ValueError(f'{name} does not apply to protocol={protocol!r} '
                         f'(only to {_APPLIES[name]}).')
    else:
      default, protocols = _DEFAULTS[name]
      if protocol not in protocols and not _is_default(value, default):
        raise ValueError(f'{name} does not apply to protocol={protocol!r} '
                         f'(only to {protocols}).')


# ---------------------------------------------------------------------------
# TFF computations.


def _selector(struct_type, name):
  return tff.tensorflow.computation(lambda s: s[name], struct_type)


def _float64(x):
  return tf.cast(x, tf.float64)


def _finite(x):
  return tf.reduce_all(tf.math.is_finite(x))


def build_frequency_process(protocol: str, dim: int,
                            expected_clients_per_round: int, epsilon: float,
                            delta: float, *, on_wrap: str = 'raise',
                            **kwargs) -> tff.templates.MeasuredProcess:
  """A frequency-estimation process calibrated to (epsilon, delta).

  Arguments as for `frequency_parameters`, and `on_wrap` ('raise' or
  'flag': a round with more clients than the rings hold; module
  docstring). `next(state, x)` with x one `value_dtype` [d] vector per
  client returns the estimate of sum_i x_i (float64 [d]; 'multi_round': of
  all rounds so far) and the measurements of the module docstring. See
  `build_frequency_process_from_parameters`.
  """
  on_wrap = secure_sum.check_on_wrap(on_wrap)
  return build_frequency_process_from_parameters(frequency_parameters(
      protocol, dim, expected_clients_per_round, epsilon, delta, **kwargs),
                                                 on_wrap=on_wrap)


def build_frequency_process_from_parameters(
    params: FrequencyParameters, *, on_wrap: str = 'raise'
) -> tff.templates.MeasuredProcess:
  """The process of calibrated `params` (module docstring; `on_wrap` as
  for `build_frequency_process`)."""
  if not isinstance(params, FrequencyParameters):
    raise TypeError('params must be FrequencyParameters (from '
                    f'frequency_parameters), got {type(params).__name__}.')
  on_wrap = secure_sum.check_on_wrap(on_wrap)
  if params.protocol == 'two_phase':
    return _two_phase_process(params, on_wrap)
  if params.protocol == 'multi_round':
    return _multi_round_process(params, on_wrap)
  return _single_release_process(params, on_wrap)


TwoPhaseComputations = collections.namedtuple(
    'TwoPhaseComputations', ['initialize', 'estimate_clip',
                             'estimate_frequencies', 'next'])


def two_phase_computations(params: FrequencyParameters, *,
                           on_wrap: str = 'raise') -> TwoPhaseComputations:
  """TFFE as two federated computations, and their composition.

  * initialize() -> state (SERVER): OrderedDict(quantile, frequency).
  * estimate_clip(state, x) -> (quantile state, clip, measurements):
    phase 1 (one secure sum).
  * estimate_frequencies(frequency state, x, clip) -> (frequency state,
    estimate, measurements): phase 2 (one secure sum).
  * next(state, x): both, as the process's `next`.

  Running the phases separately is the same protocol when the frequency
  state is unchanged in between (the phase-1 norms use the frame of the
  frequency aggregator's coming round). Each phase refuses (on_wrap=
  'raise') or flags a round with more clients than the rings hold; their
  Python calls raise `RoundRefusedError` and return statuses as str.
  """
  if not isinstance(params, FrequencyParameters) or (
      params.protocol != 'two_phase'):
    raise ValueError("two_phase_computations needs the parameters of "
                     "protocol='two_phase'.")
  computations = _two_phase(params, secure_sum.check_on_wrap(on_wrap))
  return TwoPhaseComputations(*[rounds_lib.user_facing(c)
                                for c in computations])


def _status(n, may_wrap):
  """The frequency round's status code (an index into STATUSES)."""
  statuses = quantiles_lib.STATUSES

  def code(name):
    return tf.constant(statuses.index(name), tf.int32)

  return tf.where(tf.equal(n, 0), code('no_clients'),
                  tf.where(may_wrap, code('sum_may_wrap'), code('ok')))


def _status_text(code):
  return tf.gather(tf.constant(list(quantiles_lib.STATUSES)), code)


def _checked(ring, on_wrap, n, *values):
  """`values` gated by the refusal of a round above `ring` (on_wrap='raise'),
  and whether the round's sums may wrap."""
  n = tf.cast(n, tf.int64)
  may_wrap = ring.may_wrap(n)
  if on_wrap != 'raise':
    return (may_wrap,) + values
  with tf.control_dependencies([ring.assertion(n)]):
    return (tf.identity(may_wrap),) + tf.nest.map_structure(tf.identity,
                                                            values)


def norm_message(norm, finite=True):
  """TFFE phase 1's client value: ||y||, NaN (no bin) when ||y|| = 0.

  ||y|| = 0 exactly when the user holds no items (x = 0; Kashin's
  representation of 0 is 0). Such a user is the neighbouring relation's
  "no data" and must send phase 1's zero message, so its norm is NaN (the
  quantile process encodes NaN as zeros). The 'exact' CDF (divided by the
  public n) then leaves those users out: C-hat sits at level target + (the
  fraction without data) among all n norms. Counting the missing mass
  n - (noisy total) at norm 0 would remove that bias by post-processing,
  but adds the noisy total's noise to every CDF value; on Table 2's data
  (<= 0.04% without data) it widened the level's spread from 0.012 to
  0.014 for a bias of <= 0.0004 (benchmarks/RESULTS.md, "Neighbouring
  relation"), so it is not done. Non-finite clients are NaN too.
  """
  norm = tf.convert_to_tensor(norm, tf.float64)
  keep = tf.logical_and(finite, norm > 0)
  return tf.cast(tf.where(keep, norm, np.nan), tf.float32)


def indicator_message(norm, clip, finite=True):
  """MFFE's indicator: +1 if ||y|| > C, -1 if 0 < ||y|| <= C, 0 if ||y|| = 0.

  0 is the zero message of "no data" (x = 0, so y = 0), the neighbouring
  relation's neighbour: every pair (user's message, 0) is a zero-out pair
  of the indicator's cPBM, which the zero-out curve covers. (The paper's
  +-1 sends -1 for no data; its pair with +1 is replace-one, about 4x the
  RDP.) Non-finite clients send 0 too.
  """
  norm = tf.convert_to_tensor(norm, tf.float64)
  sign = tf.where(norm > clip, tf.constant(1.0, tf.float64),
                  tf.constant(-1.0, tf.float64))
  keep = tf.logical_and(finite, norm > 0)
  return tf.where(keep, sign, tf.constant(0.0, tf.float64))


def _norm_computation(params, seed_type):
  encoder = params.encoder()

  @tff.tensorflow.computation(params.value_type, seed_type)
  def norm_fn(x, seed):
    x = _float64(x)
    finite = _finite(x)
    y = encoder.encode(tf.where(finite, x, tf.zeros_like(x)), seed)
    # A non-finite client, and a client with no data (x = 0, the
    # neighbouring relation's "no data"), is in no bin: NaN, which the
    # quantile process encodes as the zero message (module docstring).
    return norm_message(tensors.overflow_safe_norm(y), finite)

  return norm_fn


def _two_phase(params, on_wrap):
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  quantile_process = quantiles_lib.build_quantile_process_from_parameters(
      params.quantile, 0.0, params.upper_bound, [params.target_quantile],
      count='exact', on_wrap='flag')
  f_state_type = aggregator.initialize.type_signature.result.member
  q_state_type = quantile_process.initialize.type_signature.result.member
  upper = float(params.upper_bound)
  target = float(params.target_quantile)

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(collections.OrderedDict(
        quantile=quantile_process.initialize(),
        frequency=aggregator.initialize()))

  state_type = initialize.type_signature.result
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  seed_type = seed_fn.type_signature.result
  norm_fn = _norm_computation(params, seed_type)
  q_result_type = quantile_process.next.type_signature.result.result.member
  q_meas_type = (
      quantile_process.next.type_signature.result.measurements.member)

  @tff.tensorflow.computation(q_result_type, q_meas_type)
  def clip_fn(values, measurements):
    _, values, measurements = _checked(
        ring, on_wrap, measurements['aggregator']['participating_clients'],
        values, measurements)
    ok = tf.equal(measurements['status'], 'ok')
    c = values[0]
    usable = ok & tf.math.is_finite(c) & (c > 0)
    clip = tf.where(usable, c, tf.constant(upper, tf.float64))
    out = collections.OrderedDict(
        clip=clip, clip_fallback=tf.logical_not(usable),
        target_quantile=tf.constant(target, tf.float64),
        quantile=measurements)
    return clip, out

  @tff.federated_computation(
      state_type, tff.FederatedType(params.value_type, tff.CLIENTS))
  def estimate_clip(state, x):
    seed = tff.federated_map(seed_fn, tff.federated_map(
        _selector(state_type.member, 'frequency'), state))
    norms = tff.federated_map(norm_fn, (x, tff.federated_broadcast(seed)))
    q_state = tff.federated_map(_selector(state_type.member, 'quantile'),
                                state)
    output = quantile_process.next(q_state, norms)
    clip_and_meas = tff.federated_map(clip_fn, (output.result,
                                                output.measurements))
    clip = tff.federated_map(_selector(clip_and_meas.type_signature.member,
                                       0), clip_and_meas)
    measurements = tff.federated_map(
        _selector(clip_and_meas.type_signature.member, 1), clip_and_meas)
    return output.state, clip, measurements

  frequency_phase = _scaled_release(params, aggregator, ring, on_wrap)

  @tff.federated_computation(
      tff.FederatedType(f_state_type, tff.SERVER),
      tff.FederatedType(params.value_type, tff.CLIENTS),
      tff.FederatedType(np.float64, tff.SERVER))
  def estimate_frequencies(f_state, x, clip):
    return frequency_phase(f_state, x, clip)

  phase_one_meas_type = estimate_clip.type_signature.result[2].member
  f_meas_type = estimate_frequencies.type_signature.result[2].member

  @tff.tensorflow.computation(phase_one_meas_type, f_meas_type, f_state_type)
  def measure_fn(phase_one, phase_two, f_state):
    n = tf.cast(phase_two['frequency']['participating_clients'], tf.int64)
    may_wrap = ring.may_wrap(n) | tf.equal(
        phase_one['quantile']['status'], 'sum_may_wrap')
    return collections.OrderedDict(
        status=_status_text(_status(n, may_wrap)),
        clip=phase_one['clip'], clip_fallback=phase_one['clip_fallback'],
        target_quantile=phase_one['target_quantile'],
        within_budget=f_state['round'] < 1,
        dp_event=event_io.composed_structure([
            phase_one['quantile']['aggregator']['dp_event'],
            phase_two['frequency']['dp_event']]),
        quantile=phase_one['quantile'], frequency=phase_two['frequency'])

  @tff.federated_computation(
      state_type, tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    q_state, clip, phase_one = estimate_clip(state, x)
    f_state = tff.federated_map(_selector(state_type.member, 'frequency'),
                                state)
    new_f_state, estimate, phase_two = estimate_frequencies(f_state, x, clip)
    measurements = tff.federated_map(measure_fn,
                                     (phase_one, phase_two, f_state))
    new_state = tff.federated_zip(collections.OrderedDict(
        quantile=q_state, frequency=new_f_state))
    return tff.templates.MeasuredProcessOutput(new_state, estimate,
                                               measurements)

  return TwoPhaseComputations(initialize, estimate_clip,
                              estimate_frequencies, next_fn)


def _scaled_release(params, aggregator, ring, on_wrap):
  """(f_state, x, clip) -> (state, estimate, measurements): OcPBM with a
  server-side clip, by scaling (module docstring), refusing or flagging a
  round above `ring`. A federated function to call inside a federated
  computation."""

  @tff.tensorflow.computation(params.value_type, np.float64)
  def scale_fn(x, clip):
    return _float64(x) / clip

  meas_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(params.aggregated_type, np.float64, meas_type)
  def rescale_fn(scaled_sum, clip, measurements):
    _, scaled_sum = _checked(ring, on_wrap,
                             measurements['participating_clients'],
                             scaled_sum)
    return scaled_sum * clip

  @tff.tensorflow.computation(meas_type, np.float64)
  def measure_fn(measurements, clip):
    return collections.OrderedDict(clip=clip, frequency=measurements)

  def phase(f_state, x, clip):
    scaled = tff.federated_map(scale_fn, (x, tff.federated_broadcast(clip)))
    output = aggregator.next(f_state, scaled)
    estimate = tff.federated_map(rescale_fn, (output.result, clip,
                                              output.measurements))
    measurements = tff.federated_map(measure_fn, (output.measurements, clip))
    return output.state, estimate, measurements

  return phase


def _two_phase_process(params, on_wrap):
  computations = _two_phase(params, on_wrap)
  return rounds_lib.user_facing_process(tff.templates.MeasuredProcess(
      computations.initialize, computations.next))


def _multi_round_process(params, on_wrap):
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  indicator_type = tff.TensorType(np.float64, [1])
  indicator = params.indicator_factory.create(indicator_type)
  f_state_type = aggregator.initialize.type_signature.result.member
  dim = params.dim
  initial_clip = float(params.clip)
  target = float(params.target_quantile)
  eta = float(params.learning_rate)
  rounds = int(params.rounds)
  encoder = params.encoder()

  @tff.tensorflow.computation
  def server_init():
    return collections.OrderedDict(
        clip=tf.constant(initial_clip, tf.float64),
        estimate=tf.zeros([dim], tf.float64),
        clients=tf.constant(0, tf.int64))

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(collections.OrderedDict(
        frequency=aggregator.initialize(), indicator=indicator.initialize(),
        server=tff.federated_eval(server_init, tff.SERVER)))

  state_type = initialize.type_signature.result
  server_type = state_type.member['server']
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  seed_type = seed_fn.type_signature.result

  @tff.tensorflow.computation(params.value_type, seed_type, np.float64)
  def client_fn(x, seed, clip):
    x = _float64(x)
    finite = _finite(x)
    y = encoder.encode(tf.where(finite, x, tf.zeros_like(x)), seed)
    sign = indicator_message(tensors.overflow_safe_norm(y), clip, finite)
    return collections.OrderedDict(scaled=x / clip, indicator=sign[None])

  client_type = client_fn.type_signature.result
  f_meas_type = aggregator.next.type_signature.result.measurements.member
  i_meas_type = indicator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(server_type, params.aggregated_type,
                              indicator_type, f_meas_type, i_meas_type,
                              f_state_type)
  def server_fn(server, scaled_sum, indicator_sum, f_meas, i_meas, f_state):
    count = tf.cast(f_meas['participating_clients'], tf.int64)
    may_wrap, server, scaled_sum, indicator_sum = _checked(
        ring, on_wrap, count, server, scaled_sum, indicator_sum)
    clip = server['clip']
    n = tf.cast(count, tf.float64)
    round_estimate = scaled_sum * clip
    above = tf.clip_by_value(
        (tf.math.divide_no_nan(indicator_sum[0], n) + 1.0) / 2.0, 0.0, 1.0)
    level = 1.0 - above
    # No clients: nothing learnt, C unchanged.
    new_clip = tf.where(n > 0, clip * tf.exp(-eta * (level - target)), clip)
    new_server = collections.OrderedDict(
        clip=new_clip, estimate=server['estimate'] + round_estimate,
        clients=server['clients'] + tf.cast(n, tf.int64))
    measurements = collections.OrderedDict(
        status=_status_text(_status(count, may_wrap)),
        clip=clip, next_clip=new_clip, quantile_level=level,
        target_quantile=tf.constant(target, tf.float64),
        round_estimate=round_estimate,
        clients_so_far=new_server['clients'],
        within_budget=f_state['round'] < rounds,
        dp_event=event_io.composed_structure([f_meas['dp_event'],
                                              i_meas['dp_event']]),
        frequency=f_meas, indicator=i_meas)
    return new_server, new_server['estimate'], measurements

  @tff.federated_computation(
      state_type, tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    member = state_type.member
    f_state = tff.federated_map(_selector(member, 'frequency'), state)
    i_state = tff.federated_map(_selector(member, 'indicator'), state)
    server = tff.federated_map(_selector(member, 'server'), state)
    clip = tff.federated_map(_selector(server_type, 'clip'), server)
    seed = tff.federated_map(seed_fn, f_state)
    sent = tff.federated_map(client_fn, (
        x, tff.federated_broadcast(seed), tff.federated_broadcast(clip)))
    f_out = aggregator.next(f_state, tff.federated_map(
        _selector(client_type, 'scaled'), sent))
    i_out = indicator.next(i_state, tff.federated_map(
        _selector(client_type, 'indicator'), sent))
    new_server, estimate, measurements = _unzip3(tff.federated_map(
        server_fn, (server, f_out.result, i_out.result, f_out.measurements,
                    i_out.measurements, f_state)))
    new_state = tff.federated_zip(collections.OrderedDict(
        frequency=f_out.state, indicator=i_out.state, server=new_server))
    return tff.templates.MeasuredProcessOutput(new_state, estimate,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(initialize, next_fn))


def _unzip3(value):
  member = value.type_signature.member
  return tuple(tff.federated_map(_selector(member, i), value)
               for i in range(3))


def _sample_fn(params, seed_type):
  """Client step of 'sample': keep k items without replacement."""
  k = int(params.sample_items)
  dim = params.dim
  test_seed = params.factory._seed  # pylint: disable=protected-access

  @tff.tensorflow.computation(params.value_type, seed_type)
  def sample(x, round_seed):
    counts = tf.cast(tf.maximum(tf.round(_float64(x)), 0.0), tf.int64)
    counts = tf.where(_finite(_float64(x)), counts, tf.zeros_like(counts))
    if test_seed is None:
      noise_seed = entropy_lib.os_entropy_seed()
    else:  # tests only: a function of the round and the input
      digest = tf.bitcast(tf.fingerprint(tf.reshape(
          tf.bitcast(counts, tf.uint8), [1, -1]))[0], tf.int64)
      noise_seed = tf.random.experimental.stateless_fold_in(round_seed,
                                                            digest)
    # A uniformly random k-subset of the item units: the k smallest of
    # iid uniform keys (a random permutation's prefix).
    items = tf.repeat(tf.range(dim, dtype=tf.int64), counts)
    total = tf.shape(items, out_type=tf.int64)[0]
    keys = tf.random.stateless_uniform(tf.reshape(total, [1]), noise_seed,
                                       dtype=tf.float64)
    keep = tf.minimum(total, k)
    _, chosen = tf.math.top_k(-keys, k=tf.cast(keep, tf.int32))
    picked = tf.gather(items, chosen)
    kept = tf.math.bincount(tf.cast(picked, tf.int32), minlength=dim,
                            maxlength=dim, dtype=tf.int64)
    return tf.reshape(tf.cast(kept, tf.float64), [dim])

  return sample


def _single_release_process(params, on_wrap):
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  f_state_type = aggregator.initialize.type_signature.result.member
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  seed_type = seed_fn.type_signature.result
  clip = float(params.clip)
  protocol = params.protocol
  if protocol == 'sample':
    prepare = _sample_fn(params, seed_type)
  else:

    @tff.tensorflow.computation(params.value_type, seed_type)
    def prepare(x, round_seed):
      del round_seed
      x = _float64(x)
      if protocol == 'normalize':
        norm = tensors.overflow_safe_norm(x)
        x = tf.math.divide_no_nan(x, norm)
      return x

  meas_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(meas_type, f_state_type)
  def measure_fn(measurements, f_state):
    count = measurements['participating_clients']
    may_wrap, measurements = _checked(ring, on_wrap, count, measurements)
    return collections.OrderedDict(
        status=_status_text(_status(tf.cast(count, tf.int64), may_wrap)),
        clip=tf.constant(clip, tf.float64),
        within_budget=f_state['round'] < 1,
        dp_event=measurements['dp_event'], frequency=measurements)

  @tff.federated_computation
  def initialize():
    return aggregator.initialize()

  @tff.federated_computation(
      initialize.type_signature.result,
      tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    seed = tff.federated_map(seed_fn, state)
    prepared = tff.federated_map(prepare, (x, tff.federated_broadcast(seed)))
    output = aggregator.next(state, prepared)
    measurements = tff.federated_map(measure_fn,
                                     (output.measurements, state))
    return tff.templates.MeasuredProcessOutput(output.state, output.result,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(initialize, next_fn))


def describe(params: FrequencyParameters) -> str:
  """One line: the protocol, its parameters and its epsilon (adversary)."""
  parts = [f'{params.protocol}: cPBM theta={params.theta:.4f} '
           f'm={params.num_trials} D={params.output_dim} '
           f'divisor={params.divisor}']
  if params.quantile is not None:
    parts.append(f"phase 1 Haar {params.num_bins} bins over "
                 f"[0, {params.upper_bound:.4g}] theta'="
                 f"{params.quantile.theta:.4f} m'={params.quantile.num_trials}"
                 f", target quantile {params.target_quantile:.4f}")
  if params.indicator_factory is not None:
    parts.append(f"indicator theta'={params.indicator_theta:.4f} "
                 f"m'={params.indicator_num_trials}, target quantile "
                 f'{params.target_quantile:.4f}, eta={params.learning_rate}'
                 f', R={params.rounds}, disjoint rounds: '
                 f'{params.disjoint_rounds}')
  if params.clip is not None and params.protocol != 'multi_round':
    parts.append(f'C={params.clip:g}')
  parts.append(f'epsilon={params.epsilon:.4g} at delta={params.delta:g} '
               f'against the {params.adversary}; {NEIGHBOURS}')
  return '; '.join(parts)
