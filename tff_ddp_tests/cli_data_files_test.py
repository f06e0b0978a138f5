"""Your own data on the command line.

`tff-ddp quantiles --values FILE` and `tff-ddp frequency --items FILE`:
what a client is (one value per client, duplicates refused; a client's
items are its lines), every bad file refused with one line naming the file,
the line and the fault before anything runs, and -- end to end, slow -- the
same report and epsilon as the synthetic run on the same data.
"""

import gzip
import io
import os
import shutil
import sys
import tempfile
from unittest import mock

from absl.testing import parameterized
import numpy as np
import pytest

from tff_ddp import cli
from tff_ddp.cli import common
from tff_ddp.cli import data_files
from tff_ddp_tests import docs_runner


def _write(directory, name, text, mode='w'):
  path = os.path.join(directory, name)
  with open(path, mode, encoding=None if 'b' in mode else 'utf-8') as f:
    f.write(text)
  return path


_run = cli.run_captured


class ReadValuesTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  def test_one_value_per_client_in_either_form(self):
    plain = _write(self.dir, 'a.csv', '1.5\n\n  -2 \n3e1\ninf\n-inf\nnan\n')
    np.testing.assert_array_equal(data_files.read_values(plain),
                                  [1.5, -2.0, 30.0, np.inf, -np.inf, np.nan])
    with_ids = _write(self.dir, 'b.csv',
                      'client_id,value\nc1, 4\nc2,5\n\nc3,nan\n')
    np.testing.assert_array_equal(data_files.read_values(with_ids),
                                  [4.0, 5.0, np.nan])
    header = _write(self.dir, 'c.csv', 'Value\n7\n')
    np.testing.assert_array_equal(data_files.read_values(header), [7.0])

  @parameterized.named_parameters(
      ('empty', '', 'no values'), ('blank_lines', '\n \n', 'no values'),
      ('header_only', 'client_id,value\n', 'no values'),
      ('not_a_number', '1\n2\nabc\n', r'line 3: \'abc\' is not a number'),
      ('first_line_not_a_number', 'x\n1\n', r'line 1: \'x\' is not a number'),
      ('three_columns', 'a,1,2\n', 'line 1 has 3 columns'),
      ('mixed_forms', '1\nc,2\n', 'line 2 has 2 columns, line 1 has 1'),
      ('duplicate_client', 'a,1\nb,2\na,3\n',
       r"client 'a' is on lines 1 and 3; a client sends one value"),
      ('empty_id', ',1\n', 'line 1: empty client_id'),
      ('empty_value', 'a,\n', "line 1: '' is not a number"))
  def test_bad_files_are_one_line_errors(self, text, message):
    path = _write(self.dir, 'bad.csv', text)
    with self.assertRaisesRegex(common.UserError, message) as raised:
      data_files.read_values(path)
    self.assertTrue(str(raised.exception).startswith(f'--values {path}: '))
    self.assertNotIn('\n', str(raised.exception))

  def test_missing_directory_and_binary_files(self):
    with self.assertRaisesRegex(common.UserError, 'no such file'):
      data_files.read_values(os.path.join(self.dir, 'nothing.csv'))
    with self.assertRaisesRegex(common.UserError, 'is a directory'):
      data_files.read_values(self.dir)
    binary = _write(self.dir, 'b.bin', b'\xff\xfe\x00\x81', 'wb')
    with self.assertRaisesRegex(common.UserError, 'not a UTF-8 text file'):
      data_files.read_values(binary)


class ReadItemsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  def test_a_clients_items_are_its_lines(self):
    path = _write(self.dir, 'items.csv', 'client_id,item\nu1,10\nu2,2\n'
                  'u1,2\nu1,10\n\nu3,9\n')
    items = data_files.read_items(path, 100, ['2', '9', '10'])
    self.assertEqual(items.clients, ['u1', 'u2', 'u3'])
    self.assertEqual(items.items, ['2', '9', '10'])  # the domain's order
    np.testing.assert_array_equal(items.counts,
                                  [[1, 0, 2], [1, 0, 0], [0, 1, 0]])
    self.assertEqual(items.counts.dtype, np.float32)
    words = data_files.read_items(
        _write(self.dir, 'words.csv', 'a,the\nb,cat\na,cat\n'), 100,
        ['the', 'cat', 'dog'])
    np.testing.assert_array_equal(words.counts, [[1, 1, 0], [0, 1, 0]])

  def test_the_domain_is_the_users_never_the_files(self):
    # d was the file's distinct items, so one user with a
    # unique item changed d and the release between neighbours. Over a
    # stated domain, a neighbour adding such a user changes neither d nor
    # the other users' vectors; the user takes part with what is in the
    # domain (its other item) and its unknown item is dropped.
    domain = data_files.read_domain(
        _write(self.dir, 'domain.txt', 'item\nb\na\n'))
    self.assertEqual(domain, ['b', 'a'])
    base = 'u1,a\nu2,b\nu2,a\n'
    without = data_files.read_items(_write(self.dir, 'x.csv', base), 100,
                                    domain)
    with_rare = data_files.read_items(
        _write(self.dir, 'y.csv', base + 'u3,zebra\nu3,a\n'), 100, domain)
    self.assertEqual(without.counts.shape, (2, 2))
    self.assertEqual(with_rare.counts.shape, (3, 2))
    np.testing.assert_array_equal(with_rare.counts[:2], without.counts)
    np.testing.assert_array_equal(with_rare.counts[2], [0, 1])
    self.assertEqual((without.dropped, with_rare.dropped), (0, 1))

  @parameterized.named_parameters(
      ('empty', '', 'no items'), ('header_only', 'item\n', 'no items'),
      ('two_columns', 'a,b\n', 'line 1 has 2 columns; a line is one item'),
      ('twice', 'a\nb\na\n', "item 'a' is on lines 1 and 3"))
  def test_bad_domain_files(self, text, message):
    path = _write(self.dir, 'domain.txt', text)
    with self.assertRaisesRegex(common.UserError, message):
      data_files.read_domain(path)

  @parameterized.named_parameters(
      ('empty', '', 'no items'),
      ('header_only', 'client_id,item\n', 'no items'),
      ('one_column', 'u1\n', 'line 1 has 1 columns'),
      ('three_columns', 'u1,a\nu2,b,c\n', 'line 2 has 3 columns'),
      ('empty_item', 'u1,\n', 'line 1: empty item'),
      ('empty_client', ',a\n', 'line 1: empty client_id'))
  def test_bad_files_are_one_line_errors(self, text, message):
    path = _write(self.dir, 'bad.csv', text)
    with self.assertRaisesRegex(common.UserError, message) as raised:
      data_files.read_items(path, 100, ['a'])
    self.assertTrue(str(raised.exception).startswith(f'--items {path}: '))

  def test_too_many_entries(self):
    path = _write(self.dir, 'big.csv',
                  ''.join(f'u{i},{j}\n' for i in range(5) for j in range(5)))
    with self.assertRaisesRegex(
        common.UserError, r'5 clients x 5 items = 25 count entries; '
        r'at most 24'):
      data_files.read_items(path, 24, [str(j) for j in range(5)])


class FileFormsTest(parameterized.TestCase):
  """What spreadsheets and pipes write: a byte-order
  mark, CRLF, quoted fields, gzip, standard input -- each the same data."""

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  @parameterized.named_parameters(
      ('bom', b'\xef\xbb\xbfclient_id,value\nc1,4\nc2,5\n'),
      ('crlf', b'client_id,value\r\nc1,4\r\nc2,5\r\n'),
      ('bom_crlf', b'\xef\xbb\xbfvalue\r\n4\r\n5\r\n'),
      ('quoted', b'"client_id","value"\n"c1","4"\n"c,2", 5\n'),
      ('gzip', gzip.compress(b'\xef\xbb\xbfvalue\n4\n5\n')))
  def test_values(self, data):
    # Before: the BOM made the header a value ("line 1: 'value' is not a
    # number"); gzip was "not a UTF-8 text file".
    path = _write(self.dir, 'values.csv', data, 'wb')
    np.testing.assert_array_equal(data_files.read_values(path), [4.0, 5.0])

  @parameterized.named_parameters(
      ('bom', b'\xef\xbb\xbfclient_id,item\nu1,a\nu2,b\nu1,b\n'),
      ('crlf', b'client_id,item\r\nu1,a\r\nu2,b\r\nu1,b\r\n'),
      ('quoted', b'"client_id","item"\n"u1","a"\nu2,"b"\n"u1",b\n'),
      ('gzip',
       gzip.compress(b'\xef\xbb\xbfclient_id,item\nu1,a\nu2,b\n'
                     b'u1,b\n')))
  def test_items(self, data):
    # Before: the BOM made the header a client: 3 clients, not 2 (and the
    # item 'item' a column of the domain).
    path = _write(self.dir, 'items.csv', data, 'wb')
    items = data_files.read_items(path, 100, ['a', 'b'])
    self.assertEqual(items.clients, ['u1', 'u2'])
    np.testing.assert_array_equal(items.counts, [[1, 1], [0, 1]])
    self.assertEqual(items.dropped, 0)

  @parameterized.parameters(False, True)
  def test_standard_input(self, compressed):
    data = b'\xef\xbb\xbfvalue\r\n1\r\n2.5\r\n'
    stdin = io.TextIOWrapper(
        io.BufferedReader(
            io.BytesIO(gzip.compress(data) if compressed else data)))
    with mock.patch.object(sys, 'stdin', stdin):
      np.testing.assert_array_equal(data_files.read_values('-'), [1.0, 2.5])

  def test_damaged_gzip(self):
    text = ''.join(f'{v!r}\n' for v in np.random.default_rng(0).random(500))
    data = gzip.compress(text.encode())
    path = _write(self.dir, 'v.csv.gz', data[:len(data) // 2], 'wb')
    with self.assertRaisesRegex(common.UserError, 'damaged gzip'):
      data_files.read_values(path)


class CommandTest(parameterized.TestCase):
  """Bad files and flags that do not apply: one line, status 2, before
  anything runs."""

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  def test_one_line_errors(self):
    values = _write(self.dir, 'v.csv', 'a,1\na,2\n')
    items = _write(self.dir, 'i.csv', 'u,1\n')
    for argv, message in (
        (['quantiles', '--values', values], "client 'a' is on lines 1 and 2"),
        (['quantiles', '--values',
          os.path.join(self.dir, 'none.csv')], 'no such file'),
        (['quantiles', '--values', items, '--clients',
          '5'], r'--clients do\(es\) not apply to --values'),
        ([
            'quantiles', '--values', items, '--seed', '1', '--distribution',
            'chi2'
        ], r'--distribution, --seed do\(es\) not apply'),
        (['quantiles', '--lower', '5', '--upper',
          '1'], r'--lower \(5\) must be below --upper \(1\)'),
        (['frequency', '--items', values, '--dim',
          '3'], r'--dim do\(es\) not apply to --items'),
        ([
            'frequency', '--items',
            _write(self.dir, 'e.csv', '\n'), '--domain',
            _write(self.dir, 'd.txt', 'a\n')
        ], 'no items'),
        # Bounds are stated, not read from the data.
        (['frequency', '--items', items], '--items needs --domain FILE'),
        ([
            'frequency', '--items', items, '--domain',
            _write(self.dir, 'd2.txt', '1\n'), '--protocols', 'two_phase'
        ], 'two_phase on .* needs --max-items'),
        (['frequency', '--data', 'heterogeneous', '--protocols',
          'two_phase'], 'two_phase on heterogeneous needs --max-items'),
        (['frequency', '--domain', items], '--domain is for --items')):
      with self.subTest(argv=argv):
        code, out, err = _run(argv)
        self.assertEqual(code, 2)
        self.assertEqual(out, '')
        self.assertLen(err.strip().splitlines(), 1)
        self.assertRegex(err, f'^tff-ddp {argv[0]}: error: ')
        self.assertRegex(err, message)


def _report(argv):
  # Through files, not StringIO: TFF starts its worker with this stdout.
  out, error = docs_runner.run_cli(argv)
  assert error is None, error
  return out.splitlines()


@pytest.mark.slow  # two TFF runs per command: ~20-60 s
class SameReportTest(parameterized.TestCase):
  """A file holding the synthetic data gets the synthetic run's report."""

  def test_quantiles(self):
    from tff_ddp.cli import quantiles as quantiles_cli
    common_args = [
        'quantiles', '--methods', 'flat', '--mechanisms', 'discrete_gaussian',
        '--bins', '8', '--repetitions', '1'
    ]
    synthetic = _report(common_args + ['--clients', '40'])
    values = quantiles_cli.draw('uniform', 40, np.random.default_rng(0), 10.0)
    with tempfile.TemporaryDirectory() as tmp:
      path = _write(
          tmp, 'values.csv', 'client_id,value\n' +
          ''.join(f'c{i},{v!r}\n' for i, v in enumerate(values)))
      mine = _report(common_args + ['--values', path])

    def parts(lines):
      # (the header, as one line; the rows after it), whatever the wrap.
      table = next(i for i, l in enumerate(lines) if l.startswith('method'))
      return ' '.join(' '.join(lines[:table]).split()), lines[table + 1:]

    (synthetic_header, synthetic), (mine_header,
                                    mine) = map(parts, (synthetic, mine))
    self.assertEqual(synthetic_header.replace('uniform', path), mine_header)
    # Same epsilon and calibration (columns 'eps' and 'parameters') and
    # the same true quantiles (every row's noise is fresh).
    for a, b in zip(synthetic[:2], mine[:2]):  # ... eps s/round c= z=
      self.assertEqual(a.split()[-4:-3] + a.split()[-2:],
                       b.split()[-4:-3] + b.split()[-2:])
    self.assertEqual(synthetic[3], mine[3])  # true (sample)

  def test_frequency(self):
    from tff_ddp.analytics.frequency import data as fd
    common_args = ['frequency', '--protocols', 'normalize']
    synthetic = _report(common_args + ['--clients', '30', '--dim', '8'])
    x = fd.load('iid', 30, 8, 0).astype(int)
    self.assertTrue(np.all(x.sum(axis=0) > 0))  # every item is in the file
    with tempfile.TemporaryDirectory() as tmp:
      path = _write(
          tmp, 'items.csv', ''.join(f'user{i},{j}\n' * int(x[i, j])
                                    for i in range(30)
                                    for j in range(8)))
      domain = _write(tmp, 'domain.txt', ''.join(f'{j}\n' for j in range(8)))
      mine = _report(common_args + ['--items', path, '--domain', domain])
    self.assertEqual(synthetic[0].replace('iid data', f'{path} data'), mine[0])

    # Same clip and epsilon columns; the same calibration line.
    def row(lines):
      return next(l for l in lines if l.startswith('normalize ')).split()

    def detail(lines):
      start = lines.index(next(
          l for l in lines if l.startswith('  normalize:')))
      end = start + 1
      while lines[end].startswith('      '):
        end += 1
      return lines[start:end]

    self.assertEqual(row(synthetic)[2:5], row(mine)[2:5])  # clip, sd, eps
    self.assertEqual(detail(synthetic), detail(mine))
