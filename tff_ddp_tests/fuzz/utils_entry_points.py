"""The fuzz entry points of tff_ddp.utils: the argument checks and the
overflow-safe norm and clip.

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_utils_test.py and a row of
bad_inputs.py.
"""

import math

from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

from tff_ddp.utils import checks
from tff_ddp.utils import entropy
from tff_ddp.utils import tensors
from tff_ddp_tests.fuzz import strategies as fz


def _as_number(value):
  value = value[()] if isinstance(value, np.ndarray) else value
  return value


def _check_real(kwargs, x):
  if type(x) is not float:  # pylint: disable=unidiomatic-typecheck  # the exact type, subclasses excluded
    return f'{type(x).__name__}, not float'
  value = _as_number(kwargs['value'])
  if isinstance(value, (bool, np.bool_, str)) or x != float(value):
    return f'{x!r} for {kwargs["value"]!r}'
  low, high = kwargs['low'], kwargs['high']
  if math.isnan(x) or (low is not None and x < low) or (
      high is not None and
      x > high) or (math.isinf(x) and
                    not (kwargs['allow_inf'] and high is None and x > 0)):
    return f'{x!r} outside the range'
  return None


def _check_integer(kwargs, x):
  if type(x) is not int:  # pylint: disable=unidiomatic-typecheck  # the exact type, subclasses excluded
    return f'{type(x).__name__}, not int'
  value = _as_number(kwargs['value'])
  if isinstance(value, (bool, np.bool_, float, np.floating)) or x != value:
    return f'{x!r} for {kwargs["value"]!r}'
  low, high = kwargs['low'], kwargs['high']
  if (low is not None and x < low) or (high is not None and x > high):
    return f'{x!r} outside the range'
  return None


def _check_sequence(_kwargs, xs):
  # pylint: disable-next=unidiomatic-typecheck  # a numpy scalar is wrong
  if not xs or any(type(x) is not float or not 0.0 < x < 1.0 for x in xs):
    return f'{xs!r}'
  return None


def _reference_norm(v):
  v = np.asarray(v, dtype=np.float64)
  big = np.max(np.abs(v)) if v.size else 0.0
  return 0.0 if big == 0 else big * np.linalg.norm(v / big)


# TF flushes subnormals to zero: a norm may be off by a few smallest normals.
_FTZ = 2.2250738585072014e-308 * 8


def _check_norm(kwargs, norm):
  ref = _reference_norm(kwargs['v'])
  norm = float(norm)
  if not np.all(np.isfinite(kwargs['v'])):
    return None if math.isnan(norm) else f'{norm} for a non-finite input'
  if not math.isclose(norm, ref, rel_tol=1e-12, abs_tol=_FTZ):
    return f'norm {norm!r}, reference {ref!r}'
  return None


def _check_clip(kwargs, result):
  clipped, was = (np.asarray(r) for r in result)
  v = np.asarray(kwargs['v'], dtype=np.float64)
  clip = float(kwargs['clip'])
  ref = _reference_norm(v)
  if math.isnan(ref):
    return None  # NaN inputs are flagged and zeroed by the callers
  norm = _reference_norm(clipped)
  if ref <= _FTZ or clip <= _FTZ:
    return None  # subnormals are flushed to zero
  if norm > clip * (1 + 1e-12) and ref > clip:
    return f'clipped norm {norm} > clip {clip}'
  if bool(was) != (ref > clip *
                   (1 + 1e-12)) and not math.isclose(ref, clip, rel_tol=1e-12):
    return f'clipped flag {was} for norm {ref} and clip {clip}'
  if not was and not np.array_equal(clipped, v):
    return 'an unclipped vector changed'
  return None


_VECTORS = st.lists(fz.floats(), min_size=1, max_size=5)

ENTRY_POINTS = [
    fz.EntryPoint(name='utils.checks.real',
                  call=checks.real,
                  baseline=dict(value=1.0,
                                name='x',
                                low=0.0,
                                high=None,
                                low_open=True,
                                high_open=False,
                                allow_inf=False),
                  check=_check_real,
                  hints=dict(value=fz.floats(),
                             low=st.sampled_from([None, 0.0, -1.0]),
                             high=st.sampled_from([None, 1.0, 1e300]),
                             allow_inf=st.booleans()),
                  fuzzed=('value',),
                  names=('x',),
                  max_examples=40),
    fz.EntryPoint(name='utils.checks.integer',
                  call=checks.integer,
                  baseline=dict(value=3, name='n', low=1, high=None),
                  check=_check_integer,
                  hints=dict(value=fz.ints(),
                             low=st.sampled_from([None, 0, 1]),
                             high=st.sampled_from([None, 2**30, 2**63 - 1])),
                  fuzzed=('value',),
                  names=('n',),
                  max_examples=40),
    fz.EntryPoint(
        name='utils.checks.real_sequence',
        call=checks.real_sequence,
        baseline=dict(values=[0.5],
                      name='q',
                      low=0.0,
                      high=1.0,
                      low_open=True,
                      high_open=True),
        check=_check_sequence,
        hints=dict(
            values=st.one_of(_VECTORS, st.lists(fz.any_value(), max_size=3))),
        fuzzed=('values',),
        names=('q',) + tuple(f'q[{i}]' for i in range(6))),
    fz.EntryPoint(
        name='utils.checks.boolean/choice/seed/entropy',
        call=lambda value:
        (checks.boolean(value, 'flag')
         if isinstance(value, (bool, np.bool_)) else checks.seed(value)
         if isinstance(value, (int, np.integer)) else checks.choice(
             value, 'mode', ('a', 'b'))
         if isinstance(value, str) else entropy.check_entropy(value)),
        baseline=dict(value=True),
        check=lambda kw, r: None
        if r is None or r == kw['value'] or (callable(r)) else f'{r!r}',
        hints=dict(value=st.one_of(st.sampled_from(['a', 'b']), fz.ints())),
        names=('flag', 'seed', 'mode', 'entropy')),
    fz.EntryPoint(
        name='utils.tensors.overflow_safe_norm',
        call=lambda v: tensors.overflow_safe_norm(tf.constant(v, tf.float64)),
        baseline=dict(v=[3.0, 4.0]),
        check=_check_norm,
        hints=dict(v=_VECTORS),
        junk=False,
        fuzzed=('v',),
        names=('v',),
        examples=[('coordinate 1e200', dict(v=[0.0, 1e200]), 'documented'),
                  ('subnormals', dict(v=[5e-324, 5e-324]), 'documented')]),
    fz.EntryPoint(name='utils.tensors.clip_to_norm',
                  call=lambda v, clip: tensors.clip_to_norm(
                      tf.constant(v, tf.float64), clip),
                  baseline=dict(v=[3.0, 4.0], clip=1.0),
                  check=_check_clip,
                  hints=dict(v=_VECTORS,
                             clip=st.one_of(st.floats(1e-300, 1e300),
                                            st.sampled_from([1.0, 10.0]))),
                  junk=False,
                  fuzzed=('v', 'clip'),
                  names=('v',),
                  examples=[('coordinate 1e200',
                             dict(v=[0.0, 1e200], clip=10.0), 'documented')]),
]
