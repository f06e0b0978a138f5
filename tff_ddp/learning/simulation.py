"""Fast rounds of the learning processes for sweeps (linear softmax models).

A TFF round of `tff_ddp.learning` with 100 clients costs seconds (per-client
plumbing); the B.3 sweep of the quantile paper (1000 rounds per run, a grid
of configurations, several seeds and budgets) needs the same algorithm
without it. For the linear softmax model of the B.3 task this module runs
rounds on numpy batches and composes the *same* pieces as the processes:

* local training: `local_steps` full-batch gradient steps of size
  `learning_rate` on the mean cross-entropy (the process's client update
  with SGD on one-batch datasets); u_i = w - w_i;
* non-private weightings: the numpy references of
  `tff_ddp.learning.weighting` (which the tests check against the process);
* DP-Delta-FL: the loss histogram is `tff_ddp.analytics.quantiles.simulation`'s
  distribution-exact noisy sum of the same encodings with the same
  calibrated aggregator, the CDF `Encoding.cdf`, the tail
  `weighting.private_tail` / `weighting.in_tail` (the process's own
  functions); the update sum is `tff_ddp.aggregators.simulation.BatchedSum`
  of the process's `DiscreteGaussianSumFactory` (its client and server code,
  batched), divided as the process divides;
* the server step w <- w - aggregate (SGD, learning rate 1).

What differs from the TFF process: float64 instead of float32 for the model
arithmetic, and independent noise streams instead of fresh kernel entropy
(the same distribution). `tff_ddp_tests/learning/simulation_test.py` checks a
non-private run against the TFF process and the private pieces against the
process's round.
"""

import collections
import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_ddp.aggregators import simulation as aggregator_simulation
from tff_ddp.analytics.quantiles import simulation as analytics_simulation
from tff_ddp.learning import privacy as privacy_lib
from tff_ddp.learning import tasks as tasks_lib
from tff_ddp.learning import weighting
from tff_ddp.utils import checks

# The objectives simulated, by name: (tail_fraction, exact) -> Objective.
_OBJECTIVES = {
    weighting.FedAvg.name: lambda theta, exact: weighting.FedAvg(),
    weighting.Superquantile.name: weighting.Superquantile,
}
OBJECTIVES = tuple(_OBJECTIVES)


@dataclasses.dataclass
class RunResult:
  """A simulated run: final weights, per-client errors, per-round traces."""

  kernel: np.ndarray
  bias: np.ndarray
  test_errors: np.ndarray
  validation_errors: np.ndarray
  trace: dict
  epsilon: float


def softmax_loss_and_update(kernel, bias, x, y, learning_rate, local_steps):
  """Per-client loss at (kernel, bias) and update u = w - w_local.

  x [clients, size, features], y [clients, size]; returns loss [clients],
  update_kernel [clients, features, classes], update_bias [clients,
  classes].
  """
  _, size, _ = x.shape
  classes = kernel.shape[1]
  onehot = np.eye(classes)[y]
  xt = np.swapaxes(x, 1, 2)
  k, b = kernel, bias  # shared by all clients until the first step
  loss = None
  for step in range(local_steps):
    if step == 0:
      logits = x @ kernel + bias
    else:
      logits = x @ k + b[:, None, :]
    logits -= logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    if step == 0:
      loss = -(onehot * log_p).sum(-1).mean(-1)
    residual = (np.exp(log_p) - onehot) / size
    k = k - learning_rate * (xt @ residual)
    b = b - learning_rate * residual.sum(1)
  return loss, kernel[None] - k, bias[None] - b


def errors(kernel, bias, clients: tasks_lib.ClientArrays) -> np.ndarray:
  """Per-client misclassification rate."""
  logits = np.einsum('csf,fk->csk', clients.x.astype(np.float64), kernel) + bias
  return (logits.argmax(-1) != clients.y).mean(-1)


def _tail_reader(privacy, theta):
  """(losses, round, seed) -> (the server's private_tail as floats, mask).

  The quantile process's round: the clients' encodings
  (`analytics.quantiles.simulation.encodings`) summed by `BatchedSum` of the
  histogram's own factory, the CDF (`Encoding.cdf`), then
  `weighting.private_tail` and `weighting.in_tail` -- the process's
  functions.
  """
  quantile = privacy.quantile_parameters()
  summer = aggregator_simulation.BatchedSum(quantile.factory,
                                            quantile.value_type)
  encoding, upper = quantile.encoding, privacy.loss_upper_bound
  bins = encoding.num_bins
  exact = privacy.exact_count

  @tf.function
  def post(noisy, losses, num_clients):
    cdf = encoding.cdf(noisy, num_clients if exact else None)
    tail = weighting.private_tail(
        cdf, encoding.estimated_total(noisy),
        privacy.expected_contributors(tf.cast(num_clients, tf.float64)), theta,
        upper, bins, privacy.exact_count, privacy.histogram_tail_count)
    return tail, weighting.in_tail(losses, tail['bin'], upper, bins)

  def read(losses, round_index, seed):
    codes = analytics_simulation.encodings(encoding, losses, 0.0, upper)
    noisy, _ = summer(codes, round_index, seed)
    tail, mask = post(tf.constant(noisy), tf.constant(losses),
                      tf.constant(len(losses), tf.int64))
    return ({
        k: float(v) for k, v in tail.items()
    }, mask.numpy().astype(np.float64))

  return read


class LinearSimulator:
  """Simulated rounds of the learning processes on a linear softmax task.

  Args:
    task: a `tasks.Task` whose clients all hold the same number of examples
      (B.3).
    learning_rate: the client's step size (0.1 in B.3).
    local_steps: full-batch steps per round (1 in B.3).
  """

  def __init__(self,
               task: tasks_lib.Task,
               learning_rate: float = 0.1,
               local_steps: int = 1):
    self.task = task
    self.learning_rate = checks.positive(learning_rate, 'learning_rate')
    self.local_steps = checks.integer(local_steps, 'local_steps', 1)
    self.features = int(np.prod(task.input_shape))
    self.classes = task.num_classes
    self._x = task.train.x.reshape(task.train.num_clients, -1,
                                   self.features).astype(np.float64)
    self._y = task.train.y
    import tensorflow_federated as tff
    self._cache = {}
    self.update_type = tff.StructWithPythonType([
        tff.TensorType(np.float32, [self.features, self.classes]),
        tff.TensorType(np.float32, [self.classes])
    ], list)

  def run(self,
          objective: str,
          rounds: int,
          clients_per_round: int,
          seed: int,
          tail_fraction: Optional[float] = None,
          reweighting: str = 'exact',
          privacy: Optional[privacy_lib.PrivacyConfig] = None,
          trace_every: int = 0,
          cohorts=None) -> RunResult:
    """One run (fresh zero model, cohorts without replacement each round).

    Args:
      objective: 'fedavg' or 'superquantile'.
      rounds, clients_per_round: T and n.
      seed: cohorts and noise.
      tail_fraction, reweighting: as for the processes (non-private
        superquantile: 'exact' or 'threshold').
      privacy: None (non-private) or the PrivacyConfig of DP-Delta-FL /
        DP-FedAvg (quantile_noise_multiplier set iff superquantile).
      trace_every: record test errors every this many rounds (0: never).
      cohorts: optional list of `rounds` index arrays (the clients of each
        round) instead of sampling them.

    With privacy.sampling == 'self' every round has all the task's clients,
    each keeping its data in each release with a private coin of rate
    clients_per_round / N (`BatchedSum` simulates the factories' coins).
    """
    exact = checks.member(reweighting, 'reweighting',
                          weighting.Reweighting) is weighting.Reweighting.EXACT
    weights = _OBJECTIVES[checks.choice(objective, 'objective',
                                        OBJECTIVES)](tail_fraction, exact)
    has_tail = weights.reports_tail
    theta = weights.tail_fraction if has_tail else None
    rounds = checks.integer(rounds, 'rounds', 1)
    m = checks.integer(clients_per_round, 'clients_per_round', 1,
                       self.task.train.num_clients)
    seed = checks.integer(seed, 'seed', 0)
    rng = np.random.default_rng([seed, 0xB3])
    kernel = np.zeros((self.features, self.classes))
    bias = np.zeros(self.classes)
    trace = collections.defaultdict(list)
    private = privacy is not None
    self_sampled = private and privacy.sampling is privacy_lib.Sampling.SELF
    if self_sampled:
      if privacy.population != self.task.train.num_clients:
        raise ValueError(f"sampling='self' puts every client in each round: "
                         f'privacy.population must be the task\'s '
                         f'{self.task.train.num_clients} clients, got '
                         f'{privacy.population}.')
      if cohorts is not None or m != privacy.clients_per_round:
        raise ValueError(
            "sampling='self' draws no cohorts (each client keeps its data "
            'with a private coin): pass no cohorts and clients_per_round = '
            'privacy.clients_per_round (the expected number).')
    summer = read_tail = None  # private rounds only (and with a tail)
    if private:
      if has_tail != privacy.has_quantile:
        raise ValueError('privacy.quantile_noise_multiplier must be set for '
                         'superquantile and only then.')
      # Built (and traced) once per configuration: repeated runs of a
      # sweep reuse them.
      key = ('sum', privacy)
      if key not in self._cache:
        self._cache[key] = aggregator_simulation.BatchedSum(
            privacy.update_factory(), self.update_type)
      summer = self._cache[key]
      if has_tail:
        key = ('tail', privacy, theta)
        if key not in self._cache:
          self._cache[key] = _tail_reader(privacy, theta)
        read_tail = self._cache[key]
    for t in range(rounds):
      if self_sampled:
        cohort = np.arange(self.task.train.num_clients)
      else:
        cohort = (rng.choice(self.task.train.num_clients, m, replace=False)
                  if cohorts is None else np.asarray(cohorts[t]))
      m = len(cohort)
      loss, uk, ub = softmax_loss_and_update(kernel, bias, self._x[cohort],
                                             self._y[cohort],
                                             self.learning_rate,
                                             self.local_steps)
      if not private:
        a = weights.reference_weights(loss)
        kernel = kernel - np.einsum('c,cfk->fk', a, uk)
        bias = bias - a @ ub
        trace['tail_count'].append(float(np.sum(a > 0)))
      else:
        values = np.concatenate([uk.reshape(m, -1), ub], axis=1)
        round_seed = int(rng.integers(2**62))
        if has_tail:
          tail, mask = read_tail(loss.astype(np.float32), t,
                                 round_seed % (2**62))
          values = values * mask[:, None]
          divisor = tail['tail_count']
          trace['tail_count'].append(float(mask.sum()))
          trace['threshold'].append(tail['threshold'])
        else:
          divisor = float(privacy.expected_contributors(m))
        summed, _ = summer(values, t, round_seed % (2**62))
        aggregate = summed / max(divisor, 1.0)
        kernel = kernel - aggregate[:self.features * self.classes].reshape(
            self.features, self.classes)
        bias = bias - aggregate[self.features * self.classes:]
      trace['loss'].append(float(loss.mean()))
      if trace_every and (t + 1) % trace_every == 0:
        trace['test_error_mean'].append(
            float(errors(kernel, bias, self.task.test).mean()))
    epsilon = (privacy.epsilon(self.update_type, rounds)
               if private else float('inf'))
    return RunResult(kernel=kernel,
                     bias=bias,
                     test_errors=errors(kernel, bias, self.task.test),
                     validation_errors=errors(kernel, bias,
                                              self.task.validation),
                     trace=dict(trace),
                     epsilon=epsilon)
