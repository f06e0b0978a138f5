"""TFF's databases: generated ones read by TFF's own loaders; the checks.

The generated files are what `tff-ddp train` is tested on (the real ones
cannot be downloaded here), so the first tests read them back through
`tff.simulation.datasets.emnist.load_data` / `stackoverflow.load_data`
exactly as the command does and compare with what was written. The rest
check that every way a database can be missing or wrong is one line that
names the file and what to do.
"""

import os
import shutil
import sqlite3
import tempfile

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.experiments import databases
from tff_ddp.experiments import generated_databases
from tff_ddp_tests.experiments import bad_rows


def _folder(test) -> str:
  folder = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, folder, ignore_errors=True)
  return folder


def _rows_by_client(rows):
  out = {}
  for split, client, blob in rows:
    out.setdefault((split, client), []).append(blob)
  return out


class GeneratedDatabasesTest(tf.test.TestCase):
  """TFF's loaders read the generated files: clients, splits, examples."""

  def test_emnist_through_tffs_loader(self):
    folder = _folder(self)
    generated_databases.write_emnist(folder,
                                     num_clients=3,
                                     train_examples=4,
                                     test_examples=2,
                                     seed=5)
    train, test = tff.simulation.datasets.emnist.load_data(only_digits=False,
                                                           cache_dir=folder)
    expected = _rows_by_client(generated_databases.emnist_rows(3, 4, 2, 5))
    self.assertLen(train.client_ids, 3)
    self.assertEqual(train.client_ids, test.client_ids)
    self.assertEqual(set(train.element_type_structure), {'label', 'pixels'})
    for split, data in (('all_train', train), ('all_test', test)):
      for client in data.client_ids:
        got = list(data.create_tf_dataset_for_client(client))
        written = [
            tf.train.Example.FromString(b) for b in expected[(split, client)]
        ]
        self.assertLen(got, len(written))
        for element, example in zip(got, written):
          feature = example.features.feature
          self.assertEqual(int(element['label']),
                           feature['label'].int64_list.value[0])
          self.assertAllEqual(
              element['pixels'].numpy(),
              np.reshape(feature['pixels'].float_list.value, (28, 28)))
          self.assertEqual(element['pixels'].shape, (28, 28))
          self.assertBetween(float(element['pixels'].numpy().min()), 0, 1)
    # The digits splits hold exactly the digit examples.
    digits_train, _ = tff.simulation.datasets.emnist.load_data(only_digits=True,
                                                               cache_dir=folder)
    for client in digits_train.client_ids:
      labels = [
          int(e['label'])
          for e in digits_train.create_tf_dataset_for_client(client)
      ]
      all_labels = [
          int(e['label']) for e in train.create_tf_dataset_for_client(client)
      ]
      self.assertEqual(labels, [l for l in all_labels if l < 10])

  def test_stackoverflow_through_tffs_loader(self):
    folder = _folder(self)
    generated_databases.write_stackoverflow(folder,
                                            num_clients=3,
                                            train_sentences=4,
                                            test_sentences=2,
                                            heldout_clients=1,
                                            vocabulary_size=30,
                                            seed=2)
    train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=folder)
    self.assertLen(train.client_ids, 3)
    self.assertEqual(train.client_ids, test.client_ids)
    self.assertLen(heldout.client_ids, 1)
    self.assertEmpty(set(heldout.client_ids) & set(train.client_ids))
    expected = _rows_by_client(
        generated_databases.stackoverflow_rows(3, 4, 2, 1, 30, 2))
    for client in train.client_ids:
      got = list(train.create_tf_dataset_for_client(client))
      written = [
          tf.train.Example.FromString(b) for b in expected[('train', client)]
      ]
      self.assertLen(got, 4)
      for element, example in zip(got, written):
        self.assertEqual(element['tokens'].numpy(),
                         example.features.feature['tokens'].bytes_list.value[0])
        self.assertIn(element['type'].numpy(), (b'question', b'answer'))
        self.assertEqual(element['score'].dtype, tf.int64)

  def test_metadata_counts_the_examples(self):
    folder = _folder(self)
    path = generated_databases.write_emnist(folder, 2, 3, 1)
    with sqlite3.connect(path) as connection:
      metadata = sorted(
          connection.execute(
              'SELECT client_id, split_name, num_examples FROM client_metadata')
      )
      counted = sorted(
          connection.execute(
              'SELECT client_id, split_name, COUNT(*) FROM examples '
              'GROUP BY client_id, split_name'))
    self.assertEqual(metadata, counted)
    self.assertEqual(databases.check(databases.EMNIST, folder), path)


class ClientIndexTest(tf.test.TestCase):

  def test_index_on_client_id_is_found(self):
    folder = _folder(self)
    path = generated_databases.write_emnist(folder, 2, 2, 1)
    self.assertFalse(databases.has_client_index(path))
    with sqlite3.connect(path) as connection:
      connection.execute('CREATE INDEX by_split ON examples (split_name)')
    self.assertFalse(databases.has_client_index(path))
    statement = databases.index_hint(path).split('"')[1]
    with sqlite3.connect(path) as connection:
      connection.execute(statement)
    self.assertTrue(databases.has_client_index(path))
    # TFF's loader reads it as before.
    train, _ = tff.simulation.datasets.emnist.load_data(only_digits=False,
                                                        cache_dir=folder)
    self.assertLen(
        list(train.create_tf_dataset_for_client(train.client_ids[0])), 2)


class CheckTest(parameterized.TestCase):
  """A missing or malformed database: one line naming the file and the fix."""

  def _folder(self):
    return _folder(self)

  def assert_one_line(self, error, *parts):
    message = str(error)
    self.assertNotIn('\n', message)
    for part in parts:
      self.assertIn(part, message)

  def test_missing_file_says_which_file_to_put_where(self):
    folder = self._folder()
    for spec in (databases.EMNIST, databases.STACKOVERFLOW):
      with self.assertRaises(databases.DatabaseError) as raised:
        databases.check(spec, folder)
      self.assert_one_line(raised.exception, spec.path(folder), spec.url,
                           'put TFF\'s ' + spec.file_name)

  def test_missing_folder(self):
    missing = os.path.join(self._folder(), 'nothing')
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, missing)
    self.assert_one_line(raised.exception, missing, 'is not a folder',
                         'emnist_all.sqlite')

  def test_not_sqlite(self):
    folder = self._folder()
    with open(databases.EMNIST.path(folder), 'wb') as f:
      f.write(b'not a database' * 100)
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, folder)
    self.assert_one_line(
        raised.exception, 'not an SQLite database',
        'client_metadata(client_id, split_name, '
        'num_examples)')

  @parameterized.named_parameters(
      ('no_metadata_table', 'DROP TABLE client_metadata',
       'has no table client_metadata'),
      ('no_examples_column', 'ALTER TABLE examples RENAME COLUMN '
       'serialized_example_proto TO blob',
       'table examples lacks column(s) serialized_example_proto'),
      ('no_metadata_column', 'ALTER TABLE client_metadata RENAME COLUMN '
       'num_examples TO n', 'lacks column(s) num_examples'),
      ('no_test_split', "DELETE FROM client_metadata WHERE split_name = "
       "'all_test'", 'no client in split(s) all_test'),
      ('no_train_rows', "DELETE FROM examples WHERE split_name = "
       "'all_train'", 'no row of split all_train'),
  )
  def test_wrong_schema(self, statement, expected):
    folder = self._folder()
    path = generated_databases.write_emnist(folder, 2, 2, 1)
    with sqlite3.connect(path) as connection:
      connection.execute(statement)
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, folder)
    self.assert_one_line(raised.exception, path, expected)

  def test_examples_of_another_data_set(self):
    # A Stack Overflow file under EMNIST's name: its examples lack pixels.
    folder = self._folder()
    path = generated_databases.write_stackoverflow(folder, 2, 2, 1, 1, 20)
    os.replace(path, databases.EMNIST.path(folder))
    with sqlite3.connect(databases.EMNIST.path(folder)) as connection:
      connection.execute("UPDATE client_metadata SET split_name = 'all_' || "
                         "split_name WHERE split_name IN ('train', 'test')")
      connection.execute("UPDATE examples SET split_name = 'all_' || "
                         "split_name WHERE split_name IN ('train', 'test')")
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, folder)
    self.assert_one_line(raised.exception, "lack the feature 'pixels'")

  def test_wrong_feature_shape(self):
    folder = self._folder()
    path = databases.EMNIST.path(folder)
    example = tf.train.Example()
    example.features.feature['pixels'].float_list.value.extend([0.5] * 10)
    example.features.feature['label'].int64_list.value.append(1)
    rows = [(split, 'f0', example.SerializeToString())
            for split in databases.EMNIST.splits]
    generated_databases._write(path, iter(rows))  # pylint: disable=protected-access  # tests a private part
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, folder)
    self.assert_one_line(raised.exception, "feature 'pixels' holds 10",
                         'reads 784 of float_list')

  @parameterized.named_parameters(('damaged', 'damaged'),
                                  ('label_out_of_range', 'label'))
  def test_a_bad_row_deep_in_the_table(self, fault):
    # Only the first example was read; a damaged row or
    # a label outside 0..61 further on ended training in a protobuf
    # DecodeError or a gRPC dump.
    folder = self._folder()
    path, rowid = bad_rows.write_emnist_with_bad_row(folder, fault, 6, 8, 2)
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, folder)
    self.assert_one_line(
        raised.exception, f'row {rowid}', path,
        *(('not a serialized',) if fault == 'damaged' else
          ("feature 'label'", 'is 70, outside the 0..61')))

  def test_blob_that_is_not_an_example(self):
    folder = self._folder()
    path = databases.EMNIST.path(folder)
    rows = [
        (split, 'f0', b'\xff\xfe garbage') for split in databases.EMNIST.splits
    ]
    generated_databases._write(path, iter(rows))  # pylint: disable=protected-access  # tests a private part
    with self.assertRaises(databases.DatabaseError) as raised:
      databases.check(databases.EMNIST, folder)
    self.assert_one_line(raised.exception, 'not a serialized tf.train.Example')
