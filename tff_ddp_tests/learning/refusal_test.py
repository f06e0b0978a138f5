"""A refused aggregation round reaches the user of a learning process.

TFF's FedAvg builders compose our aggregator into their own computation, so
its Python call is not ours to wrap: what the user sees is the RPC error of
TFF's C++ test context. This checks that the DP-FedAvg pipeline of docs/learning.md
(`build_unweighted_fed_avg` with `tff_ddp.learning.ddp_secure_aggregator`)
stops a round with more clients than the ring holds, with the count, the
capacity and the fix readable in that error -- where before it trained on a
wrapped sum.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import learning
from tff_ddp.learning import tasks
from tff_ddp.utils import rounds

_MODEL_FN = tasks.keras_model_fn(lambda: tasks.linear_keras_model((4,), 2),
                                 (4,))
_CLIENTS = tasks.ClientArrays(np.ones([3, 4, 4], np.float32),
                              np.zeros([3, 4], np.int32))


@pytest.mark.slow  # builds and runs FedAvg: ~20-40 s
class FedAvgRefusalTest(tf.test.TestCase):

  def test_too_many_clients_stop_the_round_with_the_reason(self):
    aggregator = learning.ddp_secure_aggregator(noise_multiplier=0.1,
                                                expected_clients_per_round=2)
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        _MODEL_FN,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=aggregator)
    state = process.initialize()
    with self.assertRaises(Exception) as raised:
      process.next(state, _CLIENTS.datasets(range(3), batch_size=2))
    message = rounds.refusal_message(raised.exception)
    self.assertIsNotNone(message, str(raised.exception)[:2000])
    self.assertIn('3 clients are in this round', message)
    self.assertIn('more than the 2 its ring holds', message)
    self.assertIn('expected_clients_per_round >= 3', message)
    # The state passed in still runs a round of the size it was built for.
    output = process.next(state, _CLIENTS.datasets(range(2), batch_size=2))
    self.assertEqual(output.metrics['aggregator']['participating_clients'], 2)
