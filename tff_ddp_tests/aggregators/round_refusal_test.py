"""Rounds the factories must not answer normally: too many clients, none.

A ring sized for n clients can wrap around with more; the decoded sum is
then wrong (a DDG sum of 1000 clients sized for fewer can come back
with errors as large as the sum, flagged only deep in the measurements).
What is checked here, through TFF's C++ test context:

* the default refuses the round (`RoundRefusedError`, a ValueError) with
  the measured count, the capacity and the argument that fixes it, the
  bits computed where bits help; `on_wrap='flag'` returns it flagged;
* the text is readable where TFF surfaces it (a Python call of `next`, and
  the RPC error of a computation that composes the process);
* a refused round leaves the caller's state as it was;
* the capacity is the smallest over every key of the secure sum;
* an empty round is accounted as a NoOpDpEvent, and composing it changes
  no epsilon;
* the batched simulator refuses and flags like the process.
"""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.aggregators import AdaptiveClipping
from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.aggregators import PoissonBinomialSumFactory
from tff_ddp.aggregators import SkellamSumFactory
from tff_ddp.aggregators import secure_sum
from tff_ddp.aggregators import simulation
from tff_ddp.utils import rounds
from tff_ddp_tests import ddg_factories

_VECTOR = tff.TensorType(np.float32, [8])
# The Skellam factory is the DDG's round with other noise (its capacity is
# the DDG's criterion, tff_ddp_tests/mechanisms/capacity_test.py); tracing
# its exact Poisson sampler costs ~15 s, so it runs in the slow tests only.
KINDS = ('ddg', 'cpbm')


def _factory(kind, **kwargs):
  if kind == 'cpbm':
    args = dict(l2_clip=1.0,
                theta=0.25,
                num_trials=16,
                expected_clients_per_round=3,
                seed=0)
    args.update(kwargs)
    return PoissonBinomialSumFactory(**args)
  args = dict(noise_multiplier=1.0,
              expected_clients_per_round=3,
              bits=16,
              l2_clip=1.0,
              seed=0)
  args.update(kwargs)
  cls = SkellamSumFactory if kind == 'skellam' else DiscreteGaussianSumFactory
  return ddg_factories.make(cls, **args)


def _clients(n):
  rng = np.random.default_rng(n)
  return [rng.uniform(-0.3, 0.3, 8).astype(np.float32) for _ in range(n)]


class RefusalTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*KINDS)
  def test_default_refuses_with_the_counts_and_the_fix(self, kind):
    self._check_refusal(kind)

  @pytest.mark.slow
  def test_skellam_refuses_too(self):
    self._check_refusal('skellam')

  def _check_refusal(self, kind):
    factory = _factory(kind)
    capacity = factory.capacity(_VECTOR).capacity
    self.assertEqual(capacity, factory.mechanism(_VECTOR).max_clients())
    process = factory.create(_VECTOR)
    n = capacity + 1 if kind != 'cpbm' else capacity + 5
    with self.assertRaises(rounds.RoundRefusedError) as raised:
      process.next(process.initialize(), _clients(n))
    message = str(raised.exception)
    self.assertIsInstance(raised.exception, ValueError)
    knob = ('max_clients_per_round'
            if kind == 'cpbm' else 'expected_clients_per_round')
    for text in (f'{type(factory).__name__}: {n} clients',
                 f'more than the {capacity} its ring holds',
                 f'Use {knob} >= {n}', "on_wrap='flag'", f'num_clients={n}'):
      self.assertIn(text, message)
    self.assertNotIn('\\', message)  # TF's escaping undone

  @parameterized.parameters(*KINDS)
  def test_flag_returns_the_round_flagged(self, kind):
    factory = _factory(kind, on_wrap='flag')
    self.assertEqual(factory.on_wrap, 'flag')
    self.assertIn("on_wrap='flag'", repr(factory))
    capacity = factory.capacity(_VECTOR).capacity
    process = factory.create(_VECTOR)
    output = process.next(process.initialize(), _clients(capacity + 1))
    self.assertTrue(output.measurements['sum_may_wrap'])
    output = process.next(process.initialize(), _clients(capacity))
    self.assertFalse(output.measurements['sum_may_wrap'])

  def test_refused_round_leaves_the_state(self):
    # Functional state: `next` raising returns nothing, so the caller's
    # state is the one it passed; the next round from it is the round a
    # process that never saw the refusal runs (same test seed).
    factory = _factory('ddg')
    process = factory.create(_VECTOR)
    state = process.initialize()
    with self.assertRaises(rounds.RoundRefusedError):
      process.next(state, _clients(7))
    self.assertEqual(state['round'], 0)
    after = process.next(state, _clients(3))
    fresh = factory.create(_VECTOR)
    expected = fresh.next(fresh.initialize(), _clients(3))
    self.assertAllEqual(after.result, expected.result)
    self.assertEqual(after.state['round'], 1)
    self.assertFalse(after.measurements['sum_may_wrap'])

  def test_given_granularity_names_the_bits_that_hold_n(self):
    # With a given gamma the ring's worst case is linear in n, so more bits
    # make room; the message gives the smallest, which we check by building
    # the factory with it (and one bit fewer).
    kwargs = dict(encoder='none',
                  granularity=0.05,
                  linf_clip=1.0,
                  expected_clients_per_round=3,
                  bits=12)
    factory = _factory('ddg', **kwargs)
    ring = factory.capacity(_VECTOR)
    n = ring.capacity + 1
    message = ring.message(n)
    need = next(b for b, cap in ring.bits if cap >= n)
    self.assertIn(f'or bits >= {need}', message)
    self.assertGreaterEqual(
        # pylint: disable-next=repeated-keyword  # dict(kwargs, bits=...) replaces the key
        _factory('ddg', **dict(kwargs, bits=need)).capacity(_VECTOR).capacity,
        n)
    self.assertLess(
        # pylint: disable-next=repeated-keyword  # dict(kwargs, bits=...) replaces the key
        _factory('ddg', **dict(kwargs,
                               bits=need - 1)).capacity(_VECTOR).capacity,
        n)
    # The same text comes out of the TF computation.
    process = factory.create(_VECTOR)
    with self.assertRaises(rounds.RoundRefusedError) as raised:
      process.next(process.initialize(), _clients(n))
    self.assertEqual(str(raised.exception), message)

  def test_heuristic_says_bits_do_not_help(self):
    ring = _factory('ddg').capacity(_VECTOR)
    self.assertEqual({cap for _, cap in ring.bits}, {3})
    self.assertIn('no bits <= 30 holds 4 clients', ring.message(4))

  @pytest.mark.slow  # 1000 clients through TFF
  def test_issue_reproduction_1000_clients(self):
    # A DDG sum of 1000 clients sized for fewer returned errors as
    # large as the sum. Now it is refused; flagged, it says so.
    factory = _factory('ddg', expected_clients_per_round=100, bits=14)
    process = factory.create(_VECTOR)
    with self.assertRaisesRegex(rounds.RoundRefusedError,
                                '1000 clients.*more than the 100'):
      process.next(process.initialize(), _clients(1000))

  def test_refusal_text_through_a_composing_computation(self):
    # Composed into another computation (as inside tff.learning), the
    # user sees TFF's RPC error; its text carries the same message.
    factory = _factory('ddg')
    process = factory.create(_VECTOR)

    @tff.federated_computation(process.initialize.type_signature.result,
                               tff.FederatedType(_VECTOR, tff.CLIENTS))
    def outer(state, values):
      return process.next(state, values).result

    with self.assertRaises(Exception) as raised:
      outer(process.initialize(), _clients(5))
    self.assertNotIsInstance(raised.exception, rounds.RoundRefusedError)
    text = str(raised.exception)
    self.assertIn(
        rounds.REFUSAL_PREFIX + 'DiscreteGaussianSumFactory: 5 '
        'clients', text)
    self.assertEqual(rounds.refusal_message(raised.exception),
                     factory.capacity(_VECTOR).message(5))

  def test_capacity_is_the_smallest_of_the_secure_sum(self):
    # The noised counts and the clip indicators are DDG sums of their own,
    # sized for the expected clients with a 30-bit ring (more room); the
    # participant count's ring holds 2^30 - 1.
    for kwargs in (dict(count_noise_multiplier=1.0),
                   dict(adaptive_clipping=AdaptiveClipping(),
                        noise_multiplier=0.5,
                        expected_clients_per_round=20)):
      factory = _factory('ddg', **kwargs)
      protocol = factory.round_protocol(_VECTOR)
      mechanisms = [protocol.mechanism]
      # pylint: disable=protected-access  # tests a private part
      for extra in (protocol._counts, protocol._indicator):
        if extra is not None:
          mechanisms.append(extra)
      # pylint: enable=protected-access
      self.assertLen(mechanisms, 2)
      self.assertEqual(
          factory.capacity(_VECTOR).capacity,
          min([m.max_clients() for m in mechanisms] + [2**30 - 1]))

  @parameterized.parameters(('ignore', ValueError), ('RAISE', ValueError),
                            (None, TypeError), (True, TypeError))
  def test_on_wrap_is_validated(self, value, error):
    for kind in KINDS + ('skellam',):
      with self.assertRaisesRegex(error, 'on_wrap'):
        _factory(kind, on_wrap=value)
    with self.assertRaisesRegex(error, 'on_wrap'):
      secure_sum.MechanismSumFactory(lambda spec: None, on_wrap=value)

  def test_a_mechanism_without_capacity_is_refused_clearly(self):
    mechanism = _factory('ddg').mechanism(_VECTOR)

    class NoCapacity:
      name = 'no_capacity'

      def __getattr__(self, attribute):
        if attribute == 'max_clients':
          raise AttributeError(attribute)
        return getattr(mechanism, attribute)

    factory = secure_sum.MechanismSumFactory(lambda spec: NoCapacity())
    with self.assertRaisesRegex(TypeError, 'no max_clients'):
      factory.create(_VECTOR)


class EmptyRoundTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*KINDS)
  def test_empty_round_is_accounted_as_nothing(self, kind):
    factory = _factory(kind, count_noise_multiplier=1.0)
    process = factory.create(_VECTOR)
    first = process.next(process.initialize(), _clients(3))
    empty = process.next(first.state, [])
    self.assertEqual(empty.measurements['participating_clients'], 0)
    self.assertFalse(empty.measurements['sum_may_wrap'])
    event = accounting.extract_dp_event(empty.measurements)
    self.assertEqual(event, dp_accounting.NoOpDpEvent())
    self.assertEqual(factory.dp_event(_VECTOR, num_clients=0), event)
    # Composing the empty round changes no epsilon.
    with_empty = accounting.RdpAccountant(adversary='server')
    without = accounting.RdpAccountant(adversary='server')
    for accountant in (with_empty, without):
      accountant.compose(accounting.extract_dp_event(first.measurements))
    with_empty.compose(event)
    self.assertEqual(with_empty.get_epsilon(1e-6), without.get_epsilon(1e-6))
    self.assertTrue(math.isfinite(without.get_epsilon(1e-6)))

  def test_self_sampled_empty_round_is_nothing(self):
    factory = _factory('ddg', client_sampling_rate=0.5)
    process = factory.create(_VECTOR)
    empty = process.next(process.initialize(), [])
    self.assertEqual(accounting.extract_dp_event(empty.measurements),
                     dp_accounting.NoOpDpEvent())
    self.assertEqual(factory.dp_event(_VECTOR, num_clients=0),
                     dp_accounting.NoOpDpEvent())


@pytest.mark.slow  # two TFF rounds with noised counts: ~12 s
class NoValidClientTest(tf.test.TestCase):

  def test_only_the_noised_count_says_so(self):
    # Six clients, all non-finite (each at another coordinate, so the test
    # seed gives them independent noise): they send zeros, the result is
    # noise, and noised_counts['nonfinite'] estimates 6. Its error is the
    # count mechanism's noise, stddev noise_stddev(6) in count units (one
    # DDG coordinate of 6 independent shares; the flags are integers with
    # an integer scaling, so no rounding): within 6 of it (p < 2e-9);
    # z = 0.2 makes that 6 * 0.2 * sqrt(3) = 2.1 < 3, so 0 and 6 are told
    # apart.
    factory = _factory('ddg',
                       count_noise_multiplier=0.2,
                       expected_clients_per_round=6)
    process = factory.create(_VECTOR)
    bad = []
    for i in range(6):
      value = np.zeros(8, np.float32)
      value[i] = np.nan if i % 2 else np.inf
      bad.append(value)
    counts = factory.round_protocol(_VECTOR)._counts  # pylint: disable=protected-access  # tests a private part
    bound = 6 * counts.noise_stddev(6)
    m = process.next(process.initialize(), bad).measurements
    self.assertEqual(m['participating_clients'], 6)
    self.assertNear(float(m['noised_counts']['nonfinite']), 6.0, bound)
    m = process.next(process.initialize(), _clients(6)).measurements
    self.assertNear(float(m['noised_counts']['nonfinite']), 0.0, bound)
    self.assertLess(bound, 3.0)  # the two cases are told apart


@pytest.mark.slow  # tracing the batched round: ~9 s per mechanism
class BatchedSumTest(parameterized.TestCase):

  @parameterized.parameters('ddg', 'cpbm')
  def test_refuses_and_flags_like_the_process(self, kind):
    value_type = tff.TensorType(np.float64, [8])
    batched = simulation.BatchedSum(_factory(kind), value_type)
    capacity = batched.ring.capacity
    values = np.stack(_clients(capacity + 1))
    with self.assertRaisesRegex(rounds.RoundRefusedError,
                                f'{capacity + 1} clients'):
      batched(values, 0, 1)
    _, post = batched(values[:capacity], 0, 1)
    self.assertFalse(post['sum_may_wrap'])
    flagged = simulation.BatchedSum(_factory(kind, on_wrap='flag'), value_type)
    _, post = flagged(values, 0, 1)
    self.assertTrue(post['sum_may_wrap'])
