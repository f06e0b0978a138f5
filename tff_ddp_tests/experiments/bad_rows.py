"""A generated EMNIST database with one bad row deep in its training split.

databases_test.py holds `databases.check` to naming that row;
tff_ddp_tests/fuzz/bad_inputs.py prints what a user gets for it.
"""

import sqlite3
from typing import Tuple

import tensorflow as tf

from tff_ddp.experiments import generated_databases

# 'damaged': the row's serialized example cut to a third; 'label': its label
# set to 70, outside EMNIST's 0..61.
FAULTS = ('damaged', 'label')


def write_emnist_with_bad_row(folder: str, fault: str, num_clients: int,
                              train_examples: int,
                              test_examples: int) -> Tuple[str, int]:
  """Writes EMNIST's database into `folder` (generated_databases), then
  spoils its last training row with `fault`; returns (path, that rowid)."""
  path = generated_databases.write_emnist(folder, num_clients, train_examples,
                                          test_examples)
  with sqlite3.connect(path) as connection:
    rowid, blob = connection.execute(
        "SELECT MAX(rowid), serialized_example_proto FROM examples WHERE "
        "split_name = 'all_train'").fetchone()
    if fault == FAULTS[0]:
      blob = bytes(blob)[:len(blob) // 3]
    else:
      example = tf.train.Example.FromString(blob)
      example.features.feature['label'].int64_list.value[0] = 70
      blob = example.SerializeToString()
    connection.execute(
        'UPDATE examples SET serialized_example_proto = ? '
        'WHERE rowid = ?', (blob, rowid))
  return path, rowid
