"""TFF's simulation databases of EMNIST and Stack Overflow: where, what, check.

TFF 0.87's loaders (`tff.simulation.datasets.emnist.load_data(only_digits,
cache_dir)`, `tff.simulation.datasets.stackoverflow.load_data(cache_dir)`)
read `<cache_dir>/emnist_all.sqlite` and `<cache_dir>/stackoverflow.sqlite`
when the file is there, and otherwise download it (a machine without network
then fails deep inside urllib). `check(spec, data_dir)` runs before a loader
and turns every way the file can be missing or wrong into one line that says
which file to put where (`DatabaseError`).

The schema (`tff.simulation.datasets.SqlClientData`): a SQLite file with

* `examples(split_name TEXT, client_id TEXT, serialized_example_proto BLOB)`:
  one `tf.train.Example` per row;
* `client_metadata(client_id TEXT, split_name TEXT, num_examples INTEGER)`:
  one row per (client, split).

EMNIST (`EMNIST`): splits `all_train`, `all_test` (62 classes; also
`digits_only_train` / `digits_only_test`, not used here); features `pixels`
(28 x 28 floats, 1.0 the background) and `label` (int64, 0-61). Stack
Overflow (`STACKOVERFLOW`): splits `train`, `heldout`, `test`; features
`tokens` (one sentence, words separated by spaces), `creation_date`,
`tags`, `title`, `type` (bytes) and `score` (int64).
"""

import dataclasses
import os
import sqlite3
from typing import Mapping, Tuple

_BUCKET = 'https://storage.googleapis.com/tff-datasets-public/'
# (feature kind of tf.train.Feature, number of values per example)
_FLOAT, _INT64, _BYTES = 'float_list', 'int64_list', 'bytes_list'
EXAMPLES_COLUMNS = ('split_name', 'client_id', 'serialized_example_proto')
METADATA_COLUMNS = ('client_id', 'split_name', 'num_examples')


class DatabaseError(ValueError):
  """A database that is missing or not in TFF's format (one-line message)."""


@dataclasses.dataclass(frozen=True)
class DatabaseSpec:
  """Where TFF's loader looks for a database and what it must hold.

  Attributes:
    name: the data set's name in messages.
    file_name: the file TFF's loader opens in its `cache_dir`.
    splits: (training split, test split, others) the tasks read.
    features: feature name -> (tf.train.Feature kind, values per example).
    ranges: feature name -> (least, largest) value the task takes (EMNIST's
      labels: its 62 classes).
  """
  name: str
  file_name: str
  splits: Tuple[str, ...]
  features: Mapping[str, Tuple[str, int]]
  ranges: Mapping[str, Tuple[int,
                             int]] = dataclasses.field(default_factory=dict)

  @property
  def url(self) -> str:
    """TFF's download (LZMA-compressed; `unlzma` gives `file_name`)."""
    return _BUCKET + self.file_name + '.lzma'

  @property
  def train_split(self) -> str:
    return self.splits[0]

  @property
  def test_split(self) -> str:
    return self.splits[1]

  def path(self, data_dir: str) -> str:
    return os.path.join(data_dir, self.file_name)


EMNIST = DatabaseSpec(name='EMNIST',
                      file_name='emnist_all.sqlite',
                      splits=('all_train', 'all_test'),
                      features={
                          'pixels': (_FLOAT, 28 * 28),
                          'label': (_INT64, 1)
                      },
                      ranges={'label': (0, 61)})
STACKOVERFLOW = DatabaseSpec(name='Stack Overflow',
                             file_name='stackoverflow.sqlite',
                             splits=('train', 'test', 'heldout'),
                             features={
                                 'creation_date': (_BYTES, 1),
                                 'score': (_INT64, 1),
                                 'tags': (_BYTES, 1),
                                 'title': (_BYTES, 1),
                                 'tokens': (_BYTES, 1),
                                 'type': (_BYTES, 1)
                             })


def _fix(spec: DatabaseSpec) -> str:
  return (f'put TFF\'s {spec.file_name} there ({spec.url}, decompressed '
          f'with unlzma) or give --data-dir the folder that holds it')


def _columns(connection, table):
  return [row[1] for row in connection.execute(f'PRAGMA table_info({table})')]


# Examples `check` parses: all of a database with at most this many, else
# this many spread evenly over the table (by rowid).
CHECKED_EXAMPLES = 2000


def _check_example(spec: DatabaseSpec,
                   path: str,
                   blob,
                   where: str = '') -> None:
  """An example parses with the features TFF's loader reads, and its
  values are in the task's ranges (`where` names its row)."""
  from tensorflow.core.example import example_pb2
  try:
    example = example_pb2.Example.FromString(bytes(blob))
  except Exception:  # pylint: disable=broad-except  # any parse failure is a damaged row
    raise DatabaseError(
        f'{path}: examples.serialized_example_proto{where} is not a '
        f'serialized tf.train.Example; this is not TFF\'s {spec.name} '
        f'database ({spec.url}), or it is damaged.') from None
  features = example.features.feature
  for name, (kind, length) in spec.features.items():
    if name not in features:
      raise DatabaseError(
          f'{path}: its examples lack the feature {name!r} that TFF\'s '
          f'{spec.name} loader reads (it reads {", ".join(spec.features)}); '
          f'this is not TFF\'s {spec.name} database ({spec.url}).')
    feature = features[name]
    found = feature.WhichOneof('kind')
    size = len(getattr(feature, found).value) if found else 0
    if found != kind or size != length:
      raise DatabaseError(
          f'{path}: feature {name!r}{where} holds {size} value(s) of '
          f'{found}, TFF\'s {spec.name} loader reads {length} of {kind}; '
          f'this is not TFF\'s {spec.name} database ({spec.url}).')
    if name in spec.ranges:
      low, high = spec.ranges[name]
      bad = [v for v in getattr(feature, found).value if not low <= v <= high]
      if bad:
        raise DatabaseError(
            f'{path}: feature {name!r}{where} is {bad[0]}, outside the '
            f'{low}..{high} of TFF\'s {spec.name}; this is not TFF\'s '
            f'{spec.name} database ({spec.url}), or it is damaged.')


def check(spec: DatabaseSpec, data_dir: str) -> str:
  """The database's path, after checking it is there and in TFF's format.

  Reads the table layout, the split names and examples: every one of a
  database of at most CHECKED_EXAMPLES, else that many spread evenly over
  the table (a damaged row elsewhere is caught in the round that reads it:
  `training.run` says which clients). TensorFlow is imported only once
  the file is there and SQLite.

  Raises:
    DatabaseError: the file is missing, not SQLite, lacks a table, column or
      split, or its examples do not parse as TFF's loader parses them; the
      message is one line and says what to put where.
  """
  if not isinstance(data_dir, (str, os.PathLike)):
    raise TypeError(f'data_dir must be a path, got {data_dir!r}.')
  data_dir = os.path.abspath(os.path.expanduser(data_dir))
  path = spec.path(data_dir)
  if not os.path.isdir(data_dir):
    raise DatabaseError(f'--data-dir {data_dir} is not a folder: make it '
                        f'and {_fix(spec)}.')
  if not os.path.isfile(path):
    raise DatabaseError(f'no {spec.name} database {path}: '
                        f'{_fix(spec)}.')
  wrong = (f'; TFF\'s loader reads tables examples('
           f'{", ".join(EXAMPLES_COLUMNS)}) and client_metadata('
           f'{", ".join(METADATA_COLUMNS)}) with splits '
           f'{", ".join(spec.splits)} ({spec.url}).')
  try:
    connection = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
  except sqlite3.Error as e:
    raise DatabaseError(f'{path} cannot be opened ({e}).') from None
  try:
    tables = {
        row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    for table, columns in (('examples', EXAMPLES_COLUMNS), ('client_metadata',
                                                            METADATA_COLUMNS)):
      if table not in tables:
        raise DatabaseError(f'{path} has no table {table}' + wrong)
      missing = [c for c in columns if c not in _columns(connection, table)]
      if missing:
        raise DatabaseError(f'{path}: table {table} lacks column(s) '
                            f'{", ".join(missing)}' + wrong)
    splits = {
        row[0] for row in connection.execute(
            'SELECT DISTINCT split_name FROM client_metadata')
    }
    missing = [s for s in spec.splits if s not in splits]
    if missing:
      found = ', '.join(sorted(map(str, splits))) or 'none'
      raise DatabaseError(f'{path}: client_metadata has no client in split(s) '
                          f'{", ".join(missing)} (it has {found})' + wrong)
    row = connection.execute(
        'SELECT serialized_example_proto FROM examples WHERE split_name = ? '
        'LIMIT 1', (spec.train_split,)).fetchone()
    if row is None:
      raise DatabaseError(f'{path}: table examples has no row of split '
                          f'{spec.train_split}' + wrong)
    _check_example(spec, path, row[0])
    low, high = connection.execute(
        'SELECT MIN(rowid), MAX(rowid) FROM examples').fetchone()
    step = max(1, (high - low + 1) // CHECKED_EXAMPLES)
    for rowid, client, blob in connection.execute(
        'SELECT rowid, client_id, serialized_example_proto FROM examples '
        'WHERE (rowid - ?) % ? = 0', (low, step)):
      _check_example(spec, path, blob, f' (row {rowid}, client {client!r})')
  except sqlite3.DatabaseError as e:
    raise DatabaseError(f'{path} is not an SQLite database in TFF\'s format '
                        f'({e})' + wrong) from None
  finally:
    connection.close()
  return path


def has_client_index(path: str) -> bool:
  """Whether `examples` has an index led by `client_id`.

  TFF's `SqlClientData` reads a client with `SELECT ... WHERE client_id =
  ...`; without such an index every client of every round scans the whole
  table (the generated databases, like TFF's own writer, have none; a
  large database should).
  """
  connection = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
  try:
    for row in connection.execute('PRAGMA index_list(examples)'):
      columns = [
          r[2] for r in connection.execute(f'PRAGMA index_info("{row[1]}")')
      ]
      if columns[:1] == ['client_id']:
        return True
    return False
  finally:
    connection.close()


def index_hint(path: str) -> str:
  """The command that adds the index `has_client_index` looks for."""
  return (f'sqlite3 {path} "CREATE INDEX examples_client_id ON '
          'examples (client_id, split_name)"')
