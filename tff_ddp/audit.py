"""Empirical privacy audit: a lower bound on epsilon from real TFF rounds.

`audit(process, dataset, neighbour, runs, delta=...)` runs one round of a
TFF process `runs` times on each of two zero-out neighbouring datasets
(`zero_out`), tests everything the round releases and returns a lower bound
on that round's epsilon, with a stated confidence, next to the accountant's
epsilon for the same round; a bound above it is a bug. The bound is the
hypothesis-testing view of DP (Kairouz, Oh & Viswanath, "The Composition
Theorem for Differential Privacy", Theorem 2.1) with Clopper-Pearson bounds
on the test's error rates, as in Jagielski, Ullman & Oprea (arXiv:2006.07709)
and Nasr, Song, Thakurta, Papernot & Carlini (arXiv:2101.04535).

The bound, the protocol (runs, features, selection and evaluation halves)
and the neighbours: docs/notes/privacy_audit.md.
"""

import dataclasses
import enum
import hashlib
import math
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import scipy.special

from tff_ddp.accounting import accountant as accountant_lib
from tff_ddp.accounting import event_io
from tff_ddp.accounting import pld_accountant
from tff_ddp.utils import checks

# Shrinkage of the within-class correlation matrix towards the identity for
# the 'lda' projection (any fixed value keeps the protocol sound: the
# projection is fitted on the selection half only).
_LDA_SHRINKAGE = 0.1
# Above this many varying features only the diagonal projection is fitted.
_LDA_MAX_FEATURES = 1000
# Hashes of strings are taken to 48 bits: exact in float64.
_HASH_BYTES = 6
# numpy dtype kinds: released numbers (bool, int, uint, float), released
# text (bytes, str, object), and kinds with NaN.
_NUMBER_KINDS = 'biuf'
_TEXT_KINDS = 'SUO'
_NAN_KINDS = 'fc'


class State(enum.StrEnum):
  """Where each run starts (docs/notes/privacy_audit.md, protocol step 1):
  FRESH, from `process.initialize()`; CHAINED, from the same dataset's previous
  run."""

  FRESH = 'fresh'
  CHAINED = 'chained'


# -- Statistics ------------------------------------------------------------


def clopper_pearson_upper(errors, trials, alpha):
  """One-sided (1 - alpha) Clopper-Pearson upper bound on a binomial rate.

  The p with P[Binomial(trials, p) <= errors] = alpha, i.e. the (1 - alpha)
  quantile of Beta(errors + 1, trials - errors); 1 when errors == trials.

  Args:
    errors: observed count(s) k in [0, trials] (scalar or array).
    trials: n >= 1.
    alpha: in (0, 1): the probability that the bound is below the rate.

  Returns:
    float or array of floats.
  """
  trials = checks.integer(trials, 'trials', 1)
  alpha = checks.probability(alpha, 'alpha', allow_one=False)
  k = _counts(errors, trials, 'errors')
  safe = np.minimum(k, trials - 1)
  bound = np.where(
      k >= trials, 1.0,
      scipy.special.betaincinv(safe + 1.0, trials - safe, 1.0 - alpha))
  return float(bound) if np.ndim(errors) == 0 else bound


def clopper_pearson_lower(successes, trials, alpha):
  """One-sided (1 - alpha) Clopper-Pearson lower bound on a binomial rate.

  The p with P[Binomial(trials, p) >= successes] = alpha, i.e. the alpha
  quantile of Beta(successes, trials - successes + 1); 0 when successes is
  0. (For reports: the bound on epsilon needs only the upper bounds.)
  """
  trials = checks.integer(trials, 'trials', 1)
  alpha = checks.probability(alpha, 'alpha', allow_one=False)
  k = _counts(successes, trials, 'successes')
  safe = np.maximum(k, 1)
  bound = np.where(k <= 0, 0.0,
                   scipy.special.betaincinv(safe, trials - safe + 1.0, alpha))
  return float(bound) if np.ndim(successes) == 0 else bound


def _counts(values, trials, name):
  array = np.asarray(values)
  if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.number):
    raise TypeError(f'{name} must be integer counts, got {values!r}.')
  if not np.all(np.isfinite(array)) or np.any(array != np.round(array)):
    raise ValueError(f'{name} must be integer counts, got {values!r}.')
  if np.any(array < 0) or np.any(array > trials):
    raise ValueError(f'{name} must be in [0, trials={trials}], got '
                     f'{values!r}.')
  return array.astype(np.float64)


def epsilon_lower_bound(fpr_upper, fnr_upper, delta):
  """max(0, log((1-delta-FNR_ub)/FPR_ub), log((1-delta-FPR_ub)/FNR_ub)).

  The epsilon that a test with these (upper bounds on its) error rates
  proves for a pair at `delta` (derived in docs/notes/privacy_audit.md, "The
  bound"). A term whose numerator is <= 0 proves nothing; a zero rate bound
  (only with infinite runs) gives inf.

  Args:
    fpr_upper, fnr_upper: rates in [0, 1] (scalars or broadcastable arrays).
    delta: in [0, 1).

  Returns:
    float (scalar inputs) or array, >= 0.
  """
  delta = checks.real(delta, 'delta', 0.0, 1.0, high_open=True)
  fpr = np.asarray(fpr_upper, dtype=np.float64)
  fnr = np.asarray(fnr_upper, dtype=np.float64)
  for name, rate, given in (('fpr_upper', fpr, fpr_upper), ('fnr_upper', fnr,
                                                            fnr_upper)):
    if np.any(~(rate >= 0.0)) or np.any(rate > 1.0):
      raise ValueError(f'{name} must be rates in [0, 1], got {given!r}.')
  with np.errstate(divide='ignore', invalid='ignore'):
    one = _log_ratio(1.0 - delta - fnr, fpr)
    two = _log_ratio(1.0 - delta - fpr, fnr)
  bound = np.maximum(0.0, np.maximum(one, two))
  return float(bound) if bound.ndim == 0 else bound


def _log_ratio(numerator, denominator):
  numerator, denominator = np.broadcast_arrays(numerator, denominator)
  out = np.full(numerator.shape, -np.inf)
  positive = numerator > 0
  zero = positive & (denominator <= 0)
  both = positive & (denominator > 0)
  out[zero] = np.inf
  out[both] = np.log(numerator[both] / denominator[both])
  return out


# -- Neighbours and releases ------------------------------------------------


def zero_out(dataset: Sequence[Any],
             index: int,
             fill: float = 0.0) -> List[Any]:
  """The zero-out neighbour: client `index`'s value replaced by `fill`.

  Same shape and dtype as the client's value. `fill=0` for the sum
  aggregators; `fill=np.nan` for the quantile process (a non-finite value
  has the zero encoding; docs/notes/privacy_audit.md, "Neighbours").
  """
  clients = list(dataset)
  index = checks.integer(index, 'index', 0, len(clients) - 1)
  value = np.asarray(clients[index])
  replaced = np.full(value.shape, fill, dtype=value.dtype)
  clients[index] = replaced if value.ndim else replaced[()]
  return clients


def _differing_clients(dataset, neighbour) -> List[int]:
  if len(dataset) != len(neighbour):
    raise ValueError(f'dataset and neighbour must have the same clients: got '
                     f'{len(dataset)} and {len(neighbour)}.')
  differ = []
  for i, (a, b) in enumerate(zip(dataset, neighbour)):
    a, b = np.asarray(a), np.asarray(b)
    same = (a.shape == b.shape and a.dtype == b.dtype and
            np.array_equal(a, b, equal_nan=a.dtype.kind in _NAN_KINDS))
    if not same:
      differ.append(i)
  return differ


def _hash(text) -> float:
  data = text if isinstance(text, bytes) else str(text).encode('utf-8')
  digest = hashlib.sha256(data).digest()[:_HASH_BYTES]
  return float(int.from_bytes(digest, 'big'))


def _leaf_values(value) -> np.ndarray:
  array = np.asarray(value)
  if array.dtype.kind in _NUMBER_KINDS:
    return array.astype(np.float64).ravel()
  if array.dtype.kind in _TEXT_KINDS:
    return np.array([_hash(v) for v in array.ravel()], dtype=np.float64)
  raise TypeError(f'cannot audit a released value of dtype {array.dtype}: '
                  f'{value!r}.')


def _children(value):
  """(name, child) pairs of a container, or None for a leaf."""
  if isinstance(value, Mapping):
    return [(str(k), v) for k, v in value.items()]
  if hasattr(value, '_asdict'):
    return list(value._asdict().items())
  try:
    import tensorflow_federated as tff
    if isinstance(value, tff.structure.Struct):
      return [(str(i) if name is None else name, v)
              for i, (name, v) in enumerate(tff.structure.iter_elements(value))]
  except ImportError:
    pass
  if isinstance(value, (list, tuple)):
    return [(f'[{i}]', v) for i, v in enumerate(value)]
  return None


def _flatten(value, path: str, features: Dict[str, float]) -> None:
  children = _children(value)
  if children is None:
    values = _leaf_values(value)
    if np.ndim(value) == 0 and values.size == 1:
      features[path] = float(values[0])
    else:
      for i, v in enumerate(values):
        features[f'{path}[{i}]'] = float(v)
    return
  for name, child in children:
    separator = '' if name.startswith('[') else '/'
    _flatten(child, f'{path}{separator}{name}', features)


def flatten_release(result, measurements) -> Dict[str, float]:
  """Every scalar a round releases, by name.

  As step 2 (features) of the protocol in docs/notes/privacy_audit.md.

  Args:
    result: the round's result (tensor, nested structure).
    measurements: the round's measurements.

  Returns:
    dict name -> float, in a fixed order: "result", "result[i]" for arrays,
    "measurements/<key>/<key>...".
  """
  features = {}
  _flatten(result, 'result', features)
  _flatten(measurements, 'measurements', features)
  return features


def _same_state(a, b) -> bool:
  fa, fb = {}, {}
  _flatten(a, 'state', fa)
  _flatten(b, 'state', fb)
  return list(fa) == list(fb) and all(
      fa[k] == fb[k] or (math.isnan(fa[k]) and math.isnan(fb[k])) for k in fa)


# -- The result -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """What `audit` found (all rates on the evaluation half).

  Attributes:
    runs: rounds run on each dataset.
    selection_runs, evaluation_runs: per dataset, in each half.
    target: index of the client in which the datasets differ.
    delta: the delta of both epsilons.
    confidence: 1 - alpha, the joint confidence of the rate bounds.
    num_thresholds: K, thresholds evaluated (union bound over 2K bounds).
    bound_level: alpha / (2K), the level of each one-sided bound.
    statistic: the chosen statistic's name ('projection', 'lda',
      'statistic:<name>' or a released field's name).
    direction: +1 if the test says "dataset" when statistic > threshold,
      -1 when statistic < threshold.
    threshold: the threshold that gave `epsilon_lower_bound`.
    false_positives: neighbour runs the test called "dataset".
    false_negatives: dataset runs the test called "neighbour".
    fpr, fnr: those counts over evaluation_runs.
    fpr_upper, fnr_upper: their Clopper-Pearson upper bounds at bound_level.
    epsilon_lower_bound: eps_lb (docs/notes/privacy_audit.md, "The bound"),
      maximized over the K thresholds.
    epsilon_estimate: the same formula on the point rates (no confidence;
      inf when a rate is 0).
    accountant_epsilon: the tightest accountant's epsilon of the round (PLD or
      RDP, `pld_accountant.epsilon`) at `delta` against `adversary`,
      zero-out neighbours (max over `events`).
    adversary: 'server' or 'release'.
    events: the distinct DP events the runs reported.
    selection_scores: candidate name -> its best eps_lb on the selection
      half (candidates that scored 0 are left out).
    seconds: wall time of the runs.
  """
  runs: int
  selection_runs: int
  evaluation_runs: int
  target: int
  delta: float
  confidence: float
  num_thresholds: int
  bound_level: float
  statistic: str
  direction: int
  threshold: float
  false_positives: int
  false_negatives: int
  fpr: float
  fnr: float
  fpr_upper: float
  fnr_upper: float
  epsilon_lower_bound: float
  epsilon_estimate: float
  accountant_epsilon: float
  adversary: str
  events: Tuple[Any, ...]
  selection_scores: Mapping[str, float]
  seconds: float

  @property
  def ratio(self) -> float:
    """epsilon_lower_bound / accountant_epsilon (0 for an infinite
    accountant epsilon, nan for 0 / 0)."""
    if math.isinf(self.accountant_epsilon):
      return 0.0 if math.isfinite(self.epsilon_lower_bound) else math.nan
    if self.accountant_epsilon == 0:
      return math.nan if self.epsilon_lower_bound == 0 else math.inf
    return self.epsilon_lower_bound / self.accountant_epsilon

  @property
  def consistent(self) -> bool:
    """epsilon_lower_bound <= accountant_epsilon (False: a bug, or the
    1 - confidence failure probability of the bounds)."""
    return self.epsilon_lower_bound <= self.accountant_epsilon


# -- The audit -------------------------------------------------------------


class _Candidate:
  """A statistic of a run: feature matrix rows (and user values) -> float."""

  def __init__(self, name, fn):
    self.name = name
    self.fn = fn  # (features [runs, F], user [runs, U]) -> [runs]


def _ordered(values: np.ndarray) -> np.ndarray:
  """NaN sorts above +inf: map it to a value beyond every float."""
  return np.where(np.isnan(values), np.inf, values)


def _score_thresholds(pos, neg, direction, delta, cp_pos, cp_neg):
  """Thresholds t and eps_lb of the test "direction * s > t means D".

  pos, neg: the statistic on the selection runs of D and D'; cp_pos[k],
  cp_neg[k]: the upper bound for k errors among them.
  """
  pos = np.sort(direction * pos)
  neg = np.sort(direction * neg)
  # "v > t" for t at every observed value, and below all of them.
  thresholds = np.concatenate([[-np.inf],
                               np.unique(np.concatenate([pos, neg]))])
  false_pos = neg.size - np.searchsorted(neg, thresholds, side='right')
  false_neg = np.searchsorted(pos, thresholds, side='right')
  scores = epsilon_lower_bound(cp_neg[false_pos], cp_pos[false_neg], delta)
  return thresholds, np.atleast_1d(scores)


def _projection_candidates(x_pos, x_neg):
  """The diagonal and 'lda' projections fitted on the selection half."""
  both = np.concatenate([x_pos, x_neg])
  finite = np.isfinite(both)
  counts = finite.sum(0)
  fill = np.where(counts > 0,
                  np.where(finite, both, 0.0).sum(0) / np.maximum(counts, 1),
                  0.0)

  def impute(x):
    return np.where(np.isfinite(x), x, fill)

  pos, neg = impute(x_pos), impute(x_neg)
  centred = np.concatenate([pos - pos.mean(0), neg - neg.mean(0)])
  dof = max(centred.shape[0] - 2, 1)
  var = (centred**2).sum(0) / dof
  keep = np.flatnonzero((counts > 0) & (var > 0))
  if keep.size == 0:
    return []
  scale = np.sqrt(var[keep])
  shift = np.concatenate([pos, neg])[:, keep].mean(0)
  diff = (pos[:, keep].mean(0) - neg[:, keep].mean(0)) / scale

  def project(weights):

    def fn(features, user):
      del user
      z = (impute(features)[:, keep] - shift) / scale
      return z @ weights

    return fn

  candidates = [_Candidate('projection', project(diff))]
  if 1 < keep.size <= _LDA_MAX_FEATURES:
    z = centred[:, keep] / scale
    corr = (z.T @ z) / dof
    shrunk = (1.0 - _LDA_SHRINKAGE) * corr + _LDA_SHRINKAGE * np.eye(keep.size)
    try:
      weights = np.linalg.solve(shrunk, diff)
      candidates.append(_Candidate('lda', project(weights)))
    except np.linalg.LinAlgError:
      pass
  return candidates


@dataclasses.dataclass(frozen=True)
class AuditOptions:
  """How `audit` selects its test and bounds its rates (all optional).

  Attributes:
    statistics: a-priori statistics, name -> f(result, measurements) ->
      float, added to the candidates (e.g. the projection of the result on
      the target's value).
    confidence: joint confidence of the bounds, in (0, 1) (default 0.95).
    num_thresholds: K >= 1 thresholds evaluated (each bound at level
      (1 - confidence) / (2K)).
    selection_fraction: the share of each dataset's runs that selects the
      statistic, in (0, 1) (default 1/2); the rest evaluates it.
    adversary: of the accountant's epsilon ('server', the default, or
      'release').
    state: 'fresh' (default: `process.initialize()` before every run) or
      'chained' (each dataset's runs continue one state;
      docs/notes/privacy_audit.md, protocol step 1).
  """

  statistics: Optional[Mapping[str, Callable[[Any, Any], float]]] = None
  confidence: float = 0.95
  num_thresholds: int = 1
  selection_fraction: float = 0.5
  adversary: str = 'server'
  state: str = 'fresh'

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)
    set_('confidence',
         checks.probability(self.confidence, 'confidence', allow_one=False))
    set_('num_thresholds',
         checks.integer(self.num_thresholds, 'num_thresholds', 1))
    set_(
        'selection_fraction',
        checks.probability(self.selection_fraction,
                           'selection_fraction',
                           allow_one=False))
    set_('adversary', accountant_lib.as_adversary(self.adversary))
    set_('state', checks.member(self.state, 'state', State))
    statistics = dict(self.statistics or {})
    for name, fn in statistics.items():
      if not isinstance(name, str) or not callable(fn):
        raise TypeError(f'statistics must map names to callables f(result, '
                        f'measurements) -> float, got {name!r}: {fn!r}.')
    set_('statistics', statistics)


@dataclasses.dataclass(frozen=True)
class _Runs:
  """Step 1's output: per dataset (True: D, False: D'), the runs' feature
  rows x [runs, F] and a-priori statistics u [runs, S]."""

  names: List[str]
  x: Dict[bool, np.ndarray]
  u: Dict[bool, np.ndarray]
  events: List[Any]
  seconds: float


def audit(
    process,
    dataset: Sequence[Any],
    neighbour: Sequence[Any],
    runs: int,
    delta: float,
    options: Optional[AuditOptions] = None,
    **keywords,
) -> AuditResult:
  """Audits one round of `process` on the pair (dataset, neighbour).

  The protocol, the bound and its confidence: docs/notes/privacy_audit.md.

  Args:
    process: a TFF process with `initialize()` and `next(state, clients)`
      returning (state, result, measurements) whose measurements carry the
      round's `dp_event` (tff_ddp aggregators and analytics processes). It
      must draw fresh noise on every run: build it without a test `seed`.
      Run it in TFF's C++ test context (secure sums).
    dataset: the clients' values (a list, one entry per client).
    neighbour: the same clients with one (the target) changed: the
      zero-out neighbour for an audit against the accountant (`zero_out`).
    runs: rounds per dataset (>= 4): the selection half and the evaluation
      half each need some.
    delta: the delta of both epsilons, in [0, 1).
    options: an `AuditOptions`, or its fields as keywords (statistics=,
      confidence=, num_thresholds=, selection_fraction=, adversary=,
      state=).

  Returns:
    An `AuditResult`.

  Raises:
    TypeError / ValueError: arguments; datasets not differing in exactly one
      client; a process whose runs all repeat one output per dataset (a test
      seed with fresh states: the audit would measure the seed, not the
      noise); chained states that differ between the datasets; measurements
      without a dp_event.
  """
  if not (hasattr(process, 'initialize') and hasattr(process, 'next')):
    raise TypeError(f'process must have initialize() and next(state, '
                    f'clients), got {process!r}.')
  dataset, neighbour = list(dataset), list(neighbour)
  if not dataset:
    raise ValueError('dataset must have at least one client, got none.')
  differ = _differing_clients(dataset, neighbour)
  if len(differ) != 1:
    raise ValueError(f'dataset and neighbour must differ in exactly one '
                     f'client; they differ in {len(differ)} ({differ[:10]}).')
  runs = checks.integer(runs, 'runs', 4)
  delta = checks.real(delta, 'delta', 0.0, 1.0, high_open=True)
  if options is None:
    options = AuditOptions(**keywords)
  elif keywords or not isinstance(options, AuditOptions):
    raise TypeError('give options=AuditOptions(...) or its fields as '
                    f'keywords, not both; got {options!r} and '
                    f'{sorted(keywords)}.')
  selection = min(max(int(round(options.selection_fraction * runs)), 2),
                  runs - 2)
  level = (1.0 - options.confidence) / (2 * options.num_thresholds)
  ran = _run(process, dataset, neighbour, runs, options)
  best, scores = _select(ran, selection, delta, level, options)
  return _evaluate(ran, best, scores, selection, delta, level, differ[0],
                   options)


def _run(process, dataset, neighbour, runs, options) -> _Runs:
  """Step 1: the runs on both datasets, interleaved, flattened."""
  chained = options.state is State.CHAINED
  statistics = options.statistics
  names = None
  rows = {True: [], False: []}
  user = {True: [], False: []}
  events = []
  start = time.perf_counter()
  states = dict.fromkeys((True, False),
                         process.initialize() if chained else None)
  for run in range(runs):
    for is_dataset, clients in ((True, dataset), (False, neighbour)):
      output = process.next(
          states[is_dataset] if chained else process.initialize(), clients)
      if chained:
        states[is_dataset] = output.state
      features = flatten_release(output.result, output.measurements)
      if names is None:
        names = list(features)
      elif list(features) != names:
        raise ValueError('the process released differently structured '
                         'values in two runs; cannot audit it.')
      rows[is_dataset].append([features[n] for n in names])
      user[is_dataset].append([
          float(fn(output.result, output.measurements))
          for fn in statistics.values()
      ])
      event = _event(output.measurements)
      if event not in events:
        events.append(event)
    if chained and not _same_state(states[True], states[False]):
      raise ValueError(
          f'state=\'chained\' needs a state independent of the data, but '
          f'the two datasets\' states differ after run {run}; use '
          '\'fresh\'.')
  seconds = time.perf_counter() - start
  x = {
      k: np.asarray(v, dtype=np.float64).reshape(runs, len(names))
      for k, v in rows.items()
  }
  u = {
      k: np.asarray(v, dtype=np.float64).reshape(runs, len(statistics))
      for k, v in user.items()
  }
  if all(_all_equal(x[k]) for k in x):
    raise ValueError(
        'every run released the same values (per dataset): the process does '
        'not draw fresh noise per run (built with a test seed?). Build it '
        'with the default entropy.')
  return _Runs(names=names, x=x, u=u, events=events, seconds=seconds)


def _column(which, j):
  """(features, statistics) -> column j of features (which=0) or of the
  statistics (which=1)."""
  return lambda f, s: (f, s)[which][:, j]


def _select(ran: _Runs, selection, delta, level, options):
  """Step 3: ((eps_lb, candidate, direction, K thresholds) of the best
  candidate on the selection half, its candidates' best scores)."""
  sel = {k: (ran.x[k][:selection], ran.u[k][:selection]) for k in ran.x}
  candidates = [
      _Candidate(f'statistic:{name}', _column(1, j))
      for j, name in enumerate(options.statistics)
  ]
  candidates += _projection_candidates(sel[True][0], sel[False][0])
  for j, name in enumerate(ran.names):
    column = np.concatenate([sel[True][0][:, j], sel[False][0][:, j]])
    if not _all_equal(column[:, None]):
      candidates.append(_Candidate(name, _column(0, j)))
  cp_sel = clopper_pearson_upper(np.arange(selection + 1), selection, level)
  best = None
  scores = {}
  for candidate in candidates:
    pos = _ordered(candidate.fn(*sel[True]))
    neg = _ordered(candidate.fn(*sel[False]))
    for direction in (1, -1):
      thresholds, found = _score_thresholds(pos, neg, direction, delta, cp_sel,
                                            cp_sel)
      top = float(found.max())
      if top > 0:
        scores[candidate.name] = max(scores.get(candidate.name, 0.0), top)
      if best is None or top > best[0]:  # pylint: disable=unsubscriptable-object  # `or`: not None there
        order = np.argsort(-found, kind='stable')[:options.num_thresholds]
        best = (top, candidate, direction, thresholds[order])
  return best, scores


def _evaluate(ran: _Runs, best, scores, selection, delta, level, target,
              options) -> AuditResult:
  """Step 4: the chosen test's rates and bounds on the evaluation half,
  beside the accountant's epsilon."""
  runs = ran.x[True].shape[0]
  evaluation = runs - selection
  _, candidate, direction, thresholds = best
  pos = direction * _ordered(
      candidate.fn(ran.x[True][selection:], ran.u[True][selection:]))
  neg = direction * _ordered(
      candidate.fn(ran.x[False][selection:], ran.u[False][selection:]))
  false_pos = (neg[None, :] > thresholds[:, None]).sum(1)
  false_neg = (pos[None, :] <= thresholds[:, None]).sum(1)
  fpr_ub = clopper_pearson_upper(false_pos, evaluation, level)
  fnr_ub = clopper_pearson_upper(false_neg, evaluation, level)
  bounds = np.atleast_1d(epsilon_lower_bound(fpr_ub, fnr_ub, delta))
  i = int(np.argmax(bounds))
  estimate = epsilon_lower_bound(false_pos[i] / evaluation,
                                 false_neg[i] / evaluation, delta)
  accountant_eps = max(
      pld_accountant.epsilon(event, delta, options.adversary)[0]
      for event in ran.events)
  return AuditResult(runs=runs,
                     selection_runs=selection,
                     evaluation_runs=evaluation,
                     target=target,
                     delta=delta,
                     confidence=options.confidence,
                     num_thresholds=options.num_thresholds,
                     bound_level=level,
                     statistic=candidate.name,
                     direction=direction,
                     threshold=float(direction * thresholds[i]),
                     false_positives=int(false_pos[i]),
                     false_negatives=int(false_neg[i]),
                     fpr=float(false_pos[i] / evaluation),
                     fnr=float(false_neg[i] / evaluation),
                     fpr_upper=float(fpr_ub[i]),
                     fnr_upper=float(fnr_ub[i]),
                     epsilon_lower_bound=float(bounds[i]),
                     epsilon_estimate=float(estimate),
                     accountant_epsilon=float(accountant_eps),
                     adversary=options.adversary,
                     events=tuple(ran.events),
                     selection_scores=dict(
                         sorted(scores.items(), key=lambda kv: -kv[1])),
                     seconds=ran.seconds)


def _all_equal(matrix: np.ndarray) -> bool:
  if matrix.shape[0] < 2:
    return True
  first = matrix[:1]
  return bool(np.all((matrix == first) | (np.isnan(matrix) & np.isnan(first))))


def _event(measurements):
  try:
    return event_io.extract_dp_event(measurements)
  except LookupError as e:
    raise ValueError('the measurements carry no dp_event: the audit compares '
                     'with the round\'s own accounted event (tff_ddp '
                     'aggregators and analytics processes report it).') from e
