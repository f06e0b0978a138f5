"""One epsilon per run: the replace-one convention on every path, the release
never above the server, the sampler's term applied once, and `tff-ddp
privacy` printing the Python accountant's number for the same events."""

import contextlib
import io
import math
import re

from absl.testing import parameterized
import attr
import dp_accounting
import numpy as np

from tff_ddp import cli
from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import pld_accountant
from tff_ddp.accounting import conversions
from tff_ddp.accounting import events
from tff_ddp.accounting import orders as orders_lib
from tff_ddp.accounting import subsampling
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg
from tff_ddp.mechanisms import distributed_skellam as skellam

REL = dp_accounting.NeighboringRelation
ORDERS = np.asarray(orders_lib.DEFAULT_ORDERS)
INT_ORDERS = np.arange(2.0, 65.0)
_ZERO_OUT = (REL.ADD_OR_REMOVE_ONE, REL.REPLACE_SPECIAL)


def _acc(adversary='server', relation=REL.ADD_OR_REMOVE_ONE, orders=None):
  return accountant.RdpAccountant(orders, relation, adversary)


def _gauss(z):
  return dp_accounting.GaussianDpEvent(z)


def _tight_poisson(q, z, orders=ORDERS):
  return dp_accounting.rdp.RdpAccountant(orders).compose(
      dp_accounting.PoissonSampledDpEvent(q, _gauss(z)))._rdp  # pylint: disable=protected-access  # the accountant's RDP curve


class ReplaceOneGaussianTest(parameterized.TestCase):
  """GaussianDpEvent(z) costs 2 alpha / z^2 under REPLACE_ONE on every path
  (its noise multiplier is relative to the per-record bound C; replace-one
  neighbours differ by 2C), and alpha / (2 z^2) under the zero-out ones."""

  def test_plain_matches_the_closed_form(self):
    for adversary in accountant.ADVERSARIES:
      np.testing.assert_allclose(_acc(adversary,
                                      REL.REPLACE_ONE).curve(_gauss(2.0)),
                                 2.0 * ORDERS / 4.0,
                                 rtol=1e-15)
      for relation in _ZERO_OUT:
        np.testing.assert_allclose(_acc(adversary, relation).curve(_gauss(2.0)),
                                   ORDERS / 8.0,
                                   rtol=1e-15)
    # The issue's numbers: replace-one 4.73 (was 2.17, add/remove's), the
    # RDP conversion of the curve 2 alpha / z^2 itself.
    eps = accountant.epsilon(_gauss(2.0), 1e-5, 'server', REL.REPLACE_ONE,
                             ORDERS)[0]
    self.assertEqual(
        eps,
        conversions.rdp_to_epsilon(ORDERS, 2.0 * ORDERS / 4.0, 1e-5)[0])
    self.assertAlmostEqual(eps, 4.72892, places=5)
    self.assertAlmostEqual(accountant.epsilon(_gauss(2.0), 1e-5,
                                              orders=ORDERS)[0],
                           2.16588,
                           places=5)

  def test_composition_adds_per_order(self):
    event = dp_accounting.ComposedDpEvent(
        [_gauss(1.0),
         dp_accounting.SelfComposedDpEvent(_gauss(2.0), 3)])
    for adversary in accountant.ADVERSARIES:
      np.testing.assert_allclose(_acc(adversary, REL.REPLACE_ONE).curve(event),
                                 2.0 * ORDERS * (1.0 + 3.0 / 4.0),
                                 rtol=1e-14)
    # And the noise multiplier the tight sampled paths see is the
    # composition's: z^-2 = 1 + 3/4.
    z = (1.0 + 3.0 / 4.0)**-0.5
    np.testing.assert_allclose(
        _acc('release').curve(dp_accounting.PoissonSampledDpEvent(0.1, event)),
        np.minimum(
            _tight_poisson(0.1, z),
            subsampling.known_sample_rdp(lambda a: a * (1.0 + 3.0 / 4.0) / 2.0,
                                         0.1, ORDERS)),
        rtol=1e-12)

  @parameterized.parameters('server', 'release')
  def test_poisson(self, adversary):
    z, q = 1.5, 0.05
    event = dp_accounting.PoissonSampledDpEvent(q, _gauss(z))
    replace_one = subsampling.known_sample_rdp(lambda a: 2.0 * a / z**2, q,
                                               ORDERS)
    np.testing.assert_allclose(_acc(adversary, REL.REPLACE_ONE).curve(event),
                               replace_one,
                               rtol=1e-14)
    zero_out = subsampling.known_sample_rdp(lambda a: a / (2.0 * z**2), q,
                                            ORDERS)
    if adversary == 'release':  # the sample is secret: MTZ19's tight curve
      zero_out = np.minimum(zero_out, _tight_poisson(q, z))
    for relation in _ZERO_OUT:
      np.testing.assert_allclose(_acc(adversary, relation).curve(event),
                                 zero_out,
                                 rtol=1e-14)
    # q = 1 is the unsampled closed form.
    np.testing.assert_allclose(_acc(adversary, REL.REPLACE_ONE).curve(
        dp_accounting.PoissonSampledDpEvent(1.0, _gauss(z))),
                               2.0 * ORDERS / z**2,
                               rtol=1e-14)

  def test_without_replacement(self):
    z, size, population = 1.5, 20, 1000
    q = size / population
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        population, size, _gauss(z))
    # Two implementations of WBK19 agree on the convention: dp-accounting's
    # Gaussian-specific Theorem 27 at noise multiplier z / 2 and the
    # generic Theorem 9 on the replace-one curve 2 alpha / z^2.
    theirs = dp_accounting.rdp.RdpAccountant(
        INT_ORDERS, REL.REPLACE_ONE).compose(
            dp_accounting.SampledWithoutReplacementDpEvent(
                population, size, _gauss(z / 2.0)))._rdp  # pylint: disable=protected-access  # the accountant's RDP curve
    generic = subsampling.without_replacement_rdp(
        lambda a: 2.0 * np.asarray(a) / z**2, size, population, INT_ORDERS)
    np.testing.assert_allclose(theirs, generic, rtol=1e-9)
    for relation, base in ((REL.REPLACE_ONE, lambda a: 2.0 * a / z**2),
                           (REL.ADD_OR_REMOVE_ONE, lambda a: a / (2.0 * z**2))):
      known = subsampling.known_sample_rdp(base, q, INT_ORDERS)
      np.testing.assert_allclose(_acc('server', relation,
                                      INT_ORDERS).curve(event),
                                 known,
                                 rtol=1e-14)
      np.testing.assert_allclose(_acc('release', relation,
                                      INT_ORDERS).curve(event),
                                 np.minimum(known, theirs),
                                 rtol=1e-12)
      # A cohort of everyone is the unsampled release: 2 alpha / z^2
      # replace-one, alpha / (2 z^2) zero-out (was 2 alpha / z^2 for both).
      everyone = dp_accounting.SampledWithoutReplacementDpEvent(
          population, population, _gauss(z))
      for adversary in accountant.ADVERSARIES:
        np.testing.assert_allclose(_acc(adversary, relation).curve(everyone),
                                   base(ORDERS),
                                   rtol=1e-14)

  @parameterized.parameters('server', 'release')
  def test_self_sampled(self, adversary):
    z, q = 1.5, 0.05
    event = events.SelfSampledDpEvent(q, _gauss(z))
    np.testing.assert_allclose(_acc(adversary, REL.REPLACE_ONE).curve(event),
                               subsampling.known_sample_rdp(
                                   lambda a: 2.0 * a / z**2, q, ORDERS),
                               rtol=1e-14)
    np.testing.assert_allclose(_acc(adversary).curve(event),
                               np.minimum(
                                   _tight_poisson(q, z),
                                   subsampling.known_sample_rdp(
                                       lambda a: a / (2.0 * z**2), q, ORDERS)),
                               rtol=1e-14)

  def test_calibration_uses_the_replace_one_curve(self):
    # 2 alpha / z^2 = alpha / (2 (z/2)^2): calibrating under REPLACE_ONE
    # must give twice the add/remove noise multiplier. Each calibration
    # stops with eps in [0.999 target, target]; for the Gaussian's RDP
    # conversion d ln eps / d ln z is in [-2, -1] (eps ~ rho + 2 sqrt(rho
    # log(1/delta)), rho = rounds / (2 z^2)), so the two values of z / 2
    # differ by at most a relative 1e-3; 2e-3 leaves room for the grid of
    # orders making the curve of eps in z piecewise.
    kwargs = dict(target_epsilon=2.0, target_delta=1e-5, rounds=10)
    add_remove = calibration.calibrate_gaussian(**kwargs)
    replace_one = calibration.calibrate_gaussian(
        neighboring_relation=REL.REPLACE_ONE, **kwargs)
    self.assertLessEqual(replace_one.epsilon, 2.0)
    self.assertAlmostEqual(replace_one.value / (2.0 * add_remove.value),
                           1.0,
                           delta=2e-3)
    self.assertAlmostEqual(replace_one.epsilon,
                           pld_accountant.epsilon(
                               dp_accounting.SelfComposedDpEvent(
                                   _gauss(replace_one.value / 2.0), 10),
                               1e-5)[0],
                           places=12)


class ReleaseNeverAboveServerTest(parameterized.TestCase):
  """Per order, the release curve is the minimum of its bounds, one of them
  the server's; random event trees are in fuzz_accounting_test."""

  @parameterized.named_parameters(
      ('gaussian', _gauss(1.0)),
      ('ddg',
       events.DistributedDiscreteGaussianDpEvent(1000.0, 1000.0 / 50**0.5, 50,
                                                 1000)),
      ('cpbm', events.PoissonBinomialDpEvent(0.25, 16, 50, 100)),
  )
  def test_fixed_cohorts(self, base):
    # The issue's configuration: cohorts of 50 of 1000, 100 rounds. The
    # release was 34.26 against the server's 18.37 (Gaussian), 4734
    # against 223 (cPBM).
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(1000, 50, base), 100)
    for relation in REL:
      server = _acc('server', relation).compose(event)
      release = _acc('release', relation).compose(event)
      self.assertTrue(np.all(release.rdp <= server.rdp), relation)
      self.assertLessEqual(release.get_epsilon(1e-5), server.get_epsilon(1e-5))


class SamplerTermTest(parameterized.TestCase):
  """(1 + e^eps) N eta enters delta once, in the accountant, and leaves a
  finite epsilon finite when eta is the high-precision table's."""

  @staticmethod
  def _issue_event(tv):
    # The issue's run: noise multiplier 1, 50 clients, d = 16384 (20 bits).
    mechanism = ddg.compute_parameters(
        16384, ddg.Request(1.0, 1.0, 50, 20, noise_sampler='exact'))
    return attr.evolve(mechanism.dp_event(), sampler_tv_distance=tv)

  def test_tiny_eta_keeps_the_exact_epsilon(self):
    delta = 1e-5
    exact = _acc().compose(self._issue_event(None), 50)
    eps_exact, order = exact.get_epsilon_and_optimal_order(delta)
    self.assertAlmostEqual(eps_exact, 57.3444, places=3)
    self.assertLess(exact.get_epsilon(delta / 2), 100.0)
    table = _acc().compose(self._issue_event(2.0**-230), 50)
    self.assertEqual(table.sampler_tv_mass, 50 * 50 * 16384 * 2.0**-230)
    eps = table.get_epsilon(delta)
    # eps_exact <= eps <= eps_exact's curve at its order with delta less
    # the term: + log(delta / (delta - x)) / (order - 1), x the term at
    # eps <= 100 (the conversion's delta enters as -log(delta)/(alpha-1)).
    x = (1.0 + math.exp(100.0)) * table.sampler_tv_mass
    self.assertGreaterEqual(eps, eps_exact)
    self.assertLessEqual(
        eps, eps_exact + math.log(delta / (delta - x)) / (order - 1.0))
    # The old table's eta = 2^-106 makes the same run infinite.
    self.assertEqual(
        _acc().compose(self._issue_event(2.0**-106), 50).get_epsilon(delta),
        math.inf)

  def test_the_tables_term_is_below_1e_20_of_delta(self):
    # The target, on the mechanisms' own events with their default
    # (table) samplers: the issue's run (d = 16384, 50 clients, 20 bits,
    # z = 1, 50 rounds) and its Skellam twin. The term (1 + e^eps) N eta,
    # eta the tables' bound, against delta.
    delta = 1e-5
    for module in (ddg, skellam):
      mechanism = module.compute_parameters(16384,
                                            module.Request(1.0, 1.0, 50, 20))
      self.assertEqual(mechanism.noise_sampler, 'table')
      self.assertLessEqual(mechanism.sampler_tv_distance, 2.0**-230)
      table = _acc().compose(mechanism.dp_event(), 50)
      eps = table.get_epsilon(delta)
      self.assertTrue(math.isfinite(eps))
      term = (1.0 + math.exp(eps)) * table.sampler_tv_mass
      self.assertLess(term, 1e-20 * delta, module.__name__)
      exact = _acc().compose(
          attr.evolve(mechanism.dp_event(), sampler_tv_distance=None), 50)
      self.assertAlmostEqual(eps, exact.get_epsilon(delta), places=9)

  def test_finite_below_100_at_2_to_the_40_samples(self):
    # 2^10 rounds of 2^10 clients x 2^20 coordinates, delta = 1e-12: the
    # largest run the table's target covers, at eps just under 100.
    delta = 1e-12
    event = lambda tv: events.DistributedDiscreteGaussianDpEvent(
        1000.0, 3.8 * 1000.0 / 32.0, 2**10, 2**20, sampler_tv_distance=tv)
    exact = _acc().compose(event(None), 2**10)
    eps_exact, order = exact.get_epsilon_and_optimal_order(delta)
    self.assertBetween(exact.get_epsilon(delta / 2), 90.0, 100.0)
    table = _acc().compose(event(2.0**-230), 2**10)
    self.assertEqual(table.sampler_tv_mass, 2.0**40 * 2.0**-230)
    eps = table.get_epsilon(delta)
    x = (1.0 + math.exp(100.0)) * table.sampler_tv_mass
    self.assertGreaterEqual(eps, eps_exact)
    self.assertLessEqual(
        eps, eps_exact + math.log(delta / (delta - x)) / (order - 1.0))

  def test_counted_once_per_sample_and_alike_for_both_adversaries(self):
    e = events.DistributedDiscreteGaussianDpEvent(10.0,
                                                  3.0,
                                                  7,
                                                  11,
                                                  sampler_tv_distance=1e-30)
    sampled = dp_accounting.SampledWithoutReplacementDpEvent(100, 7, e)
    tree = dp_accounting.ComposedDpEvent([
        e,
        dp_accounting.SelfComposedDpEvent(sampled, 3),
        events.SelfSampledDpEvent(0.5, e)
    ])
    for adversary in accountant.ADVERSARIES:
      acc = _acc(adversary).compose(tree, 2)
      self.assertAlmostEqual(acc.sampler_tv_mass / (2 * 5 * 7 * 11 * 1e-30),
                             1.0,
                             places=12)


def _cli_epsilons(argv):
  """{adversary: printed epsilon string} and the output of tff-ddp privacy."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    code = cli.main(['privacy'] + argv)
  assert code == 0, out.getvalue()
  found = dict(
      re.findall(
          r'epsilon against (?:the )?(server|readers of the '
          r'release)[^:]*: (\S+)', out.getvalue()))
  return {
      ('server' if k == 'server' else 'release'): v for k, v in found.items()
  }, out.getvalue()


def _ddg_flags(event):
  return [
      '--mechanism', 'ddg', '--l2-sensitivity',
      repr(event.l2_sensitivity), '--local-stddev',
      repr(event.local_stddev), '--num-clients',
      str(event.num_clients), '--dimension',
      str(event.dimension)
  ]


class CliMatchesPythonTest(parameterized.TestCase):
  """The CLI prints, to its 6 digits, the epsilon the Python accountant
  gives the events a factory's mechanism hands out, composed by hand."""

  def _check(self, argv, event, rounds, delta):
    printed, out = _cli_epsilons(
        argv + ['--rounds', str(rounds), '--delta',
                repr(delta)])
    self.assertLen(printed, 2, out)
    for adversary in accountant.ADVERSARIES:
      if adversary == 'server' and '--mechanism' in argv and argv[
          argv.index('--mechanism') + 1] == 'gaussian':
        # A central Gaussian: the server adds the noise and sees the exact
        # sum, whatever the accountant gives the event's noise.
        self.assertEqual(printed[adversary], 'inf', out)
        continue
      # The CLI reports the tightest accountant's epsilon.
      eps = pld_accountant.tightest(adversary).compose(
          event, rounds).get_epsilon(delta)
      self.assertEqual(printed[adversary], f'{eps:.6g}', f'{adversary}: {out}')
    return printed, out

  @parameterized.named_parameters(
      ('table', 'table', []), ('exact', 'exact', ['--noise-sampler', 'exact']))
  def test_ddg_factory_events(self, sampler, flag):
    for dim, bits, rounds in ((16384, 20, 50), (1024, 16, 5)):
      mechanism = ddg.compute_parameters(
          dim, ddg.Request(1.0, 1.0, 50, bits, noise_sampler=sampler))
      event = mechanism.dp_event()
      self.assertEqual(bool(event.sampler_tv_distance), sampler == 'table')
      # The CLI's event is the mechanism's event.
      self.assertEqual(
          ddg.release_event(l2_sensitivity=event.l2_sensitivity,
                            local_stddev=event.local_stddev,
                            num_clients=50,
                            dimension=dim,
                            noise_sampler=sampler), event)
      printed, out = self._check(_ddg_flags(event) + flag, event, rounds, 1e-5)
      if (dim, sampler) == (16384, 'exact'):
        self.assertEqual(printed['server'], '57.3444')
      if (dim, sampler) == (16384, 'table'):
        # inf while the table's eta is 2^-106, and the CLI says why; the
        # exact sampler's number once eta is the high-precision table's.
        if ddg.sampler_tv_distance('table') > 2.0**-200:
          self.assertEqual(printed['server'], 'inf')
          self.assertIn('--noise-sampler exact', out)
        else:
          self.assertEqual(printed['server'], '57.3444')

  @parameterized.named_parameters(
      ('poisson', ['--sampling', 'poisson', '--rate', '0.05'
                  ], lambda e: dp_accounting.PoissonSampledDpEvent(0.05, e)),
      ('without_replacement', [
          '--sampling', 'without-replacement', '--population', '1000'
      ], lambda e: dp_accounting.SampledWithoutReplacementDpEvent(1000, 50, e)),
      ('self', ['--sampling', 'self', '--rate', '0.05'
               ], lambda e: events.SelfSampledDpEvent(0.05, e)),
  )
  def test_sampled(self, flags, wrap):
    event = ddg.compute_parameters(1024, ddg.Request(1.0, 1.0, 50,
                                                     16)).dp_event()
    self._check(_ddg_flags(event) + flags, wrap(event), 100, 1e-6)
    gaussian = ['--mechanism', 'gaussian', '--noise-multiplier', '1.0']
    if '--population' in flags:  # the issue's cohorts of 50 of 1000
      gaussian += ['--clients-per-round', '50']
    self._check(gaussian + flags, wrap(_gauss(1.0)), 100, 1e-5)
    cpbm = events.PoissonBinomialDpEvent(0.1, 16, 50, 64)
    self._check([
        '--mechanism', 'cpbm', '--theta', '0.1', '--num-trials', '16',
        '--num-clients', '50', '--dimension', '64'
    ] + flags, wrap(cpbm), 10, 1e-5)

  def test_skellam(self):
    event = events.DistributedSkellamDpEvent(1000.0, 300.0**2, 100, 4096)
    self._check([
        '--mechanism', 'skellam', '--l2-sensitivity', '1000', '--local-stddev',
        '300', '--num-clients', '100', '--dimension', '4096'
    ], event, 3, 1e-6)

  def test_calibration(self):
    _, out = _cli_epsilons([
        '--mechanism', 'ddg', '--l2-sensitivity', '1000', '--num-clients',
        '100', '--dimension', '4096', '--rounds', '20', '--sampling',
        'without-replacement', '--population', '1000', '--delta', '1e-6',
        '--target-epsilon', '3'
    ])
    result = calibration.calibrate(
        accountant.RdpAccountant,
        lambda s: calibration.rounds_event(ddg.release_event(
            1000.0, s, 100, 4096),
                                           20,
                                           'without-replacement',
                                           sample_size=100,
                                           population=1000), 3.0, 1e-6,
        calibration.Parameter.noise('local_stddev',
                                    ddg.MIN_SCALED_LOCAL_STDDEV))
    self.assertTrue(result.event.event.event.sampler_tv_distance)
    self.assertIn(f'local-stddev: {result.value:.6g}', out)
    for adversary in accountant.ADVERSARIES:
      eps = accountant.epsilon(result.event, 1e-6, adversary)[0]
      self.assertRegex(
          out, rf'{adversary if adversary == "server" else "release"}'
          rf'[^\n]*: {re.escape(f"{eps:.6g}")} ')
