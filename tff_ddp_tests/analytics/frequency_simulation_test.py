"""The frequency simulator: exact moments, and the same law as the process."""

import dataclasses
import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.accounting import accountant
from tff_ddp.aggregators import poisson_binomial as cpbm
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import data as fd
from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import gaussian
from tff_ddp.analytics.frequency import multi_round
from tff_ddp.analytics.frequency import simulation as fs
from tff_ddp.analytics.frequency import two_phase
from tff_ddp.utils import rounds

_D = 6


def _exact_variance(params, x, clip, seed):
  """Var of each coordinate of the decoded sum: sum_k U_jk^2 times the
  binomials' variance of coordinate k, (C / (m theta))^2 sum_i m p (1-p)."""
  mechanism = params.mechanism()
  encoder = params.encoder()
  y = fs.representations(encoder, x, seed)
  norms = fs.norms_of(y)
  c0 = mechanism.l2_clip
  factor = np.minimum(c0 / clip, c0 / norms)
  probs = np.clip(
      0.5 + mechanism.theta *
      (y * factor[:, None]) / mechanism.coordinate_bound, mechanism.p_low,
      mechanism.p_high)
  m = mechanism.num_trials
  scale = mechanism.coordinate_bound / (m * mechanism.theta) * clip / c0
  per_k = scale**2 * (m * probs * (1 - probs)).sum(axis=0)
  u = encoder.frame_matrix(seed).numpy()
  return (u**2) @ per_k, norms


def _z_checks(test, errors, variances):
  """errors, variances [R, d]; mean and pooled variance of the z-scores.

  Mean: each coordinate's average z has stddev 1 / sqrt(R): 5 of them.
  Pooled z^2 over R d draws: mean 1, stddev about sqrt(2 / (R d)) (close to
  Gaussian: sums of many Bernoullis): 5 of them.
  """
  z = errors / np.sqrt(variances)
  reps, d = z.shape
  np.testing.assert_array_less(np.abs(z.mean(axis=0)), 5 / math.sqrt(reps))
  ratio = float(np.mean(z**2))
  test.assertLess(abs(ratio - 1), 5 * math.sqrt(2 / (reps * d)))
  return ratio


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class PbmSumTest(parameterized.TestCase):

  @parameterized.parameters((500.0, 'l2'), (12.0, 'l2'), (12.0, 'linf'))
  def test_moments(self, clip, divisor):
    n, reps = 40, 300
    x = fd.iid(n, _D, 0) * 1.0
    p = fp.frequency_parameters('two_phase',
                                _D,
                                n,
                                10.0,
                                1e-4,
                                max_items=100,
                                divisor=divisor)
    seed = tf.constant([3, 4], tf.int64)
    variance, norms = _exact_variance(p, x, clip, seed)
    y = fs.representations(p.encoder(), x, seed)
    rng = np.random.default_rng(0)
    expected = fq.expected_sum(x, norms, clip)
    errors = np.array([
        fs.pbm_sum(p.mechanism(), y, rng, seed, clip) - expected
        for _ in range(reps)
    ])
    _z_checks(self, errors, np.tile(variance, (reps, 1)))
    if clip > norms.max():
      np.testing.assert_allclose(expected, x.sum(axis=0))

  def test_clip_sweep_shapes(self):
    x = fd.iid(30, _D, 1)
    p = fp.frequency_parameters('two_phase', _D, 30, 10.0, 1e-4, max_items=100)
    est, norms = fs.clip_sweep(p, x, [5.0, 50.0], np.random.default_rng(1))
    self.assertEqual(est.shape, (2, _D))
    self.assertEqual(norms.shape, (30,))


class GaussianTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_moments_and_budget(self, local):
    g = gaussian.gaussian_parameters(2.0, 1e-5, local)
    self.assertLessEqual(g.epsilon, 2.0 * (1 + 1e-9))
    self.assertGreater(g.epsilon, 2.0 * (1 - 2e-3))
    n, reps, clip = 50, 400, 1e3
    x = fd.iid(n, _D, 2).astype(float)
    rng = np.random.default_rng(3)
    run = gaussian.local_gaussian if local else gaussian.central_gaussian
    errors = np.array([
        run(g, x, 100, 64, rng, clip=clip).estimate - x.sum(axis=0)
        for _ in range(reps)
    ])
    sd = clip * g.frequency_noise_multiplier * (2 *
                                                math.sqrt(n) if local else 1.0)
    _z_checks(self, errors, np.full(errors.shape, sd**2))
    wrong = gaussian.central_gaussian if local else gaussian.local_gaussian
    with self.assertRaisesRegex(ValueError, 'local'):
      wrong(g, x, 100, 64, rng)


def _process_errors(params, x, rounds, clip=None):
  """Errors of `rounds` process rounds and their exact variances."""
  process = fp.build_frequency_process_from_parameters(params)
  state = process.initialize()
  errors, variances, clips = [], [], []
  for _ in range(rounds):
    f_state = state['frequency'] if params.scaled else state
    seed = secure_sum.round_seed({k: tf.constant(v) for k, v in f_state.items()})
    output = process.next(state, list(x.astype(np.float32)))
    c = float(output.measurements['clip']) if clip is None else clip
    variance, norms = _exact_variance(params, x, c, seed)
    errors.append(np.asarray(output.result) - fq.expected_sum(x, norms, c))
    variances.append(variance)
    clips.append(c)
    state = output.state
  return np.array(errors), np.array(variances), np.array(clips)


@pytest.mark.slow
class SimulatorVsProcessTest(parameterized.TestCase):
  """The simulator and the TFF process: the same law on small cases.

  Both are standardised by the exact per-round variance of their own frame
  (`_exact_variance`), so both pooled z^2 must be 1 within 5 standard
  errors (sqrt(2 / (R d))) and within 5 sqrt(2) standard errors of each
  other; TFFE's released clips have the same mean within 5 standard errors
  of a difference of means.
  """

  def test_fixed(self):
    n, rounds = 16, 30
    x = fd.iid(n, _D, 5) * 1.0
    p = fp.frequency_parameters('fixed', _D, n, 10.0, 1e-4, clip=25.0, seed=3)
    errors, variances, _ = _process_errors(p, x, rounds)
    ratio_process = _z_checks(self, errors, variances)
    rng = np.random.default_rng(7)
    sim_errors, sim_variances = [], []
    for _ in range(rounds):
      seed = fs.round_seed(rng)
      variance, norms = _exact_variance(p, x, 25.0, seed)
      y = fs.representations(p.encoder(), x, seed)
      sim_errors.append(
          fs.pbm_sum(p.mechanism(), y, rng, seed) -
          fq.expected_sum(x, norms, 25.0))
      sim_variances.append(variance)
    ratio_sim = _z_checks(self, np.array(sim_errors), np.array(sim_variances))
    self.assertLess(abs(ratio_process - ratio_sim),
                    5 * math.sqrt(2) * math.sqrt(2 / (rounds * _D)))

  def test_two_phase_clip_and_estimate(self):
    n, rounds = 64, 30
    x = (fd.heterogeneous(n, _D, 2) * 1.0)
    p = fp.frequency_parameters('two_phase',
                                _D,
                                n,
                                20.0,
                                1e-4,
                                max_items=fd.max_items(x),
                                seed=4)
    errors, variances, clips = _process_errors(p, x, rounds)
    _z_checks(self, errors, variances)
    rng = np.random.default_rng(8)
    sim = [two_phase.simulate(p, x, rng) for _ in range(rounds)]
    sim_clips = np.array([r.clip for r in sim])
    se = math.sqrt((clips.var(ddof=1) + sim_clips.var(ddof=1)) / rounds)
    self.assertLessEqual(abs(clips.mean() - sim_clips.mean()),
                         5 * max(se, 1e-12))
    self.assertGreater(len(set(clips.tolist())), 1)  # the clip is random

  def test_multi_round_clip_path(self):
    n, rounds, reps = 24, 3, 12
    p = fp.frequency_parameters('multi_round',
                                _D,
                                n,
                                20.0,
                                1e-4,
                                rounds=rounds,
                                clip=2.0,
                                seed=5)
    # The indicator's noise must be independent across clients, as in the
    # simulator. A test seed derives a client's noise from its input, and
    # the indicator's input is +-1: every client above C would draw the same
    # noise, multiplying the indicator sum's noise variance by ~n and
    # (through the clip to [0, 1] and exp) biasing the mean of next_clip.
    # So the indicator draws kernel entropy; its encoder is the identity, so
    # the public seed (fixed below) is irrelevant to it.
    p = dataclasses.replace(p,
                            indicator_factory=cpbm.PoissonBinomialSumFactory(
                                l2_clip=1.0,
                                theta=p.indicator_theta,
                                num_trials=p.indicator_num_trials,
                                expected_clients_per_round=n,
                                divisor='linf',
                                linf_clip=1.0,
                                encoder='none'))
    batches = [fd.iid(n, _D, 10 + r).astype(np.float32) for r in range(rounds)]
    finals = []
    for rep in range(reps):
      process = fp.build_frequency_process_from_parameters(p)
      state = process.initialize()
      # New public randomness per repetition (the test seed fixes it).
      state['frequency']['public_seed'] = np.array([rep, 77], np.int64)
      state['indicator']['public_seed'] = np.array([rep, 78], np.int64)
      for b in batches:
        output = process.next(state, list(b))
        state = output.state
      finals.append(float(output.measurements['next_clip']))
    rng = np.random.default_rng(9)
    sim = []
    for _ in range(reps):
      rounds_out = multi_round.simulate(p, [b * 1.0 for b in batches], rng)
      level = rounds_out[-1].quantile_level
      sim.append(rounds_out[-1].clip * math.exp(-p.learning_rate *
                                                (level - p.target_quantile)))
    finals, sim = np.array(finals), np.array(sim)
    se = math.sqrt((finals.var(ddof=1) + sim.var(ddof=1)) / reps)
    # Fresh noise: (difference of means) / se is ~ Student t with ~2 reps - 2
    # = 22 degrees of freedom (Welch); P(|t_22| > 6) < 3e-5.
    self.assertLessEqual(abs(finals.mean() - sim.mean()), 6 * max(se, 1e-12))
    # The update moved the clip up from 2 (norms ~ 40 > C: gamma-hat ~ 0).
    self.assertGreater(finals.mean(), 2.0 * math.exp(0.5))


@pytest.mark.slow  # calibrates three protocols (two_phase: ~15 s)
class RingCapacityTest(parameterized.TestCase):
  """The simulators refuse or flag rounds above the process's capacity."""

  @parameterized.parameters('two_phase', 'fixed', 'multi_round')
  def test_refuses_by_default_flags_on_request(self, protocol):
    kwargs = {
        'two_phase': dict(max_items=100),
        'fixed': dict(clip=20.0),
        'multi_round': dict(rounds=2)
    }[protocol]
    params = fp.frequency_parameters(protocol,
                                     _D,
                                     16,
                                     10.0,
                                     1e-4,
                                     seed=9,
                                     **kwargs)
    n = params.ring_capacity().capacity + 1
    x = fd.iid(n, _D, 0)

    def run(x, on_wrap):
      rng = np.random.default_rng(1)
      if protocol == 'multi_round':
        return multi_round.simulate(params, [x], rng, on_wrap=on_wrap)[0]
      if protocol == 'two_phase':
        return two_phase.simulate(params, x, rng, on_wrap=on_wrap)
      return fs.fixed(params, x, rng, on_wrap=on_wrap)

    owner = {
        'two_phase': 'two_phase.simulate',
        'fixed': 'simulation.fixed',
        'multi_round': 'multi_round.simulate'
    }[protocol]
    with self.assertRaisesRegex(rounds.RoundRefusedError,
                                f'frequency.{owner}: {n} clients'):
      run(x, 'raise')
    self.assertEqual(run(x, 'flag').status, 'sum_may_wrap')
    self.assertNotEqual(run(x[:-1], 'flag').status, 'sum_may_wrap')
    with self.assertRaisesRegex(rounds.RoundRefusedError, 'pbm_sum'):
      fs.pbm_sum(
          params.mechanism(),
          np.zeros([params.mechanism().max_clients() + 1, params.output_dim]),
          np.random.default_rng(0), fs.round_seed(np.random.default_rng(0)))


class EpsilonTest(parameterized.TestCase):

  def test_simulated_configurations_are_the_processes(self):
    p = fp.frequency_parameters('two_phase', _D, 100, 5.0, 1e-4, max_items=100)
    self.assertLessEqual(accountant.epsilon(p.event, 1e-4)[0], 5.0 * (1 + 1e-9))
