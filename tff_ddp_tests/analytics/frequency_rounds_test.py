"""Tests of the batched frequency releases (`frequency.rounds`).

The clients' probabilities are checked bit for bit against the client
code; the refusal comes before any draw; the noise is fresh unless
seeded; and the estimates are checked in law (z-scores of the estimate
minus the true sum, standardised by the noise bound the CLI prints) and
against one TFF run of the same protocol.
"""

import functools
import math
import types
import warnings

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import rounds as fr
from tff_ddp.cli import frequency as frequency_cli
from tff_ddp.utils import rounds


@functools.lru_cache(maxsize=None)  # calibrations take seconds to a minute
def _params(protocol, n, dim=20, **kwargs):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    return fp.frequency_parameters(protocol,
                                   dim,
                                   n,
                                   4.0,
                                   1e-6,
                                   num_trials=30,
                                   **kwargs)


def _data(n, dim=20, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.poisson(0.3, size=(n, dim)).astype(np.float32)
  x[0] = 0.0  # a user without items
  return x


class ProbabilitiesTest(parameterized.TestCase):

  @parameterized.parameters('normalize', 'fixed')
  def test_batch_probabilities_are_the_clients_bit_for_bit(self, protocol):
    kwargs = dict(clip=3.0) if protocol == 'fixed' else {}
    mechanism = _params(protocol, 1000, **kwargs).mechanism()
    xs = _data(40).astype(np.float64) / 3.0
    xs[1, 2] = np.nan  # a non-finite client: zeros
    xs[2] *= 100.0  # clipped
    seed = tf.constant([7, 8], tf.int64)
    batch = fr.batch_probabilities(mechanism, xs, seed).numpy()
    for i in range(len(xs)):
      one, _ = mechanism.client_probabilities(tf.constant(xs[i]), seed)
      np.testing.assert_array_equal(batch[i], one.numpy(), err_msg=str(i))


class RunTest(parameterized.TestCase):

  def test_refused_before_anything_is_drawn(self):
    params = _params('normalize', 1000)
    n = params.ring_capacity().capacity + 1
    with self.assertRaises(rounds.RoundRefusedError):
      fr.run(params,
             np.zeros([n, params.dim], np.float32),
             progress=lambda *a: self.fail('drew'))

  def test_multi_round_and_sample_are_not_batched(self):
    for protocol in ('multi_round', 'sample'):
      with self.assertRaisesRegex(ValueError, 'not batched'):
        fr.run(types.SimpleNamespace(protocol=protocol), _data(10))

  def test_noise_is_fresh_unless_seeded(self):
    # (two_phase's phase 1 is the batched quantile round, tested in
    # quantile_rounds_test; its calibration alone takes ~10 s.)
    params = _params('normalize', 1000)
    x = _data(1000)
    runs = [
        fr.run(params, x, noise_seed=s).estimate for s in (None, None, 3, 3)
    ]
    self.assertFalse(np.array_equal(runs[0], runs[1]))
    np.testing.assert_array_equal(runs[2], runs[3])


class HarnessContextTest(parameterized.TestCase):

  def test_secure_sums_run_on_the_context_the_harness_installed(self):
    """The test context is in place without a call to `use_test_context`.

    This module imports `tff_ddp.analytics` (whose `require_tff` looks TFF
    up with `find_spec`) before `tensorflow_federated`: the harness's hook
    once took that look-up for the import, TFF's own context (no secure
    sums) stayed, and the next module's rounds in this process failed with
    MissingContextError (factories_test's kashin round, for one).
    """
    import tensorflow_federated as tff

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def secure(values):
      return tff.backends.mapreduce.federated_secure_modular_sum(values, 8)

    self.assertEqual(rounds.user_facing(secure)([3, 7]), 2)  # 10 mod 8


@pytest.mark.slow  # 12 releases of 3000 users, a TFF run: ~30 s
class LawTest(parameterized.TestCase):

  def test_fixed_estimate_is_unbiased_with_the_printed_noise(self):
    # No user is clipped at C = 200 (||y|| <= K ||x|| with ||x|| <= 12), so
    # the estimate minus sum_i x_i is the noise alone: per item at most
    # the printed sd (p(1 - p) <= 1/4, here p ~ 1/2: about equal). 12
    # runs x 20 items: |mean z| < 5 / sqrt(240), var(z) in [0.55, 1.5]
    # (chi^2_240 / 240 has sd 0.09).
    n, reps = 3000, 12
    params = _params('fixed', n, clip=200.0)
    x = _data(n)
    self.assertLess(np.linalg.norm(x, axis=1).max(), 13)
    sd = frequency_cli._noise_sd(params, [(200.0, n)])  # pylint: disable=protected-access  # tests a private part
    z = np.concatenate([
        (fr.run(params, x).estimate - x.sum(0)) / sd for _ in range(reps)
    ])
    self.assertLess(abs(z.mean()), 5 / math.sqrt(z.size))
    self.assertBetween(z.var(), 0.55, 1.5)

  def test_a_tff_run_and_a_batched_run_agree_within_the_noise(self):
    n = 400
    params = _params('normalize', n)
    x = _data(n)
    process = fp.build_frequency_process_from_parameters(params)
    tff_estimate = np.asarray(
        process.next(process.initialize(), list(x)).result)
    batched = fr.run(params, x).estimate
    sd = frequency_cli._noise_sd(params, [(1.0, n)])  # pylint: disable=protected-access  # tests a private part
    # Normalize's target: sum_i x_i / ||x_i|| (no rescaling).
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    target = (x / np.where(norms > 0, norms, 1.0)).sum(0)
    for estimate in (tff_estimate, batched):
      self.assertLess(np.abs(estimate - target).max() / sd, 5.0)
