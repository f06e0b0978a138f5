"""The fuzz entry points of the aggregation factories: constructors with
dp_event (the dimension-dependent checks; `create` builds TFF computations and
is covered by the factory tests) and the calibrated factories.

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_aggregators_test.py and a
row of bad_inputs.py.
"""

import functools
import math

import dp_accounting
from hypothesis import strategies as st
import numpy as np
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.mechanisms import poisson_binomial as pbm
from tff_ddp_tests import ddg_factories
from tff_ddp_tests.fuzz import strategies as fz

_VT = tff.TensorType(np.float32, [8])
_DTYPES = st.sampled_from([
    np.float32, np.float64, np.int32, np.int64, np.bool_, np.str_, np.complex64
])
_DIMS = st.one_of(st.integers(0, 64),
                  st.integers(0, 64).map(np.int64), st.none(), fz.ints())


def value_types():
  tensor = st.builds(tff.TensorType, _DTYPES, st.lists(_DIMS, max_size=3))
  return st.one_of(
      tensor,
      st.lists(tensor, min_size=1, max_size=3).map(tff.StructType),
      st.builds(lambda a, b: tff.StructType([('a', a), ('b', b)]),
                tensor, tensor), st.just(np.float32), st.just(tf_spec()),
      fz.any_value())


def tf_spec():
  import tensorflow as tf
  return tf.TensorSpec([4], tf.float32)


def _factory_event(build):
  """The checks for `value_type` of the factory `build(**kwargs)` returns
  (those of `create`, without tracing), then its planning event."""

  def call(value_type=_VT, num_clients=None, **kwargs):
    factory = build(**kwargs)
    factory.check_value_type(value_type)
    return factory.dp_event(value_type, num_clients)

  return call


def _check_round_event(kwargs, event):
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    if kwargs.get('noise_multiplier',
                  1.0) == 0 or kwargs.get('debug_measurements'):
      return None
    return 'a NonPrivateDpEvent for a private configuration'
  eps, _ = accountant.epsilon(event, 1e-5)
  return fz.epsilon_ok(eps)


def _check_calibrated(kwargs, result):
  if result.epsilon > float(kwargs['target_epsilon']) * (1 + 1e-9):
    return f'epsilon {result.epsilon} above the target'
  eps, _ = accountant.epsilon(result.event, float(kwargs['target_delta']))
  if not math.isclose(eps, result.epsilon, rel_tol=1e-9):
    return f'reported epsilon {result.epsilon}, recomputed {eps}'
  return fz.epsilon_ok(result.epsilon)


_COMMON_HINTS = dict(value_type=value_types(),
                     num_clients=fz.ints(),
                     client_sampling_rate=fz.floats(),
                     count_noise_multiplier=fz.floats(),
                     debug_measurements=fz.any_value(),
                     seed=fz.ints(),
                     entropy=fz.any_value())
_SIZES = st.one_of(st.integers(-2, 40), fz.ints())
_NAMES_COMMON = ('value_type', 'dim', 'num_clients', 'client_sampling_rate',
                 'count_noise_multiplier', 'debug_measurements', 'seed',
                 'entropy', 'keyword', 'redundancy', 'eta', 'delta',
                 'iterations', 'frame')

ENTRY_POINTS = [
    fz.EntryPoint(
        name='aggregators.DiscreteGaussianSumFactory',
        call=_factory_event(
            functools.partial(ddg_factories.make, DiscreteGaussianSumFactory)),
        baseline=dict(noise_multiplier=1.0,
                      expected_clients_per_round=10,
                      bits=16,
                      l2_clip=1.0),
        check=_check_round_event,
        hints=dict(_COMMON_HINTS,
                   noise_multiplier=fz.floats(),
                   expected_clients_per_round=_SIZES,
                   bits=_SIZES,
                   l2_clip=fz.floats(),
                   modclip_prob=fz.floats(),
                   beta=fz.floats(),
                   granularity=fz.floats(),
                   linf_clip=fz.floats(),
                   encoder=st.sampled_from(
                       ['hadamard', 'kashin', 'none', 'dft', 'hd']),
                   mechanism=st.sampled_from(
                       ['distributed_dgauss', 'distributed_skellam']),
                   noise_sampler=st.sampled_from(['table', 'exact', 'fast']),
                   redundancy=fz.floats()),
        names=_NAMES_COMMON +
        ('noise_multiplier', 'expected_clients_per_round', 'bits', 'l2_clip',
         'modclip_prob', 'beta', 'granularity', 'linf_clip', 'encoder',
         'mechanism', 'noise_sampler', 'Kashin', 'Request'),
        max_examples=25,
        examples=[
            ('expected_clients_per_round=True',
             dict(expected_clients_per_round=True), 'clear_error'),
            ('l2_clip 1e300 on float32 (the sum was +-inf)',
             dict(l2_clip=1e300), 'clear_error'),
            ('l2_clip 1e300 on float64',
             dict(l2_clip=1e300, value_type=tff.TensorType(np.float64,
                                                           [8])), 'documented'),
            ('l2_clip and noise 1e300',
             dict(l2_clip=1e300, noise_multiplier=1e300), 'clear_error'),
            ('l2_clip 5e-324', dict(l2_clip=5e-324), 'clear_error'),
            ('noise 1e-300', dict(noise_multiplier=1e-300), 'clear_error'),
            ('StructType',
             dict(value_type=tff.StructType([(
                 'a', _VT), ('b', tff.TensorType(np.float64, [3]))])),
             'documented'),
            ('np.int64 dims',
             dict(value_type=tff.TensorType(np.float32, [np.int64(8)])),
             'documented'),
            ('mechanism=distributed_skellam',
             dict(mechanism='distributed_skellam'), 'documented'),
            ('encoder=dft', dict(encoder='dft'), 'documented'),
            ('string value_type', dict(value_type='float32'), 'clear_error'),
            ('bool tensor', dict(value_type=tff.TensorType(np.bool_, [3])),
             'clear_error'),
            ('2^40 elements',
             dict(value_type=tff.TensorType(np.float32, [2**20, 2**20])),
             'clear_error'),
        ]),
    fz.EntryPoint(
        name='aggregators.DiscreteGaussianSumFactory.from_tff_arguments',
        call=_factory_event(DiscreteGaussianSumFactory.from_tff_arguments),
        baseline=dict(noise_multiplier=1.0,
                      expected_clients_per_round=10,
                      bits=16,
                      l2_clip=1.0),
        check=_check_round_event,
        hints=dict(_COMMON_HINTS,
                   noise_multiplier=fz.floats(),
                   expected_clients_per_round=_SIZES,
                   bits=_SIZES,
                   l2_clip=fz.floats(),
                   modclip_prob=fz.floats(),
                   beta=fz.floats(),
                   mechanism=st.sampled_from(
                       ['distributed_dgauss', 'distributed_skellam']),
                   rotation_type=st.sampled_from(['hd', 'dft', 'hadamard']),
                   auto_l2_clip=fz.any_value(),
                   auto_l2_target_quantile=fz.floats(),
                   auto_l2_lr=fz.floats(),
                   auto_l2_clip_count_stddev=fz.floats(),
                   encoder=st.sampled_from(['hadamard', 'kashin'])),
        names=_NAMES_COMMON +
        ('noise_multiplier', 'expected_clients_per_round', 'bits', 'l2_clip',
         'modclip_prob', 'beta', 'mechanism', 'rotation_type', 'auto_l2_clip',
         'auto_l2_target_quantile', 'auto_l2_lr', 'auto_l2_clip_count_stddev',
         'encoder'),
        max_examples=25,
        examples=[
            ('expected_clients_per_round=True',
             dict(expected_clients_per_round=True), 'clear_error'),
            ('l2_clip 1e300 on float32 (the sum was +-inf)',
             dict(l2_clip=1e300), 'clear_error'),
            ('auto_l2_clip with l2_clip 1e300',
             dict(auto_l2_clip=True, l2_clip=1e300), 'clear_error'),
            ('TFF mechanism=distributed_skellam',
             dict(mechanism='distributed_skellam'), 'documented'),
            ('TFF rotation_type=dft', dict(rotation_type='dft'), 'documented'),
            ('TFF rotation_type=hd', dict(rotation_type='hd'), 'documented'),
            ('encoder= (not a TFF keyword)', dict(encoder='kashin'),
             'clear_error'),
        ]),
    fz.EntryPoint(
        name='aggregators.PoissonBinomialSumFactory',
        call=_factory_event(PoissonBinomialSumFactory),
        baseline=dict(l2_clip=1.0,
                      theta=0.1,
                      num_trials=16,
                      expected_clients_per_round=10),
        check=_check_round_event,
        hints=dict(_COMMON_HINTS,
                   l2_clip=fz.floats(),
                   theta=fz.floats(),
                   num_trials=_SIZES,
                   expected_clients_per_round=_SIZES,
                   max_clients_per_round=_SIZES,
                   linf_clip=fz.floats(),
                   l0_clip=_SIZES,
                   divisor=st.sampled_from(['l2', 'linf', 'l1']),
                   encoder=st.sampled_from(
                       ['hadamard', 'kashin', 'none', 'dft']),
                   mechanism=st.just('distributed_dgauss'),
                   rotation_type=st.just('hd'),
                   redundancy=fz.floats()),
        names=_NAMES_COMMON +
        ('l2_clip', 'theta', 'num_trials', 'expected_clients_per_round',
         'max_clients_per_round', 'linf_clip', 'l0_clip', 'divisor', 'encoder',
         'mechanism', 'rotation_type'),
        max_examples=25,
        examples=[
            ('num_trials 10**12', dict(num_trials=10**12), 'clear_error'),
            ('num_trials MAX',
             dict(num_trials=pbm.MAX_NUM_TRIALS,
                  expected_clients_per_round=4), 'documented'),
            ('theta 1e-300', dict(theta=1e-300), 'clear_error'),
            ('expected_clients_per_round=True',
             dict(expected_clients_per_round=True), 'clear_error'),
            ('TFF mechanism=', dict(mechanism='distributed_dgauss'),
             'clear_error'),
            ('TFF rotation_type=', dict(rotation_type='hd'), 'clear_error'),
            ('Kashin redundancy 1e9', dict(redundancy=1e9), 'clear_error'),
        ],
        # Its first kappa at the client cap costs ~20 s of CPU (below).
        slow_examples=[
            ('a trillion clients (kappa at the 2^22 cap)',
             dict(num_clients=10**12), 'documented'),
        ],
        # The event's epsilon needs the l2-aware kappa_alpha
        # (`pbm_rdp.kappa`), certified over a grid of shifts; its first
        # computation at the client cap (pbm_rdp.MAX_EXACT_CLIENTS = 2^22)
        # over the 73 default orders costs ~19 s on one core here, ~25 s
        # under CI's load (then it is cached). The default 5 s budget made
        # that first call a 'hang' and a Hypothesis deadline error that did
        # not repeat (FlakyFailure). 60 s is ~3x the measured cost: a
        # regression beyond it is still reported as a hang.
        budget=60.0),
    fz.EntryPoint(name='aggregators.calibrated.discrete_gaussian',
                  call=calibrated.discrete_gaussian,
                  baseline=dict(value_type=_VT,
                                target_epsilon=2.0,
                                target_delta=1e-5,
                                expected_clients_per_round=10,
                                bits=20,
                                l2_clip=1.0),
                  check=_check_calibrated,
                  hints=dict(value_type=value_types(),
                             target_epsilon=fz.floats(),
                             target_delta=fz.floats(),
                             rounds=fz.ints(),
                             sampling=st.sampled_from(['none', 'poisson', 'x']),
                             rate=fz.floats(),
                             bits=_SIZES,
                             l2_clip=fz.floats(),
                             noise_multiplier=st.just(1.0)),
                  names=_NAMES_COMMON +
                  ('target_epsilon', 'target_delta', 'rounds', 'sampling',
                   'rate', 'bits', 'l2_clip', 'noise_multiplier', 'mechanism',
                   'expected_clients_per_round'),
                  max_examples=8,
                  budget=20.0,
                  examples=[('TFF mechanism=', dict(mechanism='x'),
                             'clear_error')]),
    fz.EntryPoint(
        name='aggregators.calibrated.poisson_binomial',
        call=calibrated.poisson_binomial,
        baseline=dict(
            value_type=_VT,
            target_epsilon=2.0,
            target_delta=1e-5,
            num_trials=16,
            expected_clients_per_round=10,
            l2_clip=1.0),
        check=_check_calibrated,
        hints=dict(value_type=value_types(),
                   target_epsilon=fz.floats(),
                   target_delta=fz.floats(),
                   rounds=fz.ints(),
                   parameter=st.sampled_from(['theta', 'num_trials', 'm']),
                   num_trials=_SIZES,
                   l2_clip=fz.floats(),
                   expected_clients_per_round=_SIZES),
        names=_NAMES_COMMON +
        ('target_epsilon', 'target_delta', 'rounds', 'parameter', 'num_trials',
         'l2_clip', 'expected_clients_per_round', 'theta'),
        max_examples=8,
        budget=fz.CPBM_CALIBRATION_BUDGET,
        examples=[('clients True', dict(expected_clients_per_round=True),
                   'clear_error')]),
]
