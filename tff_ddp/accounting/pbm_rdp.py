"""Privacy of the clipped Poisson binomial mechanism (cPBM) sum.

Chen, Choquette-Choo, Kairouz & Suresh, "Federated frequency estimation"
(the clipped Poisson binomial mechanism paper), Lemma 2 and its proof in
App. C.2, through Lemma 3.6 of Chen et al. 2022, "The Poisson binomial
mechanism". `rdp(..., relation=...)` gives the curve for 'replace_one'
(Lemma 2 as published) or 'zero_out' (the target moved to b = 1/2), each
divergence computed exactly from the PMFs (`renyi_divergence`); `l2_rdp`
the l2-aware bound; `MAX_EXACT_CLIENTS` caps the exact work.

The reduction of Lemma 2, the two curves, the l2-aware bound and the
bounded work: docs/notes/cpbm_accounting.md.
"""

import functools
import math
from typing import Optional, Sequence, Tuple

import numpy as np
from scipy import special

from tff_ddp.accounting import events
from tff_ddp.accounting.orders import check_orders
from tff_ddp.utils import checks

# Evaluate the divergence matrix in blocks of at most this many entries.
_BLOCK_ENTRIES = 1 << 22
# Likelihood ratios of every pair here are at most this (one Bernoulli
# moves, p <= 3/4; docs/notes/cpbm_accounting.md, "Work is bounded").
_RATIO_BOUND = 3.0
# The window is chosen so that the bounded tail term is below exp(-this).
_TAIL_LOG = 745.0
# Above this many clients the curve of this many is used
# (docs/notes/cpbm_accounting.md, "Work is bounded"):
# it keeps one curve to a window of ~10^5 points, about a second.
MAX_EXACT_CLIENTS = 2**22
# theta's range: Lemma 2 holds for theta in (0, 1/4]; below MIN_THETA,
# 1/2 + theta is within a few float64 steps of 1/2 and the mechanism's
# Bernoullis would not carry the signal (2^-53 is the float spacing at 1/2).
MAX_THETA = 0.25
MIN_THETA = 2.0**-40


def check_event(event) -> events.PoissonBinomialDpEvent:
  """Validates the fields of a cPBM event (TypeError / ValueError)."""
  if not isinstance(event, events.PoissonBinomialDpEvent):
    raise TypeError(
        f'Expected a PoissonBinomialDpEvent, got {type(event).__name__}.')
  checks.real(event.theta, 'theta', 0.0, MAX_THETA, low_open=True)
  for name in ('num_trials', 'num_clients', 'dimension'):
    checks.integer(getattr(event, name), name, 1, events.MAX_EVENT_INTEGER)
  if event.replace_one_dimension is not None:
    checks.integer(event.replace_one_dimension, 'replace_one_dimension',
                   int(event.dimension), events.MAX_EVENT_INTEGER)
  if getattr(event, 'l2_bound', None) is not None:
    checks.real(event.l2_bound,
                'l2_bound',
                0.0,
                None,
                low_open=True,
                allow_inf=True)
  return event


def log_binomial_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
  """log Bin(k; n, p) for integer k (-inf outside 0..n), exact via gammaln."""
  k = np.asarray(k, dtype=np.float64)
  inside = (k >= 0) & (k <= n)
  kk = np.where(inside, k, 0.0)
  logpmf = (special.gammaln(n + 1.0) - special.gammaln(kk + 1.0) -
            special.gammaln(n - kk + 1.0) + kk * math.log(p) +
            (n - kk) * math.log1p(-p))
  return np.where(inside, logpmf, -np.inf)


def renyi_divergence(
    log_p: np.ndarray,
    log_q: np.ndarray,
    orders: Sequence[float],
    tail_mass: float = 0.0,
    ratio_bound: float = 1.0,
) -> np.ndarray:
  """An upper bound on D_alpha(P || Q), exact when `tail_mass` is 0.

    D_alpha = log(sum_x P(x)^alpha Q(x)^(1 - alpha)) / (alpha - 1).

  Stable for tiny divergences: with r = log(P/Q), the sum minus one equals
  sum_x Q(x) [expm1(alpha r) - alpha expm1(r)] over the whole support (the
  subtracted part sums to zero), whose terms are all >= 0, so log1p of it
  loses no digits. Where that overflows we fall back to a plain logsumexp.

  Truncated supports: if `log_p`, `log_q` cover only a window and both P
  and Q put mass at most `tail_mass` outside it, where P/Q <= `ratio_bound`,
  then the sum minus one exceeds the window's terms by at most
  (alpha + ratio_bound^alpha) tail_mass (the tail's own terms, plus alpha
  times the window's mass deficit |P(window) - Q(window)| <= tail_mass), and
  that is added.

  Args:
    log_p: log P(x) over the support; -inf allowed where P(x) = 0.
    log_q: log Q(x), same shape. Where Q(x) = 0 < P(x) the result is inf.
    orders: the orders alpha > 1.
    tail_mass: bound on P and Q outside the given support (0: none).
    ratio_bound: bound on P/Q outside the given support.

  Returns:
    Array of D_alpha upper bounds, one per order.
  """
  log_p = np.asarray(log_p, dtype=np.float64)
  log_q = np.asarray(log_q, dtype=np.float64)
  orders = check_orders(orders)
  if np.any(np.isneginf(log_q) & np.isfinite(log_p)):
    return np.full(orders.shape, np.inf)
  keep = np.isfinite(log_q)
  log_p, log_q = log_p[keep], log_q[keep]
  r = np.where(np.isfinite(log_p), log_p - log_q, -np.inf)
  q = np.exp(log_q)
  out = np.empty(orders.shape)
  block = max(1, _BLOCK_ENTRIES // max(1, r.size))
  with np.errstate(divide='ignore'):
    log_tail = math.log(tail_mass) if tail_mass > 0 else -np.inf
  for start in range(0, orders.size, block):
    a = orders[start:start + block, None]
    # log((alpha + ratio^alpha) tail), in log space.
    log_extra = np.logaddexp(np.log(a[:, 0]),
                             a[:, 0] * math.log(ratio_bound)) + log_tail
    with np.errstate(over='ignore', invalid='ignore'):
      excess = np.sum(q * (np.expm1(a * r) - a * np.expm1(r)), axis=1)
      excess = np.maximum(excess, 0.0) + np.exp(log_extra)
      stable = np.log1p(excess)
      plain = np.logaddexp(special.logsumexp(log_q + a * r, axis=1), log_extra)
    cgf = np.where(np.isfinite(stable) & (stable < 1.0), stable, plain)
    out[start:start + block] = np.maximum(cgf, 0.0) / (a[:, 0] - 1.0)
  return out


def _window(n_prime: int, p: float,
            max_order: float) -> Tuple[np.ndarray, float]:
  """(support points, tail mass bound) for pairs built on Bin(n', p).

  Whole support 0..n'+1 when it is small; otherwise the points within
  W of the mean n' p (W from docs/notes/cpbm_accounting.md, "Work is
  bounded") and the Hoeffding bound
  2 exp(-2 W^2 / (n' + 1)) on the mass of either distribution outside
  (each is Bin(n', p) shifted by at most one).
  """
  width = math.sqrt(
      (n_prime + 1) *
      (_TAIL_LOG + max_order * math.log(_RATIO_BOUND)) / 2.0) + 3.0
  centre = n_prime * p
  lo = max(0, math.floor(centre - width))
  hi = min(n_prime + 1, math.ceil(centre + width) + 1)
  if lo == 0 and hi == n_prime + 1:
    return np.arange(n_prime + 2), 0.0
  # One-sided Hoeffding for X ~ Bin(n', p): P(X - n'p <= -t) and
  # P(X - n'p >= t) are at most exp(-2 t^2 / n') each. A point outside
  # [lo, hi] of X + s (s in {0, 1}) needs X < lo or X >= hi.
  tail = 0.0
  if lo > 0:
    tail += math.exp(-2.0 * (centre - lo)**2 / (n_prime + 1))
  if hi < n_prime + 1:
    tail += math.exp(-2.0 * (hi - 1 - centre)**2 / (n_prime + 1))
  return np.arange(lo, hi + 1), tail


def _n_prime(num_clients: int) -> int:
  return num_clients // 2  # ceil((n - 1) / 2)


def worst_case_pair(theta: float,
                    num_clients: int,
                    k: Optional[np.ndarray] = None):
  """log PMFs (P, Q) of the one-trial worst case of Lemma 2 (term Pi_1).

  P = Ber(1/2 - theta) + Bin(n', 1/2 + theta), Q = Bin(n' + 1, 1/2 + theta),
  n' = ceil((n - 1)/2), on the points `k` (default the support 0..n' + 1).
  The other term of Lemma 2 is D(Q || P) by the bit-flip symmetry
  (docs/notes/cpbm_accounting.md, the reduction's steps 2-3).
  """
  n_prime = _n_prime(num_clients)
  p = 0.5 + theta
  k = np.arange(n_prime + 2) if k is None else k
  log_q = log_binomial_pmf(k, n_prime + 1, p)
  log_p = np.logaddexp(
      math.log1p(-p) + log_binomial_pmf(k - 1, n_prime, p),
      math.log(p) + log_binomial_pmf(k, n_prime, p))
  return log_p, log_q


RELATIONS = events.RELATIONS
_ZERO_OUT = events.Relation.ZERO_OUT
_REPLACE_ONE = events.Relation.REPLACE_ONE


def zero_out_pairs(theta: float,
                   num_clients: int,
                   k: Optional[np.ndarray] = None):
  """[(log P_a, log Q) for a in (p, 1 - p)]: the zero-out worst cases.

  P_a = Ber(a) + Bin(n', p), Q = Ber(1/2) + Bin(n', p), p = 1/2 + theta,
  n' = ceil((n - 1)/2), on the points `k` (default the support 0..n' + 1).
  """
  n_prime = _n_prime(num_clients)
  p = 0.5 + theta
  k = np.arange(n_prime + 2) if k is None else k
  shifted = log_binomial_pmf(k - 1, n_prime, p)  # the target sent a 1
  same = log_binomial_pmf(k, n_prime, p)  # the target sent a 0
  half = math.log(0.5)
  log_q = np.logaddexp(half + shifted, half + same)
  return [(np.logaddexp(math.log(a) + shifted,
                        math.log1p(-a) + same), log_q) for a in (p, 1.0 - p)]


def per_trial_rdp(
    theta: float,
    num_clients: int,
    orders: Sequence[float],
    relation: str = 'zero_out',
) -> np.ndarray:
  """The one-trial divergence bound of `relation`, per order.

  'replace_one': max of the two divergences of Lemma 2; 'zero_out': max
  over the pairs of `zero_out_pairs`, both directions. Bounded work for any
  number of clients (docs/notes/cpbm_accounting.md, "Work is bounded").
  """
  theta = checks.real(theta, 'theta', 0.0, MAX_THETA, low_open=True)
  num_clients = checks.integer(num_clients, 'num_clients', 1)
  relation = events.as_relation(relation)
  orders = check_orders(orders)
  return np.asarray(
      _per_trial(float(theta), min(int(num_clients), MAX_EXACT_CLIENTS),
                 tuple(orders.tolist()), relation))


@functools.lru_cache(maxsize=256)
def _per_trial(theta, num_clients, orders, relation):
  k, tail = _window(_n_prime(num_clients), 0.5 + theta, max(orders))
  if relation == _REPLACE_ONE:
    pairs = [worst_case_pair(theta, num_clients, k)]
  else:
    pairs = zero_out_pairs(theta, num_clients, k)
  out = np.zeros(len(orders))
  for log_p, log_q in pairs:
    for first, second in ((log_p, log_q), (log_q, log_p)):
      out = np.maximum(
          out, renyi_divergence(first, second, orders, tail, _RATIO_BOUND))
  return tuple(out)


def rdp(
    event: events.PoissonBinomialDpEvent,
    orders: Sequence[float],
    relation: str = 'zero_out',
) -> np.ndarray:
  """RDP curve of one cPBM release: m d times the one-trial bound.

  eps(alpha) = m d times `per_trial_rdp` of `relation`, computed exactly
  from the PMFs (the reduction: docs/notes/cpbm_accounting.md, section on
  pbm_rdp.py). 'zero_out'
  (the default, over `event.dimension` coordinates) is our tighter curve for
  zero-out neighbours; 'replace_one' is Lemma 2 as published, over
  `event.replace_one_dimension` coordinates when set, and bounds both
  relations. With `event.l2_bound` set, the smaller per order of that and
  `l2_rdp` (both bound the same divergence).
  """
  check_event(event)
  relation = events.as_relation(relation)
  dimension = event.dimension
  if relation == _REPLACE_ONE and event.replace_one_dimension is not None:
    dimension = event.replace_one_dimension
  # float: a Python int of any size times the array would make it dtype=object.
  lemma2 = (float(event.num_trials) * float(dimension) * per_trial_rdp(
      float(event.theta), int(event.num_clients), orders, relation))
  bound = getattr(event, 'l2_bound', None)
  if bound is None or float(bound)**2 >= float(dimension):
    # kappa >= f(s_max) / s_max^2 and Lemma 2 is m dimension f(s_max)
    # (f(theta), resp. f(2 theta) with the budget (2 L)^2): the l2 bound is
    # at least m L^2 f(s_max), not smaller once L^2 >= dimension.
    return lemma2
  # Both bound the same divergence: the smaller, per order (`l2_rdp`).
  return np.minimum(lemma2, l2_rdp(event, orders, relation))


# -- The l2-aware bound -----------------------------------------------------
#
# Lemma 2 charges every one of the D coordinates the full shift theta. A
# client whose representation is clipped to l2 norm C cannot move many
# coordinates that far; this section bounds the round by the client's
# squared l2 norm instead. The derivation is the docstring of `l2_rdp`.

# Grid of shifts: this many uniform points on (0, s_max], plus a geometric
# grid of ratio 1 + 1/L2_GEOMETRIC_STEPS down to s_max * 2^-12.
L2_UNIFORM_POINTS = 128
L2_GEOMETRIC_STEPS = 16
# Windows of more points than this use a 4x coarser grid.
L2_LARGE_WINDOW = 1024
# The curvature bound is tried on [0, s_J] for every this many grid points.
L2_CURVATURE_STRIDE = 4
# The bound with the others' coins revealed (`_kappa_revealed`): up to this
# many clients (its work is ~ n^2 per shift), orders up to this, on a
# coarser uniform grid; the fair-coin counts below the e^-this quantile are
# bounded, not summed.
L2_REVEAL_MAX_CLIENTS = 512
L2_REVEAL_MAX_ORDER = 256.0
L2_REVEAL_UNIFORM_POINTS = 32
L2_REVEAL_TAIL_LOG = 100.0
# ... and theta at least this: 1 - 2 theta rounds by <= 2^-53, which moves
# the weights P(J) by a relative <= n 2^-53 / (2 theta) < 2^-24 here (under
# L2_FLOAT_MARGIN); below it the first reduction alone is used.
L2_REVEAL_MIN_THETA = 2.0**-20
# kappa is computed at theta rounded up to a power of 2^(1/this)
# (`theta_grid_point`), so a calibration reuses a few cached values.
L2_THETA_STEPS = 32
# Grid points below this shift are not used as a grid bound (float64
# cancellation in the divergence of nearly equal distributions); the
# curvature bound covers [0, s] there.
L2_MIN_GRID_SHIFT = 2.0**-10
# Relative margin for float64 rounding of the computed sums.
L2_FLOAT_MARGIN = 1e-6


def _shift_families(theta: float, relation: str):
  """The one-trial pairs whose worst case bounds a shift s, as affine maps.

  Each family is (u0, du, v0, dv): the target's Bernoulli probabilities are
  1/2 + u0 + du s (in P) and 1/2 + v0 + dv s (in Q); exactly one of du, dv
  is +-1, and u0 = v0. 'zero_out': (+-s, 0) and (0, +-s). 'replace_one':
  the two ends of the segment b - a = s inside [-theta, theta], both
  orders: (-theta, -theta + s), (-theta + s, -theta), (theta - s, theta),
  (theta, theta - s).
  """
  if relation == _ZERO_OUT:
    return ((0.0, 1.0, 0.0, 0.0), (0.0, -1.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0),
            (0.0, 0.0, 0.0, -1.0))
  return ((-theta, 0.0, -theta, 1.0), (-theta, 1.0, -theta, 0.0),
          (theta, -1.0, theta, 0.0), (theta, 0.0, theta, -1.0))


def _target_mixture(offset, shifted, same):
  """log of Ber(1/2 + offset) + (the others' sum), from the others' log
  PMF at k - 1 (`shifted`) and at k (`same`)."""
  return np.logaddexp(
      math.log(0.5 + offset) + shifted,
      math.log(0.5 - offset) + same)


def _curvature_bound(family, t, shifted, same, orders, tail):
  """An upper bound on sup over 0 < s <= t of D_alpha(P_s || Q_s) / s^2.

  g(s) = sum_z P_s(z)^alpha Q_s(z)^(1 - alpha), with P_s, Q_s affine in s
  and P_0 = Q_0: g(0) = 1, g'(0) = 0, and
    g''(s) = alpha (alpha - 1) sum_z (P/Q)^(alpha - 2) (Q dP - P dQ)^2 / Q^3
  (second derivative of the perspective Q h(P / Q), h(x) = x^alpha). With
  dQ = 0 a term is (P/Q)^(alpha-2) dP^2 / Q, monotone in P; with dP = 0 it
  is P^alpha Q^(-alpha-1) dQ^2, decreasing in Q; P, Q are affine in s, so
  the sup over [0, t] of each term is at s = 0 or s = t, and
  D_alpha(s) <= (g(s) - 1)/(alpha - 1) <= s^2 sup g'' / (2 (alpha - 1)).
  Here |dP| or |dQ| is |R(z - 1) - R(z)| (R the others' PMF), inflated by
  4 ulp of the larger term against cancellation. Outside the window: the
  target probabilities lie in [1/4, 3/4], so Q >= (R(z-1) + R(z)) / 4, the
  ratios are in [1/3, 3], a term is at most 4 * 3^(alpha + 2)
  (R(z-1) + R(z)), and those sum to at most 2 `tail`.
  """
  u0, du, v0, dv = family
  hi, lo = np.maximum(shifted, same), np.minimum(shifted, same)
  with np.errstate(divide='ignore', invalid='ignore'):
    diff = hi + np.log(-np.expm1(np.minimum(lo - hi, 0.0)))
    diff = np.where(np.isfinite(hi), diff, -np.inf)
    log_d = np.logaddexp(diff, math.log(4 * 2.0**-52) + hi)
  log_d = np.where(np.isfinite(hi), log_d, -np.inf)
  ends = [(_target_mixture(u0 + du * s, shifted,
                           same), _target_mixture(v0 + dv * s, shifted, same))
          for s in (0.0, t)]
  log_8x3 = math.log(8.0) + (orders + 2.0) * math.log(3.0)
  out = np.empty(orders.shape)
  block = max(1, (1 << 20) // max(1, log_d.size))
  for start in range(0, orders.size, block):
    a = orders[start:start + block, None]
    with np.errstate(invalid='ignore', divide='ignore'):
      log_terms = _curvature_log_terms(dv, a, ends) + 2.0 * log_d
      log_terms = np.where(np.isfinite(log_d), log_terms, -np.inf)
      total = special.logsumexp(log_terms, axis=1)
      if tail > 0:
        total = np.logaddexp(total,
                             log_8x3[start:start + block] + math.log(tail))
    out[start:start + block] = total
  return _curvature_from_log_sums(orders, out)


def _curvature_log_terms(dv, a, ends):
  """log of a term of g'' / (alpha (alpha - 1)) without its dP^2 (dQ^2),
  the larger of its values at the two ends (log P, log Q) of `ends`:
  (P/Q)^(alpha-2) / Q where P moves (dv = 0), P^alpha Q^(-alpha-1) where
  Q moves. P, Q may be relative to a common mass that the caller adds
  (both are homogeneous of degree -1 in it)."""
  if dv == 0.0:
    terms = [(a - 2.0) * (lp - lq) - lq for lp, lq in ends]
  else:
    terms = [a * lp - (a + 1.0) * lq for lp, lq in ends]
  return np.maximum(terms[0], terms[1])


def _curvature_from_log_sums(orders, log_sums):
  """sup D_alpha / s^2 from log sup g'' / (alpha (alpha - 1)):
  alpha (alpha - 1) sum / (2 (alpha - 1)) = alpha sum / 2."""
  with np.errstate(over='ignore'):
    return orders / 2.0 * np.exp(log_sums)


# Entries of the (orders x atoms) blocks the fair-coin lattice is evaluated
# in: a few MB, so a block stays in cache.
_LATTICE_BLOCK = 1 << 18
# `_expm1_sums` computes expm1(alpha r) afresh every this many orders (in
# between, from the previous order's).
_LATTICE_RESTART = 8


def _fair_coin_lattice(theta, num_clients):
  """The atoms of the second reduction's mixture, flattened.

  With J ~ Bin(n - 1, 1 - 2 theta) fair coins revealed (J >= lo: the rows
  below have total weight at most `outer`), the target Ber(1/2 + u) plus
  Bin(J, 1/2) has PMF (1/2 + u) B_J(z - 1) + (1/2 - u) B_J(z)
  = B_{J+1}(z) (1 + u D), D = 4 z / (J + 1) - 2 in [-2, 2], for
  z = 0..J+1 (Pascal: B_J(z - 1) + B_J(z) = 2 B_{J+1}(z), and
  B_J(z - 1) / B_{J+1}(z) = 2 z / (J + 1)). So every pair of target
  offsets (u, v) is a function of D on the atoms (J, z), of mass
  mu = P(J) B_{J+1}(z). Returns (log mu, D, outer).
  """
  from scipy import stats
  others = num_clients - 1
  fair = 1.0 - 2.0 * theta
  # Rows J >= lo; the rest has mass binom.cdf(lo - 1) (doubled for the
  # library's rounding).
  lo = int(stats.binom.ppf(math.exp(-L2_REVEAL_TAIL_LOG), others, fair))
  lo = max(0, lo - 1)
  outer = 2.0 * float(stats.binom.cdf(lo - 1, others, fair)) if lo > 0 else 0.0
  js = np.arange(lo, others + 1)
  log_w = log_binomial_pmf(js, others, fair)
  keep = np.exp(log_w) > 0
  js, log_w = js[keep], log_w[keep]
  sizes = js + 2
  row = np.repeat(np.arange(js.size), sizes)
  z = np.arange(row.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
  k = (js + 1)[row]
  kf, zf = k.astype(np.float64), z.astype(np.float64)
  log_mu = log_w[row] + (special.gammaln(kf + 1.0) - special.gammaln(zf + 1.0) -
                         special.gammaln(kf - zf + 1.0) - kf * math.log(2.0))
  # 2 (2z - (J+1)) / (J+1): an exact integer over J + 1, one rounding.
  offsets = 2.0 * (2 * z - k).astype(np.float64) / kf
  return log_mu, offsets, outer


def _expm1_sums(r, weights, orders):
  """sum_x weights[x] expm1(alpha r[x]) for each order alpha.

  Small arrays: every order at once. Large ones (one order at a time), from
  one order to the next larger: expm1(alpha' r) = E + expm1((alpha' -
  alpha) r) (1 + E), E = expm1(alpha r), one expm1 per distinct step, not
  per order. Both terms have the sign of r, so a step adds a few ulp of
  relative error; restarted every _LATTICE_RESTART orders, that stays
  far below L2_FLOAT_MARGIN.
  """
  if r.size * orders.size <= _LATTICE_BLOCK:
    return np.expm1(orders[:, None] * r) @ weights
  sums = np.empty(orders.shape)
  steps: dict[float, np.ndarray] = {}
  e: np.ndarray  # set at i == 0, a restart
  for i, a in enumerate(orders):
    step = a - orders[i - 1] if i else 0.0
    if i % _LATTICE_RESTART == 0 or not step > 0:
      e = np.expm1(a * r)
    else:
      y = steps.get(step)
      if y is None:
        y = steps[step] = np.expm1(step * r)
      e = e + y * (1.0 + e)
    sums[i] = np.dot(weights, e)
  return sums


def _lattice_divergence(u, v, orders, lattice):
  """D_alpha bound of the fair-coin mixture pair with target offsets u, v.

  exp((alpha - 1) D) <= sum over atoms of mu Q (P/Q)^alpha + (rows left
  out: weight <= outer, each g_J <= 3^(alpha - 1) as the ratios are
  <= 3), with P/Q = (1 + u D) / (1 + v D) and Q = 1 + v D on the lattice
  (`_fair_coin_lattice`). Computed as log1p of sum mu Q (expm1(alpha r) -
  alpha expm1(r)) + outer 3^(alpha - 1), r = log(P/Q) (the subtracted sum
  is 0: P and Q have the same mass on every row), with a plain log-sum
  fallback where that overflows.
  """
  log_mu, offsets, outer = lattice
  log_q = np.log1p(v * offsets)
  r = np.log1p(u * offsets) - log_q
  log_qw = log_mu + log_q
  qw = np.exp(log_qw)
  q_expm1 = np.dot(qw, np.expm1(r))  # 0 up to rounding
  with np.errstate(over='ignore', invalid='ignore'):
    excess = _expm1_sums(r, qw, orders) - orders * q_expm1
    log_outer = (math.log(outer) + (orders - 1.0) * math.log(_RATIO_BOUND)
                 if outer > 0 else np.full(orders.shape, -np.inf))
    cgf = np.log1p(np.maximum(excess, 0.0) + np.exp(log_outer))
    bad = ~(np.isfinite(cgf) & (cgf < 1.0))
    if np.any(bad):
      cgf[bad] = np.logaddexp(
          special.logsumexp(log_qw + orders[bad][:, None] * r, axis=1),
          log_outer[bad])
  return np.maximum(cgf, 0.0) / (orders - 1.0)


def _lattice_curvature(family, t, orders, lattice):
  """`_curvature_bound` for the fair-coin mixture on its lattice.

  sup g'' <= sum_J P(J) sup g_J'', each term at the larger of its values
  at s = 0 and s = t (as in `_curvature_bound`), with |dP| or |dQ|
  = B_{J+1}(z) |D|; the rows left out (weight <= outer) each have
  g_J'' <= alpha (alpha - 1) 8 3^(alpha + 2).
  """
  log_mu, offsets, outer = lattice
  u0, du, v0, dv = family
  with np.errstate(divide='ignore'):
    base = log_mu + 2.0 * np.log(np.abs(offsets))  # -inf where D = 0
  ends = [(np.log1p((u0 + du * s) * offsets), np.log1p((v0 + dv * s) * offsets))
          for s in (0.0, t)]
  log_8x3 = math.log(8.0) + (orders + 2.0) * math.log(3.0)
  out = np.empty(orders.shape)
  block = max(1, _LATTICE_BLOCK // max(1, offsets.size))
  for start in range(0, orders.size, block):
    a = orders[start:start + block, None]
    total = special.logsumexp(_curvature_log_terms(dv, a, ends) + base, axis=1)
    if outer > 0:
      total = np.logaddexp(total,
                           log_8x3[start:start + block] + math.log(outer))
    out[start:start + block] = total
  return _curvature_from_log_sums(orders, out)


def _certified_sup(grid, values, curvature):
  """min over J of max(curvature(J), max_{i >= J} values[i+1] / grid[i]^2).

  values[i] is a non-decreasing function f at grid[i] (grid increasing, its
  last point s_max); curvature(J) bounds sup f(s)/s^2 on (0, grid[J]). On
  [s_i, s_{i+1}], f(s) / s^2 <= f(s_{i+1}) / s_i^2.
  """
  ratios = values[1:] / grid[:-1, None]**2
  suffix = np.maximum.accumulate(ratios[::-1], axis=0)[::-1]
  best = np.full(values.shape[1], np.inf)
  for j in list(range(0, grid.size - 1, L2_CURVATURE_STRIDE)) + [grid.size - 1]:
    above = suffix[j] if j < grid.size - 1 else 0.0
    best = np.minimum(best, np.maximum(curvature(j), above))
  return best


def _shift_grid(s_max, uniform, geometric_steps):
  """Uniform points, s_max (1 - j/256) for j < 8 and a geometric grid down
  to s_max 2^-12, without the points below L2_MIN_GRID_SHIFT; the last
  point is s_max."""
  points = s_max * np.arange(1, uniform + 1) / uniform
  top = s_max * (1.0 - np.arange(8) / 256.0)
  geometric = s_max * (1.0 + 1.0 / geometric_steps)**-np.arange(
      int(math.ceil(12 * math.log(2) * geometric_steps)) + 1)
  grid = np.unique(np.concatenate([points, top, geometric]))
  return np.append(grid[(grid >= L2_MIN_GRID_SHIFT) & (grid < s_max)], s_max)


def _kappa_dropped(theta, num_clients, orders, relation):
  """kappa with the others reduced as for Lemma 2: n' at 1/2 + theta."""
  n_prime = _n_prime(num_clients)
  p = 0.5 + theta
  k, tail = _window(n_prime, p, float(orders.max()))
  shifted = log_binomial_pmf(k - 1, n_prime, p)
  same = log_binomial_pmf(k, n_prime, p)
  s_max = theta if relation == _ZERO_OUT else 2.0 * theta
  families = _shift_families(theta, relation)
  if k.size <= L2_LARGE_WINDOW:
    grid = _shift_grid(s_max, L2_UNIFORM_POINTS, L2_GEOMETRIC_STEPS)
  else:  # Many clients: f(s)/s^2 is nearly flat, a coarser grid will do.
    grid = _shift_grid(s_max, L2_UNIFORM_POINTS // 4, L2_GEOMETRIC_STEPS // 4)
  values = np.zeros((grid.size, orders.size))
  for i, s in enumerate(grid):
    for u0, du, v0, dv in families:
      values[i] = np.maximum(
          values[i],
          renyi_divergence(_target_mixture(u0 + du * s, shifted, same),
                           _target_mixture(v0 + dv * s, shifted, same), orders,
                           tail, _RATIO_BOUND))

  def curvature(j):
    return functools.reduce(np.maximum, [
        _curvature_bound(family, grid[j], shifted, same, orders, tail)
        for family in families
    ])

  return _certified_sup(grid, values, curvature)


def _kappa_revealed(theta, num_clients, orders, relation):
  """kappa with the others' coins split into fair coins and revealed bits.

  Each other client's Ber(q), q in [1/2 - theta, 1/2 + theta], is with
  probability 1 - 2 theta a fair coin and otherwise a Ber(r) coin,
  r = (q - 1/2 + theta) / (2 theta) in [0, 1]. Revealing which coins are
  not fair and their outcomes is more information (the release is their
  sum plus the rest), and it has the same law under both neighbours, so the
  divergence is at most that of the pair mixed over
  J ~ Bin(n - 1, 1 - 2 theta) fair coins, J revealed:
  exp((alpha - 1) D) <= sum_J P(J) exp((alpha - 1) D_J), D_J between
  Ber(1/2 + u) + Bin(J, 1/2) and Ber(1/2 + v) + Bin(J, 1/2). No worst case
  over the q's is needed, and all n - 1 others stay (about twice the
  variance of Lemma 2's n' others when theta is small). The pairs (u, v) of
  shift s and their ends are as in `_shift_families` (each g_J is convex
  along the segment, so is the mixture; the channel of step 4 acts on the
  target only, so f is non-decreasing).
  """
  lattice = _fair_coin_lattice(theta, num_clients)
  s_max = theta if relation == _ZERO_OUT else 2.0 * theta
  families = _shift_families(theta, relation)
  if relation == _ZERO_OUT:
    families = families[::2]  # the fair coins are symmetric: +-s alike
  grid = _shift_grid(s_max, L2_REVEAL_UNIFORM_POINTS, 4)
  values = np.zeros((grid.size, orders.size))
  for i, s in enumerate(grid):
    for u0, du, v0, dv in families:
      values[i] = np.maximum(
          values[i],
          _lattice_divergence(u0 + du * s, v0 + dv * s, orders, lattice))

  def curvature(j):
    return functools.reduce(np.maximum, [
        _lattice_curvature(family, grid[j], orders, lattice)
        for family in families
    ])

  return _certified_sup(grid, values, curvature)


@functools.lru_cache(maxsize=256)
def _kappa(theta, num_clients, orders, relation):
  orders = np.asarray(orders)
  best = _kappa_dropped(theta, num_clients, orders, relation)
  if num_clients <= L2_REVEAL_MAX_CLIENTS and theta >= L2_REVEAL_MIN_THETA:
    small = orders <= L2_REVEAL_MAX_ORDER
    best[small] = np.minimum(
        best[small], _kappa_revealed(theta, num_clients, orders[small],
                                     relation))
  return tuple(best * (1.0 + L2_FLOAT_MARGIN))


def theta_grid_point(theta: float) -> float:
  """The smallest 2^(j / L2_THETA_STEPS) >= theta (integer j), at most 1/4.

  kappa is computed at this theta' >= theta (and cached): the worst case it
  bounds, over the other clients' probabilities in [1/2 - theta,
  1/2 + theta] and target pairs of shift s in [-theta, theta], can only
  grow with theta (the sets grow), so kappa(theta') bounds it for theta too
  (with the sup over s <= s_max(theta') >= s_max(theta)).
  """
  theta = float(theta)
  point = min(
      0.25,
      2.0**(math.ceil(L2_THETA_STEPS * math.log2(theta)) / L2_THETA_STEPS))
  while point < theta:  # log2 rounding
    point = min(0.25, point * 2.0**(1.0 / L2_THETA_STEPS))
  return point


def kappa(theta: float,
          num_clients: int,
          orders: Sequence[float],
          relation: str = 'zero_out') -> np.ndarray:
  """kappa_alpha >= sup over 0 < s <= s_max of f_alpha(s) / s^2, per order.

  f_alpha(s) bounds the one-trial divergence of one coordinate whose
  target probability moves by s (all other clients at their worst); s_max
  = theta for 'zero_out', 2 theta for 'replace_one'. Certified, not
  sampled: see `l2_rdp`. Computed at `theta_grid_point(theta)` and cached
  per (that theta, clients, orders, relation).
  """
  theta = checks.real(theta, 'theta', 0.0, MAX_THETA, low_open=True)
  num_clients = checks.integer(num_clients, 'num_clients', 1)
  relation = events.as_relation(relation)
  orders = check_orders(orders)
  return np.asarray(
      _kappa(theta_grid_point(theta), min(int(num_clients), MAX_EXACT_CLIENTS),
             tuple(orders.tolist()), relation))


def l2_rdp(
    event: events.PoissonBinomialDpEvent,
    orders: Sequence[float],
    relation: str = 'zero_out',
) -> np.ndarray:
  """The l2-aware RDP curve of one cPBM release (inf without `l2_bound`).

    eps(alpha) <= m kappa_alpha theta^2 L^2          ('zero_out')
    eps(alpha) <= m kappa_alpha theta^2 (2 L)^2      ('replace_one')

  with L = `event.l2_bound` and kappa_alpha from `kappa` (s_max = theta,
  resp. 2 theta).

  Derivation. A client with Bernoulli probabilities 1/2 + u_k (k = 1..D,
  |u_k| <= theta) is neighbour to one with 1/2 + v_k: v = 0 for zero-out,
  v from another input for replace-one. The event promises
  ||u||_2 <= theta L (for the mechanism: u_k = theta y_k / B up to
  rounding, ||y||_2 <= C, L = C / B with a rounding margin; see
  `tff_ddp.mechanisms.poisson_binomial.PoissonBinomial.dp_event`), so
  sum_k s_k^2 <= theta^2 L^2 for zero-out and <= theta^2 (2 L)^2 for
  replace-one, where s_k = |u_k - v_k| <= s_max.

  1. Given every client's vector, the D coordinates are independent and a Renyi
     divergence of a product is the sum of the coordinates' divergences; each
     coordinate's m trials released one by one are more revealing (step 1 of the
     reduction in docs/notes/cpbm_accounting.md). So the round costs at most
     m sum_k F(u_k, v_k), F the one-trial divergence (either direction) of the
     sum over clients of one Bernoulli each, worst case over the other
     clients' probabilities in [1/2 - theta, 1/2 + theta].
  2. The other clients, as for Lemma 2 (docs/notes/cpbm_accounting.md, the
     reduction's step 2): each other probability is a mixture of the extremes
     and exp((alpha - 1) D_alpha) is jointly convex, so the others sit at the
     extremes; the bit flip Z -> n - Z maps (u, v, others) to (-u, -v, flipped
     others), so we may take the majority at 1/2 + theta, and dropping the
     minority is post-processing: F(u, v) <= D_alpha(P_u || P_v),
     P_u = Ber(1/2 + u) + Bin(n', 1/2 + theta), over the pairs (u, v) and
     (-u, -v).
     Second reduction (`_kappa_revealed`, up to L2_REVEAL_MAX_CLIENTS
     clients, orders up to L2_REVEAL_MAX_ORDER, theta at least
     L2_REVEAL_MIN_THETA): each other Bernoulli is
     a fair coin with probability 1 - 2 theta, else a Ber(r) coin; revealing
     the unfair coins gives F(u, v) <= the divergence of the pair mixed over
     J ~ Bin(n - 1, 1 - 2 theta) fair coins, J revealed. It keeps all n - 1
     others (about half the kappa of the first for small theta); each
     reduction gives its own certified kappa, and the smaller is used.
  3. f(s) := sup over the allowed pairs with |u - v| = s (zero-out: (0,
     +-s) and (+-s, 0); replace-one: any u, v in [-theta, theta]). For
     replace-one the sup is at the ends of the segment: P_u is affine in u,
     so exp((alpha - 1) D_alpha(P_u || P_{u+s})) is convex in u along the
     segment u in [-theta, theta - s], and its max is at u = -theta or
     theta - s (`_shift_families`). Either way f(s) is computed exactly
     from the PMFs at any s (for the second reduction: the mixture of the
     exact PMFs over the fair-coin counts, the counts below the e^-100
     quantile bounded by their mass times 3^(alpha - 1)).
  4. f is non-decreasing in s. Let [a, b] be inside [a', b'] (offsets).
     The channel "keep the target's Bernoulli with probability lambda,
     else replace it by a fresh Ber(1/2 + c)" maps Ber(1/2 + x) to
     Ber(1/2 + c + lambda (x - c)); with lambda = (b - a) / (b' - a') it
     maps a' to a and b' to b for the c that this affine contraction
     fixes, which lies in [a', b'] (it maps [a', b'] into itself), so
     1/2 + c is a probability. It acts on the target's Bernoulli only, so
     it maps the pair (P_a', P_b') to (P_a, P_b), and post-processing
     cannot raise a divergence. Every allowed pair of shift s lies inside
     an allowed pair of shift s' > s (zero-out: contract towards c = 0, the
     pair (0, +-s) inside (0, +-s'); replace-one: widen the segment within
     [-theta, theta]).
  5. kappa_alpha >= sup_{0 < s <= s_max} f(s) / s^2, certified on a grid
     s_J < ... < s_N = s_max: on [s_i, s_{i+1}], f(s) / s^2 <=
     f(s_{i+1}) / s_i^2 (step 4); on (0, s_J], the curvature bound of
     `_curvature_bound` (g = exp((alpha - 1) D) has g(0) = 1, g'(0) = 0,
     and a certified sup of g'' on [0, s_J]). kappa is the smallest over J
     of the larger of the two, times 1 + L2_FLOAT_MARGIN for rounding; grid
     points below L2_MIN_GRID_SHIFT are not used (there f(s) itself is a
     difference of nearly equal numbers; the curvature bound is a sum of
     positive terms and covers them).
  6. So the round costs at most m sum_k f(s_k) <= m kappa sum_k s_k^2
     <= m kappa theta^2 L^2 (zero-out), m kappa theta^2 4 L^2
     (replace-one).
  7. kappa is computed at theta' = `theta_grid_point(theta)` >= theta: the
     worst case F over others in [1/2 - theta, 1/2 + theta] (and, for
     replace-one, pairs in [-theta, theta]) only grows with theta, and
     s_max(theta') >= s_max(theta), so kappa(theta') bounds it; theta^2 in
     step 6 stays the event's own.

  Tightness: for zero-out the bound is close to the truth when one
  coordinate carries the whole budget (y on an axis: m f(theta) if
  f(s)/s^2 peaks at theta), and loose for a spread-out y only by the growth
  of f(s)/s^2 in s (Gaussian regime: f(s) ~ alpha s^2 / (2 Var), kappa
  nearly constant). For replace-one the endpoints matter, not only the
  shift: kappa is set by short shifts next to the edge of [-theta, theta]
  (where a Bernoulli is most sensitive) and charged to every shift, so the
  axis pair y -> -y is over-counted (1.1-1.8x at small orders in the
  brute-force tests).

  Args:
    event: the release; `event.l2_bound` None means no l2 promise (inf).
    orders: the orders alpha > 1.
    relation: 'zero_out' or 'replace_one'.
  """
  check_event(event)
  relation = events.as_relation(relation)
  orders = check_orders(orders)
  bound = event.l2_bound
  if bound is None or math.isinf(float(bound)):
    return np.full(orders.shape, np.inf)
  budget = float(bound)**2 * (4.0 if relation == _REPLACE_ONE else 1.0)
  theta = float(event.theta)
  return (float(event.num_trials) * theta * theta * budget *
          kappa(theta, int(event.num_clients), orders, relation))
