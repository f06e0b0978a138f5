"""MFFE (Algorithm 7, App. D): its parameters, its TFF process, its simulation.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): the clip follows the rounds, moved by a private
indicator of the clients above it. `MultiRoundParameters` (its builder
`calibrate`), its process (`multi_round_process`: the pieces of
`computations`) and `simulate`, distribution-exact runs (the pieces of
`simulation`), with the indicator's alternative encodings.
"""

import collections
import dataclasses
import math
from typing import Any, ClassVar, List, Optional, Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import calibration as calibration_lib
from tff_ddp.accounting import event_io
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import computations
from tff_ddp.analytics.frequency import setting as setting_lib
from tff_ddp.analytics.frequency import simulation as fs
from tff_ddp.utils import checks
from tff_ddp.utils import rounds as rounds_lib
from tff_ddp.utils import tensors

MAX_LEARNING_RATE = 100.0


@dataclasses.dataclass(frozen=True)
class MultiRoundParameters(setting_lib.FrequencyParameters):
  """MFFE (Algorithm 7, App. D): the clip follows the rounds.

  Each `next(state, x)` is one round on a batch of N clients with the
  current C^(r): OcPBM of x_i / C^(r) and a cPBM (C = 1, theta', m') of
  the indicator s_i = +1 if ||y_i|| > C^(r), -1 if 0 < ||y_i|| <= C^(r),
  and 0 for a user without data (`indicator_message`). The paper's +-1 sends -1 for no data, and its pair
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
  `frequency.process`), which the library cannot check: a user in two
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
      setting: setting_lib.FrequencySetting,
      *,
      rounds: int = 1,
      clip: Optional[float] = None,
      total_clients: Optional[int] = None,
      disjoint_rounds: bool = False,
      learning_rate: float = 1.0,
      indicator_num_trials: Optional[int] = None,
      budget_fraction: float = setting_lib.DEFAULT_BUDGET_FRACTION,
      target_quantile: Optional[float] = None) -> 'MultiRoundParameters':
    """Calibrates MFFE to the setting's (epsilon, delta).

    Args:
      setting: a `setting_lib.FrequencySetting` (its expected_clients_per_round is N).
      rounds: R, the rounds the budget covers.
      clip: the initial C^(1) (None: 1, as the paper's App. E.1); in
        setting_lib.CLIP_RANGE. C^(1) matters: with eta = 1 the clip grows by at most
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
    budget_fraction = setting_lib.checked_budget_fraction(budget_fraction)
    target_quantile = setting_lib.checked_target_quantile(target_quantile)
    clip = 1.0 if clip is None else setting_lib.checked_clip(clip)
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
    release_rounds = 1 if disjoint_rounds else rounds
    indicator_type = tff.TensorType(np.float64, [1])

    def indicator(eps):
      result = calibrated.poisson_binomial(indicator_type,
                                           eps,
                                           setting.delta,
                                           parameter='theta',
                                           rounds=release_rounds,
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

    budget = setting.split(indicator, budget_fraction, release_rounds)
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
    return multi_round_process(self, on_wrap)

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


def multi_round_process(params, on_wrap):
  """MFFE's process (`MultiRoundParameters`)."""
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
    return collections.OrderedDict(clip=tf.constant(initial_clip, tf.float64),
                                   estimate=tf.zeros([dim], tf.float64),
                                   clients=tf.constant(0, tf.int64))

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(
        collections.OrderedDict(frequency=aggregator.initialize(),
                                indicator=indicator.initialize(),
                                server=tff.federated_eval(
                                    server_init, tff.SERVER)))

  state_type = initialize.type_signature.result
  server_type = state_type.member['server']
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  seed_type = seed_fn.type_signature.result

  @tff.tensorflow.computation(params.value_type, seed_type, np.float64)
  def client_fn(x, seed, clip):
    x = computations.as_float64(x)
    finite = computations.all_finite(x)
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
    may_wrap, server, scaled_sum, indicator_sum = computations.checked(
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
        clip=new_clip,
        estimate=server['estimate'] + round_estimate,
        clients=server['clients'] + tf.cast(n, tf.int64))
    measurements = collections.OrderedDict(
        status=computations.status_text(
            computations.status_code(count, may_wrap)),
        clip=clip,
        next_clip=new_clip,
        quantile_level=level,
        target_quantile=tf.constant(target, tf.float64),
        round_estimate=round_estimate,
        clients_so_far=new_server['clients'],
        within_budget=f_state['round'] < rounds,
        dp_event=event_io.composed_structure(
            [f_meas['dp_event'], i_meas['dp_event']]),
        frequency=f_meas,
        indicator=i_meas)
    return new_server, new_server['estimate'], measurements

  @tff.federated_computation(state_type,
                             tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    member = state_type.member
    f_state = tff.federated_map(computations.selector(member, 'frequency'),
                                state)
    i_state = tff.federated_map(computations.selector(member, 'indicator'),
                                state)
    server = tff.federated_map(computations.selector(member, 'server'), state)
    clip = tff.federated_map(computations.selector(server_type, 'clip'), server)
    seed = tff.federated_map(seed_fn, f_state)
    sent = tff.federated_map(
        client_fn,
        (x, tff.federated_broadcast(seed), tff.federated_broadcast(clip)))
    f_out = aggregator.next(
        f_state,
        tff.federated_map(computations.selector(client_type, 'scaled'), sent))
    i_out = indicator.next(
        i_state,
        tff.federated_map(computations.selector(client_type, 'indicator'),
                          sent))
    new_server, estimate, measurements = _unzip3(
        tff.federated_map(server_fn,
                          (server, f_out.result, i_out.result,
                           f_out.measurements, i_out.measurements, f_state)))
    new_state = tff.federated_zip(
        collections.OrderedDict(frequency=f_out.state,
                                indicator=i_out.state,
                                server=new_server))
    return tff.templates.MeasuredProcessOutput(new_state, estimate,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(initialize, next_fn))


def _unzip3(value):
  member = value.type_signature.member
  return tuple(
      tff.federated_map(computations.selector(member, i), value)
      for i in range(3))


@dataclasses.dataclass(frozen=True)
class IndicatorEncoding:
  """A message for MFFE's indicator: 1 above the clip C, `below` at or
  below it, `no_data` for a user without data (norm 0; None: by its norm,
  like the others). The fraction above C of a decoded sum S over n clients
  is (S / n - below) / (1 - below).
  """

  below: float
  no_data: Optional[float]

  def messages(self, norms, clip: float) -> np.ndarray:
    norms = np.asarray(norms, np.float64)
    sent = np.where(norms > clip, 1.0, self.below)
    if self.no_data is None:
      return sent
    return np.where(norms > 0, sent, self.no_data)

  def fraction_above(self, total: float, num_clients: int) -> float:
    return (total / num_clients - self.below) / (1.0 - self.below)


# 'signed': the process's (`indicator_message`): +1
# above C, -1 at or below, 0 without data (norm 0). 'paper': the paper's
# +-1 (no data sends -1: replace-one pairs). 'binary': 1 above C, else 0
# (zero-out pairs, the fraction above is S / n). The last two exist to
# measure the alternatives (docs/notes/neighbouring_relation.md).
INDICATOR_ENCODINGS = {
    'signed': IndicatorEncoding(below=-1.0, no_data=0.0),
    'paper': IndicatorEncoding(below=-1.0, no_data=None),
    'binary': IndicatorEncoding(below=0.0, no_data=None),
}


def _indicator_encoding(encoding: str) -> IndicatorEncoding:
  return INDICATOR_ENCODINGS[checks.choice(encoding, 'encoding',
                                           tuple(INDICATOR_ENCODINGS))]


def indicator_messages(norms,
                       clip: float,
                       encoding: str = 'signed') -> np.ndarray:
  """MFFE's indicator per client (numpy), in one of INDICATOR_ENCODINGS."""
  return _indicator_encoding(encoding).messages(norms, clip)


def simulate(params,
             batches: Sequence[np.ndarray],
             rng,
             target: Optional[float] = None,
             clip: Optional[float] = None,
             indicator_encoding: str = 'signed',
             indicator=None,
             on_wrap: str = 'raise') -> List[fs.Round]:
  """MFFE (`frequency.process` 'multi_round') over the given batches.

  Returns one Round per batch with the *running* estimate of the sum of
  all batches so far, the clip used and the estimated quantile level.
  `clip` (a fixed C for every round, e.g. the hindsight C*) disables the
  update. `indicator_encoding` (`indicator_messages`) and `indicator` (a
  cPBM mechanism replacing the params' indicator, e.g. recalibrated) are
  for measuring alternatives.
  """
  fs.check_protocol(params, MultiRoundParameters)
  encoding = _indicator_encoding(indicator_encoding)
  target = params.target_quantile if target is None else target
  current = params.clip if clip is None else clip
  if indicator is None:
    indicator = params.indicator_factory.mechanism(_indicator_type())
  encoder = params.encoder()
  mechanism = params.mechanism()
  running = np.zeros(params.dim)
  out = []
  for x in batches:
    wraps = fs.ring_wraps(params, 'frequency.multi_round.simulate', len(x),
                          on_wrap)
    seed = fs.round_seed(rng)
    y = fs.representations(encoder, x, seed)
    norms = fs.norms_of(y)
    running = running + fs.pbm_sum(
        mechanism, y, rng, seed, current, norms, on_wrap='flag')
    signs = encoding.messages(norms, current)
    s = fs.pbm_sum(indicator, signs[:, None], rng, seed, on_wrap='flag')[0]
    above = encoding.fraction_above(s, len(signs))
    level = 1.0 - float(np.clip(above, 0.0, 1.0))
    out.append(
        fs.Round(running.copy(), current, 'sum_may_wrap' if wraps else 'ok',
                 level))
    if clip is None:
      current = current * math.exp(-params.learning_rate * (level - target))
  return out


def _indicator_type():
  return tff.TensorType(np.float64, [1])
