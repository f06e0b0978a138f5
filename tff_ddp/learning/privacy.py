"""Privacy of DP-Delta-FL and DP-FedAvg rounds: configuration, events, noise.

One round of DP-Delta-FL (the quantile paper's Algorithm 4, with corrections
to its Claim 13 / Claim 20) makes two releases from the same cohort, each
through a secure sum with distributed discrete Gaussian noise: the histogram
of the clients' clipped losses and the sum of the tail clients' clipped
updates; DP-FedAvg is the second alone. The round's event composes both,
wrapped in the cohort's sampling; self-sampling uses Zhu & Wang's
Poisson-subsampled RDP. `PrivacyConfig`, `NEIGHBOURS`, `calibrate` (the
budget ratio r, through `pld_accountant.tightest`) and `final_epsilon`
are the entry points.

The releases, the neighbouring relation, the corrections to the paper, the
budget ratio and the two epsilons: docs/notes/deltafl.md.
"""

import dataclasses
import inspect
import math
from typing import Any, Optional

import dp_accounting
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import pld_accountant
from tff_ddp.accounting import running
from tff_ddp.aggregators import discrete_gaussian
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.encoders import registry
from tff_ddp.learning import weighting
from tff_ddp.mechanisms import base
from tff_ddp.utils import checks

SAMPLINGS = calibration.SAMPLINGS
Sampling = calibration.Sampling
# The neighbouring relation every epsilon here is for (docs/notes/deltafl.md,
# "Neighbouring relation").
NEIGHBOURS = ("neighbours: one client's examples removed (it still takes "
              'part, sends no loss bin and a zero update, and adds its noise '
              'shares)')
TailCount = weighting.TailCount
TAIL_COUNTS = weighting.TAIL_COUNTS


@dataclasses.dataclass(frozen=True)
class PrivacyConfig:
  """The DP configuration of a DP-Delta-FL or DP-FedAvg process.

  Attributes:
    clients_per_round: n, the expected cohort (each client adds 1/n of the
      central noise variance; the quantile ring is sized for it). With
      sampling='self', the expected number of clients that keep their data
      (q N); all N are in the sums and each adds 1/N of the noise.
    l2_clip: C, the clip of each client's model update.
    noise_multiplier: z_w, the update sum's central noise stddev / C.
    quantile_noise_multiplier: z_q, the loss histogram's central noise
      stddev / the encoding's l2 sensitivity (count units); None: no
      histogram (DP-FedAvg).
    loss_upper_bound: B; losses are clipped to [0, B] for the histogram.
    num_bins: b (a power of two for 'tree' and 'haar').
    histogram: 'flat', 'tree' (hierarchical, the paper's Algorithm 2) or
      'haar' ('hierarchical' is stored as 'tree'); `encoding` is the
      `encodings.Encoding` it names with `num_bins` bins.
    count: how the CDF is normalised: 'exact' (by n, public) or
      'estimated' (by the noisy total; required with sampling='self', where
      the number of clients that kept their data is hidden).
    tail_count: what the update sum is divided by: 'expected' (theta n)
      or 'histogram' (the private tail count); see docs/notes/deltafl.md,
      "Corrections to the paper's Claim 13 / Claim 20".
    bits, quantile_bits: the two secure sums' rings 2^bits. 18 keeps the
      update's scaled noise (at most ~2^bits / (2 k sqrt(n)), k ~ 3.9) in
      the alias-table sampler's range for n >= ~10: above it the exact
      sampler is used, correct but ~10x slower per client.
    delta: the delta every reported epsilon is for (and the failure
      probability of the histogram's ring condition).
    sampling: the cohort sampling the caller performs: 'without-replacement'
      (Algorithm 4 line 2; needs `population`), 'poisson' (rate
      clients_per_round / population), 'none', or 'self': the caller puts
      all `population` clients in every round, each client keeps its data
      with a private coin of rate q = clients_per_round / population and
      otherwise sends zeros with its noise shares (the aggregators'
      `client_sampling_rate`; one independent coin per release). Nobody,
      the server included, learns who kept its data, so the amplification
      (`SelfSampledDpEvent`) holds against the server; every client
      computes and communicates every round.
    population: N, the clients sampled from.
    adversary: 'server' or 'release'.
    max_clients: the largest cohort whose epsilon the process computes in
      the graph (default clients_per_round); larger rounds report +inf
      (compose their measured events offline).
    encoder: the update aggregator's encoder ('hadamard', 'kashin', 'none').
    seed: tests only (deterministic noise; never deploy).
  """

  clients_per_round: int
  l2_clip: float
  noise_multiplier: float
  quantile_noise_multiplier: Optional[float] = None
  loss_upper_bound: float = 1.5
  num_bins: int = 16
  histogram: str = 'tree'
  count: str = 'exact'
  tail_count: str = 'expected'
  bits: int = 18
  quantile_bits: int = 18
  delta: float = 1e-5
  sampling: str = 'without-replacement'
  population: Optional[int] = None
  adversary: str = 'server'
  max_clients: Optional[int] = None
  encoder: str = 'hadamard'
  seed: Optional[int] = None
  # The choices above resolved once: `histogram` and `num_bins`
  # (`encodings.encoding`), `count` and `tail_count`.
  encoding: hg.Encoding = dataclasses.field(init=False,
                                            repr=False,
                                            compare=False)
  exact_count: bool = dataclasses.field(init=False, repr=False, compare=False)
  histogram_tail_count: bool = dataclasses.field(init=False,
                                                 repr=False,
                                                 compare=False)

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    set_(
        'clients_per_round',
        checks.integer(self.clients_per_round, 'clients_per_round', 1,
                       base.MAX_MODULUS - 1))
    set_('l2_clip', checks.positive(self.l2_clip, 'l2_clip'))
    set_('noise_multiplier',
         checks.positive(self.noise_multiplier, 'noise_multiplier'))
    set_(
        'quantile_noise_multiplier',
        checks.optional_positive(self.quantile_noise_multiplier,
                                 'quantile_noise_multiplier'))
    set_('loss_upper_bound',
         checks.positive(self.loss_upper_bound, 'loss_upper_bound'))
    checks.choice(self.histogram, 'histogram', hg.METHODS + tuple(hg.ALIASES))
    encoding = hg.encoding(self.histogram, self.num_bins)
    set_('encoding', encoding)
    set_('histogram', encoding.name)
    set_('count', checks.choice(self.count, 'count', hg.COUNTS))
    set_('exact_count', hg.exact_count(self.count))
    set_('tail_count', checks.member(self.tail_count, 'tail_count', TailCount))
    set_('histogram_tail_count', self.tail_count is TailCount.HISTOGRAM)
    set_('bits', checks.integer(self.bits, 'bits', 1, base.MAX_RING_BITS))
    set_(
        'quantile_bits',
        checks.integer(self.quantile_bits, 'quantile_bits', 2,
                       base.MAX_RING_BITS))
    set_('delta', checks.probability(self.delta, 'delta', allow_one=False))
    set_('sampling', calibration.as_sampling(self.sampling))
    if self.sampling is Sampling.NONE:
      if self.population is not None:
        raise ValueError("population needs sampling='without-replacement', "
                         "'poisson' or 'self'.")
    else:
      if self.population is None:
        raise ValueError(f'sampling={self.sampling!r} needs population (the '
                         'number of clients the cohorts are drawn from).')
      # With 'self' all N clients are in the secure sums, whose public
      # counts live in the ring.
      set_(
          'population',
          checks.integer(
              self.population, 'population', self.clients_per_round,
              base.MAX_MODULUS - 1 if self.sampling is Sampling.SELF else None))
    if (self.sampling is Sampling.SELF and self.has_quantile and
        self.exact_count):
      raise ValueError(
          "sampling='self' hides how many clients kept their data, so the "
          "loss CDF cannot be normalised by it: use count='estimated' (the "
          'noisy total).')
    set_('adversary', accountant.as_adversary(self.adversary))
    # Below clients_per_round every planned round would report epsilon
    # +inf: a mistake, refused.
    set_(
        'max_clients',
        checks.integer(
            self.clients_in_sum
            if self.max_clients is None else self.max_clients, 'max_clients',
            self.clients_in_sum, base.MAX_MODULUS - 1))
    set_('encoder', checks.choice(self.encoder, 'encoder', registry.NAMES))
    set_('seed', checks.seed(self.seed))

  @property
  def has_quantile(self) -> bool:
    return self.quantile_noise_multiplier is not None

  @property
  def sampling_rate(self) -> Optional[float]:
    """q of sampling='self' (the aggregators' client_sampling_rate), else
    None."""
    if self.sampling is not Sampling.SELF:
      return None
    return self.clients_per_round / self.population

  @property
  def clients_in_sum(self) -> int:
    """The planned number of clients in each secure sum: N with
    sampling='self', else n."""
    return (self.population
            if self.sampling is Sampling.SELF else self.clients_per_round)

  def expected_contributors(self, participating):
    """The public divisor base of a round with `participating` clients in
    the sum: that number, or q times it with sampling='self' (the expected
    number that kept their data; the true one is hidden). Numbers or TF
    tensors."""
    if self.sampling is not Sampling.SELF:
      return participating
    return secure_sum.effective_rate(self.sampling_rate) * participating

  def describe(self) -> str:
    """One line: the releases, their noise, the adversary and the relation."""
    parts = [
        f'update DDG z={self.noise_multiplier:g} C={self.l2_clip:g} '
        f'n={self.clients_per_round}'
    ]
    if self.has_quantile:
      parts.append(f'loss histogram {self.histogram} {self.num_bins} bins '
                   f'over [0, {self.loss_upper_bound:g}] '
                   f'z={self.quantile_noise_multiplier:g}')
    sampling = self.sampling.value
    if self.sampling is Sampling.SELF:
      sampling = (f'self (private coins, q={self.sampling_rate:g}; all '
                  f'{self.population} clients in the sums)')
    parts.append(f'sampling {sampling}; against the {self.adversary}; '
                 f'{NEIGHBOURS}')
    return '; '.join(parts)

  def update_factory(self) -> discrete_gaussian.DiscreteGaussianSumFactory:
    """The DDG factory of the model update sum."""
    return discrete_gaussian.DiscreteGaussianSumFactory(
        discrete_gaussian.Request(
            l2_clip=self.l2_clip,
            noise_multiplier=self.noise_multiplier,
            expected_clients_per_round=self.clients_in_sum,
            bits=self.bits),
        encoder=self.encoder,
        seed=self.seed,
        client_sampling_rate=self.sampling_rate)

  def quantile_parameters(self) -> Optional[qc.QuantileParameters]:
    """The loss histogram's aggregator (None without a histogram)."""
    if not self.has_quantile:
      return None
    return qc.parameters_for_noise(self.encoding,
                                   self.num_bins,
                                   self.clients_in_sum,
                                   self.quantile_noise_multiplier,
                                   self.delta,
                                   self.quantile_bits,
                                   self.adversary,
                                   self.seed,
                                   client_sampling_rate=self.sampling_rate)

  def round_event(
      self,
      value_type,
      num_clients: Optional[int] = None,
      quantile: Optional[qc.QuantileParameters] = None
  ) -> dp_accounting.DpEvent:
    """One round's event with `num_clients` in both secure sums (default:
    `clients_in_sum`), sampling included (with sampling='self' the
    factories' own events are already `SelfSampledDpEvent`s, one per
    release: their coins are independent)."""
    n = (self.clients_in_sum if num_clients is None else checks.integer(
        num_clients, 'num_clients', 1))
    update = self.update_factory().dp_event(value_type, n)
    if self.has_quantile:
      quantile = quantile or self.quantile_parameters()
      event = dp_accounting.ComposedDpEvent(
          [quantile.factory.dp_event(quantile.value_type, n), update])
    else:
      event = update
    if self.sampling is Sampling.WITHOUT_REPLACEMENT:
      return dp_accounting.SampledWithoutReplacementDpEvent(
          self.population, n, event)
    if self.sampling is Sampling.POISSON:
      return dp_accounting.PoissonSampledDpEvent(
          self.clients_per_round / self.population, event)
    return event

  def epsilon(self, value_type, rounds: int) -> float:
    """Planning epsilon of `rounds` rounds of clients_per_round clients, by
    RDP: the bound of the process's running epsilon (its metrics);
    `calibrate` and `final_epsilon` report the tightest bound."""
    rounds = checks.integer(rounds, 'rounds', 1)
    event = dp_accounting.SelfComposedDpEvent(self.round_event(value_type),
                                              rounds)
    return accountant.epsilon(event, self.delta, self.adversary)[0]

  def tabulated_accountant(self, value_type) -> running.TabulatedAccountant:
    """The in-graph accountant of the process (curves for n <= max_clients).
    """
    quantile = self.quantile_parameters()
    return running.TabulatedAccountant(
        lambda n: self.round_event(value_type, n, quantile), self.max_clients,
        self.adversary)


@dataclasses.dataclass(frozen=True)
class CalibratedPrivacy:
  """What `calibrate` chose and what it costs.

  Attributes:
    config: the PrivacyConfig (noise multipliers set).
    epsilon: eps of `rounds` planned rounds at config.delta (<= target),
      against config.adversary, zero-out neighbours, by the tightest
      accountant.
    rounds: T.
    budget_ratio: r (None: no histogram).
    event: the DpEvent of all rounds.
    at_limit: see `tff_ddp.accounting.calibration.calibrate`.
    bound: 'PLD' (privacy loss distribution) or 'RDP': the bound `epsilon`
      is. The process's running epsilon (its metrics) is RDP.
  """

  config: PrivacyConfig
  epsilon: float
  rounds: int
  budget_ratio: Optional[float]
  event: Any
  at_limit: bool
  bound: str = pld_accountant.RDP


def build_model(model_fn, name: str = 'model_fn'):
  """`model_fn()` in a fresh graph, checked: a no-argument callable that
  returns a `tff.learning.models.VariableModel` (TypeErrors naming `name`,
  not Python's "missing 2 required positional arguments" from inside)."""
  import tensorflow as tf
  if not callable(model_fn):
    raise TypeError(f'{name} must be a no-arg callable returning a '
                    'tff.learning.models.VariableModel (FunctionalModel is '
                    f'not supported), got {model_fn!r}.')
  try:
    inspect.signature(model_fn).bind()
  except TypeError:
    raise TypeError(f'{name} must be callable with no arguments (a model_fn '
                    f'returning a new model), got {model_fn!r}.') from None
  except ValueError:  # no signature to inspect (some builtins)
    pass
  with tf.Graph().as_default():
    model = model_fn()
  if not isinstance(model, tff.learning.models.VariableModel):
    raise TypeError(f'{name} must return a tff.learning.models.'
                    f'VariableModel; {_callable_name(model_fn)} returned '
                    f'{type(model).__name__}.')
  return model


def model_update_type(model_fn):
  """The trainable-weights type of the model `model_fn` builds."""
  model = build_model(
      model_fn, 'model_fn (calibrate: value_type, a TFF type or a model_fn)')
  return tff.learning.models.weights_type_from_model(model).trainable


def _callable_name(model_fn) -> str:
  return getattr(model_fn, '__name__', type(model_fn).__name__)


def calibrate(
    value_type,
    target_epsilon: float,
    target_delta: float,
    rounds: int,
    clients_per_round: int,
    l2_clip: float,
    budget_ratio: Optional[float] = None,
    **config_kwargs,
) -> CalibratedPrivacy:
  """The least noise meeting (target_epsilon, target_delta) over T rounds.

  Args:
    value_type: the model update's TFF type (or a model_fn: its trainable
      weights' type).
    target_epsilon, target_delta: the budget of all `rounds` rounds.
    rounds: T.
    clients_per_round: n.
    l2_clip: C.
    budget_ratio: r > 0, rho_q / rho_w (z_q = z_w / sqrt(r)); None for
      DP-FedAvg (no histogram).
    **config_kwargs: the other PrivacyConfig fields (population, sampling,
      adversary, loss_upper_bound, num_bins, histogram, bits,
      quantile_bits, ...; their defaults).

  Returns:
    A CalibratedPrivacy whose epsilon never exceeds the target.

  Raises:
    ValueError: bad arguments or an unreachable target.
  """
  if callable(value_type) and not isinstance(value_type, tff.types.Type):
    value_type = model_update_type(value_type)
  target_epsilon = checks.positive(target_epsilon, 'target_epsilon')
  # Named here: PrivacyConfig would name it 'delta'.
  target_delta = checks.probability(target_delta,
                                    'target_delta',
                                    allow_one=False)
  rounds = checks.integer(rounds, 'rounds', 1)
  ratio = (None if budget_ratio is None else checks.positive(
      budget_ratio, 'budget_ratio'))
  for key in ('noise_multiplier', 'quantile_noise_multiplier', 'delta'):
    if key in config_kwargs:
      raise ValueError(f'{key} is set by the calibration; do not pass it.')

  def config(z):
    return PrivacyConfig(
        clients_per_round=clients_per_round,
        l2_clip=l2_clip,
        noise_multiplier=z,
        quantile_noise_multiplier=None if ratio is None else z /
        math.sqrt(ratio),
        delta=target_delta,
        **config_kwargs)

  first = config(1.0)  # argument errors now

  def make_event(z):
    return dp_accounting.SelfComposedDpEvent(
        config(z).round_event(value_type), rounds)

  result = calibration.calibrate(
      lambda: pld_accountant.tightest(first.adversary), make_event,
      target_epsilon, target_delta,
      calibration.Parameter.noise('noise_multiplier', 1e-3))
  return CalibratedPrivacy(config=config(result.value),
                           epsilon=result.epsilon,
                           rounds=rounds,
                           budget_ratio=ratio,
                           event=result.event,
                           at_limit=result.at_limit,
                           bound=result.bound)


def final_epsilon(round_events,
                  config: PrivacyConfig) -> pld_accountant.FinalEpsilon:
  """The tightest epsilon of the rounds whose events are `round_events`
  (each round's `tff_ddp.learning.round_dp_event(output.metrics)`: the
  measured n, the sampling), at config.delta against config.adversary;
  each distinct event composed once with its count
  (`pld_accountant.final_epsilon`)."""
  round_events = list(round_events)
  for event in round_events:
    if not isinstance(event, dp_accounting.DpEvent):
      raise TypeError('round_events must be dp_accounting.DpEvents (each '
                      "round's round_dp_event(output.metrics)), got "
                      f'{type(event).__name__}.')
  return pld_accountant.final_epsilon(config.adversary, round_events,
                                      config.delta)


def zcdp_per_round(config: PrivacyConfig) -> float:
  """rho of one unsampled round by the Gaussian approximations, corrected
  Claim 13: rho_q + C^2 / (2 sigma_w^2) = 1/(2 z_q^2) + 1/(2 z_w^2).

  For reports only (the accountant uses the DDG curves, which are slightly
  larger: rounding and the discrete sum).
  """
  rho = 0.5 / config.noise_multiplier**2
  if config.has_quantile:
    rho += 0.5 / config.quantile_noise_multiplier**2
  return float(rho)
