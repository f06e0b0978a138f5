"""DP events through measurements and back (event_io)."""

import collections

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf

from tff_ddp import accounting
from tff_ddp.accounting import event_io
from tff_ddp.accounting import events

_DDG = events.DistributedDiscreteGaussianDpEvent(l2_sensitivity=12.5,
                                                 local_stddev=3.25,
                                                 num_clients=7,
                                                 dimension=64,
                                                 sampler_tv_distance=2.0**-108)
_PBM = events.PoissonBinomialDpEvent(0.125, 16, 7, 32, replace_one_dimension=64)
EVENTS = {
    'ddg':
        _DDG,
    'ddg_l1':
        events.DistributedDiscreteGaussianDpEvent(1.0, 2.0, 3, 4, 5.0),
    'pbm':
        _PBM,
    'pbm_l2':
        events.PoissonBinomialDpEvent(0.125, 16, 7, 32, l2_bound=1.25),
    'self_sampled':
        events.SelfSampledDpEvent(0.25, _DDG),
    'composed':
        dp_accounting.ComposedDpEvent([_DDG, _PBM]),
    'nested':
        events.SelfSampledDpEvent(0.5,
                                  dp_accounting.ComposedDpEvent([_DDG, _PBM])),
    'non_private':
        dp_accounting.NonPrivateDpEvent(),
    'gaussian':
        dp_accounting.GaussianDpEvent(1.5),
    'poisson':
        dp_accounting.PoissonSampledDpEvent(0.01, _DDG),
}


def _through_graph(structure_fn):
  """Runs structure_fn in a tf.function and returns its outputs as numpy
  (what a computation's measurements hold; inside TFF computations:
  tff_ddp_tests/aggregators/core_in_tff_test.py)."""
  return tf.nest.map_structure(lambda t: t.numpy(), tf.function(structure_fn)())


class EventIoTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*EVENTS.items())
  def test_round_trip_through_a_tf_function(self, event):
    measurements = _through_graph(lambda: collections.OrderedDict(
        other=tf.constant(1.0), dp_event=event_io.event_structure(event)))
    self.assertEqual(accounting.extract_dp_event(measurements), event)

  def test_overrides_replace_num_clients_everywhere(self):
    event = EVENTS['nested']
    measured = _through_graph(lambda: event_io.event_structure(
        event, {'num_clients': tf.constant(3, tf.int64)}))
    rebuilt = accounting.extract_dp_event(measured)
    self.assertEqual(rebuilt.event.events[0].num_clients, 3)
    self.assertEqual(rebuilt.event.events[1].num_clients, 3)
    self.assertIsInstance(rebuilt.event.events[0].num_clients, int)

  def test_found_at_any_depth(self):
    nested = {
        'round': 2,
        'aggregator': {
            'x': np.float64(1.0),
            'dp_event': _through_graph(lambda: event_io.event_structure(_PBM))
        }
    }
    self.assertEqual(accounting.extract_dp_event(nested), _PBM)

  def test_composed_structure_of_measured_events(self):
    measured = _through_graph(lambda: event_io.composed_structure([
        event_io.event_structure(_PBM,
                                 {'num_clients': tf.constant(5, tf.int64)}),
        event_io.event_structure(EVENTS['self_sampled'])
    ]))
    rebuilt = accounting.extract_dp_event({'dp_event': measured})
    self.assertEqual(
        rebuilt,
        dp_accounting.ComposedDpEvent([
            events.PoissonBinomialDpEvent(0.125,
                                          16,
                                          5,
                                          32,
                                          replace_one_dimension=64),
            EVENTS['self_sampled']
        ]))

  @parameterized.parameters('ddg', 'pbm', 'self_sampled', 'composed', 'nested',
                            'poisson')
  def test_a_measured_empty_round_is_a_no_op(self, name):
    # A round with 0 clients in its secure sums released nothing: read back,
    # every mechanism event in it is NoOpDpEvent, and so are compositions
    # and self-sampled wrappers of nothing else. (Before, the accountant
    # raised "num_clients must be an integer in [1, ...], got 0".)
    measured = _through_graph(lambda: event_io.event_structure(
        EVENTS[name], {'num_clients': tf.constant(0, tf.int64)}))
    rebuilt = accounting.extract_dp_event(measured)
    if name == 'poisson':  # dp-accounting's own wrapper, kept: no-op inside
      self.assertEqual(
          rebuilt,
          dp_accounting.PoissonSampledDpEvent(0.01,
                                              dp_accounting.NoOpDpEvent()))
    else:
      self.assertEqual(rebuilt, dp_accounting.NoOpDpEvent())
    accountant = accounting.RdpAccountant()
    accountant.compose(rebuilt)  # accounted, not refused
    alone = accounting.RdpAccountant()
    accountant.compose(_DDG)
    alone.compose(_DDG)
    self.assertEqual(accountant.get_epsilon(1e-6), alone.get_epsilon(1e-6))

  def test_an_empty_release_beside_a_real_one_stays_composed(self):
    measured = _through_graph(lambda: event_io.composed_structure([
        event_io.event_structure(_PBM,
                                 {'num_clients': tf.constant(0, tf.int64)}),
        event_io.event_structure(_DDG)
    ]))
    self.assertEqual(
        accounting.extract_dp_event({'dp_event': measured}),
        dp_accounting.ComposedDpEvent([dp_accounting.NoOpDpEvent(), _DDG]))

  def test_refusals(self):
    with self.assertRaisesRegex(LookupError, 'no dp_event'):
      accounting.extract_dp_event({'a': 1.0})
    with self.assertRaisesRegex(ValueError, 'refusing'):
      accounting.extract_dp_event({
          'module_name': b'os',
          'class_name': b'system'
      })
    with self.assertRaisesRegex(ValueError, 'no field'):
      accounting.extract_dp_event({
          'module_name': b'tff_ddp.accounting.events',
          'class_name': b'PoissonBinomialDpEvent',
          'theta': 0.1,
          'evil': 1
      })
    with self.assertRaisesRegex(ValueError, 'mapping'):
      accounting.extract_dp_event(3.0)
    # A dp_event key holding a number, not an event (found by the fuzz
    # test: it used to come back as nan, as if it were an event).
    with self.assertRaisesRegex(ValueError, r"\['dp_event'\] must hold"):
      accounting.extract_dp_event({'dp_event': float('nan')})


def _measured(event):
  """The event's structure as a TFF computation returns it (numpy)."""
  return _through_graph(lambda: event_io.event_structure(event))


class GatherTest(tf.test.TestCase):
  """extract_dp_event on a whole round's metrics: every release's event."""

  def test_sibling_releases_are_composed(self):
    # A learning round's metrics: the client metrics' and the model
    # update's events in separate subtrees, nothing at the top. Returning
    # the first alone (the old behaviour) dropped the second.
    metrics = collections.OrderedDict(
        distributor=(),
        client_work={'train': {
            'loss': 0.5,
            'dp_event': _measured(_PBM)
        }},
        aggregator={
            'l2_clip': 0.1,
            'dp_event': _measured(_DDG)
        },
        finalizer={'update_non_finite': 0})
    self.assertEqual(accounting.extract_dp_event(metrics),
                     dp_accounting.ComposedDpEvent([_PBM, _DDG]))
    one = {'a': {'b': {'dp_event': _measured(_DDG)}}, 'c': {}}
    self.assertEqual(accounting.extract_dp_event(one), _DDG)

  def test_a_dp_event_stands_for_its_mapping(self):
    # A process that composes its parts puts the composition at its level;
    # the parts' own events below it are not counted again.
    composed = dp_accounting.ComposedDpEvent([_PBM, _DDG])
    metrics = {
        'part': {
            'dp_event': _measured(_PBM)
        },
        'other': {
            'dp_event': _measured(_DDG)
        },
        'dp_event': _measured(composed)
    }
    self.assertEqual(accounting.extract_dp_event(metrics), composed)

  def test_as_mapping_walks_what_extract_walks(self):
    self.assertIsNone(event_io.as_mapping(1.0))
    self.assertEqual(dict(event_io.as_mapping({'a': 1})), {'a': 1})
