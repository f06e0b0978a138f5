"""The round outside TFF (docs/core.md) is the TFF factory's round.

docs/core.md runs a mechanism around any secure modular sum with the core
alone: `client_encode` per client, a sum mod the ring, `server_decode`,
the mechanism's `dp_event`. Fed the seeds a factory's test `seed=` derives
(the round's public seed, each client's noise seed), that path returns the
factory's TFF round bit for bit, and the same DP event.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp import aggregators
from tff_ddp.aggregators import secure_sum

_DIM = 40
_CLIENTS = 6


def _factories():
  return {
      'ddg':
          aggregators.DiscreteGaussianSumFactory.from_tff_arguments(
              noise_multiplier=1.0,
              expected_clients_per_round=_CLIENTS,
              bits=16,
              l2_clip=1.0,
              seed=7),
      'skellam':
          aggregators.SkellamSumFactory.from_tff_arguments(
              noise_multiplier=1.0,
              expected_clients_per_round=_CLIENTS,
              bits=16,
              l2_clip=1.0,
              seed=8),
      'cpbm':
          aggregators.PoissonBinomialSumFactory(
              l2_clip=1.0,
              theta=0.2,
              num_trials=16,
              expected_clients_per_round=_CLIENTS,
              seed=9),
  }


def _outside_tff(mechanism, values, round_seed, noise_seeds):
  """docs/core.md's round: the core only, numpy as the secure sum."""
  messages = {key: [] for key in mechanism.secure_moduli()}
  for value, noise_seed in zip(values, noise_seeds):
    encoded, _ = mechanism.client_encode(tf.constant(value, tf.float64),
                                         round_seed, noise_seed)
    for key in messages:
      messages[key].append(encoded[key].numpy())
  summed = {
      key: tf.constant(np.sum(parts, axis=0) % modulus)
      for (key, parts), modulus in zip(messages.items(),
                                       mechanism.secure_moduli().values())
  }
  estimate, _ = mechanism.server_decode(summed,
                                        tf.constant(len(values), tf.int64),
                                        round_seed)
  return estimate.numpy(), mechanism.dp_event(len(values))


class OutsideTffTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('ddg', 'ddg'), ('skellam', 'skellam'),
                                  ('cpbm', 'cpbm'))
  def test_same_result_and_event_as_the_factory(self, name):
    factory = _factories()[name]
    value_type = tff.TensorType(np.float32, [_DIM])
    rng = np.random.default_rng(3)
    values = rng.normal(size=(_CLIENTS, _DIM)).astype(np.float32) * 0.2
    process = factory.create(value_type)
    state = process.initialize()
    for _ in range(2):  # the second round: its own public seed
      round_seed = secure_sum.round_seed(state)
      output = process.next(state, list(values))
      state = output.state

    # The seeds the factory's seed= derives (tests only; a deployment draws
    # them from entropy, docs/core.md).
    protocol = factory.round_protocol(value_type)
    noise_seeds = [
        tf.random.experimental.stateless_split(
            protocol._noise_seed(protocol.spec.flatten(v), round_seed), 3)[1]  # pylint: disable=protected-access  # tests a private part
        for v in values
    ]
    estimate, event = _outside_tff(factory.mechanism(value_type),
                                   values.astype(np.float64), round_seed,
                                   noise_seeds)
    np.testing.assert_array_equal(estimate.astype(np.float32), output.result)
    self.assertEqual(event, accounting.extract_dp_event(output.measurements))
    # Not vacuous: the round was noisy, and other noise seeds change it.
    self.assertGreater(np.abs(estimate - values.sum(axis=0)).max(), 1e-3)
    other, _ = _outside_tff(
        factory.mechanism(value_type), values.astype(np.float64), round_seed,
        [tf.constant([i, 1], tf.int64) for i in range(_CLIENTS)])
    self.assertFalse(np.array_equal(other, estimate))
