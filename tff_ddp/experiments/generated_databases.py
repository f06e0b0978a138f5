"""Generated EMNIST and Stack Overflow databases in TFF's exact format.

The real databases cannot be downloaded everywhere (and are large), so the
tests and benchmarks of `tff-ddp train` write small ones that TFF's own
loaders read unchanged: the tables, columns and splits of
`tff_ddp.experiments.databases` (as `tff.simulation.datasets` creates them in
`sql_client_data_utils.save_to_sql_client_data`, whose one split per client
cannot express EMNIST's writers, who are in both the training and the test
split), one serialized `tf.train.Example` per row.

The data is synthetic but learnable, so that a few rounds move the
accuracy:

* EMNIST: 62 class prototypes (a few random strokes on the 28 x 28 grid,
  ink 0.0 on a background of 1.0 as in TFF's EMNIST); each writer shifts
  them by up to two pixels and thickens or thins the strokes; each example
  adds pixel noise. Every writer has `train_examples` examples in
  `all_train` and `test_examples` in `all_test` (and the digits among them
  in `digits_only_train` / `digits_only_test`).
* Stack Overflow: sentences from a first-order Markov chain over
  `vocabulary_size` words (`w0`, `w1`, ...; each word has a few likely
  successors, so the next word is predictable); the other features are
  filled as in the real data (dates, scores, '|'-separated tags, titles,
  'question' / 'answer'). `num_clients` users in `train` and `test`,
  `heldout_clients` others in `heldout` (the real split holds users out).
"""

import os
import sqlite3
import tempfile
from typing import Iterator, Tuple

import numpy as np

from tff_ddp.experiments import databases
from tff_ddp.utils import checks

_EMNIST_CLASSES = 62
_DIGITS = 10


def _write(path: str, rows: Iterator[Tuple[str, str, bytes]]) -> str:
  """Writes TFF's two tables from (split, client, example) rows, sorted by
  client within each split as TFF's files are; atomically replaces `path`."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  handle, scratch = tempfile.mkstemp(dir=folder, suffix='.sqlite')
  os.close(handle)
  counts = {}
  try:
    with sqlite3.connect(scratch) as connection:
      connection.execute(
          'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT '
          'NOT NULL, serialized_example_proto BLOB NOT NULL);')
      connection.execute(
          'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name '
          'TEXT NOT NULL, num_examples INTEGER NOT NULL);')

      def counted():
        for split, client, blob in rows:
          counts[(client, split)] = counts.get((client, split), 0) + 1
          yield split, client, blob

      connection.executemany(
          'INSERT INTO examples (split_name, client_id, '
          'serialized_example_proto) VALUES (?, ?, ?);', counted())
      connection.executemany(
          'INSERT INTO client_metadata (client_id, split_name, num_examples) '
          'VALUES (?, ?, ?);',
          [(client, split, n) for (client, split), n in counts.items()])
    connection.close()
    os.replace(scratch, path)
  finally:
    if os.path.exists(scratch):
      os.remove(scratch)
  return path


def _example(**features) -> bytes:
  from tensorflow.core.example import example_pb2
  example = example_pb2.Example()
  for name, value in features.items():
    feature = example.features.feature[name]
    if isinstance(value, np.ndarray):
      feature.float_list.value.extend(value.ravel().tolist())
    elif isinstance(value, (int, np.integer)):
      feature.int64_list.value.append(int(value))
    else:
      feature.bytes_list.value.append(value.encode('utf-8'))
  return example.SerializeToString()


def _strokes(rng, count: int) -> np.ndarray:
  """[count, 28, 28] ink in [0, 1]: three random strokes each, blurred."""
  grid = np.stack(np.meshgrid(np.arange(28), np.arange(28), indexing='ij'),
                  -1).astype(np.float64)
  ink = np.zeros((count, 28, 28))
  for c in range(count):
    for _ in range(3):
      a, b = rng.uniform(5, 23, size=(2, 2))
      t = np.clip(
          np.einsum('ijk,k->ij', grid - a, b - a) / max(np.sum(
              (b - a)**2), 1e-9), 0, 1)
      distance = np.linalg.norm(grid - (a + t[..., None] * (b - a)), axis=-1)
      ink[c] = np.maximum(ink[c], np.exp(-(distance / 1.3)**2))
  return ink


def emnist_rows(num_clients: int, train_examples: int, test_examples: int,
                seed: int) -> Iterator[Tuple[str, str, bytes]]:
  """(split, client id, serialized example) of the generated EMNIST."""
  rng = np.random.default_rng(seed)
  prototypes = _strokes(rng, _EMNIST_CLASSES)
  clients = [f'f{i // 100:04d}_{i % 100:02d}' for i in range(num_clients)]
  data = {}
  for client in clients:
    shift = rng.integers(-2, 3, size=2)
    thickness = rng.uniform(0.6, 1.6)
    for split, size in (('all_train', train_examples), ('all_test',
                                                        test_examples)):
      labels = rng.integers(0, _EMNIST_CLASSES, size=size)
      ink = np.roll(prototypes[labels], tuple(shift), axis=(1, 2))
      ink = np.clip(ink * thickness + rng.normal(0, 0.15, ink.shape), 0, 1)
      data[(client, split)] = (labels, (1.0 - ink).astype(np.float32))
  for split, digits in (('all_train', None), ('all_test', None),
                        ('digits_only_train', 'all_train'), ('digits_only_test',
                                                             'all_test')):
    for client in clients:
      labels, pixels = data[(client, digits or split)]
      for label, image in zip(labels, pixels):
        if digits is None or label < _DIGITS:
          yield split, client, _example(pixels=image, label=int(label))


def write_emnist(data_dir: str,
                 num_clients: int = 10,
                 train_examples: int = 20,
                 test_examples: int = 5,
                 seed: int = 0) -> str:
  """Writes `<data_dir>/emnist_all.sqlite` (module docstring); its path."""
  num_clients = checks.integer(num_clients, 'num_clients', 1, 10**6)
  train_examples = checks.integer(train_examples, 'train_examples', 1)
  test_examples = checks.integer(test_examples, 'test_examples', 1)
  seed = checks.integer(seed, 'seed', 0)
  return _write(databases.EMNIST.path(data_dir),
                emnist_rows(num_clients, train_examples, test_examples, seed))


def _sentences(rng, successors, starts, count):
  vocabulary_size = successors.shape[0]
  for _ in range(count):
    length = int(rng.integers(4, 25))
    word = int(rng.choice(starts))
    words = [word]
    for _ in range(length - 1):
      # Mostly one of the word's successors, sometimes any word.
      if rng.random() < 0.85:
        word = int(successors[word, rng.integers(successors.shape[1])])
      else:
        word = int(rng.integers(vocabulary_size))
      words.append(word)
    yield ' '.join(f'w{w}' for w in words) + ' .'


def stackoverflow_rows(num_clients: int, train_sentences: int,
                       test_sentences: int, heldout_clients: int,
                       vocabulary_size: int,
                       seed: int) -> Iterator[Tuple[str, str, bytes]]:
  """(split, client id, serialized example) of the generated Stack
  Overflow."""
  rng = np.random.default_rng(seed)
  # Zipf-like: low word indices are frequent successors and starts.
  weights = 1.0 / np.arange(1, vocabulary_size + 1)
  weights /= weights.sum()
  successors = rng.choice(vocabulary_size, size=(vocabulary_size, 3), p=weights)
  starts = rng.choice(vocabulary_size, size=20, p=weights, replace=False)
  users = [f'{100 * i + 1:08d}' for i in range(num_clients)]
  heldout = [f'{100 * i:08d}' for i in range(heldout_clients)]
  # (split, user, sentences, years): the real test split is 2018 on.
  plan = ([('train', u, train_sentences, (2008, 2018)) for u in users] +
          [('test', u, test_sentences, (2018, 2019)) for u in users] +
          [('heldout', u, train_sentences, (2008, 2019)) for u in heldout])
  for split, user, count, years in plan:
    year = int(rng.integers(*years))
    for sentence in _sentences(rng, successors, starts, count):
      tags = '|'.join(f'tag{t}' for t in rng.choice(50, size=2, replace=False))
      yield split, user, _example(
          creation_date=f'{year}-0{rng.integers(1, 10)}-1{rng.integers(10)} '
          f'0{rng.integers(10)}:1{rng.integers(10)}:2{rng.integers(10)} UTC',
          score=int(rng.integers(-2, 50)),
          tags=tags,
          title=' '.join(f'w{w}' for w in rng.integers(0, 50, 4)),
          tokens=sentence,
          type=str(rng.choice(['question', 'answer'])))


def write_stackoverflow(data_dir: str,
                        num_clients: int = 10,
                        train_sentences: int = 20,
                        test_sentences: int = 5,
                        heldout_clients: int = 2,
                        vocabulary_size: int = 100,
                        seed: int = 0) -> str:
  """Writes `<data_dir>/stackoverflow.sqlite` (module docstring); its
  path."""
  num_clients = checks.integer(num_clients, 'num_clients', 1, 10**6)
  train_sentences = checks.integer(train_sentences, 'train_sentences', 1)
  test_sentences = checks.integer(test_sentences, 'test_sentences', 1)
  heldout_clients = checks.integer(heldout_clients, 'heldout_clients', 1)
  vocabulary_size = checks.integer(vocabulary_size, 'vocabulary_size', 20)
  seed = checks.integer(seed, 'seed', 0)
  return _write(
      databases.STACKOVERFLOW.path(data_dir),
      stackoverflow_rows(num_clients, train_sentences, test_sentences,
                         heldout_clients, vocabulary_size, seed))
