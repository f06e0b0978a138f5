"""Why a client's kernel-entropy seed costs ~0.1 ms: the size of TF's read.

`tff_ddp.utils.entropy.os_entropy_seed` reads /proc/sys/kernel/random/uuid
(37 bytes) with `tf.io.read_file`. TensorFlow's ReadFile kernel reads every
file through a 1 MiB buffered stream, so it asks the kernel for 1 MiB, twice
(the data, then end of file). A /proc/sys file is served by the sysctl
handler, which allocates and zeroes a kernel buffer of the size *requested*
before it writes 37 bytes into it -- so the cost is in the request size, not
in the entropy. This script shows it in two ways, all on this machine:

  1. the same two reads from Python with os.preadv into a preallocated
     buffer of 64 bytes vs 1 MiB (no Python allocation in the loop: what is
     left is the kernel's);
  2. `tf.io.read_file` in a `tf.function` of the uuid file vs a 37-byte
     copy in /dev/shm (a regular file: its read is bounded by its size),
     with the same salted path ops in both (`entropy.os_entropy_seed`'s
     trick that keeps the read from being constant-folded).

  PYTHONPATH=$PWD .venv/bin/python benchmarks/uuid_read_cost.py
"""

import os
import tempfile

import _harness as harness  # (sets sys.path)

from tff_ddp.utils import entropy

UUID_PATH = entropy.UUID_PATH


def _per_call(fn, calls, repeats=5):
  """Microseconds per call: the fastest of `repeats` loops of `calls`."""
  fn()

  def loop():
    for _ in range(calls):
      fn()

  return 1e6 * harness.seconds_of(loop, repeats, warmup=False,
                                  summary=min) / calls


def _two_preads(buffer):

  def read():
    fd = os.open(UUID_PATH, os.O_RDONLY)
    try:
      got = os.preadv(fd, [buffer], 0)
      os.preadv(fd, [buffer], got)  # end of file, as TF's stream asks
    finally:
      os.close(fd)

  return read


def run(calls=5000):
  """Two tables: the kernel's cost by request size, TF's read by file."""
  preads = harness.Table(
      [('bytes', 'buffer bytes', 'd'), ('us', 'us per pair', '.1f')],
      title=f'1. two preads of {UUID_PATH}, microseconds per pair (fastest '
      f'of 5 x {calls}):')
  for size in (64, 4096, 1 << 20):
    preads.add(bytes=size, us=_per_call(_two_preads(bytearray(size)), calls))

  import tensorflow as tf
  tf.config.threading.set_inter_op_parallelism_threads(1)
  tf.config.threading.set_intra_op_parallelism_threads(1)

  with tempfile.NamedTemporaryFile('w',
                                   dir='/dev/shm',
                                   suffix='.uuid',
                                   delete=False) as copy:
    with open(UUID_PATH, encoding='utf-8') as source:
      copy.write(source.read())
  try:

    def loop(path, read):
      """A tf.function running `calls` salted reads in one tf.while_loop, so
      that Python's per-call dispatch is out of the measurement."""

      @tf.function
      def salted_reads():

        def body(i, total):
          salt = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
          empty = tf.strings.substr(tf.strings.as_string(salt[0]), 0, 0)
          name = tf.strings.join([path, empty])
          got = tf.io.read_file(name) if read else name
          return i + 1, total + tf.strings.length(got)

        return tf.while_loop(lambda i, _: i < calls, body,
                             (tf.constant(0), tf.constant(0)))[1]

      return salted_reads

    reads = harness.Table(
        [('read', 'read', 's'), ('us', 'us per read', '.1f')],
        title=f'2. {calls} salted reads in one tf.function (a '
        'tf.while_loop), microseconds per read (fastest of 5):')
    for label, fn in (('salted path ops, no read', loop(UUID_PATH, False)),
                      (f'read_file {copy.name} (37 B regular file)',
                       loop(copy.name, True)), (f'read_file {UUID_PATH}',
                                                loop(UUID_PATH, True))):
      reads.add(read=label, us=_per_call(fn, 1) / calls)
  finally:
    os.unlink(copy.name)
  return [preads, reads]


if __name__ == '__main__':
  harness.main(run, __doc__, calls='calls per timed loop')
