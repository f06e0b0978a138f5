"""The fuzz entry points of the encoders' constructors and pure helpers.

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_encoders_test.py and a row
of bad_inputs.py.
"""

import math

from hypothesis import strategies as st

from tff_ddp.encoders import hadamard
from tff_ddp.encoders import kashin
from tff_ddp.encoders import registry
from tff_ddp_tests.fuzz import strategies as fz


def _is_power_of_two(n) -> bool:
  return isinstance(n, int) and n >= 1 and n & (n - 1) == 0


def _check_dims(encoder, dim, redundancy=None):
  if encoder.dim != int(dim):
    return f'dim {encoder.dim} for {dim!r}'
  if not _is_power_of_two(encoder.output_dim) or not (
      dim <= encoder.output_dim <= hadamard.MAX_OUTPUT_DIM):
    return f'output_dim {encoder.output_dim} for dim {dim}'
  if redundancy is not None and encoder.output_dim < dim * (1 + redundancy):
    return f'output_dim {encoder.output_dim} < dim (1 + {redundancy})'
  return None


def _check_kashin(kwargs, encoder):
  level = encoder.level
  if not (math.isfinite(level) and level >= 1):
    return f'level {level!r}'
  return _check_dims(encoder, kwargs['dim'], float(kwargs['redundancy']))


def _check_hadamard(kwargs, encoder):
  return _check_dims(encoder, kwargs['dim'])


def _check_make_encoder(kwargs, encoder):
  expected = {
      'hadamard': hadamard.RandomizedHadamard,
      'kashin': kashin.KashinEncoder,
      'none': registry.Identity
  }[kwargs['name']]
  if not isinstance(encoder, expected):
    return f'{type(encoder).__name__} for {kwargs["name"]!r}'
  if encoder.dim != int(kwargs['dim']):
    return f'dim {encoder.dim} for {kwargs["dim"]!r}'
  return None


def _check_output_dimension(kwargs, d):
  dim, redundancy = kwargs['dim'], float(kwargs['redundancy'])
  if not (_is_power_of_two(d) and d > dim and dim *
          (1 + redundancy) <= d <= hadamard.MAX_OUTPUT_DIM):
    return f'{d} for dim {dim}, redundancy {redundancy}'
  return None


def _check_padded(kwargs, d):
  dim = int(kwargs['dim'])
  if not (_is_power_of_two(d) and d >= dim and (d == 1 or d < 2 * dim)):
    return f'{d} for dim {dim}'
  return None


_DIMS = st.one_of(st.integers(-2, 2**27), fz.ints())

ENTRY_POINTS = [
    fz.EntryPoint(
        name='encoders.KashinEncoder',
        call=kashin.KashinEncoder,
        baseline=dict(dim=8,
                      redundancy=1.0,
                      eta=0.5,
                      delta=0.8,
                      iterations=8,
                      frame='hadamard'),
        check=_check_kashin,
        hints=dict(dim=_DIMS,
                   redundancy=fz.floats(),
                   eta=st.floats(0.0, 1.0),
                   delta=st.floats(0.0, 1.0),
                   iterations=st.one_of(st.integers(-1, 101), fz.ints()),
                   frame=st.sampled_from(['hadamard', 'dense', 'dft'])),
        examples=[
            ('redundancy 1e9', dict(dim=4, redundancy=1e9), 'clear_error'),
            ('redundancy inf', dict(dim=4, redundancy=math.inf), 'clear_error'),
            ('dense 4096 x 8192', dict(dim=4096, frame='dense'), 'documented'),
            ('dense 4096 x 32768', dict(dim=4096, redundancy=4.0,
                                        frame='dense'), 'clear_error'),
            ('dense 1e6', dict(dim=10**6, frame='dense'), 'clear_error'),
        ]),
    fz.EntryPoint(name='encoders.RandomizedHadamard',
                  call=hadamard.RandomizedHadamard,
                  baseline=dict(dim=8),
                  check=_check_hadamard,
                  hints=dict(dim=_DIMS),
                  examples=[('dim 2^26 + 1', dict(dim=2**26 + 1), 'clear_error')
                           ]),
    fz.EntryPoint(
        name='encoders.make_encoder',
        call=registry.make_encoder,
        baseline=dict(name='kashin', dim=8),
        check=_check_make_encoder,
        hints=dict(name=st.sampled_from(['hadamard', 'kashin', 'none', 'hd']),
                   dim=_DIMS,
                   redundancy=fz.floats(),
                   eta=fz.floats(),
                   iterations=fz.ints(),
                   rotation_type=st.just('hd')),
        names=('name', 'encoder', 'dim', 'redundancy', 'eta', 'iterations',
               'rotation_type', 'keyword'),
        examples=[
            ('TFF rotation_type', dict(name='kashin', dim=3,
                                       rotation_type='hd'), 'clear_error'),
            ('Kashin option on none', dict(name='none', dim=3,
                                           redundancy=2.0), 'clear_error'),
        ]),
    fz.EntryPoint(name='encoders.kashin.output_dimension',
                  call=kashin.output_dimension,
                  baseline=dict(dim=8, redundancy=1.0),
                  check=_check_output_dimension,
                  hints=dict(dim=_DIMS, redundancy=fz.floats()),
                  examples=[('redundancy nan', dict(dim=8, redundancy=math.nan),
                             'clear_error'),
                            ('dim -1', dict(dim=-1,
                                            redundancy=1.0), 'clear_error')]),
    fz.EntryPoint(name='encoders.hadamard.padded_dimension',
                  call=hadamard.padded_dimension,
                  baseline=dict(dim=8),
                  check=_check_padded,
                  hints=dict(dim=_DIMS)),
]
