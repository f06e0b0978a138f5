"""Your own data for `tff-ddp quantiles --values` and `frequency --items`.

Both read CSV (comma-separated, one record a line; blank lines are skipped;
surrounding spaces are dropped) and refuse a bad file with one line that
names the file, the line and what is wrong, before anything runs.

What a client is:

* `--values FILE` (quantiles): one value per client. A line is `value`, or
  `client_id,value` (every line the same form). Each line is one client;
  with ids, an id on two lines is refused (a client sends one value:
  aggregate per client before). The values follow the quantile process's
  policy for non-finite values: `inf` / `-inf` are clipped into the end
  bins, `nan` is a client without a value (counted, in no bin). An optional
  first line `value` or `client_id,value` is a header.
* `--items FILE` (frequency): a line is `client_id,item`; a client's items
  are all its lines (an item on several lines of a client counts that many
  times), so a client's count vector x_i has x_i[j] = its lines with item j.
  The item domain, the d of the protocol, is the distinct items of the file
  in sorted order (numerically if all are integers): the protocol takes it
  as public, so in a deployment it must come from outside the data. An
  optional first line `client_id,item` is a header.
"""

import csv
import dataclasses
import os
from typing import Any, Callable, List, Mapping, Optional, Tuple

import numpy as np

from tff_ddp.cli import common

VALUE_HEADERS = (('value',), ('client_id', 'value'))
ITEM_HEADER = ('client_id', 'item')


def _rows(path: str, flag: str) -> List[Tuple[int, List[str]]]:
  """(line number, fields) of every non-blank line of `path`."""
  if not os.path.exists(path):
    raise common.UserError(f'{flag} {path}: no such file')
  if os.path.isdir(path):
    raise common.UserError(f'{flag} {path}: is a directory, not a CSV file')
  try:
    with open(path, newline='', encoding='utf-8') as f:
      rows = [(n, [field.strip() for field in row])
              for n, row in enumerate(csv.reader(f), 1)
              if any(field.strip() for field in row)]
  except UnicodeDecodeError as e:
    raise common.UserError(f'{flag} {path}: not a UTF-8 text file ({e.reason}'
                           f' at byte {e.start})') from None
  except csv.Error as e:
    raise common.UserError(f'{flag} {path}: not CSV ({e})') from None
  except OSError as e:
    raise common.UserError(f'{flag} {path}: {e.strerror}') from None
  return rows


def file_or_synthetic(path: Optional[str], flag: str,
                      read: Callable[[str], Any],
                      synthetic: Mapping[str, Tuple[Any, Any]], why: str):
  """(the data of the file `path`, or None; the synthetic data's options).

  The one step of both commands that take a data file: with `path`, the
  file is read (`read(path)`) and no synthetic-data option may be given
  (`synthetic` maps an option's name to (its value on the command line or
  None, its default); a UserError names those given and `why` they do not
  apply to `flag`); without it, every option takes its value or default.
  """
  data = None
  if path is not None:
    given = [f'--{name}' for name, (value, _) in synthetic.items()
             if value is not None]
    if given:
      raise common.UserError(
          f'{", ".join(given)} do(es) not apply to {flag} ({why})')
    data = read(path)
  options = {name: value if value is not None else default
             for name, (value, default) in synthetic.items()}
  return data, options


def _is_header(fields, headers) -> bool:
  return tuple(f.lower() for f in fields) in headers


def read_values(path: str, flag: str = '--values') -> np.ndarray:
  """The clients' values (float64 [n], one per client) of a values file
  (module docstring)."""
  rows = _rows(path, flag)
  if rows and _is_header(rows[0][1], VALUE_HEADERS):
    rows = rows[1:]
  if not rows:
    raise common.UserError(f'{flag} {path}: no values (the file is empty)')
  width = len(rows[0][1])
  if width not in (1, 2):
    raise common.UserError(
        f'{flag} {path}: line {rows[0][0]} has {width} columns; a line is '
        '`value` or `client_id,value`')
  values, first_line = [], {}
  for line, fields in rows:
    if len(fields) != width:
      raise common.UserError(
          f'{flag} {path}: line {line} has {len(fields)} columns, line '
          f'{rows[0][0]} has {width} (every line `value`, or every line '
          '`client_id,value`)')
    if width == 2:
      client = fields[0]
      if not client:
        raise common.UserError(f'{flag} {path}: line {line}: empty client_id')
      if client in first_line:
        raise common.UserError(
            f'{flag} {path}: client {client!r} is on lines '
            f'{first_line[client]} and {line}; a client sends one value '
            '(aggregate per client first)')
      first_line[client] = line
    text = fields[-1]
    try:
      value = float(text)
    except ValueError:
      raise common.UserError(
          f'{flag} {path}: line {line}: {text!r} is not a number (inf, -inf '
          'and nan are: clipped into the end bins / no value)') from None
    values.append(value)
  return np.asarray(values, np.float64)


@dataclasses.dataclass
class Items:
  """A frequency dataset read from an items file."""
  counts: np.ndarray  # float32 [clients, items]: x_i[j]
  items: List[str]    # the domain, in column order
  clients: List[str]  # in order of first appearance


def _sorted_domain(labels) -> List[str]:
  try:
    numbers = {label: int(label) for label in labels}
  except ValueError:
    return sorted(labels)
  return sorted(labels, key=lambda label: (numbers[label], label))


def read_items(path: str, max_entries: int, flag: str = '--items') -> Items:
  """The clients' count vectors of an items file (module docstring);
  refuses more than `max_entries` clients x items (held in memory)."""
  rows = _rows(path, flag)
  if rows and _is_header(rows[0][1], (ITEM_HEADER,)):
    rows = rows[1:]
  if not rows:
    raise common.UserError(f'{flag} {path}: no items (the file is empty)')
  pairs = []
  for line, fields in rows:
    if len(fields) != 2:
      raise common.UserError(
          f'{flag} {path}: line {line} has {len(fields)} columns; a line is '
          '`client_id,item`')
    client, item = fields
    if not client or not item:
      raise common.UserError(
          f'{flag} {path}: line {line}: empty '
          f'{"client_id" if not client else "item"}')
    pairs.append((client, item))
  clients = list(dict.fromkeys(c for c, _ in pairs))
  items = _sorted_domain(set(i for _, i in pairs))
  if len(clients) * len(items) > max_entries:
    raise common.UserError(
        f'{flag} {path}: {len(clients)} clients x {len(items)} items = '
        f'{len(clients) * len(items)} count entries; at most {max_entries} '
        '(the dataset is held in memory)')
  row = {c: k for k, c in enumerate(clients)}
  column = {i: k for k, i in enumerate(items)}
  counts = np.zeros([len(clients), len(items)], np.float32)
  np.add.at(counts, ([row[c] for c, _ in pairs],
                     [column[i] for _, i in pairs]), 1.0)
  return Items(counts, items, clients)
