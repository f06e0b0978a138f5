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
2^-20 grid (relative change < 2^-19 / (sigma/gamma)^2). The ring check and
gamma use the requested sigma; the extra variance is below the float64
resolution of any reported stddev at sigma/gamma >= 1. Samplers
(`noise_sampler`): 'table' (the default), the alias table of
`tff_ddp.mechanisms.skellam_table` (one random word and one gather per
coordinate; per-sample TV distance < 2^-231 from the Skellam law, carried by
the event and added to delta by the accountant) for means up to
`skellam_table.max_supported_mean()` (~4.25e8), the exact sampler above;
'exact', the exact Poisson sampler (`tff_ddp.mechanisms.poisson`, the same
cost per coordinate at every scale, ~30x the table's).

Privacy (`dp_event`): `DistributedSkellamDpEvent` with Delta_2 = sqrt(T)
(T the integer bound on ||x~||^2 after rounding), Delta_1 = min(sqrt(D)
Delta_2, Delta_2^2) (integer vectors), local variance 2 mu, the number of
clients in the sum and the sampler's TV distance; its RDP is the paper's bound
(`tff_ddp.accounting.skellam_rdp`, checked there against the exact Renyi
divergence of the Skellam PMF). Zero-out neighbours, as for the DDG: a
client with a non-finite value sends zeros plus its noise.
"""

import dataclasses
import math

import dp_accounting

from tff_ddp.accounting import events
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import poisson
from tff_ddp.mechanisms import skellam_table
from tff_ddp.utils import checks

# Scaled local stddev range: the Poisson sampler's means [2^-20, 2^40]
# (variance 2 mu). The Skellam RDP bound holds at every variance > 0; below
# stddev ~1 it is dominated by its Delta_1 term (see `skellam_rdp`).
_NOISE_RANGE = (math.sqrt(2 * poisson.MIN_MEAN), 'sqrt(2^-19)',
                math.sqrt(2 * poisson.MAX_MEAN),
                'below the Poisson sampler\'s smallest mean 2^-20')
# The resolved samplers: (shape, Poisson mean, seed) -> int64 noise.
_SAMPLE = {
    ddg.Sampler.TABLE: skellam_table.sample_skellam_table,
    ddg.Sampler.EXACT: poisson.sample_skellam
}


def resolve_noise_sampler(noise_sampler, poisson_mean: float) -> ddg.Sampler:
  """The sampler a client runs: TABLE if asked for ('table' or the member)
  and the table covers `poisson_mean` (`skellam_table.fits`; a mean of 0
  draws nothing), else EXACT. The one place this choice is made (the
  mechanism and the CLI's events)."""
  if ddg.as_sampler(noise_sampler) is ddg.Sampler.TABLE and (
      poisson_mean == 0 or
      (poisson.MIN_MEAN <= poisson_mean <= poisson.MAX_MEAN and
       skellam_table.fits(poisson_mean))):
    return ddg.Sampler.TABLE
  return ddg.Sampler.EXACT


@dataclasses.dataclass(frozen=True)
class DistributedSkellam(ddg.DistributedDiscreteGaussian):
  """The distributed Skellam mechanism (build with `compute_parameters`).

  The fields of `DistributedDiscreteGaussian`, plus `poisson_mean` (mu):
  each client's noise per coordinate is Pois(mu) - Pois(mu), variance 2 mu.
  """

  poisson_mean: float = 0.0

  name = base.Kind.SKELLAM
  noise_range = _NOISE_RANGE
  event_type = events.DistributedSkellamDpEvent

  @staticmethod
  def release_noise(local_stddev, noise_sampler):
    """(the event's noise field, the resolved sampler) of `release_event`:
    local_stddev is TFF's scaled_local_stddev sqrt(2 mu), so the variance is
    its square and the Poisson mean half that."""
    local_stddev = checks.positive(local_stddev, 'local_stddev')
    variance = local_stddev * local_stddev
    return (dict(local_variance=variance),
            resolve_noise_sampler(noise_sampler, variance / 2))

  def with_resolved_noise(self):
    """mu = `poisson.sampled_mean((sigma/gamma)^2 / 2)` (0 without noise)
    and the sampler that runs at mu (`resolve_noise_sampler`)."""
    mean = 0.0
    if self.noise_multiplier > 0:
      mean = poisson.sampled_mean(self.scaled_local_stddev**2 / 2.0)
    return dataclasses.replace(self,
                               poisson_mean=mean,
                               noise_sampler=resolve_noise_sampler(
                                   self.noise_sampler, mean))

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

  def sample_noise(self, seed, count=None):
    """One client's Skellam noise, int64 [output_dim] (`noise_sampler`);
    with `count`, that many clients' iid shares, [count, output_dim]."""
    shape = ddg.noise_shape(self.output_dim, count)
    return _SAMPLE[self.noise_sampler](shape, self.poisson_mean, seed)

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
    n = (self.expected_clients_per_round if num_clients is None else
         checks.integer(num_clients, 'num_clients', 0))
    if n == 0:
      return dp_accounting.NoOpDpEvent()
    if self.noise_multiplier == 0:
      return dp_accounting.NonPrivateDpEvent()
    return events.DistributedSkellamDpEvent(
        l2_sensitivity=self.l2_sensitivity,
        local_variance=self.local_variance,
        num_clients=n,
        dimension=self.output_dim,
        sampler_tv_distance=self.sampler_tv_distance or None,
        l0_sensitivity=self.l0_sensitivity,
        linf_sensitivity=self.linf_sensitivity)


# The DDG's arguments, checks and errors (with `noise_sampler` choosing the
# Skellam's sampler) and the Skellam's noise range: see
# `DistributedDiscreteGaussian.compute_parameters`; its `Request` is the
# DDG's (the same arguments), named here for this module's callers.
compute_parameters = DistributedSkellam.compute_parameters
Request = ddg.Request
release_event = DistributedSkellam.release_event
