"""The harness of the benchmark scripts: arguments, TFF context, clean-up,
timing, and output as tables plus JSON rows.

A benchmark is a function of its parameters returning its tables; its
script declares each parameter's help and the harness does the rest:

    def run(clients=100, epsilons=(1.0, 2.0)):
      table = harness.Table([('eps', 'eps', 'g'), ('mse', 'MSE', '.3e')])
      for eps in epsilons:
        table.add(eps=eps, mse=...)
      return table

    if __name__ == '__main__':
      harness.main(run, __doc__, tff=True, clients='clients per round',
                   epsilons='target epsilons')

`main` builds argparse from `run`'s signature (a default lives there only;
a tuple takes one or more values, a bool is a switch; --help shows the
defaults), installs TFF's C++ test context once if `tff`, ends this
process's TFF workers by pid however the run ends (`processes.release_tff`),
prints the header line a RESULTS.md section copies (command, date UTC,
seconds, load average, cores) and the tables, and with `--json FILE` writes
those fields and the tables' raw rows to FILE.
"""

import argparse
import contextlib
import dataclasses
import datetime
import inspect
import json
import math
import os
import shlex
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import _common  # sys.path, TFF's workers ended at exit
import numpy as np

from tff_ddp.utils import processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TICKS = os.sysconf('SC_CLK_TCK')


class UsageError(ValueError):
  """A parameter the user set is invalid: `main` reports it as argparse
  does (the usage line, then the message; exit status 2)."""


@dataclasses.dataclass(frozen=True)
class Arg:
  """A parameter's help and the argparse keywords its default does not
  imply (`type` for a None default, `choices`, `action`, `metavar`, ...;
  `flags`: option strings other than --name-with-hyphens)."""
  help: str
  options: Dict[str, Any] = dataclasses.field(default_factory=dict)


def arg(help_text: str, **options) -> Arg:
  return Arg(help_text, options)


@dataclasses.dataclass
class Table:
  """Rows of raw values (dicts; keys beyond the columns go to JSON only),
  printed as a Markdown table under `title`, then `notes`. A column is
  (key, header, format spec of row[key] or a function of the row). A
  failed check (`failed=True`) makes the script exit 1 after printing."""
  columns: Sequence[Tuple[str, str, Union[str, Callable[[dict], str]]]]
  rows: List[dict] = dataclasses.field(default_factory=list)
  title: str = ''
  notes: List[str] = dataclasses.field(default_factory=list)
  failed: bool = False

  def add(self, **row) -> dict:
    self.rows.append(row)
    return row

  def lines(self) -> List[str]:
    cells = [[header for _, header, _ in self.columns]]
    for row in self.rows:
      cells.append([_cell(row, key, fmt) for key, _, fmt in self.columns])
    cells = [[c.replace('|', r'\|') for c in r] for r in cells]  # Markdown
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    # Text ('s') columns flush left, numbers flush right.
    justify = [
        str.ljust if fmt == 's' else str.rjust for _, _, fmt in self.columns
    ]
    text = [
        '| ' + ' | '.join(j(c, w)
                          for j, c, w in zip(justify, r, widths)) + ' |'
        for r in cells
    ]
    text.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    return ([self.title] if self.title else []) + text + list(self.notes)


def mean_std(key: str,
             digits: int = 2,
             ddof: int = 0,
             joiner: str = ' +- ') -> Callable[[dict], str]:
  """A column's format: 'mean +- std' of the list of values row[key]."""

  def cell(row):
    values = np.asarray(row[key], np.float64)
    return (f'{values.mean():.{digits}f}{joiner}'
            f'{values.std(ddof=ddof):.{digits}f}')

  return cell


def _cell(row, key, fmt):
  if callable(fmt):
    return fmt(row)
  value = row.get(key)
  if value is None or isinstance(value, str):
    return '-' if value is None else value
  return format(value, fmt)


def _plain(value):
  """`value` as JSON: numpy scalars and arrays as Python numbers and lists,
  non-finite floats as the strings 'nan', 'inf', '-inf'."""
  if isinstance(value, dict):
    return {str(k): _plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  if hasattr(value, 'tolist'):  # numpy
    return _plain(value.tolist())
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def header(argv: Sequence[str], started: float) -> Dict[str, Any]:
  """The run's command, start date (UTC), seconds, load average, cores."""
  python = os.path.relpath(sys.executable, ROOT)
  python = sys.executable if python.startswith('..') else python
  script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
  return dict(command=shlex.join([python, script] + list(argv)),
              date=datetime.datetime.fromtimestamp(
                  started,
                  datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
              seconds=round(time.time() - started, 1),
              load=[round(x, 2) for x in os.getloadavg()],
              cores=os.cpu_count())


def header_line(info: Dict[str, Any]) -> str:
  load = ' '.join(f'{x:.2f}' for x in info['load'])
  return (f'# {info["command"]} | {info["date"]} | {info["seconds"]:.0f} s | '
          f'load {load} | {info["cores"]} cores')


class _Formatter(argparse.RawDescriptionHelpFormatter,
                 argparse.ArgumentDefaultsHelpFormatter):
  """The docstring as written, and each option's default after its help
  (not for switches and options without a default)."""

  def _get_help_string(self, action):
    if action.default is None or isinstance(action.default, bool):
      return action.help
    return super()._get_help_string(action)


def parser_for(run: Callable, description: str,
               args: Dict[str, Union[str, Arg]]) -> argparse.ArgumentParser:
  """argparse for `run`: one option per parameter, declared in `args`."""
  params = inspect.signature(run).parameters
  if set(params) != set(args) or 'json' in params:
    raise TypeError(f'declare exactly the parameters of {run.__name__}: '
                    f'missing {sorted(set(params) - set(args))}, unknown '
                    f'{sorted(set(args) - set(params))} (json is the '
                    "harness's)")
  parser = argparse.ArgumentParser(description=description,
                                   formatter_class=_Formatter)
  for name, param in params.items():
    spec = args[name] if isinstance(args[name], Arg) else Arg(args[name])
    options = dict(spec.options)
    flags = options.pop('flags', ('--' + name.replace('_', '-'),))
    default = param.default
    if default is inspect.Parameter.empty:
      options['required'] = True
    elif isinstance(default, bool):  # a switch; True: --no-name turns it off
      if default:
        flags = ('--no-' + name.replace('_', '-'),)
      options.setdefault('action', 'store_false' if default else 'store_true')
    elif 'action' not in options:
      if isinstance(default, tuple):  # one or more values
        options.setdefault('nargs', '+' if default else '*')
        if default:
          options.setdefault('type', type(default[0]))
      elif default is not None:
        options.setdefault('type', type(default))
    if default is not inspect.Parameter.empty:
      options['default'] = default
    parser.add_argument(*flags, dest=name, help=spec.help, **options)
  parser.add_argument('--json',
                      metavar='FILE',
                      help='also write the header '
                      "line's fields and the tables' rows to FILE as JSON")
  return parser


def main(run: Callable,
         doc: str,
         tff: bool = False,
         argv=None,
         **args: Union[str, Arg]) -> Any:
  """Parses the command line into `run`'s parameters, runs it (in TFF's test
  context if `tff`), prints the header line and its tables, writes --json.

  Returns what `run` returned (for tests); exits 2 on a UsageError, 1 if a
  table failed its check.
  """
  parser = parser_for(run, doc, args)
  argv = sys.argv[1:] if argv is None else list(argv)
  params = vars(parser.parse_args(argv))
  json_path = params.pop('json')
  for name, param in inspect.signature(run).parameters.items():
    if isinstance(param.default, tuple) and isinstance(params[name], list):
      params[name] = tuple(params[name])  # the default's type, set or not
  started = time.time()
  try:
    if tff:
      processes.use_test_context()
    result = run(**params)
  except UsageError as e:
    parser.error(str(e))
  finally:
    processes.release_tff()
  tables = [] if result is None else (
      [result] if isinstance(result, Table) else list(result))
  info = header(argv, started)
  print('\n' + header_line(info))
  for table in tables:
    print('\n'.join([''] + table.lines()))
  if json_path:
    with open(json_path, 'w', encoding='utf-8') as f:
      json.dump(_plain(
          dict(info,
               parameters=params,
               tables=[
                   dict(title=t.title,
                        columns=[[k, h, f if isinstance(f, str) else None]
                                 for k, h, f in t.columns],
                        rows=t.rows,
                        notes=t.notes,
                        failed=t.failed)
                   for t in tables
               ])),
                f,
                indent=1)
      f.write('\n')
  if any(t.failed for t in tables):
    sys.exit(1)
  return result


time_rounds = _common.time_rounds  # rounds of a process, seconds of each


def cpu_seconds(pids: Sequence[int]) -> float:
  """User + system CPU seconds of the processes `pids` (/proc/pid/stat)."""
  total = 0.0
  for pid in pids:
    try:
      with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
        fields = f.read().rsplit(')', 1)[1].split()
      total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    except OSError:
      pass
  return total


@dataclasses.dataclass
class Timing:
  """Wall seconds, CPU seconds of this process and of the workers `pids()`
  lists, and whether that list changed (a crashed worker TFF restarted: the
  time is not the round's, and the dead worker's CPU is lost)."""
  wall: float = float('nan')
  cpu: float = float('nan')
  workers_cpu: float = float('nan')
  workers_changed: bool = False


@contextlib.contextmanager
def timed(pids: Callable[[], Sequence[int]] = processes.descendant_pids):
  """`with timed() as t: ...` then t.wall, t.cpu, t.workers_cpu."""
  timing = Timing()
  before = set(pids())
  worker0, cpu0, wall0 = cpu_seconds(before), time.process_time(), \
      time.perf_counter()
  yield timing
  timing.wall = time.perf_counter() - wall0
  timing.cpu = time.process_time() - cpu0
  after = set(pids())
  timing.workers_cpu = cpu_seconds(after) - worker0
  timing.workers_changed = after != before


def seconds_of(
    fn: Callable[[], Any],
    repeats: int,
    warmup: bool = True,
    summary: Callable[[List[float]], float] = statistics.median) -> float:
  """`summary` (median, or min) of the wall seconds of `repeats` calls of
  `fn`, after one untimed call (tracing, compilation) if `warmup`."""
  if warmup:
    fn()
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    seconds.append(time.perf_counter() - start)
  return summary(seconds)
