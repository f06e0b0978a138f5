"""The DDG paper's two learning tasks on TFF's real loaders, with its defaults.

Kairouz, Liu & Steinke, "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation" (ICML 2021, arXiv:2102.06387),
Section 6.2, trains DP-FedAvg on

* **EMNIST** (`EMNIST_TASK`): Federated EMNIST-62 (3400 writers), a small
  ConvNet like Reddi et al. (2020)'s but with slightly under 2^20 parameters
  so that the randomized Hadamard transform pads little: 3x3 convolution
  (32, ReLU), 2x2 max pooling, 3x3 convolution (64, ReLU), dropout 0.25,
  dense 128 (ReLU), dropout 0.5, dense 62 -- 1,018,174 parameters (the
  authors' released model, `create_1m_cnn_model` in google-research's
  `distributed_dp/fl_run.py`, with logits instead of a softmax layer);
* **Stack Overflow next-word prediction** (`STACKOVERFLOW_TASK`, SO-NWP;
  342,477 users): the model of Reddi et al. (2020, "Adaptive Federated
  Optimization", arXiv:2003.00295): a 10,000-word vocabulary plus 4 special
  tokens (padding, out-of-vocabulary, beginning and end of sentence), a
  96-dimensional embedding, one LSTM of 670 units, dense 96, dense to the
  10,004 logits -- 4,050,748 parameters; sentences of 20 tokens.

Section 6.2's setup, the `Defaults` of each task: federated averaging with
server momentum 0.9 (server learning rate 1; the paper picks SO-NWP's from
{0.3, 1}); n = 100 clients per round sampled uniformly without replacement
(independently across rounds); one local epoch; client batch 20 / 16; clip
c = 0.03 / 0.3; client learning rate 0.032 / 0.5; T = 1500 / 1600 rounds;
client updates weighted uniformly; delta = 1/N for EMNIST and 1e-6 for SO.

Data comes from TFF's loaders (`tff.simulation.datasets.emnist.load_data`,
`stackoverflow.load_data`) with `cache_dir=data_dir`, after
`tff_ddp.experiments.databases.check`, and is preprocessed by TFF's baseline
preprocessing (`tff.simulation.baselines`' EMNIST character recognition and
Stack Overflow word prediction: shuffle, repeat, take, batch, map).

Stack Overflow's vocabulary is read from a file the user names (TFF's
`stackoverflow.word_count`, which `load_word_counts` can only fetch
online, or any file of one word per line) or built from the training split
(`build_vocabulary`); unless the file is public it is a function of the
training data that the run's epsilon does not cover (`Vocabulary.source`).
"""

import collections
import dataclasses
import hashlib
import os
import sqlite3
from typing import Callable, List, Optional, Sequence, Tuple

from tff_ddp.experiments import databases
from tff_ddp.utils import checks

EMNIST_CLASSES = 62
SEQUENCE_LENGTH = 20
VOCABULARY_SIZE = 10000
# Padding, one out-of-vocabulary bucket, beginning and end of sentence
# (TFF's word_prediction_preprocessing.get_special_tokens).
SPECIAL_TOKENS = 4
EVAL_BATCH = 256


@dataclasses.dataclass(frozen=True)
class Defaults:
  """Section 6.2's setting of one task (module docstring)."""
  rounds: int
  clients_per_round: int
  client_epochs: int
  client_batch_size: int
  clip: float
  client_learning_rate: float
  server_learning_rate: float
  server_momentum: float
  eval_clients: int  # 0: every test client

  def delta(self, population: int) -> float:
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class _EmnistDefaults(Defaults):

  def delta(self, population: int) -> float:
    """delta = 1/N (Section 6.2)."""
    return 1.0 / checks.integer(population, 'population', 1)


@dataclasses.dataclass(frozen=True)
class _StackOverflowDefaults(Defaults):

  def delta(self, population: int) -> float:
    """delta = 1e-6 (Section 6.2)."""
    del population
    return 1e-6


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """Stack Overflow's words, and where they came from.

  Attributes:
    words: the vocabulary, most frequent first.
    source: one line for the report (file or training split; whether the
      epsilon covers it).
    digest: sha256 of the words, to check a resumed run uses the same.
  """
  words: Tuple[str, ...]
  source: str

  @property
  def digest(self) -> str:
    return hashlib.sha256('\n'.join(self.words).encode('utf-8')).hexdigest()


def read_vocabulary(path: str, size: int) -> Vocabulary:
  """The first `size` words of a word-count file (TFF's
  `stackoverflow.word_count`: `word count` per line; a count is optional).

  Raises:
    ValueError: the file is missing, empty, or repeats a word.
  """
  size = checks.integer(size, 'vocab_size', 1)
  path = os.path.abspath(os.path.expanduser(path))
  if not os.path.isfile(path):
    raise ValueError(f'--vocab-file {path} does not exist (a file with one '
                     'word per line, e.g. TFF\'s stackoverflow.word_count).')
  words = []
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, 1):
      parts = line.split()
      if not parts:
        continue
      if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError(f'--vocab-file {path} line {number}: expected '
                         f'"word" or "word count", got {line.strip()!r}.')
      words.append(parts[0])
      if len(words) == size:
        break
  if not words:
    raise ValueError(f'--vocab-file {path} holds no word.')
  if len(set(words)) != len(words):
    raise ValueError(f'--vocab-file {path} repeats a word in its first '
                     f'{len(words)} lines.')
  return Vocabulary(
      tuple(words),
      (f'vocabulary: the first {len(words)} words of {path}; the epsilon '
       'covers it only if that file is public (TFF\'s '
       'stackoverflow.word_count is counted from the training split)'))


def count_words(
    database_path: str,
    split: str = 'train',
    progress: Optional[Callable] = None) -> 'collections.Counter[str]':
  """Word -> number of clients of `split` who used it (TFF's word counts).

  Reads the database directly (sqlite3 and tf.train.Example), client by
  client. `progress(iterable, description, total)` wraps the clients (e.g.
  a progress bar).
  """
  from tensorflow.core.example import example_pb2
  counts = collections.Counter()
  connection = sqlite3.connect(f'file:{database_path}?mode=ro', uri=True)
  try:
    clients = [
        row[0] for row in connection.execute(
            'SELECT client_id FROM client_metadata WHERE split_name = ? '
            'ORDER BY client_id', (split,))
    ]
    iterable = clients if progress is None else progress(
        clients, 'vocabulary', len(clients))
    for client in iterable:
      words = set()
      for (blob,) in connection.execute(
          'SELECT serialized_example_proto FROM examples WHERE client_id = ? '
          'AND split_name = ?', (client, split)):
        tokens = example_pb2.Example.FromString(
            blob).features.feature['tokens'].bytes_list.value
        for sentence in tokens:
          words.update(sentence.decode('utf-8').split(' '))
      words.discard('')
      counts.update(words)
  finally:
    connection.close()
  return counts


def build_vocabulary(database_path: str,
                     size: int,
                     output_path: str,
                     progress: Optional[Callable] = None) -> Vocabulary:
  """The `size` words used by the most training clients (ties: the word
  first in sorted order), written to `output_path` in TFF's word-count
  format so that a later run can name it with --vocab-file."""
  size = checks.integer(size, 'vocab_size', 1)
  counts = count_words(database_path, databases.STACKOVERFLOW.train_split,
                       progress)
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]
  if not ranked:
    raise ValueError(f'{database_path}: the training split has no word.')
  os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
  with open(output_path, 'w', encoding='utf-8') as f:
    for word, count in ranked:
      f.write(f'{word} {count}\n')
  fewer = (f' (the split has only {len(ranked)} distinct words)'
           if len(ranked) < size else '')
  return Vocabulary(
      tuple(word for word, _ in ranked),
      (f'vocabulary: built from the training split of {database_path}, the '
       f'{len(ranked)} words used by the most users{fewer}, saved to '
       f'{output_path}; computed without noise from the training data, so '
       'NOT covered by the epsilon (name a public vocabulary with '
       '--vocab-file for a guarantee that covers it)'))


# ---------------------------------------------------------------------------
# Models


def emnist_model(num_classes: int = EMNIST_CLASSES):
  """The paper's EMNIST ConvNet (module docstring), logits out."""
  import tensorflow as tf
  layers = tf.keras.layers
  return tf.keras.Sequential([
      layers.InputLayer(input_shape=(28, 28, 1)),
      layers.Conv2D(32, 3, activation='relu'),
      layers.MaxPool2D(2),
      layers.Conv2D(64, 3, activation='relu'),
      layers.Dropout(0.25),
      layers.Flatten(),
      layers.Dense(128, activation='relu'),
      layers.Dropout(0.5),
      layers.Dense(num_classes),
  ])


def stackoverflow_model(vocab_size: int = VOCABULARY_SIZE):
  """Reddi et al. (2020)'s SO-NWP model (module docstring), logits out,
  over `vocab_size` + SPECIAL_TOKENS tokens."""
  import tensorflow as tf
  layers = tf.keras.layers
  tokens = checks.integer(vocab_size, 'vocab_size', 1) + SPECIAL_TOKENS
  inputs = layers.Input(shape=(None,))
  x = layers.Embedding(tokens, 96, mask_zero=True)(inputs)
  x = layers.LSTM(670, return_sequences=True)(x)
  x = layers.Dense(96)(x)
  return tf.keras.Model(inputs=inputs, outputs=layers.Dense(tokens)(x))


def parameter_count(keras_model) -> int:
  """The number of trainable parameters (the update's dimension d)."""
  return int(
      sum(int(w.shape.num_elements()) for w in keras_model.trainable_weights))


# ---------------------------------------------------------------------------
# Tasks


@dataclasses.dataclass
class Data:
  """A task's data as loaded, before the learning process.

  Attributes:
    train: TFF's training ClientData, preprocessed to model input (batches
      of (x, y)) by TFF's baseline preprocessing.
    test: TFF's test ClientData, parsed (not batched).
    population: N, the number of training clients.
    database: the database file read.
    vocabulary: Stack Overflow's (None for EMNIST).
  """
  train: object
  test: object
  population: int
  database: str
  vocabulary: Optional[Vocabulary] = None


class PaperTask:
  """One of Section 6.2's tasks: its database, model, data and metric."""

  name: str
  title: str
  database: databases.DatabaseSpec
  defaults: Defaults
  metric: str

  def keras_model(self, data: Data):
    raise NotImplementedError

  def load(self, data_dir: str, batch_size: int, epochs: int,
           max_examples: Optional[int],
           vocabulary: Optional[Vocabulary]) -> Data:
    raise NotImplementedError

  def eval_input(self, data: Data, client_ids: Sequence[str]):
    """A tf.data.Dataset of (x, y) batches of the test clients `client_ids`
    (every example once)."""
    raise NotImplementedError

  def correct_and_total(self, logits, y):
    """(correct predictions, predictions counted) of one batch."""
    raise NotImplementedError

  def model_fn(self, data: Data):
    """A no-argument callable returning the tff.learning model."""
    import tensorflow as tf
    import tensorflow_federated as tff
    input_spec = data.train.element_type_structure

    def model_fn():
      return tff.learning.models.from_keras_model(
          self.keras_model(data),
          input_spec=input_spec,
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    return model_fn

  def _client_spec(self,
                   batch_size,
                   epochs,
                   max_examples,
                   shuffle_buffer_size=None):
    import tensorflow_federated as tff
    return tff.simulation.baselines.ClientSpec(
        num_epochs=checks.integer(epochs, 'client_epochs', 1),
        batch_size=checks.integer(batch_size, 'client_batch_size', 1),
        max_elements=checks.optional_integer(max_examples,
                                             'max_examples_per_client', 1),
        shuffle_buffer_size=shuffle_buffer_size)


class _Emnist(PaperTask):
  """Federated EMNIST-62 (module docstring)."""

  name = 'emnist'
  title = 'Federated EMNIST-62'
  database = databases.EMNIST
  metric = 'accuracy over the test examples'
  defaults = _EmnistDefaults(rounds=1500,
                             clients_per_round=100,
                             client_epochs=1,
                             client_batch_size=20,
                             clip=0.03,
                             client_learning_rate=0.032,
                             server_learning_rate=1.0,
                             server_momentum=0.9,
                             eval_clients=0)

  def keras_model(self, data: Data):
    del data
    return emnist_model()

  def load(self, data_dir, batch_size, epochs, max_examples, vocabulary):
    import tensorflow_federated as tff
    from tensorflow_federated.python.simulation.baselines.emnist import emnist_preprocessing
    if vocabulary is not None:
      raise ValueError('EMNIST has no vocabulary (--vocab-file is for '
                       '--task stackoverflow).')
    path = databases.check(self.database, data_dir)
    train, test = tff.simulation.datasets.emnist.load_data(
        only_digits=False, cache_dir=os.path.dirname(path))
    preprocess = emnist_preprocessing.create_preprocess_fn(
        self._client_spec(batch_size, epochs, max_examples),
        emnist_task='character_recognition')
    return Data(train.preprocess(preprocess), test, len(train.client_ids), path)

  def eval_input(self, data, client_ids):
    import tensorflow as tf
    ids = tf.data.Dataset.from_tensor_slices(list(client_ids))
    return ids.flat_map(data.test.serializable_dataset_fn).map(lambda e: (
        tf.expand_dims(e['pixels'], -1), e['label'])).batch(EVAL_BATCH)

  def correct_and_total(self, logits, y):
    import tensorflow as tf
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    correct = tf.reduce_sum(tf.cast(tf.equal(predicted, y), tf.int64))
    return correct, tf.size(y, out_type=tf.int64)


class _StackOverflow(PaperTask):
  """Stack Overflow next-word prediction (module docstring)."""

  name = 'stackoverflow'
  title = 'Stack Overflow next-word prediction'
  database = databases.STACKOVERFLOW
  metric = ('accuracy over the test tokens, padding excluded (TFF\'s '
            'word-prediction "accuracy": out-of-vocabulary and end of '
            'sentence count)')
  defaults = _StackOverflowDefaults(rounds=1600,
                                    clients_per_round=100,
                                    client_epochs=1,
                                    client_batch_size=16,
                                    clip=0.3,
                                    client_learning_rate=0.5,
                                    server_learning_rate=1.0,
                                    server_momentum=0.9,
                                    eval_clients=1000)

  def keras_model(self, data: Data):
    return stackoverflow_model(len(data.vocabulary.words))

  def load(self, data_dir, batch_size, epochs, max_examples, vocabulary):
    import tensorflow_federated as tff
    from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing
    if not isinstance(vocabulary, Vocabulary):
      raise TypeError('Stack Overflow needs a Vocabulary (read_vocabulary '
                      f'or build_vocabulary), got {vocabulary!r}.')
    path = databases.check(self.database, data_dir)
    train, _, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=os.path.dirname(path))
    preprocess = word_prediction_preprocessing.create_preprocess_fn(
        self._client_spec(batch_size, epochs, max_examples),
        list(vocabulary.words),
        sequence_length=SEQUENCE_LENGTH,
        num_out_of_vocab_buckets=1)
    return Data(train.preprocess(preprocess), test, len(train.client_ids), path,
                vocabulary)

  def eval_input(self, data, client_ids):
    import tensorflow as tf
    from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing
    ids = tf.data.Dataset.from_tensor_slices(list(client_ids))
    preprocess = word_prediction_preprocessing.create_preprocess_fn(
        self._client_spec(EVAL_BATCH, 1, None, shuffle_buffer_size=1),
        list(data.vocabulary.words),
        sequence_length=SEQUENCE_LENGTH,
        num_out_of_vocab_buckets=1)
    return preprocess(ids.flat_map(data.test.serializable_dataset_fn))

  def correct_and_total(self, logits, y):
    import tensorflow as tf
    y = tf.cast(y, tf.int64)
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int64)
    counted = tf.not_equal(y, 0)  # padding
    correct = tf.reduce_sum(
        tf.cast(tf.logical_and(counted, tf.equal(predicted, y)), tf.int64))
    return correct, tf.reduce_sum(tf.cast(counted, tf.int64))


EMNIST_TASK = _Emnist()
STACKOVERFLOW_TASK = _StackOverflow()
TASKS = {task.name: task for task in (EMNIST_TASK, STACKOVERFLOW_TASK)}


def task(name: str) -> PaperTask:
  """The task object for a user's --task (resolved once, here)."""
  return TASKS[checks.choice(name, 'task', tuple(TASKS))]


class Evaluator:
  """Accuracy of model weights on a fixed set of test clients.

  The test examples are read once (TFF's test ClientData) and kept in
  memory; each call assigns the weights to one Keras model and counts
  correct predictions in a tf.function. This is the simulation's
  measurement on held-out data, outside the protocol: it is not released
  by the clients and not covered by the epsilon.
  """

  def __init__(self, paper_task: PaperTask, data: Data,
               client_ids: Sequence[str]):
    import tensorflow as tf
    self.num_clients = len(client_ids)
    self._model = paper_task.keras_model(data)
    self._batches = paper_task.eval_input(data, client_ids).cache()
    model = self._model

    @tf.function
    def count(x, y):
      return paper_task.correct_and_total(model(x, training=False), y)

    self._count = count

  def accuracy(self, model_weights) -> float:
    """Accuracy of `model_weights` (a tff.learning ModelWeights)."""
    model_weights.assign_weights_to(self._model)
    correct = total = 0
    for x, y in self._batches:
      c, t = self._count(x, y)
      correct += int(c)
      total += int(t)
    return correct / total if total else float('nan')


def eval_client_ids(data: Data, count: int, seed: int) -> List[str]:
  """`count` test clients drawn without replacement (0: all), sorted."""
  import numpy as np
  ids = list(data.test.client_ids)
  count = checks.integer(count, 'eval_clients', 0)
  if count == 0 or count >= len(ids):
    return ids
  rng = np.random.default_rng([seed, 1])
  return sorted(ids[i] for i in rng.choice(len(ids), count, replace=False))
