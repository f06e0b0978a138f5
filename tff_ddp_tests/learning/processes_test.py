"""The learning processes in TFF's C++ test context: types and secure-only
aggregation, the tail selection on known losses (statistical), the in-graph
epsilon, and the non-private objectives against numpy references."""

import collections
import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.learning import metrics as learning_metrics
from tff_ddp.learning import privacy as privacy_lib
from tff_ddp.learning import processes
from tff_ddp.learning import simulation
from tff_ddp.learning import tasks
from tff_ddp.learning import weighting
from tff_ddp.utils import rounds

# The known-loss model: one feature, two classes, logits x (1, -1) with the
# weights W = [[1, -1]], b = 0. A client holding the single example (x, 0)
# has loss log(1 + exp(-2x)), so x = -log(exp(F) - 1) / 2 gives it loss F.
_KNOWN = tasks.keras_model_fn(lambda: tasks.linear_keras_model((1,), 2), (1,))
_W = np.array([[1.0, -1.0]], np.float32)


def _client(loss, repeat=1):
  x = -0.5 * math.log(math.expm1(loss))
  return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(x=np.array([[x]], np.float32),
                              y=np.array([0],
                                         np.int32))).repeat(repeat).batch(1)


def _known_updates(losses, lr):
  """One SGD step of size lr on each client's example: u = lr * gradient."""
  x = -0.5 * np.log(np.expm1(losses))
  p0 = 1.0 / (1.0 + np.exp(-2.0 * x))  # softmax(x, -x)[0]
  g = np.stack([-(1 - p0), 1 - p0], axis=1)  # p - onehot(0)
  return lr * x[:, None] * g, lr * g  # kernel rows [n, 2], bias [n, 2]


def _with_known_weights(process):
  state = process.initialize()
  return process.set_model_weights(
      state,
      tff.learning.models.ModelWeights(trainable=[_W,
                                                  np.zeros(2, np.float32)],
                                       non_trainable=[]))


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.mark.slow
class TypeTest(parameterized.TestCase):

  def test_private_processes_use_only_secure_aggregation(self):
    config = privacy_lib.PrivacyConfig(clients_per_round=8,
                                       l2_clip=1.0,
                                       noise_multiplier=1.0,
                                       quantile_noise_multiplier=2.0,
                                       population=100,
                                       delta=1e-3)
    deltafl = processes.build_superquantile_fl(_KNOWN,
                                               0.5,
                                               _sgd(0.1),
                                               privacy=config)
    fedavg = processes.build_dp_fedavg(_KNOWN,
                                       _sgd(0.1),
                                       privacy=privacy_lib.PrivacyConfig(
                                           clients_per_round=8,
                                           l2_clip=1.0,
                                           noise_multiplier=1.0,
                                           population=100,
                                           delta=1e-3))
    for process in (deltafl, fedavg):
      self.assertIsInstance(process, tff.learning.templates.LearningProcess)
      # The model update path, and everything else of the round.
      tff.test.assert_not_contains_unsecure_aggregation(process.next)
      metrics = process.next.type_signature.result.metrics.member
      self.assertEqual(metrics.privacy.epsilon, tff.TensorType(np.float64))
      self.assertEqual(metrics.privacy.adversary, tff.TensorType(np.str_))
      self.assertEqual(metrics.aggregator.participating_clients,
                       tff.TensorType(np.int64))
      state = process.next.type_signature.result.state.member
      self.assertEqual(process.get_model_weights.type_signature.result,
                       state.global_model_weights)
    tail = deltafl.next.type_signature.result.metrics.member.client_work.tail
    self.assertEqual(tail.threshold, tff.TensorType(np.float64))
    self.assertEqual(tail.quantile.cdf, tff.TensorType(np.float64, [16]))
    # The non-private variant ranks the losses in the clear: labelled so.
    plain = processes.build_superquantile_fl(_KNOWN, 0.5, _sgd(0.1))
    with self.assertRaises(AssertionError):
      tff.test.assert_not_contains_unsecure_aggregation(plain.next)

  def test_refused(self):
    config = privacy_lib.PrivacyConfig(clients_per_round=8,
                                       l2_clip=1.0,
                                       noise_multiplier=1.0,
                                       population=100)
    with self.assertRaisesRegex(ValueError, 'quantile_noise_multiplier'):
      processes.build_superquantile_fl(_KNOWN, 0.5, _sgd(0.1), privacy=config)
    with self.assertRaisesRegex(ValueError, 'non-private only'):
      processes.build_superquantile_fl(_KNOWN,
                                       0.5,
                                       _sgd(0.1),
                                       reweighting='exact',
                                       privacy=privacy_lib.PrivacyConfig(
                                           clients_per_round=8,
                                           l2_clip=1.0,
                                           noise_multiplier=1.0,
                                           quantile_noise_multiplier=1.0,
                                           population=100))
    with self.assertRaisesRegex(TypeError, 'Optimizer'):
      processes.build_superquantile_fl(_KNOWN, 0.5, lambda: None)
    with self.assertRaisesRegex(TypeError, 'PrivacyConfig'):
      processes.build_superquantile_fl(_KNOWN, 0.5, _sgd(0.1), privacy={})
    with self.assertRaisesRegex(ValueError, 'tail_fraction'):
      processes.build_superquantile_fl(_KNOWN, 1.5, _sgd(0.1))
    with self.assertRaisesRegex(ValueError, 'needs q'):
      processes.build_baseline('qffl', _KNOWN, _sgd(0.1))
    with self.assertRaisesRegex(ValueError, 'does not apply'):
      processes.build_baseline('fedavg', _KNOWN, _sgd(0.1), tilt=1.0)


@pytest.mark.slow
class PrivateTailTest(parameterized.TestCase):
  """DP-Delta-FL on clients with known losses (statistical)."""

  def test_tail_selection_update_and_epsilon(self):
    n, theta, upper, bins, lr, clip = 40, 0.25, 2.0, 16, 1.0, 10.0
    z_w, z_q = 0.05, 0.5
    losses = np.random.default_rng(7).uniform(0.05, 1.95, n)
    config = privacy_lib.PrivacyConfig(clients_per_round=n,
                                       l2_clip=clip,
                                       noise_multiplier=z_w,
                                       quantile_noise_multiplier=z_q,
                                       loss_upper_bound=upper,
                                       num_bins=bins,
                                       population=400,
                                       delta=1e-4,
                                       seed=None)
    # seed=None: every client draws its noise from its own secret seed, the
    # production law the 6-stddev bounds below are derived for. A fixed test
    # seed makes a client's noise a function of (seed, its message), so the
    # 30 clients outside the tail, which all send the zero update, would
    # draw the SAME noise: stddev 30 sigma instead of sqrt(30) sigma in the
    # sum (measured: about 0.24 instead of 0.05 per coordinate of the mean).
    # Random here, the bounds fail with probability < 1e-8 in all.
    process = processes.build_superquantile_fl(_KNOWN,
                                               theta,
                                               _sgd(lr),
                                               privacy=config)
    state = _with_known_weights(process)
    out = process.next(state, [_client(f) for f in losses])
    tail = out.metrics['client_work']['tail']
    # The bin: eq. 1 on a CDF whose noise per node has stddev z_q l2 =
    # 0.5 * 2 = 1 count; F_j sums <= log2(16) = 4 nodes, stddev <= 2/40 =
    # 0.05. Every bin whose true CDF is within 6 * 0.05 of 1 - theta (plus
    # the eq. 1 slack of one bin's mass) is acceptable; the true eq. 1 bin
    # must be among them (6 stddevs: false failure < 2e-9).
    true_cdf = np.cumsum(
        np.bincount(np.clip(np.floor(losses /
                                     (upper / bins)), 0, bins - 1).astype(int),
                    minlength=bins)) / n
    k = int(tail['bin'])
    self.assertLessEqual(abs(true_cdf[k] - (1 - theta)),
                         np.min(np.abs(true_cdf - (1 - theta))) + 12 * 0.05)
    self.assertAlmostEqual(tail['threshold'], hg.edges(0.0, upper, bins)[k])
    self.assertFalse(tail['fallback'])
    # The threshold is the quantile process's own estimate (eq. 1 on its
    # released CDF).
    self.assertAlmostEqual(
        tail['threshold'],
        float(
            hg.quantile_values(tail['quantile']['cdf'], [1 - theta], 0.0, upper,
                               bins)[0]))
    # The update: the clients with loss >= Q, divided by theta n, plus the
    # update sum's noise: stddev z_w C per coordinate of the sum (the DDG's
    # central noise; rounding adds <= gamma/2 per client, included in the 6
    # stddevs' slack: gamma = 1/168 here, at most sqrt(40) gamma / 2 = 0.019
    # in the sum), so z_w C / (theta n) = 0.05 per coordinate of the mean;
    # 6 stddevs.
    in_tail = losses >= tail['threshold']
    uk, ub = _known_updates(losses, lr)
    expected_w = _W[0] - uk[in_tail].sum(0) / (theta * n)
    expected_b = -ub[in_tail].sum(0) / (theta * n)
    weights = process.get_model_weights(out.state)
    bound = 6 * z_w * clip / (theta * n)
    np.testing.assert_array_less(np.abs(weights.trainable[0][0] - expected_w),
                                 bound)
    np.testing.assert_array_less(np.abs(weights.trainable[1] - expected_b),
                                 bound)
    self.assertEqual(tail['tail_count'], theta * n)
    # Privacy metrics: the round's composed event with the measured n, and
    # the in-graph epsilon equals the offline accountant's.
    event = accounting.extract_dp_event(out.metrics['privacy'])
    update_type = process.next.type_signature.result.state.member[
        'global_model_weights'].trainable
    self.assertEqual(event, config.round_event(update_type, n))
    # The whole metrics give the round's event, not one of its parts (the
    # quantile's event in client_work, the update's in aggregator).
    self.assertEqual(accounting.extract_dp_event(out.metrics), event)
    self.assertEqual(learning_metrics.round_dp_event(out.metrics), event)
    out2 = process.next(out.state, [_client(f) for f in losses[:30]])
    acc = accounting.RdpAccountant(adversary='server')
    acc.compose(config.round_event(update_type, n))
    acc.compose(config.round_event(update_type, 30))
    self.assertAlmostEqual(out2.metrics['privacy']['epsilon'],
                           acc.get_epsilon(1e-4),
                           places=9)
    self.assertAlmostEqual(out2.metrics['privacy']['round_epsilon'],
                           accounting.epsilon(
                               config.round_event(update_type, 30), 1e-4)[0],
                           places=9)
    self.assertEqual(out2.metrics['privacy']['adversary'], b'server')
    # The private loss estimate: the mean clipped loss at bin centres,
    # within the same CDF noise (each F_j <= 0.05 stddev; the mean is a
    # combination of 16 of them with weights <= 2/16: <= 6 * 0.05 * 2).
    self.assertLess(
        abs(out.metrics['client_work']['train']['loss'] - losses.mean()),
        6 * 0.05 * 2 + upper / bins)

  def test_self_sampling_divides_by_the_expected_count(self):
    # sampling='self': all N = 40 clients in the sums, each keeps its update
    # with a private coin of rate q = 10 / 40. Nearly equal losses give
    # nearly equal updates u, so DP-FedAvg's step is -K u / (q N) + noise,
    # K ~ Binomial(N, q) the coins kept: K read from the step is an integer
    # within the noise (z_w C / (q N) = 0.005 per coordinate, against
    # |u| ~ 0.1-0.3: < 0.2 of a client; 6 stddevs), the same from every
    # coordinate.
    big_n, n, lr, clip, z_w = 40, 10, 1.0, 10.0, 0.005
    losses = 0.5 + 1e-6 * np.arange(big_n)
    config = privacy_lib.PrivacyConfig(clients_per_round=n,
                                       l2_clip=clip,
                                       noise_multiplier=z_w,
                                       population=big_n,
                                       sampling='self',
                                       delta=1e-4,
                                       seed=3)
    process = processes.build_dp_fedavg(_KNOWN, _sgd(lr), privacy=config)
    state = _with_known_weights(process)
    out = process.next(state, [_client(f) for f in losses])
    weights = process.get_model_weights(out.state)
    uk, ub = _known_updates(losses, lr)
    divisor = config.expected_contributors(big_n)
    self.assertAlmostEqual(divisor, n, places=9)
    step = np.concatenate(
        [_W[0] - weights.trainable[0][0], -weights.trainable[1]])
    u = np.concatenate([uk.mean(0), ub.mean(0)])
    kept = step * divisor / u
    sd = z_w * clip / np.abs(u)
    k = np.round(np.median(kept))
    self.assertTrue(0 <= k <= big_n)
    np.testing.assert_array_less(np.abs(kept - k), 6 * sd + 1e-3)
    # The round's event: both... here one release, self-sampled, N shares.
    update_type = process.next.type_signature.result.state.member[
        'global_model_weights'].trainable
    event = accounting.extract_dp_event(out.metrics['privacy'])
    self.assertEqual(event, config.round_event(update_type, big_n))
    self.assertIsInstance(event, accounting.SelfSampledDpEvent)
    self.assertEqual(accounting.extract_dp_event(out.metrics), event)
    self.assertAlmostEqual(out.metrics['privacy']['epsilon'],
                           config.epsilon(update_type, 1),
                           places=9)

  def test_self_sampled_delta_fl_round(self):
    # DP-Delta-FL with sampling='self': the histogram and the update each
    # self-sampled (independent coins), the CDF normalised by the noisy
    # total, the divisor theta q N.
    big_n, n, theta = 40, 20, 0.25
    losses = np.random.default_rng(3).uniform(0.05, 1.95, big_n)
    config = privacy_lib.PrivacyConfig(clients_per_round=n,
                                       l2_clip=10.0,
                                       noise_multiplier=2.0,
                                       quantile_noise_multiplier=0.5,
                                       loss_upper_bound=2.0,
                                       num_bins=16,
                                       count='estimated',
                                       population=big_n,
                                       sampling='self',
                                       delta=1e-4,
                                       seed=4)
    process = processes.build_superquantile_fl(_KNOWN,
                                               theta,
                                               _sgd(1.0),
                                               privacy=config)
    out = process.next(_with_known_weights(process),
                       [_client(f) for f in losses])
    tail = out.metrics['client_work']['tail']
    self.assertFalse(tail['fallback'])
    self.assertAlmostEqual(tail['tail_count'], theta * n, places=9)
    update_type = process.next.type_signature.result.state.member[
        'global_model_weights'].trainable
    event = accounting.extract_dp_event(out.metrics['privacy'])
    self.assertEqual(event, config.round_event(update_type, big_n))
    self.assertTrue(
        all(isinstance(e, accounting.SelfSampledDpEvent) for e in event.events))
    self.assertAlmostEqual(out.metrics['privacy']['epsilon'],
                           config.epsilon(update_type, 1),
                           places=9)
    self.assertTrue(math.isfinite(out.metrics['privacy']['epsilon']))

  def test_more_clients_than_the_ring_holds_are_refused(self):
    # The update's ring is sized for clients_per_round (= max_clients, the
    # tabulated accountant's end): a round of 5 used to apply an update
    # decoded from a sum that may have wrapped and report epsilon inf; the
    # aggregator now refuses it, and the state passed in is unchanged.
    config = privacy_lib.PrivacyConfig(clients_per_round=4,
                                       l2_clip=1.0,
                                       noise_multiplier=1.0,
                                       population=100,
                                       delta=1e-3,
                                       seed=1)
    process = processes.build_dp_fedavg(_KNOWN, _sgd(0.1), privacy=config)
    state = process.initialize()
    out = process.next(state, [_client(0.5)] * 4)
    self.assertTrue(math.isfinite(out.metrics['privacy']['epsilon']))
    with self.assertRaises(Exception) as raised:
      process.next(out.state, [_client(0.5)] * 5)
    message = rounds.refusal_message(raised.exception)
    self.assertIsNotNone(message, str(raised.exception)[:1000])
    self.assertIn('5 clients', message)
    self.assertIn('more than the 4 its ring holds', message)
    again = process.next(out.state, [_client(0.5)] * 4)
    self.assertTrue(math.isfinite(again.metrics['privacy']['epsilon']))


@pytest.mark.slow
class NonPrivateTest(parameterized.TestCase):
  """The non-private objectives against numpy references."""

  def _run(self, process, losses, repeat=1):
    state = _with_known_weights(process)
    out = process.next(state, [_client(f, repeat) for f in losses])
    w = process.get_model_weights(out.state)
    return out.metrics, np.concatenate(
        [np.asarray(w.trainable[0])[0],
         np.asarray(w.trainable[1])])

  def _expected(self, a, h, uk, ub):
    agg = (a[:, None] * np.concatenate([uk, ub], 1)).sum(0) / h.sum()
    return np.concatenate([_W[0], [0.0, 0.0]]) - agg

  @parameterized.parameters(('exact', 0.3), ('threshold', 0.3), ('exact', 0.5))
  def test_superquantile(self, reweighting, theta):
    losses = np.array([0.3, 1.2, 0.8, 0.5, 1.7, 0.9, 0.2, 1.1, 0.6, 1.4])
    process = processes.build_superquantile_fl(_KNOWN,
                                               theta,
                                               _sgd(0.5),
                                               reweighting=reweighting)
    metrics, w = self._run(process, losses)
    pi = (weighting.superquantile_weights(losses, theta) if reweighting
          == 'exact' else weighting.threshold_weights(losses, theta))
    uk, ub = _known_updates(losses, 0.5)
    np.testing.assert_allclose(w, self._expected(pi, pi, uk, ub), atol=1e-5)
    self.assertAlmostEqual(metrics['client_work']['train']['loss'],
                           losses.mean(),
                           places=5)
    self.assertEqual(metrics['client_work']['tail']['tail_count'],
                     np.sum(pi > 1e-12))
    self.assertEqual(metrics['privacy']['epsilon'], math.inf)
    if reweighting == 'exact' and theta == 0.3:
      # theta n = 3: no fractional weight; threshold at the 4th largest.
      self.assertAlmostEqual(metrics['client_work']['tail']['threshold'],
                             1.1,
                             places=5)

  def test_qffl_tilted_fedavg(self):
    losses = np.array([0.3, 1.2, 0.8, 0.5, 1.7])
    uk, ub = _known_updates(losses, 0.5)
    sq = (uk**2).sum(1) + (ub**2).sum(1)
    cases = {
        'qffl': (processes.build_baseline('qffl',
                                          _KNOWN,
                                          _sgd(0.5),
                                          q=2.0,
                                          lipschitz=2.0),
                 weighting.qffl_scalars(losses, sq, 2.0, 2.0)),
        'tilted': (processes.build_baseline('tilted',
                                            _KNOWN,
                                            _sgd(0.5),
                                            tilt=3.0),
                   (weighting.tilted_weights(losses, 3.0),) * 2),
        'fedavg': (processes.build_baseline('fedavg',
                                            _KNOWN, _sgd(0.5)), (np.ones(5),
                                                                 np.ones(5))),
    }
    for name, (process, (a, h)) in cases.items():
      _, w = self._run(process, losses)
      np.testing.assert_allclose(w,
                                 self._expected(a, h, uk, ub),
                                 atol=1e-5,
                                 err_msg=name)

  def test_fedprox_two_local_steps(self):
    losses = np.array([0.3, 1.2, 0.8])
    mu, lr = 0.7, 0.5
    process = processes.build_baseline('fedprox',
                                       _KNOWN,
                                       _sgd(lr),
                                       proximal_strength=mu)
    _, w = self._run(process, losses, repeat=2)
    # Two steps of w <- w - lr (grad + mu (w - w0)) per client, in numpy.
    x = -0.5 * np.log(np.expm1(losses))
    updates = []
    for xi in x:
      k0, b0 = _W[0].astype(np.float64), np.zeros(2)
      k, b = k0.copy(), b0.copy()
      for _ in range(2):
        logits = xi * k + b
        p = np.exp(logits - logits.max())
        p /= p.sum()
        g = p - np.array([1.0, 0.0])
        k, b = (k - lr * (xi * g + mu * (k - k0)), b - lr * (g + mu * (b - b0)))
      updates.append(np.concatenate([k0 - k, b0 - b]))
    expected = np.concatenate([_W[0], [0.0, 0.0]]) - np.mean(updates, 0)
    np.testing.assert_allclose(w, expected, atol=1e-5)

  def test_fedavg_sub_weights_a_random_subset(self):
    losses = np.linspace(0.2, 1.8, 10)
    process = processes.build_baseline('fedavg_sub',
                                       _KNOWN,
                                       _sgd(0.5),
                                       tail_fraction=0.3,
                                       seed=3)
    _, w = self._run(process, losses)
    uk, ub = _known_updates(losses, 0.5)
    u = np.concatenate([uk, ub], 1)
    step = np.concatenate([_W[0], [0.0, 0.0]]) - w
    # Some subset of exactly ceil(3) = 3 clients, averaged.
    import itertools
    matches = [
        s for s in itertools.combinations(range(10), 3)
        if np.allclose(u[list(s)].mean(0), step, atol=1e-5)
    ]
    self.assertLen(matches, 1)

  def test_matches_the_simulator_on_b3(self):
    task = tasks.b3_task()
    sim = simulation.LinearSimulator(task)
    rng = np.random.default_rng(0)
    cohorts = [rng.choice(2500, 12, replace=False) for _ in range(3)]
    for objective, theta in (('fedavg', None), ('superquantile', 0.3)):
      if objective == 'fedavg':
        process = processes.build_baseline('fedavg', task.model_fn(), _sgd(0.1))
      else:
        process = processes.build_superquantile_fl(task.model_fn(),
                                                   theta,
                                                   _sgd(0.1),
                                                   reweighting='exact')
      state = process.initialize()
      for cohort in cohorts:
        state = process.next(state, task.train.datasets(cohort)).state
      w = process.get_model_weights(state)
      expected = sim.run(objective, 3, 12, 0, theta, 'exact', cohorts=cohorts)
      np.testing.assert_allclose(w.trainable[0], expected.kernel, atol=2e-5)
      np.testing.assert_allclose(w.trainable[1], expected.bias, atol=2e-5)
