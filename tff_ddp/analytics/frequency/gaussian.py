"""The central and local Gaussian baselines (Section 5.2), simulated.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper), Table 2's CDP and LDP rows
(docs/notes/frequency_protocols.md, section on clipping.py). They need a
trusted server or no secure sum, so there is no distributed-DP process to
run: they exist only as this simulation.
"""

import dataclasses
import math

import numpy as np

from tff_ddp.accounting import calibration
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import simulation as fs
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import simulation
from tff_ddp.utils import checks


@dataclasses.dataclass(frozen=True)
class GaussianParameters:
  """The Gaussian baselines' calibration: z of each release."""
  local: bool
  quantile_noise_multiplier: float
  frequency_noise_multiplier: float
  epsilon: float
  delta: float
  adversary: str


def gaussian_parameters(
    epsilon: float,
    delta: float,
    local: bool,
    budget_fraction: float = 1.0 / 11.0) -> GaussianParameters:
  """z of the quantile and frequency releases, split as TFFE's budget.

  Central: against readers of the release ('release'), Gaussian events of
  the zero-out (= add/remove) sensitivity. Local: each user's own release
  must be (epsilon, delta)-DP for any change of its input, so the noise
  multipliers are relative to the replace-one sensitivity (the
  diameters 2 C and 2 sqrt(b + 1)); the same z calibration, used by the
  callers with those sensitivities.
  """
  local = checks.boolean(local, 'local')

  def calibrator(eps):
    result = calibration.calibrate_gaussian(eps, delta, adversary='release')
    return result, result.event

  split = calibration.split_budget([calibrator, calibrator],
                                   [budget_fraction, 1.0 - budget_fraction],
                                   epsilon,
                                   delta,
                                   adversary='release')
  return GaussianParameters(local=local,
                            quantile_noise_multiplier=split.results[0].value,
                            frequency_noise_multiplier=split.results[1].value,
                            epsilon=split.epsilon,
                            delta=delta,
                            adversary='release')


def _gaussian_round(gparams,
                    x,
                    max_items,
                    num_bins,
                    rng,
                    target=None,
                    clip=None):
  x = np.asarray(x, np.float64)
  n, d = x.shape
  norms = np.linalg.norm(x, axis=1)
  factor = 2.0 if gparams.local else 1.0  # replace-one diameter
  noises = n if gparams.local else 1
  r = factor * gparams.frequency_noise_multiplier
  if clip is None:
    target = (fq.gaussian_quantile(r, d, n, noises)
              if target is None else target)
    encoding = hg.Haar(num_bins)
    codes = simulation.encodings(encoding, norms.astype(np.float32), 0.0,
                                 float(max_items))
    sigma = factor * gparams.quantile_noise_multiplier * encoding.l2
    noisy = codes.sum(axis=0) + rng.normal(scale=sigma * math.sqrt(noises),
                                           size=codes.shape[1])
    cdf = encoding.cdf(noisy, n)
    clip = float(
        hg.quantile_values(cdf, [target], 0.0, float(max_items),
                           num_bins).numpy()[0])
  clipped = x * np.minimum(1.0, clip / np.where(norms > 0, norms, 1.0))[:, None]
  estimate = clipped.sum(axis=0) + rng.normal(
      scale=r * clip * math.sqrt(noises), size=d)
  return fs.Round(estimate, clip)


def central_gaussian(gparams,
                     x,
                     max_items,
                     num_bins,
                     rng,
                     target=None,
                     clip=None) -> fs.Round:
  """The CDP baseline (docs/notes/frequency_protocols.md, section on
  clipping.py, "CDP"): one run."""
  if gparams.local:
    raise ValueError('central_gaussian needs gaussian_parameters(local='
                     'False).')
  return _gaussian_round(gparams, x, max_items, num_bins, rng, target, clip)


def local_gaussian(gparams,
                   x,
                   max_items,
                   num_bins,
                   rng,
                   target=None,
                   clip=None) -> fs.Round:
  """The LDP baseline: the sum of n local Gaussian releases (one run).

  The sum of n independent N(0, s^2) is N(0, n s^2): drawn once.
  """
  if not gparams.local:
    raise ValueError('local_gaussian needs gaussian_parameters(local=True).')
  return _gaussian_round(gparams, x, max_items, num_bins, rng, target, clip)
