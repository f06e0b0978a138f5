"""How each objective weights the clients of a round: the math, in one place.

Every learning process of `tff_ddp.learning` updates the server model with
w+ = w - server_opt(sum_i a_i u_i / sum_i h_i), and the objectives differ
only in the client scalars (a_i, h_i): fedavg and fedprox (McMahan et al.
2017; Li et al. 2020), fedavg_sub (superquantile paper Sec. 7.2),
superquantile (Algorithm 3, eq. 9 and Proposition 3: `superquantile_weights`;
Algorithm 1: `threshold_weights`), qffl (Li et al. 2020, q-FedAvg:
`qffl_scalars`), tilted (Li et al. 2021, TERM: `tilted_weights`). The
numpy functions are the references the TF functions (`tail_parameters`,
`client_tail_weight`) and the processes are tested against.

The table of (a_i, h_i), Algorithm 3's weights in closed form, ties:
docs/notes/deltafl.md.
"""

import collections
import dataclasses
import enum
import math
from typing import ClassVar, Optional, Tuple

import numpy as np

from tff_ddp.utils import checks

# Losses below this are treated as this in q-FFL's F^(q-1).
_MIN_QFFL_LOSS = 1e-12


class TailCount(enum.StrEnum):
  """What DP-Delta-FL's update sum is divided by (`PrivacyConfig.tail_count`;
  `private_tail`'s histogram_tail_count): EXPECTED, theta n (n public by
  protocol); HISTOGRAM, the tail count read from the private histogram."""

  EXPECTED = 'expected'
  HISTOGRAM = 'histogram'


TAIL_COUNTS = tuple(t.value for t in TailCount)


def check_tail_fraction(tail_fraction, name: str = 'tail_fraction') -> float:
  """theta in (0, 1]."""
  return checks.real(tail_fraction, name, 0.0, 1.0, low_open=True)


# ---------------------------------------------------------------------------
# numpy references


def superquantile_weights(losses, tail_fraction: float) -> np.ndarray:
  """Algorithm 3's pi (ties at the boundary split equally), by water filling.

  An independent construction from the closed form above: sort, give each
  client in turn min(cap, what is left), then average the weights within
  each group of equal losses.
  """
  losses = np.asarray(losses, np.float64)
  theta = check_tail_fraction(tail_fraction)
  n = losses.size
  if n == 0:
    return np.zeros(0)
  cap = 1.0 / (theta * n)
  order = np.argsort(-losses, kind='stable')
  pi = np.zeros(n)
  left = 1.0
  for i in order:
    pi[i] = min(cap, left)
    left -= pi[i]
  for value in np.unique(losses):
    group = losses == value
    pi[group] = pi[group].mean()
  return pi


def threshold_weights(losses, tail_fraction: float) -> np.ndarray:
  """Algorithm 1 with the exact quantile: 1[F_i >= tau] / #{F >= tau},
  tau the ceil(theta n)-th largest loss."""
  losses = np.asarray(losses, np.float64)
  theta = check_tail_fraction(tail_fraction)
  n = losses.size
  if n == 0:
    return np.zeros(0)
  k = min(n, max(1, math.ceil(theta * n - 1e-9)))
  tau = np.sort(losses)[::-1][k - 1]
  tail = losses >= tau
  return tail / tail.sum()


def superquantile(losses, tail_fraction: float) -> float:
  """The (1 - theta)-superquantile of the losses: sum_i pi_i F_i (eq. 7)."""
  losses = np.asarray(losses, np.float64)
  return float(np.dot(superquantile_weights(losses, tail_fraction), losses))


def tilted_weights(losses, tilt: float) -> np.ndarray:
  """exp(t F_i) / sum_j exp(t F_j) (TERM's weights on the cohort)."""
  losses = np.asarray(losses, np.float64)
  a = np.exp(tilt * (losses - losses.max()))
  return a / a.sum()


def qffl_scalars(losses, update_sq_norms, q: float,
                 lipschitz: float) -> Tuple[np.ndarray, np.ndarray]:
  """(a_i, h_i) of q-FedAvg (Li et al. 2020, Algorithm 3)."""
  f = np.maximum(np.asarray(losses, np.float64), _MIN_QFFL_LOSS)
  sq = np.asarray(update_sq_norms, np.float64)
  a = lipschitz * f**q
  h = q * f**(q - 1) * lipschitz**2 * sq + lipschitz * f**q
  return a, h


# ---------------------------------------------------------------------------
# TF: the server's parameters from the round's keys, and each client's share


def tail_parameters(keys, tail_fraction: float, exact: bool):
  """(tau, weight above tau, weight at tau) from all keys of the round (TF).

  `exact`: Algorithm 3 (k = floor(theta n), fractional boundary weight);
  otherwise the hard threshold at the ceil(theta n)-th largest key. n = 0
  gives tau = +inf (no client weighted).
  """
  import tensorflow as tf
  theta = check_tail_fraction(tail_fraction)
  keys = tf.cast(tf.reshape(keys, [-1]), tf.float64)
  n = tf.size(keys, out_type=tf.int64)
  nf = tf.cast(n, tf.float64)
  ordered = tf.sort(keys, direction='DESCENDING')
  if exact:
    k = tf.cast(tf.floor(theta * nf + 1e-9), tf.int64)
    rank = tf.minimum(k + 1, n)
  else:
    rank = tf.clip_by_value(tf.cast(tf.math.ceil(theta * nf - 1e-9), tf.int64),
                            1, tf.maximum(n, 1))
  # An empty round: tau = +inf (the padding), nobody weighted.
  padded = tf.concat([ordered, tf.constant([math.inf], tf.float64)], 0)
  tau = tf.gather(padded, tf.where(tf.equal(n, 0), n, rank - 1))
  above = tf.reduce_sum(tf.cast(keys > tau, tf.float64))
  at = tf.reduce_sum(tf.cast(tf.equal(keys, tau), tf.float64))
  if exact:
    cap = 1.0 / (theta * tf.maximum(nf, 1.0))
    w_above = cap
    w_at = tf.math.divide_no_nan(tf.maximum(1.0 - above * cap, 0.0), at)
  else:
    w_above = tf.math.divide_no_nan(1.0, above + at)
    w_at = w_above
  return tau, w_above, w_at


def client_tail_weight(key, tau, w_above, w_at):
  """A client's weight from its key and the server's parameters (TF)."""
  import tensorflow as tf
  key = tf.cast(key, tf.float64)
  return tf.where(key > tau, w_above,
                  tf.where(tf.equal(key, tau), w_at, tf.zeros_like(w_above)))


def qffl_client_scalars(loss, update_sq_norm, q: float, lipschitz: float):
  """(a_i, h_i) of q-FedAvg for one client (TF)."""
  import tensorflow as tf
  f = tf.maximum(tf.cast(loss, tf.float64), _MIN_QFFL_LOSS)
  sq = tf.cast(update_sq_norm, tf.float64)
  a = lipschitz * tf.pow(f, q)
  h = q * tf.pow(f, q - 1.0) * lipschitz**2 * sq + lipschitz * tf.pow(f, q)
  return a, h


# ---------------------------------------------------------------------------
# Objectives: one class per row of the module table


class Reweighting(enum.StrEnum):
  """Non-private Delta-FL's weights: THRESHOLD, Algorithm 1 with the exact
  quantile; EXACT, Algorithm 3 (the fractional boundary weight)."""

  THRESHOLD = 'threshold'
  EXACT = 'exact'


class Objective:
  """How an objective weights the clients of a round (module table).

  A frozen value: the user's choice (`objective(name, ...)` at the public
  entry point), carried by the process. The TF methods run inside the
  process's computations:

  * `key(loss, round_index)`: what a client sends the server when
    the objective `ranks` (the server gathers every key, in the clear --
    non-private processes only);
  * `server_parameters(keys)`: OrderedDict(tau, above, at) from all keys;
  * `scalars(loss, sq_norm, key, parameters)`: the client's (a_i, h_i).

  Attributes:
    name: the objective's public name.
    ranks: the server gathers the clients' keys.
    reports_tail: the round reports the tail (threshold, tail count).
    proximal_strength: mu of local training's proximal term (FedProx).
  """

  name: ClassVar[str]
  ranks: ClassVar[bool] = False
  reports_tail: ClassVar[bool] = False
  proximal_strength: float = 0.0

  def key(self, loss, round_index):
    """The client's key (TF): its loss."""
    del round_index
    import tensorflow as tf
    return tf.cast(loss, tf.float64)

  def server_parameters(self, keys):
    """OrderedDict(tau, above, at) from every key of the round (TF)."""
    del keys
    import tensorflow as tf
    zero = tf.constant(0.0, tf.float64)
    return collections.OrderedDict(tau=zero, above=zero, at=zero)

  def scalars(self, loss, sq_norm, key, parameters):
    """(a_i, h_i) of one client (TF)."""
    raise NotImplementedError

  def reference_weights(self, losses) -> np.ndarray:
    """a_i / sum_j h_j of the clients of a round (numpy reference)."""
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class FedAvg(Objective):
  """a_i = h_i = 1: the mean of the updates (McMahan et al. 2017)."""

  name: ClassVar[str] = 'fedavg'

  def scalars(self, loss, sq_norm, key, parameters):
    del loss, sq_norm, key, parameters
    import tensorflow as tf
    one = tf.constant(1.0, tf.float64)
    return one, one

  def reference_weights(self, losses) -> np.ndarray:
    n = np.asarray(losses).size
    return np.full(n, 1.0 / max(n, 1))


@dataclasses.dataclass(frozen=True)
class FedProx(FedAvg):
  """FedAvg's weights; local training adds mu/2 ||w - w_0||^2 (Li et al.
  2020)."""

  proximal_strength: float = None

  name: ClassVar[str] = 'fedprox'

  def __post_init__(self):
    _set(self, 'proximal_strength',
         _needed(self, 'proximal_strength', checks.positive))


@dataclasses.dataclass(frozen=True)
class Superquantile(Objective):
  """Delta-FL: the tail of the (1 - theta) quantile of the losses.

  Attributes:
    tail_fraction: theta in (0, 1].
    exact: Algorithm 3 (pi of eq. 9, the fractional boundary weight); False:
      Algorithm 1 with the exact quantile (the hard threshold).
  """

  tail_fraction: float = None
  exact: bool = False

  name: ClassVar[str] = 'superquantile'
  ranks: ClassVar[bool] = True
  reports_tail: ClassVar[bool] = True

  def __post_init__(self):
    _set(self, 'tail_fraction',
         _needed(self, 'tail_fraction', check_tail_fraction))
    _set(self, 'exact', checks.boolean(self.exact, 'exact'))

  def server_parameters(self, keys):
    tau, above, at = tail_parameters(keys, self.tail_fraction, self.exact)
    return collections.OrderedDict(tau=tau, above=above, at=at)

  def scalars(self, loss, sq_norm, key, parameters):
    del loss, sq_norm
    return _tail_scalars(key, parameters)

  def reference_weights(self, losses) -> np.ndarray:
    if self.exact:
      return superquantile_weights(losses, self.tail_fraction)
    return threshold_weights(losses, self.tail_fraction)


def _tail_scalars(key, parameters):
  """(a, h) of a tail objective: the client's tail weight, both times."""
  a = client_tail_weight(key, parameters['tau'], parameters['above'],
                         parameters['at'])
  return a, a


@dataclasses.dataclass(frozen=True)
class FedAvgSub(Objective):
  """FedAvg on ceil(theta n) uniformly random clients of the n (the
  superquantile paper's Sec. 7.2): the tail of uniform random keys.

  Attributes:
    tail_fraction: theta in (0, 1].
    seed: the random keys' seed (tests; None: fresh entropy).
  """

  tail_fraction: float = None
  seed: Optional[int] = None

  name: ClassVar[str] = 'fedavg_sub'
  ranks: ClassVar[bool] = True

  def __post_init__(self):
    _set(self, 'tail_fraction',
         _needed(self, 'tail_fraction', check_tail_fraction))
    _set(self, 'seed', checks.seed(self.seed))

  def key(self, loss, round_index):
    """A uniform random key (TF): from fresh entropy, or with a test seed
    from (seed, round, the client's loss bits)."""
    import tensorflow as tf
    from tff_ddp.utils import entropy as entropy_lib
    if self.seed is None:
      seed = entropy_lib.os_entropy_seed()
    else:
      digest = tf.bitcast(
          tf.fingerprint(tf.reshape(tf.bitcast(loss, tf.uint8), [1, -1]))[0],
          tf.int64)
      seed = tf.random.experimental.stateless_fold_in(
          tf.random.experimental.stateless_fold_in(
              tf.constant([self.seed, 0xFEDA5], tf.int64), round_index), digest)
    return tf.random.stateless_uniform([], seed=seed, dtype=tf.float64)

  def server_parameters(self, keys):
    tau, above, at = tail_parameters(keys, self.tail_fraction, False)
    return collections.OrderedDict(tau=tau, above=above, at=at)

  def scalars(self, loss, sq_norm, key, parameters):
    del loss, sq_norm
    return _tail_scalars(key, parameters)


@dataclasses.dataclass(frozen=True)
class QFFL(Objective):
  """q-FedAvg (Li et al. 2020): a_i = L F_i^q, h_i = q F_i^(q-1) L^2
  ||u_i||^2 + L F_i^q.

  Attributes:
    q: > 0.
    lipschitz: L = 1 / the client learning rate, > 0.
  """

  q: float = None
  lipschitz: float = None

  name: ClassVar[str] = 'qffl'

  def __post_init__(self):
    _set(self, 'q', _needed(self, 'q', checks.positive))
    _set(self, 'lipschitz', _needed(self, 'lipschitz', checks.positive))

  def scalars(self, loss, sq_norm, key, parameters):
    del key, parameters
    return qffl_client_scalars(loss, sq_norm, self.q, self.lipschitz)


@dataclasses.dataclass(frozen=True)
class Tilted(Objective):
  """TERM on the cohort (Li et al. 2021): a_i = h_i = exp(t (F_i - max_j
  F_j)).

  Attributes:
    tilt: t > 0.
  """

  tilt: float = None

  name: ClassVar[str] = 'tilted'
  ranks: ClassVar[bool] = True

  def __post_init__(self):
    _set(self, 'tilt', _needed(self, 'tilt', checks.positive))

  def server_parameters(self, keys):
    import tensorflow as tf
    top = tf.reduce_max(tf.concat([keys, tf.zeros([1], tf.float64)], 0))
    return collections.OrderedDict(tau=top, above=top, at=top)

  def scalars(self, loss, sq_norm, key, parameters):
    del sq_norm, key
    import tensorflow as tf
    a = tf.exp(self.tilt * (tf.cast(loss, tf.float64) - parameters['tau']))
    return a, a

  def reference_weights(self, losses) -> np.ndarray:
    return tilted_weights(losses, self.tilt)


# The public names of the objectives (`objective`).
OBJECTIVE_CLASSES = {
    cls.name: cls
    for cls in (FedAvg, FedAvgSub, FedProx, QFFL, Tilted, Superquantile)
}
OBJECTIVES = tuple(OBJECTIVE_CLASSES)


def _set(obj, name, value):
  object.__setattr__(obj, name, value)


def _needed(obj, name, check):
  """The field `name` checked, or the ValueError saying the objective
  needs it."""
  value = getattr(obj, name)
  if value is None:
    raise ValueError(f'objective={obj.name!r} needs {name}.')
  return check(value, name)


def objective(name, defaults=None, **parameters) -> Objective:
  """The objective called `name` (one of OBJECTIVES) with `parameters`.

  The one place a user's objective name becomes an `Objective` (an
  Objective itself is returned as it is). A parameter the objective does
  not take is refused (ValueError naming it), as is a missing one;
  `defaults` are the caller's values for the fields an objective has (the
  others are ignored).
  """
  if isinstance(name, Objective):
    given = sorted(k for k, v in parameters.items() if v is not None)
    if given:
      raise ValueError(f'objective={name!r} is built already: {given} do '
                       'not apply.')
    return name
  cls = OBJECTIVE_CLASSES[checks.choice(name, 'objective', OBJECTIVES)]
  fields = {f.name for f in dataclasses.fields(cls)}
  for key, value in parameters.items():
    if key not in fields and value is not None:
      raise ValueError(f'{key} does not apply to objective={name!r}.')
  values = {k: v for k, v in (defaults or {}).items() if k in fields}
  values.update((k, v) for k, v in parameters.items() if k in fields)
  return cls(**values)


# ---------------------------------------------------------------------------
# TF: the private tail (DP-Delta-FL), from the noisy CDF only


def private_tail(cdf, noisy_total, num_clients, tail_fraction: float,
                 upper: float, num_bins: int, exact_count: bool,
                 histogram_tail_count: bool):
  """What the server reads from the noisy loss histogram (TF).

  Args:
    cdf: the quantile process's CDF at the b right edges (NaN if unusable).
    noisy_total: its noisy total count; num_clients: n (public).
    tail_fraction: theta; upper: B; num_bins: b.
    exact_count: the CDF is normalised by n (count='exact' of the
      configuration; `PrivacyConfig.exact_count`), else by the noisy total.
    histogram_tail_count: the update's divisor is the tail count read from
      the histogram (tail_count='histogram';
      `PrivacyConfig.histogram_tail_count`), else theta n ('expected').

  Returns:
    OrderedDict(bin=k (eq. 1 for p = 1 - theta; -1 if unusable),
    threshold=Q (the right edge of bin k; 0 if unusable), tail_count (the
    update's divisor), histogram_tail_count (n_tail read from the histogram,
    clipped to [1, n]), loss (the mean clipped loss at the bin centres),
    fallback (unusable: every client in the tail, divided by n)).
  """
  import tensorflow as tf
  from tff_ddp.analytics.quantiles import encodings as hg
  theta = check_tail_fraction(tail_fraction)
  exact_count = checks.boolean(exact_count, 'exact_count')
  histogram_tail_count = checks.boolean(histogram_tail_count,
                                        'histogram_tail_count')
  cdf = tf.cast(tf.reshape(cdf, [num_bins]), tf.float64)
  finite = tf.reduce_all(tf.math.is_finite(cdf))
  n = tf.cast(num_clients, tf.float64)
  usable = finite & (n > 0)
  clean = tf.where(tf.math.is_finite(cdf), cdf, tf.zeros_like(cdf))
  k = tf.where(usable,
               hg.quantile_indices(clean, [1.0 - theta])[0],
               tf.constant(-1, tf.int64))
  total = n if exact_count else tf.cast(noisy_total, tf.float64)
  # Clients at or above the edge l_{k+1}: total (1 - F_k); for the last bin
  # the histogram only knows the whole bin (from its left edge).
  below = tf.gather(
      clean, tf.clip_by_value(tf.minimum(k, num_bins - 2), 0, num_bins - 1))
  histogram_count = tf.clip_by_value(total * (1.0 - below), 1.0,
                                     tf.maximum(n, 1.0))
  divisor = histogram_count if histogram_tail_count else theta * n
  divisor = tf.where(usable, divisor, n)
  edges = tf.constant(hg.edges(0.0, upper, num_bins))
  threshold = tf.where(usable, tf.gather(edges, tf.maximum(k, 0)),
                       tf.constant(0.0, tf.float64))
  mass = clean - tf.concat([tf.zeros([1], tf.float64), clean[:-1]], 0)
  centres = edges - upper / num_bins / 2.0
  total_mass = tf.reduce_sum(mass)
  loss = tf.where(
      usable & (total_mass > 0),
      tf.math.divide_no_nan(tf.reduce_sum(mass * centres), total_mass),
      tf.constant(math.nan, tf.float64))
  return collections.OrderedDict(bin=k,
                                 threshold=threshold,
                                 tail_count=divisor,
                                 histogram_tail_count=histogram_count,
                                 loss=loss,
                                 fallback=tf.logical_not(usable))


def in_tail(loss, tail_bin, upper: float, num_bins: int):
  """A client's tail membership: its loss is in a bin above `tail_bin`, i.e.
  loss >= Q (for the last bin: loss >= B); every client if tail_bin = -1.
  Works elementwise on a vector of losses too (TF)."""
  import tensorflow as tf
  from tff_ddp.analytics.quantiles import encodings as hg
  loss = tf.cast(loss, tf.float64)
  index = hg.bin_index(loss, 0.0, upper, num_bins)
  return (index > tf.cast(tail_bin, tf.int64)) | (loss >= upper)
