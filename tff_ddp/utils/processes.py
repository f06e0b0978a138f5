"""Ending the TFF worker processes that this Python process started.

Executing a TFF computation in the C++ test context starts `worker_binary`
subprocesses that outlive Python and keep the parent's stdout/stderr open, so
`pytest | tail` or a CI script would wait for ever. We end exactly the
descendants of the current process, found by process id through /proc, never
by name (other runs on the same machine are left alone).
"""

import os
import signal
import time
from typing import List


def _children_map() -> dict:
  children = {}
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat', 'rb') as f:
        stat = f.read().decode('utf-8', 'replace')
    except OSError:
      continue
    # The command name is in parentheses and may contain spaces.
    fields = stat[stat.rfind(')') + 2:].split()
    ppid = int(fields[1])
    children.setdefault(ppid, []).append(int(entry))
  return children


def descendant_pids(pid: int = None) -> List[int]:
  """Process ids of all living descendants of `pid` (default: this process)."""
  if pid is None:
    pid = os.getpid()
  if not os.path.isdir('/proc'):
    return []
  children = _children_map()
  found, stack = [], [pid]
  while stack:
    for child in children.get(stack.pop(), []):
      found.append(child)
      stack.append(child)
  return found


def end_descendants(timeout: float = 5.0) -> List[int]:
  """Terminates (then kills) every descendant of this process; returns pids."""
  pids = descendant_pids()
  for pid in pids:
    try:
      os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
      pass
  deadline = time.monotonic() + timeout
  alive = list(pids)
  while alive and time.monotonic() < deadline:
    for pid in list(alive):
      try:
        # Reap our own children so they do not linger as zombies.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
          alive.remove(pid)
          continue
      except ChildProcessError:
        pass
      if not os.path.exists(f'/proc/{pid}'):
        alive.remove(pid)
    time.sleep(0.05)
  for pid in alive:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  return pids
