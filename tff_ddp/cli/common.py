"""What every `tff-ddp` command shares: quiet start, one-line errors, clean end.

* Quiet: TensorFlow's C++ start-up lines (cuDNN/cuFFT/cuBLAS registration,
  TensorRT, CPU features) are errors and warnings of its logger; unless the
  user set TF_CPP_MIN_LOG_LEVEL, the commands set it to 3 before TensorFlow
  is imported, and absl's Python logging to errors.
* User errors -- a bad flag value, or a configuration the library refuses
  (its TypeError / ValueError) -- print one line `tff-ddp <command>: error:
  <message>` and exit with status 2, also when TFF has already started.
* Every TFF worker process the command started is ended by process id, and
  TFF's execution context is released before the interpreter shuts down, so
  no `ServiceManager.__del__` traceback appears at exit.
"""

import argparse
import copy
import os
import signal
import sys
import time
from typing import Callable, Optional

from tff_ddp.utils import checks
from tff_ddp.utils import requires

# Before TensorFlow is imported anywhere in this process.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')


class UserError(Exception):
  """A problem with what the user asked for: one line, exit status 2."""


class Parser(argparse.ArgumentParser):
  """argparse with one-line errors and every default in --help."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault('formatter_class', HelpFormatter)
    super().__init__(*args, **kwargs)

  def error(self, message):
    sys.stderr.write(f'{self.prog}: error: {message}\n')
    sys.exit(2)


class HelpFormatter(argparse.RawDescriptionHelpFormatter,
                    argparse.ArgumentDefaultsHelpFormatter):
  """Keeps the description's line breaks and shows every default.

  argparse's ArgumentDefaultsHelpFormatter shows a default only for options
  with a help text; here every option shows it (`(required)` for required
  ones), unless its help already says its default in words.
  """

  def _format_action(self, action):
    if not action.help:  # None or '': argparse would print no help line
      action = copy.copy(action)
      action.help = ('(required)'
                     if action.required else '(default: %(default)s)')
    return super()._format_action(action)

  def _get_help_string(self, action):
    text = action.help or ''
    if '(default:' in text or '(required)' in text:
      return text
    if action.required:
      return f'{text} (required)'
    return super()._get_help_string(action)


def converter(check: Callable, name: str, cast: Callable = float):
  """An argparse `type=` that parses with `cast` then applies a
  `tff_ddp.utils.checks` function, turning its errors into argparse's."""

  def convert(text: str):
    try:
      value = cast(text)
    except ValueError:
      raise argparse.ArgumentTypeError(
          f'{name} must be {"an integer" if cast is int else "a number"}, '
          f'got {text!r}') from None
    try:
      return check(value, name)
    except (TypeError, ValueError) as e:
      raise argparse.ArgumentTypeError(str(e).rstrip('.')) from None

  convert.__name__ = name
  return convert


def integer(name: str, low: int, high: Optional[int] = None):
  """`type=` for an integer option in [low, high] (no upper bound: None)."""
  return converter(lambda v, n: checks.integer(v, n, low, high), name, int)


def positive(name: str):
  """`type=` for a number > 0."""
  return converter(checks.positive, name)


def finite(name: str):
  """`type=` for any finite number."""
  return converter(checks.real, name)


def probability_open(name: str):
  """`type=` for a number in (0, 1), e.g. --delta."""
  return converter(lambda v, n: checks.real(v, n, 0.0, 1.0, True, True), name)


DELTA_HELP = ('delta (default: min(1e-5, N^-1.1), well below 1/N for the N '
              'users of the run; a larger one is warned about)')


def resolve_delta(delta: Optional[float], population: int,
                  print_fn: Callable[[str], None]) -> float:
  """--delta, or the default min(1e-5, N^-1.1) for N users
  (`tff_ddp.utils.deltas`); a given delta not well below 1/N is kept
  with a `warning:` line."""
  from tff_ddp.utils import deltas
  if delta is None:
    return deltas.default_delta(population)
  text = deltas.delta_warning(delta, population)
  if text:
    print_fn(f'warning: {text}')
  return delta


def quiet_python_logging():
  try:
    from absl import logging
    logging.set_verbosity(logging.ERROR)
  except ImportError:
    pass
  # TensorFlow's Python warnings (e.g. "triggered tf.function retracing"
  # of the batched rounds' samplers, one trace per power by design).
  import logging as python_logging
  python_logging.getLogger('tensorflow').setLevel(python_logging.ERROR)


def run(command: str, function: Callable[[], Optional[int]]) -> int:
  """Runs a command body; user errors become one line and status 2."""
  quiet_python_logging()
  from tff_ddp.utils import processes
  processes.raise_worker_stack_limit()  # before TFF starts its worker
  # SIGTERM / SIGHUP (timeout, kill, a closed terminal) end the workers,
  # then the command; SIGINT is KeyboardInterrupt, below.
  processes.end_run_on_signals(lambda signum: sys.stderr.write(
      f'tff-ddp {command}: {signal.Signals(signum).name}: ended its TFF '
      'workers\n'))
  try:
    return int(function() or 0)
  except (UserError, TypeError, ValueError, requires.MissingTffError) as e:
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    sys.stderr.write(f'tff-ddp {command}: error: {message}\n')
    return 2
  except KeyboardInterrupt:
    sys.stderr.write(f'tff-ddp {command}: interrupted\n')
    return 130
  finally:
    processes.release_tff()


def progress(iterable, description: str, total: Optional[int] = None):
  """A tqdm progress bar on stderr when it is a terminal (else silent)."""
  from tqdm import auto
  return auto.tqdm(iterable,
                   desc=description,
                   total=total,
                   disable=None,
                   leave=False,
                   file=sys.stderr)


class ProgressLines:
  """Progress of a long run as lines on stderr: `tff-ddp <command>: <what>:
  <done> of <total> clients, <s> s`, at most one every `every` seconds
  and none in the first `every` seconds (a short run prints nothing); a
  step's last call (done == total) prints if the step printed a line."""

  def __init__(self,
               command: str,
               every: float = 5.0,
               stream=None,
               clock: Callable[[], float] = time.monotonic):
    self.command = command
    self.every = every
    self.stream = stream
    self.clock = clock
    self.start = clock()
    self.last = self.start
    self.open = None  # the step whose last line is still to come

  def __call__(self, what: str, done: int, total: int):
    now = self.clock()
    finished = done >= total and self.open == what
    if now - self.last < self.every and not finished:
      return
    self.last = now
    self.open = None if done >= total else what
    stream = self.stream or sys.stderr
    stream.write(f'tff-ddp {self.command}: {what}: {done:,} of {total:,} '
                 f'clients, {now - self.start:.0f} s\n')
    stream.flush()
