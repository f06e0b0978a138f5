"""Noise seeds with real entropy, drawn inside the traced client computation.

Why not `tf.raw_ops.NonDeterministicInts`: in TF 2.14 it reads from one
per-process `std::mt19937_64` seeded once with 32 bits from std::random_device
(tsl/platform/random.cc), so every client of a simulation process -- and the
public rotation seed -- would come from one 2^32-state stream: whoever sees
the public seed could search the 2^32 states and recompute every client's
noise.

What we do instead: `os_entropy_seed()` reads one fresh UUID from the
kernel's CSPRNG (`/proc/sys/kernel/random/uuid`, 122 uniform random bits, a
new one per read) with `tf.io.read_file` -- an op that runs where the
computation runs, inside TFF's C++ executor too -- and packs its 128 bits
into a shape-[2] int64 seed. The path is made to depend on a stateful op
(the "salt"), so that TF's graph optimiser can neither fold the read into a
constant nor merge two calls' reads (both would silently repeat a seed).

Entropy, stated exactly: 122 bits per seed, all from the kernel. The UUID's
6 fixed bits (version nibble, variant bits) are XORed with the salt, the
non-cryptographic per-process stream above; that only keeps every bit
position of the seed varying and adds no claimed entropy. Whoever knows the
salt stream (or the public seed) still faces 2^122 equally likely seeds per
client, beyond any search. One read, not two: a second UUID would add 6
bits nobody can search anyway and costs a TFF client call ~0.1 ms.

Limits, stated exactly: this needs a Linux kernel with procfs where the
client computation executes (the read fails loudly otherwise; nothing falls
back silently). Production runtimes run client computations on devices, not
here: pass the factory `entropy=<callable>` that returns a shape-[2] int64
tensor of device entropy (e.g. from the platform's secure RNG op), traced
inside the client computation. It must be unpredictable and independent per
client and per round; a deployment that cannot guarantee that must not run
distributed DP.
"""

import string
from typing import Callable, Optional

import tensorflow as tf

UUID_PATH = '/proc/sys/kernel/random/uuid'
EntropyFn = Callable[[], tf.Tensor]

# The UUID's 36 characters split into two halves of 18 at the 64-bit word
# boundary: bytes 0-17 are '8 hex - 4 hex - 4 hex' (the high word's 16
# digits), bytes 18-35 '- 4 hex - 12 hex' (the low word's). _SHIFTS[w][i] is
# the bit position of the nibble at byte i of half w; a dash gets shift 0 and
# the nibble 0 (from _NIBBLE), so it adds nothing.
_UUID_LENGTH = 36
# A hex digit's place in the UUID's text form (the rest are '-').
_HEX_DIGIT = 'x'


def _shifts():
  shifts = []
  for half in ('xxxxxxxx-xxxx-xxxx', '-xxxx-xxxxxxxxxxxx'):
    position, row = 64, []
    for char in half:
      if char == _HEX_DIGIT:
        position -= 4
        row.append(position)
      else:
        row.append(0)
    shifts.append(row)
  return shifts


_SHIFTS = _shifts()
# ASCII code -> value of the hex digit ('0'-'9', 'a'-'f', 'A'-'F'); 0
# otherwise (the dashes).
_NIBBLE = [
    int(chr(code), 16) if chr(code) in string.hexdigits else 0
    for code in range(256)
]


def _uuid_words(path: tf.Tensor) -> tf.Tensor:
  """int64 [2], (high, low): the 128 bits of one UUID read from `path`.

  The UUID text is 8-4-4-4-12 hex digits (the kernel writes lowercase);
  the version nibble (bits 76-79) and the two variant bits (bits 62-63) are
  fixed, the other 122 random. Parsed in a handful of ops (one client call
  runs every op of this function): the bytes index a table of nibble values,
  each nibble is shifted to its bit position and the two halves summed (the
  positions are distinct, so the sum is the bitwise OR; the top nibble's
  shift wraps into the sign bit as int64 arithmetic does).
  """
  raw = tf.io.decode_raw(tf.io.read_file(path), tf.uint8)[:_UUID_LENGTH]
  nibbles = tf.gather(tf.constant(_NIBBLE, tf.int64), tf.cast(raw, tf.int32))
  shifted = tf.bitwise.left_shift(tf.reshape(nibbles, [2, _UUID_LENGTH // 2]),
                                  tf.constant(_SHIFTS, tf.int64))
  return tf.reduce_sum(shifted, axis=1)


def os_entropy_seed() -> tf.Tensor:
  """A shape-[2] int64 seed with 122 bits from the kernel CSPRNG.

  One UUID u (read once): the seed is (u_high, u_low) XOR salt, salt the two
  int64 words of `NonDeterministicInts` that also make the read's path
  non-constant (module docstring). u's 122 random bits are uniform and
  independent of the salt, so the seed keeps them; the salt fills u's 6
  fixed bit positions.
  """
  # An empty suffix computed from a stateful op: not constant-foldable, and
  # each call's ops are distinct, so two calls' reads are never merged.
  salt = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
  empty = tf.strings.substr(tf.strings.as_string(salt[0]), 0, 0)
  return tf.bitwise.bitwise_xor(
      _uuid_words(tf.strings.join([UUID_PATH, empty])), salt)


def check_entropy(entropy: Optional[EntropyFn],
                  name: str = 'entropy') -> Optional[EntropyFn]:
  """None or a callable; anything else is a TypeError."""
  if entropy is not None and not callable(entropy):
    raise TypeError(f'{name} must be None or a callable returning a shape-[2] '
                    f'int64 tensor of device entropy, got {entropy!r}.')
  return entropy
