"""The distributed Skellam mechanism: the DDG's client, Skellam noise.

Agarwal, Kairouz & Liu (2021), "The Skellam Mechanism for Differentially
Private Federated Learning" (NeurIPS 2021, arXiv 2110.04995), Algorithm 1:
each client clips, scales by 1/gamma, rotates, rounds (conditional randomized
rounding with the norm bound of the DDG paper's Theorem 5 (3)), adds
symmetric Skellam noise Pois(mu) - Pois(mu) per coordinate and reduces mod
2^bits; the server centres, decodes and rescales. Everything but the noise
is the DDG's (`tff_ddp.mechanisms.distributed_discrete_gaussian`, whose
`derive` sizes gamma and the ring with the same Section 6 heuristic, as TF
Privacy's `DistributedSkellamSumQuery` and TFF's
`DistributedDpSumFactory(mechanism='distributed_skellam')` do).

Noise: each client's Skellam has variance 2 mu with mu the Poisson mean
`poisson.sampled_mean((sigma/gamma)^2 / 2)` -- the requested variance
(sigma/gamma)^2, sigma = z c / sqrt(n), rounded *up* to the sampler's
2^-20 grid (relative change < 2^-19 / (sigma/gamma)^2). The exact sampler
(`tff_ddp.mechanisms.poisson`) costs the same per coordinate at every
scale. The ring check and gamma use the requested sigma; the extra variance
is below the float64 resolution of any reported stddev at sigma/gamma >= 1.

Privacy (`dp_event`): `DistributedSkellamDpEvent` with Delta_2 = sqrt(T)
(T the integer bound on ||x~||^2 after rounding), Delta_1 = min(sqrt(D)
Delta_2, Delta_2^2) (integer vectors), local variance 2 mu and the number of
clients in the sum; its RDP is the paper's bound
(`tff_ddp.accounting.skellam_rdp`, checked there against the exact Renyi
divergence of the Skellam PMF). Zero-out neighbours, as for the DDG: a
client with a non-finite value sends zeros plus its noise.
"""

import dataclasses
import math
from typing import Optional

import dp_accounting

from tff_ddp.accounting import events
from tff_ddp.encoders import base as encoders_base
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import poisson
from tff_ddp.utils import checks

# Scaled local stddev range: the Poisson sampler's means [2^-20, 2^40]
# (variance 2 mu). The Skellam RDP bound holds at every variance > 0; below
# stddev ~1 it is dominated by its Delta_1 term (see `skellam_rdp`).
_NOISE_RANGE = (
    math.sqrt(2 * poisson.MIN_MEAN), 'sqrt(2^-19)',
    math.sqrt(2 * poisson.MAX_MEAN),
    'below the Poisson sampler\'s smallest mean 2^-20')


@dataclasses.dataclass(frozen=True)
class DistributedSkellam(ddg.DistributedDiscreteGaussian):
  """The distributed Skellam mechanism (build with `compute_parameters`).

  The fields of `DistributedDiscreteGaussian`, plus `poisson_mean` (mu):
  each client's noise per coordinate is Pois(mu) - Pois(mu), variance 2 mu.
  """

  poisson_mean: float = 0.0

  name = base.Kind.SKELLAM

  @property
  def local_variance(self) -> float:
    """2 mu, each client's noise variance per coordinate (integer units)."""
    return 2.0 * self.poisson_mean

  def noise_stddev(self, num_clients=None) -> float:
    """Stddev of the summed noise per coordinate of the decoded sum
    (exact: sqrt(n 2 mu) gamma; rounding adds at most gamma/2 per client)."""
    n = self.expected_clients_per_round if num_clients is None else (
        num_clients)
    return math.sqrt(n * self.local_variance) * self.gamma

  @property
  def sampler_tv_distance(self) -> float:
    return 0.0

  def sample_noise(self, seed, count=None):
    """One client's Skellam noise, int64 [output_dim] (exact sampler); with
    `count`, that many clients' iid shares, [count, output_dim]."""
    shape = ddg.noise_shape(self.output_dim, count)
    return poisson.sample_skellam(shape, self.poisson_mean, seed)

  def public_measurements(self):
    """The DDG's configuration constants, with `scaled_local_stddev` the
    drawn sqrt(2 mu) (TFF's name for the same quantity)."""
    measurements = dict(super().public_measurements())
    measurements['scaled_local_stddev'] = math.sqrt(self.local_variance)
    return measurements

  def dp_event(self, num_clients=None) -> dp_accounting.DpEvent:
    """One round with `num_clients` noise shares (default: expected).

    Zero-out neighbours (`tff_ddp.accounting.skellam_rdp`); a
    NonPrivateDpEvent when noise_multiplier is 0; NoOpDpEvent for 0
    clients (an empty round releases nothing about anyone).
    """
    n = (self.expected_clients_per_round if num_clients is None
         else checks.integer(num_clients, 'num_clients', 0))
    if n == 0:
      return dp_accounting.NoOpDpEvent()
    if self.noise_multiplier == 0:
      return dp_accounting.NonPrivateDpEvent()
    return events.DistributedSkellamDpEvent(
        l2_sensitivity=self.l2_sensitivity,
        local_variance=self.local_variance, num_clients=n,
        dimension=self.output_dim)


def compute_parameters(
    dim: int,
    l2_clip: float,
    noise_multiplier: float,
    expected_clients_per_round: int,
    bits: int,
    modclip_prob: float = 1e-4,
    beta: float = 0.0,
    encoder: Optional[encoders_base.Encoder] = None,
    granularity: Optional[float] = None,
    linf_clip: Optional[float] = None,
    integer_inputs: bool = False,
) -> DistributedSkellam:
  """Validates a Skellam configuration and derives gamma, the noise, bounds.

  The arguments of `distributed_discrete_gaussian.compute_parameters`
  (without `noise_sampler`: the Poisson sampler is exact), with the same
  checks and errors, except the scaled noise range: any sigma/gamma the
  Poisson sampler covers (sqrt(2^-19) to 2^20.5) instead of the DDG's
  [1/2, 2^25]. Nothing random happens.
  """
  mechanism = ddg.derive(
      dim, l2_clip, noise_multiplier, expected_clients_per_round, bits,
      modclip_prob, beta, encoder, granularity, linf_clip, integer_inputs,
      'exact', DistributedSkellam, _NOISE_RANGE)
  mean = 0.0
  if mechanism.noise_multiplier > 0:
    mean = poisson.sampled_mean(mechanism.scaled_local_stddev**2 / 2.0)
  return dataclasses.replace(mechanism, poisson_mean=mean)
