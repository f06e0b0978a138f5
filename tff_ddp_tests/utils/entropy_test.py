"""Noise seeds from kernel entropy, inside TFF's executor and across runs."""

import os
import subprocess
import sys
import uuid
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.utils import entropy
from tff_ddp_tests import harness

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# Prints one round's sum of 8 zero vectors under a DDG factory with the
# default (kernel entropy) noise seeds, after fixing TF's global seed.
_SCRIPT = '''
import numpy as np, tensorflow as tf, tensorflow_federated as tff
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.utils import processes
tf.random.set_seed(1234)
tff.backends.test.set_sync_test_cpp_execution_context()
process = DiscreteGaussianSumFactory(
    noise_multiplier=1.0, expected_clients_per_round=8, bits=20,
    l2_clip=1.0).create(tff.TensorType(np.float32, [16]))
out = process.next(process.initialize(), [np.zeros(16, np.float32)] * 8)
print(repr(np.asarray(out.result, np.float64).tolist()))
processes.release_tff()
'''


class EntropyTest(tf.test.TestCase):

  def test_seed_shape_and_bits(self):
    seeds = np.array([entropy.os_entropy_seed().numpy() for _ in range(64)])
    self.assertEqual(seeds.shape, (64, 2))
    self.assertEqual(seeds.dtype, np.int64)
    self.assertLen({tuple(s) for s in seeds}, 64)
    # Every one of the 128 bit positions varies (the UUID's 6 fixed bits
    # are XORed with the salt): P(a given position is constant over 64
    # draws) = 2^-63.
    bits = np.unpackbits(seeds.view(np.uint8), axis=1)
    self.assertTrue(np.all(bits.min(axis=0) == 0))
    self.assertTrue(np.all(bits.max(axis=0) == 1))

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

  def test_uuid_words_parse_the_file(self):
    path = os.path.join(self.get_temp_dir(), 'uuid')
    with open(path, 'w') as f:
      f.write('0123abcd-ef01-4567-89ab-cdef01234567\n')
    high, low = entropy._uuid_words(tf.constant(path)).numpy()  # pylint: disable=protected-access
    self.assertEqual(int(high) & (2**64 - 1), 0x0123abcdef014567)
    self.assertEqual(int(low) & (2**64 - 1), 0x89abcdef01234567)

  def test_uuid_words_equal_python_parse_of_many_uuids(self):
    # The table-driven parse against Python's int(hex, 16) on 200 random
    # UUIDs (both cases of the hex digits), bit for bit.
    path = os.path.join(self.get_temp_dir(), 'uuid')
    parse = tf.function(entropy._uuid_words)  # pylint: disable=protected-access
    rng = np.random.default_rng(5)
    for i in range(200):
      u = uuid.UUID(bytes=rng.bytes(16), version=4)
      text = str(u).upper() if i % 2 else str(u)
      with open(path, 'w') as f:
        f.write(text + '\n')
      words = parse(tf.constant(path)).numpy().view(np.uint64)
      self.assertEqual((int(words[0]) << 64) | int(words[1]), u.int, text)

  def test_short_uuid_file_fails_loudly(self):
    path = os.path.join(self.get_temp_dir(), 'uuid')
    with open(path, 'w') as f:
      f.write('0123abcd-ef01-4567\n')
    with self.assertRaises(tf.errors.InvalidArgumentError):
      entropy._uuid_words(tf.constant(path))  # pylint: disable=protected-access

  def test_fails_loudly_without_the_kernel_file(self):
    missing = os.path.join(self.get_temp_dir(), 'no_such_dir', 'uuid')
    with mock.patch.object(entropy, 'UUID_PATH', missing):
      with self.assertRaises(tf.errors.NotFoundError):
        entropy.os_entropy_seed()

  def test_check_entropy(self):
    self.assertIsNone(entropy.check_entropy(None))
    with self.assertRaisesRegex(TypeError, 'callable'):
      entropy.check_entropy(42)


@pytest.mark.slow
class TwoProcessesTest(tf.test.TestCase):

  def test_two_processes_with_the_same_tf_seed_draw_different_noise(self):
    runs = []
    for _ in range(2):
      result = subprocess.run(
          [sys.executable, '-c', _SCRIPT], cwd=_ROOT, capture_output=True,
          text=True, timeout=600, check=True,
          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
      runs.append(eval(result.stdout.strip().splitlines()[-1]))  # pylint: disable=eval-used
    self.assertNotEqual(runs[0], runs[1])


if __name__ == '__main__':
  harness.main()
