"""The core's samplers, encoders and events inside TFF computations, and
the DDG sampler beside TF Privacy's: what only the TFF stack can check.

The core (tff_ddp.mechanisms, .encoders, .accounting) is tested without TFF
in its own modules; these tests need TFF 0.87's C++ worker (no XLA, no
custom ops) or TF Privacy, which install only on Python 3.11.
"""

import collections
import math
import os
import subprocess
import sys

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_privacy.privacy.dp_query import discrete_gaussian_utils
from tff_ddp import accounting
from tff_ddp.accounting import event_io
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.mechanisms import binomial
from tff_ddp.mechanisms import discrete_gaussian as dg
from tff_ddp.mechanisms import discrete_gaussian_table as dt
from tff_ddp.mechanisms import poisson
from tff_ddp.utils import entropy
from tff_ddp_tests.accounting import event_io_test
from tff_ddp_tests.mechanisms import binomial_test
from tff_ddp_tests.mechanisms import discrete_gaussian_table_test as dgt

_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SamplersInTffTest(tf.test.TestCase):
  """Each sampler runs inside a TFF TensorFlow computation (TFF's worker)
  and gives there the draws it gives eagerly for the same seed."""

  @pytest.mark.slow
  def test_skellam(self):

    @tff.tensorflow.computation(tff.TensorType(np.int64, [2]))
    def sample(seed):
      return poisson.sample_skellam([3, 4], 5e4, seed)

    out = np.asarray(sample(np.array([4, 2], np.int64)))
    self.assertEqual(out.shape, (3, 4))
    self.assertAllEqual(out, poisson.sample_skellam([3, 4], 5e4, [4, 2]))

  def test_binomial(self):

    @tff.tensorflow.computation(tff.TensorType(np.float64, [6]),
                                tff.TensorType(np.int64, [2]))
    def sample(probs, seed):
      return binomial.sample_binomial(probs, 2**16, seed)

    probs = np.array([0.25, 0.3, 0.5, 0.7, 0.75, binomial_test.P54])
    out = np.asarray(sample(probs, np.array([4, 2], np.int64)))
    self.assertAllInRange(out, 0, 2**16)
    self.assertAllEqual(out,
                        binomial.sample_binomial(probs, 2**16, [4, 2]).numpy())

  def test_discrete_gaussian_table(self):

    @tff.tensorflow.computation(tff.TensorType(np.int64, [2]))
    def noise(seed):
      return dt.sample_discrete_gaussian_table([500], 785.0, seed)

    a = noise(np.array([7, 8], np.int64))
    self.assertEqual(a.dtype, np.int64)
    self.assertEqual(a.shape, (500,))
    self.assertAllEqual(a, noise(np.array([7, 8], np.int64)))
    self.assertAllEqual(a,
                        dt.sample_discrete_gaussian_table([500], 785.0, [7, 8]))
    b = noise(np.array([7, 9], np.int64))
    self.assertGreater(np.mean(a != b), 0.9)


def _through_tff(structure_fn):
  """Runs structure_fn inside a TFF TensorFlow computation, returns it."""

  @tff.tensorflow.computation
  def comp():
    return structure_fn()

  return comp()


class EventsInTffTest(tf.test.TestCase, parameterized.TestCase):
  """DP events survive TFF measurements (and TFF's Struct) unchanged."""

  @parameterized.named_parameters(*event_io_test.EVENTS.items())
  def test_round_trip_through_a_tff_computation(self, event):
    measurements = _through_tff(lambda: collections.OrderedDict(
        other=tf.constant(1.0), dp_event=event_io.event_structure(event)))
    self.assertEqual(accounting.extract_dp_event(measurements), event)

  def test_overrides_replace_num_clients_in_a_tff_computation(self):
    event = event_io_test.EVENTS['nested']
    measured = _through_tff(lambda: event_io.event_structure(
        event, {'num_clients': tf.constant(3, tf.int64)}))
    rebuilt = accounting.extract_dp_event(measured)
    self.assertEqual(rebuilt.event.events[0].num_clients, 3)
    self.assertEqual(rebuilt.event.events[1].num_clients, 3)

  def test_as_mapping_reads_a_tff_struct(self):
    struct = tff.structure.Struct([('a', 1), ('b', 2)])
    self.assertEqual(list(event_io.as_mapping(struct)), ['a', 'b'])


@pytest.mark.slow  # end to end: `make test` runs it
class DdgWithDftTest(tf.test.TestCase):

  def test_sum_at_2_pow_k_plus_1(self):
    # d = 2^4 + 1: the DFT pads to 18, the secure sum carries 18 integers.
    d = 17
    values = [
        np.linspace(-1, 1, d).astype(np.float32) * s for s in (0.5, -0.25, 1.0)
    ]
    factory = DiscreteGaussianSumFactory.from_tff_arguments(
        noise_multiplier=0.0,
        expected_clients_per_round=3,
        bits=20,
        l2_clip=10.0,
        rotation_type='dft')
    mechanism = factory.mechanism(tff.TensorType(np.float32, [d]))
    self.assertEqual(mechanism.output_dim, 18)
    process = factory.create(tff.TensorType(np.float32, [d]))
    output = process.next(process.initialize(), values)
    # Rounding only: each client's scaled vector moves by < 1 per
    # coordinate in the ring, i.e. < gamma per coordinate after decoding.
    self.assertAllClose(output.result,
                        np.sum(values, axis=0),
                        atol=3 * d**0.5 * mechanism.gamma)


# Prints one round's sum of 8 zero vectors under a DDG factory with the
# default (kernel entropy) noise seeds, after fixing TF's global seed.
_SCRIPT = '''
import numpy as np, tensorflow as tf, tensorflow_federated as tff
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.utils import processes
tf.random.set_seed(1234)
tff.backends.test.set_sync_test_cpp_execution_context()
process = DiscreteGaussianSumFactory.from_tff_arguments(
    noise_multiplier=1.0, expected_clients_per_round=8, bits=20,
    l2_clip=1.0).create(tff.TensorType(np.float32, [16]))
out = process.next(process.initialize(), [np.zeros(16, np.float32)] * 8)
print(repr(np.asarray(out.result, np.float64).tolist()))
processes.release_tff()
'''


class EntropyInTffTest(tf.test.TestCase):

  def test_fresh_in_tff_computations(self):

    @tff.tensorflow.computation(np.float32)
    def two_seeds(unused):
      del unused
      return entropy.os_entropy_seed(), entropy.os_entropy_seed()

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def seeds(values):
      return tff.federated_map(two_seeds, values)

    first = seeds([0.0, 1.0, 2.0])
    second = seeds([0.0, 1.0, 2.0])
    words = [tuple(s) for pair in first + second for s in pair]
    # Not folded into a constant, not merged, not shared between clients.
    self.assertLen(set(words), 12)

  @pytest.mark.slow
  def test_two_processes_with_the_same_tf_seed_draw_different_noise(self):
    runs = []
    for _ in range(2):
      result = subprocess.run([sys.executable, '-c', _SCRIPT],
                              cwd=_ROOT,
                              capture_output=True,
                              text=True,
                              timeout=600,
                              check=True,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
      runs.append(eval(result.stdout.strip().splitlines()[-1]))  # pylint: disable=eval-used  # parses the child's printed repr
    self.assertNotEqual(runs[0], runs[1])


class TfPrivacySamplerTest(tf.test.TestCase, parameterized.TestCase):
  """The peer: TF Privacy's discrete Gaussian sampler, as TFF's DDG calls it
  (TF Privacy installs only beside TFF 0.87, on Python 3.11)."""

  @parameterized.parameters((0.7, 31), (3.3, 32))
  def test_tf_privacy_variance_is_that_of_the_rounded_up_scale(
      self, scale, seed):
    # TF Privacy's sampler (as TFF's DDG calls it) needs an integer scale and
    # gets ceil(scale): its variance is ceil(scale)^2, not s ~= scale^2.
    n = 200_000
    s = float(dg.discrete_gaussian_variance_parameter(scale))
    rounded = math.ceil(scale)
    tf.random.set_seed(seed)
    theirs = tf.function(
        lambda: discrete_gaussian_utils.sample_discrete_gaussian(
            rounded, [n], tf.int64))().numpy()
    ours = dgt._sample(n, scale, [seed, 0])
    for sample, variance_parameter in ((ours, s), (theirs, rounded**2)):
      support, pmf = dgt._float_pmf(variance_parameter)
      var, m4 = dgt._moments(support, pmf)
      se = math.sqrt((m4 - var**2) / n)
      self.assertLess(abs(np.var(sample) - var), dgt._Z * se)
    # ... and TF Privacy's sample variance is far from Var N_Z(0, s).
    support, pmf = dgt._float_pmf(s)
    var_s, m4_s = dgt._moments(support, pmf)
    se_s = math.sqrt((m4_s - var_s**2) / n)
    self.assertGreater(abs(np.var(theirs) - var_s), 50 * se_s)
    self.assertGreater(np.var(theirs) / np.var(ours), 1.4)
