"""The fuzz entry points of the analytics: histogram helpers, quantile
calibration and the validation of `build_quantile_process` (before any TFF
tracing: the process building itself is covered by the quantile tests).

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_analytics_test.py and a row
of bad_inputs.py.
"""

import math
from unittest import mock

from hypothesis import strategies as st
import numpy as np

from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import process as q
from tff_ddp.analytics.quantiles import simulation
from tff_ddp_tests.fuzz import strategies as fz

_METHODS = st.sampled_from(['flat', 'tree', 'haar', 'hierarchical', 'dyadic'])
_BINS = st.one_of(st.integers(-1, 70),
                  st.sampled_from([2**16, 2**16 + 1, 100000]), fz.ints())


def _encoding_length(method, num_bins):
  """The length of the encoding a user's name gives, resolved once at the
  edge (`encoding`), as every caller does."""
  return hg.encoding(method, num_bins).length


def _cdf(method,
         noisy_sum,
         num_bins,
         count,
         num_clients=None,
         consistent=False,
         monotone=False):
  """`Encoding.cdf` of the encoding a user's name gives, with the `count`
  option resolved as the callers resolve it (`exact_count`)."""
  return hg.encoding(method, num_bins).cdf(
      noisy_sum,
      num_clients if hg.exact_count(count) else None,
      consistent=consistent,
      monotone=monotone)


def _check_length(kwargs, n):
  b = int(kwargs['num_bins'])
  method = hg.canonical_method(kwargs['method'])
  return None if n == {
      'flat': b,
      'tree': 2 * b - 2,
      'haar': b
  }[method] else (f'length {n}')


def _check_range(kwargs, result):
  lo, hi = result
  ok = math.isfinite(lo) and math.isfinite(hi) and lo < hi and (lo == float(
      kwargs['lower']) and hi == float(kwargs['upper']))
  return None if ok else f'range {result}'


def _check_edges(kwargs, e):
  b = int(kwargs['num_bins'])
  e = np.asarray(e)
  if e.shape != (b,) or not np.all(np.isfinite(e)) or np.any(np.diff(e) < 0):
    return f'edges {e}'
  if not math.isclose(
      e[-1], float(kwargs['upper']), rel_tol=1e-9, abs_tol=1e-300):
    return f'last edge {e[-1]} for upper {kwargs["upper"]}'
  return None


def _check_cdf(kwargs, cdf):
  cdf = np.asarray(cdf)
  b = int(kwargs['num_bins'])
  if cdf.shape != (b,) or cdf.dtype != np.float64:
    return f'cdf shape {cdf.shape} dtype {cdf.dtype}'
  if kwargs.get('monotone') and (np.any(np.diff(cdf) < 0) or np.any((cdf < 0) |
                                                                    (cdf > 1))):
    return 'a monotone cdf that is not monotone in [0, 1]'
  return None


def _check_quantile_values(kwargs, values):
  values = np.asarray(values)
  lo, hi = float(kwargs['lower']), float(kwargs['upper'])
  if values.shape != (len(list(kwargs['quantiles'])),):
    return f'shape {values.shape}'
  if np.any(
      np.isnan(values)) or np.any(values < lo) or np.any(values > hi *
                                                         (1 + 1e-12) + 1e-300):
    return f'values {values} outside [{lo}, {hi}]'
  return None


def _check_params(kwargs, params):
  if not isinstance(params, qc.QuantileParameters):
    return f'{type(params).__name__}'
  eps = float(kwargs['epsilon'])
  if not 0 <= params.epsilon <= eps * (1 + 1e-9):
    return f'epsilon {params.epsilon} for the target {eps}'
  return None


_SETTING_FIELDS = ('expected_clients_per_round', 'epsilon', 'delta', 'bits',
                   'rounds', 'adversary', 'num_trials', 'seed')
_ESTIMATION_FIELDS = ('count', 'estimator', 'consistent_tree',
                      'min_total_stddevs')


def _validated_process(**kwargs):
  """build_quantile_process up to the tracing (_build returns its input),
  every field fuzzed flat: the setting's into `QuantileSetting`, the
  estimation's into `QuantileEstimation` (each validated where it is
  built), the rest as the builder's own arguments."""
  setting = {k: kwargs.pop(k) for k in _SETTING_FIELDS if k in kwargs}
  estimation = {k: kwargs.pop(k) for k in _ESTIMATION_FIELDS if k in kwargs}
  with mock.patch.object(q, '_build', lambda params, *args, **kwargs:
                         (params, args)):
    return q.build_quantile_process(
        setting=q.QuantileSetting(**setting),
        estimation=q.QuantileEstimation(**estimation),
        **kwargs)


def _quantile_parameters(method, mechanism, num_bins, **setting):
  """quantile_parameters with the setting's fields fuzzed flat."""
  return qc.quantile_parameters(method, mechanism, num_bins,
                                qc.QuantileSetting(**setting))


def _check_validated(kwargs, result):
  params, (options,) = result
  lower, upper, quantiles = (options.lower_bound, options.upper_bound,
                             options.quantiles)
  return fz.first_error(
      _check_params(kwargs, params),
      None if lower < upper and all(0 < p < 1 for p in quantiles) else
      f'range {lower}, {upper}, quantiles {quantiles}')


def _check_z(_kwargs, z):
  return None if fz.is_real(z) and 0 < z < math.inf else f'z {z!r}'


_QUANTILES = st.one_of(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=3),
                       st.lists(fz.floats(), max_size=3), fz.any_value())
_PROCESS = dict(method='flat',
                mechanism='discrete_gaussian',
                lower_bound=0.0,
                upper_bound=1.0,
                num_bins=16,
                quantiles=[0.5],
                expected_clients_per_round=100,
                epsilon=1.0,
                delta=1e-5)

ENTRY_POINTS = [
    fz.EntryPoint(name='analytics.quantiles.encodings.Encoding.length',
                  call=_encoding_length,
                  baseline=dict(method='tree', num_bins=16),
                  check=_check_length,
                  hints=dict(method=_METHODS, num_bins=_BINS)),
    fz.EntryPoint(name='analytics.quantiles.encodings.check_range',
                  call=hg.check_range,
                  baseline=dict(lower=0.0, upper=1.0),
                  check=_check_range,
                  hints=dict(lower=fz.floats(), upper=fz.floats()),
                  names=('lower_bound', 'upper_bound')),
    fz.EntryPoint(name='analytics.quantiles.encodings.edges',
                  call=hg.edges,
                  baseline=dict(lower=0.0, upper=1.0, num_bins=4),
                  check=_check_edges,
                  hints=dict(lower=fz.floats(),
                             upper=fz.floats(),
                             num_bins=_BINS),
                  names=('lower', 'upper', 'lower_bound', 'upper_bound',
                         'num_bins'),
                  examples=[('num_bins 10**12', dict(num_bins=10**12),
                             'clear_error'),
                            ('string bound', dict(upper='1'), 'clear_error')]),
    fz.EntryPoint(name='analytics.quantiles.encodings.Encoding.cdf',
                  call=_cdf,
                  baseline=dict(method='flat',
                                noisy_sum=[1.0, 2.0, 3.0, 4.0],
                                num_bins=4,
                                count='estimated',
                                num_clients=None,
                                consistent=False,
                                monotone=False),
                  check=_check_cdf,
                  hints=dict(method=_METHODS,
                             num_bins=_BINS,
                             noisy_sum=st.lists(fz.floats(), max_size=6),
                             count=st.sampled_from(['estimated', 'exact', 'x']),
                             num_clients=fz.ints(),
                             monotone=st.booleans(),
                             consistent=st.booleans()),
                  examples=[
                      ('wrong length', dict(noisy_sum=[1.0, 2.0]),
                       'clear_error'),
                      ('zero total', dict(noisy_sum=[0.0] * 4), 'documented'),
                      ('nan sum', dict(noisy_sum=[math.nan] * 4), 'documented')
                  ]),
    fz.EntryPoint(name='analytics.quantiles.encodings.quantile_values',
                  call=hg.quantile_values,
                  baseline=dict(cdf=[0.25, 0.5, 0.75, 1.0],
                                quantiles=[0.5],
                                lower=0.0,
                                upper=1.0,
                                num_bins=4,
                                interpolate=False),
                  check=_check_quantile_values,
                  hints=dict(cdf=st.lists(fz.floats(), max_size=5),
                             quantiles=_QUANTILES,
                             lower=fz.floats(),
                             upper=fz.floats(),
                             num_bins=_BINS,
                             interpolate=st.booleans()),
                  names=('cdf', 'quantiles', 'lower', 'upper', 'lower_bound',
                         'upper_bound', 'num_bins', 'interpolate'),
                  examples=[('cdf shorter than num_bins', dict(cdf=[0.5, 1.0]),
                             'clear_error')]),
    fz.EntryPoint(name='analytics.quantile_parameters',
                  call=_quantile_parameters,
                  baseline=dict(method='flat',
                                mechanism='poisson_binomial',
                                num_bins=16,
                                expected_clients_per_round=100,
                                epsilon=1.0,
                                delta=1e-5,
                                bits=18,
                                rounds=1,
                                adversary='server',
                                seed=None),
                  check=_check_params,
                  hints=dict(method=_METHODS,
                             mechanism=st.sampled_from([
                                 'discrete_gaussian', 'poisson_binomial',
                                 'laplace'
                             ]),
                             num_bins=_BINS,
                             expected_clients_per_round=fz.ints(),
                             epsilon=fz.floats(),
                             delta=fz.floats(),
                             bits=st.integers(-1, 31),
                             rounds=fz.ints()),
                  max_examples=10,
                  budget=fz.CPBM_CALIBRATION_BUDGET,
                  examples=[
                      ('zero clients', dict(expected_clients_per_round=0),
                       'clear_error'),
                      ('cPBM bits 30, 4 clients',
                       dict(bits=30,
                            expected_clients_per_round=4), 'documented'),
                  ]),
    fz.EntryPoint(
        name='analytics.build_quantile_process (validation)',
        call=_validated_process,
        baseline=dict(_PROCESS),
        check=_check_validated,
        hints=dict(method=_METHODS,
                   lower_bound=fz.floats(),
                   upper_bound=fz.floats(),
                   num_bins=_BINS,
                   quantiles=_QUANTILES,
                   count=st.sampled_from(['estimated', 'exact', 'noisy']),
                   estimator=st.sampled_from(['paper', 'monotone', 'mean']),
                   consistent_tree=fz.any_value(),
                   min_total_stddevs=fz.floats(),
                   seed=fz.ints()),
        fuzzed=('method', 'lower_bound', 'upper_bound', 'num_bins', 'quantiles',
                'count', 'estimator', 'consistent_tree', 'min_total_stddevs',
                'seed'),
        names=tuple(_PROCESS) +
        ('count', 'estimator', 'consistent_tree', 'min_total_stddevs', 'seed',
         'bits', 'quantiles[0]', 'quantiles[1]', 'quantiles[2]'),
        max_examples=15,
        budget=20.0,
        examples=[
            ('num_bins 100000', dict(num_bins=100000), 'clear_error'),
            ('monotone 4096 bins', dict(num_bins=4096,
                                        estimator='monotone'), 'clear_error'),
        ]),
    fz.EntryPoint(
        name='analytics.quantiles.simulation.central_noise_multiplier',
        call=simulation.central_noise_multiplier,
        baseline=dict(epsilon=1.0, delta=1e-5, rounds=1),
        check=_check_z,
        hints=dict(epsilon=fz.floats(), delta=fz.floats(), rounds=fz.ints()),
        names=('epsilon', 'target_epsilon', 'delta', 'target_delta', 'rounds'),
        max_examples=15,
        budget=fz.CALIBRATION_BUDGET),
]
