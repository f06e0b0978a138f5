"""Bad inputs per public entry point: how each is answered.

Runs, for every entry point of the fuzz tests (tff_ddp_tests/fuzz), the same
derandomized hypothesis cases as the default test suite (or `--factor` times
as many, the slow suite's 10 by default off) and the hand-written cases of
the issue, and classifies each call (tff_ddp_tests/fuzz/strategies.py):

  clear error   TypeError / ValueError naming an argument
  documented    a result the entry point's reference check accepts
  unclear       another exception, or a message naming no argument
  hang          over the entry point's time budget
  memory        peak RSS grew by more than 1 GiB during the call
  silent wrong  a result the reference check rejects

Usage:
  PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python benchmarks/bad_inputs.py
"""

import argparse
import collections
import time

from tff_ddp_tests.fuzz import fuzz_accounting_test
from tff_ddp_tests.fuzz import fuzz_aggregators_test
from tff_ddp_tests.fuzz import fuzz_analytics_test
from tff_ddp_tests.fuzz import fuzz_cli_test
from tff_ddp_tests.fuzz import fuzz_encoders_test
from tff_ddp_tests.fuzz import fuzz_frequency_test
from tff_ddp_tests.fuzz import fuzz_learning_test
from tff_ddp_tests.fuzz import fuzz_mechanisms_test
from tff_ddp_tests.fuzz import fuzz_utils_test
from tff_ddp_tests.fuzz import strategies as fz

MODULES = (fuzz_mechanisms_test, fuzz_encoders_test, fuzz_accounting_test,
           fuzz_aggregators_test, fuzz_analytics_test, fuzz_frequency_test,
           fuzz_learning_test, fuzz_cli_test, fuzz_utils_test)
COLUMNS = ('clear_error', 'documented', 'unclear_error', 'hang', 'memory',
           'silent_wrong')
HEADERS = ('clear error', 'documented', 'unclear', 'hang', 'memory',
           'silent wrong')


def classify_entry(entry, factor):
  counts = collections.Counter()
  problems = []

  def record(kwargs, outcome, source):
    counts[outcome.kind] += 1
    counts[source] += 1
    if outcome.kind not in fz.ACCEPTED:
      problems.append(f'{entry.name} [{source}] {kwargs!r:.200}: {outcome}')

  fz.run_generated(entry, lambda kw, o: record(kw, o, 'generated'),
                   max_examples=entry.max_examples * factor)
  for _, kwargs, _ in entry.examples:
    kwargs = fz.example_kwargs(entry, kwargs)
    record(kwargs, fz.classify(entry, kwargs), 'hand-written')
  return counts, problems


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--factor', type=int, default=1,
                      help='generated cases: this many times the suite\'s')
  args = parser.parse_args()
  rows, problems, total = [], [], collections.Counter()
  start = time.perf_counter()
  for module in MODULES:
    for entry in module.ENTRY_POINTS:
      counts, found = classify_entry(entry, args.factor)
      rows.append((entry.name, counts))
      problems += found
      total.update(counts)
  width = max(len(name) for name, _ in rows + [('total', None)])
  header = (f'{"entry point":{width}s} {"gen":>5s} {"hand":>5s} '
            + ' '.join(f'{h:>12s}' for h in HEADERS))
  print(header)
  print('-' * len(header))
  for name, counts in rows + [('total', total)]:
    print(f'{name:{width}s} {counts["generated"]:5d} '
          f'{counts["hand-written"]:5d} '
          + ' '.join(f'{counts[c]:12d}' for c in COLUMNS))
  print(f'\n{len(rows)} entry points, {total["generated"]} generated and '
        f'{total["hand-written"]} hand-written inputs, '
        f'{time.perf_counter() - start:.0f} s')
  for line in problems:
    print(line)
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
  processes.release_tff()
  return 1 if problems else 0


if __name__ == '__main__':
  raise SystemExit(main())
