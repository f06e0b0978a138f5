"""`tff-ddp train`'s mechanisms and their accounting, per adversary.

A user's `--mechanism` is resolved once (`mechanism(name)`) into one of:

* 'ddg': the distributed discrete Gaussian of Kairouz, Liu & Steinke (2021,
  arXiv:2102.06387), `tff_ddp.aggregators.DiscreteGaussianSumFactory`: clip
  c, randomized Hadamard, conditional randomized rounding with beta =
  exp(-1/2), discrete Gaussian noise shares, one secure modular sum of
  `bits` bits sized so that `k_stddevs` standard deviations of a sum
  coordinate fit in the ring (the paper's Section 6 and its code's k); then
  TFF's `UnweightedMeanFactory` divides by the number of clients in the
  sum (public by protocol);
* 'skellam': the same client with exact Skellam noise (Agarwal, Kairouz &
  Liu 2021, `tff_ddp.aggregators.SkellamSumFactory`);
* 'gaussian': TFF's central Gaussian
  (`tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`), the
  paper's baseline: the server adds the noise and sees the exact sum, so it
  is central DP: private only against readers of the release;
* 'none': clip c and average (TFF's `clipping_factory` over its mean).

Each object builds the `model_aggregator` of
`tff.learning.algorithms.build_unweighted_fed_avg`, reads the event of what
a round released (`round_event`; `tff_ddp.learning.round_dp_event`, which
refuses exact client metrics) and says what each adversary's epsilon means.
`Ledger` composes every round's event, wrapped in
`SampledWithoutReplacementDpEvent(N, n, .)` (a cohort of n of N clients),
per adversary: RDP for the running epsilon (`Ledger.epsilon`), the
tightest accountant (PLD or RDP, named; what `--target-epsilon` calibrates
with) at the end (`Ledger.tightest`):

* the **server** runs the protocol and draws the cohorts: it knows who
  took part, so only the known-sample mixture applies -- the amplification
  by sampling that the paper's reported epsilons rely on does NOT hold
  against it (Section 6.2 says so too);
* the **release** (whoever sees only the models, cohorts secret): per RDP
  order the smaller of the mixture and Wang, Balle & Kasiviswanathan (2019)
  on the replace-one curve. Never above the server's.
"""

import dataclasses
import math

from tff_ddp.utils import checks

# The DDG paper's conditional rounding bias (its experiments).
BETA = math.exp(-0.5)


def modclip_probability(k_stddevs: float) -> float:
  """P(|N(0, 1)| > k): the DDG's `modclip_prob` for the paper's "k
  standard deviations of a sum coordinate fit in the ring"."""
  return math.erfc(checks.positive(k_stddevs, 'k_stddevs') / math.sqrt(2.0))


class Mechanism:
  """How a round's model updates are averaged, and what its epsilon means.

  Attributes:
    name: the --mechanism value.
    title: one line for the report.
    private: adversary ('server', 'release') -> whether its epsilon can be
      finite.
    needs_noise: a noise multiplier is required.
    secure_sum: the updates go through a secure modular sum of `bits` bits
      (and `noise_sampler`, 'table' or 'exact', applies).
    empty_client: what a client without examples does (the other side of
      the neighbouring pair "one client's examples removed").
    notes: adversary -> what its epsilon means, one sentence each.
    theorem: the per-round bound the ledger composes, for the report.
  """
  name: str
  title: str
  private: dict
  needs_noise = True
  secure_sum = False
  empty_client = 'trains on nothing and sends a zero update'
  notes: dict
  theorem = ''

  def aggregator(self, config):
    """The `model_aggregator` of `build_unweighted_fed_avg` for `config`
    (a `tff_ddp.experiments.training.TrainConfig`, resolved)."""
    raise NotImplementedError

  def round_event(self, output, state):
    """The DP event of everything the round released (refusing exact
    client metrics), or None when nothing is private."""
    raise NotImplementedError

  def planning_event(self, config, value_type):
    """The event of one round with n clients, before running it (for
    calibration); `value_type`: the model update's TFF type."""
    raise NotImplementedError

  def describe(self, config) -> str:
    raise NotImplementedError


_SERVER_NO_AMPLIFICATION = (
    'eps(server): against the server that runs the protocol. It draws the '
    'cohorts, so it knows who took part: only the known-sample mixture '
    'applies, NOT the amplification by sampling the paper relies on.')
_RELEASE_AMPLIFIED = (
    'eps(release): against readers of the released models, with the cohorts '
    'secret: amplified by sampling without replacement (per RDP order the '
    'smaller of the known-sample mixture and Wang, Balle & Kasiviswanathan '
    '2019); the paper\'s epsilons are of this kind.')


class _Distributed(Mechanism):
  """A tff_ddp secure-sum mechanism, then TFF's unweighted mean."""

  private = {'server': True, 'release': True}
  secure_sum = True
  empty_client = ('trains on nothing and sends a zero update with its noise '
                  'share')
  notes = {'server': _SERVER_NO_AMPLIFICATION, 'release': _RELEASE_AMPLIFIED}

  def __init__(self, name, title, factory_name, theorem):
    self.name, self.title, self._factory_name = name, title, factory_name
    self.theorem = theorem

  def sum_factory(self, config):
    from tff_ddp import aggregators
    options = {}
    if config.noise_sampler is not None:
      options['noise_sampler'] = config.noise_sampler
    return getattr(aggregators, self._factory_name)(aggregators.Request(
        l2_clip=config.clip,
        noise_multiplier=config.noise_multiplier,
        expected_clients_per_round=config.clients_per_round,
        bits=config.bits,
        modclip_prob=modclip_probability(config.k_stddevs),
        beta=BETA,
        **options))

  def aggregator(self, config):
    import tensorflow_federated as tff
    return tff.aggregators.UnweightedMeanFactory(
        value_sum_factory=self.sum_factory(config))

  def round_event(self, output, state):
    from tff_ddp import learning
    del state
    return learning.round_dp_event(output.metrics)

  def planning_event(self, config, value_type):
    return self.sum_factory(config).dp_event(value_type)

  def describe(self, config):
    sampler = ('' if config.noise_sampler is None else
               f', {config.noise_sampler} noise sampler')
    return (f'{self.title}: clip c = {config.clip:g}, noise multiplier z = '
            f'{config.noise_multiplier:.4g} (central noise z c on the sum, '
            f'shared by the clients), {config.bits} bits, k = '
            f'{config.k_stddevs:g} stddevs in the ring, beta = exp(-1/2)'
            f'{sampler}')


class _CentralGaussian(Mechanism):
  """TFF's central Gaussian (the paper's baseline)."""

  name = 'gaussian'
  title = 'central Gaussian (TFF gaussian_fixed; the server adds the noise)'
  private = {'server': False, 'release': True}
  theorem = 'the Gaussian\'s RDP alpha / (2 z^2) (Mironov 2017)'
  notes = {
      'server': ('eps(server): inf -- the central Gaussian is added by '
                 'the server, which sees the exact sum of the clipped '
                 'updates.'),
      'release': _RELEASE_AMPLIFIED
  }

  def aggregator(self, config):
    import tensorflow_federated as tff
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=config.noise_multiplier,
        clients_per_round=config.clients_per_round,
        clip=config.clip)

  def round_event(self, output, state):
    from tff_ddp import learning
    # TFF's DP factory keeps its query's event in its state; the metrics
    # with it in place of the (event-less) aggregator measurements go
    # through the same check of client metrics.
    return learning.round_dp_event(
        dict(output.metrics, aggregator=state.aggregator))

  def planning_event(self, config, value_type):
    import dp_accounting
    del value_type
    return dp_accounting.GaussianDpEvent(config.noise_multiplier)

  def describe(self, config):
    return (f'{self.title}: clip c = {config.clip:g}, noise multiplier z = '
            f'{config.noise_multiplier:.4g} (noise z c on the sum); central '
            'DP: its epsilon holds only against readers of the release')


class _NoPrivacy(Mechanism):
  """Clip and average, no noise."""

  name = 'none'
  title = 'no DP (clipped mean, no noise)'
  private = {'server': False, 'release': False}
  needs_noise = False
  notes = {
      'server': 'eps(server): inf -- no noise.',
      'release': 'eps(release): inf -- no noise.'
  }

  def aggregator(self, config):
    import tensorflow_federated as tff
    return tff.aggregators.clipping_factory(
        config.clip, tff.aggregators.UnweightedMeanFactory())

  def round_event(self, output, state):
    """None: no noise, so no DP event."""
    del output, state

  def planning_event(self, config, value_type):
    del config, value_type
    raise ValueError('--mechanism none adds no noise: nothing to calibrate.')

  def describe(self, config):
    return f'{self.title}: clip c = {config.clip:g}; NOT private'


MECHANISMS = {
    m.name: m for m in
    (_Distributed('ddg',
                  'distributed discrete Gaussian (secure aggregation)',
                  'DiscreteGaussianSumFactory',
                  theorem='the DDG\'s RDP, Kairouz, Liu & Steinke (2021) '
                  'Theorem 5 / Proposition 10 with the rounding-inflated '
                  'sensitivity (tff_ddp.accounting.ddg_rdp)'),
     _Distributed('skellam',
                  'distributed Skellam (secure aggregation)',
                  'SkellamSumFactory',
                  theorem='the Skellam\'s RDP, Agarwal, Kairouz & Liu (2021) '
                  '(tff_ddp.accounting.skellam_rdp)'), _CentralGaussian(),
     _NoPrivacy())
}


def mechanism(name: str) -> Mechanism:
  """The mechanism object for a user's --mechanism (resolved once, here)."""
  return MECHANISMS[checks.choice(name, 'mechanism', tuple(MECHANISMS))]


# ---------------------------------------------------------------------------
# Events on disk, and the ledger


def event_to_json(event) -> dict:
  """A DpEvent as JSON-able nested dicts (dp-accounting's named-tuple
  layout, which `tff_ddp.accounting.extract_dp_event` reads back)."""

  def convert(value):
    if isinstance(value, tuple) and hasattr(value, '_fields'):
      return {
          f: convert(getattr(value, f))
          for f in value._fields
          if getattr(value, f) is not None
      }
    if isinstance(value, (list, tuple)):
      return [convert(v) for v in value]
    return value

  return convert(event.to_named_tuple())


def event_from_json(record: dict):
  """The DpEvent `event_to_json` wrote."""
  from tff_ddp import accounting
  return accounting.extract_dp_event(record)


@dataclasses.dataclass
class Ledger:
  """Every round's event, composed per adversary (module docstring).

  Attributes:
    mechanism: the run's `Mechanism` (which adversaries it can protect
      against).
    population: N, the training clients the cohorts are drawn from.
    delta: of the epsilons.
    rounds_accounted: rounds composed so far.
  """
  mechanism: Mechanism
  population: int
  delta: float
  rounds_accounted: int = 0

  def __post_init__(self):
    from tff_ddp import accounting
    self._accountants = {
        a: accounting.RdpAccountant(adversary=a) for a in accounting.ADVERSARIES
    }
    self._non_private = False
    # Every round's sampled event, for `tightest`.
    self._events = []

  def compose(self, event, cohort: int) -> None:
    """One round: its event (None: not private) and its cohort size n."""
    import dp_accounting
    self.rounds_accounted += 1
    if event is None:
      self._non_private = True
      return
    sampled = dp_accounting.SampledWithoutReplacementDpEvent(
        self.population, cohort, event)
    self._events.append(sampled)
    for accountant in self._accountants.values():
      accountant.compose(sampled)

  def epsilon(self, adversary: str) -> float:
    """The running epsilon at `delta` of every round so far against
    `adversary`: RDP (an upper bound; `tightest` may be smaller)."""
    if self._non_private or not self.mechanism.private[adversary]:
      return math.inf
    if self.rounds_accounted == 0:
      return 0.0
    return self._accountants[adversary].get_epsilon(self.delta)

  def tightest(self, adversary: str):
    """`pld_accountant.FinalEpsilon` at `delta` of every round so far
    against `adversary` by the tightest accountant (the smaller of the PLD
    and RDP bounds), each distinct round event composed once with its
    count; its rdp_epsilon is `epsilon(adversary)`."""
    from tff_ddp.accounting import pld_accountant
    rdp = self.epsilon(adversary)
    if self._non_private or not self.mechanism.private[adversary]:
      accountant = pld_accountant.tightest(adversary)
      return pld_accountant.FinalEpsilon(
          epsilon=math.inf,
          bound=None,
          delta=self.delta,
          adversary=accountant.adversary.value,
          description=f'{accountant.describe()}; not private',
          rounds=self.rounds_accounted,
          rdp_epsilon=rdp)
    return pld_accountant.final_epsilon(adversary, self._events, self.delta,
                                        rdp)

  def relation(self) -> str:
    """The neighbouring relation of the epsilons ('zero-out neighbours')."""
    return self._accountants['release'].describe().split(', ', 1)[1]
