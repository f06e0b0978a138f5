"""The single-release protocols: one cPBM release at a clip fixed before
the round -- their parameters and their TFF process.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): `FixedClipParameters` (Algorithm 3 at a given clip),
`NormalizeParameters` and `SampleParameters` (the Table 2 baselines of
Section 5.2), each a `SingleReleaseParameters` whose clients send
`client_values(x, round_seed)`; their process is `single_release_process`,
their simulation `simulation.fixed` (with `simulated_values`).
"""

import collections
import dataclasses
from typing import ClassVar

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import computations
from tff_ddp.analytics.frequency import setting as setting_lib
from tff_ddp.utils import checks
from tff_ddp.utils import entropy as entropy_lib
from tff_ddp.utils import rounds as rounds_lib
from tff_ddp.utils import tensors


class SingleReleaseParameters(setting_lib.FrequencyParameters):
  """A protocol of one cPBM release at a clip fixed before the round.

  The clients compute `client_values(x, round_seed)` (TF) and send them to
  the frequency aggregator, built with l2_clip = `clip`; `simulated_values`
  is the numpy mirror the simulator uses. A subclass defines `clip` (a
  field or a property), those two methods, `protocol` and `calibrate`.
  """

  clip: ClassVar[float]  # (a subclass makes it a field or a property)

  @classmethod
  def _calibrated(cls, setting: setting_lib.FrequencySetting, l2_clip: float,
                  **fields):
    """The protocol's parameters (`fields` beside the release's) with the
    frequency release at clip `l2_clip` calibrated to the whole budget."""
    result, event = setting.frequency_calibrator(l2_clip)(setting.epsilon)
    return cls(**setting.release_fields(result),
               epsilon=result.epsilon,
               round_event=event,
               event=event,
               **fields)

  def client_values(self, x: tf.Tensor, round_seed: tf.Tensor) -> tf.Tensor:
    """A client's float64 [d] input to the frequency release (TF), from
    its `value_dtype` [d] vector x and the round's public seed."""
    del round_seed
    return tf.cast(x, tf.float64)

  def build_process(self, on_wrap):
    return single_release_process(self, on_wrap)

  def _more_capacities(self):
    return []

  def _describe_parts(self):
    return [f'C={self.clip:g}']


@dataclasses.dataclass(frozen=True)
class FixedClipParameters(SingleReleaseParameters):
  """cPBM with a given clip C (Algorithm 3 as published).

  Attributes (beside `FrequencyParameters`'):
    clip: C.
  """

  clip: float

  protocol: ClassVar[str] = 'fixed'

  @classmethod
  def calibrate(cls, setting: setting_lib.FrequencySetting, *,
                clip: float) -> 'FixedClipParameters':
    """Calibrates cPBM at clip C (in setting_lib.CLIP_RANGE) to the setting's budget."""
    clip = setting_lib.checked_clip(clip)
    return cls._calibrated(setting, clip, clip=clip)


@dataclasses.dataclass(frozen=True)
class NormalizeParameters(SingleReleaseParameters):
  """Table 2's Normalize: x / ||x||_2 through cPBM with C = 1, no rescaling
  (docs/notes/frequency_protocols.md, section on clipping.py, "Normalize":
  the only reading that gives the paper's numbers)."""

  protocol: ClassVar[str] = 'normalize'
  clip: ClassVar[float] = 1.0

  @classmethod
  def calibrate(cls,
                setting: setting_lib.FrequencySetting) -> 'NormalizeParameters':
    """Calibrates Normalize to the setting's budget."""
    return cls._calibrated(setting, cls.clip)

  def client_values(self, x, round_seed):
    del round_seed
    x = tf.cast(x, tf.float64)
    return tf.math.divide_no_nan(x, tensors.overflow_safe_norm(x))

  def simulated_values(self, x, rng):
    del rng
    norms = np.linalg.norm(x, axis=1)
    return x / np.where(norms > 0, norms, 1.0)[:, None]


@dataclasses.dataclass(frozen=True)
class SampleParameters(SingleReleaseParameters):
  """Table 2's Sample(k): each user keeps k of its items drawn without
  replacement (private client randomness), cPBM with C = k (||x||_2 <=
  ||x||_1 <= k, the paper's footnote 7), no rescaling.

  Attributes (beside `FrequencyParameters`'):
    sample_items: k.
  """

  sample_items: int

  protocol: ClassVar[str] = 'sample'

  @classmethod
  def calibrate(cls, setting: setting_lib.FrequencySetting, *,
                sample_items: int) -> 'SampleParameters':
    """Calibrates Sample(k) to the setting's budget."""
    # The clients' top_k takes an int32 k.
    sample_items = checks.integer(sample_items, 'sample_items', 1, 2**31 - 1)
    return cls._calibrated(setting,
                           float(sample_items),
                           sample_items=sample_items)

  @property
  def clip(self) -> float:
    """C = k."""
    return float(self.sample_items)

  def client_values(self, x, round_seed):
    """k item units of x drawn without replacement (a non-finite x: none)."""
    k, dim = self.sample_items, self.dim
    test_seed = self.factory._seed  # pylint: disable=protected-access  # its factory's settings
    x = tf.cast(x, tf.float64)
    counts = tf.cast(tf.maximum(tf.round(x), 0.0), tf.int64)
    counts = tf.where(tf.reduce_all(tf.math.is_finite(x)), counts,
                      tf.zeros_like(counts))
    if test_seed is None:
      noise_seed = entropy_lib.os_entropy_seed()
    else:  # tests only: a function of the round and the input
      digest = tf.bitcast(
          tf.fingerprint(tf.reshape(tf.bitcast(counts, tf.uint8), [1, -1]))[0],
          tf.int64)
      noise_seed = tf.random.experimental.stateless_fold_in(round_seed, digest)
    # A uniformly random k-subset of the item units: the k smallest of
    # iid uniform keys (a random permutation's prefix).
    items = tf.repeat(tf.range(dim, dtype=tf.int64), counts)
    total = tf.shape(items, out_type=tf.int64)[0]
    keys = tf.random.stateless_uniform(tf.reshape(total, [1]),
                                       noise_seed,
                                       dtype=tf.float64)
    keep = tf.minimum(total, k)
    _, chosen = tf.math.top_k(-keys, k=tf.cast(keep, tf.int32))
    picked = tf.gather(items, chosen)
    kept = tf.math.bincount(tf.cast(picked, tf.int32),
                            minlength=dim,
                            maxlength=dim,
                            dtype=tf.int64)
    return tf.reshape(tf.cast(kept, tf.float64), [dim])

  def simulated_values(self, x, rng):
    return fq.sample_items(
        np.asarray(x).astype(np.int64), self.sample_items,
        rng).astype(np.float64)


def client_step(params, seed_type):
  """The client step of a single-release protocol as a TFF computation:
  (x, round seed) -> `params.client_values(x, round seed)`."""

  @tff.tensorflow.computation(params.value_type, seed_type)
  def prepare(x, round_seed):
    return params.client_values(x, round_seed)

  return prepare


def single_release_process(params, on_wrap):
  """The process of one cPBM release of `params.client_values` at the
  clip `params.clip` (`SingleReleaseParameters`)."""
  aggregator = params.factory.create(params.aggregated_type)
  ring = params.ring_capacity()
  f_state_type = aggregator.initialize.type_signature.result.member
  seed_fn = tff.tensorflow.computation(secure_sum.round_seed, f_state_type)
  prepare = client_step(params, seed_fn.type_signature.result)
  clip = float(params.clip)
  meas_type = aggregator.next.type_signature.result.measurements.member

  @tff.tensorflow.computation(meas_type, f_state_type)
  def measure_fn(measurements, f_state):
    count = measurements['participating_clients']
    may_wrap, measurements = computations.checked(ring, on_wrap, count,
                                                  measurements)
    return collections.OrderedDict(status=computations.status_text(
        computations.status_code(tf.cast(count, tf.int64), may_wrap)),
                                   clip=tf.constant(clip, tf.float64),
                                   within_budget=f_state['round'] < 1,
                                   dp_event=measurements['dp_event'],
                                   frequency=measurements)

  @tff.federated_computation
  def initialize():
    return aggregator.initialize()

  @tff.federated_computation(initialize.type_signature.result,
                             tff.FederatedType(params.value_type, tff.CLIENTS))
  def next_fn(state, x):
    seed = tff.federated_map(seed_fn, state)
    prepared = tff.federated_map(prepare, (x, tff.federated_broadcast(seed)))
    output = aggregator.next(state, prepared)
    measurements = tff.federated_map(measure_fn, (output.measurements, state))
    return tff.templates.MeasuredProcessOutput(output.state, output.result,
                                               measurements)

  return rounds_lib.user_facing_process(
      tff.templates.MeasuredProcess(initialize, next_fn))
