"""What a round hands back to Python: refusals, missing contexts, statuses.

What TFF 0.87's execution contexts do not give a user, done once here for
every process of tff_ddp: `user_facing(computation)` (a
`ConcreteComputation` of the same proto and type; only its Python
`__call__` differs) turns a refused round (`refusal_check`) into
`RoundRefusedError`, a missing execution context into
`MissingContextError`, `bytes` statuses into `Status` (a `str`), and another
process's state into a one-line TypeError. Neither changes what a round
releases (docs/errors.md).

Each case as TFF raises it and as it comes back: docs/notes/secure_sum.md.
"""

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.utils.rounds')

# pylint: disable=wrong-import-position  # after require_tff's clear error
import collections
import collections.abc
import re
import threading

import attr
from tensorflow_federated.python.core.impl.computation import computation_impl

# Starts every refusal message (how `user_facing` recognises one).
REFUSAL_PREFIX = 'tff_ddp refused the round: '
# The measurement key of a round's status ('ok', 'refused', ...).
STATUS = 'status'
# TF's Assert prints its data as 'assertion failed: [<message>]' followed by
# a newline and the node name.
_ASSERT_END = ']\n'


class RoundRefusedError(ValueError):
  """A round refused from inside its server computation (the message says
  why and what to change); the caller's state is as it was before `next`."""


# What TFF says when a computation with secure sums meets a context that
# cannot run them (its default local context), or meets no context.
_NO_SECURE_SUM_CONTEXT = ('Cannot embed a federated value',
                          'No default context installed')


class MissingContextError(RuntimeError):
  """A process of tff_ddp was called where TFF cannot run its secure sums."""

  def __init__(self, cause: str):
    super().__init__(
        'tff_ddp processes run secure sums (federated_secure_modular_sum), '
        "which TFF's default execution context cannot run (TFF said: "
        f'{cause}). Install a context that runs them before calling next: '
        'tff.backends.test.set_sync_test_cpp_execution_context() (or '
        'tff_ddp.utils.processes.use_test_context(), which also gives the '
        "worker larger thread stacks), or tff_ddp.utils.workers' "
        'local_workers / remote_workers for several workers.' +
        ('' if threading.current_thread() is threading.main_thread(
        ) else " This thread is not the main one, and TFF's contexts are per "
         'thread: call tff_ddp.utils.processes.use_test_context() once in '
         'the main thread, before the threads start, and every thread '
         'runs on it.'))


def missing_context(error: BaseException):
  """The TFF message in `error` that means "no context runs secure sums"
  (None if it is another error)."""
  text = str(error)
  return next((m for m in _NO_SECURE_SUM_CONTEXT if m in text), None)


class Status(str):
  """A status measurement: a str that also equals the same text as bytes.

  >>> Status('ok') == 'ok', Status('ok') == b'ok', Status('ok').decode()
  (True, True, 'ok')
  """

  __slots__ = ()

  def __eq__(self, other):
    if isinstance(other, (bytes, bytearray)):
      other = bytes(other).decode('utf-8', 'replace')
    return str.__eq__(self, other)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  __hash__ = str.__hash__

  def decode(self, encoding: str = 'utf-8', errors: str = 'strict') -> str:
    """The text itself (for code written for TFF's bytes)."""
    del encoding, errors
    return str(self)

  def __repr__(self):
    return f'Status({str.__repr__(self)})'


def refusal_check(ok, message):
  """A TF op that fails the computation with `message` unless `ok`.

  Args:
    ok: scalar bool tensor.
    message: scalar string tensor (or str), the refusal's text; it is
      prefixed with REFUSAL_PREFIX.

  Returns:
    The assertion op: make the computation's outputs depend on it
    (`tf.control_dependencies`), or graph-mode TFF computations skip it.
  """
  import tensorflow as tf
  text = tf.strings.join([REFUSAL_PREFIX, message])
  return tf.debugging.Assert(ok, [text], summarize=1)


def refusal_message(error: BaseException):
  """The refusal text in `error`'s text (None if it is not a refusal)."""
  text = str(error)
  start = text.find(REFUSAL_PREFIX)
  if start < 0:
    return None
  start += len(REFUSAL_PREFIX)
  end = text.find(_ASSERT_END, start)
  if end < 0:
    end = text.find('\n', start)
  message = text[start:] if end < 0 else text[start:end]
  # TF's Assert prints string data C-escaped (' as \', " as \").
  return re.sub(r'\\([\'"\\])', r'\1', message)


def _statuses(value, key=None):
  """`value` with bytes under 'status' keys as Status (concrete values)."""
  if isinstance(value, (bytes, bytearray)) and key == STATUS:
    return Status(bytes(value).decode('utf-8', 'replace'))
  if isinstance(value, dict):
    items = [(k, _statuses(v, k)) for k, v in value.items()]
    if isinstance(value, collections.OrderedDict):
      return collections.OrderedDict(items)
    try:
      return type(value)(items)
    except TypeError:
      return dict(items)
  if isinstance(value, tuple) and hasattr(value, '_fields'):
    return type(value)(*[_statuses(v, k) for k, v in zip(value._fields, value)])
  if isinstance(value, (list, tuple)):
    return type(value)(_statuses(v) for v in value)
  if attr.has(type(value)):
    return attr.evolve(
        value, **{
            f.name: _statuses(getattr(value, f.name), f.name)
            for f in attr.fields(type(value))
            if f.init
        })
  return value


# TFF's words for a numpy value of another dtype than the computation's.
_SERIALIZE_DTYPE = re.compile(
    r"Failed to serialize a value of dtype <class '([\w.]+)'> to dtype "
    r"<class '([\w.]+)'>")

# The state key of an adaptive clip (`tff_ddp.aggregators.secure_sum`: a
# process built with auto_l2_clip=True / adaptive_clipping=... has it, one
# with a fixed l2_clip does not).
_CLIP_KEY = 'l2_clip'


def _clip_state_mismatch(type_signature, args):
  """The one-line message when `args[0]`, a state, has an adaptive clip the
  computation's state type lacks or the reverse (TFF 0.87's own error is
  "Cannot serialize a struct value of 3 elements to a struct type requiring
  2 elements" and a dump of both); None otherwise."""
  import tensorflow_federated as tff
  parameter = type_signature.parameter
  if not args or parameter is None:
    return None
  if isinstance(parameter, tff.StructType) and len(parameter) > 1:
    parameter = parameter[0]

  def find(value, type_spec):
    if isinstance(type_spec, tff.FederatedType):
      type_spec = type_spec.member
    if (not isinstance(type_spec, tff.StructType) or
        not isinstance(value, collections.abc.Mapping)):
      return None
    elements = dict(tff.structure.iter_elements(type_spec))
    if (_CLIP_KEY in elements) != (_CLIP_KEY in value):
      return _CLIP_KEY in value
    for name, element in elements.items():
      if name in value:
        found = find(value[name], element)
        if found is not None:
          return found
    return None

  adaptive_state = find(args[0], parameter)
  if adaptive_state is None:
    return None
  ours, theirs = (('a fixed l2_clip', 'an adaptive-clipping process (its '
                   "state has 'l2_clip': auto_l2_clip=True or "
                   'adaptive_clipping=...)') if adaptive_state else
                  ('an adaptive clip', 'a process with a fixed l2_clip (its '
                   "state has no 'l2_clip')"))
  return (f'this process clips at {ours} and got the state of {theirs}: '
          'pass the state of its own initialize() (or of its last next()), '
          'or build both with the same clipping.')


class UserFacingComputation(computation_impl.ConcreteComputation):
  """A computation whose Python calls raise RoundRefusedError for refusals,
  MissingContextError without a context that runs secure sums, and return
  statuses as `Status` (module docstring; each case:
  docs/notes/secure_sum.md, section on rounds.py)."""

  def __call__(self, *args, **kwargs):
    try:
      result = super().__call__(*args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except  # known TFF errors reworded, the rest re-raised
      message = refusal_message(e)
      if message is not None:
        raise RoundRefusedError(message) from None
      cause = missing_context(e)
      if cause is not None:
        raise MissingContextError(cause) from e
      clip = (_clip_state_mismatch(self.type_signature, args) if isinstance(
          e, TypeError) else None)
      if clip is not None:
        raise TypeError(clip) from None
      dtypes = _SERIALIZE_DTYPE.search(str(e))
      if isinstance(e, TypeError) and dtypes:
        got, expected = (d.rsplit('.', 1)[-1] for d in dtypes.groups())
        raise TypeError(
            f'this process takes {expected} values and got {got} (TFF '
            f'converts no numpy dtype to another): pass np.asarray(values, '
            f'np.{expected}), or Python floats. (TFF said: {e})') from None
      raise
    return _statuses(result)


def user_facing(computation) -> UserFacingComputation:
  """`computation` (a TFF ConcreteComputation) with the Python behaviour of
  the module docstring; the same proto and type signature."""
  if isinstance(computation, UserFacingComputation):
    return computation
  # pylint: disable=protected-access  # TFF keeps the proto private
  return UserFacingComputation(computation_proto=computation._computation_proto,
                               context_stack=computation._context_stack,
                               annotated_type=computation.type_signature)
  # pylint: enable=protected-access


def user_facing_process(process):
  """The same kind of process (`MeasuredProcess`, `AggregationProcess`)
  with its `initialize` and `next` wrapped by `user_facing`."""
  import tensorflow_federated as tff
  if isinstance(process, tff.templates.AggregationProcess):
    return tff.templates.AggregationProcess(user_facing(process.initialize),
                                            user_facing(process.next))
  if isinstance(process, tff.templates.MeasuredProcess):
    return tff.templates.MeasuredProcess(user_facing(process.initialize),
                                         user_facing(process.next))
  raise TypeError(f'expected a MeasuredProcess or AggregationProcess, got '
                  f'{type(process).__name__}.')
