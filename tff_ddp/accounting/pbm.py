"""Privacy of the clipped Poisson binomial mechanism (cPBM) sum.

Chen et al., "Federated frequency estimation" (``shared/papers/
federated-frequency-estimation-cpbm.txt``), Lemma 2 and its proof in App. C.2.

The reduction of Lemma 2, spelled out (it is the part the paper leaves to
Lemma 3.6 of Chen et al. 2022, "The Poisson binomial mechanism"):

1. Per coordinate, the sum over clients of Binomial(m, p_i) is the sum over
   the m trials of independent Poisson binomials, each with one Bernoulli
   per client. Releasing the m partial sums separately is at least as
   revealing, so the RDP is m times that of one trial, and d times that for d
   independent coordinates (the factor m d of Lemma 2).
2. One trial: the target client's Bernoulli(a) moves to Bernoulli(b), the
   others' Bernoullis X are fixed. Every Bernoulli(p) with p in
   [1/2 - theta, 1/2 + theta] is a mixture of the two extreme ones, and
   exp((alpha - 1) D_alpha) is jointly convex, so the worst case has the
   target at the extremes (a, b) = (1/2 -+ theta, 1/2 +- theta) -- which also
   bounds zero-out (b = 1/2) and any replace-one pair -- and the others at
   the extremes too, k of them at 1/2 + theta and n - 1 - k at 1/2 - theta.
   Flipping every bit (Z -> n - Z) swaps the signs, so some sign is held by
   at least n' = ceil((n - 1)/2) of the others; dropping the rest only adds
   information (adding independent noise is post-processing), so
3. with p = 1/2 + theta, the per-trial divergence is at most the larger of
     D_alpha(Ber(1 - p) + Bin(n', p) || Bin(n' + 1, p))       (Pi_1 of Lemma 2)
     D_alpha(Bin(n' + 1, p) || Ber(1 - p) + Bin(n', p))       (Pi_2, flipped).

We compute those two divergences *exactly* from the PMFs (log space,
`scipy.special.gammaln`), for integer and fractional orders alike, rather than
from the printed Pi_1, Pi_2: Pi_1 agrees with the PMF computation (tested),
while the printed Pi_2 differs between the main text and App. C.2 (a missing
factor 1/2 + theta and swapped mu_m terms). The result is an upper bound on the
divergence of the actual sums of n m Bernoullis; the tests check it against
brute force over small grids of datasets.

Neighbouring relation: zero-out, and by step 2 also replace-one.
"""

import math
from typing import Sequence

import numpy as np
from scipy import special

from tff_ddp.accounting import events

# Evaluate the divergence matrix in blocks of at most this many entries.
_BLOCK_ENTRIES = 1 << 22


def _validate(event: events.PoissonBinomialDpEvent):
  if not isinstance(event, events.PoissonBinomialDpEvent):
    raise TypeError(
        f'Expected a PoissonBinomialDpEvent, got {type(event).__name__}.')
  theta = event.theta
  if theta is None or not 0.0 < theta <= 0.25:
    raise ValueError(f'theta must be in (0, 1/4], got {theta}.')
  for name in ('num_trials', 'num_clients', 'dimension'):
    value = getattr(event, name)
    if int(value) != value or value < 1:
      raise ValueError(f'{name} must be an integer >= 1, got {value}.')


def log_binomial_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
  """log Bin(k; n, p) for integer k (-inf outside 0..n), exact via gammaln."""
  k = np.asarray(k, dtype=np.float64)
  inside = (k >= 0) & (k <= n)
  kk = np.where(inside, k, 0.0)
  logpmf = (special.gammaln(n + 1.0) - special.gammaln(kk + 1.0)
            - special.gammaln(n - kk + 1.0)
            + kk * math.log(p) + (n - kk) * math.log1p(-p))
  return np.where(inside, logpmf, -np.inf)


def renyi_divergence(
    log_p: np.ndarray, log_q: np.ndarray, orders: Sequence[float]
) -> np.ndarray:
  """D_alpha(P || Q) of two PMFs on a common finite support, alpha > 1.

    D_alpha = log(sum_x P(x)^alpha Q(x)^(1 - alpha)) / (alpha - 1).

  Stable for tiny divergences: with r = log(P/Q), the sum minus one equals
  sum_x Q(x) [expm1(alpha r) - alpha expm1(r)] (the subtracted part sums to
  zero), whose terms are all >= 0, so log1p of it loses no digits. Where that
  overflows we fall back to a plain logsumexp.

  Args:
    log_p: log P(x) over the support; -inf allowed where P(x) = 0.
    log_q: log Q(x), same shape. Where Q(x) = 0 < P(x) the result is inf.
    orders: the orders alpha > 1.

  Returns:
    Array of D_alpha, one per order.
  """
  log_p = np.asarray(log_p, dtype=np.float64)
  log_q = np.asarray(log_q, dtype=np.float64)
  orders = np.asarray(orders, dtype=np.float64)
  if np.any(orders <= 1.0):
    raise ValueError(f'orders must be > 1, got {orders.min()}.')
  if np.any(np.isneginf(log_q) & np.isfinite(log_p)):
    return np.full(orders.shape, np.inf)
  keep = np.isfinite(log_q)
  log_p, log_q = log_p[keep], log_q[keep]
  r = np.where(np.isfinite(log_p), log_p - log_q, -np.inf)
  q = np.exp(log_q)
  out = np.empty(orders.shape)
  block = max(1, _BLOCK_ENTRIES // max(1, r.size))
  for start in range(0, orders.size, block):
    a = orders[start:start + block, None]
    with np.errstate(over='ignore', invalid='ignore'):
      excess = np.sum(q * (np.expm1(a * r) - a * np.expm1(r)), axis=1)
      stable = np.log1p(np.maximum(excess, 0.0))
      plain = special.logsumexp(log_q + a * r, axis=1)
    cgf = np.where(np.isfinite(stable) & (stable < 1.0), stable, plain)
    out[start:start + block] = np.maximum(cgf, 0.0) / (a[:, 0] - 1.0)
  return out


def worst_case_pair(theta: float, num_clients: int):
  """log PMFs (P, Q) of the one-trial worst case of Lemma 2 (term Pi_1).

  P = Ber(1/2 - theta) + Bin(n', 1/2 + theta), Q = Bin(n' + 1, 1/2 + theta),
  n' = ceil((n - 1)/2), on the support 0..n' + 1. The other term of Lemma 2
  is D(Q || P) by the bit-flip symmetry (module docstring).
  """
  n_prime = (num_clients - 1 + 1) // 2  # ceil((n - 1) / 2)
  p = 0.5 + theta
  k = np.arange(n_prime + 2)
  log_q = log_binomial_pmf(k, n_prime + 1, p)
  log_p = np.logaddexp(
      math.log1p(-p) + log_binomial_pmf(k - 1, n_prime, p),
      math.log(p) + log_binomial_pmf(k, n_prime, p))
  return log_p, log_q


def per_trial_rdp(
    theta: float, num_clients: int, orders: Sequence[float]
) -> np.ndarray:
  """max of the two one-trial divergences of Lemma 2, per order."""
  log_p, log_q = worst_case_pair(theta, num_clients)
  return np.maximum(renyi_divergence(log_p, log_q, orders),
                    renyi_divergence(log_q, log_p, orders))


def rdp(
    event: events.PoissonBinomialDpEvent, orders: Sequence[float]
) -> np.ndarray:
  """RDP curve of one cPBM release, Lemma 2: m d times the one-trial bound.

  eps(alpha) = m d max(D_alpha(P || Q), D_alpha(Q || P)) with (P, Q) of
  `worst_case_pair`, computed exactly (see the module docstring for the
  reduction and why it bounds zero-out and replace-one neighbours).
  """
  _validate(event)
  orders = np.asarray(orders, dtype=np.float64)
  return (int(event.num_trials) * int(event.dimension)
          * per_trial_rdp(float(event.theta), int(event.num_clients), orders))
