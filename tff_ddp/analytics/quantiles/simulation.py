"""Fast, distribution-exact simulation of one quantile round (for sweeps).

`build_quantile_process` runs every client through TFF, which costs about a
second per round; a sweep such as Figure 2 of the quantile paper (thousands
of rounds) needs the same random output without the per-client plumbing.
For histogram encodings (integer counts, no clipping: every client's
encoding already has l_inf <= 1 and the l2 norm the factory clips to) the
aggregators' output has a closed form that this module samples:

* discrete Gaussian: sum_i (c e_i + xi_i) mod M with xi_i ~ N_Z(0, s) iid
  per client and coordinate, s the scaled local noise of the calibrated
  mechanism, drawn by the same sampler the clients use
  (`sample_discrete_gaussian`; one call for all n x L draws). With integer
  encodings and integer scaling the rounding step is the identity, so
  nothing else is random.
* Poisson binomial: per coordinate, the clients with encoding value v in
  {-1, 0, 1} send Binomial(m, p_v) each, so their sum is
  Binomial(n_v m, p_v), with p_{+-1} the mechanism's exact float
  probabilities `p_high` / `p_low` (numpy's binomial sampler here: the
  sweep needs the distribution, not the exactness argument).
* central: the true encoding sum plus N(0, (z l2)^2) per coordinate, z the
  Gaussian mechanism's noise multiplier for the same (epsilon, delta) --
  the trusted-server counterpart of both mechanisms.

Both distributed sums are reduced mod M and decoded by the mechanism's own
`server_decode` (the server code of the real process, run eagerly), so the
decoders exist once.

What it does not simulate: clients with duplicate inputs share noise seeds
only under a *test* seed (never in deployment), so iid noise is the
deployed behaviour. `tff_ddp_tests/analytics/simulation_test.py` checks the
simulator's moments against the formulas and its output against the TFF
process.
"""

import enum
import functools
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from tff_ddp.accounting import calibration
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.utils import checks


class Setting(enum.StrEnum):
  """Who adds the noise of a simulated round (`noisy_sum`): the clients,
  with one of the quantile processes' mechanisms, or a trusted server."""

  DISCRETE_GAUSSIAN = 'discrete_gaussian'
  POISSON_BINOMIAL = 'poisson_binomial'
  CENTRAL = 'central'


def encodings(method: Union[str, hg.Encoding],
              values,
              lower: float,
              upper: float,
              num_bins: Optional[int] = None) -> np.ndarray:
  """[n, L] int64: each client's encoding, as the process encodes it
  (`quantiles.encode_value`): values clipped into the range (+-inf into
  the end bins), zeros for NaN.

  `method` is a `encodings.Encoding` (or its name, with `num_bins`). The
  encodings are its `encode` of each bin, looked up by the bin index the
  process computes (`encodings.bin_index`).
  """
  encoding = hg.encoding(method, num_bins)
  values = np.asarray(values, np.float64)
  idx = hg.bin_index(tf.constant(values), lower, upper,
                     encoding.num_bins).numpy()
  codes = _table(encoding)[idx]
  return np.where(np.isnan(values)[..., None], 0, codes)


@functools.lru_cache(maxsize=None)
def _table(encoding: hg.Encoding) -> np.ndarray:
  """[b, L]: the encoding of every bin."""
  return tf.map_fn(encoding.encode,
                   tf.range(encoding.num_bins, dtype=tf.int64),
                   fn_output_signature=tf.int64).numpy()


def central_noise_multiplier(epsilon: float,
                             delta: float,
                             rounds: int = 1) -> float:
  """z of the Gaussian mechanism at (epsilon, delta) over `rounds`, against
  the release adversary (a trusted server adds the noise)."""
  return calibration.calibrate_gaussian(epsilon,
                                        delta,
                                        rounds=rounds,
                                        adversary='release').value


def noise_stddev(params: qc.QuantileParameters, num_clients: int) -> float:
  """Per-coordinate stddev (bound) of the decoded sum's noise, count units."""
  return params.noise_stddev(num_clients)


_NOISE_FNS = {}


def _noise_fn(mechanism, count: int):
  """seed -> `count` clients' noise shares [count, L] from the mechanism's
  own sampler (`sample_noise`), traced once per sampler, scale, L and count
  (all `sample_noise` depends on; mechanisms built apart are not equal)."""
  key = (type(mechanism), mechanism.noise_sampler,
         mechanism.scaled_local_stddev, mechanism.output_dim, count)
  if key not in _NOISE_FNS:
    _NOISE_FNS[key] = tf.function(
        lambda seed: mechanism.sample_noise(seed, count))
  return _NOISE_FNS[key]


def noisy_sum(setting: Union[str, Setting],
              codes: np.ndarray,
              params: Optional[qc.QuantileParameters] = None,
              central_z: Optional[float] = None,
              l2_sensitivity: Optional[float] = None,
              seed=0,
              on_wrap: str = 'raise') -> np.ndarray:
  """One round's noisy sum of `codes` ([n, L]) under `setting` (float64 [L]).

  Like the process, a round with more clients than the distributed
  mechanism's ring holds (`params.ring_capacity()`) is refused
  (`RoundRefusedError`) unless on_wrap='flag' (then the possibly wrapped
  sum is returned; the caller knows n and the capacity).

  Args:
    setting: a `Setting` or its value: 'discrete_gaussian',
      'poisson_binomial' (need `params` from `quantile_parameters` for the
      same method and n) or 'central' (needs `central_z` and
      `l2_sensitivity`).
    codes: the clients' encodings (`encodings`).
    params: the calibrated distributed configuration.
    central_z: the central Gaussian's noise multiplier.
    l2_sensitivity: of one encoding (for 'central').
    seed: randomness of this round (distinct per round); for 'central'
      any `np.random.default_rng` seed, None for fresh OS entropy (what a
      release labelled private needs; a fixed seed is for reproducible
      experiments).
  """
  setting = checks.member(setting, 'setting', Setting)
  codes = np.asarray(codes, np.int64)
  n, length = codes.shape
  truth = codes.sum(axis=0)
  if setting is Setting.CENTRAL:
    scale = (checks.positive(central_z, 'central_z') *
             checks.positive(l2_sensitivity, 'l2_sensitivity'))
    rng = np.random.default_rng(seed)
    return truth + rng.normal(scale=scale, size=length)
  noise_type = (qc.DdgNoise
                if setting is Setting.DISCRETE_GAUSSIAN else qc.CpbmNoise)
  if not isinstance(getattr(params, 'noise', None), noise_type):
    got = type(getattr(params, 'noise', params)).__name__
    raise ValueError(f"noisy_sum: setting '{setting}' needs `params` from "
                     'quantile_parameters with that mechanism (noise '
                     f'{noise_type.__name__}), got {got}')
  if secure_sum.check_on_wrap(on_wrap) is secure_sum.OnWrap.RAISE:
    params.ring_capacity(owner='simulation.noisy_sum').check(n)
  mechanism = params.aggregator_mechanism()
  modulus = mechanism.modulus
  if setting is Setting.DISCRETE_GAUSSIAN:
    c = round(mechanism.scale_factor)
    noise = _noise_fn(mechanism, n)(tf.constant([seed, 0x51A], tf.int64))
    noise = noise.numpy()
    summed = np.mod(c * codes + noise, modulus).sum(axis=0) % modulus
  else:
    rng = np.random.default_rng(seed)
    m = mechanism.num_trials
    counts = {v: (codes == v).sum(axis=0) for v in (-1, 0, 1)}
    probs = {-1: mechanism.p_low, 0: 0.5, 1: mechanism.p_high}
    summed = sum(
        rng.binomial(counts[v] * m, probs[v]) for v in (-1, 0, 1)) % modulus
  decoded, _ = mechanism.server_decode(
      {'encoded': tf.constant(summed, tf.int64)}, tf.constant(n, tf.int64),
      tf.constant([0, 0], tf.int64))
  return decoded.numpy()
