"""The experiments' tasks: federated data with label shift, models, metrics.

* `b3_task`: Appendix B.3 of the federated DP quantiles paper (Section D.2 of
  the superquantile paper): `sklearn.datasets.make_classification(
  n_samples=500000, n_features=20, n_informative=15, n_redundant=2,
  n_repeated=0, n_classes=10, n_clusters_per_class=1, class_sep=5.0,
  hypercube=False, random_state=2345)`, split into 2500 / 500 / 500 training /
  validation / test clients of 100 examples each, with label shift: each
  client's class distribution is drawn from Dir(0.5) (training) or Dir(0.01)
  (validation, test) and its 100 examples from those classes, without
  replacement across clients. A linear model with intercept and the
  multinomial logistic loss.
* `digits_task`: the EMNIST stand-in that ships with scikit-learn
  (`load_digits`: 1797 8x8 images, 10 classes), split the same way into
  disjoint training / validation / test pools (60/20/20, stratified) and
  clients of `client_size` images; a small ConvNet (two 5x5 convolutions
  with max pooling and a dense layer, the superquantile paper's EMNIST
  architecture at this input size).

Both come as `tff.simulation.datasets.ClientData` with elements
OrderedDict(pixels=float32 [...], label=int32) -- the element structure of
TFF's EMNIST loader, so a script written for these also runs on
`tff.simulation.datasets.emnist.load_data()` where that data exists -- and as
numpy arrays for fast evaluation (`ClientArrays`).

The split's randomness is `split_seed` (the paper does not give its split
code); the B.3 data itself is exactly the paper's.
"""

import collections
import dataclasses
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from tff_ddp.utils import checks

NUM_CLASSES = 10
B3_CLIENTS = (2500, 500, 500)
B3_CLIENT_SIZE = 100
B3_ALPHAS = (0.5, 0.01, 0.01)


@dataclasses.dataclass
class ClientArrays:
  """Clients' examples as numpy: x [clients, size, ...], y [clients, size]."""

  x: np.ndarray
  y: np.ndarray

  @property
  def num_clients(self) -> int:
    return int(self.x.shape[0])

  def client_data(self, batch_size: Optional[int] = None):
    """A `tff.simulation.datasets.ClientData` of these clients.

    Client ids are '0', '1', ...; elements OrderedDict(pixels, label) as in
    TFF's EMNIST loader: one example each (batch_size None) or batches of
    `batch_size`.
    """
    import tensorflow as tf
    import tensorflow_federated as tff
    if batch_size is not None:
      batch_size = checks.integer(batch_size, 'batch_size', 1)
    x = self.x.astype(np.float32)
    y = self.y.astype(np.int32)

    def dataset_fn(client_id):
      i = int(client_id)
      ds = tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(pixels=x[i], label=y[i]))
      return ds if batch_size is None else ds.batch(batch_size)

    ids = [str(i) for i in range(self.num_clients)]
    return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
        ids, dataset_fn)

  def datasets(self,
               indices: Sequence[int],
               batch_size: Optional[int] = None,
               epochs: int = 1) -> List:
    """The model-input datasets (x, y) of the clients `indices` (a round's
    cohort), for `process.next`."""
    import tensorflow as tf
    size = self.x.shape[1]
    batch = size if batch_size is None else batch_size
    out = []
    for i in indices:
      out.append(
          tf.data.Dataset.from_tensor_slices(
              collections.OrderedDict(
                  x=self.x[i].astype(np.float32),
                  y=self.y[i].astype(np.int32))).repeat(epochs).batch(batch))
    return out


@dataclasses.dataclass
class Task:
  """A federated task: training / validation / test clients and the model.

  `architecture(input_shape, num_classes)` builds the Keras model (None:
  `convnet_keras_model`; B.3: `linear_keras_model`).
  """

  name: str
  train: ClientArrays
  validation: ClientArrays
  test: ClientArrays
  input_shape: tuple
  num_classes: int
  architecture: Optional[Callable[[tuple, int], Any]] = None

  def keras_model(self):
    build = self.architecture or convnet_keras_model
    return build(self.input_shape, self.num_classes)

  def model_fn(self):
    """A no-arg callable returning a fresh tff.learning VariableModel."""
    return keras_model_fn(self.keras_model, self.input_shape)


def _label_shift_clients(pools, num_clients, client_size, alpha, rng):
  """Clients with Dir(alpha) class distributions, examples drawn without
  replacement from the per-class `pools` (index arrays).

  A client draws p ~ Dir(alpha) and its class counts ~ Multinomial(size, p);
  if a class has run out, the missing examples are redrawn from p
  restricted to the classes left. Stops early when fewer than `client_size`
  examples remain.
  """
  k = len(pools)
  taken = np.zeros(k, int)
  sizes = np.array([len(p) for p in pools])
  clients = []
  for _ in range(num_clients):
    left = sizes - taken
    if left.sum() < client_size:
      break
    p = rng.dirichlet(alpha * np.ones(k))
    counts = np.zeros(k, int)
    while counts.sum() < client_size:
      available = left - counts > 0
      q = np.where(available, p, 0.0)
      q = q / q.sum() if q.sum() > 0 else available / available.sum()
      want = rng.multinomial(client_size - counts.sum(), q)
      counts += np.minimum(want, left - counts)
    clients.append(
        np.concatenate(
            [pools[c][taken[c]:taken[c] + counts[c]] for c in range(k)]))
    taken += counts
  return clients


def b3_task(split_seed: int = 0) -> Task:
  """The B.3 task exactly as the paper generates it (module docstring)."""
  from sklearn import datasets
  split_seed = checks.integer(split_seed, 'split_seed', 0)
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
  rng = np.random.default_rng(split_seed)
  pools = [rng.permutation(np.flatnonzero(y == c)) for c in range(10)]
  splits = []
  offsets = [0] * 10
  for num, alpha in zip(B3_CLIENTS, B3_ALPHAS):
    remaining = [p[o:] for p, o in zip(pools, offsets)]
    clients = _label_shift_clients(remaining, num, B3_CLIENT_SIZE, alpha, rng)
    if len(clients) < num:
      raise AssertionError('the B.3 data holds 3500 clients of 100.')
    used = np.concatenate(clients)
    for c in range(10):
      offsets[c] += int(np.sum(y[used] == c))
    idx = np.stack(clients)
    splits.append(
        ClientArrays(x[idx].astype(np.float32), y[idx].astype(np.int32)))
  return Task('b3',
              splits[0],
              splits[1],
              splits[2], (20,),
              NUM_CLASSES,
              architecture=linear_keras_model)


def digits_task(split_seed: int = 0,
                client_size: int = 16,
                alphas=(0.5, 0.01, 0.01)) -> Task:
  """scikit-learn's digits with the B.3 label shift (module docstring)."""
  from sklearn import datasets
  split_seed = checks.integer(split_seed, 'split_seed', 0)
  client_size = checks.integer(client_size, 'client_size', 1)
  digits = datasets.load_digits()
  x = (digits.images / 16.0).astype(np.float32)
  y = digits.target.astype(np.int32)
  rng = np.random.default_rng(split_seed)
  parts = [[], [], []]
  for c in range(10):
    idx = rng.permutation(np.flatnonzero(y == c))
    a, b = int(0.6 * len(idx)), int(0.8 * len(idx))
    for part, chunk in zip(parts, (idx[:a], idx[a:b], idx[b:])):
      part.append(chunk)
  splits = []
  for pools, alpha in zip(parts, alphas):
    clients = _label_shift_clients(pools, 10**6, client_size, alpha, rng)
    idx = np.stack(clients)
    splits.append(ClientArrays(x[idx], y[idx]))
  return Task('digits', splits[0], splits[1], splits[2], (8, 8), NUM_CLASSES)


def linear_keras_model(input_shape, num_classes):
  import tensorflow as tf
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes, kernel_initializer='zeros'),
  ])


def convnet_keras_model(input_shape, num_classes):
  """Two 5x5 convolutions with 2x2 max pooling, then a dense layer."""
  import tensorflow as tf
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Reshape(tuple(input_shape) + (1,)),
      tf.keras.layers.Conv2D(16, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2, padding='same'),
      tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2, padding='same'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes),
  ])


def keras_model_fn(keras_builder, input_shape):
  """model_fn for tff.learning from a Keras builder (logits, sparse CE)."""
  import tensorflow as tf
  import tensorflow_federated as tff
  input_spec = collections.OrderedDict(x=tf.TensorSpec(
      [None] + list(input_shape), tf.float32),
                                       y=tf.TensorSpec([None], tf.int32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_builder(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec)

  return model_fn


def as_model_input(client_data):
  """Maps ClientData elements (pixels, label) to the models' (x, y)."""
  return client_data.preprocess(lambda ds: ds.map(
      lambda e: collections.OrderedDict(x=e['pixels'], y=e['label'])))


def per_client_metrics(keras_model, model_weights, clients: ClientArrays):
  """(error, loss) of every client ([clients] each) under the weights.

  `model_weights`: a tff.learning ModelWeights (e.g. from
  `process.get_model_weights(state)`).
  """
  import tensorflow as tf
  model_weights.assign_weights_to(keras_model)
  n, size = clients.y.shape
  flat = clients.x.reshape((n * size,) + clients.x.shape[2:])
  logits = keras_model(flat, training=False).numpy()
  labels = clients.y.reshape(-1)
  loss = tf.keras.losses.sparse_categorical_crossentropy(
      labels, logits, from_logits=True).numpy()
  error = (np.argmax(logits, axis=-1) != labels).astype(np.float64)
  return error.reshape(n, size).mean(1), loss.reshape(n, size).mean(1)


def summarize_errors(errors) -> dict:
  """Mean, 10th/50th/90th percentile of per-client errors (in %)."""
  e = 100.0 * np.asarray(errors, np.float64)
  return dict(mean=float(e.mean()),
              p10=float(np.percentile(e, 10)),
              p50=float(np.percentile(e, 50)),
              p90=float(np.percentile(e, 90)))


def best_model_per_client(selection_losses) -> np.ndarray:
  """Section 4.1: each client's choice among r models ([r, clients] losses
  on the client's own data) -> the index of its best model per client."""
  losses = np.asarray(selection_losses, np.float64)
  if losses.ndim != 2:
    raise ValueError('selection_losses must be [models, clients], got shape '
                     f'{losses.shape}.')
  return np.argmin(losses, axis=0)
