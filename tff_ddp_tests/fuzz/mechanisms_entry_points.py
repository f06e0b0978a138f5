"""The fuzz entry points of the mechanisms: compute_parameters of DDG and cPBM,
and the three samplers (see `strategies` for the outcomes and the budgets).

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_mechanisms_test.py and a
row of bad_inputs.py.
"""

import math

from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import pbm_rdp
from tff_ddp.mechanisms import base
from tff_ddp.mechanisms import binomial
from tff_ddp.mechanisms import discrete_gaussian
from tff_ddp.mechanisms import discrete_gaussian_table
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import poisson_binomial as pbm
from tff_ddp_tests.fuzz import strategies as fz

_ORDERS = (1.5, 2.0, 8.0, 64.0)


def _same_number(given, used) -> bool:
  return float(given) == float(used)


def _check_ddg(kwargs, m):
  if not isinstance(m, ddg.DistributedDiscreteGaussian):
    return f'not a DistributedDiscreteGaussian: {type(m).__name__}'
  if not (ddg.MIN_BITS <= m.bits <= ddg.MAX_BITS and m.bits == kwargs['bits']):
    return f'bits {m.bits} for {kwargs["bits"]!r}'
  for arg in ('l2_clip', 'noise_multiplier', 'expected_clients_per_round'):
    if not _same_number(kwargs[arg], getattr(m, arg)):
      return f'{arg} {getattr(m, arg)!r} for {kwargs[arg]!r}'
  if not (math.isfinite(m.gamma) and m.gamma > 0):
    return f'gamma {m.gamma!r}'
  if m.noise_multiplier > 0 and not 0.5 <= m.scaled_local_stddev <= (
      discrete_gaussian.max_supported_scale()):
    return f'scaled local stddev {m.scaled_local_stddev!r} outside [1/2, max]'
  if not 0 <= m.norm_threshold < 2**63:
    return f'norm threshold {m.norm_threshold!r} overflows int64'
  event = m.dp_event()
  if m.noise_multiplier == 0:
    return None
  ddg_rdp.check_event(event)
  return fz.curve_ok(ddg_rdp.rdp(event, _ORDERS), len(_ORDERS))


def _check_pbm(kwargs, m):
  if not isinstance(m, pbm.PoissonBinomial):
    return f'not a PoissonBinomial: {type(m).__name__}'
  if not pbm.MIN_BITS <= m.bits <= pbm.MAX_BITS:
    return f'bits {m.bits}'
  if m.max_clients_per_round * m.num_trials >= 2**m.bits:
    return 'the sum can wrap the ring'
  if not 1 <= m.num_trials <= pbm.MAX_NUM_TRIALS:
    return f'num_trials {m.num_trials}'
  if not (0.25 <= m.p_low <= 0.5 <= m.p_high <= 0.75 and
          m.p_high - 0.5 <= m.theta):
    return f'probabilities {m.p_low}, {m.p_high} for theta {m.theta}'
  if not (math.isfinite(m.coordinate_bound) and m.coordinate_bound > 0):
    return f'coordinate bound {m.coordinate_bound!r}'
  for arg in ('l2_clip', 'theta', 'num_trials', 'expected_clients_per_round'):
    if not _same_number(kwargs[arg], getattr(m, arg)):
      return f'{arg} {getattr(m, arg)!r} for {kwargs[arg]!r}'
  event = pbm_rdp.check_event(m.dp_event())
  del event
  return None


def _int_list(shape):
  """The dims of a valid shape argument, or None if it is not one."""
  if isinstance(shape, tf.TensorShape):
    return shape.as_list()
  if not isinstance(shape, (list, tuple)):
    return None
  if any(
      isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
      for d in shape):
    return None
  return [int(d) for d in shape]


def _valid_seed(seed) -> bool:
  if isinstance(seed, (tf.Tensor, np.ndarray)):
    return seed.dtype in (tf.int32, tf.int64, np.int32, np.int64)
  return isinstance(seed, (list, tuple)) and len(seed) == 2 and all(
      isinstance(s, (int, np.integer)) and
      not isinstance(s, (bool, np.bool_)) and -2**63 <= int(s) < 2**63
      for s in seed)


def _check_samples(kwargs, out, bound):
  dims = _int_list(kwargs['shape'])
  if dims is None:
    return f'accepted shape {kwargs["shape"]!r}'
  if not _valid_seed(kwargs['seed']):
    return f'accepted seed {kwargs["seed"]!r}'
  if not isinstance(out, tf.Tensor) or out.dtype != tf.int64:
    return f'not an int64 tensor: {out!r:.100}'
  if out.shape.as_list() != dims:
    return f'shape {out.shape} for {dims}'
  values = out.numpy()
  if values.size and np.max(np.abs(values)) > bound:
    return f'a sample {np.max(np.abs(values))} beyond {bound}'
  return None


def _check_exact_samples(kwargs, out):
  scale = float(kwargs['scale'])
  # x_max^2 >= 2002 s with s <= scale^2 (1 + 2^-40): sqrt(2002) < 44.8.
  return _check_samples(kwargs, out, math.ceil(44.8 * scale) + 1)


def _check_table_samples(kwargs, out):
  scale = float(kwargs['scale'])
  # T + 1 = ceil(sqrt(2 s 111 ln 2)) <= 12.41 scale + 1.
  return _check_samples(kwargs, out, math.ceil(12.5 * scale) + 2)


def _check_binomial(kwargs, out):
  if not _valid_seed(kwargs['seed']):
    return f'accepted seed {kwargs["seed"]!r}'
  if isinstance(kwargs['num_trials'], (bool, float, np.floating)):
    return f'accepted num_trials {kwargs["num_trials"]!r}'
  probs = np.asarray(kwargs['probs'], dtype=np.float64)
  if not np.all((probs >= 0.25) & (probs <= 0.75)):
    return f'accepted probs {probs}'
  values = out.numpy()
  if out.dtype != tf.int64 or values.shape != probs.shape:
    return f'dtype {out.dtype} shape {values.shape} for {probs.shape}'
  if values.size and not (values.min() >= 0 and
                          values.max() <= int(kwargs['num_trials'])):
    return f'values outside [0, num_trials]: {values}'
  return None


def _ddg_parameters(dim, integer_inputs=False, **request):
  """ddg.compute_parameters with the request's fields fuzzed flat (each
  validated where `ddg.Request` is built)."""
  return ddg.compute_parameters(dim,
                                ddg.Request(**request),
                                integer_inputs=integer_inputs)


def _pbm_parameters(dim, **request):
  """pbm.compute_parameters with the request's fields fuzzed flat."""
  return pbm.compute_parameters(dim, pbm.Request(**request))


_PROBABILITIES = st.floats(0.0, 1.0)
_SIZES = st.one_of(st.integers(-2, 40), fz.ints())

ENTRY_POINTS = [
    fz.EntryPoint(name='mechanisms.ddg.compute_parameters',
                  call=_ddg_parameters,
                  baseline=dict(dim=8,
                                l2_clip=1.0,
                                noise_multiplier=1.0,
                                expected_clients_per_round=10,
                                bits=16,
                                modclip_prob=1e-4,
                                beta=0.0,
                                granularity=None,
                                linf_clip=None,
                                integer_inputs=False,
                                noise_sampler='table'),
                  check=_check_ddg,
                  hints=dict(dim=st.integers(1, 2**27),
                             l2_clip=fz.floats(),
                             noise_multiplier=fz.floats(),
                             bits=_SIZES,
                             expected_clients_per_round=_SIZES,
                             modclip_prob=_PROBABILITIES,
                             beta=_PROBABILITIES,
                             granularity=fz.floats(),
                             linf_clip=fz.floats()),
                  examples=[
                      ('l2_clip 1e300',
                       dict(dim=8,
                            l2_clip=1e300,
                            noise_multiplier=1.0,
                            expected_clients_per_round=10,
                            bits=16), 'documented'),
                      ('l2_clip and noise 1e300',
                       dict(dim=8,
                            l2_clip=1e300,
                            noise_multiplier=1e300,
                            expected_clients_per_round=10,
                            bits=16), 'clear_error'),
                      ('noise 1e-300',
                       dict(dim=8,
                            l2_clip=1.0,
                            noise_multiplier=1e-300,
                            expected_clients_per_round=10,
                            bits=16), 'clear_error'),
                      ('clients True',
                       dict(dim=8,
                            l2_clip=1.0,
                            noise_multiplier=1.0,
                            expected_clients_per_round=True,
                            bits=16), 'clear_error'),
                      ('numpy ints',
                       dict(dim=np.int64(8),
                            l2_clip=np.float32(1.0),
                            noise_multiplier=1.0,
                            expected_clients_per_round=np.int64(10),
                            bits=np.int32(16)), 'documented'),
                  ]),
    fz.EntryPoint(name='mechanisms.pbm.compute_parameters',
                  call=_pbm_parameters,
                  baseline=dict(dim=8,
                                l2_clip=1.0,
                                theta=0.1,
                                num_trials=16,
                                expected_clients_per_round=10,
                                max_clients_per_round=None,
                                divisor='l2',
                                linf_clip=None,
                                l0_clip=None),
                  check=_check_pbm,
                  hints=dict(dim=st.integers(1, 2**27),
                             l2_clip=fz.floats(),
                             theta=fz.floats(),
                             num_trials=_SIZES,
                             expected_clients_per_round=_SIZES,
                             max_clients_per_round=_SIZES,
                             linf_clip=fz.floats(),
                             l0_clip=_SIZES),
                  examples=[
                      ('num_trials 10**12',
                       dict(dim=8,
                            l2_clip=1.0,
                            theta=0.1,
                            num_trials=10**12,
                            expected_clients_per_round=4), 'clear_error'),
                      ('num_trials MAX_NUM_TRIALS',
                       dict(dim=8,
                            l2_clip=1.0,
                            theta=0.1,
                            num_trials=pbm.MAX_NUM_TRIALS,
                            expected_clients_per_round=4), 'documented'),
                      ('theta 1e-300',
                       dict(dim=8,
                            l2_clip=1.0,
                            theta=1e-300,
                            num_trials=16,
                            expected_clients_per_round=4), 'clear_error'),
                      ('clients True',
                       dict(dim=8,
                            l2_clip=1.0,
                            theta=0.1,
                            num_trials=16,
                            expected_clients_per_round=True), 'clear_error'),
                      ('clients 2^30',
                       dict(dim=8,
                            l2_clip=1.0,
                            theta=0.1,
                            num_trials=1,
                            expected_clients_per_round=base.MAX_MODULUS),
                       'clear_error'),
                  ]),
    fz.EntryPoint(name='mechanisms.sample_discrete_gaussian',
                  call=discrete_gaussian.sample_discrete_gaussian,
                  baseline=dict(shape=[3], scale=2.0, seed=[1, 2]),
                  check=_check_exact_samples,
                  hints=dict(shape=fz.shapes(),
                             seed=fz.seeds(),
                             scale=st.one_of(fz.floats(),
                                             st.floats(0.0, 2.0**25))),
                  max_examples=15,
                  examples=[
                      ('shape [2.5]', dict(shape=[2.5], scale=1.0,
                                           seed=[1, 2]), 'clear_error'),
                      ('float seed', dict(shape=[2], scale=1.0,
                                          seed=[1.5, 2.0]), 'clear_error'),
                      ('scalar seed', dict(shape=[2], scale=1.0,
                                           seed=1.5), 'clear_error'),
                      ('seed of 3', dict(shape=[2], scale=1.0,
                                         seed=[1, 2, 3]), 'clear_error'),
                      ('negative dim', dict(shape=[-1], scale=1.0,
                                            seed=[1, 2]), 'clear_error'),
                      ('string shape', dict(shape='ab', scale=1.0,
                                            seed=[1, 2]), 'clear_error'),
                      ('10**12 samples',
                       dict(shape=[10**12], scale=1.0,
                            seed=[1, 2]), 'clear_error'),
                      ('numpy dims',
                       dict(shape=[np.int64(2)],
                            scale=1.0,
                            seed=np.array([1, 2])), 'documented'),
                  ]),
    fz.EntryPoint(
        name='mechanisms.sample_discrete_gaussian_table',
        call=discrete_gaussian_table.sample_discrete_gaussian_table,
        baseline=dict(shape=[3], scale=2.0, seed=[1, 2]),
        check=_check_table_samples,
        # Scales from a few values: each new scale builds an alias table.
        hints=dict(shape=fz.shapes(),
                   seed=fz.seeds(),
                   scale=st.one_of(
                       fz.floats(),
                       st.sampled_from([0.0, 0.3, 1.0, 7.5, 100.0, 10000.0]))),
        max_examples=15,
        examples=[
            ('shape [2.5]', dict(shape=[2.5], scale=1.0,
                                 seed=[1, 2]), 'clear_error'),
            ('float seed', dict(shape=[2], scale=1.0,
                                seed=[1.5, 2.0]), 'clear_error'),
            ('10**12 samples', dict(shape=[10**12], scale=1.0,
                                    seed=[1, 2]), 'clear_error'),
        ]),
    fz.EntryPoint(
        name='mechanisms.binomial.sample_binomial',
        call=binomial.sample_binomial,
        baseline=dict(probs=[0.3, 0.6], num_trials=16,
                      seed=[1, 2]),
        check=_check_binomial,
        hints=dict(probs=st.one_of(st.lists(fz.floats(), max_size=3),
                                   st.lists(st.floats(0.25, 0.75), max_size=3)),
                   num_trials=st.one_of(st.integers(1, 2**30), fz.ints()),
                   seed=fz.seeds()),
        max_examples=15,
        examples=[
            ('float seed', dict(probs=[0.5], num_trials=16,
                                seed=[1.5, 2.0]), 'clear_error'),
            ('num_trials 2^30', dict(probs=[0.5], num_trials=2**30,
                                     seed=[1, 2]), 'documented'),
            ('num_trials 2^30 + 1',
             dict(probs=[0.5], num_trials=2**30 + 1, seed=[1,
                                                           2]), 'clear_error'),
            ('nan prob', dict(probs=[math.nan], num_trials=4,
                              seed=[1, 2]), 'clear_error'),
        ]),
]
