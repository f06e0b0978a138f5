"""DP-Delta-FL's neighbouring relation against its accounting.

The relation (`tff_ddp.learning.privacy`): one client's examples removed;
the client still takes part and adds its noise shares. Its messages are
then the zero message of both releases: no histogram bin (loss NaN) and a
zero update -- so the zero-out sensitivities the DDG events are calibrated
to (the histogram encoding's l2, the clip C) bound every pair. The tests
run the client's own computation on an empty dataset, enumerate the
messages of clients with data on small histograms, and check the distances
against the sensitivities the configuration uses. The negative case is the
old behaviour (an empty client's mean loss read as 0, bin 0): its pair with
the top bin is beyond the zero-out sensitivity.
"""

import collections
import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import process as quantiles
from tff_ddp.learning import privacy as privacy_lib
from tff_ddp.learning import processes
from tff_ddp.learning import tasks
from tff_ddp_tests import neighbours

_MODEL = tasks.keras_model_fn(lambda: tasks.linear_keras_model((1,), 2), (1,))


def _dataset(num_examples):
  return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(x=np.ones([num_examples, 1], np.float32),
                              y=np.zeros([num_examples], np.int32))).batch(2)


def _client_output(num_examples):
  update_fn = processes._client_update_fn(  # pylint: disable=protected-access  # tests a private part
      _MODEL, tff.learning.optimizers.build_sgdm(learning_rate=0.5), 0.0)
  weights = tff.learning.models.ModelWeights(
      trainable=[tf.constant([[1.0, -1.0]]),
                 tf.zeros([2])], non_trainable=[])
  return update_fn(weights, _dataset(num_examples))


def _config(histogram, num_bins):
  return privacy_lib.PrivacyConfig(clients_per_round=10,
                                   l2_clip=0.5,
                                   noise_multiplier=2.0,
                                   quantile_noise_multiplier=2.0,
                                   population=100,
                                   delta=1e-4,
                                   histogram=histogram,
                                   num_bins=num_bins,
                                   loss_upper_bound=4.0)


def _messages(config, losses):
  return [
      quantiles.encode_value(config.histogram, tf.constant(v, tf.float32), 0.0,
                             config.loss_upper_bound, config.num_bins).numpy()
      for v in losses
  ]


class DeltaFlNeighbourTest(parameterized.TestCase):

  def test_empty_client_sends_the_zero_messages(self):
    out = _client_output(0)
    self.assertEqual(int(out['num_examples']), 0)
    loss = processes.private_loss(out['loss'], out['num_examples'])
    self.assertTrue(math.isnan(float(loss)))
    for u in tf.nest.flatten(out['update']):
      np.testing.assert_array_equal(u.numpy(), 0.0)
    config = _config('tree', 8)
    np.testing.assert_array_equal(_messages(config, [float(loss)])[0], 0)

  def test_client_with_data_sends_its_loss(self):
    out = _client_output(3)
    loss = processes.private_loss(out['loss'], out['num_examples'])
    self.assertTrue(np.isfinite(float(loss)))
    self.assertEqual(float(loss), float(out['loss']))
    # A loss of exactly 0 of a client with data is an ordinary bin.
    self.assertEqual(float(processes.private_loss(0.0, 3)), 0.0)

  @parameterized.product(histogram=['flat', 'tree', 'haar'], num_bins=[2, 4, 8])
  def test_histogram_pairs_within_the_accounted_sensitivity(
      self, histogram, num_bins):
    config = _config(histogram, num_bins)
    params = config.quantile_parameters()
    upper = config.loss_upper_bound
    width = upper / num_bins
    losses = [0.0, upper, 1e9] + [(j + 0.5) * width for j in range(num_bins)]
    empty = processes.private_loss(_client_output(0)['loss'], 0)
    neighbour = _messages(config, [float(empty)])[0]
    l1, l2 = neighbours.max_distances(_messages(config, losses), neighbour)
    # The histogram's DDG is calibrated to l2_sensitivity (zero-out).
    self.assertLessEqual(l2, params.l2_sensitivity * (1 + 1e-12))
    self.assertAlmostEqual(l2, params.l2_sensitivity)  # attained
    self.assertLessEqual(l1,
                         hg.encoding(histogram, num_bins).sensitivities()[0])

  @parameterized.parameters('tree', 'haar')
  def test_old_empty_loss_exceeds_the_sensitivity(self, histogram):
    # Before: an empty client's mean loss was divide_no_nan(0, 0) = 0, bin
    # 0. Against a client in the top bin that pair needs the replace-one
    # sensitivity: Delta_2^2 doubles for the tree.
    config = _config(histogram, 8)
    params = config.quantile_parameters()
    old, top = _messages(config, [0.0, config.loss_upper_bound])
    _, l2 = neighbours.max_distances([top], old)
    self.assertGreater(l2**2, 1.9 * params.l2_sensitivity**2)

  def test_describe_states_the_relation(self):
    text = _config('tree', 8).describe()
    self.assertIn("one client's examples removed", text)
    self.assertIn(privacy_lib.NEIGHBOURS, text)
