"""TF Privacy `DPQuery` form of tff_ddp's mechanisms.

For pipelines written against TF Privacy's query interface -- in particular
`tff.aggregators.DifferentiallyPrivateFactory(query, record_aggregation_
factory=query.record_aggregation_factory())` -- the same rounds as this
library's factories, as `tensorflow_privacy.SumAggregationDPQuery`
subclasses: `DistributedDiscreteGaussianSumQuery`,
`DistributedSkellamSumQuery`, `PoissonBinomialSumQuery` (on
`MechanismSumQuery`). Unlike TF Privacy's own DDG query they take the client
values themselves, run the factories' code and return the mechanism's
`DpEvent` with the clients actually in the sum, which `tff_ddp.accounting`
accounts. Records must be summed modulo `query.modulus`.

Examples (with TFF and without), what differs from TF Privacy's query,
the state, the secure sum: docs/notes/tff_integration.md.
"""

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.queries')

# pylint: disable=wrong-import-position  # after require_tff's clear error
import collections

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_privacy.privacy.dp_query import dp_query

from tff_ddp.accounting import event_io
from tff_ddp.aggregators import discrete_gaussian
from tff_ddp.aggregators import poisson_binomial
from tff_ddp.aggregators import secure_sum

# The client count shares the query's ring; a quarter of it leaves room for
# dropouts and late joiners before the count could wrap.
_COUNT_HEADROOM = 4


class MechanismSumQuery(dp_query.SumAggregationDPQuery):
  """Any tff_ddp mechanism factory as a TF Privacy sum query.

  Attributes:
    mechanism: the mechanism (derived parameters) for the value type.
    modulus: the ring of every integer of a record; sum records modulo it.
  """

  def __init__(self, factory: secure_sum.MechanismSumFactory, value_type):
    """Validates the configuration; draws nothing.

    Args:
      factory: a `tff_ddp.aggregators` factory (its options --
        client_sampling_rate, entropy, seed, ... -- carry over).
      value_type: the client value's type: a TFF type, a tf.TensorSpec, or
        a structure of them, float or integer, fully defined shape.

    Raises:
      TypeError: `factory` is not a tff_ddp factory, or a bad value_type.
      ValueError: the factory's integers do not share one ring, or the
        expected number of clients does not fit in it.
    """
    if not isinstance(factory, secure_sum.MechanismSumFactory):
      raise TypeError('factory must be a tff_ddp.aggregators factory '
                      f'(MechanismSumFactory), got {factory!r}.')
    mechanism = factory.mechanism(value_type)
    moduli = set(mechanism.secure_moduli().values())
    if len(moduli) != 1:
      raise ValueError(
          f'{mechanism.name} sums several rings {sorted(moduli)}; a DPQuery '
          'record goes through one SecureModularSumFactory. Use the factory.')
    modulus = moduli.pop()
    expected = mechanism.expected_clients_per_round
    if expected * _COUNT_HEADROOM >= modulus:
      raise ValueError(
          f'expected_clients_per_round={expected} does not leave room for the '
          f'client count in the ring of {modulus} (needs < modulus / '
          f'{_COUNT_HEADROOM}); raise bits or use the factory.')
    protocol = factory.round_protocol(value_type, count_modulus=modulus)
    mismatched = {
        key: m for key, m in protocol.secure_moduli.items() if m != modulus
    }
    if mismatched:
      raise ValueError(
          f'the query sums everything modulo {modulus}, but {mismatched} '
          'need other rings (count_noise_multiplier noises counts modulo '
          '2^30): use bits=30 or the factory.')
    self._factory = factory
    self._protocol = protocol
    self.mechanism = mechanism
    self.modulus = int(modulus)
    self._record_specs = None

  def __repr__(self):
    return (f'{type(self).__name__}({self._factory!r}, value_type='
            f'{self._protocol.spec.value_type})')

  def record_aggregation_factory(self):
    """TFF's secure modular sum in this query's ring."""
    return tff.aggregators.SecureModularSumFactory(self.modulus)

  def planning_event(self):
    """The event of one round with the expected number of clients."""
    return self._protocol.planning_event

  # -- State. ----------------------------------------------------------------

  def _empty_metrics(self):
    """Zeros shaped like the measurements of a round (the initial metrics)."""
    zeros = self.initial_sample_state()
    seed = tf.zeros([2], tf.int64)
    _, measurements, _ = self._protocol.server(zeros, seed)
    return tf.nest.map_structure(tf.zeros_like, measurements)

  def _record_spec(self):
    """The record's TensorSpecs, by tracing the client code once."""
    if self._record_specs is None:
      spec = self._protocol.spec
      seed_spec = tf.TensorSpec([2], tf.int64)
      graph = tf.Graph()
      with graph.as_default():
        # The client code only flattens the value: its leaves in order.
        value = [
            tf.compat.v1.placeholder(tf.as_dtype(leaf.dtype), list(leaf.shape))
            for leaf in spec.leaves
        ]
        record = self._protocol.client(
            value, tf.compat.v1.placeholder(seed_spec.dtype, seed_spec.shape))
      self._record_specs = tf.nest.map_structure(
          lambda t: tf.TensorSpec(t.shape, t.dtype), record)
    return self._record_specs

  def initial_global_state(self):
    return collections.OrderedDict(
        round=tf.constant(0, tf.int64),
        public_seed=self._protocol.initial_public_seed(),
        metrics=self._empty_metrics())

  def derive_sample_params(self, global_state):
    """The round's public seed (broadcast to the clients)."""
    return secure_sum.round_seed(global_state)

  def derive_metrics(self, global_state):
    """The last round's measurements (public; see the factories)."""
    return global_state['metrics']

  # -- Clients. --------------------------------------------------------------

  def initial_sample_state(self, template=None):
    """Zeros in the record's layout (the template is not needed)."""
    del template
    return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                 self._record_spec())

  def preprocess_record(self, params, record):
    """The client side: clip, encode, discretise, add this client's noise."""
    return self._protocol.client(record, params)

  # -- Server. ---------------------------------------------------------------

  def get_noised_result(self, sample_state, global_state):
    """Decodes the sum; the event carries the measured number of clients."""
    seed = secure_sum.round_seed(global_state)
    result, measurements, n = self._protocol.server(sample_state, seed)
    event = event_io.tensor_event(self._protocol.planning_event,
                                  {'num_clients': n})
    new_state = collections.OrderedDict(round=global_state['round'] + 1,
                                        public_seed=global_state['public_seed'],
                                        metrics=measurements)
    return result, new_state, event


class DistributedDiscreteGaussianSumQuery(MechanismSumQuery):
  """The distributed discrete Gaussian (Kairouz, Liu & Steinke 2021) query.

  Arguments as `tff_ddp.aggregators.DiscreteGaussianSumFactory.
  from_tff_arguments`, with the value type first. `modulus` is 2^bits.
  """

  def __init__(self, value_type, noise_multiplier, expected_clients_per_round,
               bits, l2_clip, **factory_options):
    super().__init__(
        discrete_gaussian.DiscreteGaussianSumFactory.from_tff_arguments(
            noise_multiplier, expected_clients_per_round, bits, l2_clip,
            **factory_options), value_type)


class DistributedSkellamSumQuery(MechanismSumQuery):
  """The distributed Skellam (Agarwal, Kairouz & Liu 2021) query.

  TF Privacy's `DistributedSkellamSumQuery` computes the same client
  encoding; this one sums with secure aggregation, draws Skellam noise
  (the factory's sampler: the certified table by default, or
  noise_sampler='exact') and returns a `DistributedSkellamDpEvent`.
  Arguments as `tff_ddp.aggregators.SkellamSumFactory.from_tff_arguments`,
  with the value type first.
  """

  def __init__(self, value_type, noise_multiplier, expected_clients_per_round,
               bits, l2_clip, **factory_options):
    super().__init__(
        discrete_gaussian.SkellamSumFactory.from_tff_arguments(
            noise_multiplier, expected_clients_per_round, bits, l2_clip,
            **factory_options), value_type)


class PoissonBinomialSumQuery(MechanismSumQuery):
  """The clipped Poisson binomial mechanism (Chen et al., Alg. 3) query.

  Arguments as `tff_ddp.aggregators.PoissonBinomialSumFactory`, with the
  value type first.
  """

  def __init__(self, value_type, l2_clip, theta, num_trials,
               expected_clients_per_round, **factory_options):
    super().__init__(
        poisson_binomial.PoissonBinomialSumFactory(l2_clip, theta, num_trials,
                                                   expected_clients_per_round,
                                                   **factory_options),
        value_type)
