"""Brute force for neighbouring relations: what one user's change really costs.

A process states its neighbouring relation in user terms ("one user's data
removed") and accounts each release (sub-event) on a curve of the
aggregator's event, usually the zero-out curve. That is right only if,
for every message m a user can send, the pair (m, the message of the same
user without data) is a pair the curve covers. These helpers compute the
truth for small inputs, from the PMFs, so that a test can enumerate the
pairs of a process's actual encoding and assert the accounted curve is
never below it:

* cPBM (`cpbm_pair_rdp`): the exact Renyi divergence between the sums of
  n clients' Binomial(m, p) per coordinate when the target sends one
  message or the other, maximised over the other clients' values on a grid
  (per coordinate: the coordinates are independent, so the divergence of
  the vector is the sum over coordinates, each maximised separately -- an
  upper bound on the worst case over valid messages of the others, hence a
  strict test of the curve).
* Sensitivity-calibrated mechanisms (the DDG, Gaussian): the l2 (and l1)
  distance of every pair (`max_distances`), to compare with the
  sensitivity the accounting uses.

Reusable for any encoder with a "no data" message (e.g. an adaptive-clipping
indicator in {-1/2, +1/2}).
"""

import itertools
from typing import Iterable, Sequence, Tuple

import numpy as np

from tff_ddp.accounting import pbm_rdp

ORDERS = np.array([1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0])


def log_binomial_sum_pmf(probs: Sequence[float], num_trials: int) -> np.ndarray:
  """Exact log PMF of sum_i Binomial(m, probs[i]) on 0..m len(probs)."""
  pmf = np.array([1.0])
  for p in probs:
    pmf = np.convolve(
        pmf,
        np.exp(
            pbm_rdp.log_binomial_pmf(np.arange(num_trials + 1), num_trials, p)))
  with np.errstate(divide='ignore'):
    return np.log(pmf)


def cpbm_probabilities(mechanism, values) -> np.ndarray:
  """The Bernoulli probabilities of a cPBM client sending `values`:
  1/2 + theta v / B clipped to [p_low, p_high], as
  `PoissonBinomial.client_encode` (inputs already within the clip)."""
  values = np.asarray(values, np.float64)
  return np.clip(0.5 + mechanism.theta * values / mechanism.coordinate_bound,
                 mechanism.p_low, mechanism.p_high)


def cpbm_pair_rdp(probs_a,
                  probs_b,
                  num_trials: int,
                  num_clients: int,
                  other_probs: Iterable[float],
                  orders: Sequence[float] = ORDERS) -> np.ndarray:
  """max(D(P||Q), D(Q||P)) of the cPBM sums, exact, per order.

  Args:
    probs_a, probs_b: the target's probabilities per coordinate (its two
      messages, `cpbm_probabilities`), same length D.
    num_trials: m.
    num_clients: n, the target included.
    other_probs: the probabilities the other n - 1 clients may hold in a
      coordinate; every combination is tried, per coordinate.
    orders: the Renyi orders.

  Returns:
    The divergence of the D-coordinate release, per order.
  """
  probs_a = np.asarray(probs_a, np.float64).reshape(-1)
  probs_b = np.asarray(probs_b, np.float64).reshape(-1)
  if probs_a.shape != probs_b.shape:
    raise ValueError(f'the two messages differ in length: {probs_a.shape} '
                     f'and {probs_b.shape}.')
  orders = np.asarray(orders, np.float64)
  others = list(
      itertools.product(sorted(set(other_probs)), repeat=num_clients - 1))
  forward = np.zeros_like(orders)
  backward = np.zeros_like(orders)
  cache = {}
  for a, b in zip(probs_a, probs_b):
    key = (a, b)
    if key not in cache:
      worst_f = np.zeros_like(orders)
      worst_b = np.zeros_like(orders)
      if a != b:
        for rest in others:
          lp = log_binomial_sum_pmf((a,) + rest, num_trials)
          lq = log_binomial_sum_pmf((b,) + rest, num_trials)
          worst_f = np.maximum(worst_f,
                               pbm_rdp.renyi_divergence(lp, lq, orders))
          worst_b = np.maximum(worst_b,
                               pbm_rdp.renyi_divergence(lq, lp, orders))
      cache[key] = (worst_f, worst_b)
    forward = forward + cache[key][0]
    backward = backward + cache[key][1]
  return np.maximum(forward, backward)


def worst_cpbm_rdp(mechanism,
                   messages,
                   neighbour,
                   num_clients: int,
                   orders: Sequence[float] = ORDERS) -> np.ndarray:
  """The worst pair (message, neighbour) over `messages`, exact, per order.

  The other clients hold p_low, p_high or 1/2 (no data) in each coordinate,
  every combination: exp((alpha - 1) D_alpha) is jointly convex and each
  other client's Bernoulli enters both sums alike, so the worst case over
  values in [p_low, p_high] is at the extremes (the argument of
  `tff_ddp.accounting.pbm_rdp`); 1/2 is there for the clients without
  data.
  """
  other = (mechanism.p_low, 0.5, mechanism.p_high)
  probs_b = cpbm_probabilities(mechanism, neighbour)
  worst = np.zeros(len(orders))
  for message in messages:
    worst = np.maximum(
        worst,
        cpbm_pair_rdp(cpbm_probabilities(mechanism, message), probs_b,
                      mechanism.num_trials, num_clients, other, orders))
  return worst


def max_distances(messages, neighbour) -> Tuple[float, float]:
  """(max l1, max l2) of message - neighbour over `messages`."""
  neighbour = np.asarray(neighbour, np.float64).reshape(-1)
  l1 = l2 = 0.0
  for message in messages:
    diff = np.asarray(message, np.float64).reshape(-1) - neighbour
    l1 = max(l1, float(np.abs(diff).sum()))
    l2 = max(l2, float(np.sqrt(diff @ diff)))
  return l1, l2


def assert_covers(curve,
                  brute,
                  what: str = '',
                  orders: Sequence[float] = ORDERS,
                  rtol: float = 1e-9) -> None:
  """AssertionError unless curve >= brute at every order (relative rtol:
  both are float64 sums of logs)."""
  curve = np.asarray(curve, np.float64)
  brute = np.asarray(brute, np.float64)
  short = curve < brute * (1.0 - rtol)
  if np.any(short):
    raise AssertionError(
        f'{what}: the accounted curve is below the brute force at orders '
        f'{np.asarray(orders)[short].tolist()}: curve {curve[short]}, brute '
        f'force {brute[short]}.')


def exceeds(curve, brute, factor: float = 1.0) -> bool:
  """True if brute > factor * curve at some order (the negative cases)."""
  return bool(np.any(np.asarray(brute) > factor * np.asarray(curve)))
