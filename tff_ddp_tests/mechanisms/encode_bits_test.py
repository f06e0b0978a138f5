"""The DDG client encode and its parts: exact where the outputs are defined.

Outputs that a seed defines on every machine are pinned (SHA-256 of their
bytes, first 16 hex digits): ring residues of integers, the sign pattern,
the randomized rounding of a given float vector, the seeded noise at a given
scale. Float outputs of TensorFlow's kernels are not defined that way: the
Walsh-Hadamard transform is a chain of matrix products and a norm is a
reduction, whose summation order (so the last bits of the result) depends on
the instruction set (float32 transforms differ between AVX2 and AVX-512).
Those are checked on the running machine:

* against the form a rewrite replaced (`_tensordot_fwht`, `_select_clip`),
  bit for bit, since the rewrite claims identical outputs;
* against a numpy reference (float64 or long double) within a bound
  derived from floating-point error analysis (`_gamma` and the functions
  after it say how);
* the client encode in two stages: the float stage (clip, scale, rotation)
  within such bounds, and the integer stage (randomized rounding with the
  seeded coins, the seeded noise, the ring residue) bit for bit against
  numpy fed this machine's rotated vector and the same draws.

A pinned output changes only with a change of what the seed defines, which
its commit must say. Regenerate the pins: `.venv/bin/python -m
tff_ddp_tests.mechanisms.encode_bits_test --print-pins`.
"""

import collections
import contextlib
import dataclasses
import hashlib
import math
import sys
from unittest import mock

from absl.testing import parameterized
import numpy as np
import scipy.linalg
import tensorflow as tf

from tff_ddp.encoders import hadamard
from tff_ddp.encoders import registry
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import discrete_gaussian
from tff_ddp.mechanisms import discrete_gaussian_table
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import distributed_skellam
from tff_ddp.mechanisms import rounding
from tff_ddp.mechanisms import skellam_table
from tff_ddp.utils import tensors
from tff_ddp_tests.mechanisms import ddg_parameters


def _digest(*arrays) -> str:
  h = hashlib.sha256()
  for a in arrays:
    a = np.asarray(a)
    h.update(str(a.dtype).encode() + str(a.shape).encode())
    h.update(np.ascontiguousarray(a).tobytes())
  return h.hexdigest()[:16]


def _normal(seed, shape, scale=1.0):
  return np.random.default_rng(seed).normal(size=shape) * scale


def _seed(a, b):
  return tf.constant([a, b], tf.int64)


# --- Floating-point error analysis.
#
# Round to nearest: a float operation's result is the exact one times
# (1 + d), |d| <= u, for results in the normal range. TF flushes results
# below the smallest normal number to zero (an absolute error below it).
# The references run in float64 or in x86-64's long double (64-bit
# significand).

_LONG = np.longdouble
_UNIT = {np.float32: 2.0**-24, np.float64: 2.0**-53, _LONG: 2.0**-64}
_TINY = {np.float32: 2.0**-126, np.float64: 2.0**-1022}


def _gamma(k, u):
  """gamma_k = k u / (1 - k u): a product of k factors (1 + d)^(+-1) with
  |d| <= u is within gamma_k of 1 (Higham, "Accuracy and Stability of
  Numerical Algorithms", 2nd ed., Lemma 3.1); (1 + gamma_j)(1 + gamma_k)
  <= 1 + gamma_(j+k)."""
  return k * u / (1.0 - k * u)


def _block_roundings(d: int) -> int:
  """K = sum (m - 1) over the Sylvester blocks m of `fast_walsh_hadamard`
  (16, ..., 16, 2^r): the most roundings one term of an output meets."""
  return sum(m - 1 for m in hadamard._block_sizes(d))  # pylint: disable=protected-access  # tests a private part


def _transform_error(adds: int, scalar: int, u: float) -> float:
  """Relative error, against S / sqrt(D), of one output of a normalised
  Walsh-Hadamard transform: |y^_i - (H a)_i| <= this * S / sqrt(D),
  S = sum_j |a_j|, whatever the summation order.

  An unnormalised output t_i is a sum of D terms +-a_j (products by +-1
  are exact, as plain products or as fused multiply-adds). A float sum of
  m terms in any order is sum_j a_j (1 + t_j) with |t_j| <= gamma_(m-1)
  (Higham eq. (4.4)); summed in stages (one per Sylvester block, or one
  per butterfly level) a term meets at most `adds` roundings, so
  |t^_i - t_i| <= gamma_adds S. The factor 1/sqrt(D) and its products
  (a division by fl(sqrt(D)); or signs +-fl(1/fl(sqrt(D))) times the
  input; a later scale) add `scalar` roundings relative to t^_i, and
  |t_i| <= S: |y^_i - t_i / sqrt(D)| <= ((1 + gamma_adds)(1 + gamma_scalar)
  - 1) S / sqrt(D).
  """
  return (1.0 + _gamma(adds, u)) * (1.0 + _gamma(scalar, u)) - 1.0


def _l1(a) -> float:
  """sum |a_j| rounded up: float64 sums of D terms >= 0 are within
  gamma_D (Higham eq. (4.4)). Over the last axis, per row."""
  d = np.shape(a)[-1]
  return np.sum(np.abs(np.asarray(a, np.float64)),
                axis=-1) * (1.0 + _gamma(d, _UNIT[np.float64]))


def _butterfly(x) -> np.ndarray:
  """The unnormalised Walsh-Hadamard transform along the last axis in
  float64 by log2(D) butterfly levels: the independent reference (natural
  Sylvester order, as scipy.linalg.hadamard). Each term meets log2(D)
  roundings."""
  y = np.array(x, np.float64)
  shape, d, h = y.shape, y.shape[-1], 1
  while h < d:
    y = y.reshape(shape[:-1] + (d // (2 * h), 2, h))
    y = np.stack([y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]],
                 axis=-2)
    h *= 2
  return y.reshape(shape)


def _rotation_tolerance(a, dtype, scalar_tf, scalar_ref, scale=1.0):
  """Per coordinate: how far the TF transform (in `dtype`,
  `_block_roundings`, `scalar_tf` scalar roundings) of `a` and the
  float64 butterfly reference (`scalar_ref` of them) can be apart, both
  within `_transform_error` of the exact value, times |scale|; plus TF's
  flushed subnormals: each of a coordinate's D products and D - 1 sums
  may lose less than the smallest normal number."""
  a = np.asarray(a)
  d = a.shape[-1]
  error = (_transform_error(_block_roundings(d), scalar_tf, _UNIT[dtype]) +
           _transform_error(d.bit_length() - 1, scalar_ref, _UNIT[np.float64]))
  bound = error * _l1(a) / math.sqrt(d) * (1.0 + 4 * _UNIT[np.float64])
  return (bound + 2 * d * _TINY[dtype]) * abs(scale)


def _assert_within(test, got, want, tolerance, what):
  got = np.asarray(got, np.float64)
  want = np.asarray(want, np.float64)
  error = np.abs(got - want)
  worst = np.argmax(error - np.broadcast_to(tolerance, error.shape))
  test.assertTrue(
      np.all(error <= tolerance),
      f'{what}: |got - reference| = {error.flat[worst]!r} > '
      f'{np.broadcast_to(tolerance, error.shape).flat[worst]!r} at '
      f'{worst}')


# --- The Walsh-Hadamard transform.


def _tensordot_fwht(x):
  """`hadamard.fast_walsh_hadamard` in the form the matmul chain replaced:
  one `tensordot` per Sylvester block (scipy's Sylvester matrices), the
  contracted axis moved last each time. Kept as the oracle of the claim
  that the chain of matmuls gives the same bits."""
  d = int(x.shape[-1])
  k = d.bit_length() - 1
  dims = []
  while k > 0:
    step = min(4, k)
    dims.append(2**step)
    k -= step
  y = tf.reshape(x, [-1] + (dims or [1]))
  for m in dims:
    y = tf.tensordot(y,
                     tf.constant(scipy.linalg.hadamard(m), x.dtype),
                     axes=[[1], [0]])
  shape = [d] if x.shape.rank == 1 else x.shape.as_list()
  return tf.reshape(y, shape) / tf.constant(math.sqrt(d), dtype=x.dtype)


def _fwht_cases():
  """name -> float input of `fast_walsh_hadamard`."""
  cases = {}
  for d in (1, 2, 4, 16, 32, 64, 512, 2048):
    for dtype in (np.float64, np.float32):
      cases[f'{d}_{dtype.__name__}'] = _normal(d, [d], 7.0).astype(dtype)
  for shape in ((3, 256), (2, 3, 32), (5, 1)):
    for dtype in (np.float64, np.float32):
      cases[f'batch_{"x".join(map(str, shape))}_{dtype.__name__}'] = (_normal(
          len(shape), shape).astype(dtype))
  return cases


# --- The clip.


def _select_clip(v, clip):
  """`tensors.clip_to_norm` in the form it replaced (|v| copied for the
  largest magnitude, the clipped and unclipped vectors selected
  element-wise): the oracle of the claim that the one-pass clip gives the
  same bits."""
  big = tf.reduce_max(tf.abs(v))
  positive = big > 0
  safe = tf.where(positive, big, tf.ones_like(big))
  unit = v / safe
  unit_norm = tf.norm(unit)
  clipped = positive & (unit_norm > clip / safe)
  scaled = unit * (clip / tf.where(clipped, unit_norm, tf.ones_like(big)))
  return tf.where(clipped, scaled, v), clipped


_CLIP_CASES = {
    'inside': (_normal(0, [50], 0.01), 1.0),
    'outside': (_normal(1, [50], 3.0), 1.0),
    'huge': (np.array([1e200, -3e199, 1.0, 0.0]), 2.5),
    'tiny': (np.array([1e-300, -2e-310, 0.0]), 1e-305),
    'zeros': (np.zeros(7), 1.0),
}


def _clip_reference(x, clip):
  """(x clipped to l2 norm `clip`, in long double; the norm)."""
  x = np.asarray(x, np.float64).astype(_LONG)
  norm = np.sqrt(np.sum(x * x))
  return (x * (_LONG(clip) / norm) if norm > clip else x), norm


def _clip_error(d, u, extra=0):
  """Relative error of each clipped coordinate, float of unit roundoff u.

  fl(v / big) (one rounding), the norm of those d units (d squares and
  d - 1 sums of terms >= 0: the sum within gamma_d; its sqrt one more; the
  units' own rounding one more: gamma_(d+2)), fl(clip / norm) and its
  product with the unit (two more), and `extra` later products (the
  mechanism's scale): (1 + gamma_(3+extra)) / (1 - gamma_(d+2)) - 1. The
  direct path of `clip_and_scale` (sqrt of the plain sum of squares, one
  factor) does fewer operations."""
  return (1.0 + _gamma(3 + extra, u)) / (1.0 - _gamma(d + 2, u)) - 1.0


def _assert_decided(test, norm, clip, d, what):
  """The clip decision is the same for the exact and any computed norm:
  they are within gamma_(d+4) (`_clip_error`, and clip / big rounded)."""
  test.assertGreater(
      abs(float(norm) - clip),
      2 * _gamma(d + 4, _UNIT[np.float64]) * max(float(norm), clip),
      f'{what}: undecided clip')


# --- The mechanisms.

_MECHANISMS = {
    'padded_table':
        ddg_parameters.make,
    'power_of_two_exact':
        lambda: ddg_parameters.make(
            dim=64, noise_multiplier=0.5, noise_sampler='exact'),
    'no_noise_beta0':
        lambda: ddg_parameters.make(dim=30, noise_multiplier=0.0, beta=0.0),
    'bits30_beta0':
        lambda: ddg_parameters.make(
            dim=40, bits=30, beta=0.0, expected_clients_per_round=50),
    'linf_granularity':
        lambda: ddg_parameters.make(dim=24,
                                    encoder=registry.Identity(24),
                                    granularity=0.01,
                                    linf_clip=0.3,
                                    bits=20),
    'integer_inputs':
        lambda: ddg.compute_parameters(5,
                                       ddg.Request(l2_clip=math.sqrt(3.0),
                                                   noise_multiplier=1.0,
                                                   expected_clients_per_round=4,
                                                   bits=16,
                                                   granularity=0.25,
                                                   linf_clip=1.0),
                                       encoder=registry.Identity(5),
                                       integer_inputs=True),
    'kashin':
        lambda: ddg_parameters.make(
            dim=12, encoder=registry.make_encoder('kashin', 12)),
    'skellam':
        lambda: distributed_skellam.compute_parameters(
            20,
            distributed_skellam.Request(l2_clip=1.0,
                                        noise_multiplier=1.0,
                                        expected_clients_per_round=10,
                                        bits=16)),
}

# What each mechanism decides exactly (its path, its sampler, its ring),
# and its gamma and noise scale (the DDG's sigma/gamma, the Skellam's
# Poisson mean), with the relative tolerance of a few scalar operations
# (erfcinv, sqrt, hypot, each within an ulp or two; 1e-12 is far wider).
# The noise scale is written out: the seeded noise is pinned at it
# (`_NOISE_PINS`), whatever the last bits of the computed scale.
_Expected = collections.namedtuple(
    '_Expected', 'float32_rotation sampler output_dim bits gamma scale')
_PARAMETERS = {
    'padded_table':
        _Expected(True, 'table', 128, 16, 0.00015846311473826695,
                  1995.5922647308203),
    'power_of_two_exact':
        _Expected(True, 'exact', 64, 16, 0.00015984709834922909,
                  989.1570422065251),
    'no_noise_beta0':
        _Expected(False, 'table', 32, 16, 0.00020988952287214515, 0.0),
    'bits30_beta0':
        _Expected(True, 'exact', 64, 30, 4.5868530412291965e-08,
                  3083189.170573711),
    'linf_granularity':
        _Expected(False, 'table', 24, 20, 0.01, 31.622776601683793),
    'integer_inputs':
        _Expected(False, 'table', 5, 16, 0.25, 3.4641016151377544),
    'kashin':
        _Expected(False, 'table', 32, 16, 0.00024114470259820284,
                  1311.361031818887),
    'skellam':
        _Expected(True, 'table', 32, 16, 0.00024114470259820284,
                  859833.8778867722),
}

_SAMPLERS = {
    (ddg.DistributedDiscreteGaussian, 'table'):
        discrete_gaussian_table.sample_discrete_gaussian_table,
    (ddg.DistributedDiscreteGaussian, 'exact'):
        discrete_gaussian.sample_discrete_gaussian,
    (distributed_skellam.DistributedSkellam, 'table'):
        skellam_table.sample_skellam_table,
}


def _scale_of(p):
  return getattr(p, 'poisson_mean', p.scaled_local_stddev)


def _inputs(p):
  """Inputs that reach every branch: small, clipped, huge, non-finite, 0."""
  d = p.dim
  huge = _normal(d + 1, [d], 0.1)
  huge[d // 2] = 1e200
  nonfinite = _normal(d + 2, [d])
  nonfinite[-1] = np.nan
  xs = [
      _normal(d, [d], 0.01),
      _normal(d, [d], 5.0), huge, nonfinite,
      np.zeros(d)
  ]
  if p.integer_inputs:
    xs += [np.array([1.0, 0.0, -1.0, 1.0, 0.0]), np.array([1.0] * 5)]
  return xs


_ROUND_SEED = (11, 12)


def _noise_seed(i):
  return _seed(i, 99)


def _subseeds(noise_seed):
  """(rounding seed, sampling seed) of a client, derived here as the
  mechanism documents it (`stateless_split` of its seed into two)."""
  seeds = tf.random.experimental.stateless_split(noise_seed, 2)
  return seeds[0], seeds[1]


def _coins(seed, attempt, size):
  """The 32-bit words of a rounding attempt: Philox under fold_in(seed,
  attempt), drawn here without the mechanism's code."""
  return tf.random.stateless_uniform(
      [size],
      seed=tf.random.experimental.stateless_fold_in(
          seed, tf.constant(attempt, tf.int64)),
      dtype=tf.int32,
      minval=None,
      maxval=None).numpy()


def _reference_round(x, threshold, seed, max_attempts):
  """Conditional randomized rounding in numpy with the same coins: up iff
  r < frac(x) 2^k, r the low k bits (k = 24 float32, 31 float64), retried
  until ||x~||^2 <= threshold. Every step is exact or one correctly
  rounded operation of x's dtype, as in TF: the same integers anywhere.
  Returns (x~ int64, attempts, ok)."""
  x = np.asarray(x)
  bits = 24 if x.dtype == np.float32 else 31
  two_k = x.dtype.type(2**bits)
  for attempt in range(max_attempts):
    r = (_coins(seed, attempt, x.size) & (2**bits - 1)).astype(x.dtype)
    floor = np.floor(x)
    rounded = floor.astype(np.int64) + (r < (x - floor) * two_k)
    if np.sum(rounded * rounded) <= threshold:
      return rounded, attempt + 1, True
  return np.zeros(x.size, np.int64), max_attempts, False


def _reference_scale(x, p):
  """x' of `clip_and_scale` in long double: (x', finite, clipped, norm).

  The clip decision compares the norm with the clip. For small integers
  it is exactly defined: their squares and sums are exact in any order and
  sqrt is correctly rounded, so TF's norm is math.sqrt of the exact sum
  (`norm` is then that float, else the long double norm, and the caller
  checks that the decision has a margin)."""
  x = np.asarray(x, np.float64)
  finite = bool(np.all(np.isfinite(x)))
  beyond = False
  if not finite:
    x = np.zeros_like(x)
  if p.linf_clip is not None:
    beyond = bool(np.any(np.abs(x) > p.linf_clip))
    x = np.clip(x, -p.linf_clip, p.linf_clip)
  clipped_x, norm = _clip_reference(x, p.l2_clip)
  if np.all(x == np.round(x)) and np.all(np.abs(x) < 2**20):
    norm = math.sqrt(math.fsum(v * v for v in x))
    clipped_x = x.astype(_LONG)
    if norm > p.l2_clip:
      clipped_x, _ = _clip_reference(x, p.l2_clip)
  # x' = x clipped, times 1/gamma; on the float32 path times (1 - 2 eps)
  # too, eps the rotation's proved error; the integer 1/gamma for integer
  # inputs (docs/notes/ddg_encode.md, "Precision"; the DDG's `input_scale`).
  if p.integer_inputs:
    scale = _LONG(round(1.0 / p.gamma))
  elif p.float32_rotation:
    scale = (_LONG(1.0) / _LONG(p.gamma)) * (1 -
                                             2 * _LONG(p.encoder.float32_error))
  else:
    scale = _LONG(1.0) / _LONG(p.gamma)
  return (clipped_x * scale, finite, bool(norm > p.l2_clip) or beyond, norm)


def _kashin_error(d_out, levels, eps_analysis, eps_synthesis, eps_level, u,
                  norms):
  """Bounds on ||y^ - y||_2 and on every ||r^_j - r_j||_2, ||t^_j - t_j||_2
  of a computed Kashin iteration (docs/notes/kashin_encoder.md,
  "Algorithm": t = clip(U^T r, +-m_j), y += t, r -= U t), y the exact
  iteration on the same x, D = d_out.

  A computed analysis is within eps_analysis ||v|| of U^T v (l2), a
  synthesis within eps_synthesis ||w|| of U w, each level within
  eps_level m_j; ||U|| = ||U^T|| = 1 and the clip is 1-Lipschitz in its
  argument and in its level, so with e_r, e_y the errors so far (l2):
    e_t <= e_r + eps_a (||r|| + e_r) + sqrt(D) eps_level m_j,
    e_y <- e_y + e_t + u (||y_(j+1)|| + e_y + e_t),
    e_r <- e_r + e_t + s + u (||r_(j+1)|| + e_r + e_t + s),
  s = eps_s (||t|| + e_t) (the rounded sums and differences add u each).
  `norms` bounds ||r_j||, ||t_j||, ||y_(j+1)||, ||r_(j+1)|| of the exact
  iteration per step, and `levels` its levels m_j."""
  e_r = e_y = e_any = 0.0
  for (r_norm, t_norm, y_next, r_next), m in zip(norms, levels):
    e_t = e_r + eps_analysis * (r_norm + e_r) + math.sqrt(d_out) * (eps_level *
                                                                    m)
    e_y = e_y + e_t + u * (y_next + e_y + e_t)
    s = eps_synthesis * (t_norm + e_t)
    e_r = e_r + e_t + s + u * (r_next + e_r + e_t + s)
    e_any = max(e_any, e_t, e_y, e_r)
  return e_y, e_any


def _wht_l2_error(d, u):
  """Relative l2 error of `fast_walsh_hadamard` (unit roundoff u): per
  Sylvester block m, an output is a sum of m terms (gamma_(m-1) of their
  l1 norm, <= sqrt(m) their l2 norm) and the block's exact product has
  norm sqrt(m) times its input's: sqrt(m) gamma_(m-1) per stage, relative
  errors compounding; the division by fl(sqrt(D)) adds two roundings."""
  total = 1.0 + _gamma(2, u)
  for m in hadamard._block_sizes(d):  # pylint: disable=protected-access  # tests a private part
    total *= 1.0 + math.sqrt(m) * _gamma(m - 1, u)
  return total - 1.0


def _exact_frame(encoder, seed):
  """The frame U of a Kashin encoder's seed in long double: sign(U^) /
  sqrt(D), U^ the encoder's synthesis of the unit vectors (what its
  `frame_matrix` returns, in one batched call: entries
  +-fl(1/fl(sqrt(D))), whose signs are exact), each entry within two long
  double roundings of U's."""
  _, synthesis = encoder._frame_ops(seed, tf.float64)  # pylint: disable=protected-access  # tests a private part
  columns = synthesis(tf.eye(encoder.output_dim, dtype=tf.float64)).numpy()
  return np.sign(columns.T).astype(_LONG) / np.sqrt(_LONG(encoder.output_dim))


def _kashin_reference(encoder, frame, x):
  """(y, bound): Kashin's representation of float64 `x` in long double by
  the frame `_exact_frame`, and a bound on ||encoder.encode(x) - y||_2:
  TF's error and this reference's, each against the exact iteration
  (`_kashin_error`)."""
  d, d_out = encoder.dim, encoder.output_dim
  u_long = _UNIT[_LONG]
  x = np.asarray(x, np.float64).astype(_LONG)
  unit = np.sqrt(np.sum(x * x)) / np.sqrt(_LONG(d_out))
  levels = [float(unit) * level for level in encoder.levels()]
  y = np.zeros(d_out, _LONG)
  r = x
  steps = []
  for level in encoder.levels():
    m = unit * _LONG(level)
    t = np.clip(frame.T @ r, -m, m)
    y = y + t
    r_next = r - frame @ t
    steps.append([float(np.sqrt(np.sum(v * v))) for v in (r, t, y, r_next)])
    r = r_next
  # This reference against the exact iteration: each long double product
  # U^T r (d terms) or U t (D terms) within gamma of its |U| |v|, and
  # || |U| ||_2 = sqrt(d); U's entries within two roundings of +-1/sqrt(D).
  # (Its own norms and levels stand for the exact ones here, with a slack
  # far above its relative error, ~1e-17.)
  slack = 1.0 + 1e-12
  levels = [m * slack for m in levels]
  ref, ref_any = _kashin_error(d_out, levels,
                               _gamma(d + 2, u_long) * math.sqrt(d),
                               _gamma(d_out + 2, u_long) * math.sqrt(d),
                               _gamma(d + 4, u_long), u_long,
                               [[v * slack for v in step] for step in steps])
  # The exact iteration's norms, bounded by this reference's.
  exact = [[(v + ref_any) * slack for v in step] for step in steps]
  # TF in float64: analysis and synthesis are one `fast_walsh_hadamard`
  # each (the scatter, gather and +-1 signs are exact); the level is
  # overflow_safe_norm(x) / fl(sqrt(D)) * level: x / big, d squares and
  # sums, sqrt, * big, / fl(sqrt(D)) (two), * level: gamma_(d+6).
  u = _UNIT[np.float64]
  wht = _wht_l2_error(d_out, u)
  tf_error, _ = _kashin_error(d_out, levels, wht, wht, _gamma(d + 6, u), u,
                              exact)
  return y, ref + tf_error


# --- The seeded noise.


@dataclasses.dataclass
class _Draw:
  """One call of a noise sampler: its arguments and output, and for the
  exact sampler the (size, yield) of each of its candidate batches."""
  shape: list
  scale: float
  seed: np.ndarray
  output: np.ndarray = None
  batches: list = dataclasses.field(default_factory=list)


@contextlib.contextmanager
def _recording(p):
  """Records every draw of the sampler `p.sample_noise` calls (a list of
  `_Draw`), so that the reference is fed the very noise the client drew."""
  draws = []
  kind = p.noise_sampler
  if isinstance(p, distributed_skellam.DistributedSkellam):
    sampler = distributed_skellam._SAMPLE[kind]  # pylint: disable=protected-access  # tests a private part
  else:
    sampler = _SAMPLERS[(type(p), kind)]

  def record(shape, scale, seed):
    draws.append(_Draw(np.asarray(shape).tolist(), scale, np.asarray(seed)))
    out = sampler(shape, scale, seed)
    draws[-1].output = out.numpy()
    return out

  real_round = discrete_gaussian._round  # pylint: disable=protected-access  # tests a private part

  def round_batch(num_candidates, prm, seed):
    out = real_round(num_candidates, prm, seed)
    draws[-1].batches.append((int(num_candidates), int(tf.size(out))))
    return out

  with contextlib.ExitStack() as stack:
    if isinstance(p, distributed_skellam.DistributedSkellam):
      stack.enter_context(
          mock.patch.dict(distributed_skellam._SAMPLE, {kind: record}))  # pylint: disable=protected-access  # tests a private part
    elif kind == 'table':
      stack.enter_context(
          mock.patch.object(discrete_gaussian_table,
                            'sample_discrete_gaussian_table', record))
    else:
      stack.enter_context(
          mock.patch.object(discrete_gaussian, 'sample_discrete_gaussian',
                            record))
      stack.enter_context(
          mock.patch.object(discrete_gaussian, '_round', round_batch))
    yield draws


def _batch_sizes(draw, factor):
  """The batch sizes the exact sampler chooses for `draw` with its float
  estimate of the acceptance rate times `factor`, each batch yielding what
  it yielded (only the sizes are computed: no candidates are drawn)."""
  yields = iter([taken for _, taken in draw.batches])
  sizes = []
  real = discrete_gaussian._params  # pylint: disable=protected-access  # tests a private part

  def moved(sigma):
    prm = real(sigma)
    return dataclasses.replace(prm,
                               success_prob=min(1.0, prm.success_prob * factor))

  def replay(num_candidates, prm, seed):
    del prm, seed
    sizes.append(int(num_candidates))
    return tf.zeros([next(yields)], tf.int64)

  with mock.patch.object(discrete_gaussian, '_params',
                         moved), (mock.patch.object(discrete_gaussian, '_round',
                                                    replay)):
    discrete_gaussian.sample_discrete_gaussian(draw.shape, draw.scale,
                                               tf.constant(draw.seed))
  return sizes


def _mechanism_noise_draws(name, p):
  """The noise a mechanism's clients draw in `ClientEncodeTest`, at the
  scale written in `_PARAMETERS`: one vector per input's sampling seed,
  and three clients' shares at seed (1, 2) (`sum_of_zero_inputs`)."""
  expected = _PARAMETERS[name]
  sampler = _SAMPLERS[(type(p), expected.sampler)]
  d_out, scale = expected.output_dim, expected.scale
  draws = [
      sampler([d_out], scale,
              _subseeds(_noise_seed(i))[1]) for i in range(len(_inputs(p)))
  ]
  return draws + [sampler([3, d_out], scale, _seed(1, 2))]


# --- Pins: outputs a seed defines on every machine.


def _ring_cases():
  values = np.concatenate([
      np.arange(-70, 70), [2**62, -2**62, 2**63 - 1, -2**63, 2**31, -2**31],
      np.random.default_rng(0).integers(-2**62, 2**62, 500)
  ]).astype(np.int64)
  cases = {}
  for modulus in (2, 8, 2**16, 2**30, 3, 1000, 2**30 - 1):
    cases[f'ring_residue_{modulus}'] = (lambda m=modulus: [
        base.ring_residue(tf.constant(values), m),
        base.ring_residue(tf.constant(values.astype(np.int32)[:140]), m),
        base.centre(tf.constant(values), m)
    ])
  return cases


def _sign_cases():
  # +-1 gathered from a constant table by Philox bytes: exact in either
  # dtype.
  return {
      'random_signs_1000':
          lambda: [
              hadamard.random_signs(1000, _seed(4, 5)),
              hadamard.random_signs(1000, _seed(4, 5), tf.float32)
          ]
  }


def _rounding_cases():
  # The input is numpy's (fixed by its seed), the threshold an integer
  # (math.fsum of exact squares is correctly rounded), and the rounding
  # compares integer coins with frac(x) 2^k exactly (`_reference_round`).
  cases = {}
  x = _normal(3, [256], 3.0)
  norm_sq = math.fsum(v * v for v in x)
  for name, threshold in (('easy', int(norm_sq + 256)),
                          ('retries', int(norm_sq + 256 / 6)), ('impossible',
                                                                1)):
    cases[f'conditional_round_{name}'] = (lambda t=threshold: list(
        rounding.conditional_randomized_round(
            tf.constant(x), t, _seed(3, 7), max_attempts=50)))
  return cases


CASES = {**_ring_cases(), **_sign_cases(), **_rounding_cases()}

# Integer residues of integer inputs.
_INTEGER_RING_PINS = {
    'ring_residue_1000': '7bc2ef858c2a0ff8',
    'ring_residue_1073741823': '3737c51f8a54a311',
    'ring_residue_1073741824': 'e78013d4d95970f1',
    'ring_residue_2': '3a11d28d2de69744',
    'ring_residue_3': '0c1e8bec4ea9479b',
    'ring_residue_65536': '4d7ec058123e23c2',
    'ring_residue_8': 'fbedbb19dbcf0550',
}

# The public sign pattern of a seed.
_SIGN_PINS = {
    'random_signs_1000': '2d1a01bb727769df',
}

# Rounded integers, attempts and success of a seeded rounding.
_ROUNDING_PINS = {
    'conditional_round_easy': 'ab37859347407429',
    'conditional_round_impossible': '3b8b1ed323b1de05',
    'conditional_round_retries': '909bf60d03a30b3c',
}

PINS = {**_INTEGER_RING_PINS, **_SIGN_PINS, **_ROUNDING_PINS}

# The seeded noise of each mechanism's clients (`_mechanism_noise_draws`)
# at the scale written in `_PARAMETERS`.
_NOISE_PINS = {
    'bits30_beta0': 'fbbaaf2bc5d01fb3',
    'integer_inputs': 'e9488dbc4820ef52',
    'kashin': 'fc4c7b203408875f',
    'linf_granularity': '6282a3d24752aa6c',
    'padded_table': '7bed88646b3fbac7',
    'power_of_two_exact': 'fb91042c2723afdf',
    'skellam': 'fc4c7b203408875f',
}


class PinnedBitsTest(tf.test.TestCase, parameterized.TestCase):

  def test_every_case_is_pinned(self):
    self.assertEqual(sorted(CASES), sorted(PINS))
    self.assertEqual(
        sorted(_NOISE_PINS),
        sorted(
            name for name, expected in _PARAMETERS.items() if expected.scale))

  @parameterized.named_parameters((name, name) for name in sorted(CASES))
  def test_outputs_are_bit_identical(self, name):
    self.assertEqual(_digest(*CASES[name]()), PINS[name])


class WalshHadamardTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (name, x) for name, x in sorted(_fwht_cases().items()))
  def test_fwht_equals_tensordot_form_and_reference(self, x):
    got = hadamard.fast_walsh_hadamard(tf.constant(x)).numpy()
    self.assertEqual(got.dtype, x.dtype)
    # The rewrite's claim, on this machine: the same bits.
    self.assertEqual(got.tobytes(),
                     _tensordot_fwht(tf.constant(x)).numpy().tobytes())
    d = x.shape[-1]
    reference = _butterfly(x) / math.sqrt(d)
    # TF: a division by fl(sqrt(D)), rounded twice for float32 (from
    # float64), and the quotient: 3 roundings; numpy's: 2.
    tolerance = _rotation_tolerance(x, x.dtype.type, 3, 2)
    _assert_within(self, got, reference, tolerance[..., np.newaxis], 'fwht')

  @parameterized.parameters(1, 5, 100, 300)
  def test_randomized_hadamard_matches_reference(self, dim):
    enc = hadamard.RandomizedHadamard(dim)
    seed = _seed(dim, 1)
    x = _normal(dim, [dim], 3.0)
    d = enc.output_dim
    pattern = np.sign(hadamard.random_signs(d, seed).numpy())
    # H D x and D H y, with the signs of the seed (pinned above) and the
    # exact 1/sqrt(D): TF's signs +-fl(1/fl(sqrt(D))) (two roundings) and
    # their products (one); numpy's division by fl(sqrt(D)): two.
    padded = np.pad(x, (0, d - dim))
    y = enc.encode(tf.constant(x), seed).numpy()
    _assert_within(self, y,
                   _butterfly(pattern * padded) / math.sqrt(d),
                   _rotation_tolerance(padded, np.float64, 3, 2), 'encode')
    back = enc.decode(tf.constant(y), seed).numpy()
    _assert_within(self, back, (pattern * _butterfly(y) / math.sqrt(d))[:dim],
                   _rotation_tolerance(y, np.float64, 3, 2), 'decode')


class ClipTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (name, x, clip) for name, (x, clip) in sorted(_CLIP_CASES.items()))
  def test_clip_equals_select_form_and_reference(self, x, clip):
    got, clipped = tensors.clip_to_norm(tf.constant(x), clip)
    old, old_clipped = _select_clip(tf.constant(x), clip)
    # The rewrite's claim, on this machine: the same bits.
    self.assertEqual(got.numpy().tobytes(), old.numpy().tobytes())
    self.assertEqual(bool(clipped), bool(old_clipped))
    reference, norm = _clip_reference(x, clip)
    _assert_decided(self, norm, clip, x.size, 'clip')
    self.assertEqual(bool(clipped), bool(norm > clip))
    if not clipped:  # returned as it is
      self.assertEqual(got.numpy().tobytes(), x.tobytes())
    rel = _clip_error(x.size, _UNIT[np.float64]) + _clip_error(
        x.size, _UNIT[_LONG])
    # Subnormal inputs and results are flushed: 2 operations a coordinate.
    _assert_within(
        self, got, reference,
        rel * np.abs(reference).astype(np.float64) * (1.0 + 2 * rel) +
        2 * _TINY[np.float64], 'clip')


class ClientEncodeTest(tf.test.TestCase, parameterized.TestCase):
  """Each mechanism's client encode and server decode, split into what the
  machine defines (the float stages, checked within bounds) and what the
  seed defines (the integer stage given this machine's float stage, and
  the noise: checked exactly)."""

  def _check_parameters(self, name, p):
    want = _PARAMETERS[name]
    self.assertEqual(
        (p.float32_rotation, p.noise_sampler, p.output_dim, p.bits, p.modulus),
        (want.float32_rotation, want.sampler, want.output_dim, want.bits, 2**
         want.bits))
    self.assertAllClose([p.gamma, _scale_of(p)], [want.gamma, want.scale],
                        rtol=1e-12,
                        atol=0.0)
    c = p.l2_clip / p.gamma
    self.assertEqual(p.scaled_l2_clip, c)
    # T of Theorem 5 (3), or floor(c^2 (1 + 2^-40)) for integer inputs: the
    # mechanism's own float formula, recomputed in the same order.
    if p.integer_inputs:
      bound = c * c * (1.0 + 2.0**-40)
    else:
      d = p.output_dim
      bound = (c + math.sqrt(d)) * (c + math.sqrt(d))
      if p.beta > 0:
        bound = min(
            bound, c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / p.beta)) *
            (c + math.sqrt(d) / 2.0))
    self.assertEqual(p.norm_threshold, math.floor(bound))

  def _check_rotation(self, p, scaled, rotated, seed, frame):
    """The encoder's output against its reference, given TF's x'."""
    d_out = p.output_dim
    x = scaled.numpy().astype(np.float64)
    if isinstance(p.encoder, registry.Identity):
      self.assertEqual(rotated.numpy().tobytes(), scaled.numpy().tobytes())
    elif isinstance(p.encoder, hadamard.RandomizedHadamard):
      x = np.pad(x, (0, d_out - p.dim))
      pattern = np.sign(hadamard.random_signs(d_out, seed).numpy())
      # TF: signs +-fl(1/fl(sqrt(D))) (two roundings, and for float32 a
      # third) and their product with x': four; numpy's division: two.
      _assert_within(self, rotated,
                     _butterfly(pattern * x) / math.sqrt(d_out),
                     _rotation_tolerance(x, scaled.dtype.as_numpy_dtype, 4, 2),
                     'rotation')
    else:
      reference, bound = _kashin_reference(p.encoder, frame, x)
      self.assertLessEqual(
          float(np.sqrt(np.sum((rotated.numpy() - reference)**2))), bound)

  def _check_decode(self, p, summed, seed, frame):
    decoded, post = p.server_decode({'encoded': tf.constant(summed)},
                                    tf.constant(3, tf.int64), seed)
    self.assertEqual(bool(post['sum_may_wrap']), 3 > p.max_clients())
    centred = np.where(summed > p.modulus // 2, summed - p.modulus, summed)
    z = centred.astype(np.float64)
    decoded = decoded.numpy()
    if isinstance(p.encoder, registry.Identity):
      # One correctly rounded product per coordinate: exactly defined.
      self.assertEqual(decoded.tobytes(), (z * p.gamma).tobytes())
    elif isinstance(p.encoder, hadamard.RandomizedHadamard):
      d = p.output_dim
      pattern = np.sign(hadamard.random_signs(d, seed).numpy())
      reference = (p.gamma * pattern * _butterfly(z) / math.sqrt(d))[:p.dim]
      # TF: the signs (two), their product, gamma's: four; numpy: three.
      _assert_within(self, decoded, reference,
                     _rotation_tolerance(z, np.float64, 4, 3, p.gamma),
                     'decode')
    else:
      reference = (frame @ z.astype(_LONG)) * _LONG(p.gamma)
      u, d, d_out = _UNIT[np.float64], p.dim, p.output_dim
      # TF: one synthesis (`_wht_l2_error`) and gamma's product; the
      # reference: D-term sums and U's entries (`_kashin_reference`).
      bound = ((1 + _wht_l2_error(d_out, u)) * (1 + u) - 1 +
               (_gamma(d_out + 3, _UNIT[_LONG]) * math.sqrt(d))) * float(
                   np.sqrt(np.sum(z * z))) * p.gamma * (1 + 1e-12)
      self.assertLessEqual(float(np.sqrt(np.sum((decoded - reference)**2))),
                           bound)

  def _check_noise(self, name, p, draws):
    """The recorded draws are the pinned ones (drawn again at the written
    scale if the computed one differs from it in its last bits); the exact
    sampler's batches do not depend on its float estimate."""
    scale = _PARAMETERS[name].scale
    outputs = [draw.output for draw in draws]
    if _scale_of(p) != scale:
      outputs = [
          _SAMPLERS[(type(p), p.noise_sampler)](draw.shape, scale,
                                                tf.constant(draw.seed)).numpy()
          for draw in draws
      ]
    self.assertEqual(_digest(*outputs), _NOISE_PINS[name])
    if (type(p) is ddg.DistributedDiscreteGaussian  # pylint: disable=unidiomatic-typecheck  # the exact type, subclasses excluded
        and p.noise_sampler == 'exact'):
      # The exact sampler decides every draw with integers but sizes its
      # candidate batches from a float estimate of its acceptance rate
      # (numpy's exp, whose last bits vary with the instruction set), and
      # the draws depend on the batch sizes: ceil of an expression
      # increasing in 1 / estimate. If they stay the same with the
      # estimate moved by 2^-20 of itself either way, far more than any
      # last-bit difference, no machine's estimate changes them.
      for draw in draws:
        sizes = [size for size, _ in draw.batches]
        for factor in (1.0 - 2.0**-20, 1.0 + 2.0**-20):
          self.assertEqual(_batch_sizes(draw, factor), sizes, factor)

  @parameterized.named_parameters((name, name) for name in sorted(_MECHANISMS))
  def test_client_encode(self, name):
    p = _MECHANISMS[name]()
    self._check_parameters(name, p)
    round_seed = _seed(*_ROUND_SEED)
    frame = (_exact_frame(p.encoder, round_seed)
             if not p.encoder.is_isometry else None)
    total = np.zeros(p.output_dim, np.int64)
    rotations = []
    real_encode = p.encoder.encode

    def encode(x, seed):
      rotations.append((x, real_encode(x, seed)))
      return rotations[-1][1]

    with _recording(p) as draws, mock.patch.object(p.encoder, 'encode', encode):
      for i, x in enumerate(_inputs(p)):
        encoded, flags = p.client_encode(tf.constant(x), round_seed,
                                         _noise_seed(i))
        encoded = encoded['encoded'].numpy()
        # What the client rotated, and the rotation it rounded.
        self.assertLen(rotations, i + 1)
        client_scaled, rotated = rotations[i]
        rounding_seed, sampling_seed = _subseeds(_noise_seed(i))
        noise = 0
        if p.noise_multiplier > 0:
          # The client's draw: its sampler at its scale and sampling seed.
          self.assertLen(draws, i + 1)
          self.assertEqual((draws[i].shape, draws[i].scale),
                           ([p.output_dim], _scale_of(p)))
          self.assertAllEqual(draws[i].seed, sampling_seed)
          noise = draws[i].output
        # The float stage, on this machine, against references.
        scaled, finite, clipped = p.clip_and_scale(tf.constant(x))
        self.assertEqual(scaled.numpy().tobytes(),
                         client_scaled.numpy().tobytes())
        want, want_finite, want_clipped, norm = _reference_scale(x, p)
        self.assertEqual((bool(finite), bool(clipped)),
                         (want_finite, want_clipped))
        if not isinstance(norm, float) and norm > 0:
          _assert_decided(self, norm, p.l2_clip, p.dim, f'input {i}')
        u = _UNIT[scaled.dtype.as_numpy_dtype]
        # The clip's roundings (`_clip_error`), the scale's (1/gamma,
        # 1 - 2 eps and their product: three) and its product with x, and
        # float32's cast; the reference's in long double (one more for the
        # scale's 2 eps).
        rel = (1 + _clip_error(p.dim, _UNIT[np.float64], 4)) * (1 + u) - 1
        rel += _clip_error(p.dim, _UNIT[_LONG], 5)
        _assert_within(
            self, scaled, want,
            rel * np.abs(want).astype(np.float64) * (1 + 2 * rel) +
            _TINY[scaled.dtype.as_numpy_dtype], f'x\' of input {i}')
        self._check_rotation(p, scaled, rotated, round_seed, frame)
        if not p.encoder.is_isometry:
          # The clip of the output is `tensors.clip_to_norm` (ClipTest).
          _, norm = _clip_reference(rotated.numpy(), p.scaled_l2_clip)
          rotated, more = tensors.clip_to_norm(rotated, p.scaled_l2_clip)
          # A clipped x' has ||y|| = ||x'|| = c/gamma up to rounding: a tie
          # either way, but the flag is set already.
          if not want_clipped and norm > 0:
            _assert_decided(self, norm, p.scaled_l2_clip, p.output_dim,
                            f'output of input {i}')
            self.assertEqual(bool(more), bool(norm > p.scaled_l2_clip))
          clipped |= more
        # The integer stage: exact, given this machine's rotated vector.
        rounded, _, ok = _reference_round(rotated.numpy(), p.norm_threshold,
                                          rounding_seed,
                                          rounding.MAX_ROUNDING_ATTEMPTS)
        self.assertEqual(encoded.dtype, np.int64)
        self.assertAllEqual(encoded, np.mod(rounded + noise, p.modulus))
        self.assertAllEqual(flags, [int(not finite), int(clipped), int(not ok)])
        total = np.mod(total + encoded, p.modulus)
      zeros = p.sum_of_zero_inputs(3, _seed(1, 2)).numpy()
    self._check_decode(p, total, round_seed, frame)
    if p.noise_multiplier > 0:
      shares = draws[-1]
      self.assertEqual((shares.shape, shares.scale),
                       ([3, p.output_dim], _scale_of(p)))
      self.assertAllEqual(shares.seed, _seed(1, 2))
      self.assertAllEqual(
          zeros,
          np.mod(np.sum(np.mod(shares.output, p.modulus), axis=0), p.modulus))
      self._check_noise(name, p, draws)
    else:
      self.assertEmpty(draws)
      self.assertAllEqual(zeros, np.zeros(p.output_dim, np.int64))


def _print_pins():
  for case in sorted(CASES):
    print(f"    '{case}': '{_digest(*CASES[case]())}',")
  for name, make in sorted(_MECHANISMS.items()):
    if _PARAMETERS[name].scale:
      print(f"    '{name}': "
            f"'{_digest(*_mechanism_noise_draws(name, make()))}',")


if __name__ == '__main__' and '--print-pins' in sys.argv:
  _print_pins()
  sys.exit(0)
