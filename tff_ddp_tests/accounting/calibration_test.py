"""Tests of noise calibration (the `privacy` CLI is tested in cli_test)."""

import math
from unittest import mock

from absl.testing import parameterized
import dp_accounting
import pytest

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import pld_accountant
from tff_ddp.accounting import events
from tff_ddp.accounting import orders as orders_lib
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg

# The DDG / Skellam releases of the cases: Delta_2, clients, dimension.
L2, N, D = 1000.0, 100, 2**16
PBM = dict(num_clients=1000, dimension=64)
Parameter = calibration.Parameter


def _fresh(adversary='server', **kwargs):
  return lambda: accountant.RdpAccountant(adversary=adversary, **kwargs)


def _ddg_local(s):
  return ddg.release_event(L2, s, N, D)


def _ddg_z(z):
  return ddg.release_event(L2, ddg.local_stddev(z, L2, N), N, D)


def _skellam_local(s):
  return events.DistributedSkellamDpEvent(L2, s * s, N, D)


def _skellam_z(z):
  return _skellam_local(ddg.local_stddev(z, L2, N))


def _pbm(theta=None, num_trials=None):
  """x -> the cPBM event with the other of theta / num_trials fixed."""
  if theta is None:
    return lambda t: events.PoissonBinomialDpEvent(t, num_trials, **PBM)
  return lambda m: events.PoissonBinomialDpEvent(theta, m, **PBM)


_THETA = Parameter.signal('theta', 2.0**-40, 0.25)
_NUM_TRIALS = Parameter.signal('num_trials', 1, 2**31 - 1, discrete=True)
_DDG_LOCAL = Parameter.noise('local_stddev', ddg.MIN_SCALED_LOCAL_STDDEV)
_DDG_Z = Parameter.noise('noise_multiplier', 0.5 * math.sqrt(N) / L2)
_Z = Parameter.noise('noise_multiplier')


def _calibrate(one,
               parameter,
               target,
               sampling='none',
               rounds=1,
               adversary='server',
               delta=1e-5):
  kwargs = (dict(sample_size=100, population=10000)
            if sampling == 'without-replacement' else dict(
                rate=0.01) if sampling != 'none' else {})
  return calibration.calibrate(
      _fresh(adversary),
      lambda x: calibration.rounds_event(one(x), rounds, sampling, **kwargs),
      target, delta, parameter)


class CalibrateTest(parameterized.TestCase):

  @parameterized.parameters(
      (_ddg_local, _DDG_LOCAL, 'poisson', 1000, 'server'),
      (_ddg_z, _DDG_Z, 'without-replacement', 100, 'release'),
      (_ddg_local, _DDG_LOCAL, 'self', 100, 'server'),
      (_ddg_local, _DDG_LOCAL, 'none', 10, 'server'),
      (_skellam_local, Parameter.noise('local_stddev'), 'none', 10, 'server'),
      (_skellam_z, _Z, 'self', 100, 'release'),
      (_pbm(num_trials=16), _THETA, 'none', 1, 'server'),
      (_pbm(num_trials=16), _THETA, 'poisson', 5, 'release'),
  )
  def test_reaches_target_within_one_percent(self, one, parameter, sampling,
                                             rounds, adversary):
    for target in (0.5, 2.0, 8.0):
      r = _calibrate(one, parameter, target, sampling, rounds, adversary)
      if r.at_limit:  # theta = 1/4 is not enough to spend the budget.
        self.assertEqual(r.value, 0.25)
        self.assertLessEqual(r.epsilon, target)
        continue
      self.assertLessEqual(r.epsilon, target)
      self.assertGreaterEqual(r.epsilon, 0.99 * target)
      # RDP alone (these calibrations use RdpAccountant): orders given.
      eps, _ = accountant.epsilon(r.event, 1e-5, adversary,
                                  r.neighboring_relation,
                                  orders_lib.DEFAULT_ORDERS)
      self.assertEqual(eps, r.epsilon)
      self.assertEqual(r.adversary, adversary)
      self.assertEqual(r.parameter, parameter.name)

  @pytest.mark.slow
  def test_gaussian_reaches_target_within_one_percent(self):
    # ~5 s: dp-accounting's fractional-order sampled Gaussian is slow.
    for target in (0.5, 2.0, 8.0):
      r = _calibrate(dp_accounting.GaussianDpEvent, _Z, target, 'poisson', 100)
      self.assertLessEqual(r.epsilon, target)
      self.assertGreaterEqual(r.epsilon, 0.99 * target)

  def test_calibrate_gaussian_is_calibrate_over_the_gaussian_event(self):
    # The helper is the generic search over GaussianDpEvent (same value)
    # with the tightest accountant (the library's default).
    for adversary in accountant.ADVERSARIES:
      helper = calibration.calibrate_gaussian(2.0,
                                              1e-5,
                                              rounds=10,
                                              adversary=adversary)
      generic = calibration.calibrate(
          lambda: pld_accountant.tightest(adversary), lambda z: calibration.
          rounds_event(dp_accounting.GaussianDpEvent(z), 10), 2.0, 1e-5, _Z)
      self.assertEqual(helper, generic)

  def test_integer_num_trials_is_largest_that_fits(self):
    r = _calibrate(_pbm(theta=0.1), _NUM_TRIALS, 5.0)
    self.assertLessEqual(r.epsilon, 5.0)
    over = accountant.epsilon(_pbm(theta=0.1)(r.value + 1),
                              1e-5,
                              orders=orders_lib.DEFAULT_ORDERS)[0]
    self.assertGreater(over, 5.0)

  def test_a_refused_value_is_unsafe(self):
    # make_event refusing x < 3 (a configuration that cannot fit): the
    # least noise is 3 although z = 1 would meet the target; a target only
    # refused values could meet is unreachable, the refusal quoted.
    calls = []

    def refusing(z):
      calls.append(z)
      if z < 3.0:
        raise ValueError('does not fit')
      return dp_accounting.GaussianDpEvent(z)

    r = calibration.calibrate(_fresh('release'), refusing, 50.0, 1e-5, _Z)
    self.assertGreaterEqual(r.value, 3.0)
    self.assertLess(r.value, 3.0 * (1 + calibration.REFUSED_XTOL))
    # The edge is located to REFUSED_XTOL, then the search stops (61
    # calls): it is not bisected on to 1e-12 (241 calls; with the PLD's
    # two grids and RDP, 79 CPU s in a fuzz case of six calibrations).
    self.assertLess(len(calls), 120)
    # The tightest accountant: the PLD's coarse grid locates the edge, the
    # fine grid probes next to it, RDP's search is skipped there (43 calls,
    # 181 before).
    del calls[:]
    r = calibration.calibrate(lambda: pld_accountant.tightest('release'),
                              refusing, 50.0, 1e-5, _Z)
    self.assertBetween(r.value, 3.0, 3.0 * (1 + calibration.REFUSED_XTOL))
    self.assertLess(len(calls), 60)

    def always(z):
      raise ValueError(f'z={z} does not fit')

    with self.assertRaisesRegex(
        ValueError, 'unreachable.*Last refusal: '
        'noise_multiplier=.*does not fit'):
      calibration.calibrate(_fresh(), always, 1.0, 1e-5, _Z)

  def test_make_event_must_return_an_event(self):
    # Found by the fuzz test: a make_event returning a float failed inside
    # dp-accounting with a message that named neither argument.
    with self.assertRaisesRegex(
        TypeError, 'make_event must return a '
        'dp_accounting.DpEvent, got float'):
      calibration.calibrate(_fresh(), float, 1.0, 1e-5, _Z)

  def test_bad_arguments(self):
    # A mechanism name where a callable belongs says how to call it.
    with self.assertRaisesRegex(
        TypeError, 'callables, not mechanism names'
        '.*make_fresh_accountant'):
      calibration.calibrate('gaussian', 'theta', {}, 1.0, 1e-5)
    with self.assertRaisesRegex(TypeError, 'Parameter'):
      calibration.calibrate(_fresh(), dp_accounting.GaussianDpEvent, 1.0, 1e-5,
                            'noise_multiplier')
    with self.assertRaisesRegex(TypeError, 'RdpAccountant'):
      calibration.calibrate(dp_accounting.rdp.RdpAccountant,
                            dp_accounting.GaussianDpEvent, 1.0, 1e-5, _Z)
    with self.assertRaisesRegex(ValueError, 'adversary'):
      calibration.calibrate(_fresh('analyst'), dp_accounting.GaussianDpEvent,
                            1.0, 1e-5, _Z)
    # Missing fixed parameters of an event: Python's own error names them.
    with self.assertRaisesRegex(
        TypeError, "'l2_sensitivity', 'num_clients'"
        ", and 'dimension'"):
      ddg.release_event(local_stddev=1.0)  # pylint: disable=no-value-for-parameter  # the missing argument is the test
    with self.assertRaisesRegex(TypeError, 'num_clients must be an integer'):
      ddg.release_event(1.0, 1.0, '10', 4)
    with self.assertRaisesRegex(ValueError, 'local_stddev'):
      ddg.release_event(1.0, 0.25, 10, 4)
    with self.assertRaisesRegex(ValueError, 'target_delta'):
      _calibrate(dp_accounting.GaussianDpEvent, _Z, 1.0, delta=2.0)
    with self.assertRaisesRegex(ValueError, 'target_epsilon'):
      _calibrate(dp_accounting.GaussianDpEvent, _Z, float('nan'))
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      _calibrate(_pbm(theta=0.25), _NUM_TRIALS, 1e-6)
    with self.assertRaisesRegex(ValueError, 'low end'):
      Parameter.noise('noise_multiplier', 0.0)
    with self.assertRaisesRegex(ValueError, 'high end'):
      Parameter.signal('theta', 0.25, 0.1)
    with self.assertRaisesRegex(ValueError, 'sampling'):
      calibration.rounds_event(dp_accounting.GaussianDpEvent(1.0),
                               sampling='stratified')
    with self.assertRaisesRegex(ValueError, 'need sampling'):
      calibration.rounds_event(dp_accounting.GaussianDpEvent(1.0), rate=0.1)
    with self.assertRaisesRegex(TypeError, 'rounds'):
      calibration.rounds_event(dp_accounting.GaussianDpEvent(1.0), rounds=2.5)

  def test_rounds_event_shapes(self):
    base = dp_accounting.GaussianDpEvent(1.0)
    self.assertIsInstance(calibration.rounds_event(base, 1, 'self', rate=0.1),
                          events.SelfSampledDpEvent)
    poisson = calibration.rounds_event(base,
                                       3,
                                       'poisson',
                                       sample_size=10,
                                       population=1000)
    self.assertEqual(poisson.event.sampling_probability, 0.01)
    self.assertEqual(poisson.count, 3)


def _gaussian_calibrator(eps, delta=1e-5):
  result = calibration.calibrate_gaussian(eps, delta)
  return result, result.event


def _pbm_calibrator(dimension, num_trials):

  def calibrate(eps):
    result = calibration.calibrate(
        _fresh(),
        lambda t: events.PoissonBinomialDpEvent(t, num_trials, 1000, dimension),
        eps, 1e-5, _THETA)
    return result, result.event

  return calibrate


def _plain_pld_search(make_event, parameter, target, delta, adversary):
  """The least noise of the PLD alone by `least_noise`'s default search
  (brentq to the root) on the accountant's own grid: what the fast search
  (coarse grid first, regula falsi) must agree with."""

  def eps(x):
    return pld_accountant.PldAccountant(adversary=adversary,
                                        use_rdp=False).compose(
                                            make_event(x)).get_epsilon(delta)

  return calibration.least_noise(eps, parameter.low, parameter.high,
                                 parameter.epsilon_increases, target,
                                 parameter.discrete, parameter.name)


class PldCalibrateTest(parameterized.TestCase):
  """`calibrate` with the tightest accountant (the library's default)
  searches a 10x coarser pessimistic grid first, then the fine one from
  there (`calibration._pld_search`)."""

  @parameterized.named_parameters(
      ('gaussian_rounds', lambda z: calibration.rounds_event(
          dp_accounting.GaussianDpEvent(z), 100), _Z, 'release', 2.0),
      ('self_sampled_ddg', lambda s: calibration.rounds_event(
          events.DistributedDiscreteGaussianDpEvent(1, s, 16, 1),
          50,
          'self',
          rate=0.05), _DDG_LOCAL, 'server', 0.3),
      ('ddg_one_coordinate', lambda s: dp_accounting.SelfComposedDpEvent(
          events.DistributedDiscreteGaussianDpEvent(4, s, 50, 1), 10),
       _DDG_LOCAL, 'server', 2.0),
      ('cpbm_theta', lambda t: events.PoissonBinomialDpEvent(t, 64, 100, 64),
       _THETA, 'server', 1.0),
      ('cpbm_trials', lambda m: events.PoissonBinomialDpEvent(0.1, m, 50, 1),
       _NUM_TRIALS, 'server', 3.0),
  )
  def test_fast_search_is_valid_and_agrees_with_the_plain_one(
      self, make_event, parameter, adversary, target):
    delta = 1e-5
    r = calibration.calibrate(lambda: pld_accountant.tightest(adversary),
                              make_event, target, delta, parameter)
    # Recomputed from scratch (no cached PLD): the reported epsilon, which
    # meets the target.
    pld_accountant._STATES.clear()  # pylint: disable=protected-access  # resets private state between cases
    again = pld_accountant.tightest(adversary).compose(make_event(r.value))
    self.assertEqual(again.get_epsilon(delta), r.epsilon)
    self.assertLessEqual(r.epsilon, target)
    self.assertEqual(r.bound, 'PLD')
    plain, _ = _plain_pld_search(make_event, parameter, target, delta,
                                 adversary)
    if parameter.discrete:
      self.assertEqual(r.value, plain)
    else:
      self.assertFalse(r.at_limit)
      self.assertGreaterEqual(r.epsilon, (1 - calibration.FINE_RTOL) * target)
      # Within the two searches' tolerances of each other (eps within 1e-4
      # and 1e-3 of the target; eps moves like a power of the parameter).
      self.assertAlmostEqual(r.value / plain, 1.0, delta=3e-3)

  def test_rdp_is_searched_where_it_is_smaller(self):
    # A DDG model update (d = 2^16, l2 = 1000): the coordinate-wise PLD
    # is not built (RDP is tighter), so the PLD search finds nothing and
    # the RDP search gives the RdpAccountant's own value.
    tightest = calibration.calibrate(pld_accountant.tightest, _ddg_local, 2.0,
                                     1e-5, _DDG_LOCAL)
    rdp = calibration.calibrate(_fresh(), _ddg_local, 2.0, 1e-5, _DDG_LOCAL)
    self.assertEqual(tightest.bound, 'RDP')
    self.assertEqual(tightest.value, rdp.value)
    self.assertEqual(tightest.epsilon, rdp.epsilon)

  @parameterized.named_parameters(
      # l2 budget 1 of 16 coordinates: RDP first, and RDP is smaller.
      ('rdp_smaller', 16, 1.0, 1.0, 'RDP'),
      # 1.69 of 2 coordinates: the PLD first, and the PLD is smaller.
      ('pld_smaller', 2, 1.3, 4.0, 'PLD'),
  )
  def test_search_order_changes_the_work_not_the_value(self, dimension,
                                                       l2_bound, target, bound):
    # cPBM with an l2 promise: whichever bound is searched first
    # (`_rdp_expected_smaller`, a rule on the event), the calibration is
    # the same. Over num_trials at theta 1/4 the l2 constants are computed
    # once (20 clients).
    def make_event(m):
      return events.PoissonBinomialDpEvent(0.25,
                                           m,
                                           20,
                                           dimension,
                                           l2_bound=l2_bound)

    rule = calibration._rdp_expected_smaller(  # pylint: disable=protected-access  # the accountant's RDP curve
        make_event, _NUM_TRIALS, 'zero_out')
    self.assertEqual(rule, bound == 'RDP')
    results = []
    for rdp_first in (True, False):
      with mock.patch.object(calibration,
                             '_rdp_expected_smaller',
                             lambda *args, first=rdp_first: first):
        results.append(
            calibration.calibrate(pld_accountant.tightest, make_event, target,
                                  1e-5, _NUM_TRIALS))
    self.assertEqual(results[0], results[1])
    self.assertEqual(results[0].bound, bound)


class SplitBudgetTest(parameterized.TestCase):

  @parameterized.parameters((2.0, (1.0, 10.0)), (0.5, (1.0, 1.0)),
                            (8.0, (3.0, 1.0)))
  def test_gaussians_meet_target_with_the_ratio(self, target, weights):
    split = calibration.split_budget(
        [_gaussian_calibrator, _gaussian_calibrator], weights, target, 1e-5)
    self.assertLessEqual(split.epsilon, target * (1 + 1e-9))
    self.assertGreater(split.epsilon, target * (1 - 2e-3))
    # Each part within calibrate's 0.1% of its share s w_i / sum(w).
    shares = [w / sum(weights) * split.scale for w in weights]
    for eps, share in zip(split.standalone_epsilons, shares):
      self.assertLessEqual(eps, share * (1 + 1e-9))
      self.assertGreater(eps, share * (1 - 2e-3))
    # Independent check: two Gaussians compose to one with z^-2 summed
    # (split_budget reports the tightest bound, the PLD here: two
    # discretized Gaussians composed vs one, equal to ~1e-6).
    z = sum(r.value**-2 for r in split.results)**-0.5
    self.assertAlmostEqual(pld_accountant.epsilon(
        dp_accounting.GaussianDpEvent(z), 1e-5)[0],
                           split.epsilon,
                           delta=1e-5)
    # The composition uses the budget better than the sum of the parts.
    self.assertGreater(split.scale, target)

  def test_release_at_its_limit_leaves_the_rest_to_the_other(self):
    # One coordinate, one trial: theta = 1/4 costs ~0.05 at n = 1000, far
    # below its share; the other release takes the rest of the budget.
    split = calibration.split_budget(
        [_pbm_calibrator(1, 1), _pbm_calibrator(64, 16)], [1.0, 1.0], 2.0, 1e-5)
    limited, other = split.results
    self.assertTrue(limited.at_limit)
    self.assertEqual(limited.value, 0.25)
    self.assertLess(split.standalone_epsilons[0], 0.1)
    self.assertGreater(split.epsilon, 2.0 * (1 - 2e-3))
    self.assertLessEqual(split.epsilon, 2.0 * (1 + 1e-9))
    self.assertFalse(other.at_limit)

  def test_a_release_that_cannot_be_made_that_private(self):
    # cPBM with theta fixed, m calibrated: even m = 1 costs eps_min, so the
    # bracket's low end (target / 4, half of it each) is out of its reach
    # although the target is not; the split must start where it is.
    def pbm(eps):
      result = _calibrate(_pbm(theta=0.25), _NUM_TRIALS, eps)
      return result, result.event

    eps_min = accountant.epsilon(_pbm(theta=0.25)(1), 1e-5)[0]
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      pbm(0.75 * eps_min)
    target = 3.0 * eps_min
    split = calibration.split_budget([pbm, _gaussian_calibrator], [1.0, 1.0],
                                     target, 1e-5)
    self.assertLessEqual(split.epsilon, target * (1 + 1e-9))
    self.assertGreaterEqual(split.results[0].value, 1)
    self.assertGreaterEqual(split.standalone_epsilons[0], eps_min * (1 - 1e-9))
    # Nothing can reach a target below what m = 1 alone costs.
    with self.assertRaisesRegex(ValueError, 'unreachable'):
      calibration.split_budget([pbm, _gaussian_calibrator], [1.0, 1.0],
                               0.5 * eps_min, 1e-5)

  def test_everything_at_limit(self):
    split = calibration.split_budget(
        [_pbm_calibrator(1, 1), _pbm_calibrator(1, 2)], [1.0, 1.0], 50.0, 1e-5)
    self.assertTrue(split.at_limit)
    self.assertLess(split.epsilon, 1.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'one weight per calibrator'):
      calibration.split_budget([_gaussian_calibrator], [1.0, 2.0], 1.0, 1e-5)
    with self.assertRaisesRegex(ValueError, 'weights'):
      calibration.split_budget([_gaussian_calibrator], [0.0], 1.0, 1e-5)
    with self.assertRaisesRegex(TypeError, 'callable'):
      calibration.split_budget([1.0], [1.0], 1.0, 1e-5)
    with self.assertRaisesRegex(ValueError, 'target_epsilon'):
      calibration.split_budget([_gaussian_calibrator], [1.0], -1.0, 1e-5)
