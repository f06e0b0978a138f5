"""The encoder interface: a public, seeded linear map R^dim -> R^output_dim.

Encoders "flatten" a client's vector before it is discretised: the
randomized Walsh-Hadamard rotation spreads the mass evenly with high
probability, Kashin's representation with certainty, the identity not at
all. Every encoder is keyed by the round's *public* seed (clients and server
build the same map), has an exact left inverse `decode` (decode(encode(x))
= x up to the reported residual), and says what it guarantees:

* `is_isometry`: ||encode(x)||_2 == ||x||_2 (up to float rounding), so a
  clip of the input clips the encoding too;
* `level`: K with ||encode(x)||_inf <= K ||x||_2 / sqrt(output_dim) for every
  x, or None when there is no such guarantee.
"""

from typing import Optional, Protocol, Tuple

import tensorflow as tf


class Encoder(Protocol):
  """A public, seeded linear map with a left inverse (see module doc)."""

  dim: int
  output_dim: int
  is_isometry: bool
  level: Optional[float]

  def encode_with_residual(self, x: tf.Tensor,
                           seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """(y = encode(x), ||x - decode(y)||_2) for x of shape [dim]."""

  def encode(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """y of shape [output_dim]."""

  def decode(self, y: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """x of shape [dim]; ||decode(y)||_2 <= ||y||_2 (the mechanisms' output
    bounds, `tff_ddp.mechanisms.base.decoded_bound`, rely on it)."""
