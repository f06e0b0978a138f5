"""Noise seeds from kernel entropy (inside TFF's executor and across runs:
tff_ddp_tests/aggregators/core_in_tff_test.py)."""

import os
import uuid
from unittest import mock

import numpy as np
import tensorflow as tf

from tff_ddp.utils import entropy

_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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

  def test_uuid_words_parse_the_file(self):
    path = os.path.join(self.get_temp_dir(), 'uuid')
    with open(path, 'w', encoding='utf-8') as f:
      f.write('0123abcd-ef01-4567-89ab-cdef01234567\n')
    high, low = entropy._uuid_words(tf.constant(path)).numpy()  # pylint: disable=protected-access  # tests a private part
    self.assertEqual(int(high) & (2**64 - 1), 0x0123abcdef014567)
    self.assertEqual(int(low) & (2**64 - 1), 0x89abcdef01234567)

  def test_uuid_words_equal_python_parse_of_many_uuids(self):
    # The table-driven parse against Python's int(hex, 16) on 200 random
    # UUIDs (both cases of the hex digits), bit for bit.
    path = os.path.join(self.get_temp_dir(), 'uuid')
    parse = tf.function(entropy._uuid_words)  # pylint: disable=protected-access  # tests a private part
    rng = np.random.default_rng(5)
    for i in range(200):
      u = uuid.UUID(bytes=rng.bytes(16), version=4)
      text = str(u).upper() if i % 2 else str(u)
      with open(path, 'w', encoding='utf-8') as f:
        f.write(text + '\n')
      words = parse(tf.constant(path)).numpy().view(np.uint64)
      self.assertEqual((int(words[0]) << 64) | int(words[1]), u.int, text)

  def test_short_uuid_file_fails_loudly(self):
    path = os.path.join(self.get_temp_dir(), 'uuid')
    with open(path, 'w', encoding='utf-8') as f:
      f.write('0123abcd-ef01-4567\n')
    with self.assertRaises(tf.errors.InvalidArgumentError):
      entropy._uuid_words(tf.constant(path))  # pylint: disable=protected-access  # tests a private part

  def test_fails_loudly_without_the_kernel_file(self):
    missing = os.path.join(self.get_temp_dir(), 'no_such_dir', 'uuid')
    with mock.patch.object(entropy, 'UUID_PATH', missing):
      with self.assertRaises(tf.errors.NotFoundError):
        entropy.os_entropy_seed()

  def test_check_entropy(self):
    self.assertIsNone(entropy.check_entropy(None))
    with self.assertRaisesRegex(TypeError, 'callable'):
      entropy.check_entropy(42)
