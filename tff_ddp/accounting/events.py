"""DP events of the mechanisms in tff_ddp.

Events describe *what happened* (mechanism and parameters), in the vocabulary of
`dp_accounting.DpEvent`; `tff_ddp.accounting.RdpAccountant` decides what it
costs. Every field is public and plainly typed, so `to_named_tuple()` round
trips and an event can travel inside TFF state and measurements
(`tff_ddp.accounting.event_io`).

Neighbouring relation of the mechanism events: **zero-out** under the
accountant's ADD_OR_REMOVE_ONE and REPLACE_SPECIAL relations (one client's
input is replaced by zeros; the number of clients that add noise,
`num_clients`, is the same on both sides -- the relation of the footnote to
Theorem 5 of Kairouz, Liu & Steinke (2021), "The Distributed Discrete Gaussian
Mechanism for Federated Learning with Secure Aggregation"), and replace-one
under REPLACE_ONE.

Sampling events. dp-accounting's `PoissonSampledDpEvent` and
`SampledWithoutReplacementDpEvent` describe a cohort chosen by the party that
runs the protocol: the clients not chosen do not take part, so the server
knows the sample. `SelfSampledDpEvent` (here) describes the opposite: every
client of the round takes part in the secure sum, and each one decides with a
private coin whether to send its value or zeros -- the sample is hidden from
everyone, the server included. The accountant's `adversary` says what each
sampling event buys (see `tff_ddp.accounting.accountant`).
"""

import enum
from typing import Optional

import attr
import dp_accounting

from tff_ddp.utils import checks

# The largest client count, dimension or trial count an event may carry
# (checked by the curves' `check_event`): far above any real configuration
# (encoders stop at 2^26 coordinates), and the curves' float arithmetic stays
# finite below it.
MAX_EVENT_INTEGER = 2**62


class Relation(enum.StrEnum):
  """The neighbouring relation an RDP curve of these events is for.

  ZERO_OUT: one client's input replaced by zeros, its noise share still in
  the sum; REPLACE_ONE: one client's input replaced by any other. The
  curves (`ddg_rdp`, `skellam_rdp`, `pbm_rdp`) take one, resolved once by
  `as_relation` from its name or dp-accounting's `NeighboringRelation`.
  """

  ZERO_OUT = 'zero_out'
  REPLACE_ONE = 'replace_one'


RELATIONS = tuple(r.value for r in Relation)
# dp-accounting's relations: ADD_OR_REMOVE_ONE and REPLACE_SPECIAL are
# zero-out for distributed noise (the client stays in the sum).
_DP_ACCOUNTING_RELATIONS = {
    dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE: Relation.ZERO_OUT,
    dp_accounting.NeighboringRelation.REPLACE_SPECIAL: Relation.ZERO_OUT,
    dp_accounting.NeighboringRelation.REPLACE_ONE: Relation.REPLACE_ONE,
}


def as_relation(value, name: str = 'relation') -> Relation:
  """`value` (a Relation, 'zero_out' / 'replace_one', or a dp-accounting
  `NeighboringRelation`) as a Relation; ValueError / TypeError naming the
  accepted values otherwise."""
  if isinstance(value, dp_accounting.NeighboringRelation):
    return _DP_ACCOUNTING_RELATIONS[value]
  return checks.member(value, name, Relation)


@attr.s(frozen=True)
class DistributedDiscreteGaussianDpEvent(dp_accounting.DpEvent):
  """One release of a sum of `num_clients` clients' discrete Gaussian noise.

  Each of `num_clients` clients adds independent noise N_Z(0, local_stddev^2)
  to each of `dimension` integer coordinates, and only the (modular) sum is
  revealed. All quantities are in the *scaled integer domain* (after scaling
  by 1/gamma and rounding), as in Theorem 5 of the DDG paper.

  Attributes:
    l2_sensitivity: Bound Delta_2 on the l2 norm of one client's integer
      vector (after conditional randomized rounding), Theorem 5 eq. (3).
    local_stddev: Scale sigma/gamma of each client's discrete Gaussian, in
      integer units. The privacy analysis (Proposition 10) needs it >= 1/2.
    num_clients: Number of clients whose noise is trusted to be in the sum
      (a lower bound on the honest, non-dropped clients).
    dimension: Number of noised integer coordinates.
    l1_sensitivity: Optional bound Delta_1 on the l1 norm of one client's
      integer vector. If None, min(sqrt(d) * Delta_2, Delta_2^2) is used (the
      second holds because |v| <= v^2 for integers); see
      `ddg_rdp.l1_sensitivity`.
    sampler_tv_distance: Optional per-sample total-variation distance of
      the noise sampler from N_Z(0, local_stddev^2) (the alias-table sampler,
      < 2^-231); the accountant adds (1 + e^eps) times it, times the
      num_clients * dimension samples of the release, to delta. None or 0:
      an exact sampler.
    l0_sensitivity: Optional bound k on the number of non-zero coordinates
      of one client's integer vector (an l0 clip): zero-out neighbours
      differ in at most k coordinates, replace-one neighbours in 2k. None:
      any of `dimension`.
    linf_sensitivity: Optional bound on every coordinate of one client's
      integer vector (an l_inf clip with the identity encoder). The privacy
      loss distribution then shifts each moved coordinate by at most
      floor(min(Delta_2, Delta_1, linf_sensitivity)). None: no bound beyond
      Delta_2 and Delta_1.
  """

  l2_sensitivity: float = attr.ib()
  local_stddev: float = attr.ib()
  num_clients: int = attr.ib()
  dimension: int = attr.ib()
  l1_sensitivity: Optional[float] = attr.ib(default=None)
  sampler_tv_distance: Optional[float] = attr.ib(default=None)
  l0_sensitivity: Optional[int] = attr.ib(default=None)
  linf_sensitivity: Optional[float] = attr.ib(default=None)


@attr.s(frozen=True)
class DistributedSkellamDpEvent(dp_accounting.DpEvent):
  """One release of a sum of `num_clients` clients' Skellam noise.

  The distributed Skellam mechanism (Agarwal, Kairouz & Liu, "The Skellam
  Mechanism for Differentially Private Federated Learning", NeurIPS 2021,
  arXiv 2110.04995): each client adds, to each of `dimension` integer
  coordinates, independent symmetric Skellam noise Pois(lambda) -
  Pois(lambda) of variance `local_variance` = 2 lambda; the sum of the
  clients' noise is Skellam of variance num_clients * local_variance. All
  quantities are in the scaled integer domain (after scaling and rounding),
  as for the DDG. TFF's `DistributedDpSumFactory(mechanism=
  'distributed_skellam')` reports them as `scaled_inflated_l2` (l2),
  `scaled_local_stddev`^2 (local_variance) and `padded_dim`.

  Attributes:
    l2_sensitivity: Delta_2, the l2 norm bound of one client's integer
      vector.
    local_variance: the variance of each client's noise per coordinate
      (> 0).
    num_clients: clients whose noise is trusted to be in the sum.
    dimension: number of noised integer coordinates.
    l1_sensitivity: optional Delta_1; None means min(sqrt(d) Delta_2,
      Delta_2^2) (integers: |v| <= v^2), as for the DDG.
    sampler_tv_distance: optional per-sample total-variation distance of
      the noise sampler from the Skellam law (the alias-table sampler,
      < 2^-231), added to delta as for the DDG's. None or 0: an exact
      sampler.
    l0_sensitivity: optional bound on one client's non-zero coordinates,
      as for the DDG.
    linf_sensitivity: optional bound on every coordinate of one client's
      integer vector, as for the DDG.
  """

  l2_sensitivity: float = attr.ib()
  local_variance: float = attr.ib()
  num_clients: int = attr.ib()
  dimension: int = attr.ib()
  l1_sensitivity: Optional[float] = attr.ib(default=None)
  sampler_tv_distance: Optional[float] = attr.ib(default=None)
  l0_sensitivity: Optional[int] = attr.ib(default=None)
  linf_sensitivity: Optional[float] = attr.ib(default=None)


@attr.s(frozen=True)
class PoissonBinomialDpEvent(dp_accounting.DpEvent):
  """One release of a sum of `num_clients` clients' clipped Poisson binomials.

  The clipped Poisson binomial mechanism (cPBM; Chen et al., "Federated
  frequency estimation", Alg. 3 and Lemma 2): each of `num_clients` clients
  holds y with |y[k]| <= C in each of `dimension` coordinates and sends, per
  coordinate k,

    Z[k] ~ Binomial(num_trials, 1/2 + theta * y[k] / C),  theta in (0, 1/4],

  and only the (secure) sum over clients of Z[k] is released. The clip C does
  not enter the privacy analysis, so it is not a field here.

  Attributes:
    theta: Bias scale theta in (0, 1/4]; larger means less noise.
    num_trials: m, the number of Bernoulli trials per client and coordinate.
    num_clients: n, the number of clients whose draws are in the sum (a lower
      bound on the honest, non-dropped clients).
    dimension: Number of released coordinates in which the client's draws
      can differ from Binomial(num_trials, 1/2): D (the representation
      dimension), or the l0 clip when clients keep at most that many
      non-zero coordinates.
    replace_one_dimension: Coordinates in which replace-one neighbours can
      differ, if more than `dimension` (e.g. 2k with an l0 clip k: the two
      inputs' non-zero coordinates may be disjoint); None means `dimension`.
      Used under the REPLACE_ONE relation only.
    l2_bound: L, a promise that every client's probability offsets
      u_k = p_k - 1/2 satisfy ||u||_2 <= theta * L (so replace-one
      neighbours differ by at most 2 theta L in l2). Set only where the
      mechanism clips the l2 norm of the vector it sends: L = C / B for
      p = 1/2 + theta y / B with ||y||_2 <= C (plus a rounding margin).
      None (the default, and what old events mean) or inf: no such promise,
      Lemma 2 alone. With it the accountant takes, per order, the smaller of
      Lemma 2 and the l2-aware bound of `tff_ddp.accounting.pbm_rdp.l2_rdp`.
  """

  theta: float = attr.ib()
  num_trials: int = attr.ib()
  num_clients: int = attr.ib()
  dimension: int = attr.ib()
  replace_one_dimension: Optional[int] = attr.ib(default=None)
  l2_bound: Optional[float] = attr.ib(default=None)


@attr.s(frozen=True)
class SelfSampledDpEvent(dp_accounting.DpEvent):
  """Every client takes part; each includes its value with probability q.

  The protocol of `client_sampling_rate=q` in this library's factories: all
  clients of the round are in the secure sum and add their noise share; each
  client flips a private coin (from its own noise seed) and contributes its
  clipped value with probability `sampling_probability`, zeros otherwise.
  Nobody -- not the server that runs the secure sum, not a reader of the
  release -- sees the coins, and a client that sends zeros is exactly its
  zero-out neighbour. So the output distributions of zero-out neighbours are
  P = (1 - q) mu_0 + q mu_1 and Q = mu_0 (mu_0: the client's input zeroed),
  the structure of Poisson-subsampling amplification (Zhu & Wang 2019),
  against every adversary.

  Attributes:
    sampling_probability: q in [0, 1], the exact probability of the coins.
    event: the event of one round in which every client sends its value.
  """

  sampling_probability: float = attr.ib()
  event: dp_accounting.DpEvent = attr.ib()
