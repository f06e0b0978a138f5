"""The DDG paper's tasks: model sizes, vocabulary, data through TFF, metric."""

import collections
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.experiments import paper_tasks
from tff_ddp.experiments import generated_databases


def _folder(test) -> str:
  folder = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, folder, ignore_errors=True)
  return folder


class ModelsTest(tf.test.TestCase):

  def test_emnist_model_is_just_under_two_to_the_twenty(self):
    # Section 6.2: d slightly under 2^20, so the Hadamard pads little. The
    # authors' model has 1,018,174 weights: 97.1% of 2^20.
    d = paper_tasks.parameter_count(paper_tasks.emnist_model())
    self.assertLess(d, 2**20)
    self.assertGreater(d, 0.97 * 2**20)
    self.assertEqual(d, 1018174)

  def test_stackoverflow_model_is_reddi_et_al(self):
    model = paper_tasks.stackoverflow_model(10000)
    shapes = [tuple(w.shape) for w in model.trainable_weights]
    tokens = 10000 + paper_tasks.SPECIAL_TOKENS
    # Embedding 96; LSTM 670 (kernel, recurrent kernel, bias); dense 96;
    # dense to the logits.
    self.assertEqual(shapes, [(tokens, 96), (96, 4 * 670), (670, 4 * 670),
                              (4 * 670,), (670, 96), (96,), (96, tokens),
                              (tokens,)])
    self.assertEqual(paper_tasks.parameter_count(model), 4050748)

  def test_defaults_of_section_6_2(self):
    emnist = paper_tasks.EMNIST_TASK.defaults
    so = paper_tasks.STACKOVERFLOW_TASK.defaults
    self.assertEqual(
        (emnist.rounds, emnist.clients_per_round, emnist.client_epochs,
         emnist.client_batch_size, emnist.clip, emnist.client_learning_rate,
         emnist.server_learning_rate, emnist.server_momentum),
        (1500, 100, 1, 20, 0.03, 0.032, 1.0, 0.9))
    self.assertEqual((so.rounds, so.clients_per_round, so.client_epochs,
                      so.client_batch_size, so.clip, so.client_learning_rate,
                      so.server_learning_rate, so.server_momentum),
                     (1600, 100, 1, 16, 0.3, 0.5, 1.0, 0.9))
    self.assertEqual(emnist.delta(3400), 1 / 3400)
    self.assertEqual(so.delta(342477), 1e-6)


class VocabularyTest(tf.test.TestCase):

  def _write(self, text):
    path = os.path.join(_folder(self), 'words')
    with open(path, 'w', encoding='utf-8') as f:
      f.write(text)
    return path

  def test_reads_tffs_word_count_format(self):
    path = self._write('the 900\nto 800\n\nof\na 10\n')
    vocabulary = paper_tasks.read_vocabulary(path, 3)
    self.assertEqual(vocabulary.words, ('the', 'to', 'of'))
    self.assertIn('the epsilon covers it only if that file is public',
                  vocabulary.source)
    self.assertEqual(
        paper_tasks.read_vocabulary(path, 100).words, ('the', 'to', 'of', 'a'))

  def test_bad_files(self):
    for text, message in (('a 1\na 2\n', 'repeats a word'),
                          ('a b c\n', 'expected "word" or "word count"'),
                          ('a x\n', 'expected "word" or "word count"'),
                          ('\n\n', 'holds no word')):
      with self.assertRaisesRegex(ValueError, message):
        paper_tasks.read_vocabulary(self._write(text), 10)
    with self.assertRaisesRegex(ValueError, 'does not exist'):
      paper_tasks.read_vocabulary('/nonexistent/words', 10)

  def test_built_vocabulary_counts_users_as_tff(self):
    # Brute force through TFF's loader: the number of training users whose
    # sentences contain each word.
    folder = _folder(self)
    path = generated_databases.write_stackoverflow(folder,
                                                   num_clients=5,
                                                   train_sentences=6,
                                                   vocabulary_size=40,
                                                   seed=3)
    train, _, _ = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=folder)
    users = collections.Counter()
    for client in train.client_ids:
      words = set()
      for element in train.create_tf_dataset_for_client(client):
        words.update(element['tokens'].numpy().decode().split(' '))
      users.update(words)
    self.assertEqual(paper_tasks.count_words(path), users)
    out = os.path.join(folder, 'out', 'vocabulary.txt')
    vocabulary = paper_tasks.build_vocabulary(path, 7, out)
    ranked = sorted(users.items(), key=lambda kv: (-kv[1], kv[0]))[:7]
    self.assertEqual(vocabulary.words, tuple(w for w, _ in ranked))
    self.assertIn('NOT covered by the epsilon', vocabulary.source)
    # The saved file reads back as the same vocabulary.
    self.assertEqual(
        paper_tasks.read_vocabulary(out, 7).digest, vocabulary.digest)


class DataTest(tf.test.TestCase):

  def test_emnist_batches_and_accuracy(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder,
                                     num_clients=3,
                                     train_examples=7,
                                     test_examples=5)
    task = paper_tasks.EMNIST_TASK
    data = task.load(folder,
                     batch_size=4,
                     epochs=1,
                     max_examples=None,
                     vocabulary=None)
    self.assertEqual(data.population, 3)
    batches = list(
        data.train.create_tf_dataset_for_client(data.train.client_ids[0]))
    # TFF's character-recognition preprocessing: (x [b, 28, 28, 1], y [b]),
    # batches of 4 then the rest (its parallel map may reorder them).
    self.assertEqual(sorted(tuple(x.shape) for x, _ in batches),
                     [(3, 28, 28, 1), (4, 28, 28, 1)])
    ids = paper_tasks.eval_client_ids(data, 0, seed=0)
    self.assertEqual(ids, list(data.test.client_ids))
    evaluator = paper_tasks.Evaluator(task, data, ids)
    model = task.keras_model(data)
    weights = tff.learning.models.ModelWeights.from_model(model)
    # Brute force: the model's predictions on every test example.
    correct = total = 0
    for client in ids:
      for e in data.test.create_tf_dataset_for_client(client):
        logits = model(e['pixels'][None, ..., None], training=False)
        correct += int(np.argmax(logits[0]) == int(e['label']))
        total += 1
    self.assertEqual(total, 15)
    self.assertAllClose(evaluator.accuracy(weights), correct / total)

  def test_stackoverflow_tokens_and_masked_accuracy(self):
    task = paper_tasks.STACKOVERFLOW_TASK
    y = tf.constant([[5, 7, 0, 0], [2, 0, 0, 0]], tf.int64)
    logits = tf.one_hot(tf.constant([[5, 1, 0, 3], [2, 0, 0, 0]]), 9)
    correct, total = task.correct_and_total(logits, y)
    # Padding (0) is not counted, even where predicted right.
    self.assertEqual((int(correct), int(total)), (2, 3))

  def test_eval_sample_is_fixed_and_without_replacement(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder, 6, 1, 1)
    data = paper_tasks.EMNIST_TASK.load(folder, 1, 1, None, None)
    sample = paper_tasks.eval_client_ids(data, 4, seed=1)
    self.assertLen(set(sample), 4)
    self.assertEqual(sample, paper_tasks.eval_client_ids(data, 4, seed=1))
    self.assertEqual(paper_tasks.eval_client_ids(data, 60, seed=1),
                     list(data.test.client_ids))
