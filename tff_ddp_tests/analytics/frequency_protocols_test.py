"""The frequency protocols as classes: each builder takes its own arguments
only, the public entry point maps the protocol's name once and keeps
accepting the calls it accepted, and a new protocol is one class."""

import contextlib
import dataclasses
import inspect
import math
import types
from unittest import mock

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.accounting import accountant
from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.frequency import clipping as fq
from tff_ddp.analytics.frequency import data as fd
from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import multi_round
from tff_ddp.analytics.frequency import setting as setting_lib
from tff_ddp.analytics.frequency import single_release
from tff_ddp.analytics.frequency import simulation as fs
from tff_ddp.analytics.frequency import two_phase
from tff_ddp.cli import frequency as frequency_cli

_D = 6
_SETTING = dict(dim=_D, expected_clients_per_round=16, epsilon=10.0, delta=1e-4)
# Each protocol's required arguments (the entry point's small case).
_OWN = {
    'two_phase': dict(max_items=100),
    'multi_round': dict(rounds=3),
    'fixed': dict(clip=20.0),
    'normalize': {},
    'sample': dict(sample_items=4),
}


def _setting(**kwargs):
  return setting_lib.FrequencySetting(**dict(_SETTING, **kwargs))


# What the stand-in builder returns: it spends the whole budget, so the
# entry point's under-spent-budget check (budget.warn_if_underspent) passes
# it through untouched.
CALIBRATED = types.SimpleNamespace(epsilon=math.inf)


class RecordingBuilder:
  """Stands in for a protocol's builder: records what it was given."""

  def __init__(self, parameters_class):
    self.parameters_class = parameters_class
    self.calls = []

  def __enter__(self):
    calls = self.calls
    original = self.parameters_class.calibrate

    def calibrate(cls, setting, **kwargs):
      del cls
      calls.append((setting, kwargs))
      return CALIBRATED

    calibrate.__signature__ = inspect.signature(original.__func__)
    self._patch = mock.patch.object(self.parameters_class, 'calibrate',
                                    classmethod(calibrate))
    self._patch.start()
    return self

  def __exit__(self, *exc):
    self._patch.stop()


class EntryPointTest(parameterized.TestCase):
  """`frequency_parameters(protocol, ...)`: one mapping, today's calls."""

  def test_each_name_maps_to_its_class(self):
    self.assertEqual(
        fp.PROTOCOLS,
        ('two_phase', 'multi_round', 'fixed', 'normalize', 'sample'))
    for name in fp.PROTOCOLS:
      parameters_class = fp.protocol_class(name)
      self.assertEqual(parameters_class.protocol, name)
      self.assertTrue(issubclass(parameters_class, fp.FrequencyParameters))
    # The CLI keeps its own list (no TensorFlow at parse time): the same.
    self.assertEqual(frequency_cli.PROTOCOLS, fp.PROTOCOLS)
    with self.assertRaisesRegex(ValueError, 'protocol must be one of'):
      fp.protocol_class('ocpbm')
    with self.assertRaisesRegex(TypeError, 'protocol'):
      fp.protocol_class(None)

  @parameterized.parameters(*_OWN)
  def test_the_builder_gets_the_setting_and_its_arguments(self, name):
    # Every argument the setting takes, and the protocol's own.
    parameters_class = fp.protocol_class(name)
    with RecordingBuilder(parameters_class) as builder:
      result = fp.frequency_parameters(name,
                                       _D,
                                       16,
                                       10.0,
                                       1e-4,
                                       calibrate='num_trials',
                                       theta=0.2,
                                       divisor='linf',
                                       adversary='release',
                                       value_dtype='int64',
                                       seed=3,
                                       kashin_options={'redundancy': 2.0},
                                       **_OWN[name])
    self.assertIs(result, CALIBRATED)
    # pylint: disable-next=unbalanced-tuple-unpacking  # one recorded call, as the test requires
    (setting, kwargs), = builder.calls
    self.assertEqual(
        setting,
        _setting(calibration=setting_lib.CalibrateNumTrials(0.2),
                 divisor='linf',
                 adversary='release',
                 value_dtype=np.int64,
                 seed=3,
                 kashin_options={'redundancy': 2.0}))
    self.assertEqual(kwargs, _OWN[name])

  def test_none_is_not_given(self):
    # For another protocol's argument, and for an own argument whose
    # default is None.
    with RecordingBuilder(single_release.NormalizeParameters) as builder:
      fp.frequency_parameters('normalize',
                              _D,
                              16,
                              10.0,
                              1e-4,
                              clip=None,
                              max_items=None,
                              rounds=None)
    self.assertEqual(builder.calls[0][1], {})
    with RecordingBuilder(multi_round.MultiRoundParameters) as builder:
      fp.frequency_parameters('multi_round',
                              _D,
                              16,
                              10.0,
                              1e-4,
                              clip=None,
                              target_quantile=None)
    self.assertEqual(builder.calls[0][1], {})

  @parameterized.named_parameters(
      ('max_items', 'fixed', dict(clip=1.0, max_items=3), ValueError,
       r"max_items does not apply to protocol='fixed' \(only to "
       r"\('two_phase',\)\)"),
      ('rounds', 'two_phase', dict(max_items=3, rounds=2), ValueError,
       "rounds does not apply to protocol='two_phase'"),
      ('array', 'fixed', dict(clip=1.0, num_bins=np.array(
          [1, 2])), ValueError, "num_bins does not apply to protocol='fixed'"),
      ('clip', 'normalize', dict(clip=1.0), ValueError,
       r"clip does not apply to protocol='normalize' \(only to "
       r"\('multi_round', 'fixed'\)\)"),
      # Another protocol's argument is refused at its default value too.
      ('rounds_default', 'fixed', dict(clip=1.0, rounds=1), ValueError,
       "rounds does not apply to protocol='fixed'"),
      ('unknown', 'fixed', dict(clip=1.0, clips=1.0), TypeError,
       "unexpected keyword argument 'clips'"),
      ('missing', 'sample', {}, ValueError,
       "protocol='sample' needs sample_items"),
      ('missing_none', 'fixed', dict(clip=None), ValueError,
       "protocol='fixed' needs clip"),
      ('own_none', 'multi_round', dict(rounds=None), TypeError, 'rounds'),
  )
  def test_refused_before_calibrating(self, name, kwargs, error, message):
    with mock.patch.object(setting_lib.FrequencySetting, 'split',
                           side_effect=AssertionError('calibrated')), \
        mock.patch.object(setting_lib.FrequencySetting, 'frequency_calibrator',
                          side_effect=AssertionError('calibrated')):
      with self.assertRaisesRegex(error, message):
        fp.frequency_parameters(name, _D, 16, 10.0, 1e-4, **kwargs)

  def test_calibration_is_resolved_into_an_object(self):
    self.assertEqual(setting_lib.calibration_from_arguments(),
                     setting_lib.CalibrateTheta(fp.DEFAULT_NUM_TRIALS))
    self.assertEqual(setting_lib.calibration_from_arguments('theta', 7),
                     setting_lib.CalibrateTheta(7))
    self.assertEqual(
        setting_lib.calibration_from_arguments('num_trials', theta=0.1),
        setting_lib.CalibrateNumTrials(0.1))
    with self.assertRaisesRegex(ValueError, 'calibrate must be one of'):
      setting_lib.calibration_from_arguments('m')
    with self.assertRaisesRegex(ValueError, 'theta must be'):
      setting_lib.CalibrateNumTrials(0.3)
    with self.assertRaisesRegex(TypeError, 'calibration must be'):
      _setting(calibration='theta')


class BuilderTest(parameterized.TestCase):
  """A builder takes its protocol's arguments and no other."""

  @parameterized.parameters(
      (single_release.FixedClipParameters, dict(clip=1.0, max_items=3)),
      (single_release.NormalizeParameters, dict(clip=1.0)),
      (single_release.SampleParameters, dict(sample_items=2, rounds=1)),
      (two_phase.TwoPhaseParameters, dict(max_items=3, learning_rate=1.0)),
      (multi_round.MultiRoundParameters, dict(num_bins=64)),
  )
  def test_another_protocols_argument_is_pythons_error(self, cls, kwargs):
    with self.assertRaisesRegex(TypeError, 'unexpected keyword argument'):
      cls.calibrate(_setting(), **kwargs)

  def test_a_builder_equals_the_entry_point(self):
    direct = single_release.FixedClipParameters.calibrate(_setting(seed=9),
                                                          clip=20.0)
    entry = fp.frequency_parameters('fixed',
                                    _D,
                                    16,
                                    10.0,
                                    1e-4,
                                    seed=9,
                                    clip=20.0)
    self.assertIsInstance(entry, single_release.FixedClipParameters)
    for field in dataclasses.fields(direct):
      if field.name != 'factory':  # (objects without __eq__)
        self.assertEqual(getattr(direct, field.name),
                         getattr(entry, field.name), field.name)
    self.assertEqual(fp.describe(direct), fp.describe(entry))

  def test_fields_are_the_protocols_own(self):
    # No field that applies "depending on the protocol": the phased
    # protocols' clip rule is theirs, a baseline has none of it.
    shared = {f.name for f in dataclasses.fields(fp.FrequencyParameters)}
    own = {
        c.protocol: {f.name for f in dataclasses.fields(c)} - shared
        for c in setting_lib.protocol_classes()
    }
    self.assertEqual(
        own, {
            'two_phase': {
                'target_quantile', 'quantile', 'num_bins', 'upper_bound',
                'budget'
            },
            'multi_round': {
                'clip', 'target_quantile', 'indicator_factory',
                'indicator_theta', 'indicator_num_trials', 'rounds',
                'total_clients', 'disjoint_rounds', 'learning_rate', 'budget'
            },
            'fixed': {'clip'},
            'normalize': set(),
            'sample': {'sample_items'}
        })


@contextlib.contextmanager
def _presence_protocol():
  """Defines (registers) a protocol made for this test by the docs'
  checklist, and removes it after: each user reports which items it holds
  (min(x, 1)), cPBM at C = sqrt(d)."""

  @dataclasses.dataclass(frozen=True)
  class PresenceParameters(single_release.SingleReleaseParameters):
    """Which items a user holds, at C = sqrt(d) (test only)."""

    protocol = 'presence'

    @classmethod
    def calibrate(cls, setting):
      return cls._calibrated(setting, math.sqrt(setting.dim))

    @property
    def clip(self):
      return math.sqrt(self.dim)

    def client_values(self, x, round_seed):
      del round_seed
      return tf.minimum(tf.cast(x, tf.float64), 1.0)

    def simulated_values(self, x, rng):
      del rng
      return np.minimum(np.asarray(x, np.float64), 1.0)

  try:
    yield PresenceParameters
  finally:
    setting_lib._CLASSES.pop('presence', None)  # pylint: disable=protected-access  # unregisters the test class


class NewProtocolTest(parameterized.TestCase):
  """The checklist of `frequency.setting`: one class, nothing else."""

  def test_entry_point_and_budget(self):
    with _presence_protocol() as presence:
      p = fp.frequency_parameters('presence', _D, 16, 10.0, 1e-4)
      with self.assertRaisesRegex(
          ValueError, 'clip does not apply to '
          "protocol='presence'"):
        fp.frequency_parameters('presence', _D, 16, 10.0, 1e-4, clip=2.0)
      # A second protocol of the same name is refused.
      with self.assertRaisesRegex(TypeError, "'presence' exists already"):
        type('Again', (presence,), {'protocol': 'presence'})
    with self.assertRaisesRegex(ValueError, 'protocol must be one of'):
      fp.frequency_parameters('presence', _D, 16, 10.0, 1e-4)
    self.assertIsInstance(p, presence)
    self.assertLessEqual(
        accountant.epsilon(p.event, 1e-4)[0], 10.0 * (1 + 1e-9))
    self.assertIn(f'presence: cPBM theta={p.theta:.4f}', fp.describe(p))
    self.assertIn(f'C={math.sqrt(_D):g}', fp.describe(p))
    self.assertEqual(p.ring_capacity().capacity,
                     p.factory.capacity(p.aggregated_type).capacity)

  @pytest.mark.slow  # builds and runs a TFF process
  def test_process_and_simulator(self):
    # Both release cPBM(min(x, 1)) at C = sqrt(d): unbiased for
    # sum_i x'_i min(1, C / ||y_i||) (x' = min(x, 1), y_i its Kashin
    # representation in the round's frame, whose norm may exceed ||x'_i||
    # by a few percent), per coordinate with variance <= n (C / (m
    # theta))^2 m / 4 (eq. 3 times n, through rows of U with unit norm): 5
    # of those stddevs (a Gaussian tail of 6e-7 per coordinate). No test
    # seed: under one, clients with equal inputs (most hold every item)
    # draw equal noise, and the sum's variance is not n times a client's.
    with _presence_protocol():
      p = fp.frequency_parameters('presence', _D, 16, 10.0, 1e-4)
    n = 16
    x = fd.iid(n, _D, 0).astype(np.float32)
    x[0] = 0.0  # a user without data
    present = np.minimum(x, 1.0).astype(np.float64)
    sd = math.sqrt(n * (p.clip / (p.num_trials * p.theta))**2 * p.num_trials /
                   4.0)

    def expected(seed):
      norms = fs.norms_of(fs.representations(p.encoder(), present, seed))
      return fq.expected_sum(present, norms, p.clip)

    process = fp.build_frequency_process_from_parameters(p)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    state = process.initialize()
    output = process.next(state, list(x))
    self.assertEqual(output.measurements['clip'], p.clip)
    seed = secure_sum.round_seed({k: tf.constant(v) for k, v in state.items()})
    np.testing.assert_array_less(np.abs(output.result - expected(seed)), 5 * sd)
    # The simulator draws the round's seed first (`fs.fixed`).
    simulated = fs.fixed(p, x, np.random.default_rng(0))
    seed = fs.round_seed(np.random.default_rng(0))
    np.testing.assert_array_less(np.abs(simulated.estimate - expected(seed)),
                                 5 * sd)


class PhaseOneRingTest(parameterized.TestCase):
  """TFFE's phase-1 ring is sized from the (public) number of users: a
  fixed 2^18 refuses 2^18 or more users ("use bits >= 19")."""

  def test_the_least_bits_that_hold_one_trial_per_user(self):
    self.assertEqual(two_phase.quantile_bits(1000), 18)
    self.assertEqual(two_phase.quantile_bits(2**18 - 1), 18)
    self.assertEqual(two_phase.quantile_bits(2**18), 19)
    self.assertEqual(two_phase.quantile_bits(300000), 19)
    self.assertEqual(two_phase.quantile_bits(10**6), 20)
    for n in (2**18, 300000, 10**6):
      bits = two_phase.quantile_bits(n)
      self.assertGreater(2**bits, n)  # m = 1 fits: n m < 2^bits
      self.assertLessEqual(2**(bits - 1), n)  # and one bit less does not

  def test_eighteen_bits_refuse_what_the_sized_ring_holds(self):
    from tff_ddp.analytics.quantiles import calibration as qc
    from tff_ddp.analytics.quantiles import encodings as hg
    n = 300000
    with self.assertRaisesRegex(ValueError, 'use bits >= 19'):
      qc.quantile_parameters(hg.Haar(64), 'poisson_binomial', 64,
                             qc.QuantileSetting(n, 0.5, 1e-7, bits=18))
    params = qc.quantile_parameters(
        hg.Haar(64), 'poisson_binomial', 64,
        qc.QuantileSetting(n, 0.5, 1e-7, bits=two_phase.quantile_bits(n)))
    self.assertGreaterEqual(params.ring_capacity().capacity, n)
