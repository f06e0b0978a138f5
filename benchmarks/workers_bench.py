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

import os
import statistics
import time
import warnings

import _harness as harness  # (sets sys.path)
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.analytics import build_quantile_process
from tff_ddp.analytics import QuantileSetting
from tff_ddp.utils import processes
from tff_ddp.utils import workers as workers_lib

_VECTORS = {}


def _vectors(clients, dim):
  """The secure_sum and ddg client values (one seeded stream, as before)."""
  if (clients, dim) not in _VECTORS:
    rng = np.random.default_rng(0)
    ints = [
        rng.integers(0, 2**16, size=dim).astype(np.int32)
        for _ in range(clients)
    ]
    floats = [(v / np.linalg.norm(v)).astype(np.float32)
              for v in (rng.normal(size=dim) for _ in range(clients))]
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
      self.process = DiscreteGaussianSumFactory.from_tff_arguments(
          noise_multiplier=1.0,
          expected_clients_per_round=1000,
          bits=20,
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
    values = (self.UPPER * rng.beta(2.0, 5.0, size=clients)).astype(np.float32)
    self.sorted = np.sort(values.astype(np.float64))
    self.values = list(values)
    self.clients = clients
    self.process = build_quantile_process('flat',
                                          'discrete_gaussian',
                                          lower_bound=self.LOWER,
                                          upper_bound=self.UPPER,
                                          num_bins=self.BINS,
                                          quantiles=self.LEVELS,
                                          setting=QuantileSetting(
                                              clients,
                                              1.0,
                                              1e-5,
                                              bits=self.BITS))

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
    index = np.floor((values - np.float32(_Quantile.LOWER)) /
                     np.float32(width)).astype(np.int64)
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
        layers.append(
            tf.keras.layers.Dense(
                hidden,
                activation='relu',
                kernel_initializer=tf.keras.initializers.GlorotUniform(seed=4)))
      layers.append(
          tf.keras.layers.Dense(
              10,
              kernel_initializer=tf.keras.initializers.GlorotUniform(seed=5)))
      return tff.learning.models.from_keras_model(
          tf.keras.Sequential(layers),
          input_spec=(tf.TensorSpec([None, 784], tf.float32),
                      tf.TensorSpec([None, 1], tf.int32)),
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    self.num_params = 784 * hidden + hidden + hidden * 10 + 10 if hidden \
        else 784 * 10 + 10
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      factory = DiscreteGaussianSumFactory.from_tff_arguments(
          noise_multiplier=1.0,
          expected_clients_per_round=clients,
          bits=20,
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
    change = np.sqrt(
        sum(
            np.sum((np.asarray(n, np.float64) - o)**2)
            for o, n in zip(old, new)))
    assert change > 0, 'model unchanged'
    return f'train loss {loss:.3f}, |model change| {change:.3g}'


_WORKLOADS = {
    'secure_sum':
        lambda sizes: _SecureSum(sizes['clients'], sizes['dim']),
    'ddg':
        lambda sizes: _Ddg(sizes['clients'], sizes['dim']),
    'quantile':
        lambda sizes: _Quantile(sizes['quantile_clients']),
    'floor':
        lambda sizes: _HistogramFloor(sizes['quantile_clients']),
    'fedavg':
        lambda sizes: _FedAvg(sizes['fedavg_clients'], sizes['fedavg_hidden']),
}


def _time(fn, reps, worker_pids):
  """Median wall, Python CPU and worker CPU of `reps` calls after a warm-up.

  Raises if a worker was replaced during a timed call: TFF's test context
  restarts a worker that crashed and repeats the call, so the result is
  right but the time is not the round's (and the dead worker's CPU is
  lost: a negative worker CPU was how such runs showed before).
  """
  fn()  # warm-up: compilation, executor creation
  timings, results = [], []
  for _ in range(reps):
    with harness.timed(worker_pids) as timing:
      results.append(fn())
    if timing.workers_changed:
      raise RuntimeError(
          'a TFF worker was replaced during a timed round: it crashed and '
          'the call was repeated, so this round\'s time is not a '
          'measurement (see dmesg; a stack overflow needs '
          'processes.raise_worker_stack_limit())')
    timings.append(timing)
  return tuple(
      statistics.median(getattr(t, field)
                        for t in timings)
      for field in ('wall', 'cpu', 'workers_cpu')) + (results[-1],)


def _largest_tf_computation(comp):
  """(non-constant ops, ops in its function library) of the largest
  TensorFlow computation inside the TFF computation `comp` -- the client's,
  in these rounds. Per-op overhead is most of what a small client costs."""
  from tensorflow_federated.proto.v0 import computation_pb2
  counts = []

  def walk(message):
    if (isinstance(message, computation_pb2.Computation) and
        message.WhichOneof('computation') == 'tensorflow'):
      graph = tf.compat.v1.GraphDef()
      message.tensorflow.graph_def.Unpack(graph)
      counts.append((sum(node.op != 'Const' for node in graph.node),
                     sum(len(f.node_def) for f in graph.library.function)))
    for field, value in message.ListFields():
      if field.type == field.TYPE_MESSAGE:
        for item in (value if field.label == field.LABEL_REPEATED else [value]):
          walk(item)

  walk(comp.to_compiled_building_block().proto)
  return max(counts)


def run(clients=1000,
        dim=64,
        quantile_clients=100000,
        fedavg_clients=50,
        fedavg_hidden=100,
        reps=3,
        workers=(1, 2, 4),
        unthreaded=(2, 4),
        workloads=('secure_sum', 'ddg'),
        pinned=False):
  """One row per (configuration, workload): median wall and CPU seconds."""
  unknown = [n for n in workloads if n not in _WORKLOADS]
  if unknown:
    raise harness.UsageError(f'--workloads: unknown {unknown}; choose from '
                             f'{", ".join(_WORKLOADS)}')
  sizes = dict(clients=clients,
               dim=dim,
               quantile_clients=quantile_clients,
               fedavg_clients=fedavg_clients,
               fedavg_hidden=fedavg_hidden)
  # Built once (data, tracing), before any worker starts.
  built = {}
  for name in workloads:
    t0 = time.perf_counter()
    built[name] = _WORKLOADS[name](sizes)
    comp = getattr(built[name], 'comp', None) or getattr(
        built[name], 'process').next
    ops, library = _largest_tf_computation(comp)
    print(
        f'{name:10s} built in {time.perf_counter() - t0:.1f} s; its largest '
        f'TF computation has {ops} non-constant ops (+ {library} in '
        'functions)',
        flush=True)

  configs = [('test ctx (1 proc)', None, True, None)]
  configs += [(f'{n} worker(s)', n, True, None) for n in workers]
  configs += [(f'{n} workers, unthreaded', n, False, None) for n in unthreaded]
  if pinned:
    configs += [('1 worker on cpu0', 1, True, ['0']),
                ('2 workers cpu0+cpu1', 2, True, ['0', '1']),
                ('2 workers cpu0+cpu1, unthreaded', 2, False, ['0', '1'])]

  # One test context (one local worker, started by TFF) for all workloads
  # of the 'test ctx' configuration; the others install theirs over it.
  # The harness ends the workers by pid (SIGTERM) before it drops the
  # context: its finalizer sends SIGINT and waits, for ever when the worker
  # inherited SIGINT ignored (a script started with `cmd &`).
  processes.use_test_context()
  sized = []
  if {'secure_sum', 'ddg'} & set(workloads):
    sized.append(f'secure_sum/ddg: {clients} clients, d={dim}')
  if 'quantile' in workloads:
    sized.append(f'quantile: {quantile_clients} clients, flat, '
                 f'{_Quantile.BINS} bins')
  if 'fedavg' in workloads:
    sized.append(f'fedavg: {fedavg_clients} clients, '
                 f'{built["fedavg"].num_params} parameters')
  table = harness.Table(
      [('workload', 'workload', 's'), ('configuration', 'configuration', 's'),
       ('wall', 'wall s', '.2f'), ('python_cpu', 'Python CPU s', '.2f'),
       ('workers_cpu', 'workers CPU s', '.2f')],
      title=f'{"; ".join(sized)}; median of {reps} rounds, shared 2-core '
      f'machine ({os.cpu_count()} cpus visible)')
  for label, n, threaded, cpu_sets in configs:
    for name in workloads:
      workload = built[name]
      workload.reset()
      if n is None:
        wall, py, wk, res = _time(workload, reps, processes.descendant_pids)
      else:
        with workers_lib.local_workers(num_workers=n,
                                       threaded=threaded,
                                       cpu_sets=cpu_sets) as w:
          wall, py, wk, res = _time(workload, reps, lambda: w.pids)  # pylint: disable=cell-var-from-loop  # called within the same iteration
      note = workload.check(res)
      table.add(workload=name,
                configuration=label,
                wall=wall,
                python_cpu=py,
                workers_cpu=wk,
                check=note)
      print(
          f'{name:10s} {label:24s} wall {wall:6.2f} s  python cpu '
          f'{py:6.2f} s  workers cpu {wk:6.2f} s  {note}',
          flush=True)
  return table


def _names(text):
  """'a,b,' -> ('a', 'b'): the comma-separated lists of the options."""
  return tuple(n for n in text.split(',') if n)


def _ints(text):
  return tuple(int(n) for n in _names(text))


if __name__ == '__main__':
  harness.main(
      run,
      __doc__,
      clients='clients of secure_sum and ddg',
      dim='dimension of secure_sum and ddg',
      quantile_clients='clients of quantile and floor',
      fedavg_clients='clients of fedavg',
      fedavg_hidden='hidden units of the FedAvg model (0: 784-10 softmax '
      'regression)',
      reps='timed rounds per configuration and workload',
      workers=harness.arg('numbers of local workers, comma-separated',
                          type=_ints,
                          nargs=None),
      unthreaded=harness.arg(
          'worker counts also run without per-worker threads (as TFF '
          'would), to show serialisation',
          type=_ints,
          nargs=None),
      workloads=harness.arg('comma-separated, of ' + ','.join(_WORKLOADS),
                            type=_names,
                            nargs=None),
      pinned='also: 1 worker on cpu 0 vs 2 workers on cpus 0 and 1 '
      '(taskset), threaded and unthreaded')
