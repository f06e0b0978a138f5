"""Distribution-exact simulation of the frequency protocols (for sweeps).

`frequency.process` runs every client through TFF: ~30 s for a TFFE run
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
* TFFE's phase 1: `tff_ddp.analytics.quantiles.simulation` (the quantile simulator:
  the Haar encodings of the float32 norms, cPBM noise, the mechanism's
  decode), then the process's own estimator functions
  (the encoding's `cdf`, `encodings.quantile_values`) and its status rule;
* MFFE's indicator: the process's signs (+-1, 0 without data) through the
  indicator's cPBM likewise.

Rounds with more clients than the process's rings hold
(`FrequencyParameters.ring_capacity()`, sized for
expected_clients_per_round) are refused like the process's (`on_wrap=
'raise'`, the default: `RoundRefusedError` before anything is drawn) or
returned with status 'sum_may_wrap' (`on_wrap='flag'`), never 'ok'.

The protocols' simulations are in their modules (`two_phase.simulate`,
`multi_round.simulate`; the single-release ones are `fixed`), the Gaussian
baselines in `gaussian`. What is not simulated: non-finite client values,
and clients sharing noise seeds (only under a test seed).
`frequency_simulation_test` checks the simulator against the TFF process
on small cases.
"""

import dataclasses
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_ddp.aggregators import secure_sum
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
        owner='frequency.simulation.pbm_sum',
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


@dataclasses.dataclass
class Round:
  """One simulated release: the estimate of sum_i x_i and its clip."""
  estimate: np.ndarray
  clip: float
  status: str = 'ok'
  quantile_level: Optional[float] = None


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
  wraps = ring_wraps(params, 'frequency.simulation.fixed', len(x), on_wrap)
  seed = round_seed(rng)
  y = representations(params.encoder(), x, seed)
  clip = params.clip if clip is None else clip
  return Round(pbm_sum(params.mechanism(), y, rng, seed, clip, on_wrap='flag'),
               clip, 'sum_may_wrap' if wraps else 'ok')


def clip_sweep(params, x, clips: Sequence[float], rng):
  """One run per clip with one frame: (estimates [k, d], norms [n]);
  more clients than the rings hold are refused (`RoundRefusedError`)."""
  ring_wraps(params, 'frequency.simulation.clip_sweep', len(x), 'raise')
  seed = round_seed(rng)
  y = representations(params.encoder(), x, seed)
  norms = norms_of(y)
  out = [
      pbm_sum(params.mechanism(), y, rng, seed, float(c), norms) for c in clips
  ]
  return np.array(out), norms


def ring_wraps(params, owner, num_clients, on_wrap) -> bool:
  """Whether a round of `num_clients` exceeds the process's rings; under
  on_wrap='raise' such a round is refused (RoundRefusedError)."""
  ring = params.ring_capacity(owner=owner)
  if secure_sum.check_on_wrap(on_wrap) is secure_sum.OnWrap.RAISE:
    ring.check(num_clients)
  return bool(ring.may_wrap(num_clients))


def check_protocol(params, parameters_class):
  if not isinstance(params, parameters_class):
    raise ValueError(f'needs the parameters of protocol='
                     f'{parameters_class.protocol!r}, got '
                     f'{getattr(params, "protocol", type(params).__name__)!r}'
                     '.')
