"""The fuzz entry points of federated frequency estimation: the math of
`tff_ddp.analytics.frequency.clipping` (each result against a plain-Python reference
of its docstring's formula) and the validation of `frequency_parameters`,
`build_frequency_process` and `build_frequency_process_from_parameters`
before any TFF tracing (the processes themselves are covered by
frequency_process_test).

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_frequency_test.py and a row
of bad_inputs.py.
"""

import contextlib
import math
from unittest import mock

from hypothesis import strategies as st
import numpy as np

from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import multi_round
from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import single_release
from tff_ddp.analytics.frequency import two_phase
from tff_ddp_tests.fuzz import strategies as fz

# ----------------------------------------------------------------------------
# References (plain Python floats; an overflow of the true value is inf).


def _ref_noise_scale(effective_dim, m, n, theta):
  """sqrt(D / (4 m n theta^2)) in logs: no underflow of theta^2."""
  log_s = 0.5 * (math.log(float(effective_dim)) - math.log(int(m)) -
                 math.log(int(n))) - math.log(2.0 * float(theta))
  return math.inf if log_s > 709.78 else math.exp(log_s)


def _close(result, expected, rel=1e-9, abs_tol=1e-300) -> bool:
  result, expected = float(result), float(expected)
  if math.isinf(expected) or math.isinf(result):
    return result == expected
  return math.isclose(result, expected, rel_tol=rel, abs_tol=abs_tol)


def _fsum(values) -> float:
  """The exact sum, inf when it overflows (nan for inf - inf)."""
  try:
    return math.fsum(values)
  except OverflowError:  # extended precision has the range: +-inf
    return float(np.sum(np.asarray(values, np.longdouble)))
  except ValueError:
    return math.nan


def _scale(values) -> float:
  """Sum of magnitudes: the absolute tolerance of a sum with cancellation
  (numpy's pairwise order against fsum's exact one)."""
  return 1e-12 * _fsum([abs(float(v)) for v in values])


def _ref_error_functional(clip, norms, s):
  """E(C; D) = (1/n) sum_i (||y_i|| - C)_+ + C s."""
  n = len(norms)
  return _fsum([max(0.0, v - clip) / n for v in norms] + [clip * s])


def _floats_of(value):
  return [float(v) for v in np.asarray(value, np.float64).reshape(-1)]


def _check_effective_dimension(kwargs, result):
  d = float(kwargs['output_dim'])
  if kwargs['divisor'] == 'l2':
    expected = d
  else:
    k = float(kwargs['level'])
    expected = d if k >= math.sqrt(d) else min(d, k * k)
  return None if _close(result, expected) and 0 <= result <= d else (
      f'expected {expected}')


def _check_noise_scale(kwargs, result):
  expected = _ref_noise_scale(kwargs['effective_dim'], kwargs['num_trials'],
                              kwargs['num_clients'], kwargs['theta'])
  if not (fz.is_real(result) and math.isfinite(result) and result >= 0):
    return 'not a finite number >= 0'
  return None if _close(result, expected) else f'expected {expected}'


def _check_optimal_quantile(kwargs, result):
  s = _ref_noise_scale(kwargs['effective_dim'], kwargs['num_trials'],
                       kwargs['num_clients'], kwargs['theta'])
  if not (fz.is_real(result) and 0 < result <= 1):
    return 'not in (0, 1]'
  if s >= 1:
    return f's = {s} >= 1 not refused'
  return None if math.isclose(result, 1.0 - s, rel_tol=1e-12,
                              abs_tol=1e-15) else f'expected {1 - s}'


def _check_gaussian_quantile(kwargs, result):
  r = float(kwargs['stddev_per_clip'])
  s = r * math.sqrt(int(kwargs['num_noises'])) * math.sqrt(int(
      kwargs['dim'])) / int(kwargs['num_clients'])
  if not (fz.is_real(result) and 0 < result <= 1 and s < 1):
    return f'not in (0, 1] (s = {s})'
  return None if math.isclose(result, 1.0 - s, rel_tol=1e-12,
                              abs_tol=1e-15) else f'expected {1 - s}'


def _check_error_functional(kwargs, result, factor=1.0):
  norms = _floats_of(kwargs['norms'])
  s = _ref_noise_scale(kwargs['effective_dim'], kwargs['num_trials'],
                       len(norms), kwargs['theta'])
  result = np.asarray(result)
  if result.shape != np.shape(kwargs['clip']) or result.dtype != np.float64:
    return f'shape {result.shape} dtype {result.dtype}'
  for c, e in zip(_floats_of(kwargs['clip']), result.reshape(-1)):
    expected = factor * _ref_error_functional(c, norms, s)
    if not _close(e, expected):
      return f'E({c}) = {e}, expected {expected}'
  return None


def _check_published_bound(kwargs, result):
  return _check_error_functional(kwargs, result, math.sqrt(int(kwargs['dim'])))


def _ref_factors(norms, clip):
  return [1.0 if v <= 0 else min(1.0, clip / v) for v in norms]


def _check_clip_factors(kwargs, result):
  norms = _floats_of(kwargs['norms'])
  expected = _ref_factors(norms, float(kwargs['clip']))
  result = np.asarray(result)
  if result.shape != (len(norms),):
    return f'shape {result.shape}'
  return None if all(_close(r, e) for r, e in zip(result, expected)) else (
      f'expected {expected}')


def _ref_expected_sum(x, norms, clip):
  """(sum_i x_ij f_i, its tolerance) per item j."""
  x = np.asarray(x, np.float64)
  f = _ref_factors(_floats_of(norms), clip)
  terms = [[float(x[i, j]) * f[i]
            for i in range(x.shape[0])]
           for j in range(x.shape[1])]
  return [_fsum(t) for t in terms], [_scale(t) for t in terms]


def _check_expected_sum(kwargs, result):
  expected, tolerance = _ref_expected_sum(kwargs['x'], kwargs['norms'],
                                          float(kwargs['clip']))
  result = np.asarray(result)
  if result.shape != (len(expected),):
    return f'shape {result.shape}'
  return None if all(
      _close(r, e, abs_tol=t) for r, e, t in zip(result, expected, tolerance)
  ) else f'expected {expected}'


def _check_tightened(kwargs, result):
  x = np.asarray(kwargs['x'], np.float64)
  n, d = x.shape
  m, theta = int(kwargs['num_trials']), float(kwargs['theta'])
  r = float(kwargs['coordinate_ratio'])
  truth = [_fsum(x[:, j]) / n for j in range(d)]
  result = np.asarray(result)
  if result.shape != np.shape(kwargs['clip']):
    return f'shape {result.shape}'
  size = float(np.max(np.abs(x)))
  for c, value in zip(_floats_of(kwargs['clip']), result.reshape(-1)):
    sums, _ = _ref_expected_sum(x, kwargs['norms'], c)
    diffs = [a / n - b for a, b in zip(sums, truth)]
    bias = _fsum([e * e for e in diffs])
    noise = r * c * math.exp(-0.5 * (math.log(m) + math.log(n))) / (2.0 * theta)
    expected = math.sqrt(_fsum([bias, d * noise * noise]))
    if not _close(value, expected, rel=1e-7, abs_tol=1e-9 * size * d):
      return f'bound({c}) = {value}, expected {expected}'
  return None


def _check_optimal_clip(kwargs, result):
  norms = sorted(_floats_of(kwargs['norms']))
  q = float(kwargs['quantile'])
  expected = float(np.quantile(norms, q, method='inverted_cdf'))
  # n q within rounding of an integer: either neighbour is the quantile.
  j = q * len(norms)
  near = [
      norms[max(0, min(len(norms) - 1, k - 1))]
      for k in (math.floor(j), math.ceil(j))
  ] if abs(j - round(j)) < 1e-9 else []
  return None if result == expected or result in near else (
      f'expected {expected}')


def _check_l2_error(kwargs, result):
  x = np.asarray(kwargs['x'], np.float64)
  est = _floats_of(kwargs['estimated_sum'])
  diffs = [
      est[j] - _fsum([float(v) for v in x[:, j]]) for j in range(x.shape[1])
  ]
  expected = math.sqrt(_fsum([e * e for e in diffs])) / x.shape[0]
  tolerance = 1e3 * _scale(list(x.reshape(-1)) + est) / x.shape[0]
  if not fz.is_real(result):
    return f'{type(result).__name__}'
  return None if _close(result, expected, rel=1e-7,
                        abs_tol=tolerance) else (f'expected {expected}')


def _check_sample_items(kwargs, result):
  x = np.asarray(kwargs['x']).astype(np.int64)
  k = int(kwargs['k'])
  result = np.asarray(result)
  if result.shape != x.shape or result.dtype != np.int64:
    return f'shape {result.shape} dtype {result.dtype}'
  if np.any(result < 0) or np.any(result > x):
    return 'not a sub-multiset of the row'
  want = np.minimum(x.sum(axis=1), k)
  if not np.array_equal(result.sum(axis=1), want):
    return f'row totals {result.sum(axis=1)}, expected {want}'
  return None


def _check_published_epsilon(_kwargs, result):
  return fz.epsilon_ok(result)


# ----------------------------------------------------------------------------
# Strategies.

_NORMS = st.one_of(st.lists(st.floats(0, 1e3), min_size=1, max_size=5),
                   st.lists(fz.floats(), max_size=4), fz.arrays())
_CLIPS = st.one_of(st.floats(0, 1e3), st.lists(st.floats(0, 1e3), max_size=3),
                   fz.floats())
_THETAS = st.one_of(st.floats(1e-6, 0.25), fz.floats())
_COUNTS = st.one_of(st.integers(1, 10**6), fz.ints())
_MATRICES = st.one_of(
    st.integers(1, 3).flatmap(
        lambda d: st.lists(st.lists(st.floats(0, 50), min_size=d, max_size=d),
                           min_size=1,
                           max_size=3)),
    st.lists(st.lists(fz.floats(), max_size=3), max_size=3), fz.arrays())
_COUNT_MATRICES = st.one_of(
    st.integers(1, 3).flatmap(
        lambda d: st.lists(st.lists(st.integers(0, 20), min_size=d, max_size=d),
                           min_size=1,
                           max_size=3)),
    st.lists(st.lists(fz.ints(), max_size=3), max_size=3), fz.arrays())
_RNGS = st.integers(0, 2**32).map(np.random.default_rng)
_PARTS = st.one_of(
    st.lists(st.tuples(st.floats(0.01, 0.25), st.integers(1, 64),
                       st.integers(1, 10**5), st.integers(1, 200)),
             max_size=3),
    st.lists(st.tuples(fz.floats(), fz.ints(), fz.ints(), fz.ints()),
             max_size=2), st.lists(fz.any_value(), max_size=2))

_X = [[1.0, 2.0], [3.0, 0.0], [0.0, 5.0]]
_X_NORMS = [2.3, 3.1, 5.2]

MATH_ENTRY_POINTS = [
    fz.EntryPoint(name='analytics.frequency.clipping.effective_dimension',
                  call=fq.effective_dimension,
                  baseline=dict(output_dim=100, divisor='linf', level=3.0),
                  check=_check_effective_dimension,
                  hints=dict(output_dim=_COUNTS,
                             divisor=st.sampled_from(['l2', 'linf', 'l1']),
                             level=fz.floats()),
                  examples=[
                      ('level 1e300 (level**2 overflowed)', dict(level=1e300),
                       'documented'),
                      ('junk level with divisor l2',
                       dict(divisor='l2', level='x'), 'clear_error'),
                      ('output_dim 10**400', dict(output_dim=10**400),
                       'clear_error'),
                  ]),
    fz.EntryPoint(name='analytics.frequency.clipping.noise_scale',
                  call=fq.noise_scale,
                  baseline=dict(effective_dim=100.0,
                                num_trials=30,
                                num_clients=1000,
                                theta=0.2),
                  check=_check_noise_scale,
                  hints=dict(effective_dim=fz.floats(),
                             num_trials=_COUNTS,
                             num_clients=_COUNTS,
                             theta=_THETAS),
                  examples=[
                      ('theta 5e-324 (theta**2 underflowed: ZeroDivisionError)',
                       dict(theta=5e-324), 'clear_error'),
                      ('theta 1e-300, D 1e300',
                       dict(theta=1e-300, effective_dim=1e300), 'clear_error'),
                      ('num_trials 10**400 (OverflowError)',
                       dict(num_trials=10**400,
                            num_clients=10**400), 'clear_error'),
                      ('theta 1e-150', dict(theta=1e-150), 'documented'),
                  ]),
    fz.EntryPoint(name='analytics.frequency.clipping.optimal_quantile',
                  call=fq.optimal_quantile,
                  baseline=dict(effective_dim=100.0,
                                num_trials=30,
                                num_clients=10**4,
                                theta=0.2),
                  check=_check_optimal_quantile,
                  hints=dict(effective_dim=fz.floats(),
                             num_trials=_COUNTS,
                             num_clients=_COUNTS,
                             theta=_THETAS),
                  examples=[('s >= 1', dict(num_clients=1), 'clear_error'),
                            ('theta 5e-324', dict(theta=5e-324), 'clear_error')
                           ]),
    fz.EntryPoint(name='analytics.frequency.clipping.gaussian_quantile',
                  call=fq.gaussian_quantile,
                  baseline=dict(stddev_per_clip=2.0,
                                dim=50,
                                num_clients=10**4,
                                num_noises=1),
                  check=_check_gaussian_quantile,
                  hints=dict(stddev_per_clip=fz.floats(),
                             dim=_COUNTS,
                             num_clients=_COUNTS,
                             num_noises=_COUNTS),
                  examples=[
                      ('dim 10**400 (OverflowError)', dict(dim=10**400),
                       'clear_error'),
                      ('no interior optimum names the arguments',
                       dict(stddev_per_clip=30.0,
                            num_noises=100,
                            num_clients=100), 'clear_error'),
                  ]),
    fz.EntryPoint(
        name='analytics.frequency.clipping.error_functional',
        call=fq.error_functional,
        baseline=dict(clip=[0.0, 1.0, 5.0],
                      norms=[0.5, 2.0, 3.0, 10.0],
                      effective_dim=4.0,
                      num_trials=30,
                      theta=0.2),
        check=_check_error_functional,
        hints=dict(clip=_CLIPS,
                   norms=_NORMS,
                   effective_dim=fz.floats(),
                   num_trials=_COUNTS,
                   theta=_THETAS),
        examples=[
            ('clip nan (was E = nan)', dict(clip=math.nan), 'clear_error'),
            ('clip -1 (was a value)', dict(clip=-1.0), 'clear_error'),
            ('clip None (was nan)', dict(clip=None), 'clear_error'),
            ('clip inf (was inf)', dict(clip=math.inf), 'clear_error'),
            ('clip string', dict(clip='a'), 'clear_error'),
            ('norms string', dict(norms='abc'), 'clear_error'),
            ('norms dict', dict(norms={'a': 1}), 'clear_error'),
            ('norms bools', dict(norms=[True]), 'clear_error'),
            ('norms 1e308 (the mean overflowed to inf)',
             dict(norms=[1e308, 1e308], clip=0.0), 'documented'),
            ('clip 0-d array', dict(clip=np.array(2.0)), 'documented'),
        ]),
    fz.EntryPoint(name='analytics.frequency.clipping.expected_l2_error_bound',
                  call=fq.expected_l2_error_bound,
                  baseline=dict(clip=[0.0, 1.0, 5.0],
                                norms=[0.5, 2.0, 3.0, 10.0],
                                effective_dim=4.0,
                                num_trials=30,
                                theta=0.2,
                                dim=2),
                  check=_check_published_bound,
                  hints=dict(clip=_CLIPS,
                             norms=_NORMS,
                             dim=_COUNTS,
                             theta=_THETAS),
                  max_examples=15),
    fz.EntryPoint(name='analytics.frequency.clipping.clip_factors',
                  call=fq.clip_factors,
                  baseline=dict(norms=[0.0, 1.0, 4.0], clip=2.0),
                  check=_check_clip_factors,
                  hints=dict(norms=_NORMS, clip=fz.floats()),
                  max_examples=15,
                  examples=[('a zero norm with C < 1 (the factor was C, not 1)',
                             dict(clip=0.5), 'documented')]),
    fz.EntryPoint(name='analytics.frequency.clipping.expected_sum',
                  call=fq.expected_sum,
                  baseline=dict(x=_X, norms=_X_NORMS, clip=3.0),
                  check=_check_expected_sum,
                  hints=dict(x=_MATRICES, norms=_NORMS, clip=fz.floats()),
                  examples=[
                      ('x rows != norms (broadcast silently)',
                       dict(x=[[1.0, 2.0]]), 'clear_error'),
                      ('x 1-d (broadcast silently)', dict(x=[1.0, 2.0, 3.0]),
                       'clear_error'),
                      ('x nan', dict(x=[[math.nan, 1.0]] * 3), 'clear_error'),
                  ]),
    fz.EntryPoint(name='analytics.frequency.clipping.tightened_error_bound',
                  call=fq.tightened_error_bound,
                  baseline=dict(clip=[1.0, 4.0],
                                x=_X,
                                norms=_X_NORMS,
                                num_trials=30,
                                theta=0.2,
                                coordinate_ratio=1.0),
                  check=_check_tightened,
                  hints=dict(clip=_CLIPS,
                             x=_MATRICES,
                             norms=_NORMS,
                             num_trials=_COUNTS,
                             theta=_THETAS,
                             coordinate_ratio=fz.floats()),
                  examples=[
                      ('x 1-d (an unpacking ValueError)', dict(x=[1.0, 2.0]),
                       'clear_error'),
                      ('x without rows (was nan)', dict(x=np.zeros((0, 2))),
                       'clear_error'),
                      ('norms != rows of x (broadcast silently)',
                       dict(norms=[1.0, 2.0]), 'clear_error'),
                  ]),
    fz.EntryPoint(name='analytics.frequency.clipping.optimal_clip',
                  call=fq.optimal_clip,
                  baseline=dict(norms=[3.0, 1.0, 2.0], quantile=0.5),
                  check=_check_optimal_clip,
                  hints=dict(norms=_NORMS,
                             quantile=st.one_of(st.floats(0, 1), fz.floats()))),
    fz.EntryPoint(name='analytics.frequency.clipping.l2_error',
                  call=fq.l2_error,
                  baseline=dict(estimated_sum=[4.0, 7.0],
                                x=[[1.0, 2.0], [3.0, 4.0]]),
                  check=_check_l2_error,
                  hints=dict(estimated_sum=st.one_of(
                      st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2),
                      st.lists(fz.floats(), max_size=3)),
                             x=_MATRICES),
                  examples=[
                      ('length mismatch (a broadcast error)',
                       dict(estimated_sum=[1.0, 2.0, 3.0]), 'clear_error'),
                      ('x 1-d (silently n = d)',
                       dict(x=[1.0, 2.0], estimated_sum=[1.0]), 'clear_error'),
                      ('x without rows (was inf)', dict(x=np.zeros((0, 2))),
                       'clear_error'),
                      ('x scalar (IndexError)', dict(x=1.0), 'clear_error'),
                      ('estimate nan (was nan)',
                       dict(estimated_sum=[math.nan, 1.0]), 'clear_error'),
                  ]),
    fz.EntryPoint(name='analytics.frequency.clipping.sample_items',
                  call=fq.sample_items,
                  baseline=dict(x=[[5, 0, 3], [1, 0, 0], [0, 0, 0]],
                                k=2,
                                rng=np.random.default_rng(0)),
                  check=_check_sample_items,
                  hints=dict(x=_COUNT_MATRICES,
                             k=st.one_of(st.integers(1, 30), fz.ints()),
                             rng=_RNGS),
                  examples=[
                      ('negative counts (numpy named "colors")',
                       dict(x=[[-3, 5]]), 'clear_error'),
                      ('fractional counts (silently truncated)',
                       dict(x=[[1.7, 5.2]]), 'clear_error'),
                      ('x 1-d (AxisError)', dict(x=[1, 5]), 'clear_error'),
                      ('rng None (AttributeError)', dict(rng=None),
                       'clear_error'),
                      ('rng int', dict(rng=3), 'clear_error'),
                      ('nan count', dict(x=[[math.nan, 5.0]]), 'clear_error'),
                      ('row total 2^63 (overflowed: returned unsampled)',
                       dict(x=[[2**62, 2**62]], k=1), 'clear_error'),
                      ('row total 2^62 (numpy refused, naming "colors")',
                       dict(x=[[2**61, 2**61]], k=1), 'clear_error'),
                      ('integral floats', dict(x=[[5.0, 0.0, 3.0]]),
                       'documented'),
                  ]),
    fz.EntryPoint(name='analytics.frequency.clipping.published_epsilon',
                  call=fq.published_epsilon,
                  baseline=dict(parts=[(0.2, 30, 10**4, 100)], delta=1e-4),
                  check=_check_published_epsilon,
                  hints=dict(parts=_PARTS, delta=fz.floats()),
                  names=('parts', 'delta'),
                  max_examples=10,
                  budget=20.0,
                  examples=[
                      ('parts a string (an unpacking ValueError)',
                       dict(parts='abc'), 'clear_error'),
                      ('parts a 0-d array', dict(parts=np.array(5.0)),
                       'clear_error'),
                      ('part of two numbers', dict(parts=[(0.2, 30)]),
                       'clear_error'),
                      ('num_trials 3.7 (silently 3)',
                       dict(parts=[(0.2, 3.7, 100, 10)]), 'clear_error'),
                      ('num_trials 10**30 (the accountant refuses > 2^62)',
                       dict(parts=[(0.2, 10**30, 100, 10)]), 'clear_error'),
                      ('delta nan (the message named target_delta)',
                       dict(delta=math.nan), 'clear_error'),
                      ('the paper: 2.8 for d = 50',
                       dict(parts=[(0.2, 30, 10**4, 100), (0.2, 3, 10**4, 63)]),
                       'documented'),
                  ]),
]

# ----------------------------------------------------------------------------
# frequency_parameters and the process builders (before tracing).


def _check_params(kwargs, params):
  if not isinstance(params, fp.FrequencyParameters):
    return f'{type(params).__name__}'
  eps = float(kwargs['epsilon'])
  problems = []
  if params.protocol != kwargs['protocol']:
    problems.append(f'protocol {params.protocol}')
  if not 0 <= params.epsilon <= eps * (1 + 1e-9):
    problems.append(f'epsilon {params.epsilon} for the target {eps}')
  if not 0 < params.theta <= 0.25 or params.num_trials < 1:
    problems.append(f'theta {params.theta} m {params.num_trials}')
  if params.protocol in (
      'two_phase', 'multi_round') and not (0 < params.target_quantile < 1):
    problems.append(f'target quantile {params.target_quantile}')
  if params.protocol == 'two_phase' and not (1e-30 <= params.upper_bound <=
                                             1e30):
    problems.append(f'histogram range [0, {params.upper_bound}]')
  # (Each protocol's class has the fields it needs: clip and learning_rate
  # are some protocols' only.)
  clip = getattr(params, 'clip', None)
  if clip is not None and not fp.CLIP_RANGE[0] <= clip <= fp.CLIP_RANGE[1]:
    # The estimate is the decoded sum times C: C = 1e308 gave NaN.
    problems.append(f'clip {clip}')
  learning_rate = getattr(params, 'learning_rate', None)
  if learning_rate is not None and not (0 < learning_rate <=
                                        fp.MAX_LEARNING_RATE):
    # C exp(-eta (gamma-hat - gamma*)) overflows in one round.
    problems.append(f'learning_rate {learning_rate}')
  if params.value_dtype not in fp.DTYPES:
    problems.append(f'value_dtype {params.value_dtype}')
  return '; '.join(problems) or None


def _traced(params, on_wrap):
  assert on_wrap in ('raise', 'flag'), on_wrap  # validated before
  return ('traced', params)


@contextlib.contextmanager
def _no_tracing():
  with mock.patch.object(two_phase, 'two_phase_process', _traced), \
      mock.patch.object(multi_round, 'multi_round_process', _traced), \
      mock.patch.object(single_release, 'single_release_process', _traced):
    yield


def _validated_process(**kwargs):
  """build_frequency_process up to the tracing: the builders return their
  parameters."""
  with _no_tracing():
    return fp.build_frequency_process(**kwargs)


def _check_validated(kwargs, result):
  if not (isinstance(result, tuple) and result[0] == 'traced'):
    return f'{result!r:.100}'
  return _check_params(kwargs, result[1])


_FIXED = None


def _fixed_parameters():
  global _FIXED
  if _FIXED is None:
    _FIXED = fp.frequency_parameters('fixed', 8, 100, 2.0, 1e-5, clip=1.0)
  return _FIXED


class _Baseline:
  """Stands for the valid parameters, built at call time (not at import)."""

  def __repr__(self):
    return '<FrequencyParameters fixed>'


_BASELINE = _Baseline()


def _validated_from_parameters(params):
  with _no_tracing():
    return fp.build_frequency_process_from_parameters(
        _fixed_parameters() if params is _BASELINE else params)


def _check_from_parameters(kwargs, result):
  del kwargs
  return None if (isinstance(result, tuple) and result[0] == 'traced' and
                  isinstance(result[1], fp.FrequencyParameters)) else (
                      f'{result!r:.100}')


_DTYPES = st.sampled_from([
    np.float32, 'float64', np.int64,
    np.dtype('int32'), None, 'x', np.complex64, np.bool_, float
])
_KASHIN = st.one_of(
    st.none(), st.just({}), st.just({'redundancy': 2.0}),
    st.dictionaries(st.sampled_from(['redundancy', 'eta', 'x']),
                    fz.scalars(),
                    max_size=2), fz.any_value())
_PROTOCOLS = st.sampled_from(list(fp.PROTOCOLS) + ['x'])
_FREQUENCY_HINTS = dict(
    protocol=_PROTOCOLS,
    dim=st.one_of(st.integers(1, 64), fz.ints()),
    expected_clients_per_round=st.one_of(st.integers(1, 10**5), fz.ints()),
    epsilon=st.one_of(st.floats(0.1, 20), fz.floats()),
    delta=st.one_of(st.floats(1e-9, 0.1), fz.floats()),
    clip=st.one_of(st.floats(0.1, 100), fz.floats()),
    max_items=st.one_of(st.floats(1, 1000), fz.floats()),
    num_bins=st.one_of(st.sampled_from([2, 16, 64, 17]), fz.ints()),
    num_trials=st.one_of(st.integers(1, 64), fz.ints()),
    theta=_THETAS,
    calibrate=st.sampled_from(['theta', 'num_trials', 'x']),
    budget_fraction=st.one_of(st.floats(0.05, 0.9), fz.floats()),
    target_quantile=st.one_of(st.floats(0.05, 0.95), fz.floats()),
    rounds=st.one_of(st.integers(1, 10), fz.ints()),
    total_clients=st.one_of(st.integers(2000, 10**6), fz.ints()),
    disjoint_rounds=st.one_of(st.booleans(), fz.any_value()),
    learning_rate=st.one_of(st.floats(0.01, 10), fz.floats()),
    indicator_num_trials=st.one_of(st.integers(1, 30), fz.ints()),
    sample_items=st.one_of(st.integers(1, 100), fz.ints()),
    divisor=st.sampled_from(['l2', 'linf', 'x']),
    adversary=st.sampled_from(['server', 'release', 'both']),
    value_dtype=_DTYPES,
    seed=fz.ints(),
    kashin_options=_KASHIN)
_FREQUENCY_NAMES = tuple(_FREQUENCY_HINTS) + (
    'redundancy', 'eta', 'iterations', 'frame')  # kashin_options' keys
_FIXED_BASELINE = dict(protocol='fixed',
                       dim=8,
                       expected_clients_per_round=100,
                       epsilon=2.0,
                       delta=1e-5,
                       clip=1.0)
_TWO_PHASE_BASELINE = dict(protocol='two_phase',
                           dim=8,
                           expected_clients_per_round=1000,
                           epsilon=5.0,
                           delta=1e-5,
                           max_items=10.0,
                           num_bins=16)
_MULTI_BASELINE = dict(protocol='multi_round',
                       dim=8,
                       expected_clients_per_round=1000,
                       epsilon=5.0,
                       delta=1e-5,
                       rounds=2)

PROCESS_ENTRY_POINTS = [
    fz.EntryPoint(name='analytics.frequency_parameters (fixed)',
                  call=fp.frequency_parameters,
                  baseline=dict(_FIXED_BASELINE),
                  check=_check_params,
                  hints=dict(_FREQUENCY_HINTS),
                  names=_FREQUENCY_NAMES,
                  max_examples=25,
                  budget=fz.CPBM_CALIBRATION_BUDGET,
                  examples=[
                      ('value_dtype None (silently float64)',
                       dict(value_dtype=None), 'clear_error'),
                      ("value_dtype 'x' (numpy's message)",
                       dict(value_dtype='x'), 'clear_error'),
                      ('num_bins array (ambiguous truth value)',
                       dict(num_bins=np.array([1, 2])), 'clear_error'),
                      ('learning_rate array',
                       dict(learning_rate=np.array([1., 2.])), 'clear_error'),
                      ("kashin_options 'abc' (dict()'s message)",
                       dict(kashin_options='abc'), 'clear_error'),
                      ('kashin_options unknown key',
                       dict(kashin_options={'x': 1}), 'clear_error'),
                      ('clip 1e308 (NaN estimates)', dict(clip=1e308),
                       'clear_error'),
                      ('clip 1e30', dict(clip=1e30), 'documented'),
                  ]),
    fz.EntryPoint(name='analytics.frequency_parameters (two_phase)',
                  call=fp.frequency_parameters,
                  baseline=dict(_TWO_PHASE_BASELINE),
                  check=_check_params,
                  hints={
                      k: _FREQUENCY_HINTS[k]
                      for k in ('max_items', 'num_bins', 'budget_fraction',
                                'target_quantile', 'expected_clients_per_round',
                                'epsilon')
                  },
                  names=_FREQUENCY_NAMES,
                  max_examples=8,
                  budget=fz.CPBM_CALIBRATION_BUDGET,
                  examples=[
                      ('max_items 1e308 (histogram over [0, inf])',
                       dict(max_items=1e308), 'clear_error'),
                      ('max_items 1e-300', dict(max_items=1e-300),
                       'clear_error'),
                  ]),
    fz.EntryPoint(
        # Its errors must name quantile_num_trials, not the quantile
        # process's num_trials (another argument of frequency_parameters).
        name='analytics.frequency_parameters (two_phase, '
        'quantile_num_trials)',
        call=fp.frequency_parameters,
        baseline=dict(_TWO_PHASE_BASELINE),
        check=_check_params,
        hints=dict(quantile_num_trials=st.one_of(st.none(), st.integers(1, 300),
                                                 fz.ints())),
        fuzzed=('quantile_num_trials',),
        names=('quantile_num_trials',),
        max_examples=8,
        budget=fz.CPBM_CALIBRATION_BUDGET,
        examples=[
            ("'x' (the message named num_trials)",
             dict(quantile_num_trials='x'), 'clear_error'),
            ('2**40 (beyond the ring; the message named num_trials)',
             dict(quantile_num_trials=2**40), 'clear_error'),
            ('3', dict(quantile_num_trials=3), 'documented'),
        ]),
    fz.EntryPoint(name='analytics.frequency_parameters (multi_round)',
                  call=fp.frequency_parameters,
                  baseline=dict(_MULTI_BASELINE),
                  check=_check_params,
                  hints={
                      k: _FREQUENCY_HINTS[k]
                      for k in ('rounds', 'total_clients', 'disjoint_rounds',
                                'learning_rate', 'indicator_num_trials', 'clip',
                                'target_quantile')
                  },
                  names=_FREQUENCY_NAMES,
                  max_examples=15,
                  budget=fz.CPBM_CALIBRATION_BUDGET,
                  examples=[
                      ('total_clients 10**30', dict(total_clients=10**30),
                       'clear_error'),
                      ('rounds 10**30 (default total_clients)',
                       dict(rounds=10**30), 'clear_error'),
                      ('initial clip 1e308', dict(clip=1e308), 'clear_error'),
                      ('initial clip 5e-324 (x / C overflows)',
                       dict(clip=5e-324), 'clear_error'),
                      ('learning_rate 1e308 (the clip overflows in one round)',
                       dict(learning_rate=1e308), 'clear_error'),
                  ]),
    fz.EntryPoint(name='analytics.build_frequency_process (validation)',
                  call=_validated_process,
                  baseline=dict(_FIXED_BASELINE),
                  check=_check_validated,
                  hints=dict(_FREQUENCY_HINTS),
                  fuzzed=('protocol', 'dim', 'clip', 'sample_items',
                          'value_dtype', 'kashin_options', 'divisor',
                          'num_bins', 'seed'),
                  names=_FREQUENCY_NAMES,
                  max_examples=15,
                  budget=fz.CPBM_CALIBRATION_BUDGET,
                  examples=[
                      ('sample_items 2**70 (an int64 tensor at tracing)',
                       dict(protocol='sample', clip=None,
                            sample_items=2**70), 'clear_error'),
                      ('sample',
                       dict(protocol='sample', clip=None,
                            sample_items=3), 'documented'),
                      ('normalize', dict(protocol='normalize',
                                         clip=None), 'documented'),
                  ]),
    fz.EntryPoint(name='analytics.build_frequency_process_from_parameters '
                  '(validation)',
                  call=_validated_from_parameters,
                  baseline=dict(params=_BASELINE),
                  check=_check_from_parameters,
                  hints=dict(params=fz.any_value()),
                  max_examples=10),
]

ENTRY_POINTS = MATH_ENTRY_POINTS + PROCESS_ENTRY_POINTS
