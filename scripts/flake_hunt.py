"""Runs test modules many times and lists every test that failed even once.

A flake hunt (issue "A suite and tutorials that never fail by chance"):
each repetition is a separate `pytest` process (fresh interpreter, fresh
TFF workers, as a CI run has), its results read from pytest's JUnit XML.
No retries: a failure is recorded with its message and counted.

  python scripts/flake_hunt.py --repeat 20 [--run-slow] [--timeout 1800] \\
      [--log hunt.jsonl] PATH_OR_NODE_ID ...

Prints one line per repetition as it ends, then a table of the tests that
failed (failures / repetitions, first message) -- or says none did. Exit
status 1 if any repetition failed or timed out. With --log, appends one
JSON line per repetition (start time, seconds, counts, failures).
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from xml.etree import ElementTree

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from tff_ddp.utils import processes  # pylint: disable=wrong-import-position  # after the sys.path set-up


def _results(junit_path):
  """(counts, failures) from a JUnit XML file; failures map id -> message."""
  tree = ElementTree.parse(junit_path)
  counts = collections.Counter()
  failures = {}
  for case in tree.iter('testcase'):
    test_id = f'{case.get("classname")}::{case.get("name")}'
    outcome = 'passed'
    for child in case:
      if child.tag in ('failure', 'error'):
        outcome = 'failed'
        message = (child.get('message') or child.text or '').strip()
        failures[test_id] = message.splitlines()[0][:300] if message else ''
      elif child.tag == 'skipped':
        outcome = 'skipped'
    counts[outcome] += 1
  return counts, failures


def run_once(paths, run_slow, timeout, python):
  """One pytest process over `paths`; returns a dict describing the run."""
  with tempfile.TemporaryDirectory() as directory:
    junit = os.path.join(directory, 'junit.xml')
    argv = [
        python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
        f'--junitxml={junit}'
    ]
    if run_slow:
      argv.append('--run-slow')
    start = time.time()
    # pytest ends the TFF workers its tests start (conftest). On a timeout
    # pytest and everything below it are ended by pid while pytest is
    # still their ancestor (killing pytest first would orphan them).
    proc = subprocess.Popen(argv + list(paths),
                            cwd=_ROOT,
                            text=True,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
      stdout, _ = proc.communicate(timeout=timeout)
      returncode, tail = proc.returncode, stdout[-2000:]
    except subprocess.TimeoutExpired:
      processes.end_descendants()
      proc.communicate()
      returncode, tail = None, f'timed out after {timeout:g} s'
    seconds = time.time() - start
    if os.path.exists(junit):
      counts, failures = _results(junit)
    else:
      counts, failures = collections.Counter(), {}
  if returncode not in (0, None) and not failures:
    # A collection error or a crash of pytest itself.
    failures['<pytest>'] = tail.strip().splitlines()[-1] if tail else ''
  if returncode is None:
    failures['<timeout>'] = tail
  return dict(start=time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(start)),
              seconds=round(seconds, 1),
              returncode=returncode,
              counts=dict(counts),
              failures=failures)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('paths',
                      nargs='+',
                      help='test files, directories or node ids')
  parser.add_argument('--repeat', type=int, default=10)
  parser.add_argument('--run-slow', action='store_true')
  parser.add_argument('--timeout',
                      type=float,
                      default=1800.0,
                      help='seconds per repetition')
  parser.add_argument('--log', help='append one JSON line per repetition')
  parser.add_argument('--python', default=sys.executable)
  args = parser.parse_args()
  if args.repeat < 1:
    parser.error('--repeat must be at least 1')

  failed = collections.Counter()
  first_message = {}
  for i in range(1, args.repeat + 1):
    run = run_once(args.paths, args.run_slow, args.timeout, args.python)
    run['repetition'] = i
    counts = run['counts']
    print(f'run {i}/{args.repeat}: {counts.get("passed", 0)} passed, '
          f'{counts.get("failed", 0)} failed, {counts.get("skipped", 0)} '
          f'skipped, {run["seconds"]:.0f} s' +
          (f'; FAILED: {", ".join(sorted(run["failures"]))}'
           if run['failures'] else ''),
          flush=True)
    for test_id, message in run['failures'].items():
      failed[test_id] += 1
      first_message.setdefault(test_id, message)
    if args.log:
      with open(args.log, 'a', encoding='utf-8') as f:
        f.write(
            json.dumps(dict(run, paths=args.paths, run_slow=args.run_slow)) +
            '\n')

  print(f'\n{args.repeat} repetitions of {" ".join(args.paths)}'
        f'{" (slow included)" if args.run_slow else ""}')
  if not failed:
    print('no test failed')
    return 0
  print('tests that failed at least once (failures / repetitions, first '
        'message):')
  for test_id, count in failed.most_common():
    print(f'  {count}/{args.repeat}  {test_id}\n      {first_message[test_id]}')
  return 1


if __name__ == '__main__':
  sys.exit(main())
