"""Distribution-exact simulation of the frequency protocols (for sweeps).

`frequency_process` runs every client through TFF: ~30 s for a TFFE run
with 10^4 clients and d = 100. Tables 1-3 of the federated frequency
estimation paper need hundreds of runs (quantile sweeps, 5 repetitions,
10^5 users), so this module samples the same outputs from their closed
form, with the library's own pieces:

* representations: the frequency aggregator's Kashin encoder, batched
  (`KashinEncoder.encode_batch`, the same computation as the clients'
  `encode_with_residual` row by row), with a fresh public round seed;
* frequency release: per client and coordinate Z ~ Binomial(m, p), p the
  client's probability exactly as `PoissonBinomial.client_encode` computes
  it (clip ||y|| to the mechanism's l2_clip, p = 1/2 + theta y / B, kept in
  [p_low, p_high]), drawn by numpy's binomial sampler (the distribution, not
  the library's exactness argument); the sum reduced mod M and decoded by
  the mechanism's own `server_decode`; a data-dependent clip C by the
  process's scaling (inputs y C0 / C, output times C / C0);
* TFFE's phase 1: `tff_ddp.analytics.quantiles.simulation` (the quantile
  simulator: the Haar encodings of the float32 norms, cPBM noise, the
  mechanism's decode), then the process's own estimator functions
  (the encoding's `cdf`, `encodings.quantile_values`) and its status rule;
* MFFE's indicator: the process's signs (+-1, 0 without data) through the
  indicator's cPBM likewise.

Rounds with more clients than the process's rings hold
(`FrequencyParameters.ring_capacity()`, sized for
expected_clients_per_round) are refused like the process's (`on_wrap=
'raise'`, the default: `RoundRefusedError` before anything is drawn) or
returned with status 'sum_may_wrap' (`on_wrap='flag'`), never 'ok'.

What is not simulated: non-finite client values, and clients sharing noise
seeds (only under a test seed). `frequency_simulation_test` checks the
simulator against the TFF process on small cases.

The central and local Gaussian baselines (`central_gaussian`,
`local_gaussian`) exist only here: they need a trusted server or no secure
sum, so there is no distributed-DP process to run.
"""

import dataclasses
import math
from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_ddp.accounting import calibration
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics import frequency as fq
from tff_ddp.analytics import frequency_protocols as protocols
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import simulation
from tff_ddp.utils import checks

# Rows per binomial batch (bounds the memory at ~8 rows x D x 16 bytes).
_CHUNK = 4096


def round_seed(rng) -> tf.Tensor:
  """A fresh public round seed (what a process's state would give)."""
  return tf.constant(rng.integers(0, 2**62, size=2), tf.int64)


def representations(encoder, x, seed) -> np.ndarray:
  """[n, D] Kashin representations of the rows of x with one frame."""
  y, _ = _encode_batch(encoder, tf.constant(np.asarray(x, np.float64)), seed)
  return y.numpy()


_ENCODERS = {}


def _encode_batch(encoder, x, seed):
  key = repr(encoder)
  if key not in _ENCODERS:
    _ENCODERS[key] = tf.function(encoder.encode_batch,
                                 input_signature=[
                                     tf.TensorSpec([None, encoder.dim],
                                                   tf.float64),
                                     tf.TensorSpec([2], tf.int64)
                                 ])
  return _ENCODERS[key](x, seed)


def norms_of(y) -> np.ndarray:
  return np.linalg.norm(np.asarray(y, np.float64), axis=1)


def pbm_sum(mechanism,
            y,
            rng,
            seed,
            clip: Optional[float] = None,
            norms=None,
            on_wrap: str = 'raise') -> np.ndarray:
  """The decoded sum of one cPBM round on representations y ([n, D]).

  Args:
    mechanism: a `PoissonBinomial` (its l2_clip C0, coordinate bound,
      probabilities, ring, decoder).
    y: the clients' representations (rows of `representations`).
    rng: numpy Generator (the clients' private randomness).
    seed: the round's public seed (the frame of y; used to decode).
    clip: the clip C in use (default C0); simulated by scaling as the
      processes do.
    norms: ||y_i|| if already computed.
    on_wrap: 'raise' (default): refuse more clients than the mechanism's
      ring holds (`max_clients()`); 'flag': decode them anyway.

  Returns:
    float64 [d]: the estimate of sum_i x_i min(1, C / ||y_i||).
  """
  y = np.asarray(y, np.float64)
  if secure_sum.check_on_wrap(on_wrap) is secure_sum.OnWrap.RAISE:
    secure_sum.RingCapacity(
        capacity=mechanism.max_clients(),
        owner='frequency_simulation.pbm_sum',
        sized_for=('expected_clients_per_round='
                   f'{mechanism.expected_clients_per_round}')).check(y.shape[0])
  c0 = float(mechanism.l2_clip)
  clip = c0 if clip is None else checks.positive(clip, 'clip')
  norms = norms_of(y) if norms is None else np.asarray(norms)
  # Scaled inputs y C0 / C clipped to C0: y min(C0 / C, C0 / ||y||).
  factor = np.minimum(c0 / clip, c0 / np.where(norms > 0, norms, 1.0))
  m = mechanism.num_trials
  total = np.zeros(y.shape[1], np.int64)
  for start in range(0, y.shape[0], _CHUNK):
    part = y[start:start + _CHUNK] * factor[start:start + _CHUNK, None]
    probs = np.clip(0.5 + mechanism.theta * (part / mechanism.coordinate_bound),
                    mechanism.p_low, mechanism.p_high)
    total += rng.binomial(m, probs).sum(axis=0)
  summed = np.mod(total, mechanism.modulus)
  decoded, _ = mechanism.server_decode(
      {'encoded': tf.constant(summed, tf.int64)},
      tf.constant(y.shape[0], tf.int64), seed)
  return decoded.numpy() * (clip / c0)


def quantile_phase(qparams,
                   norms,
                   upper: float,
                   target: float,
                   rng,
                   count: str = 'exact',
                   min_total_stddevs: float = 2.0,
                   on_wrap: str = 'raise'):
  """(C-hat or None, status) of TFFE's phase 1 on the clients' norms
  (status 'sum_may_wrap' and no C-hat for a round above the ring's
  capacity under on_wrap='flag'; refused under 'raise')."""
  values = np.asarray(norms, np.float32).astype(np.float64)
  n = values.size
  encoding = qparams.encoding
  b = encoding.num_bins
  codes = simulation.encodings(encoding, values, 0.0, upper)
  # A user without data (norm 0) sends the zero message
  # (`frequency_process.norm_message`).
  codes = np.where((values > 0)[:, None], codes, 0)
  noisy = simulation.noisy_sum('poisson_binomial',
                               codes,
                               qparams,
                               seed=int(rng.integers(0, 2**62)),
                               on_wrap=on_wrap)
  if n > 0 and qparams.ring_capacity().may_wrap(n):
    return None, 'sum_may_wrap'  # the process's fallback: C-hat = B
  cdf = encoding.cdf(noisy, n if hg.exact_count(count) else None)
  total = float(encoding.estimated_total(noisy))
  # The process's status rule (quantiles.py, server_estimate).
  stddev = (qparams.aggregator_mechanism().noise_stddev(1) *
            encoding.total_norm * math.sqrt(n))
  if n == 0:
    return None, 'no_clients'
  if total < min_total_stddevs * stddev or total <= 0:
    return None, 'too_few_values'
  value = float(hg.quantile_values(cdf, [target], 0.0, upper, b).numpy()[0])
  return value, 'ok'


@dataclasses.dataclass
class Round:
  """One simulated release: the estimate of sum_i x_i and its clip."""
  estimate: np.ndarray
  clip: float
  status: str = 'ok'
  quantile_level: Optional[float] = None


def two_phase(params,
              x,
              rng,
              target: Optional[float] = None,
              on_wrap: str = 'raise') -> Round:
  """One TFFE run (`frequency_process` 'two_phase') on counts x [n, d]."""
  _check(params, protocols.TwoPhaseParameters)
  wraps = _wraps(params, 'two_phase', len(x), on_wrap)
  seed = round_seed(rng)
  y = representations(params.encoder(), x, seed)
  norms = norms_of(y)
  target = params.target_quantile if target is None else target
  clip, status = quantile_phase(params.quantile,
                                norms,
                                params.upper_bound,
                                target,
                                rng,
                                on_wrap='flag')
  if clip is None:
    clip = params.upper_bound
  estimate = pbm_sum(params.mechanism(),
                     y,
                     rng,
                     seed,
                     clip,
                     norms,
                     on_wrap='flag')
  return Round(estimate, clip, 'sum_may_wrap' if wraps else status)


def fixed(params,
          x,
          rng,
          clip: Optional[float] = None,
          on_wrap: str = 'raise') -> Round:
  """One cPBM release with the params' mechanism at `clip` (default its
  own): a single-release protocol ('fixed', 'normalize', 'sample': what
  its clients send is `params.simulated_values`, e.g. x normalised or
  items drawn here); any scaled-protocol params with an explicit clip
  (e.g. a sweep over C with TFFE's frequency calibration)."""
  x = params.simulated_values(np.asarray(x, np.float64), rng)
  if clip is None and params.scaled:
    raise ValueError(f'protocol={params.protocol!r} has no fixed clip; give '
                     'clip.')
  wraps = _wraps(params, 'fixed', len(x), on_wrap)
  seed = round_seed(rng)
  y = representations(params.encoder(), x, seed)
  clip = params.clip if clip is None else clip
  return Round(pbm_sum(params.mechanism(), y, rng, seed, clip, on_wrap='flag'),
               clip, 'sum_may_wrap' if wraps else 'ok')


def clip_sweep(params, x, clips: Sequence[float], rng):
  """One run per clip with one frame: (estimates [k, d], norms [n]);
  more clients than the rings hold are refused (`RoundRefusedError`)."""
  _wraps(params, 'clip_sweep', len(x), 'raise')
  seed = round_seed(rng)
  y = representations(params.encoder(), x, seed)
  norms = norms_of(y)
  out = [
      pbm_sum(params.mechanism(), y, rng, seed, float(c), norms) for c in clips
  ]
  return np.array(out), norms


@dataclasses.dataclass(frozen=True)
class IndicatorEncoding:
  """A message for MFFE's indicator: 1 above the clip C, `below` at or
  below it, `no_data` for a user without data (norm 0; None: by its norm,
  like the others). The fraction above C of a decoded sum S over n clients
  is (S / n - below) / (1 - below).
  """

  below: float
  no_data: Optional[float]

  def messages(self, norms, clip: float) -> np.ndarray:
    norms = np.asarray(norms, np.float64)
    sent = np.where(norms > clip, 1.0, self.below)
    if self.no_data is None:
      return sent
    return np.where(norms > 0, sent, self.no_data)

  def fraction_above(self, total: float, num_clients: int) -> float:
    return (total / num_clients - self.below) / (1.0 - self.below)


# 'signed': the process's (`frequency_computations.indicator_message`): +1
# above C, -1 at or below, 0 without data (norm 0). 'paper': the paper's
# +-1 (no data sends -1: replace-one pairs). 'binary': 1 above C, else 0
# (zero-out pairs, the fraction above is S / n). The last two exist to
# measure the alternatives (docs/notes/neighbouring_relation.md).
INDICATOR_ENCODINGS = {
    'signed': IndicatorEncoding(below=-1.0, no_data=0.0),
    'paper': IndicatorEncoding(below=-1.0, no_data=None),
    'binary': IndicatorEncoding(below=0.0, no_data=None),
}


def _indicator_encoding(encoding: str) -> IndicatorEncoding:
  return INDICATOR_ENCODINGS[checks.choice(encoding, 'encoding',
                                           tuple(INDICATOR_ENCODINGS))]


def indicator_messages(norms,
                       clip: float,
                       encoding: str = 'signed') -> np.ndarray:
  """MFFE's indicator per client (numpy), in one of INDICATOR_ENCODINGS."""
  return _indicator_encoding(encoding).messages(norms, clip)


def multi_round(params,
                batches: Sequence[np.ndarray],
                rng,
                target: Optional[float] = None,
                clip: Optional[float] = None,
                indicator_encoding: str = 'signed',
                indicator=None,
                on_wrap: str = 'raise') -> List[Round]:
  """MFFE (`frequency_process` 'multi_round') over the given batches.

  Returns one Round per batch with the *running* estimate of the sum of
  all batches so far, the clip used and the estimated quantile level.
  `clip` (a fixed C for every round, e.g. the hindsight C*) disables the
  update. `indicator_encoding` (`indicator_messages`) and `indicator` (a
  cPBM mechanism replacing the params' indicator, e.g. recalibrated) are
  for measuring alternatives.
  """
  _check(params, protocols.MultiRoundParameters)
  encoding = _indicator_encoding(indicator_encoding)
  target = params.target_quantile if target is None else target
  current = params.clip if clip is None else clip
  if indicator is None:
    indicator = params.indicator_factory.mechanism(_indicator_type())
  encoder = params.encoder()
  mechanism = params.mechanism()
  running = np.zeros(params.dim)
  out = []
  for x in batches:
    wraps = _wraps(params, 'multi_round', len(x), on_wrap)
    seed = round_seed(rng)
    y = representations(encoder, x, seed)
    norms = norms_of(y)
    running = running + pbm_sum(
        mechanism, y, rng, seed, current, norms, on_wrap='flag')
    signs = encoding.messages(norms, current)
    s = pbm_sum(indicator, signs[:, None], rng, seed, on_wrap='flag')[0]
    above = encoding.fraction_above(s, len(signs))
    level = 1.0 - float(np.clip(above, 0.0, 1.0))
    out.append(
        Round(running.copy(), current, 'sum_may_wrap' if wraps else 'ok',
              level))
    if clip is None:
      current = current * math.exp(-params.learning_rate * (level - target))
  return out


def _indicator_type():
  import tensorflow_federated as tff
  return tff.TensorType(np.float64, [1])


def _wraps(params, function, num_clients, on_wrap) -> bool:
  """Whether a round of `num_clients` exceeds the process's rings; under
  on_wrap='raise' such a round is refused (RoundRefusedError)."""
  ring = params.ring_capacity(owner=f'frequency_simulation.{function}')
  if secure_sum.check_on_wrap(on_wrap) is secure_sum.OnWrap.RAISE:
    ring.check(num_clients)
  return bool(ring.may_wrap(num_clients))


def _check(params, parameters_class):
  if not isinstance(params, parameters_class):
    raise ValueError(f'needs the parameters of protocol='
                     f'{parameters_class.protocol!r}, got '
                     f'{getattr(params, "protocol", type(params).__name__)!r}'
                     '.')


# ---------------------------------------------------------------------------
# Gaussian baselines (trusted server, or local noise).


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
  return Round(estimate, clip)


def central_gaussian(gparams,
                     x,
                     max_items,
                     num_bins,
                     rng,
                     target=None,
                     clip=None) -> Round:
  """The CDP baseline (module docstring of `frequency`): one run."""
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
                   clip=None) -> Round:
  """The LDP baseline: the sum of n local Gaussian releases (one run).

  The sum of n independent N(0, s^2) is N(0, n s^2): drawn once.
  """
  if not gparams.local:
    raise ValueError('local_gaussian needs gaussian_parameters(local=True).')
  return _gaussian_round(gparams, x, max_items, num_bins, rng, target, clip)
