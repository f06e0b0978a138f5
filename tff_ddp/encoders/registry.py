"""Encoders by name, for the aggregators' `encoder=` argument.

Every encoder implements `tff_ddp.encoders.base.Encoder`:

* 'hadamard': randomized Walsh-Hadamard rotation, zero padding to the next
  power of two; an isometry, l_inf small with high probability only.
* 'dft': randomized discrete Fourier transform (TFF's rotation_type='dft'),
  padding to an even length only; an isometry, l_inf small with high
  probability only (the same sub-Gaussian proxy as the Hadamard's).
* 'kashin': Kashin's representation over a randomized Hadamard frame;
  ||encode(x)||_inf <= level / sqrt(output_dim) * ||x||_2 always, and
  ||encode(x)||_2 >= ||x||_2 (not an isometry).
* 'none': the identity (output_dim = dim), for inputs that need no
  flattening, e.g. histograms whose coordinates are bounded already.
"""

import dataclasses
from typing import Any, Callable, Mapping, Optional

import tensorflow as tf

from tff_ddp.encoders import dft
from tff_ddp.encoders import hadamard
from tff_ddp.encoders import kashin
from tff_ddp.utils import checks

NAMES = ('hadamard', 'kashin', 'none', 'dft')
# Options of KashinEncoder that make_encoder passes on.
KASHIN_OPTIONS = ('redundancy', 'eta', 'delta', 'iterations', 'frame')


class Identity:
  """The 'none' encoder: encode(x) = x, decode(y) = y."""

  is_isometry = True
  level: Optional[float] = None
  # max ||decode(y)||_inf over ||y||_inf <= 1 (the other encoders mix
  # coordinates: sqrt(output_dim), `tff_ddp.mechanisms.base.decoded_bound`).
  linf_gain = 1.0

  def __init__(self, dim: int):
    self.dim = self.output_dim = checks.integer(dim, 'dim', 1)
    if self.dim > hadamard.MAX_OUTPUT_DIM:
      raise ValueError(f'dim must be <= {hadamard.MAX_OUTPUT_DIM}, got '
                       f'{self.dim}.')

  def __repr__(self):
    return f'Identity(dim={self.dim})'

  def encode_with_residual(self, x, seed):
    del seed
    x = tf.reshape(x, [self.dim])
    return x, tf.zeros([], x.dtype)

  def encode(self, x, seed):
    del seed
    return tf.reshape(x, [self.dim])

  def decode(self, y, seed):
    del seed
    return tf.reshape(y, [self.dim])


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
  """An encoder chosen by name, with its options, before its dimension is
  known: `make(dim)` builds it. The factories resolve their `encoder=`
  argument into one of these once (`encoder_spec`).

  Attributes:
    name: one of NAMES.
    build: (dim, **options) -> the encoder.
    options: the options `build` gets (KashinEncoder's only).
    takes_options: whether it takes options (KASHIN_OPTIONS).
    is_identity: the 'none' encoder (no transform).
  """

  name: str
  build: Callable[..., Any]
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  takes_options: bool = False
  is_identity: bool = False

  def make(self, dim: int):
    """The encoder for `dim` input scalars."""
    return self.build(dim, **self.options)


# Each name and its encoder.
_ENCODERS = {
    'hadamard': EncoderSpec('hadamard', hadamard.RandomizedHadamard),
    'kashin': EncoderSpec('kashin', kashin.KashinEncoder, takes_options=True),
    'none': EncoderSpec('none', Identity, is_identity=True),
    'dft': EncoderSpec('dft', dft.RandomizedDft),
}


def encoder_spec(name: str,
                 options: Optional[Mapping[str, Any]] = None) -> EncoderSpec:
  """The `EncoderSpec` called `name` with `options`, validated (the one
  place an encoder's name is read).

  Raises:
    TypeError / ValueError: unknown name or options, options of an encoder
      that takes none.
  """
  spec = _ENCODERS[checks.choice(name, 'encoder', NAMES)]
  options = dict(options or {})
  unknown = sorted(set(options) - set(KASHIN_OPTIONS))
  if unknown:
    raise TypeError(
        f'unexpected keyword argument(s) {unknown}; the encoder options are '
        f'{KASHIN_OPTIONS} (for encoder=\'kashin\' only).')
  if not spec.takes_options:
    if options:
      raise ValueError(
          f'Kashin options {sorted(options)} only apply to the \'kashin\' '
          f'encoder, not {name!r}.')
    return spec
  spec.build(1, **options)  # validates the options
  return dataclasses.replace(spec, options=options)


def check_options(name: str, options: dict):
  """Validates `name` and its options without building an encoder."""
  encoder_spec(name, options)


def make_encoder(name: str, dim: int, **kashin_options):
  """The encoder called `name` for `dim` input scalars.

  Args:
    name: one of NAMES.
    dim: input dimension >= 1.
    **kashin_options: keyword arguments of `KashinEncoder` (redundancy, eta,
      delta, iterations, frame); only with name='kashin'.

  Raises:
    TypeError / ValueError: unknown name or options, bad dimension.
  """
  return encoder_spec(name, kashin_options).make(dim)
