"""Private, accounted adaptive clipping for the secure-sum aggregators.

The geometric update of Andrew, Thakkar, McMahan & Ramaswamy (2021),
"Differentially Private Learning with Adaptive Clipping" (arXiv:1905.03871,
Algorithm 1 with the geometric update of Section 3), as TFF's
`DistributedDpSumFactory(auto_l2_clip=True)` does: the clip lives in the
server state; each client's indicator is noised in the same secure sum and
its event composed into the round's. `AdaptiveClipping` is what a user hands
to a factory; `AdaptiveClipping.resolve` gives the `AdaptiveClip` a round
runs; `indicator_mechanism` noises the indicator.

The update, one round, the neighbours, the noise split and the measurements:
docs/notes/adaptive_clipping.md.
"""

import dataclasses
import math
import warnings
from typing import Optional

import tensorflow as tf

from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
from tff_ddp.utils import checks

# The clip is kept in [MIN_CLIP, MAX_CLIP] (public constants): the output
# range of the value type is checked at `create` for every clip in it, so a
# runaway estimate cannot overflow the result's dtype.
MIN_CLIP = 1e-12
MAX_CLIP = 1e12
# The secure-sum key of the indicators.
KEY = 'below_clip'
# TFF's default count stddev: 0.05 * expected_clients_per_round
# (tff.aggregators.DistributedDpSumFactory, QuantileEstimatorQuery).
DEFAULT_COUNT_STDDEV_FRACTION = 0.05


@dataclasses.dataclass(frozen=True)
class AdaptiveClipping:
  """Private adaptive clipping, as handed to a factory (module docstring).

  The initial clip is the factory's `l2_clip`; the rest is here.

  Attributes:
    target_quantile: gamma in [0, 1], the quantile of the clients' norms
      the clip moves to (TFF: auto_l2_target_quantile, default 0.5).
    learning_rate: eta > 0 of the geometric update (TFF: auto_l2_lr,
      default 0.2).
    count_stddev: sigma_b >= 0, stddev of the noisy count of clients below
      the clip (TFF: auto_l2_clip_count_stddev); None: TFF's default 0.05 *
      expected_clients_per_round (0 without noise). 0 releases the exact
      count: the rounds are then not private.
    zeroing_multiplier, zeroing_increment: when set, a client whose value
      has norm > zeroing_multiplier * C_t + zeroing_increment sends the null
      message (`ddp_secure_aggregator(zeroing=True)`: 10 and 1).

  Example:
    >>> factory = DiscreteGaussianSumFactory(
    ...     Request(l2_clip=0.1, noise_multiplier=1.0,
    ...             expected_clients_per_round=100, bits=20),
    ...     adaptive_clipping=AdaptiveClipping(
    ...         target_quantile=0.5, learning_rate=0.2))
  """

  target_quantile: float = 0.5
  learning_rate: float = 0.2
  count_stddev: Optional[float] = None
  zeroing_multiplier: Optional[float] = None
  zeroing_increment: float = 0.0

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    set_('target_quantile',
         checks.real(self.target_quantile, 'target_quantile', 0.0, 1.0))
    set_('learning_rate', checks.positive(self.learning_rate, 'learning_rate'))
    if self.count_stddev is not None:
      set_('count_stddev', checks.nonnegative(self.count_stddev,
                                              'count_stddev'))
    if self.zeroing_multiplier is not None:
      set_('zeroing_multiplier',
           checks.positive(self.zeroing_multiplier, 'zeroing_multiplier'))
    set_('zeroing_increment',
         checks.nonnegative(self.zeroing_increment, 'zeroing_increment'))

  def resolve(
      self,
      l2_clip,
      noise_multiplier,
      expected_clients_per_round,
      owner: str,
      count_stddev_parameter: Optional[str] = 'count_stddev'
  ) -> 'tuple[AdaptiveClip, float]':
    """(the AdaptiveClip the rounds run, the value's noise multiplier) for
    a factory with this initial clip, noise multiplier and expected clients
    (`configure`; its messages name `owner` and `count_stddev_parameter`).
    """
    config, value_z = configure(l2_clip, noise_multiplier,
                                expected_clients_per_round,
                                self.target_quantile, self.learning_rate,
                                self.count_stddev, owner,
                                count_stddev_parameter)
    if self.zeroing_multiplier is not None:
      config = with_zeroing(config, self.zeroing_multiplier,
                            self.zeroing_increment)
    return config, value_z


@dataclasses.dataclass(frozen=True)
class AdaptiveClip:
  """The adaptive clip a factory's rounds run: an `AdaptiveClipping`
  resolved with the factory's numbers (validated by `configure`).

  Attributes:
    initial_clip: C_0.
    target_quantile: gamma in [0, 1].
    learning_rate: eta > 0.
    count_stddev: sigma_b >= 0, stddev of the noisy count sum_i b_i.
    expected_clients: n of the noise shares.
    zeroing_multiplier, zeroing_increment: when set, a client whose value
      has norm > zeroing_multiplier * C_t + zeroing_increment sends the null
      message (its value and indicator zeroed). A public function of the
      public clip: no extra privacy cost.
  """

  initial_clip: float
  target_quantile: float
  learning_rate: float
  count_stddev: float
  expected_clients: int
  zeroing_multiplier: Optional[float] = None
  zeroing_increment: float = 0.0

  @property
  def is_private(self) -> bool:
    return self.count_stddev > 0


def value_noise_multiplier(noise_multiplier: float,
                           count_stddev: float) -> float:
  """z_v with z_v^-2 + (2 sigma_b)^-2 = z^-2 (TFF's split).

  Why: docs/notes/adaptive_clipping.md, "Noise split".

  0 when z = 0; z itself when sigma_b = 0 (no split: the indicator is then
  not private). Raises ValueError when sigma_b <= z / 2 > 0, as TFF does.
  """
  if noise_multiplier == 0 or count_stddev == 0:
    return noise_multiplier
  if noise_multiplier >= 2 * count_stddev:
    raise ValueError(
        f'auto_l2_clip_count_stddev={count_stddev} is too low for '
        f'noise_multiplier={noise_multiplier}: the value\'s noise multiplier '
        '(z^-2 - (2 sigma_b)^-2)^(-1/2) needs auto_l2_clip_count_stddev > '
        f'noise_multiplier / 2 = {noise_multiplier / 2}. Increase it (TFF '
        'defaults it to 0.05 * expected_clients_per_round) or decrease '
        'noise_multiplier.')
  return (noise_multiplier**-2 - (2.0 * count_stddev)**-2)**-0.5


def configure(
    l2_clip,
    noise_multiplier,
    expected_clients_per_round,
    target_quantile,
    learning_rate,
    count_stddev,
    owner: str,
    count_stddev_parameter: Optional[str] = ('auto_l2_clip_count_stddev')
) -> 'tuple[AdaptiveClip, float]':
  """(AdaptiveClip, the value's noise multiplier) from TFF's arguments.

  count_stddev None: 0.05 * expected_clients_per_round when
  noise_multiplier > 0, else 0 (TFF's defaults). count_stddev 0 warns.
  Messages name `owner` and the parameters the caller's user set:
  `count_stddev_parameter` is the caller's name for count_stddev, None when
  its signature has none (`ddp_secure_aggregator`).
  """
  l2_clip = checks.positive(l2_clip, 'l2_clip')
  if not MIN_CLIP <= l2_clip <= MAX_CLIP:
    raise ValueError(f'l2_clip (the initial clip) must be in [{MIN_CLIP:g}, '
                     f'{MAX_CLIP:g}] with auto_l2_clip=True, got {l2_clip}.')
  z = checks.nonnegative(noise_multiplier, 'noise_multiplier')
  n = checks.integer(expected_clients_per_round, 'expected_clients_per_round',
                     1, base.MAX_MODULUS)
  defaulted = count_stddev is None
  if defaulted:
    count_stddev = DEFAULT_COUNT_STDDEV_FRACTION * n if z > 0 else 0.0
    check_default_count_stddev(z, n, owner, count_stddev_parameter)
  count_stddev = checks.nonnegative(count_stddev, 'auto_l2_clip_count_stddev')
  config = AdaptiveClip(initial_clip=l2_clip,
                        target_quantile=checks.real(target_quantile,
                                                    'auto_l2_target_quantile',
                                                    0.0, 1.0),
                        learning_rate=checks.positive(learning_rate,
                                                      'auto_l2_lr'),
                        count_stddev=count_stddev,
                        expected_clients=n)
  value_z = value_noise_multiplier(z, count_stddev)
  if z == 0:
    exact = ('' if defaulted or count_stddev == 0 else
             f' (the clip count alone is noised, '
             f'{count_stddev_parameter}={count_stddev})')
    warnings.warn(
        f'{owner}(noise_multiplier=0) adds no noise to the values: they are '
        f'released exact{exact} and the rounds are NOT differentially private '
        '(their dp_event has infinite epsilon). Use noise_multiplier > 0 '
        'for privacy.')
  elif count_stddev == 0:
    warnings.warn(
        f'{owner}(auto_l2_clip=True, {count_stddev_parameter}=0) releases '
        'the exact count of clients below the clip: the rounds are NOT '
        'differentially private (their dp_event is NonPrivateDpEvent).')
  elif value_z / z >= 2:
    raise_it = ('expected_clients_per_round' if count_stddev_parameter is None
                else f'{count_stddev_parameter} or expected_clients_per_round')
    warnings.warn(
        f'{owner}: the value\'s noise multiplier is {value_z / z:.2f}x '
        f'noise_multiplier to leave room for the clip count\'s noise; '
        f'increase {raise_it}.')
  return config, value_z


def min_clients_for_default_count_stddev(noise_multiplier: float) -> int:
  """The least expected_clients_per_round n with TFF's default count stddev
  0.05 n > noise_multiplier / 2 (`value_noise_multiplier`), i.e.
  n > 10 * noise_multiplier."""
  n = max(1, math.floor(noise_multiplier / (2 * DEFAULT_COUNT_STDDEV_FRACTION)))
  while not noise_multiplier < 2 * DEFAULT_COUNT_STDDEV_FRACTION * n:
    n += 1
  return n


def check_default_count_stddev(noise_multiplier: float, num_clients: int,
                               owner: str,
                               count_stddev_parameter: Optional[str]) -> None:
  """Raises ValueError, naming the parameters the user set, when TFF's
  default count stddev 0.05 * num_clients is too low for noise_multiplier
  (`value_noise_multiplier` needs it > noise_multiplier / 2)."""
  z = noise_multiplier
  sigma_b = DEFAULT_COUNT_STDDEV_FRACTION * num_clients
  if z == 0 or z < 2 * sigma_b:
    return
  least = min_clients_for_default_count_stddev(z)
  fixes = (f'expected_clients_per_round >= {least} or noise_multiplier < '
           f'{2 * sigma_b:g}')
  if count_stddev_parameter is not None:
    fixes += f', or set {count_stddev_parameter} > {z / 2:g}'
  raise ValueError(
      f'{owner}: noise_multiplier={noise_multiplier} needs '
      f'expected_clients_per_round > 10 * noise_multiplier = {10 * z:g}, got '
      f'expected_clients_per_round={num_clients}. Adaptive clipping noises '
      f'the count of clients below the clip with stddev 0.05 * '
      f'expected_clients_per_round = {sigma_b:g}, and the values\' noise '
      'multiplier (z^-2 - (2 * stddev)^-2)^(-1/2) exists only when that '
      f'stddev exceeds noise_multiplier / 2 (TFF\'s rule). Use {fixes}.')


def with_zeroing(config: AdaptiveClip, multiplier: float,
                 increment: float) -> AdaptiveClip:
  """`config` that zeroes values of norm > multiplier * C_t + increment."""
  return dataclasses.replace(
      config,
      zeroing_multiplier=checks.positive(multiplier, 'zeroing_multiplier'),
      zeroing_increment=checks.nonnegative(increment, 'zeroing_increment'))


def indicator_mechanism(config: AdaptiveClip):
  """The DDG mechanism of the indicators 2 b in {-1, 0, +1}.

  Identity encoder, integer inputs, l2 and linf clip 1 (no rounding
  inflation: the sensitivity is the integer scaling itself), central noise
  stddev 2 sigma_b in units of 2 b (noise multiplier 2 sigma_b against the
  clip 1), integer scaling c = the smallest with scaled local noise >= 1 (1
  without noise), 30-bit ring (checked against the worst-case sum).
  """
  z = 2.0 * config.count_stddev
  n = config.expected_clients
  scaling = 1
  if z > 0:
    sigma = ddg_mechanism.local_stddev(z, 1.0, n)
    scaling = max(1, math.ceil(1.0 / sigma))
  return ddg_mechanism.compute_parameters(1,
                                          ddg_mechanism.Request(
                                              l2_clip=1.0,
                                              noise_multiplier=z,
                                              expected_clients_per_round=n,
                                              bits=base.MAX_RING_BITS,
                                              beta=0.0,
                                              granularity=1.0 / scaling,
                                              linf_clip=1.0),
                                          encoder=registry.Identity(1),
                                          integer_inputs=True)


@dataclasses.dataclass(frozen=True)
class ClipRange:
  """The value mechanism seen over every clip in [MIN_CLIP, MAX_CLIP].

  For `secure_sum.check_output_range`: the result is the unit-clip
  mechanism's decoded sum times C_t.
  """

  mechanism: base.Mechanism

  @property
  def name(self) -> str:
    return self.mechanism.name

  def output_range(self):
    clip, bound = self.mechanism.output_range()
    return clip * MIN_CLIP, bound * MAX_CLIP


def client_split(config: AdaptiveClip, flat: tf.Tensor, clip: tf.Tensor):
  """(value / C_t with zeroed clients' zeroed, 2 b as float64 [1]).

  A non-finite value is passed on (the mechanism zeroes and flags it) and
  its indicator is 0; so is a zero value's (the zero-out neighbour:
  docs/notes/adaptive_clipping.md, "A zero value must send the null message
  too") and a zeroed client's.
  """
  clip = tf.cast(clip, tf.float64)
  finite = tf.reduce_all(tf.math.is_finite(flat))
  norm = tf.norm(tf.where(finite, flat, tf.zeros_like(flat)))
  speaks = finite & (norm > 0)
  scaled = flat / clip
  if config.zeroing_multiplier is not None:
    zeroed = finite & (norm > config.zeroing_multiplier * clip +
                       config.zeroing_increment)
    scaled = tf.where(zeroed, tf.zeros_like(scaled), scaled)
    speaks &= tf.logical_not(zeroed)
  sign = tf.where(norm <= clip, tf.constant(1.0, tf.float64),
                  tf.constant(-1.0, tf.float64))
  indicator = tf.where(speaks, sign, tf.constant(0.0, tf.float64))
  return scaled, tf.reshape(indicator, [1])


def next_clip(config: AdaptiveClip, clip: tf.Tensor, noisy_sum_2b: tf.Tensor,
              num_clients: tf.Tensor):
  """(b_bar, C_t+1) from the decoded noisy sum of 2 b.

  The update: docs/notes/adaptive_clipping.md, section on adaptive_clip.py.
  """
  clip = tf.cast(clip, tf.float64)
  n = tf.maximum(tf.cast(num_clients, tf.float64), 1.0)
  below = tf.clip_by_value(
      tf.cast(noisy_sum_2b, tf.float64) / 2.0 / n + 0.5, 0.0, 1.0)
  new = clip * tf.exp(-config.learning_rate * (below - config.target_quantile))
  return below, tf.clip_by_value(new, MIN_CLIP, MAX_CLIP)
