"""A user's own data at their scale (issue 43 item 5): the CLI on 10^6 rows.

Each case runs `tff-ddp` as a subprocess on seeded files written to a
temporary directory and samples the resident memory of its whole process
tree (the command and any TFF worker_binary) every 0.25 s from /proc; the
table gives wall seconds, CPU seconds (the tree's, from wait4: workers are
its children) and that peak.

  quantiles  `quantiles --values` on --rows values (one client each,
             10 * Beta(2, 5)), the default six distributed rows and three
             central ones (--engine auto: batched above 10^4 clients).
  frequency  `frequency --items` on --rows lines `client_id,item`
             (--rows / 10 clients, items of a 100-item domain drawn with
             probability ~ 1 / rank), default protocols, --max-items 40.
  round_1e5  the 10^5-client round of workers_bench.py (flat, DDG, 64
             bins, epsilon 1) through the CLI's TFF process (--engine tff):
             the per-client path the batched rounds replace.

A case still running after --timeout seconds is ended (its tree, by pid)
and reported as not finished. Targets: <= 180 s and <= 3 GiB each.

  python benchmarks/user_data_scale.py [--rows 1000000] [--timeout 900]
      [--cases quantiles,frequency,round_1e5]
"""

import os
import resource
import subprocess
import sys
import tempfile
import time

import _harness as harness  # (sets sys.path)
import numpy as np

ROWS = 10**6
TARGET_SECONDS = 180.0
TARGET_GIB = 3.0


def _write_values(path, rows):
  values = 10.0 * np.random.default_rng(43).beta(2.0, 5.0, rows)
  with open(path, 'w', encoding='utf-8') as f:
    f.write('client_id,value\n')
    f.writelines(f'c{i},{v:.4f}\n' for i, v in enumerate(values))


def _write_items(items_path, domain_path, rows, dim=100):
  rng = np.random.default_rng(44)
  domain = [f'item{j:03d}' for j in range(dim)]
  with open(domain_path, 'w', encoding='utf-8') as f:
    f.writelines(item + '\n' for item in domain)
  p = 1.0 / np.arange(1, dim + 1)
  owners = np.sort(rng.integers(0, max(rows // 10, 1), rows))
  items = rng.choice(dim, rows, p=p / p.sum())
  with open(items_path, 'w', encoding='utf-8') as f:
    f.write('client_id,item\n')
    f.writelines(f'u{o},{domain[j]}\n' for o, j in zip(owners, items))


def _tree(root):
  children = {}
  for name in os.listdir('/proc'):
    if not name.isdigit():
      continue
    try:
      with open(f'/proc/{name}/stat', encoding='utf-8') as f:
        parent = int(f.read().rsplit(')', 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
      continue
    children.setdefault(parent, []).append(int(name))
  pids, todo = [], [root]
  while todo:
    pid = todo.pop()
    pids.append(pid)
    todo += children.get(pid, [])
  return pids


def _rss(pid):
  try:
    with open(f'/proc/{pid}/status', encoding='utf-8') as f:
      for line in f:
        if line.startswith('VmRSS:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return 0


def measure(argv, timeout):
  """(wall s, CPU s, peak RSS bytes of the tree, finished, stderr tail)."""
  start = time.monotonic()
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  with tempfile.TemporaryFile() as err:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    peak, finished = 0, True
    while proc.poll() is None:
      pids = _tree(proc.pid)
      peak = max(peak, sum(_rss(pid) for pid in pids))
      if time.monotonic() - start > timeout:
        finished = False
        for pid in reversed(pids):  # the workers first, then the command
          try:
            os.kill(pid, 15)
          except OSError:
            pass
        proc.wait()
        break
      time.sleep(0.25)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    err.seek(0)
    tail = err.read().decode(errors='replace').strip().splitlines()[-1:]
  cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  finished = finished and proc.returncode == 0
  return wall, cpu, peak, finished, (tail or [''])[0]


def run(rows=ROWS,
        timeout=900.0,
        cases=('quantiles', 'frequency', 'round_1e5')):
  """One row per case: wall, CPU, the tree's peak memory."""
  cli = [sys.executable, '-m', 'tff_ddp.cli']
  table = harness.Table(
      [('case', 'case', 's'), ('rows', 'rows', 'd'), ('wall', 'wall s', '.1f'),
       ('cpu', 'CPU s', '.1f'), ('peak_gib', 'peak RSS GiB (tree)', '.2f'),
       ('status', 'status', 's')],
      title=f'tff-ddp on a user\'s files, {os.cpu_count()} cpus visible; '
      f'targets <= {TARGET_SECONDS:.0f} s and <= {TARGET_GIB:g} GiB')
  with tempfile.TemporaryDirectory() as tmp:
    values = os.path.join(tmp, 'values.csv')
    items = os.path.join(tmp, 'items.csv')
    domain = os.path.join(tmp, 'domain.csv')
    argvs = {}
    if 'quantiles' in cases:
      _write_values(values, rows)
      argvs['quantiles'] = (rows, cli +
                            ['quantiles', '--values', values, '--upper', '10'])
    if 'frequency' in cases:
      _write_items(items, domain, rows)
      argvs['frequency'] = (rows, cli + [
          'frequency', '--items', items, '--domain', domain, '--max-items', '40'
      ])
    if 'round_1e5' in cases:
      argvs['round_1e5'] = (10**5, cli + [
          'quantiles', '--clients', '100000', '--methods', 'flat',
          '--mechanisms', 'discrete_gaussian', '--bins', '64', '--repetitions',
          '1', '--engine', 'tff'
      ])
    for case, (size, argv) in argvs.items():
      wall, cpu, peak, finished, tail = measure(argv, timeout)
      gib = peak / 2**30
      met = finished and wall <= TARGET_SECONDS and gib <= TARGET_GIB
      status = ('met' if met else 'not met') if finished else (
          f'not finished in {timeout:.0f} s')
      if not finished and tail:
        status += f' ({tail[:60]})'
      table.add(case=case,
                rows=size,
                wall=wall,
                cpu=cpu,
                peak_gib=gib,
                status=status if case != 'round_1e5' else
                ('finished' if finished else status))
      print(
          f'{case}: {wall:.1f} s wall, {cpu:.1f} s CPU, {gib:.2f} GiB, '
          f'{status}',
          flush=True)
  return table


def _names(text):
  return tuple(n for n in text.split(',') if n)


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               rows='rows of each file (values; item lines)',
               timeout='seconds before a case is ended and reported unfinished',
               cases=harness.arg(
                   'comma-separated, of quantiles,frequency,round_1e5',
                   type=_names,
                   nargs=None))
