"""The B.3 and digits tasks: the paper's data, the label shift, ClientData."""

import numpy as np
import pytest
from sklearn import datasets
import tensorflow as tf

from tff_ddp.learning import tasks


def _dominant_share(y):
  counts = np.stack([np.bincount(row, minlength=10) for row in y])
  return counts.max(1) / counts.sum(1)


@pytest.mark.slow
class B3Test(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.task = tasks.b3_task()

  def test_shapes_and_the_papers_data(self):
    task = self.task
    self.assertEqual(task.train.x.shape, (2500, 100, 20))
    self.assertEqual(task.validation.x.shape, (500, 100, 20))
    self.assertEqual(task.test.y.shape, (500, 100))
    # Every example is a row of the paper's make_classification call, used
    # once across all clients.
    x, y = datasets.make_classification(n_samples=int(5e5),
                                        n_features=20,
                                        n_informative=15,
                                        n_redundant=2,
                                        n_repeated=0,
                                        n_classes=10,
                                        n_clusters_per_class=1,
                                        class_sep=5.0,
                                        hypercube=False,
                                        random_state=2345)
    rows = {
        tuple(r): label
        for r, label in zip(x.astype(np.float32)[:, :3].tolist(), y)
    }
    used = np.concatenate(
        [s.x.reshape(-1, 20) for s in (task.train, task.validation, task.test)])
    labels = np.concatenate(
        [s.y.reshape(-1) for s in (task.train, task.validation, task.test)])
    self.assertLen(np.unique(used[:, :3], axis=0), 350000)
    for r, label in zip(used[::997, :3].tolist(), labels[::997]):
      self.assertEqual(rows[tuple(r)], label)

  def test_label_shift(self):
    # The expected largest class share of a client (Monte Carlo, 2e5 draws
    # of Dir(alpha) over 10 classes then Multinomial(100)): 0.943 for
    # Dir(0.01), 0.380 for Dir(0.5); the standard errors of the means over
    # 500 / 2500 clients are 0.0053 / 0.0024, so +- 0.03 is > 5 of them.
    for clients in (self.task.test, self.task.validation):
      self.assertBetween(_dominant_share(clients.y).mean(), 0.913, 0.973)
    self.assertBetween(_dominant_share(self.task.train.y).mean(), 0.35, 0.41)

  def test_client_data_and_model(self):
    data = self.task.train.client_data()
    self.assertLen(data.client_ids, 2500)
    elements = list(data.create_tf_dataset_for_client('3'))
    self.assertLen(elements, 100)
    self.assertEqual(elements[0]['pixels'].shape, (20,))
    self.assertEqual(elements[0]['label'].dtype, tf.int32)
    batch = next(iter(self.task.train.datasets([3])[0]))
    self.assertAllClose(batch['x'], np.stack([e['pixels'] for e in elements]))
    model = self.task.model_fn()()
    self.assertEqual(model.input_spec['x'].shape.as_list(), [None, 20])


class DigitsTest(tf.test.TestCase):

  def test_splits_and_convnet(self):
    task = tasks.digits_task(client_size=16)
    total = sum(
        s.num_clients * 16 for s in (task.train, task.validation, task.test))
    self.assertLessEqual(total, 1797)
    self.assertGreater(task.train.num_clients, 50)
    self.assertGreater(task.test.num_clients, 15)
    self.assertGreater(_dominant_share(task.test.y).mean(), 0.8)
    data = task.test.client_data(batch_size=4)
    element = next(iter(data.create_tf_dataset_for_client('0')))
    # TFF's EMNIST element structure: pixels [batch, h, w], label.
    self.assertEqual(element['pixels'].shape, (4, 8, 8))
    self.assertEqual(set(element), {'pixels', 'label'})
    mapped = tasks.as_model_input(data)
    self.assertEqual(set(next(iter(mapped.create_tf_dataset_for_client('0')))),
                     {'x', 'y'})
    model = task.keras_model()
    self.assertEqual(model(np.zeros((2, 8, 8), np.float32)).shape, (2, 10))

  def test_metrics_and_best_model(self):
    self.assertEqual(tasks.summarize_errors([0.0, 0.5, 1.0])['mean'], 50.0)
    choice = tasks.best_model_per_client([[0.3, 0.1, 0.5], [0.2, 0.4, 0.5]])
    np.testing.assert_array_equal(choice, [1, 0, 0])
    with self.assertRaisesRegex(ValueError, 'models, clients'):
      tasks.best_model_per_client([0.1, 0.2])
