"""local_workers: secure sums on several worker_binary processes.

Each test starts its own workers (two, on loopback ports) and compares with
the single-process test context, which conftest installs as the default.
"""

import os
import shutil
import time
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.utils import workers

_MODULUS = 2**16
_NUM_CLIENTS = 6


@tff.federated_computation(
    tff.FederatedType(tff.TensorType(np.int32, [5]), tff.CLIENTS))
def _secure_modular_sum(values):
  return tff.backends.mapreduce.federated_secure_modular_sum(
      values, np.int32(_MODULUS))


def _client_values():
  rng = np.random.default_rng(7)
  # Sum over 6 clients exceeds the modulus: the residue is checked too.
  return [
      rng.integers(0, _MODULUS, size=5).astype(np.int32)
      for _ in range(_NUM_CLIENTS)
  ]


def _alive(pid):
  return os.path.exists(f'/proc/{pid}')


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class LocalWorkersTest(tf.test.TestCase):

  def test_secure_modular_sum_matches_single_process(self):
    values = _client_values()
    expected = np.sum(np.array(values, np.int64), axis=0) % _MODULUS
    single = _secure_modular_sum(values)  # default (test) context
    with workers.local_workers(num_workers=2) as w:
      self.assertLen(w.pids, 2)
      self.assertTrue(all(t.startswith('127.0.0.1:') for t in w.targets))
      multi = _secure_modular_sum(values)
      # Every worker ran up_to_merge on half of the clients.
      self.assertEqual(sorted(c[0] for c in w.clients_per_worker), [3, 3])
      # Fewer clients than workers: one slice only.
      self.assertAllEqual(_secure_modular_sum(values[:1]), values[0])
      pids = w.pids
    self.assertAllEqual(single, expected)
    self.assertAllEqual(multi, single)
    self.assertFalse([p for p in pids if _alive(p)])

  def test_tff_secure_modular_sum_factory(self):
    process = tff.aggregators.SecureModularSumFactory(
        _MODULUS, symmetric_range=False).create(tff.TensorType(np.int32, [5]))
    values = _client_values()
    single = process.next(process.initialize(), values)
    with workers.local_workers(num_workers=2) as w:
      multi = process.next(process.initialize(), values)
      pids = w.pids
    self.assertAllEqual(multi.result, single.result)
    self.assertAllEqual(multi.result,
                        np.sum(np.array(values, np.int64), 0) % _MODULUS)
    self.assertFalse([p for p in pids if _alive(p)])

  @pytest.mark.slow
  def test_discrete_gaussian_process_matches_single_process(self):
    value_type = tff.TensorType(np.float32, [8])
    rng = np.random.default_rng(3)
    values = [
        rng.normal(size=8).astype(np.float32) for _ in range(_NUM_CLIENTS)
    ]
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')  # the test-seed warning
      seeded = DiscreteGaussianSumFactory.from_tff_arguments(
          noise_multiplier=0.0,
          expected_clients_per_round=_NUM_CLIENTS,
          bits=16,
          l2_clip=10.0,
          seed=11).create(value_type)
    unseeded = DiscreteGaussianSumFactory.from_tff_arguments(
        noise_multiplier=0.0,
        expected_clients_per_round=_NUM_CLIENTS,
        bits=16,
        l2_clip=10.0).create(value_type)
    single = seeded.next(seeded.initialize(), values)
    with workers.local_workers(num_workers=2) as w:
      multi = seeded.next(seeded.initialize(), values)
      fresh = unseeded.next(unseeded.initialize(), values)
      pids = w.pids
    self.assertIsInstance(multi, tff.templates.MeasuredProcessOutput)
    # Same test seed: bit-identical result, state and measurements.
    self.assertAllEqual(multi.result, single.result)
    tf.nest.map_structure(self.assertAllEqual, dict(multi.state),
                          dict(single.state))
    tf.nest.map_structure(self.assertAllEqual, dict(multi.measurements),
                          dict(single.measurements))
    self.assertEqual(multi.measurements['participating_clients'], _NUM_CLIENTS)
    # OS-entropy seeds, no noise: only the rounding error remains.
    self.assertAllClose(fresh.result, np.sum(values, axis=0), atol=0.05)
    self.assertFalse([p for p in pids if _alive(p)])

  def test_workers_ended_and_context_restored_on_exception(self):
    before = tff.framework.get_context_stack().current
    with self.assertRaisesRegex(ValueError, 'inside the block'):
      with workers.local_workers(num_workers=2) as w:
        pids = w.pids
        self.assertTrue(all(_alive(p) for p in pids))
        self.assertIs(tff.framework.get_context_stack().current, w.context)
        raise ValueError('inside the block')
    self.assertIs(tff.framework.get_context_stack().current, before)
    self.assertFalse([p for p in pids if _alive(p)])
    self.assertFalse(os.path.exists(w.log_dir))

  def test_second_listener_on_a_port_is_detected(self):
    # gRPC listens with SO_REUSEPORT: a second worker on a taken port starts
    # fine, and connections would be spread over both.
    first = workers.start_workers(1)[0]
    log = os.path.join(os.path.dirname(first.log_path), 'second.log')
    second = workers.start_worker(first.port, log)
    try:
      # The port answers as soon as the *first* worker does: wait until the
      # second one listens too (slow under load).
      workers.wait_ready(second)
      deadline = time.monotonic() + 60.0
      while not (workers._listening_inodes(second.port)  # pylint: disable=protected-access  # tests a private part
                 & workers._socket_inodes(second.pid)):  # pylint: disable=protected-access  # tests a private part
        self.assertIsNone(second.process.poll(), 'second worker exited')
        self.assertLess(time.monotonic(), deadline,
                        'second worker never listened')
        time.sleep(0.1)
      self.assertIsNone(second.process.poll())
      self.assertFalse(workers.owns_port(first))
      self.assertFalse(workers.owns_port(second))
    finally:
      workers.end_workers([first, second])
      shutil.rmtree(os.path.dirname(first.log_path))
    self.assertFalse(_alive(first.pid) or _alive(second.pid))

  def test_dead_worker_raises_instead_of_hanging(self):
    values = _client_values()
    with workers.local_workers(num_workers=2) as w:
      victim = w.workers[1]
      workers.end_workers([victim])
      with self.assertRaises(workers.WorkerDiedError):
        _secure_modular_sum(values)
      pids = w.pids
    self.assertFalse([p for p in pids if _alive(p)])
    # A worker exited by itself: its logs are kept for the user.
    self.assertTrue(os.path.isdir(w.log_dir))
    shutil.rmtree(w.log_dir)
