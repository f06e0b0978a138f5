"""Encoders by name, for the aggregators' `rotation=` / `encoder=` arguments.

Both encoders map R^dim to R^output_dim with the round's public seed and have
`encode(x, seed)`, `decode(y, seed)`, `dim` and `output_dim`:

* 'hadamard': randomized Walsh-Hadamard rotation, zero padding to the next
  power of two; an isometry (||encode(x)|| = ||x||), l_inf small with high
  probability only.
* 'kashin': Kashin's representation over a randomized Hadamard frame;
  ||encode(x)||_inf <= level / sqrt(output_dim) * ||x||_2 always, and
  ||encode(x)||_2 >= ||x||_2.
* 'none': the identity (output_dim = dim), for inputs that need no
  flattening, e.g. histograms whose coordinates are bounded already.
"""

from tff_ddp.encoders import hadamard
from tff_ddp.encoders import kashin

NAMES = ('hadamard', 'kashin', 'none')


class Identity:
  """The 'none' encoder: encode(x) = x, decode(y) = y."""

  def __init__(self, dim: int):
    if dim < 1:
      raise ValueError(f'dim must be >= 1, got {dim}.')
    self.dim = self.output_dim = int(dim)

  def encode(self, x, seed):
    del seed
    return x

  def decode(self, y, seed):
    del seed
    return y


def make_encoder(name: str, dim: int, **kashin_options):
  """The encoder called `name` for `dim` input scalars.

  Args:
    name: one of NAMES.
    dim: input dimension >= 1.
    **kashin_options: keyword arguments of `KashinEncoder` (redundancy, eta,
      delta, iterations, frame); only with name='kashin'.

  Raises:
    ValueError: unknown name, or options given for 'hadamard'.
  """
  if name == 'kashin':
    return kashin.KashinEncoder(dim, **kashin_options)
  if name in ('hadamard', 'none'):
    if kashin_options:
      raise ValueError(
          f'Kashin options {sorted(kashin_options)} only apply to the '
          f"'kashin' encoder, not {name!r}.")
    if name == 'none':
      return Identity(dim)
    return hadamard.RandomizedHadamard(dim)
  raise ValueError(f'encoder must be one of {NAMES}, got {name!r}.')


def is_isometry(encoder) -> bool:
  """True if ||encoder.encode(x)||_2 == ||x||_2 for every x (up to rounding)."""
  return isinstance(encoder, (hadamard.RandomizedHadamard, Identity))
