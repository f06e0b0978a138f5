"""Shared helpers of the benchmark scripts (timing and process clean-up)."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

# Every benchmark ends the TFF workers it started and drops TFF's contexts
# when it exits, however it exits (no orphaned worker_binary, no TFF
# ServiceManager traceback at interpreter shutdown).
from tff_ddp.utils import processes as _processes  # pylint: disable=wrong-import-position  # after the sys.path set-up

_processes.end_workers_at_exit()
# 10^5-client calls overflow worker_binary's default 8 MiB thread stacks.
_processes.raise_worker_stack_limit()


def time_rounds(process, client_data, rounds):
  """Runs `rounds` rounds; returns (results, seconds of each round)."""
  state = process.initialize()
  results, seconds = [], []
  for _ in range(rounds):
    start = time.perf_counter()
    output = process.next(state, client_data)
    seconds.append(time.perf_counter() - start)
    state = output.state
    results.append(output.result)
  return results, seconds


def end_workers():
  _processes.release_tff()
