"""Timing of one round on 1, 2, 4 local worker_binary processes.

Shared machine (2 cores, other jobs running): numbers are indicative only.
Per configuration: one warm-up round (compilation), then --reps timed rounds;
the table gives the median wall time, and the CPU seconds spent by this
Python process (serialising the client values, orchestration) and by the
workers (sum over their pids, from /proc/<pid>/stat) per round.

Workloads (--workloads, comma-separated; each checked after its rounds):
  secure_sum  federated_secure_modular_sum of --clients int32[--dim] vectors
              (m = 2^16), equal to the numpy residue.
  ddg         DiscreteGaussianSumFactory.next on --clients unit-norm
              float32[--dim] vectors.
  quantile    build_quantile_process('flat', 'discrete_gaussian', [0, 10],
              64 bins, quartiles, epsilon 1, delta 1e-5, 24 bits) over
              --quantile-clients values (one float32 each, 10 * Beta(2, 5));
              each estimate within the true quantiles at p -+ 4 CDF-noise
              stddevs (2 * noisy_total_stddev / n), widened by a bin width.
  floor       the quantile round's floor: a one-hot int32[64] per client
              (the same values) and the secure sum, no DP, no encoding;
              equal to numpy's histogram.
  fedavg      one DP-FedAvg round (build_unweighted_fed_avg, model update
              through UnweightedMeanFactory(DiscreteGaussianSumFactory,
              SecureSumFactory(1, 0))) of a 784-(--fedavg-hidden)-10 Keras
              model over --fedavg-clients clients of 8 synthetic examples;
              the training loss is finite and the model changed (noise
              multiplier 1, l2 clip 1, 20 bits: with few clients the change
              is mostly the DP noise, so this checks that the round ran).
Data are seeded (the same in every configuration and run).

  python benchmarks/workers_bench.py [--clients 1000] [--dim 64] [--reps 3]
      [--workloads secure_sum,ddg] [--workers 1,2,4] [--unthreaded 2,4]
      [--quantile-clients 100000] [--fedavg-clients 50] [--fedavg-hidden 100]
      [--pinned]
"""

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from tff_ddp.aggregators import DiscreteGaussianSumFactory  # pylint: disable=g-import-not-at-top
from tff_ddp.analytics import build_quantile_process  # pylint: disable=g-import-not-at-top
from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
from tff_ddp.utils import workers  # pylint: disable=g-import-not-at-top

_TICKS = os.sysconf('SC_CLK_TCK')


def _cpu_seconds(pids):
  total = 0.0
  for pid in pids:
    try:
      with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
      total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    except OSError:
      pass
  return total


_VECTORS = {}


def _vectors(clients, dim):
  """The secure_sum and ddg client values (one seeded stream, as before)."""
  if (clients, dim) not in _VECTORS:
    rng = np.random.default_rng(0)
    ints = [rng.integers(0, 2**16, size=dim).astype(np.int32)
            for _ in range(clients)]
    floats = [(v / np.linalg.norm(v)).astype(np.float32) for v in
              (rng.normal(size=dim) for _ in range(clients))]
    _VECTORS[(clients, dim)] = ints, floats
  return _VECTORS[(clients, dim)]


class _Workload:
  """One round of a computation: `reset()` (new configuration: state is
  initialised again in the next round's context), `__call__()` runs the
  round, `check(result)` raises AssertionError if it is wrong and returns a
  short note for the log."""

  _state = None

  def reset(self):
    self._state = None

  def _initial_state(self):
    if self._state is None:
      self._state = self.process.initialize()
    return self._state


class _SecureSum(_Workload):

  def __init__(self, clients, dim, modulus=2**16):
    self.ints = _vectors(clients, dim)[0]
    self.expected = np.sum(np.array(self.ints, np.int64), 0) % modulus

    @tff.federated_computation(
        tff.FederatedType(tff.TensorType(np.int32, [dim]), tff.CLIENTS))
    def secure_sum(values):
      return tff.backends.mapreduce.federated_secure_modular_sum(
          values, np.int32(modulus))
    self.comp = secure_sum

  def __call__(self):
    return self.comp(self.ints)

  def check(self, result):
    assert np.array_equal(result, self.expected), (result, self.expected)
    return 'equal to numpy'


class _Ddg(_Workload):

  def __init__(self, clients, dim):
    self.floats = _vectors(clients, dim)[1]
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      self.process = DiscreteGaussianSumFactory(
          noise_multiplier=1.0, expected_clients_per_round=1000, bits=20,
          l2_clip=1.0).create(tff.TensorType(np.float32, [dim]))

  def __call__(self):
    return self.process.next(self._initial_state(), self.floats).result

  def check(self, result):
    assert np.all(np.isfinite(result)), result
    return ''


class _Quantile(_Workload):
  """The flat DDG quantile round of issue 14 (one float32 per client)."""

  LOWER, UPPER, BINS, LEVELS = 0.0, 10.0, 64, (0.25, 0.5, 0.75)
  # 18 bits (the paper's) hold at most ~10^4 clients at epsilon 1 (the ring must
  # take n noise shares); 24 hold 10^5 with room.
  BITS = 24

  def __init__(self, clients):
    rng = np.random.default_rng(2)
    values = (self.UPPER * rng.beta(2.0, 5.0, size=clients)).astype(
        np.float32)
    self.sorted = np.sort(values.astype(np.float64))
    self.values = list(values)
    self.clients = clients
    self.process = build_quantile_process(
        'flat', 'discrete_gaussian', lower_bound=self.LOWER,
        upper_bound=self.UPPER, num_bins=self.BINS, quantiles=self.LEVELS,
        expected_clients_per_round=clients, epsilon=1.0, delta=1e-5,
        bits=self.BITS)

  def __call__(self):
    return self.process.next(self._initial_state(), self.values)

  def check(self, output):
    status = output.measurements['status']
    status = status.decode() if isinstance(status, bytes) else str(status)
    assert status == 'ok', status
    # Error of the estimated CDF at any bin edge: (S_k - F T) / n with S_k
    # the noisy cumulative count (noise stddev <= that of the total T, whose
    # stddev the round reports): stddev <= 2 * noisy_total_stddev / n.
    # Allow 4 of those in rank, and one bin width in value (the estimate is
    # a bin edge).
    tol = 4 * 2 * float(output.measurements['noisy_total_stddev']) / \
        self.clients
    width = (self.UPPER - self.LOWER) / self.BINS
    estimates = np.asarray(output.result, np.float64)
    for p, q in zip(self.LEVELS, estimates):
      lo = np.quantile(self.sorted, max(p - tol, 0.0),
                       method='inverted_cdf') - width
      hi = np.quantile(self.sorted, min(p + tol, 1.0),
                       method='inverted_cdf') + width
      assert lo <= q <= hi, (p, q, lo, hi, tol)
    true = np.quantile(self.sorted, self.LEVELS, method='inverted_cdf')
    return (f'estimates {np.round(estimates, 3).tolist()} true '
            f'{np.round(true, 3).tolist()} (rank tol {tol:.2g}, '
            f'bin {width:.3g})')


class _HistogramFloor(_Workload):
  """The floor of a quantile round: each client one-hot encodes its value
  into the 64 bins and the server takes the secure sum (no DP, no
  encoding); the same values as `quantile`."""

  def __init__(self, clients):
    rng = np.random.default_rng(2)
    values = (_Quantile.UPPER * rng.beta(2.0, 5.0, size=clients)).astype(
        np.float32)
    self.values = list(values)
    width = (_Quantile.UPPER - _Quantile.LOWER) / _Quantile.BINS
    # The same float32 arithmetic as the TF function below (IEEE division).
    index = np.floor((values - np.float32(_Quantile.LOWER))
                     / np.float32(width)).astype(np.int64)
    self.expected = np.bincount(np.clip(index, 0, _Quantile.BINS - 1),
                                minlength=_Quantile.BINS) % 2**24

    @tff.tensorflow.computation(np.float32)
    def one_hot(x):
      index = tf.cast(tf.floor((x - _Quantile.LOWER) / width), tf.int32)
      index = tf.clip_by_value(index, 0, _Quantile.BINS - 1)
      return tf.one_hot(index, _Quantile.BINS, dtype=tf.int32)

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def floor_round(values):
      return tff.backends.mapreduce.federated_secure_modular_sum(
          tff.federated_map(one_hot, values), np.int32(2**24))
    self.comp = floor_round

  def __call__(self):
    return self.comp(self.values)

  def check(self, result):
    assert np.array_equal(result, self.expected), (result, self.expected)
    return 'histogram equal to numpy'


class _FedAvg(_Workload):
  """One DP-FedAvg round, model update through the DDG secure sum."""

  EXAMPLES = 8

  def __init__(self, clients, hidden):
    rng = np.random.default_rng(3)
    # Labels from a fixed random linear map, so that there is something to
    # learn; inputs like flattened 28 x 28 images in [0, 1].
    w = rng.normal(size=(784, 10))
    self.data = []
    for _ in range(clients):
      x = rng.uniform(size=(self.EXAMPLES, 784)).astype(np.float32)
      y = np.argmax(x @ w, axis=1).astype(np.int32)[:, None]
      self.data.append(
          tf.data.Dataset.from_tensor_slices((x, y)).batch(self.EXAMPLES))

    def model_fn():
      layers = [tf.keras.layers.InputLayer(input_shape=(784,))]
      if hidden:
        layers.append(tf.keras.layers.Dense(
            hidden, activation='relu',
            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=4)))
      layers.append(tf.keras.layers.Dense(
          10, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=5)))
      return tff.learning.models.from_keras_model(
          tf.keras.Sequential(layers),
          input_spec=(tf.TensorSpec([None, 784], tf.float32),
                      tf.TensorSpec([None, 1], tf.int32)),
          loss=tf.keras.losses.SparseCategoricalCrossentropy(
              from_logits=True))

    self.num_params = 784 * hidden + hidden + hidden * 10 + 10 if hidden \
        else 784 * 10 + 10
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      factory = DiscreteGaussianSumFactory(
          noise_multiplier=1.0, expected_clients_per_round=clients, bits=20,
          l2_clip=1.0)
      self.process = tff.learning.algorithms.build_unweighted_fed_avg(
          model_fn,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
          model_aggregator=tff.aggregators.UnweightedMeanFactory(
              value_sum_factory=factory,
              count_sum_factory=tff.aggregators.SecureSumFactory(1, 0)))

  def __call__(self):
    state = self._initial_state()
    return state, self.process.next(state, self.data)

  def check(self, result):
    before, output = result
    loss = float(output.metrics['client_work']['train']['loss'])
    assert np.isfinite(loss), loss
    old = tf.nest.flatten(before.global_model_weights.trainable)
    new = tf.nest.flatten(output.state.global_model_weights.trainable)
    assert len(old) == len(new) and all(
        np.all(np.isfinite(n)) for n in new), 'non-finite model'
    change = np.sqrt(sum(np.sum((np.asarray(n, np.float64) - o) ** 2)
                         for o, n in zip(old, new)))
    assert change > 0, 'model unchanged'
    return f'train loss {loss:.3f}, |model change| {change:.3g}'


_WORKLOADS = {
    'secure_sum': lambda a: _SecureSum(a.clients, a.dim),
    'ddg': lambda a: _Ddg(a.clients, a.dim),
    'quantile': lambda a: _Quantile(a.quantile_clients),
    'floor': lambda a: _HistogramFloor(a.quantile_clients),
    'fedavg': lambda a: _FedAvg(a.fedavg_clients, a.fedavg_hidden),
}


def _time(fn, reps, worker_pids):
  """Median wall, Python CPU and worker CPU of `reps` calls after a warm-up.

  Raises if a worker was replaced during a timed call: TFF's test context
  restarts a worker that crashed and repeats the call, so the result is
  right but the time is not the round's (and the dead worker's CPU is
  lost: a negative worker CPU was how such runs showed before).
  """
  fn()  # warm-up: compilation, executor creation
  walls, py_cpu, wk_cpu, results = [], [], [], []
  for _ in range(reps):
    before = set(worker_pids())
    c0, w0, t0 = time.process_time(), _cpu_seconds(before), \
        time.perf_counter()
    results.append(fn())
    walls.append(time.perf_counter() - t0)
    py_cpu.append(time.process_time() - c0)
    after = set(worker_pids())
    if after != before:
      raise RuntimeError(
          'a TFF worker was replaced during a timed round (pids '
          f'{sorted(before)} -> {sorted(after)}): it crashed and the call '
          'was repeated, so this round\'s time is not a measurement (see '
          'dmesg; a stack overflow needs '
          'processes.raise_worker_stack_limit())')
    wk_cpu.append(_cpu_seconds(after) - w0)
  return (statistics.median(walls), statistics.median(py_cpu),
          statistics.median(wk_cpu), results[-1])


def _largest_tf_computation(comp):
  """(non-constant ops, ops in its function library) of the largest
  TensorFlow computation inside the TFF computation `comp` -- the client's,
  in these rounds. Per-op overhead is most of what a small client costs."""
  from tensorflow_federated.proto.v0 import computation_pb2  # pylint: disable=g-import-not-at-top
  counts = []

  def walk(message):
    if (isinstance(message, computation_pb2.Computation)
        and message.WhichOneof('computation') == 'tensorflow'):
      graph = tf.compat.v1.GraphDef()
      message.tensorflow.graph_def.Unpack(graph)
      counts.append((sum(node.op != 'Const' for node in graph.node),
                     sum(len(f.node_def) for f in graph.library.function)))
    for field, value in message.ListFields():
      if field.type == field.TYPE_MESSAGE:
        for item in (value if field.label == field.LABEL_REPEATED
                     else [value]):
          walk(item)

  walk(comp.to_compiled_building_block().proto)
  return max(counts)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--clients', type=int, default=1000,
                      help='clients of secure_sum and ddg')
  parser.add_argument('--dim', type=int, default=64,
                      help='dimension of secure_sum and ddg')
  parser.add_argument('--quantile-clients', type=int, default=100000)
  parser.add_argument('--fedavg-clients', type=int, default=50)
  parser.add_argument('--fedavg-hidden', type=int, default=100,
                      help='hidden units of the FedAvg model (0: 784-10 '
                      'softmax regression)')
  parser.add_argument('--reps', type=int, default=3)
  parser.add_argument('--workers', default='1,2,4')
  parser.add_argument('--unthreaded', default='2,4',
                      help='worker counts also run without per-worker '
                      'threads (as TFF would), to show serialisation')
  parser.add_argument('--workloads', default='secure_sum,ddg',
                      help='comma-separated, of ' + ','.join(_WORKLOADS))
  parser.add_argument('--pinned', action='store_true',
                      help='also: 1 worker on cpu 0 vs 2 workers on cpus 0 '
                      'and 1 (taskset), threaded and unthreaded')
  args = parser.parse_args()
  # 10^5-value calls overflow worker_binary's default 8 MiB thread stacks;
  # the workers started below inherit the raised limit.
  processes.raise_worker_stack_limit()

  names = [n for n in args.workloads.split(',') if n]
  unknown = [n for n in names if n not in _WORKLOADS]
  if unknown:
    parser.error(f'unknown workloads {unknown}; choose from '
                 f'{", ".join(_WORKLOADS)}')
  # Built once (data, tracing), before any worker starts.
  built = {}
  for name in names:
    t0 = time.perf_counter()
    built[name] = _WORKLOADS[name](args)
    comp = getattr(built[name], 'comp', None) or getattr(
        built[name], 'process').next
    ops, library = _largest_tf_computation(comp)
    print(f'{name:10s} built in {time.perf_counter() - t0:.1f} s; its largest '
          f'TF computation has {ops} non-constant ops (+ {library} in '
          'functions)', flush=True)

  configs = [('test ctx (1 proc)', None, True, None)]
  configs += [(f'{n} worker(s)', n, True, None)
              for n in map(int, filter(None, args.workers.split(',')))]
  configs += [(f'{n} workers, unthreaded', n, False, None)
              for n in map(int, filter(None, args.unthreaded.split(',')))]
  if args.pinned:
    configs += [('1 worker on cpu0', 1, True, ['0']),
                ('2 workers cpu0+cpu1', 2, True, ['0', '1']),
                ('2 workers cpu0+cpu1, unthreaded', 2, False, ['0', '1'])]

  # One test context (one local worker, started by TFF) for all workloads
  # of the 'test ctx' configuration, installed through the mechanism that
  # `release_tff` below knows how to drop; the others install theirs over it.
  processes.use_test_context()
  rows = []
  try:
    for label, n, threaded, cpu_sets in configs:
      for name in names:
        workload = built[name]
        workload.reset()
        if n is None:
          wall, py, wk, res = _time(workload, args.reps,
                                    processes.descendant_pids)
        else:
          with workers.local_workers(num_workers=n, threaded=threaded,
                                     cpu_sets=cpu_sets) as w:
            wall, py, wk, res = _time(workload, args.reps, lambda: w.pids)
        note = workload.check(res)
        rows.append((name, label, wall, py, wk))
        print(f'{name:10s} {label:24s} wall {wall:6.2f} s  python cpu '
              f'{py:6.2f} s  workers cpu {wk:6.2f} s  {note}', flush=True)
  finally:
    # The workers are ended by pid (SIGTERM) before the test context is
    # dropped: its finalizer sends SIGINT and waits, for ever when the
    # worker inherited SIGINT ignored (a script started with `cmd &`).
    processes.release_tff()

  sizes = []
  if {'secure_sum', 'ddg'} & set(names):
    sizes.append(f'secure_sum/ddg: {args.clients} clients, d={args.dim}')
  if 'quantile' in names:
    sizes.append(f'quantile: {args.quantile_clients} clients, flat, '
                 f'{_Quantile.BINS} bins')
  if 'fedavg' in names:
    sizes.append(f'fedavg: {args.fedavg_clients} clients, '
                 f'{built["fedavg"].num_params} parameters')
  print(f'\n{"; ".join(sizes)}; median of {args.reps} '
        f'rounds, shared 2-core machine ({os.cpu_count()} cpus visible)')
  print('| workload | configuration | wall s | Python CPU s | workers CPU s |')
  print('|---|---|---|---|---|')
  for name, label, wall, py, wk in rows:
    print(f'| {name} | {label} | {wall:.2f} | {py:.2f} | {wk:.2f} |')


if __name__ == '__main__':
  main()
