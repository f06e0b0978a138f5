"""A factory's round without TFF: the same client and server code, batched.

`MechanismSumFactory.create` places the mechanism's `client_encode` at every
client and its `server_decode` at the server, around one
`federated_secure_modular_sum`. A sweep of thousands of rounds (a learning
curve per configuration) cannot pay TFF's per-client cost; `BatchedSum` runs
the *same* functions on a [clients, dim] batch in one `tf.function`
(`tf.map_fn` over the clients' `client_encode`, the modular sum, then
`server_decode`), so its output has exactly the process's distribution. With
the factory's test seed and `derive='factory'` it reproduces the process's
output bit for bit (the test checks this): the round seed is
fold_in((seed, 0x5EED), round) and each client's noise seed
fold_in(round seed, fingerprint of its float64 value), as in
`tff_ddp.aggregators.secure_sum`.

Otherwise ('independent') the clients' noise seeds are
stateless_split(fold_in((seed, round), 0xC11E), n): independent streams, the
deployed behaviour's distribution (fresh entropy per client).

With `client_sampling_rate` q (self-sampling: every client is in the sum,
each keeps its value with a private coin), `values` holds every client of
the round; each coin keeps a row with the factory's exact probability
(`secure_sum.effective_rate`), the kept rows go through `client_encode`
and the others send the encoding of the zero vector -- their noise share
alone -- drawn in one call by the mechanism's `sum_of_zero_inputs` where it
has one (DDG, Skellam), else through `client_encode` like the rest. Equal
in law to the factory's round ('independent' only: the coins come from the
simulation's streams, not the factory's seeds).

Capacity: as the factory's process, a round with more clients than the
round's ring holds (`factory.capacity(value_type)`) is refused
(`RoundRefusedError`, before anything is drawn) under the factory's
on_wrap='raise', and returned with `sum_may_wrap=True` under 'flag'.

Not simulated: noised or debug counts (the flags are dropped).
"""

import enum

import numpy as np
import tensorflow as tf

from tff_ddp.aggregators import secure_sum
from tff_ddp.mechanisms import base
from tff_ddp.utils import checks


class Derive(enum.StrEnum):
  """Where a simulated round's seeds come from (module docstring)."""

  INDEPENDENT = 'independent'
  FACTORY = 'factory'


# Clients encoded in parallel by tf.map_fn.
_PARALLEL = 128


class BatchedSum:
  """`factory`'s round on a batch of client values, without TFF.

  Args:
    factory: a `MechanismSumFactory` (e.g. `DiscreteGaussianSumFactory`).
    value_type: the TFF type of one client's value (as for `create`).
  """

  def __init__(self, factory, value_type):
    if not isinstance(factory, secure_sum.MechanismSumFactory):
      raise TypeError('factory must be a MechanismSumFactory, got '
                      f'{type(factory).__name__}.')
    self.factory = factory
    self.rate = factory._rate  # pylint: disable=protected-access  # its factory's settings
    self.spec = factory.value_spec(value_type)
    self.mechanism = factory.mechanism(value_type)
    self.ring = factory.capacity(value_type)
    self._keys = tuple(self.mechanism.secure_moduli())
    self._moduli = dict(self.mechanism.secure_moduli())
    mechanism = self.mechanism
    keys = self._keys
    dim = self.spec.dim

    moduli = self._moduli

    @tf.function(input_signature=[
        tf.TensorSpec([None, dim], tf.float64),
        tf.TensorSpec([2], tf.int64),
        tf.TensorSpec([None, 2], tf.int64)
    ])
    def run(values, round_seed, noise_seeds):
      summed = encode_sum(values, round_seed, noise_seeds)
      n = tf.shape(values, out_type=tf.int64)[0]
      return mechanism.server_decode(summed, n, round_seed)

    zero_sum = getattr(mechanism, 'sum_of_zero_inputs', None)

    @tf.function(input_signature=[
        tf.TensorSpec([None, dim], tf.float64),
        tf.TensorSpec([None], tf.bool),
        tf.TensorSpec([2], tf.int64),
        tf.TensorSpec([None, 2], tf.int64),
        tf.TensorSpec([2], tf.int64)
    ])
    def run_sampled(values, keep, round_seed, noise_seeds, zero_seed):
      """The round with only the rows where `keep` holds sending values."""
      if zero_sum is None or len(keys) != 1:
        summed = encode_sum(
            tf.where(keep[:, None], values, tf.zeros_like(values)), round_seed,
            noise_seeds)
      else:
        summed = encode_sum(tf.boolean_mask(values, keep), round_seed,
                            tf.boolean_mask(noise_seeds, keep))
        dropped = tf.reduce_sum(tf.cast(~keep, tf.int32))
        k = keys[0]
        summed = {
            k:
                base.ring_residue(summed[k] + zero_sum(dropped, zero_seed),
                                  moduli[k])
        }
      n = tf.shape(values, out_type=tf.int64)[0]
      return mechanism.server_decode(summed, n, round_seed)

    def encode_sum(values, round_seed, noise_seeds):

      def one(args):
        flat, noise_seed = args
        seeds = tf.random.experimental.stateless_split(noise_seed, 3)
        encoded, _ = mechanism.client_encode(flat, round_seed, seeds[1])
        return tuple(tf.cast(encoded[k], tf.int64) for k in keys)

      signature = tuple(tf.TensorSpec(None, tf.int64) for _ in keys)
      encoded = tf.map_fn(one, (values, noise_seeds),
                          fn_output_signature=signature,
                          parallel_iterations=_PARALLEL)
      return {
          k:
              base.ring_residue(
                  tf.reduce_sum(tf.math.floormod(column, moduli[k]), axis=0),
                  moduli[k]) for k, column in zip(keys, encoded)
      }

    @tf.function(input_signature=[
        tf.TensorSpec([None, dim], tf.float64),
        tf.TensorSpec([2], tf.int64)
    ])
    def factory_seeds(values, round_seed):

      def one(flat):
        digest = tf.bitcast(
            tf.fingerprint(tf.reshape(tf.bitcast(flat, tf.uint8), [1, -1]))[0],
            tf.int64)
        return tf.random.experimental.stateless_fold_in(round_seed, digest)

      return tf.map_fn(one,
                       values,
                       fn_output_signature=tf.TensorSpec([2], tf.int64),
                       parallel_iterations=_PARALLEL)

    self._run = run
    self._run_sampled = run_sampled
    self._factory_seeds = factory_seeds

  def round_seed(self, public_seed, round_index: int) -> tf.Tensor:
    """The round's public seed, as the process derives it."""
    return tf.random.experimental.stateless_fold_in(
        tf.constant(np.asarray(public_seed, np.int64)),
        tf.constant(int(round_index), tf.int64))

  def __call__(self,
               values,
               round_index: int,
               seed: int,
               derive: str = 'independent'):
    """(the decoded sum as float64 [dim], the server's post measurements).

    Args:
      values: [n, dim] client values (flattened as the factory flattens
        them: `self.spec.flatten`), any float dtype.
      round_index: the round (the process's state['round']).
      seed: the public seed's first word (the factory's test seed for
        'factory'; any integer for 'independent').
      derive: 'independent' or 'factory' (module docstring).
    """
    derive = checks.member(derive, 'derive', Derive)
    seed = checks.integer(seed, 'seed', 0, 2**63 - 1)
    if self.rate is not None and derive is Derive.FACTORY:
      raise ValueError("derive='factory' reproduces the factory's seeds, "
                       'which client_sampling_rate would also need for its '
                       "coins: use derive='independent'.")
    values = tf.convert_to_tensor(np.asarray(values, np.float64))
    n = int(values.shape[0])
    if values.shape[1] != self.spec.dim:
      raise ValueError(f'values must be [clients, {self.spec.dim}], got '
                       f'{tuple(values.shape)}.')
    if self.factory.on_wrap is secure_sum.OnWrap.RAISE:
      self.ring.check(n)
    public = np.array([seed, 0x5EED], np.int64)
    round_seed = self.round_seed(public, round_index)
    if derive is Derive.FACTORY:
      noise_seeds = self._factory_seeds(values, round_seed)
    else:
      noise_seeds = tf.cast(
          tf.random.experimental.stateless_split(
              tf.random.experimental.stateless_fold_in(
                  tf.constant([seed, int(round_index)], tf.int64), 0xC11E), n),
          tf.int64)
    if self.rate is None:
      decoded, post = self._run(values, round_seed, noise_seeds)
    else:
      stream = tf.constant([seed, int(round_index)], tf.int64)
      keep = secure_sum.coins(
          self.rate, [n],
          tf.random.experimental.stateless_fold_in(stream, 0xC014))
      decoded, post = self._run_sampled(
          values, keep, round_seed, noise_seeds,
          tf.cast(tf.random.experimental.stateless_fold_in(stream, 0x2E50),
                  tf.int64))
    post = {k: v.numpy() for k, v in post.items()}
    post['sum_may_wrap'] = np.bool_(self.ring.may_wrap(n))
    return decoded.numpy(), post
