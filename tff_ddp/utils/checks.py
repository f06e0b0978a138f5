"""Argument validation: one home for every check of a public entry point.

TFF-style helpers (`tff.aggregators` keeps a `_check_positive(value, label)`
family): each returns the value converted to a plain Python type and raises

* `TypeError` when the value has the wrong type (a string, a list or array
  where a number is expected, a bool or float where an integer is expected,
  a non-scalar numpy array), and
* `ValueError` when it has the right type but is outside its range (NaN,
  +-inf, too small, too large, not among the choices),

with a message that names the argument, repeats the value and says what is
allowed, e.g. ``bits must be an integer in [1, 30], got 31.`` The CLI uses
the same helpers, so the rules are stated once.

Numpy scalars (``np.int64(3)``, ``np.float32(0.5)``) and 0-d arrays are
accepted and converted; arrays with elements are refused with a TypeError
(``noise_multiplier=np.array([1.0])`` is not silently read as 1.0).
"""

import math
import numbers
from typing import Any, Optional, Sequence

import numpy as np


def _scalar(value: Any, name: str, allowed: str) -> Any:
  """Unwraps 0-d numpy arrays; an array with elements is a TypeError."""
  if isinstance(value, np.ndarray):
    if value.ndim != 0:
      raise TypeError(f'{name} must be {allowed}, got an array {value!r}.')
    return value[()]
  return value


def _describe_range(low, high, low_open, high_open) -> str:
  if low is None and high is None:
    return 'a finite number'
  if high is None:
    return f'a finite number {">" if low_open else ">="} {low:g}'
  if low is None:
    return f'a finite number {"<" if high_open else "<="} {high:g}'
  left = '(' if low_open else '['
  right = ')' if high_open else ']'
  return f'a number in {left}{low:g}, {high:g}{right}'


def real(value: Any,
         name: str,
         low: Optional[float] = None,
         high: Optional[float] = None,
         low_open: bool = False,
         high_open: bool = False,
         allow_inf: bool = False) -> float:
  """`value` as a float in the given range (NaN is never allowed).

  Args:
    value: what the caller passed.
    name: the argument's name, for the message.
    low, high: the range's ends (None: unbounded on that side).
    low_open, high_open: exclude the end.
    allow_inf: accept +inf as a value (only when `high` is None).

  Returns:
    float(value).

  Raises:
    TypeError: not a real number (bools, strings, arrays with elements).
    ValueError: NaN, inf (unless allowed) or outside the range.
  """
  allowed = _describe_range(low, high, low_open, high_open)
  value = _scalar(value, name, allowed)
  if (isinstance(value, (bool, np.bool_)) or
      not isinstance(value, (numbers.Real, np.floating, np.integer))):
    raise TypeError(f'{name} must be {allowed}, got {value!r} '
                    f'({type(value).__name__}).')
  number = float(value)
  if math.isnan(number) or (math.isinf(number) and
                            not (allow_inf and number > 0 and high is None)):
    raise ValueError(f'{name} must be {allowed}, got {value!r}.')
  too_low = low is not None and (number <= low if low_open else number < low)
  too_high = high is not None and (number >= high
                                   if high_open else number > high)
  if too_low or too_high:
    raise ValueError(f'{name} must be {allowed}, got {value!r}.')
  return number


def positive(value: Any, name: str) -> float:
  """A finite number > 0."""
  return real(value, name, low=0.0, low_open=True)


def nonnegative(value: Any, name: str) -> float:
  """A finite number >= 0."""
  return real(value, name, low=0.0)


def probability(value: Any,
                name: str,
                allow_zero: bool = False,
                allow_one: bool = True) -> float:
  """A number in (0, 1] by default."""
  return real(value,
              name,
              low=0.0,
              high=1.0,
              low_open=not allow_zero,
              high_open=not allow_one)


def integer(value: Any,
            name: str,
            low: Optional[int] = None,
            high: Optional[int] = None) -> int:
  """`value` as a Python int in [low, high].

  Floats are refused even when integral (``3.0``): an integer argument given
  as a float is usually a bug (``2**20 / n``).

  Raises:
    TypeError: bool, float, string, array with elements, ...
    ValueError: outside [low, high].
  """
  if low is not None and high is not None:
    allowed = f'an integer in [{low}, {high}]'
  elif low is not None:
    allowed = f'an integer >= {low}'
  elif high is not None:
    allowed = f'an integer <= {high}'
  else:
    allowed = 'an integer'
  value = _scalar(value, name, allowed)
  if (isinstance(value, (bool, np.bool_)) or
      not isinstance(value, (numbers.Integral, np.integer))):
    raise TypeError(f'{name} must be {allowed}, got {value!r} '
                    f'({type(value).__name__}).')
  number = int(value)
  if (low is not None and number < low) or (high is not None and number > high):
    raise ValueError(f'{name} must be {allowed}, got {value!r}.')
  return number


def optional_integer(value: Any,
                     name: str,
                     low: Optional[int] = None,
                     high: Optional[int] = None) -> Optional[int]:
  return None if value is None else integer(value, name, low, high)


def optional_positive(value: Any, name: str) -> Optional[float]:
  return None if value is None else positive(value, name)


def boolean(value: Any, name: str) -> bool:
  """A bool (Python or numpy); 0/1 and strings are refused."""
  value = _scalar(value, name, 'True or False')
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f'{name} must be True or False, got {value!r} '
                    f'({type(value).__name__}).')
  return bool(value)


def choice(value: Any, name: str, choices: Sequence[str]) -> str:
  """One of the strings `choices`."""
  if not isinstance(value, str):
    raise TypeError(f'{name} must be one of {tuple(choices)}, got {value!r} '
                    f'({type(value).__name__}).')
  if value not in choices:
    raise ValueError(f'{name} must be one of {tuple(choices)}, got '
                     f'{value!r}.')
  return value


def member(value: Any, name: str, enum_type, aliases=None):
  """`value` as a member of the string enum `enum_type`.

  Accepts the member itself, its value, or a key of `aliases` (an entry
  point's own spellings, e.g. TFF's keywords); anything else is refused as
  by `choice`, naming every accepted spelling. The one place a user's
  string becomes the object that travels.
  """
  if isinstance(value, enum_type):
    return value
  aliases = dict(aliases or {})
  value = choice(value, name,
                 tuple(m.value for m in enum_type) + tuple(aliases))
  return aliases[value] if value in aliases else enum_type(value)


def real_sequence(values: Any,
                  name: str,
                  low: Optional[float] = None,
                  high: Optional[float] = None,
                  low_open: bool = False,
                  high_open: bool = False,
                  min_length: int = 1):
  """A non-empty list of numbers, each checked like `real`."""
  if isinstance(values, (str, bytes)) or not isinstance(
      values, (Sequence, np.ndarray)) or (isinstance(values, np.ndarray) and
                                          values.ndim == 0):
    raise TypeError(f'{name} must be a sequence of numbers, got {values!r} '
                    f'({type(values).__name__}).')
  values = list(np.reshape(np.asarray(values, dtype=object), [-1])) if (
      isinstance(values, np.ndarray)) else list(values)
  if len(values) < min_length:
    raise ValueError(f'{name} must have at least {min_length} element(s), '
                     f'got {values!r}.')
  return [
      real(v, f'{name}[{i}]', low, high, low_open, high_open)
      for i, v in enumerate(values)
  ]


def seed(value: Any, name: str = 'seed') -> Optional[int]:
  """An optional integer seed in [0, 2^63)."""
  if value is None:
    return None
  return integer(value, name, 0, 2**63 - 1)


def instance(value: Any, cls: type, expected: str) -> Any:
  """`value` if it is a `cls`; else a TypeError: `expected` (what to pass,
  e.g. how to build one), then the value received."""
  if not isinstance(value, cls):
    raise TypeError(f'{expected}, got {value!r}.')
  return value
