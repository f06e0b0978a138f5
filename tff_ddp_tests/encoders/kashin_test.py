"""KashinEncoder: frame, round trip, enforced level, graph mode."""

import math

from absl.testing import parameterized
import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp.encoders import kashin
from tff_ddp.encoders import KashinEncoder
from tff_ddp.encoders import registry

_SEED = tf.constant([3, 9], tf.int64)


def _inputs(d, rng):
  onehot = np.zeros(d)
  onehot[d // 3] = 1.0
  spiky = rng.normal(size=d) * 1e-3
  spiky[:max(1, d // 50)] = 10.0
  return {
      'gaussian': rng.normal(size=d),
      'onehot': onehot,
      'spiky': spiky,
      'constant': np.ones(d),
      'tiny': rng.normal(size=d) * 1e-200
  }


def _norm(v):
  big = np.max(np.abs(v))
  return big * np.linalg.norm(v / big) if big > 0 else 0.0


def _level(y, x, output_dim):
  return np.max(np.abs(y)) * math.sqrt(output_dim) / _norm(x)


class FrameTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((1, 'hadamard'), (5, 'hadamard'), (12, 'dense'),
                            (64, 'hadamard'), (33, 'dense'))
  def test_rows_orthonormal(self, d, frame):
    enc = KashinEncoder(d, frame=frame)
    u = enc.frame_matrix(_SEED).numpy()
    self.assertEqual(u.shape, (d, enc.output_dim))
    self.assertAllClose(u @ u.T, np.eye(d), atol=1e-12)

  def test_frame_is_a_member_given_as_string_or_member(self):
    by_name = KashinEncoder(12, frame='dense')
    by_member = KashinEncoder(12, frame=kashin.Frame.DENSE)
    self.assertIs(by_name.frame, kashin.Frame.DENSE)
    self.assertAllEqual(by_name.frame_matrix(_SEED),
                        by_member.frame_matrix(_SEED))
    self.assertIn("frame='dense'", repr(by_member))
    with self.assertRaisesRegex(
        ValueError, r"frame must be one of \('hadamard', 'dense'\), got "
        r"'random'"):
      KashinEncoder(4, frame='random')

  def test_hadamard_frame_matches_explicit_construction(self):
    d = 6
    enc = KashinEncoder(d)
    big = enc.output_dim
    signs = hadamard.random_signs(
        big,
        tf.random.experimental.stateless_fold_in(_SEED, tf.constant(
            0, tf.int64))).numpy()
    row_signs = hadamard.random_signs(
        d,
        tf.random.experimental.stateless_fold_in(_SEED, tf.constant(
            3, tf.int64))).numpy()
    keys = tf.random.stateless_uniform([big],
                                       tf.random.experimental.stateless_fold_in(
                                           _SEED, tf.constant(1, tf.int64)),
                                       dtype=tf.float64).numpy()
    rows = np.argsort(keys, kind='stable')[:d]
    h = scipy.linalg.hadamard(big) / math.sqrt(big)
    expected = row_signs[:, None] * (h @ np.diag(signs))[rows]
    self.assertAllClose(enc.frame_matrix(_SEED), expected, atol=1e-14)
    x = np.arange(1.0, d + 1)
    y = enc.encode(tf.constant(x), _SEED).numpy()
    self.assertAllClose(expected @ y, x)

  def test_output_dimension(self):
    self.assertEqual(KashinEncoder(1).output_dim, 2)
    self.assertEqual(KashinEncoder(64).output_dim, 128)
    self.assertEqual(KashinEncoder(65).output_dim, 256)
    self.assertEqual(KashinEncoder(64, redundancy=0.5).output_dim, 128)
    self.assertEqual(KashinEncoder(100, redundancy=0.2).output_dim, 128)
    self.assertEqual(KashinEncoder(3, redundancy=4.0).output_dim, 16)

  def test_seeds_give_different_frames(self):
    enc = KashinEncoder(16)
    a = enc.frame_matrix(_SEED)
    b = enc.frame_matrix(tf.constant([3, 10], tf.int64))
    self.assertNotAllClose(a, b)
    self.assertAllEqual(a, enc.frame_matrix(_SEED))


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class RepresentationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((1, 'hadamard'), (2, 'hadamard'), (3, 'hadamard'),
                            (100, 'hadamard'), (1000, 'hadamard'),
                            (1024, 'hadamard'), (100, 'dense'), (300, 'dense'))
  def test_round_trip_and_level(self, d, frame):
    enc = KashinEncoder(d, frame=frame)
    fn = tf.function(enc.encode_with_residual)
    for name, x in _inputs(d, np.random.default_rng(d)).items():
      for s in range(3):
        seed = tf.constant([s, 1], tf.int64)
        y, residual = fn(tf.constant(x), seed)
        y = y.numpy()
        self.assertLessEqual(_level(y, x, enc.output_dim), enc.level, name)
        self.assertLess(residual.numpy(), 1e-9 * _norm(x), name)
        self.assertAllClose(enc.decode(tf.constant(y), seed),
                            x,
                            rtol=1e-9,
                            atol=1e-12 * _norm(x))
        # ||y||_2 >= ||x||_2: U is a contraction.
        self.assertGreaterEqual(_norm(y), (1 - 1e-12) * _norm(x))

  def test_level_enforced_on_adversarial_inputs(self):
    # The frame is public: an adversary can pick x = a frame column (the
    # decode of a one-hot), the worst direction of a frame, or many tries.
    # With one step and a tiny delta nothing converges; the level must
    # still hold and the residual must be reported.
    d = 64
    for enc in (KashinEncoder(d),
                KashinEncoder(d, iterations=1, delta=1.0, eta=0.9),
                KashinEncoder(d, redundancy=0.01, iterations=2)):
      u = enc.frame_matrix(_SEED).numpy()
      candidates = [u[:, k] for k in range(0, enc.output_dim, 7)]
      candidates.append(u @ np.sign(u[0]))  # aligned with a row's signs
      rng = np.random.default_rng(0)
      candidates += [rng.standard_cauchy(size=d) for _ in range(20)]
      for x in candidates:
        y, residual = enc.encode_with_residual(tf.constant(x), _SEED)
        self.assertLessEqual(_level(y.numpy(), x, enc.output_dim), enc.level)
        self.assertAllClose(np.linalg.norm(x - u @ y.numpy()),
                            residual,
                            atol=1e-9)

  def test_one_step_small_delta_keeps_level_reports_residual(self):
    enc = KashinEncoder(256, iterations=1, delta=1.0, eta=0.2)
    x = np.zeros(256)
    x[:4] = 1.0
    y, residual = enc.encode_with_residual(tf.constant(x), _SEED)
    self.assertLessEqual(_level(y.numpy(), x, enc.output_dim), enc.level)
    decoded = enc.decode(y, _SEED).numpy()
    self.assertAllClose(np.linalg.norm(x - decoded), residual, atol=1e-12)

  @parameterized.parameters((1, 'hadamard'), (50, 'hadamard'),
                            (300, 'hadamard'), (40, 'dense'))
  def test_batch_equals_one_by_one(self, d, frame):
    enc = KashinEncoder(d, frame=frame)
    rows = list(_inputs(d, np.random.default_rng(d)).values())
    rows.append(np.zeros(d))  # a zero row next to non-zero ones
    x = np.stack(rows)
    y, residual = enc.encode_batch(tf.constant(x), _SEED)
    self.assertEqual(y.shape, (len(rows), enc.output_dim))
    self.assertEqual(residual.shape, (len(rows),))
    for i, row in enumerate(rows):
      one, one_residual = enc.encode_with_residual(tf.constant(row), _SEED)
      self.assertAllClose(y[i],
                          one,
                          rtol=1e-12,
                          atol=1e-12 * max(_norm(row), 1e-300))
      self.assertAllClose(residual[i],
                          one_residual,
                          atol=1e-12 * max(_norm(row), 1e-300))
    # Graph mode with an unknown batch size.
    fn = tf.function(enc.encode_batch,
                     input_signature=[
                         tf.TensorSpec([None, d], tf.float64),
                         tf.TensorSpec([2], tf.int64)
                     ])
    self.assertAllClose(fn(tf.constant(x), _SEED)[0], y, rtol=1e-12, atol=1e-12)

  def test_batch_bad_dtype(self):
    with self.assertRaisesRegex(TypeError, 'float'):
      KashinEncoder(4).encode_batch(tf.zeros([2, 4], tf.int32), _SEED)

  def test_zero_input(self):
    enc = KashinEncoder(10)
    y, residual = enc.encode_with_residual(tf.zeros([10], tf.float64), _SEED)
    self.assertAllEqual(y, np.zeros(enc.output_dim))
    self.assertEqual(residual.numpy(), 0.0)

  def test_float32(self):
    enc = KashinEncoder(50)
    x = np.random.default_rng(1).normal(size=50).astype(np.float32)
    y = enc.encode(tf.constant(x), _SEED)
    self.assertEqual(y.dtype, tf.float32)
    self.assertAllClose(enc.decode(y, _SEED), x, atol=1e-5)

  def test_graph_equals_eager(self):
    enc = KashinEncoder(37)
    x = tf.constant(np.random.default_rng(2).normal(size=37))
    eager = enc.encode(x, _SEED)
    graph = tf.function(enc.encode)(x, _SEED)
    # Same frame and steps; graph optimizations may reorder float sums.
    self.assertAllClose(eager, graph, rtol=1e-12, atol=1e-12)
    self.assertAllClose(enc.decode(eager, _SEED),
                        tf.function(enc.decode)(eager, _SEED),
                        rtol=1e-12,
                        atol=1e-12)

  def test_eager_equals_traced(self):
    # An eager call runs the encoder's cached tf.function, so eager and
    # traced (tf.function, TFF computation) outputs are the same bits.
    enc = KashinEncoder(300)
    x = tf.constant(np.random.default_rng(3).normal(size=300))
    eager, eager_residual = enc.encode_with_residual(x, _SEED)
    traced, traced_residual = tf.function(enc.encode_with_residual)(x, _SEED)
    self.assertAllEqual(eager.numpy(), traced.numpy())
    self.assertEqual(eager_residual.numpy(), traced_residual.numpy())
    self.assertAllEqual(
        enc.decode(eager, _SEED).numpy(),
        tf.function(enc.decode)(eager, _SEED).numpy())
    batch = tf.stack([x, 2.0 * x])
    self.assertAllEqual(
        enc.encode_batch(batch, _SEED)[0].numpy(),
        tf.function(enc.encode_batch)(batch, _SEED)[0].numpy())
    # Another seed (value and dtype) and batch size reuse or retrace
    # correctly: each call still equals its traced counterpart.
    other = tf.constant([5, 7], tf.int32)
    self.assertAllEqual(
        enc.encode(x, other).numpy(),
        tf.function(enc.encode)(x, other).numpy())
    self.assertNotAllClose(enc.encode(x, other), eager)
    self.assertEqual(
        enc.encode_batch(tf.stack([x] * 3), _SEED)[0].shape,
        [3, enc.output_dim])

  @parameterized.named_parameters(
      ('dim', dict(dim=0), 'dim'),
      ('redundancy', dict(dim=4, redundancy=0.0), 'redundancy'),
      ('redundancy_huge', dict(dim=4, redundancy=1e9), 'output dimension'),
      ('redundancy_inf', dict(dim=4, redundancy=float('inf')), 'redundancy'),
      ('eta', dict(dim=4, eta=1.0), 'eta'),
      ('delta', dict(dim=4, delta=0.0), 'delta'),
      ('iterations', dict(dim=4, iterations=0), 'iterations'),
      ('iterations_many', dict(dim=4, iterations=10**6), 'iterations'),
      ('frame', dict(dim=4, frame='random'), 'frame'),
      ('dense_too_big', dict(dim=5000, frame='dense'), 'hadamard'),
      ('dense_entries', dict(dim=4096, frame='dense',
                             redundancy=100.0), 'entries'),
  )
  def test_bad_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      KashinEncoder(**kwargs)

  @parameterized.named_parameters(
      ('dim_float', dict(dim=2.0), 'dim'), ('dim_bool', dict(dim=True), 'dim'),
      ('eta_string', dict(dim=4, eta='0.5'), 'eta'),
      ('frame_type', dict(dim=4, frame=None), 'frame'))
  def test_bad_argument_types(self, kwargs, message):
    with self.assertRaisesRegex(TypeError, message):
      KashinEncoder(**kwargs)

  def test_numpy_dimension(self):
    self.assertEqual(KashinEncoder(np.int64(12)).dim, 12)

  def test_bad_input_dtype(self):
    with self.assertRaisesRegex(TypeError, 'float'):
      KashinEncoder(3).encode(tf.constant([1, 2, 3]), _SEED)

  def test_registry(self):
    enc = registry.make_encoder('kashin', 10, iterations=3)
    self.assertIsInstance(enc, KashinEncoder)
    self.assertEqual(enc.iterations, 3)
    self.assertFalse(enc.is_isometry)
    self.assertEqual(enc.level, 1.0 / (0.5 * math.sqrt(0.8)))
    for name in ('hadamard', 'none'):
      other = registry.make_encoder(name, 3)
      self.assertTrue(other.is_isometry)
      self.assertIsNone(other.level)
    with self.assertRaisesRegex(ValueError, 'only apply'):
      registry.make_encoder('hadamard', 3, iterations=2)
    with self.assertRaisesRegex(TypeError, 'unexpected keyword'):
      registry.make_encoder('kashin', 3, rotation_type='hd')


@pytest.mark.slow
class LargeRepresentationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(2**12 + 7, 2**16)
  def test_round_trip_large(self, d):
    enc = KashinEncoder(d)
    fn = tf.function(enc.encode_with_residual)
    for name, x in _inputs(d, np.random.default_rng(d)).items():
      y, residual = fn(tf.constant(x), _SEED)
      self.assertLessEqual(_level(y.numpy(), x, enc.output_dim), enc.level,
                           name)
      self.assertLess(residual.numpy(), 1e-9 * _norm(x), name)
