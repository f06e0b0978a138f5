"""Shared machinery of the fuzz tests: the hypothesis profile, the value
strategies, the entry-point description and the outcome classifier.

Every `<area>_entry_points` module lists its area's public entry points as
`EntryPoint`s (its fuzz_<area>_test.py makes them tests): a callable, a
valid baseline call, and a reference check of what a call may return. The
generated cases replace one or two arguments of the baseline by values of
`any_value()` (numbers across the whole float64 range with NaN, +-inf,
subnormals and +-0, huge and negative ints, bools, numpy scalars, 0-d and
1-d arrays, strings, None, lists, dicts, ...) or by the entry point's own
near-valid hints. Each call is classified (`classify`) as

* 'clear_error': a TypeError / ValueError whose message names an argument;
* 'documented': a result the reference check accepts;
* 'unclear_error': any other exception, or a message naming no argument;
* 'hang': the call used more than its time budget (`EntryPoint.budget`)
  of this process's CPU seconds, or waited (no CPU) for more than
  `WALL_FACTOR` budgets of wall time (both also enforced with an interval
  timer, for pure-Python loops);
* 'memory': the process's peak resident memory grew by more than
  `MEMORY_BUDGET` during the call (generated containers hold at most a few
  elements, so only an argument used as a size -- a huge int -- can make
  memory grow: the library must refuse it before allocating);
* 'silent_wrong': a result the reference check rejects.

The first two are accepted; the tests fail on the others, and
`bad_inputs.py` counts them per entry point with the same
strategies and the same (derandomized) cases.

The profile (`PROFILE`) is derandomized, keeps no example database and uses
a fixed number of examples per entry point, so CI tries the same inputs on
every run; `PROFILE_SLOW` tries ten times as many (the slow test classes).
"""

import dataclasses
import math
import re
import resource
import signal
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

PROFILE = 'tff_ddp_fuzz'
PROFILE_SLOW = 'tff_ddp_fuzz_slow'
# Generated cases per entry point in the default suite (an entry point can
# ask for fewer when each call is expensive).
MAX_EXAMPLES = 25
SLOW_FACTOR = 10
# Per call, in CPU seconds of this process (all its threads); generous next
# to the typical ms. CPU, not wall: the suite runs on both cores at once and
# beside other work, and contention stretches wall time without the code
# being any slower (a wall-clock budget failed CI that way, see
# CPBM_CALIBRATION_BUDGET); the CPU a call uses does not grow with the load.
TIME_BUDGET = 5.0
# A call that waits without using CPU (a deadlock, a sleep) is a hang once
# this many budgets of wall time have passed: far beyond any slowdown
# contention causes (a 2-core machine at load 12 stretches a call ~6x).
WALL_FACTOR = 20
# Per call of an entry point that calibrates cPBM (calibrated.poisson_binomial,
# frequency_parameters, quantile_parameters with cPBM). The l2-aware
# accountant needs kappa_alpha (`pbm_rdp.kappa`) at every theta grid point
# the calibration visits, each certified over a grid of shifts and then
# cached for the process: a cold call visits ~8 points at ~4-6 s each.
# Measured: frequency_parameters('fixed', 8, 100, 2.0, 1e-9, clip=1.0) takes
# 30.5 s of CPU cold (48.7 s wall with two other jobs on the 2 cores) and
# 0.44 s warm; in a fresh-clone suite beside other jobs its first call took
# 24.1 s, over the 20 s it had, and Hypothesis reported the slow first call
# that the warm rerun did not repeat as a FlakyFailure. 90 s is ~3x the cold
# CPU cost: a hang, or a regression beyond 3x, is still reported.
CPBM_CALIBRATION_BUDGET = 90.0
# Per call of an entry point that calibrates with the tightest accountant
# (the privacy loss distribution beside RDP): the PLD's grid grows as the
# noise shrinks. Measured alone: central_noise_multiplier(1000, 1e-5) 3.1 s
# of CPU, (122, 1e-5) 0.47 s; in a full-suite worker the same call was
# charged 5.5 s (the process's other threads count too). 20 s is ~6x the
# worst measured call and 2x the 10 s a calibration is allowed.
CALIBRATION_BUDGET = 20.0
MEMORY_BUDGET = 1 << 30  # bytes of peak-RSS growth during one call

hypothesis.settings.register_profile(
    PROFILE,
    derandomize=True,
    database=None,
    max_examples=MAX_EXAMPLES,
    deadline=None,  # wall clock: `classify` times calls by CPU instead
    print_blob=True,
    report_multiple_bugs=False,
    suppress_health_check=list(hypothesis.HealthCheck),
)
hypothesis.settings.register_profile(
    PROFILE_SLOW,
    parent=hypothesis.settings.get_profile(PROFILE),
    max_examples=MAX_EXAMPLES * SLOW_FACTOR)

ACCEPTED = ('clear_error', 'documented')
KINDS = ('clear_error', 'documented', 'unclear_error', 'hang', 'memory',
         'silent_wrong')

# ----------------------------------------------------------------------------
# Value strategies.

SPECIAL_FLOATS = (math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, -5e-324,
                  2.2250738585072014e-308, 1e-300, 1e-30, 1e-12, 0.5, 1.0, 2.5,
                  -1.0, 1e9, 1e30, 1e200, 1e300, 1.7976931348623157e308, -1e300)
SPECIAL_INTS = (0, 1, -1, 2, 3, 2**20, 2**30, 2**31 - 1, 2**31, 2**53 + 1,
                2**63 - 1, 2**63, 2**64, -2**63, 10**9, 10**12, 10**30)


def floats() -> st.SearchStrategy:
  """Python floats over the whole float64 range, specials first."""
  return st.one_of(
      st.sampled_from(SPECIAL_FLOATS),
      st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))


def ints() -> st.SearchStrategy:
  """Python ints: small, negative, around int32/int64 limits, huge."""
  return st.one_of(st.sampled_from(SPECIAL_INTS), st.integers(-10, 100),
                   st.integers(-2**70, 2**70))


def numpy_scalars() -> st.SearchStrategy:
  return st.one_of(
      floats().map(np.float64),
      st.floats(width=32,
                allow_nan=True,
                allow_infinity=True,
                allow_subnormal=True).map(np.float32),
      st.floats(width=16, allow_nan=True, allow_infinity=True).map(np.float16),
      st.integers(-2**63, 2**63 - 1).map(np.int64),
      st.integers(-2**31, 2**31 - 1).map(np.int32),
      st.integers(0, 255).map(np.uint8),
      st.booleans().map(np.bool_),
  )


def scalars() -> st.SearchStrategy:
  return st.one_of(floats(), ints(), st.booleans(), numpy_scalars())


def arrays() -> st.SearchStrategy:
  """0-d and small 1-d numpy arrays of numbers."""
  return st.one_of(
      scalars().map(np.array),
      st.lists(st.one_of(floats(), st.integers(-2**63, 2**63 - 1)),
               min_size=0,
               max_size=4).map(np.array),
  )


def junk() -> st.SearchStrategy:
  """Things that are not numbers at all."""
  return st.one_of(st.none(), st.text(max_size=8), st.binary(max_size=4),
                   st.complex_numbers(max_magnitude=1e10), st.just(object()),
                   st.just(float), st.just(np.float32), st.just(print),
                   st.sampled_from(['1.0', 'nan', '', 'inf', 'none']))


def structures() -> st.SearchStrategy:
  leaf = st.one_of(scalars(), junk())
  return st.one_of(st.lists(leaf, max_size=4), st.tuples(leaf, leaf),
                   st.dictionaries(st.text(max_size=4), leaf, max_size=3),
                   st.sets(st.integers(-3, 3), max_size=3))


def any_value() -> st.SearchStrategy:
  """Every kind of wrong (and some right) argument value."""
  return st.one_of(scalars(), arrays(), junk(), structures())


def seeds() -> st.SearchStrategy:
  """Sampler seeds: mostly pairs (of ints, floats, junk), or anything."""
  return st.one_of(
      st.tuples(ints(), ints()).map(list),
      st.tuples(floats(), floats()).map(list), st.lists(ints(), max_size=4),
      any_value())


def shapes() -> st.SearchStrategy:
  """Output shapes: short lists of small, negative, float or huge dims."""
  dim = st.one_of(st.integers(0, 4),
                  st.integers(0, 4).map(np.int64), ints(), floats(),
                  st.booleans())
  return st.one_of(st.lists(dim, max_size=3), st.tuples(dim), any_value())


# ----------------------------------------------------------------------------
# Entry points and cases.


@dataclasses.dataclass(repr=False)
class EntryPoint:
  """A public callable with a valid baseline call and a reference check.

  Attributes:
    name: the table row, e.g. 'mechanisms.ddg.compute_parameters'.
    call: called as call(**kwargs).
    baseline: a valid call's keyword arguments.
    check: (kwargs, result) -> None if the result is right, else the reason.
    hints: per-argument strategies of near-valid values, mixed with
      `any_value()` when that argument is fuzzed.
    fuzzed: the arguments the cases replace (default: the baseline's).
    names: strings of which an error message must contain one (default:
      the baseline's argument names).
    examples: hand-written cases, (label, kwargs, expected kind or None).
    slow_examples: hand-written cases that cost more than the fast suite's
      ~5 s (a cold certified calibration), run by the slow class.
    max_examples: generated cases in the default suite.
    budget: CPU seconds per call (see TIME_BUDGET).
    wait_budget: wall seconds after which a call is a hang whatever CPU it
      used (a call that waits); default WALL_FACTOR * budget.
    cases: a strategy of kwargs replacing the default one.
    error_types: the documented error types (TypeError, ValueError; the
      accountant adds dp-accounting's UnsupportedEventError).
    junk: mix `any_value()` into the hints (False for internal helpers
      that take tensors: only the hints' values).
  """

  name: str
  call: Callable[..., Any]
  baseline: Dict[str, Any]
  check: Callable[[Dict[str, Any], Any], Optional[str]]
  hints: Dict[str, st.SearchStrategy] = dataclasses.field(default_factory=dict)
  fuzzed: Optional[Sequence[str]] = None
  names: Optional[Sequence[str]] = None
  examples: List[Tuple[str, Dict[str, Any],
                       Optional[str]]] = (dataclasses.field(
                           default_factory=list))
  slow_examples: List[Tuple[str, Dict[str, Any],
                            Optional[str]]] = (dataclasses.field(
                                default_factory=list))
  max_examples: int = MAX_EXAMPLES
  budget: float = TIME_BUDGET
  wait_budget: Optional[float] = None
  cases: Optional[st.SearchStrategy] = None
  error_types: Tuple[type, ...] = (TypeError, ValueError)
  junk: bool = True

  def __repr__(self):
    return f'EntryPoint({self.name})'

  @property
  def test_name(self) -> str:
    return re.sub(r'\W', '_', self.name)

  @property
  def wall_limit(self) -> float:
    if self.wait_budget is not None:
      return self.wait_budget
    return WALL_FACTOR * self.budget

  def argument_names(self) -> Sequence[str]:
    if self.names is not None:
      return self.names
    return tuple(self.baseline) + tuple(self.hints)


@st.composite
def _mutations(draw, entry: EntryPoint):
  kwargs = dict(entry.baseline)
  names = list(entry.fuzzed if entry.fuzzed is not None else sorted(
      set(entry.baseline) | set(entry.hints)))
  count = draw(st.integers(1, min(2, len(names))))
  chosen = draw(
      st.lists(st.sampled_from(names), min_size=1, max_size=count, unique=True))
  for name in chosen:
    hint = entry.hints.get(name)
    if hint is None:
      values = any_value()
    else:
      values = st.one_of(hint, any_value()) if entry.junk else hint
    kwargs[name] = draw(values)
  return kwargs


def case_strategy(entry: EntryPoint) -> st.SearchStrategy:
  return entry.cases if entry.cases is not None else _mutations(entry)


# ----------------------------------------------------------------------------
# Outcomes.


@dataclasses.dataclass
class Outcome:
  kind: str
  detail: str
  seconds: float

  def __str__(self):
    return f'{self.kind} after {self.seconds:.2f} s: {self.detail}'


class _Timeout(BaseException):
  """Raised by the interval timers; a BaseException so library code cannot
  catch it."""


def _alarm(signum, frame):
  del signum, frame
  raise _Timeout()


def _peak_rss_bytes() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def names_argument(message: str, names: Sequence[str]) -> bool:
  """Whether `message` contains one of `names` as a whole word."""
  return any(
      re.search(rf'(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])', message)
      for name in names)


def classify(entry: EntryPoint, kwargs: Dict[str, Any]) -> Outcome:
  """Calls entry.call(**kwargs) within the budgets; classifies the outcome."""
  names = entry.argument_names()
  rss = _peak_rss_bytes()
  previous = (signal.signal(signal.SIGPROF,
                            _alarm), signal.signal(signal.SIGALRM, _alarm))
  # The timers stop pure-Python loops; a TF kernel returns first. The CPU
  # timer (ITIMER_PROF: this process's user+sys time) at twice the budget,
  # so that a call merely over budget is measured, not interrupted; the wall
  # timer only for a call that waits (see WALL_FACTOR).
  signal.setitimer(signal.ITIMER_PROF, 2 * entry.budget + 1)
  signal.setitimer(signal.ITIMER_REAL, entry.wall_limit)
  start, cpu_start = time.perf_counter(), time.process_time()
  result, error = None, None
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      with np.errstate(all='ignore'):
        result = entry.call(**kwargs)
  except _Timeout:
    error = _Timeout()
  except Exception as e:  # pylint: disable=broad-except  # reports whatever the code raised
    error = e
  finally:
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGPROF, previous[0])
    signal.signal(signal.SIGALRM, previous[1])
  seconds = time.process_time() - cpu_start
  wall = time.perf_counter() - start
  grown = _peak_rss_bytes() - rss
  if (isinstance(error, _Timeout) or seconds > entry.budget or
      wall > entry.wall_limit):
    return Outcome(
        'hang', f'over the {entry.budget} s CPU budget '
        f'({wall:.1f} s wall)', seconds)
  if grown > MEMORY_BUDGET:
    return Outcome('memory', f'peak RSS grew by {grown / 2**20:.0f} MiB',
                   seconds)
  if error is not None:
    message = f'{type(error).__name__}: {str(error)[:300]}'
    if isinstance(error, entry.error_types) and names_argument(
        str(error), names):
      return Outcome('clear_error', message, seconds)
    return Outcome('unclear_error', message, seconds)
  try:
    reason = entry.check(kwargs, result)
  except Exception as e:  # pylint: disable=broad-except  # reports whatever the code raised
    reason = f'the reference check failed: {type(e).__name__}: {e}'
  if reason is not None:
    return Outcome('silent_wrong', f'{reason} (result {result!r:.300})',
                   seconds)
  return Outcome('documented', f'{result!r:.120}', seconds)


def _describe(kwargs) -> str:
  return ', '.join(f'{k}={v!r:.100}' for k, v in kwargs.items())


def run_generated(entry: EntryPoint,
                  on_outcome: Callable,
                  slow=False,
                  max_examples: Optional[int] = None):
  """Runs the derandomized cases of `entry`; `on_outcome(kwargs, outcome)`
  is called for each (it raises to fail a test)."""
  profile = hypothesis.settings.get_profile(PROFILE_SLOW if slow else PROFILE)
  count = max_examples or entry.max_examples * (SLOW_FACTOR if slow else 1)

  # No Hypothesis deadline: it times examples by the wall clock, which the
  # machine's load stretches; `classify` reports a call over its CPU budget
  # (or waiting for ever) as a 'hang', which fails the test.
  @hypothesis.settings(profile, max_examples=count, deadline=None)
  @hypothesis.given(case_strategy(entry))
  def run(kwargs):
    on_outcome(kwargs, classify(entry, kwargs))

  # pylint: disable-next=no-value-for-parameter  # hypothesis.given supplies kwargs
  run()


def assert_generated(entry: EntryPoint, slow=False):
  """The test of one entry point: every generated case is accepted."""

  def on_outcome(kwargs, outcome):
    assert outcome.kind in ACCEPTED, (
        f'{entry.name}({_describe(kwargs)}) -> {outcome}')

  run_generated(entry, on_outcome, slow=slow)


def example_kwargs(entry: EntryPoint, kwargs):
  """A hand-written case: the baseline with the case's arguments."""
  return {**entry.baseline, **kwargs}


def assert_examples(entry: EntryPoint, slow=False):
  """The hand-written regressions of one entry point (its slow ones when
  `slow`)."""
  for label, kwargs, expected in (entry.slow_examples
                                  if slow else entry.examples):
    kwargs = example_kwargs(entry, kwargs)
    outcome = classify(entry, kwargs)
    assert outcome.kind in ACCEPTED, (
        f'{entry.name} [{label}] ({_describe(kwargs)}) -> {outcome}')
    if expected is not None:
      assert outcome.kind == expected, (
          f'{entry.name} [{label}]: expected {expected}, got {outcome}')


def test_classes(name: str, entry_points: Sequence[EntryPoint], module: str):
  """The two test classes of a fuzz module, named Fuzz<name>Test (default
  suite: generated cases and the hand-written ones) and SlowFuzz<name>Test
  (marked slow: more generated cases, the costly hand-written ones). Assign both at module level of the
  module named `module` (pass `__name__`): the classes say they belong to it,
  so that unittest, run on that module directly, names their tests as pytest
  does (Fuzz<name>Test.test_..., not fuzz.strategies.Fuzz<name>Test...)."""
  entry_points = list(entry_points)

  class Fast(parameterized.TestCase):

    @parameterized.named_parameters((e.test_name, e) for e in entry_points)
    def test_generated(self, entry):
      assert_generated(entry)

    @parameterized.named_parameters(
        (e.test_name, e) for e in entry_points if e.examples)
    def test_handwritten(self, entry):
      assert_examples(entry)

  class Slow(parameterized.TestCase):

    @parameterized.named_parameters((e.test_name, e) for e in entry_points)
    def test_generated(self, entry):
      assert_generated(entry, slow=True)

    if any(e.slow_examples for e in entry_points):  # none: no such test

      @parameterized.named_parameters(
          (e.test_name, e) for e in entry_points if e.slow_examples)
      def test_handwritten(self, entry):
        assert_examples(entry, slow=True)

  for cls, label in ((Fast, f'Fuzz{name}Test'), (Slow, f'SlowFuzz{name}Test')):
    cls.__name__ = cls.__qualname__ = label
    cls.__module__ = module
  return Fast, pytest.mark.slow(Slow)


# ----------------------------------------------------------------------------
# Reference-check helpers.


def is_real(x) -> bool:
  return isinstance(x, (int, float, np.integer,
                        np.floating)) and not (isinstance(x, (bool, np.bool_)))


def epsilon_ok(eps) -> Optional[str]:
  """An epsilon: a float >= 0 (inf allowed), never NaN."""
  if not is_real(eps) or math.isnan(eps) or eps < 0:
    return f'epsilon {eps!r} is not a number >= 0 (or inf)'
  return None


def delta_ok(delta) -> Optional[str]:
  if not is_real(delta) or not 0.0 <= delta <= 1.0:
    return f'delta {delta!r} is not in [0, 1]'
  return None


def curve_ok(curve, length) -> Optional[str]:
  """An RDP curve: `length` values >= 0 (inf allowed), no NaN."""
  curve = np.asarray(curve)
  if curve.shape != (length,):
    return f'curve shape {curve.shape}, expected ({length},)'
  if np.any(np.isnan(curve)) or np.any(curve < 0):
    return f'curve has NaN or negative values: {curve}'
  return None


def first_error(*reasons) -> Optional[str]:
  return next((r for r in reasons if r is not None), None)
