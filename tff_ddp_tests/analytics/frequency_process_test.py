"""The frequency processes: calibration, types (secure sums only), the TFFE
clip against a numpy reference, events, and statistical unbiasedness."""

import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp import accounting
from tff_ddp.accounting import accountant
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import data as fd
from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import single_release
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.utils import rounds as rounds_lib

_D = 6
_KW = {
    'two_phase': dict(max_items=100),
    'multi_round': dict(rounds=3),
    'fixed': dict(clip=20.0),
    'normalize': {},
    'sample': dict(sample_items=4),
}

# Calibrations and TFF processes built once per module: several tests ask
# for the same parameters (`_params('two_phase')` four times, the
# multi-round default three times in one test), each a cPBM calibration
# with the certified constants and the PLD, and the processes of those
# parameters are traced once (a process is stateless: its state is passed
# in). Each test still checks its property on what it is handed.
_PARAMS = {}
_PROCESSES = {}


def _params(protocol, n=16, epsilon=10.0, **kwargs):
  key = (protocol, n, epsilon, tuple(sorted(kwargs.items())))
  if key not in _PARAMS:
    args = dict(_KW[protocol])
    args.update(kwargs)
    _PARAMS[key] = fp.frequency_parameters(protocol,
                                           _D,
                                           n,
                                           epsilon,
                                           1e-4,
                                           seed=9,
                                           **args)
  return _PARAMS[key]


def _process(protocol, on_wrap='raise'):
  """The process of `_params(protocol)` (traced once per module)."""
  if (protocol, on_wrap) not in _PROCESSES:
    _PROCESSES[protocol, on_wrap] = fp.build_frequency_process_from_parameters(
        _params(protocol), on_wrap=on_wrap)
  return _PROCESSES[protocol, on_wrap]


def _two_phase_computations():
  """`fp.two_phase_computations(_params('two_phase'))`, traced once."""
  if 'computations' not in _PROCESSES:
    _PROCESSES['computations'] = fp.two_phase_computations(_params('two_phase'))
  return _PROCESSES['computations']


def _data(n, seed=0, dim=_D):
  return fd.iid(n, dim, seed).astype(np.float32)


def _frequency_state(protocol, state):
  return state['frequency'] if protocol in ('two_phase',
                                            'multi_round') else state


def _norms(params, f_state, x):
  seed = secure_sum.round_seed({k: tf.constant(v) for k, v in f_state.items()})
  y, _ = params.encoder().encode_batch(tf.constant(np.asarray(x, np.float64)),
                                       seed)
  return np.linalg.norm(y.numpy(), axis=1)


class ParametersTest(parameterized.TestCase):

  @parameterized.parameters(*fp.PROTOCOLS)
  def test_meets_budget_and_names_adversary(self, protocol):
    # 16 clients: eq. 5 needs theta > sqrt(D / (4 m n)) = 0.09, so a
    # large budget. m = 300 for the phased protocols: under the l2-aware
    # cPBM accounting the default m = 30 reaches theta = 1/4 (its limit)
    # before the budget is spent.
    p = _params(
        protocol,
        **({
            'num_trials': 300
        } if protocol in ('two_phase', 'multi_round') else {}))
    self.assertLessEqual(p.epsilon, 10.0 * (1 + 1e-9))
    self.assertEqual(p.adversary, 'server')
    self.assertLessEqual(
        accountant.epsilon(p.event, 1e-4)[0], 10.0 * (1 + 1e-9))
    self.assertIn("against the server; neighbours: one user's data removed",
                  fp.describe(p))
    self.assertEqual(p.output_dim, 16)
    if protocol in ('two_phase', 'multi_round'):
      # The whole budget is spent (theta < 1/4: not at its limit).
      self.assertGreater(p.epsilon, 10.0 * (1 - 2e-3))
      self.assertAlmostEqual(
          p.target_quantile,
          1 - math.sqrt(p.output_dim /
                        (4 * p.num_trials * p.total_clients * p.theta**2)),
          places=12)

  def test_budget_fraction_sets_the_ratio(self):
    # m = 300: with m = 30 the frequency part reaches theta = 1/4 (l2-aware
    # accounting) and the split hands its unspendable share to the other.
    p = _params('two_phase',
                n=1000,
                epsilon=1.0,
                budget_fraction=0.25,
                num_trials=300)
    first, second = p.budget.standalone_epsilons
    self.assertAlmostEqual(first / second, 1 / 3, delta=0.01)
    self.assertEqual(p.round_event.events[0],
                     p.quantile.factory.dp_event(p.quantile.value_type))

  def test_multi_round_accounting_assumption(self):
    disjoint = _params('multi_round', rounds=5, disjoint_rounds=True)
    shared = _params('multi_round', rounds=5, disjoint_rounds=False)
    # The default is the accounting that holds whoever
    # comes back (it was the paper's assumption, which nothing checks).
    self.assertEqual(_params('multi_round', rounds=5).event, shared.event)
    self.assertFalse(_params('multi_round', rounds=5).disjoint_rounds)
    # Disjoint: the budget is one round's; shared: five rounds composed.
    self.assertLessEqual(
        accountant.epsilon(disjoint.round_event, 1e-4)[0], 10.0 * (1 + 1e-9))
    self.assertEqual(shared.event.events[0].count, 5)
    self.assertLess(shared.theta, disjoint.theta)
    self.assertEqual(disjoint.total_clients, 16 * 5)

  def test_calibrate_num_trials(self):
    p = _params('fixed', n=1000, calibrate='num_trials', theta=0.2)
    self.assertEqual(p.theta, 0.2)
    more = fp.frequency_parameters('fixed',
                                   _D,
                                   1000,
                                   10.0,
                                   1e-4,
                                   clip=20.0,
                                   calibrate='num_trials',
                                   theta=0.2,
                                   num_trials=None)
    self.assertEqual(more.num_trials, p.num_trials)
    # The largest m: one more trial exceeds the budget.
    event = p.factory.dp_event(p.aggregated_type)
    bigger = type(event)(event.theta, event.num_trials + 1, event.num_clients,
                         event.dimension)
    self.assertGreater(accountant.epsilon(bigger, 1e-4)[0], 10.0)

  @parameterized.named_parameters(
      ('protocol', dict(protocol='ocpbm'), ValueError, 'protocol'),
      ('fixed_clip', dict(protocol='fixed'), ValueError, 'needs clip'),
      ('two_phase_items', dict(protocol='two_phase'), ValueError, 'max_items'),
      ('sample_k', dict(protocol='sample'), ValueError, 'sample_items'),
      ('unused', dict(protocol='fixed', clip=1.0,
                      max_items=3), ValueError, 'max_items does not apply'),
      ('unused_default', dict(protocol='fixed', clip=1.0,
                              rounds=3), ValueError, 'rounds does not apply'),
      ('fraction', dict(protocol='two_phase', max_items=3,
                        budget_fraction=1.0), ValueError, 'budget_fraction'),
      ('theta_and_calibrate', dict(protocol='fixed', clip=1.0,
                                   theta=0.1), ValueError, 'theta is what'),
      ('trials_and_calibrate',
       dict(protocol='fixed',
            clip=1.0,
            calibrate='num_trials',
            theta=0.1,
            num_trials=3), ValueError, 'num_trials is what'),
      ('dtype', dict(protocol='fixed', clip=1.0,
                     value_dtype=np.bool_), TypeError, 'value_dtype'),
      ('target', dict(protocol='two_phase', max_items=3,
                      target_quantile=1.0), ValueError, 'target_quantile'),
      ('clients', dict(protocol='fixed', clip=1.0,
                       expected_clients_per_round=0), ValueError,
       'expected_clients_per_round'),
  )
  def test_refused(self, override, error, message):
    args = dict(protocol='fixed',
                dim=4,
                expected_clients_per_round=10,
                epsilon=1.0,
                delta=1e-5)
    args.update(override)
    with self.assertRaisesRegex(error, message):
      fp.frequency_parameters(**args)

  def test_unreachable_quantile_target(self):
    # Few clients, tiny budget: eq. 5 has no interior optimum.
    with self.assertRaisesRegex(ValueError, 'no interior minimum'):
      fp.frequency_parameters('two_phase', 4, 10, 0.05, 1e-5, max_items=3)


@pytest.mark.slow  # end to end / statistical: `make test` runs it
class ProcessTest(parameterized.TestCase):

  @parameterized.parameters(*fp.PROTOCOLS)
  def test_secure_only_types_and_events(self, protocol):
    p = _params(protocol)
    process = _process(protocol)
    self.assertIsInstance(process, tff.templates.MeasuredProcess)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    result = process.next.type_signature.result
    self.assertEqual(
        result.result,
        tff.FederatedType(tff.TensorType(np.float64, [_D]), tff.SERVER))
    names = {
        n for n, _ in tff.structure.iter_elements(result.measurements.member)
    }
    self.assertContainsSubset({'dp_event', 'clip', 'within_budget'}, names)
    self.assertNotIn('debug_counts', str(result.measurements))
    x = _data(12)
    state = process.initialize()
    output = process.next(state, list(x))
    m = output.measurements
    # The measured event: the planning event with the 12 clients measured.
    event = accounting.extract_dp_event(m)
    planned = p.round_event
    if isinstance(planned, type(event)) and hasattr(planned, 'events'):
      for got, want in zip(event.events, planned.events):
        self.assertEqual(got.num_clients, 12)
        self.assertEqual(got.theta, want.theta)
        self.assertEqual(got.dimension, want.dimension)
    else:
      self.assertEqual(event.num_clients, 12)
      self.assertEqual(event.dimension, planned.dimension)
    self.assertTrue(m['within_budget'])
    if protocol != 'multi_round':
      self.assertFalse(
          process.next(output.state, list(x)).measurements['within_budget'])

  def test_two_phase_clip_against_numpy_reference(self):
    # C-hat is eq. 1 (nearest CDF value to the target) on the released
    # noisy CDF, the right edge of that bin; and with a large budget the
    # CDF is close to the numpy CDF of the norms of the representations
    # phase 2 uses, so the same bin is chosen.
    n = 100  # each more client costs the calibration (400: 49 s, 100: 8 s)
    p = _params('two_phase', n=n, epsilon=60.0, max_items=40)
    process = fp.build_frequency_process_from_parameters(p)
    x = fd.iid(n, _D, 1) * 0.4 * np.random.default_rng(2).uniform(
        0.2, 1.0, size=(n, 1))
    x = x.astype(np.float32)
    state = process.initialize()
    m = process.next(state, list(x)).measurements
    cdf = np.asarray(m['quantile']['cdf'])
    edges = hg.edges(0.0, p.upper_bound, p.num_bins)
    j = int(np.argmin(np.abs(cdf - p.target_quantile)))
    self.assertEqual(m['quantile']['status'], b'ok')
    self.assertFalse(m['clip_fallback'])
    self.assertAlmostEqual(float(m['clip']), edges[j], places=9)
    norms = _norms(p, state['frequency'], x).astype(np.float32)
    idx = np.clip(np.floor(norms / (p.upper_bound / p.num_bins)), 0,
                  p.num_bins - 1).astype(int)
    true_cdf = np.cumsum(np.bincount(idx, minlength=p.num_bins)) / n
    self.assertEqual(j, int(np.argmin(np.abs(true_cdf - p.target_quantile))))
    # The reference order statistic lies in that bin or next to it.
    c_star = fq.optimal_clip(norms, p.target_quantile)
    self.assertLess(abs(c_star - edges[j]), 2 * p.upper_bound / p.num_bins)

  def test_two_phase_computations_equal_next(self):
    comps = _two_phase_computations()
    x = list(_data(10))
    state = comps.initialize()
    q_state, clip, phase_one = comps.estimate_clip(state, x)
    f_state, estimate, phase_two = comps.estimate_frequencies(
        state['frequency'], x, clip)
    whole = comps.next(state, x)
    np.testing.assert_array_equal(whole.result, estimate)  # test seed
    self.assertEqual(whole.measurements['clip'], clip)
    self.assertEqual(phase_two['clip'], clip)
    self.assertEqual(phase_one['clip'], clip)
    del q_state, f_state
    with self.assertRaisesRegex(ValueError, 'two_phase'):
      fp.two_phase_computations(_params('fixed'))

  def test_sample_client_step(self):
    p = _params('sample')
    process = _process('sample')
    del process
    seed_type = tff.TensorType(np.int64, [2])
    sample = single_release.client_step(p, seed_type)
    rng = np.random.default_rng(0)
    for _ in range(20):
      x = rng.poisson(1.0, size=_D).astype(np.float32)
      kept = sample(x, rng.integers(0, 2**30, size=2))
      self.assertEqual(kept.sum(), min(4, x.sum()))
      self.assertTrue(np.all(kept <= x))

  def test_non_finite_client_is_the_zero_contribution(self):
    # The zero-out neighbour of the accounting: a non-finite client sends
    # zeros to every secure sum; with the test seed (noise from the input's
    # fingerprint) the other clients' draws are unchanged, so only its
    # Binomial(m, 1/2) draws differ. The module's multi-round process (16
    # expected clients; 8 take part: a round may have fewer).
    process = _process('multi_round')
    x = _data(8)
    bad = x.copy()
    bad[0, 0] = np.nan
    out = process.next(process.initialize(), list(bad))
    self.assertTrue(np.all(np.isfinite(out.result)))
    self.assertEqual(out.measurements['frequency']['participating_clients'], 8)


@pytest.mark.slow  # builds and runs processes of three protocols
class RoundStatusTest(parameterized.TestCase):
  """More clients than the rings hold, none, and the status as str."""

  @parameterized.parameters('two_phase', 'multi_round', 'fixed')
  def test_refused_flagged_empty_and_ok(self, protocol):
    p = _params(protocol)
    ring = p.ring_capacity()
    # n = 16: the frequency ring holds (2^9 - 1) // 30 = 17, phase 1's
    # (2^18 - 1) // 16383 = 16; the process holds the smallest.
    self.assertGreaterEqual(ring.capacity, 16)
    n = ring.capacity + 1
    x = list(_data(n))
    if protocol != 'two_phase':  # (its phases refuse: the test below)
      refusing = _process(protocol)
      with self.assertRaises(rounds_lib.RoundRefusedError) as raised:
        refusing.next(refusing.initialize(), x)
      self.assertIn(f'build_frequency_process: {n} clients',
                    str(raised.exception))
      self.assertIn(f'expected_clients_per_round >= {n}', str(raised.exception))
    flagging = _process(protocol, on_wrap='flag')
    ok = flagging.next(flagging.initialize(), x[:ring.capacity])
    self.assertEqual(ok.measurements['status'], 'ok')
    flagged = flagging.next(flagging.initialize(), x)
    self.assertEqual(flagged.measurements['status'], 'sum_may_wrap')
    empty = flagging.next(flagging.initialize(), [])
    self.assertEqual(empty.measurements['status'], 'no_clients')
    self.assertEqual(accounting.extract_dp_event(empty.measurements),
                     dp_accounting.NoOpDpEvent())

  def test_two_phase_computations_refuse_in_each_phase(self):
    p = _params('two_phase')
    comps = _two_phase_computations()
    x = list(_data(p.ring_capacity().capacity + 1))
    state = comps.initialize()
    with self.assertRaises(rounds_lib.RoundRefusedError):
      comps.estimate_clip(state, x)
    with self.assertRaises(rounds_lib.RoundRefusedError):
      comps.estimate_frequencies(state['frequency'], x, 10.0)
    with self.assertRaisesRegex(ValueError, 'on_wrap'):
      fp.build_frequency_process('fixed',
                                 _D,
                                 16,
                                 10.0,
                                 1e-4,
                                 clip=20.0,
                                 on_wrap='ignore')


def _round_expectations(protocol, p, process, x, rounds):
  """(estimates, expectations) of `rounds` rounds on the same clients."""
  state = process.initialize()
  xs = np.asarray(x, np.float64)
  if protocol == 'normalize':
    xs = xs / np.linalg.norm(xs, axis=1, keepdims=True)
  estimates, expected, clips = [], [], []
  for _ in range(rounds):
    f_state = _frequency_state(protocol, state)
    norms = _norms(p, f_state, xs)
    output = process.next(state, list(x))
    clip = float(output.measurements['clip'])
    result = (output.measurements['round_estimate']
              if protocol == 'multi_round' else output.result)
    estimates.append(np.asarray(result))
    expected.append(fq.expected_sum(xs, norms, clip))
    clips.append(clip)
    state = output.state
  return np.array(estimates), np.array(expected), np.array(clips)


@pytest.mark.slow
class UnbiasednessTest(parameterized.TestCase):
  """E[estimate | clip] = sum_i x_i min(1, C / ||y_i||), round by round.

  Each round has its own frame (the aggregator's round seed), so the
  expectation is computed per round from the representations that round
  encodes (`secure_sum.round_seed`) and the released clip. A coordinate of
  the estimate has variance at most n (C / (m theta))^2 m / 4 (eq. 3 times
  n, through rows of U with unit norm), so the mean over R rounds of
  (estimate - expectation) / that stddev has stddev <= 1 / sqrt(R) per
  coordinate: we allow 5 / sqrt(R) (a bound, so the false-failure
  probability is below 6e-7 per coordinate). The clipped mass is checked
  to be at least twice that tolerance where clipping happens, so an
  expectation that ignored the clip fails.
  """

  def _check(self, estimates, expected, clips, p, n):
    rounds = len(estimates)
    sd = np.sqrt(n * (clips / (p.num_trials * p.theta))**2 * p.num_trials /
                 4.0)[:, None]
    z = ((estimates - expected) / sd).mean(axis=0)
    np.testing.assert_array_less(np.abs(z), 5 / math.sqrt(rounds))
    return sd

  def test_fixed_above_every_norm_is_unbiased(self):
    n, rounds = 12, 40
    x = _data(n, 3)
    p = _params('fixed', n=n, epsilon=8.0, clip=200.0)
    est, exp, clips = _round_expectations(
        'fixed', p, fp.build_frequency_process_from_parameters(p), x, rounds)
    np.testing.assert_allclose(exp,
                               np.tile(x.sum(axis=0), (rounds, 1)),
                               rtol=1e-9)
    self._check(est, exp, clips, p, n)

  @parameterized.parameters('fixed', 'normalize', 'two_phase', 'multi_round')
  def test_bias_is_the_clipped_mass(self, protocol):
    # Users with norms spread over 4x (rows scaled by 1..4) and a clip near
    # their median: a large clipped mass. A large budget spent on trials
    # (theta = 1/4, m calibrated) keeps the noise well below it.
    n, rounds = 12, 40
    x = (_data(n, 4) * np.linspace(1.0, 4.0, n)[:, None]).astype(np.float32)
    kwargs = dict(calibrate='num_trials', theta=0.25)
    if protocol == 'fixed':
      kwargs.update(clip=120.0)
    if protocol == 'two_phase':
      kwargs.update(max_items=400, target_quantile=0.5, budget_fraction=0.5)
    if protocol == 'multi_round':
      kwargs.update(rounds=rounds,
                    clip=60.0,
                    target_quantile=0.5,
                    indicator_num_trials=30)
    p = _params(protocol, n=n, epsilon=200.0, **kwargs)
    est, exp, clips = _round_expectations(
        protocol, p, fp.build_frequency_process_from_parameters(p), x, rounds)
    sd = self._check(est, exp, clips, p, n)
    if protocol != 'normalize':  # there ||y|| / ||x|| - 1 is ~1%: small
      # An expectation that ignored the clip would be off by this many
      # stddevs of a round: at least twice the tolerance on the mean.
      clipped_mass = np.abs(exp - x.sum(axis=0)).mean(axis=0)
      self.assertGreater(np.max(clipped_mass / sd.mean()),
                         10 / math.sqrt(rounds))
