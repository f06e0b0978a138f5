"""What `tff-ddp quantiles` and `frequency` hand a person: files and a plot.

* `--output FILE`: the private estimates, one record each, as CSV (or JSON
  when FILE ends in `.json`), with what a reader needs to judge them: the
  noise (its scale or parameters), epsilon, delta and the adversary the
  epsilon holds against. Only what the protocol releases is written (the
  true values and errors computed in the clear stay in the terminal
  report); a run with a fixed noise seed is marked `private = false`.
* `--plot FILE`: a picture (matplotlib, any format it writes: .png, .pdf,
  .svg): the histogram of the values with each row's private quantiles, or
  each protocol's estimated frequencies with error bars of two noise
  standard deviations. The histogram and the true counts are drawn from
  your data in the clear, for you: do not publish the picture as a
  private release (the estimates alone are: `--output`).
* `wrap`: report lines fit a terminal (79 columns), long ones continue
  indented.
"""

import csv
import json
import math
import os
import textwrap
from typing import Dict, List, Sequence

from tff_ddp.cli import common

WIDTH = 79


def wrap(line: str, width: int = WIDTH) -> List[str]:
  """`line` as lines of at most `width` characters (continuations indented
  by 4 more than the line); a line that fits is returned as is."""
  if len(line) <= width:
    return [line]
  indent = len(line) - len(line.lstrip(' '))
  return textwrap.wrap(line,
                       width,
                       initial_indent='',
                       subsequent_indent=' ' * (indent + 4),
                       break_on_hyphens=False,
                       break_long_words=False)


def wrapping(print_fn):
  """`print_fn` that wraps each line (`wrap`)."""

  def print_wrapped(line: str):
    for part in wrap(line):
      print_fn(part)

  return print_wrapped


def check_path(path: str, flag: str) -> str:
  """A file the command can write (its folder exists), before anything
  runs."""
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise common.UserError(f'{flag} {path}: no folder {folder}')
  if os.path.isdir(path):
    raise common.UserError(f'{flag} {path}: is a directory')
  return path


def _json_value(value):
  if isinstance(value, float) and not math.isfinite(value):
    return repr(value)  # strict JSON: 'inf', 'nan'
  return value


def write_records(path: str, records: Sequence[Dict]) -> None:
  """The records as CSV (columns: the first record's keys) or, for a
  `.json` path, a JSON list."""
  if path.lower().endswith('.json'):
    with open(path, 'w', encoding='utf-8') as f:
      json.dump([{
          k: _json_value(v) for k, v in r.items()
      } for r in records],
                f,
                indent=1,
                allow_nan=False)
      f.write('\n')
    return
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)


def _pyplot():
  import matplotlib
  matplotlib.use('Agg')
  from matplotlib import pyplot
  return pyplot


def plot_quantiles(path: str, values, lower: float, upper: float, bins: int,
                   quantiles: Sequence[float], rows, title: str) -> None:
  """The histogram of `values` (in the clear) with each row's private
  quantile estimates as vertical lines."""
  import numpy as np
  plt = _pyplot()
  finite = np.clip(np.asarray(values, np.float64), lower, upper)
  finite = finite[~np.isnan(finite)]
  fig, ax = plt.subplots(figsize=(8, 4.5))
  ax.hist(finite,
          bins=bins,
          range=(lower, upper),
          color='0.85',
          edgecolor='0.6',
          label='your values (in the clear)')
  styles = ['-', '--', ':', '-.']
  for k, row in enumerate(rows):
    color = f'C{k % 10}'
    for j, estimate in enumerate(row.last_estimates):
      ax.axvline(estimate,
                 color=color,
                 linestyle=styles[k % len(styles)],
                 label=(f'{row.method} {row.mechanism} '
                        f'(eps {row.epsilon:.3g})' if j == 0 else None))
  ax.set_xlabel('value')
  ax.set_ylabel('clients')
  ax.set_title(title + '\nprivate quantiles ' +
               ' '.join(f'{p:g}' for p in quantiles),
               fontsize=9)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def plot_frequencies(path: str, items: Sequence[str], truth, estimates,
                     title: str) -> None:
  """Each protocol's estimates (`estimates`: name -> (vector, noise sd))
  with error bars of 2 sd, beside the true counts (in the clear)."""
  import numpy as np
  plt = _pyplot()
  shown = min(len(items), 50)
  order = np.argsort(-np.asarray(truth))[:shown]
  x = np.arange(shown)
  fig, ax = plt.subplots(figsize=(max(6, 0.25 * shown + 3), 4.5))
  width = 0.8 / max(1, len(estimates))
  for k, (name, (vector, sd)) in enumerate(estimates.items()):
    ax.bar(x + (k - (len(estimates) - 1) / 2) * width,
           np.asarray(vector)[order],
           width,
           yerr=2 * np.asarray(sd)[order],
           capsize=2,
           label=f'{name} (+-2 noise sd)')
  ax.plot(x,
          np.asarray(truth)[order],
          'k.',
          label='true counts (in the '
          'clear)')
  ax.set_xticks(x)
  ax.set_xticklabels([items[i] for i in order], rotation=90, fontsize=7)
  ax.set_ylabel('count')
  ax.set_title(title + (f'\n(the {shown} most frequent of {len(items)} '
                        'items)' if shown < len(items) else ''),
               fontsize=9)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
