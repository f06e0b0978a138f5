"""DP events in TFF measurements, and back: one place for both directions.

Every aggregator of tff_ddp reports the DP event of the round it just ran in
its measurements, with the *measured* number of clients in the secure sum
(the planning value `factory.dp_event(...)` assumes the expected number).
The event travels in the layout of dp-accounting's `to_named_tuple()`:
`module_name`, `class_name` and the event's fields, nested events as nested
structures, each leaf a tensor (fields that are None are left out and come
back as their defaults).

    measurements = process.next(state, client_values).measurements
    event = tff_ddp.accounting.extract_dp_event(measurements)
    accountant.compose(event)

An empty round (a measured `num_clients` of 0: no client in the secure sum)
released nothing about anyone; it comes back as `NoOpDpEvent`, and so does
a composition or a self-sampled wrapper of nothing but such rounds (the
structure in the measurements keeps the planned classes: a TFF type cannot
change with the count).
"""

import collections
import importlib
import sys
from typing import Any, Mapping, Optional

import attr
import dp_accounting
import numpy as np

# Modules whose event classes `extract_dp_event` may instantiate (nothing
# else is imported from a measurement).
_EVENT_MODULES = ('dp_accounting.dp_event', 'tff_ddp.accounting.events')
# The measurement key of a round's event, and the fields of an event's
# structure that name its class (dp-accounting's `to_named_tuple`).
DP_EVENT = 'dp_event'
_MODULE_NAME, _CLASS_NAME = 'module_name', 'class_name'
_CLASS_FIELDS = (_MODULE_NAME, _CLASS_NAME)


def _leaf_tensor(value, event, where: str):
  """A number or string field of `event` as a tensor: bools as bool,
  integers as int64, floats as float64 (no float32 rounding of a noise
  scale), strings as string."""
  import tensorflow as tf
  if isinstance(value, (bool, np.bool_)):
    return tf.constant(bool(value))
  if isinstance(value, (int, np.integer)):
    return tf.constant(int(value), tf.int64)
  if isinstance(value, (float, np.floating)):
    return tf.constant(float(value), tf.float64)
  if isinstance(value, str):
    return tf.constant(value)
  raise TypeError(f'cannot put {value!r} of {type(event).__name__} into '
                  f'{where}.')


def event_structure(event: dp_accounting.DpEvent,
                    overrides: Optional[Mapping[str, Any]] = None):
  """The event as a nested OrderedDict of tensors, for TFF measurements.

  Args:
    event: a DpEvent whose fields are numbers, strings, events or lists of
      events (every event of dp-accounting and tff_ddp).
    overrides: field name -> tensor, substituted wherever an event (at any
      depth) has that field; e.g. {'num_clients': measured_count}.

  Returns:
    OrderedDict(module_name=..., class_name=..., <fields>...) of tf tensors.
  """
  overrides = dict(overrides or {})
  named = event.to_named_tuple()

  def convert(value, name=None):
    if name in overrides:
      return overrides[name]
    if isinstance(value, tuple) and hasattr(value, '_fields'):
      return collections.OrderedDict(
          (field, convert(getattr(value, field), field))
          for field in value._fields
          if getattr(value, field) is not None)
    if isinstance(value, (list, tuple)):
      return [convert(v) for v in value]
    return _leaf_tensor(value, event, 'measurements')

  return convert(named)


def explicit(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
  """The same event with each optional field set to what its None means.

  For carriers that cannot hold None (TF Privacy's DPQuery events travel as
  tensors): DDG's and Skellam's l1 bound becomes
  `ddg_rdp.l1_sensitivity(event)`, their sampler distance 0 (exact),
  their l0 bound the dimension (every coordinate may move), their l_inf
  bound Delta_2 (no tighter bound);
  cPBM's replace-one dimension its `dimension`,
  its l2 bound inf.
  Nested events (composed, sampled) are made explicit too; the accountant's
  epsilon of the result is the event's.
  """
  from tff_ddp.accounting import ddg_rdp
  from tff_ddp.accounting import events
  if isinstance(event, (events.DistributedDiscreteGaussianDpEvent,
                        events.DistributedSkellamDpEvent)):
    return attr.evolve(
        event,
        l1_sensitivity=float(ddg_rdp.l1_sensitivity(event)),
        sampler_tv_distance=float(event.sampler_tv_distance or 0.0),
        l0_sensitivity=int(event.l0_sensitivity or event.dimension),
        linf_sensitivity=float(event.l2_sensitivity if event.linf_sensitivity is
                               None else event.linf_sensitivity))
  if isinstance(event, events.PoissonBinomialDpEvent):
    if event.replace_one_dimension is None:
      event = attr.evolve(event, replace_one_dimension=event.dimension)
    if event.l2_bound is None:  # No l2 promise: an infinite bound.
      event = attr.evolve(event, l2_bound=float('inf'))
    return event
  changes = {}
  for field in attr.fields(type(event)):
    value = getattr(event, field.name)
    if isinstance(value, dp_accounting.DpEvent):
      changes[field.name] = explicit(value)
    elif isinstance(value, (list, tuple)):
      changes[field.name] = [
          explicit(v) if isinstance(v, dp_accounting.DpEvent) else v
          for v in value
      ]
    elif value is None:
      raise ValueError(f'{type(event).__name__}.{field.name} is None and has '
                       'no explicit value.')
  return attr.evolve(event, **changes) if changes else event


def tensor_event(
    event: dp_accounting.DpEvent,
    overrides: Optional[Mapping[str, Any]] = None) -> dp_accounting.DpEvent:
  """The event with tensor fields, for TF code that must return a DpEvent.

  TF Privacy's `DPQuery.get_noised_result` returns its event from inside a
  traced computation; TFF then carries it as a structure of tensors. Fields
  become float64 / int64 / string tensors (no float32 rounding of a noise
  scale), optional fields are made explicit (`explicit`), and `overrides`
  (field name -> tensor) replace fields at any depth, e.g. the measured
  `num_clients`.
  """
  overrides = dict(overrides or {})

  def convert(value, name=None):
    if name in overrides:
      return overrides[name]
    if isinstance(value, dp_accounting.DpEvent):
      return type(value)(**{
          f.name: convert(getattr(value, f.name), f.name)
          for f in attr.fields(type(value))
      })
    if isinstance(value, (list, tuple)):
      return [convert(v) for v in value]
    return _leaf_tensor(value, event, 'a tensor event')

  return convert(explicit(event))


def composed_structure(structures):
  """The structure of ComposedDpEvent(events) from the events' structures.

  For a process that runs several aggregators in one round: each reports
  its own event (with its measured number of clients); this composes the
  measured structures as they are, inside a TFF computation, so that
  `extract_dp_event` of the result is ComposedDpEvent([e_1, ..., e_k]).

  Args:
    structures: a list of event structures (`event_structure` outputs or
      the `dp_event` measurements of aggregators).
  """
  import tensorflow as tf
  named = dp_accounting.ComposedDpEvent([]).to_named_tuple()
  return collections.OrderedDict(module_name=tf.constant(named.module_name),
                                 class_name=tf.constant(named.class_name),
                                 events=list(structures))


def _python(value):
  """numpy/bytes leaves of a measurement back to Python scalars."""
  if isinstance(value, bytes):
    return value.decode('utf-8')
  if isinstance(value, np.ndarray) and value.ndim == 0:
    value = value[()]
  if isinstance(value, (np.bool_, bool)):
    return bool(value)
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, np.floating):
    return float(value)
  if isinstance(value, bytes):
    return value.decode('utf-8')
  return value


def _as_mapping(value) -> Optional[Mapping[str, Any]]:
  if isinstance(value, Mapping):
    return value
  if hasattr(value, '_asdict'):
    return value._asdict()
  # A TFF Struct can exist only where TFF is imported: never import it here
  # (the core runs without TFF; importing it would take 10-20 s).
  tff = sys.modules.get('tensorflow_federated')
  if tff is not None and isinstance(value, tff.structure.Struct):
    return collections.OrderedDict(tff.structure.iter_elements(value))
  return None


def as_mapping(value) -> Optional[Mapping[str, Any]]:
  """A measurement node as a mapping (dicts, namedtuples, TFF Structs) or
  None for a leaf: how `extract_dp_event` walks measurements."""
  return _as_mapping(value)


class NoDpEventError(LookupError, ValueError):
  """The measurements hold no dp_event (a LookupError and a ValueError)."""


def _is_event(mapping) -> bool:
  return mapping is not None and all(key in mapping for key in _CLASS_FIELDS)


def _rebuild(mapping) -> dp_accounting.DpEvent:
  module_name = _python(mapping[_MODULE_NAME])
  class_name = _python(mapping[_CLASS_NAME])
  if module_name not in _EVENT_MODULES:
    raise ValueError(
        f'refusing to build an event from module {module_name!r}; events '
        f'come from {_EVENT_MODULES}.')
  cls = getattr(importlib.import_module(module_name), class_name, None)
  if cls is None or not (isinstance(cls, type) and
                         issubclass(cls, dp_accounting.DpEvent)):
    raise ValueError(f'{module_name}.{class_name} is not a DpEvent.')
  names = {f.name for f in attr.fields(cls)}
  kwargs = {}
  for key, value in mapping.items():
    if key in _CLASS_FIELDS:
      continue
    if key not in names:
      raise ValueError(f'{class_name} has no field {key!r}.')
    kwargs[key] = _field(value)
  return _empty_round_as_noop(cls, kwargs)


def _empty_round_as_noop(cls, kwargs) -> dp_accounting.DpEvent:
  """cls(**kwargs), or NoOpDpEvent for what an empty round released.

  A mechanism's event with num_clients == 0 (the measured count of a round
  without clients: the mechanisms' own `dp_event(0)` is NoOpDpEvent), and a
  ComposedDpEvent or SelfSampledDpEvent of NoOpDpEvents only.
  """
  from tff_ddp.accounting import events
  noop = dp_accounting.NoOpDpEvent()
  if kwargs.get('num_clients') == 0 and cls.__module__ == events.__name__:
    return noop
  if cls is dp_accounting.ComposedDpEvent and kwargs.get('events') and all(
      isinstance(e, dp_accounting.NoOpDpEvent) for e in kwargs['events']):
    return noop
  if cls is events.SelfSampledDpEvent and isinstance(kwargs.get('event'),
                                                     dp_accounting.NoOpDpEvent):
    return noop
  return cls(**kwargs)


def _field(value):
  mapping = _as_mapping(value)
  if _is_event(mapping):
    return _rebuild(mapping)
  if isinstance(value, (list, tuple)):
    return [_field(v) for v in value]
  if mapping is not None:
    return [_field(v) for v in mapping.values()]
  return _python(value)


def extract_dp_event(measurements) -> dp_accounting.DpEvent:
  """The DpEvent of a round from its measurements.

  Args:
    measurements: the measurements of one `next` of a tff_ddp aggregation
      process or analytics process (the event is found under a `dp_event`
      key, at any depth), the metrics of one round of a learning process
      (e.g. `tff.learning.algorithms.build_unweighted_fed_avg` with
      tff_ddp's model and metrics aggregators: every release's event), the
      state `next` of a `tff.aggregators.DifferentiallyPrivateFactory`
      process returned, or the event structure itself.

  Returns:
    The event, with the measured number of clients. A `dp_event` key
    stands for everything in the mapping that holds it (a process that
    composes parts puts the composition there); a mapping without one
    gathers its values' events: one is returned as is, several as their
    `ComposedDpEvent` (separate releases of one round, e.g. a learning
    process's `client_work` metrics and its `aggregator`).

  Raises:
    ValueError: no event in the measurements (`NoDpEventError`, also a
      LookupError), or a malformed one.
  """
  mapping = _as_mapping(measurements)
  if mapping is None:
    raise ValueError('measurements must be a mapping (the measurements of '
                     f'one round), got {type(measurements).__name__}.')
  if _is_event(mapping):
    return _rebuild(mapping)
  if DP_EVENT in mapping:
    if _python(mapping.get('is_init_state', False)) is True:
      # tff.aggregators.DifferentiallyPrivateFactory's initial state.
      raise ValueError('this is the state initialize() returned; its event is '
                       'a placeholder. Extract events from states next() '
                       'returned.')
    event = _field(mapping[DP_EVENT])
    if not isinstance(event, dp_accounting.DpEvent):
      raise ValueError(
          f"measurements['{DP_EVENT}'] must hold a DpEvent (or its named-tuple "
          f'form), got {type(event).__name__} {event!r:.100}.')
    return event
  found = _gathered_events(mapping)
  if not found:
    raise NoDpEventError('no dp_event in these measurements (measurements '
                         f'keys: {sorted(map(str, mapping))}).')
  if len(found) == 1:
    return found[0]
  return dp_accounting.ComposedDpEvent(found)


def _gathered_events(mapping):
  """The events of the values of a mapping without a `dp_event` key (in
  their order; a value with its own `dp_event` stands for its subtree)."""
  found = []
  for value in mapping.values():
    inner = _as_mapping(value)
    if inner is not None:
      try:
        found.append(extract_dp_event(inner))
      except NoDpEventError:
        continue
  return found
