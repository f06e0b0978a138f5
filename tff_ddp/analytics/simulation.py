"""Fast, distribution-exact simulation of one quantile round (for sweeps).

`build_quantile_process` runs every client through TFF, which costs about a
second per round; a sweep such as Figure 2 of the quantile paper (thousands
of rounds) needs the same random output without the per-client plumbing.
For histogram encodings (integer counts, no clipping: every client's
encoding already has l_inf <= 1 and the l2 norm the factory clips to) the
aggregators' output has a closed form that this module samples:

* discrete Gaussian: sum_i (c e_i + xi_i) mod M, centred, / c, with
  xi_i ~ N_Z(0, sigma^2) iid per client and coordinate, drawn by the same
  sampler the clients use (`sample_discrete_gaussian`; one call for all
  n x L draws). The rounding step is the identity on c e_i (integers), so
  nothing else is random.
* Poisson binomial: per coordinate, the clients with encoding value v in
  {-1, 0, 1} send Binomial(m, p_v) each, so their sum is
  Binomial(n_v m, p_v), with p_{+-1} the mechanism's exact float
  probabilities `p_high` / `p_low` (numpy's binomial sampler here: the
  sweep needs the distribution, not the exactness argument); then the
  server's decode (2 S - n m) / 2 * B / (m theta).
* central: the true encoding sum plus N(0, (z l2)^2) per coordinate, z the
  Gaussian mechanism's noise multiplier for the same (epsilon, delta) --
  the trusted-server counterpart of both mechanisms.

What it does not simulate: clients with duplicate inputs share noise seeds
only under a *test* seed (never in deployment), so iid noise is the
deployed behaviour. `tff_ddp_tests/analytics/simulation_test.py` checks the
simulator's moments against the formulas and its output against the TFF
process.
"""

import functools
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_ddp.accounting import calibration
from tff_ddp.analytics import histograms as hg
from tff_ddp.analytics import quantiles as q
from tff_ddp.mechanisms import discrete_gaussian as dg

SETTINGS = q.MECHANISMS + ('central',)


def encodings(method: str, values, lower: float, upper: float,
              num_bins: int) -> np.ndarray:
  """[n, L] int64: each client's encoding (values clipped into the range).

  The encodings are `histograms.encode` of each bin, looked up by the bin
  index the process computes (`histograms.bin_index`).
  """
  idx = hg.bin_index(tf.constant(np.asarray(values, np.float64)), lower,
                     upper, num_bins).numpy()
  return _table(method, num_bins)[idx]


@functools.lru_cache(maxsize=None)
def _table(method, num_bins):
  return tf.map_fn(lambda i: hg.encode(method, i, num_bins),
                   tf.range(num_bins, dtype=tf.int64),
                   fn_output_signature=tf.int64).numpy()


def central_noise_multiplier(epsilon: float, delta: float,
                             rounds: int = 1) -> float:
  """z of the Gaussian mechanism at (epsilon, delta) over `rounds`."""
  return calibration.calibrate('gaussian', 'noise_multiplier', {}, epsilon,
                               delta, rounds=rounds).value


def noise_stddev(params: q.QuantileParameters, num_clients: int) -> float:
  """Per-coordinate stddev of the decoded sum's noise, in count units.

  DDG: sqrt(n) sigma / c = z l2 (sigma^2 the per-client variance proxy; the
  discrete Gaussian's variance is at most that). cPBM: the bound
  sqrt(n / (4 m)) B / theta (`PbmParameters.sum_stddev_bound`).
  """
  if params.mechanism == 'discrete_gaussian':
    return params.noise_multiplier * params.l2_sensitivity
  length = hg.encoding_length(params.method, params.num_bins)
  return params.factory.parameters(_vector_type(length)).sum_stddev_bound(
      num_clients)


def noisy_sum(setting: str, codes: np.ndarray,
              params: Optional[q.QuantileParameters] = None,
              central_z: Optional[float] = None,
              l2_sensitivity: Optional[float] = None,
              seed: int = 0) -> np.ndarray:
  """One round's noisy sum of `codes` ([n, L]) under `setting` (float64 [L]).

  Args:
    setting: 'discrete_gaussian', 'poisson_binomial' (need `params` from
      `quantile_parameters` for the same method and n) or 'central' (needs
      `central_z` and `l2_sensitivity`).
    codes: the clients' encodings (`encodings`).
    params: the calibrated distributed configuration.
    central_z: the central Gaussian's noise multiplier.
    l2_sensitivity: of one encoding (for 'central').
    seed: randomness of this round (distinct per round).
  """
  codes = np.asarray(codes, np.int64)
  n, length = codes.shape
  truth = codes.sum(axis=0)
  if setting == 'central':
    rng = np.random.default_rng(seed)
    return truth + rng.normal(scale=central_z * l2_sensitivity, size=length)
  if setting == 'discrete_gaussian':
    c = params.scaling
    sigma = params.noise_multiplier * params.l2_sensitivity * c / np.sqrt(n)
    modulus = 2**params.bits
    noise = dg.sample_discrete_gaussian(
        [n, length], sigma, tf.constant([seed, 0x51A], tf.int64)).numpy()
    z = np.mod(c * codes + noise, modulus).sum(axis=0) % modulus
    centred = np.where(z > modulus // 2, z - modulus, z)
    return centred / c
  if setting == 'poisson_binomial':
    factory_params = params.factory.parameters(
        _vector_type(length))
    m = params.num_trials
    rng = np.random.default_rng(seed)
    counts = {v: (codes == v).sum(axis=0) for v in (-1, 0, 1)}
    probs = {-1: factory_params.p_low, 0: 0.5, 1: factory_params.p_high}
    s = sum(rng.binomial(counts[v] * m, probs[v]) for v in (-1, 0, 1))
    bound = factory_params.coordinate_bound
    return (2 * s - n * m) / 2 * bound / (m * factory_params.theta)
  raise ValueError(f'setting must be one of {SETTINGS}, got {setting!r}.')


def _vector_type(length):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff.TensorType(np.float32, [length])
