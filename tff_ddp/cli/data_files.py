"""Your own data for `tff-ddp quantiles --values` and `frequency --items`.

Both read CSV (comma-separated, one record a line; blank lines are skipped;
surrounding spaces are dropped; fields may be quoted; lines may end in
CRLF) in UTF-8, with or without a byte-order mark (Excel's "CSV UTF-8"
writes one), plain or gzip-compressed (recognised by its magic bytes, not
its name), or from standard input when the path is `-`. A bad file is
refused with one line that names the file, the line and what is wrong,
before anything runs.

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
  The item domain, the d of the protocol, is public: it is the user's
  `--domain FILE` (one item a line, in that order), never the file's
  distinct items (a user holding a unique item would change d, and with it
  the release, between neighbouring datasets). An item outside the domain
  is dropped from its client's vector (each client's own operation: the
  client still takes part). An optional first line `client_id,item` is a
  header.
"""

import contextlib
import csv
import dataclasses
import gzip
import io
import itertools
import os
import sys
from typing import (Any, Callable, Iterator, List, Mapping, Optional, Sequence,
                    Tuple)
import zlib

import numpy as np

from tff_ddp.cli import common

VALUE_HEADERS = (('value',), ('client_id', 'value'))
ITEM_HEADER = ('client_id', 'item')
DOMAIN_HEADER = ('item',)

# The first bytes of a gzip file.
_GZIP_MAGIC = b'\x1f\x8b'
# The path that means standard input.
STDIN = '-'


def _open_text(path: str, flag: str):
  """A text stream of `path` (utf-8, a byte-order mark dropped, gzip
  recognised by its magic bytes; `-` is standard input)."""
  if path == STDIN:
    raw = sys.stdin.buffer if hasattr(sys.stdin, 'buffer') else None
    if raw is None:  # a StringIO standing in for stdin
      return contextlib.nullcontext(
          io.StringIO(sys.stdin.read().lstrip('\ufeff')))
    head = raw.peek(2)[:2] if hasattr(raw, 'peek') else b''
    if head == _GZIP_MAGIC:
      raw = gzip.GzipFile(fileobj=raw)
    return contextlib.nullcontext(
        io.TextIOWrapper(raw, encoding='utf-8-sig', newline=''))
  if not os.path.exists(path):
    raise common.UserError(f'{flag} {path}: no such file')
  if os.path.isdir(path):
    raise common.UserError(f'{flag} {path}: is a directory, not a CSV file')
  with open(path, 'rb') as f:
    head = f.read(2)
  if head == _GZIP_MAGIC:
    return gzip.open(path, 'rt', encoding='utf-8-sig', newline='')
  return open(path, newline='', encoding='utf-8-sig')


def iter_rows(path: str, flag: str) -> Iterator[Tuple[int, List[str]]]:
  """(line number, fields) of every non-blank line of `path`, streamed."""
  try:
    with _open_text(path, flag) as f:
      for n, row in enumerate(csv.reader(f), 1):
        fields = [field.strip() for field in row]
        if any(fields):
          yield n, fields
  except UnicodeDecodeError as e:
    raise common.UserError(f'{flag} {path}: not a UTF-8 text file ({e.reason}'
                           f' at byte {e.start})') from None
  except csv.Error as e:
    raise common.UserError(f'{flag} {path}: not CSV ({e})') from None
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise common.UserError(
        f'{flag} {path}: a damaged gzip file ({e})') from None
  except OSError as e:
    raise common.UserError(f'{flag} {path}: {e.strerror or e}') from None


def _rows(path: str, flag: str) -> List[Tuple[int, List[str]]]:
  """(line number, fields) of every non-blank line of `path`."""
  return list(iter_rows(path, flag))


def file_or_synthetic(path: Optional[str], flag: str, read: Callable[[str],
                                                                     Any],
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
    given = [
        f'--{name}' for name, (value, _) in synthetic.items()
        if value is not None
    ]
    if given:
      raise common.UserError(
          f'{", ".join(given)} do(es) not apply to {flag} ({why})')
    data = read(path)
  options = {
      name: value if value is not None else default
      for name, (value, default) in synthetic.items()
  }
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
  items: List[str]  # the domain, in column order
  clients: List[str]  # in order of first appearance
  # Lines whose item is not in the domain (dropped; counted in the clear
  # from the file, for its owner: nothing the protocol releases).
  dropped: int = 0


def read_domain(path: str, flag: str = '--domain') -> List[str]:
  """The item domain of a domain file: one item a line, in that order (an
  optional first line `item` is a header); a repeated item is refused."""
  rows = _rows(path, flag)
  if rows and _is_header(rows[0][1], (DOMAIN_HEADER,)):
    rows = rows[1:]
  if not rows:
    raise common.UserError(f'{flag} {path}: no items (the file is empty)')
  first_line = {}
  for line, fields in rows:
    if len(fields) != 1:
      raise common.UserError(
          f'{flag} {path}: line {line} has {len(fields)} columns; a line is '
          'one item')
    item = fields[0]
    if item in first_line:
      raise common.UserError(
          f'{flag} {path}: item {item!r} is on lines {first_line[item]} and '
          f'{line}; each item once')
    first_line[item] = line
  return list(first_line)


def read_items(path: str,
               max_entries: int,
               domain: Sequence[str],
               flag: str = '--items') -> Items:
  """The clients' count vectors of an items file over the public `domain`
  (module docstring); refuses more than `max_entries` clients x items
  (held in memory)."""
  column = {item: k for k, item in enumerate(domain)}
  row = {}
  rows, columns = [], []
  dropped = 0
  lines = iter_rows(path, flag)
  first = next(lines, None)
  if first is not None and _is_header(first[1], (ITEM_HEADER,)):
    first = None
  for line, fields in itertools.chain([first] if first else [], lines):
    if len(fields) != 2:
      raise common.UserError(
          f'{flag} {path}: line {line} has {len(fields)} columns; a line is '
          '`client_id,item`')
    client, item = fields
    if not client or not item:
      raise common.UserError(f'{flag} {path}: line {line}: empty '
                             f'{"client_id" if not client else "item"}')
    index = row.setdefault(client, len(row))
    j = column.get(item)
    if j is None:
      dropped += 1
      continue
    rows.append(index)
    columns.append(j)
  if not row:
    raise common.UserError(f'{flag} {path}: no items (the file is empty)')
  if len(row) * len(column) > max_entries:
    raise common.UserError(
        f'{flag} {path}: {len(row)} clients x {len(column)} items = '
        f'{len(row) * len(column)} count entries; at most {max_entries} '
        '(the dataset is held in memory)')
  counts = np.zeros([len(row), len(column)], np.float32)
  np.add.at(counts, (np.asarray(rows, np.int64), np.asarray(columns, np.int64)),
            1.0)
  return Items(counts, list(domain), list(row), dropped)
