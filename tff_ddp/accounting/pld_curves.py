"""Hockey-stick curves of this library's releases, and pessimistic PLDs.

Upper bounds U(eps) >= H(eps) on the hockey-stick curve of each release's
worst pair, per direction ('remove', 'add'), as `Curve`s: exact pairs
(`Family`, `Gaussian`), sampling (`KnownSample`, `Amplified`),
composed PLDs (`PldCurve`); `to_pld` turns one into a dp-accounting PLD that
can only overstate delta: the lower convex hull in e^eps, then the
pessimistic "connect the dots" PLD of Doroshenko, Ghazi, Kamath, Kumar &
Manurangsi (2022, arXiv:2207.04380), Algorithm 1. Dominance of pairs: Zhu,
Dong & Wang 2022, "Optimal accounting of differential privacy via
characteristic function", AISTATS, Sec. 2.1 and Thm 10.

Why each step only overstates delta: docs/notes/pld_accountant.md.
"""

import abc
import math
from typing import Tuple

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

# Added to every curve (absolute): covers the float rounding of the
# cumulative sums behind H (each below 1e-15 of a mass <= 1); it becomes
# infinity mass, 1e-15 per release.
FLOAT_SLACK = 1e-15
# Points whose P-mass is below this do not set the grid's range (their
# mass is still in the curve: above the range it becomes infinity mass,
# below it is rounded up to the range's first point).
_RANGE_MASS = 1e-30
# Widest loss range of a grid (in nats); ranges are clipped to it.
_MAX_RANGE = 80.0
# Largest loss of a grid point (e^eps stays finite in float64).
_MAX_LOSS = 600.0
# A release whose curve stays above this at every eps is reported as
# infinite epsilon (true for every delta below it; pessimistic above).
SATURATED = 0.5
# Vectorized passes of `convex_minorant` before its one-pass fallback.
_HULL_PASSES = 64


class Saturated(ValueError):
  """The release's delta exceeds SATURATED at every epsilon."""


PldPair = Tuple[pld_lib.PrivacyLossDistribution,
                pld_lib.PrivacyLossDistribution]


def hockey_stick(log_p: np.ndarray, log_q: np.ndarray,
                 epsilons: np.ndarray) -> np.ndarray:
  """H_eps(P || Q) = sum (P - e^eps Q)_+ at each eps, exactly.

  With l = log(P/Q) (+inf where Q = 0 < P): H = P(l > eps) - e^eps
  Q(l > eps), both sums over the points sorted by loss, accumulated from
  the largest loss down (the small tail masses are added first).
  """
  log_p = np.asarray(log_p, np.float64)
  log_q = np.asarray(log_q, np.float64)
  eps = np.asarray(epsilons, np.float64)
  keep = np.isfinite(log_p)
  log_p, log_q = log_p[keep], log_q[keep]
  with np.errstate(invalid='ignore'):
    loss = np.where(np.isfinite(log_q), log_p - log_q, np.inf)
  order = np.argsort(-loss, kind='stable')
  loss = loss[order]
  cp = np.cumsum(np.exp(log_p[order]))
  cq = np.cumsum(np.exp(np.where(np.isfinite(log_q), log_q, -np.inf)[order]))
  count = np.searchsorted(-loss, -eps, side='left')  # losses > eps
  mp = np.where(count > 0, cp[np.maximum(count - 1, 0)], 0.0)
  mq = np.where(count > 0, cq[np.maximum(count - 1, 0)], 0.0)
  with np.errstate(over='ignore', invalid='ignore'):
    h = mp - np.where(mq > 0, np.exp(eps + np.log(np.maximum(mq, 1e-320))), 0.0)
  return np.clip(h, 0.0, 1.0)


def hockey_stick_rows(log_p: np.ndarray, log_q: np.ndarray,
                      epsilons: np.ndarray) -> np.ndarray:
  """`hockey_stick` of every row pair of two [F, S] arrays: [F, len(eps)].

  The rows' losses are sorted within each row and shifted by a per-row
  offset larger than any finite loss range, so that one `searchsorted` on
  the flattened array counts, for each row and eps, the losses above eps.
  """
  log_p = np.atleast_2d(np.asarray(log_p, np.float64))
  log_q = np.atleast_2d(np.asarray(log_q, np.float64))
  eps = np.asarray(epsilons, np.float64)
  rows, size = log_p.shape
  with np.errstate(invalid='ignore'):
    loss = np.where(np.isfinite(log_p),
                    np.where(np.isfinite(log_q), log_p - log_q, np.inf),
                    -np.inf)
  order = np.argsort(-loss, axis=1, kind='stable')
  loss = np.take_along_axis(loss, order, axis=1)
  cp = np.cumsum(np.exp(np.take_along_axis(log_p, order, axis=1)), axis=1)
  cq = np.cumsum(np.exp(np.take_along_axis(log_q, order, axis=1)), axis=1)
  # -loss ascending per row, infinite ones just outside a band wider than
  # every finite loss and eps, rows stacked apart: one searchsorted.
  finite = np.abs(loss[np.isfinite(loss)])
  span = max(
      float(finite.max()) if finite.size else 0.0,
      float(np.abs(eps).max()) if eps.size else 0.0) + 1.0
  offsets = (2.0 * span + 2.0) * np.arange(rows)[:, None]
  band = np.clip(-loss, -span - 0.5, span + 0.5) + offsets
  targets = -eps[None, :] + offsets
  count = (np.searchsorted(band.ravel(), targets.ravel(), side='left').reshape(
      rows, -1) - size * np.arange(rows)[:, None])
  idx = np.maximum(count - 1, 0)
  mp = np.where(count > 0, np.take_along_axis(cp, idx, axis=1), 0.0)
  mq = np.where(count > 0, np.take_along_axis(cq, idx, axis=1), 0.0)
  with np.errstate(over='ignore', invalid='ignore', divide='ignore'):
    h = mp - np.where(mq > 0, np.exp(eps[None, :] + np.log(mq)), 0.0)
  return np.clip(h, 0.0, 1.0)


def loss_range(log_p: np.ndarray, log_q: np.ndarray) -> Tuple[float, float]:
  """(least, largest) finite loss log(P/Q) at points with P >= 1e-30."""
  keep = np.isfinite(log_p) & np.isfinite(log_q) & (log_p
                                                    >= math.log(_RANGE_MASS))
  if not np.any(keep):
    return 0.0, 0.0
  loss = log_p[keep] - log_q[keep]
  return float(loss.min()), float(loss.max())


class Curve(abc.ABC):
  """Upper bounds on the hockey-stick curves of a release's worst pair."""

  @abc.abstractmethod
  def remove(self, eps: np.ndarray) -> np.ndarray:
    """U(eps) >= H_eps(P || Q), P with the client's value."""

  @abc.abstractmethod
  def add(self, eps: np.ndarray) -> np.ndarray:
    """U(eps) >= H_eps(Q || P)."""

  @property
  @abc.abstractmethod
  def ranges(self) -> Tuple[Tuple[float, float], Tuple[float, float]]:
    """((lo, hi) remove, (lo, hi) add): where the losses of each direction
    carry mass; outside, `to_pld` rounds losses up (pessimistic)."""

  @property
  def symmetric(self) -> bool:
    """True if add == remove at every eps."""
    return False


class Family(Curve):
  """The pointwise maximum over explicit pairs, with certified PMF errors.

  Args:
    pairs: [(log P, log Q)] on common supports (one pair per admissible
      input; the maximum of their curves bounds every mixture of them by
      joint convexity of H).
    log_hi, log_lo: log c_hi, log c_lo (the computed PMFs' pointwise error
      factors: P <= c_hi P_c + D, Q >= c_lo Q_c; docs/notes/pld_accountant.md,
      "Exact pairs").
    missing: m, mass the computed P may miss.
    symmetric: the pairs' add curves equal their remove curves (e.g. a
      shift of a symmetric law).
  """

  def __init__(self,
               pairs,
               log_hi: float = 0.0,
               log_lo: float = 0.0,
               missing: float = 0.0,
               symmetric: bool = False):
    self._pairs = [
        (np.asarray(p, np.float64), np.asarray(q, np.float64)) for p, q in pairs
    ]
    self._log_hi = float(log_hi)
    self._shift = float(log_lo) - float(log_hi)
    self._missing = float(missing)
    self._symmetric = bool(symmetric)
    rem = [loss_range(p, q) for p, q in self._pairs]
    add = [loss_range(q, p) for p, q in self._pairs]
    pad = abs(self._shift)
    self._ranges = ((min(r[0] for r in rem) - pad,
                     max(r[1] for r in rem) + pad),
                    (min(r[0] for r in add) - pad,
                     max(r[1] for r in add) + pad))

  def _curve(self, eps, flip):
    eps = np.asarray(eps, np.float64)
    out = np.zeros(eps.shape)
    shapes = {p.shape for p, _ in self._pairs}
    if len(self._pairs) > 1 and len(shapes) == 1:
      ps = np.stack([p for p, _ in self._pairs])
      qs = np.stack([q for _, q in self._pairs])
      a, b = (qs, ps) if flip else (ps, qs)
      block = max(1, (1 << 24) // max(1, a.shape[1] + eps.size))
      for start in range(0, a.shape[0], block):
        out = np.maximum(
            out,
            hockey_stick_rows(a[start:start + block], b[start:start + block],
                              eps + self._shift).max(axis=0))
    else:
      for p, q in self._pairs:
        a, b = (q, p) if flip else (p, q)
        out = np.maximum(out, hockey_stick(a, b, eps + self._shift))
    return np.minimum(
        1.0,
        math.exp(self._log_hi) * out + self._missing + FLOAT_SLACK)

  def remove(self, eps):
    return self._curve(eps, False)

  def add(self, eps):
    if self._symmetric:
      return self._curve(eps, False)
    return self._curve(eps, True)

  @property
  def ranges(self):
    return self._ranges

  @property
  def symmetric(self):
    return self._symmetric


class Gaussian(Curve):
  """The Gaussian mechanism with l2 sensitivity over noise stddev mu:
  H(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), both directions
  (Balle & Wang 2018, "Improving the Gaussian mechanism for differential
  privacy", Thm 8)."""

  def __init__(self, mu: float):
    self._mu = float(mu)

  def remove(self, eps):
    eps = np.asarray(eps, np.float64)
    mu = self._mu
    first = special.ndtr(mu / 2.0 - eps / mu)
    with np.errstate(over='ignore'):
      second = np.exp(eps + special.log_ndtr(-mu / 2.0 - eps / mu))
    return np.clip(first - second + FLOAT_SLACK, 0.0, 1.0)

  add = remove

  @property
  def ranges(self):
    mu = self._mu
    r = (mu * mu / 2.0 - 14.0 * mu, mu * mu / 2.0 + 14.0 * mu)
    return r, r

  @property
  def symmetric(self):
    return True


def _add_range(lo_hi, transform):
  lo, hi = lo_hi
  a, b = transform(lo), transform(hi)
  return min(a, b), max(a, b)


class KnownSample(Curve):
  """The round's sample seen by the adversary: with probability 1 - q the
  client is out and both outputs have one law, else the inner pair.
  Exactly H = (1 - q)(1 - e^eps)_+ + q H_inner(eps), each direction (the
  joint law of (in sample?, output) has disjoint parts)."""

  def __init__(self, inner: Curve, q: float):
    self._inner, self._q = inner, float(q)

  def _mix(self, eps, inner):
    eps = np.asarray(eps, np.float64)
    return np.minimum(1.0, (1.0 - self._q) * np.maximum(0.0, -np.expm1(eps)) +
                      self._q * inner(eps))

  def remove(self, eps):
    return self._mix(eps, self._inner.remove)

  def add(self, eps):
    return self._mix(eps, self._inner.add)

  @property
  def ranges(self):
    (a, b), (c, d) = self._inner.ranges
    return (min(a, 0.0), max(b, 0.0)), (min(c, 0.0), max(d, 0.0))

  @property
  def symmetric(self):
    return self._inner.symmetric


class Amplified(Curve):
  """The pair ((1 - q) Q + q P, Q) for every inner pair (P, Q).

  remove: H_g((1-q)Q + qP || Q) = 1 - g for g <= 1 - q, else
  q H_{(g - 1 + q)/q}(P || Q); add: H_g(Q || (1-q)Q + qP) = 0 for
  g (1 - q) >= 1, else (1 - g(1 - q)) H_{g q / (1 - g(1 - q))}(Q || P)
  (g = e^eps; both by expanding the positive part). Each is non-decreasing
  in the inner curve at one point, so the maximum over inner pairs commutes
  with it and an upper bound on the inner curve gives one here.
  """

  def __init__(self, inner: Curve, q: float):
    self._inner, self._q = inner, float(q)

  def remove(self, eps):
    eps = np.asarray(eps, np.float64)
    q = self._q
    g = np.exp(eps)
    high = g > 1.0 - q
    out = np.maximum(0.0, 1.0 - g)
    if np.any(high):
      inner_eps = np.log((g[high] - 1.0 + q) / q)
      out[high] = q * self._inner.remove(inner_eps)
    return np.minimum(out, 1.0)

  def add(self, eps):
    eps = np.asarray(eps, np.float64)
    q = self._q
    g = np.exp(eps)
    rest = 1.0 - g * (1.0 - q)
    low = rest > 0
    out = np.zeros(eps.shape)
    if np.any(low):
      inner_eps = np.log(g[low] * q / rest[low])
      out[low] = rest[low] * self._inner.add(inner_eps)
    return np.minimum(out, 1.0)

  @property
  def ranges(self):
    q = self._q
    rem, add = self._inner.ranges
    # remove loss log(1 - q + q e^l); add loss -log(1 - q + q e^{-l'}).
    f = lambda l: math.log1p(q * math.expm1(min(l, 700.0)))
    g = lambda l: -math.log1p(q * math.expm1(min(-l, 700.0)))
    return _add_range(rem, f), _add_range(add, g)


class PldCurve(Curve):
  """The curves of composed dp-accounting PLDs (one per direction)."""

  def __init__(self, plds: PldPair, symmetric: bool):
    self._remove, self._add = plds
    self._symmetric = symmetric
    hi_r = self._upper(self._remove)
    hi_a = hi_r if symmetric else self._upper(self._add)
    # P(loss < -t) <= e^{-t} Q(loss < -t), and Q(loss < -t) is the add
    # direction's mass above t: the remove losses below -hi_add carry at
    # most the add curve's tail, which beyond hi_add is within 1e-18 of
    # its infinity mass (`_upper`).
    self._ranges = ((-hi_a, hi_r), (-hi_r, hi_a))

  @staticmethod
  def _upper(pld) -> float:
    """Least eps (to 1e-2) where the curve is within 1e-18 of its value at
    eps = 500 (the infinity mass)."""
    floor = float(pld.get_delta_for_epsilon(500.0))
    lo, hi = 0.0, 1.0
    while float(pld.get_delta_for_epsilon(hi)) > floor + 1e-18 and hi < 500:
      lo, hi = hi, hi * 2.0
    while hi - lo > 1e-2:
      mid = 0.5 * (lo + hi)
      if float(pld.get_delta_for_epsilon(mid)) > floor + 1e-18:
        lo = mid
      else:
        hi = mid
    return hi

  def remove(self, eps):
    return np.asarray(
        self._remove.get_delta_for_epsilon(np.asarray(eps, np.float64)),
        np.float64)

  def add(self, eps):
    return np.asarray(
        self._add.get_delta_for_epsilon(np.asarray(eps, np.float64)),
        np.float64)

  @property
  def ranges(self):
    return self._ranges

  @property
  def symmetric(self):
    return self._symmetric


def convex_minorant(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Indices of the lower convex hull of the points (x, y), x increasing.

  A point not strictly below the chord of its neighbours is never a hull
  vertex: each numpy pass drops all such points; when one drops none, the
  polyline is convex: the hull. After _HULL_PASSES passes, Andrew's
  monotone chain (Andrew 1979) finishes on what is left. A point dropped
  by float rounding only raises the interpolated curve: pessimistic.
  """
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  idx = np.arange(x.size)
  for _ in range(_HULL_PASSES):
    if idx.size < 3:
      return idx
    ax, bx, px = x[idx[:-2]], x[idx[1:-1]], x[idx[2:]]
    ay, by, py = y[idx[:-2]], y[idx[1:-1]], y[idx[2:]]
    drop = (by - ay) * (px - ax) >= (py - ay) * (bx - ax)
    if not drop.any():
      return idx
    idx = idx[np.concatenate([[True], ~drop, [True]])]
  return idx[_monotone_chain(x[idx].tolist(), y[idx].tolist())]


def _monotone_chain(xs: list, ys: list) -> np.ndarray:
  """The lower hull's indices in one pass (`convex_minorant`'s drop rule)."""
  hx: list[float] = []
  hy: list[float] = []
  idx: list[int] = []
  for i, (px, py) in enumerate(zip(xs, ys)):
    while len(idx) >= 2:
      ax, ay, bx, by = hx[-2], hy[-2], hx[-1], hy[-1]
      if (by - ay) * (px - ax) >= (py - ay) * (bx - ax):
        hx.pop()
        hy.pop()
        idx.pop()
      else:
        break
    hx.append(px)
    hy.append(py)
    idx.append(i)
  return np.asarray(idx, np.int64)


def direction_pmf(curve_fn, lo: float, hi: float, interval: float):
  """The pessimistic connect-the-dots PLD PMF of one direction.

  `curve_fn(eps)` >= H(eps); the grid is k h for ceil(lo/h) - 1 <= k <=
  floor(hi/h) + 1. As in docs/notes/pld_accountant.md, `to_pld`:
  non-increasing, hull with the point (gamma = 0, H = 1), Algorithm 1 of
  Doroshenko et al. on the vertices.
  """
  # Losses above _MAX_LOSS become infinity mass (U there is at most the
  # curve's value at the grid's end), and the grid spans at most _MAX_RANGE
  # below its top (lower losses are rounded up): both pessimistic.
  hi = min(float(hi), _MAX_LOSS)
  lo = min(max(float(lo), hi - _MAX_RANGE), hi)
  if not hi > lo:
    lo = hi - interval
  k = np.arange(math.floor(lo / interval) - 1,
                math.ceil(hi / interval) + 2,
                dtype=np.int64)
  eps = k * interval
  u = np.minimum.accumulate(
      np.clip(np.asarray(curve_fn(eps), np.float64), 0.0, 1.0))
  if u[-1] > SATURATED:
    raise Saturated(f'delta >= {u[-1]:.3g} at every epsilon')
  gamma = np.exp(eps)
  x = np.concatenate([[0.0], gamma])
  y = np.concatenate([[1.0], u])
  vertices = convex_minorant(x, y)[1:] - 1  # without the gamma = 0 point
  return pld_pmf.create_pmf_pessimistic_connect_dots(interval, k[vertices],
                                                     u[vertices])


def to_pld(curve: Curve, interval: float) -> PldPair:
  """(remove PLD, add PLD) whose curves are >= `curve`'s at every eps."""
  rem_range, add_range = curve.ranges
  remove = pld_lib.PrivacyLossDistribution(
      direction_pmf(curve.remove, *rem_range, interval))
  if curve.symmetric:
    return remove, remove
  add = pld_lib.PrivacyLossDistribution(
      direction_pmf(curve.add, *add_range, interval))
  return remove, add


def log_normalize(log_w: np.ndarray) -> np.ndarray:
  return log_w - special.logsumexp(log_w)


def shift_pair(log_f: np.ndarray, shift: int):
  """(log P, log Q) = (f(. - shift), f) on the union of their supports."""
  pad = np.full(shift, -np.inf)
  return (np.concatenate([pad, log_f]), np.concatenate([log_f, pad]))
