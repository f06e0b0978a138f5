"""The histogram encodings, estimators and simulator, each checked by what
defines its output.

* Outputs a seed or an index defines on every machine are pinned (SHA-256
  of their int64 or float64 bytes, first 16 hex digits): the encodings, the
  simulator's encodings of values, and its DDG round (integer noise from
  the alias table and an integer scaling c, decoded by one correctly
  rounded product by 1/c per coordinate).
* The estimators' floats come from TF reductions (cumulative sums, sums,
  conjugate gradients) whose last bits depend on the instruction set: they
  are compared bit for bit with the functions the `Encoding` classes
  replaced (`histograms_oracle`), in the same process.
* Calibrated and accounted floats (cPBM's theta, the DDG's epsilon) come
  from the accountant's float curves: theta is checked against the
  calibration's stopping rule on this machine and against its value within
  the tolerance that rule allows, epsilon recomputed from its event;
  decisions (the ring's trials, the integer scaling) exactly, with a check
  that they are not near a tie. The cPBM round (numpy's binomials at
  theta's probabilities) is checked against its closed form fed the same
  draws.

To see today's digests (after a deliberate change of what a seed defines,
which its commit must say): `python -c 'from
tff_ddp_tests.analytics import histograms_pinned_test as t;
t.print_digests()'`.
"""

import hashlib
import math

from absl.testing import parameterized
import attr
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.accounting import accountant
from tff_ddp.accounting import pld_accountant
from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import simulation as sim
from tff_ddp.mechanisms import poisson_binomial as pbm_mechanism
from tff_ddp_tests.analytics import histograms_oracle as oracle

_BINS = 8
_N = 7  # the count of count='exact'
_CLIENTS = 16
_EPSILON, _DELTA = 1.0, 1e-5


def _digest(value) -> str:
  array = np.asarray(value)
  dtype = np.int64 if array.dtype.kind in 'iub' else np.float64
  return hashlib.sha256(np.ascontiguousarray(array,
                                             dtype).tobytes()).hexdigest()[:16]


def _noisy(method):
  """A fixed noisy sum of the method's length (values far from integers)."""
  length = hg.encoding(method, _BINS).length
  return np.random.default_rng(7).normal(size=length) * 2.0 + 1.0


def _values():
  values = np.random.default_rng(3).uniform(-1.0, 11.0, 16)
  values[[2, 5]] = np.nan, np.inf
  return values


def _codes(method):
  return sim.encodings(method, _values(), 0.0, 10.0, _BINS)


def _ddg_round(method, codes):
  """The simulator's DDG round at noise multiplier 1. Its output is
  exactly defined: integers (the codes times c plus the alias table's
  integer noise, mod M, centred) each times 1/c, the DDG's granularity,
  in one correctly rounded product (checked here)."""
  params = qc.parameters_for_noise(method, _BINS, _CLIENTS, 1.0, _DELTA)
  noisy = sim.noisy_sum('discrete_gaussian', codes, params, seed=5)
  integers = np.round(noisy * params.noise.scaling)
  np.testing.assert_array_equal(integers * params.aggregator_mechanism().gamma,
                                noisy)
  return noisy


def _integer_cases():
  """(name, int64 output) of every pinned case."""
  out = []
  for method in hg.METHODS:
    out.append((f'{method} encode',
                np.stack([
                    hg.encoding(method,
                                _BINS).encode(tf.constant(i, tf.int64)).numpy()
                    for i in range(_BINS)
                ])))
  return out


def _simulation_integer_cases():
  out = []
  for method in hg.METHODS:
    codes = _codes(method)
    out.append((f'{method} simulation.encodings', codes))
    out.append((f'{method} DDG noisy sum', _ddg_round(method, codes)))
  return out


# The encodings of every bin, the simulator's encodings of values
# (bin_index's floor((x - lower) / width) is correctly rounded element-wise,
# so they are exactly defined too) and its DDG round (`_ddg_round`).
_PINNED = {
    'flat encode': 'd55adde0bb1b7f2d',
    'tree encode': '888861e0799e6c97',
    'haar encode': '3fc9f3993bc139d5',
    'flat simulation.encodings': '012b02bb9967dc59',
    'tree simulation.encodings': 'd461ea6032d37e38',
    'haar simulation.encodings': '620248e7ed1f3584',
    'flat DDG noisy sum': 'fd3d2ba0950b16be',
    'tree DDG noisy sum': 'bcac586af1a72ccb',
    'haar DDG noisy sum': 'd5421459b7665269',
}

# cPBM's theta for 16 clients at (epsilon 1, delta 1e-5) in 18 bits by RDP
# alone (the tightest accountant's is larger) and the
# DDG's RDP epsilon at noise multiplier 1 (accounted floats: checked within the
# tolerances `SimulatorParametersTest` derives).
_THETA = {
    'flat': 0.0028775517270839624,
    'tree': 0.0016614502639920549,
    'haar': 0.0014388684208816779
}
_DDG_EPSILON = {
    'flat': 4.728924276256027,
    'tree': 4.728924276256029,
    'haar': 4.728924276256027
}
# The integer scaling c the ring allows the DDG at noise multiplier 1.
_DDG_SCALING = {'flat': 3252, 'tree': 2226, 'haar': 2001}


class PinnedOutputsTest(tf.test.TestCase, parameterized.TestCase):

  def _check(self, cases):
    for name, value in cases:
      self.assertEqual(_digest(value), _PINNED[name], name)

  def test_every_case_is_pinned(self):
    names = [name for name, _ in _integer_cases()]
    names += [f'{m} simulation.encodings' for m in hg.METHODS]
    names += [f'{m} DDG noisy sum' for m in hg.METHODS]
    self.assertEqual(sorted(names), sorted(_PINNED))

  def test_encodings(self):
    self._check(_integer_cases())
    for method in hg.METHODS:
      for i in range(_BINS):
        self.assertAllEqual(
            hg.encoding(method, _BINS).encode(tf.constant(i, tf.int64)),
            oracle.encode(method, tf.constant(i, tf.int64), _BINS))

  @parameterized.parameters(*hg.METHODS)
  def test_estimators_equal_the_function_forms(self, method):
    # The same ops in the same order: the same bits on any one machine.
    def same(got, want, what):
      self.assertEqual(
          np.asarray(got, np.float64).tobytes(),
          np.asarray(want, np.float64).tobytes(), what)

    same(
        hg.encoding(method, _BINS).sensitivities(),
        oracle.sensitivities(method, _BINS), 'sensitivities')
    same(
        hg.encoding(method, _BINS).total_norm, oracle.total_norm(method, _BINS),
        'total_norm')
    h = tf.constant(_noisy(method))
    same(
        hg.encoding(method, _BINS).estimated_total(h),
        oracle.estimated_total(method, h, _BINS), 'estimated_total')
    for count in hg.COUNTS:
      for monotone in (False, True):
        for consistent in ((False, True) if method == 'tree' else (False,)):
          kwargs = dict(num_clients=_N,
                        consistent=consistent,
                        monotone=monotone)
          got = hg.encoding(method,
                            _BINS).cdf(h,
                                       _N if hg.exact_count(count) else None,
                                       consistent=consistent,
                                       monotone=monotone)
          same(got, oracle.estimate_cdf(method, h, _BINS, count, **kwargs),
               f'cdf {count} {kwargs}')

  @pytest.mark.slow  # calibrations and TF noise sampling, ~5 s
  def test_simulator_encodings_and_ddg_round(self):
    self._check(_simulation_integer_cases())


class SimulatorParametersTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*hg.METHODS)
  def test_cpbm_calibration(self, method):
    pbm = qc.quantile_parameters(method, 'poisson_binomial', _BINS,
                                 qc.QuantileSetting(_CLIENTS, _EPSILON, _DELTA))
    # The trials the ring holds: integer arithmetic.
    self.assertEqual(pbm.noise.num_trials, (2**pbm.bits - 1) // _CLIENTS)
    self.assertEqual(pbm.noise.num_trials, 16383)
    event = pbm.factory.dp_event(pbm.value_type)

    def epsilon(theta, of=pld_accountant.epsilon):
      # The event of the factory at theta: the Bernoullis use p_high - 1/2.
      _, p_high = pbm_mechanism.probability_bounds(theta)
      return of(attr.evolve(event, theta=p_high - 0.5), _DELTA,
                pbm.adversary)[0]

    # The calibration reports the tightest valid bound (min of the PLD and
    # RDP) at its theta, within 0.1% below the target.
    self.assertEqual(epsilon(pbm.noise.theta), pbm.epsilon)
    self.assertBetween(pbm.epsilon, (1 - 1e-3) * _EPSILON, _EPSILON)
    # The least noise: the search stops within calibration.FINE_RTOL of the
    # target and epsilon grows about in proportion to theta here, so 0.1%
    # more theta overshoots.
    self.assertGreater(epsilon(pbm.noise.theta * (1 + 1e-3)), _EPSILON)
    # RDP alone needs more noise: its calibration (pinned, `_THETA`; brentq
    # with xtol 1e-12, rtol 1e-10, then a step to the safe side) still
    # meets the target by RDP, and the tightest bound's theta is larger.
    self.assertBetween(epsilon(_THETA[method], accountant.epsilon),
                       (1 - 1e-3) * _EPSILON, _EPSILON)
    slack = 8 * (1e-12 + 1e-10 * _THETA[method])
    self.assertGreater(epsilon(_THETA[method] + slack, accountant.epsilon),
                       _EPSILON)
    self.assertGreater(pbm.noise.theta, _THETA[method])

  @parameterized.parameters(*hg.METHODS)
  def test_cpbm_round_is_its_closed_form(self, method):
    codes = _codes(method)
    pbm = qc.quantile_parameters(method, 'poisson_binomial', _BINS,
                                 qc.QuantileSetting(_CLIENTS, _EPSILON, _DELTA))
    got = sim.noisy_sum('poisson_binomial', codes, pbm, seed=5)
    # The same draws: per coordinate Binomial(n_v m, p_v) for the clients
    # of value v = -1, 0, 1 (numpy's sampler, in that order), summed mod M;
    # decoded by Algorithm 2: (S - n m / 2) B / (m theta).
    mechanism = pbm.aggregator_mechanism()
    m, n = mechanism.num_trials, len(codes)
    rng = np.random.default_rng(5)
    probs = {-1: mechanism.p_low, 0: 0.5, 1: mechanism.p_high}
    total = sum(
        rng.binomial((codes == v).sum(axis=0) * m, probs[v])
        for v in (-1, 0, 1))
    self.assertLess(np.max(total), mechanism.modulus)  # no wrap: S itself
    want = (total - n * m / 2) * (mechanism.coordinate_bound /
                                  (m * mechanism.theta))
    # S - n m / 2 is exact; B / (m theta) two roundings, the product a
    # third, on either side: 6 u relative in all.
    np.testing.assert_allclose(got, want, rtol=6 * 2.0**-53, atol=0)

  @parameterized.parameters(*hg.METHODS)
  def test_ddg_scaling_and_epsilon(self, method):
    ddg = qc.parameters_for_noise(method, _BINS, _CLIENTS, 1.0, _DELTA)
    encoding = hg.encoding(method, _BINS)
    # c is a decision: the same for the noise moved by 1e-9 of itself
    # either way, so no last-bit difference of its float conditions
    # changes it.
    self.assertEqual(ddg.noise.scaling, _DDG_SCALING[method])
    for z in (1.0 - 1e-9, 1.0 + 1e-9):
      self.assertEqual(
          qc.largest_scaling(encoding, _CLIENTS, z, _DELTA, ddg.bits),
          ddg.noise.scaling)
    # Epsilon of one round of the factory's DDG: its event (integer
    # sensitivity sqrt(T) of the scaled clip l2 c, scaled noise z l2 c /
    # sqrt(n) per client), accounted here.
    event = ddg.factory.dp_event(ddg.value_type)
    c_scaled = encoding.l2 * ddg.noise.scaling
    self.assertEqual(
        event.l2_sensitivity,
        math.sqrt(math.floor(c_scaled * c_scaled * (1.0 + 2.0**-40))))
    self.assertAlmostEqual(event.local_stddev,
                           encoding.l2 * ddg.noise.scaling /
                           math.sqrt(_CLIENTS),
                           delta=1e-12 * event.local_stddev)
    self.assertEqual((event.num_clients, event.dimension),
                     (_CLIENTS, encoding.length))
    # The calibration reports the tightest bound of that event (its PLD:
    # one coordinate per level, the l0 clip), never above RDP's.
    self.assertEqual(
        pld_accountant.epsilon(event, _DELTA, ddg.adversary)[0], ddg.epsilon)
    rdp = accountant.epsilon(event, _DELTA, ddg.adversary)[0]
    self.assertLessEqual(ddg.epsilon, rdp)
    # RDP against its value: the RDP curves are float formulas (numpy's exp
    # and log among them, whose last bits vary with the instruction set),
    # each order's value within ~1e-13 relative and the minimum over the
    # orders continuous in them; 1e-9 is far wider. (The PLD's pessimistic
    # rounding is a decision per loss: not pinned across machines.)
    self.assertAlmostEqual(rdp,
                           _DDG_EPSILON[method],
                           delta=1e-9 * _DDG_EPSILON[method])


def print_digests():
  """Prints today's digests in the form of `_PINNED`."""
  for case, result in _integer_cases() + _simulation_integer_cases():
    print(f'    {case!r}: {_digest(result)!r},')
