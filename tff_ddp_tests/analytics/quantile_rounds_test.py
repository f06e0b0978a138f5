"""Tests of the batched quantile round (`tff_ddp.analytics.quantiles.rounds`).

Its claim: the TFF process's distribution. The parts that are exact are
checked exactly (each bin's pre-noise client message is the process's
client code's, whatever the seeds; the ring refusal comes before any
draw); the noise is checked in law against the stddev the process itself
reports (`noisy_total_stddev`), with tolerances from the variance; and one
TFF round on the same values lands within the same law.
"""

import io
import math
import warnings

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_ddp.analytics.quantiles import calibration as qc
from tff_ddp.analytics.quantiles import encodings as hg
from tff_ddp.analytics.quantiles import process as q
from tff_ddp.analytics.quantiles import rounds as qr
from tff_ddp.cli import common
from tff_ddp.mechanisms import binomial
from tff_ddp.utils import rounds

_LEVELS = (0.25, 0.5, 0.75)


def _setup(method, mechanism, n, bins=8, epsilon=1.0):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    params = qc.quantile_parameters(
        method, mechanism, bins,
        qc.QuantileSetting(n, epsilon, 1e-6, bits=qc_bits(n)))
  options = q.read_out_options(params.encoding, 0.0, 10.0, _LEVELS,
                               q.QuantileEstimation())
  return params, options


def qc_bits(n):
  return max(18, int(n).bit_length() + 6)


def _values(n, seed=0):
  values = 10.0 * np.random.default_rng(seed).beta(2.0, 5.0, n)
  values[:3] = [np.nan, np.inf, -np.inf]  # no value; the end bins
  return values


class ClientMessageTest(parameterized.TestCase):
  """Each bin's pre-noise message is the client code's, seed-free."""

  @parameterized.product(method=hg.METHODS)
  def test_ddg_rounding_is_the_identity_on_every_bin(self, method):
    params, _ = _setup(method, 'discrete_gaussian', 1000)
    mechanism = params.aggregator_mechanism()
    messages = qr._messages(params.encoding)  # pylint: disable=protected-access  # tests a private part
    c = params.noise.scaling
    for k in range(messages.shape[0]):
      outs = [
          mechanism.client_rounded(messages[k], tf.constant([0, 0], tf.int64),
                                   tf.constant(s, tf.int64))[0].numpy()
          for s in ([1, 2], [9, 7])
      ]
      np.testing.assert_array_equal(outs[0], outs[1])
      np.testing.assert_array_equal(outs[0],
                                    c * messages[k].numpy().astype(np.int64))

  @parameterized.product(method=hg.METHODS)
  def test_pbm_probabilities_are_the_clients(self, method):
    params, _ = _setup(method, 'poisson_binomial', 1000)
    mechanism = params.aggregator_mechanism()
    messages = qr._messages(params.encoding)  # pylint: disable=protected-access  # tests a private part
    seed = tf.constant([3, 4], tf.int64)
    for k in range(messages.shape[0]):
      probs, _ = mechanism.client_probabilities(messages[k], seed)
      # client_encode draws from exactly these probabilities: with the
      # same noise seed its draws are sample_binomial's of them.
      z, _ = mechanism.client_encode(messages[k], seed,
                                     tf.constant([5, 6], tf.int64))
      np.testing.assert_array_equal(
          z['encoded'],
          binomial.sample_binomial(probs, mechanism.num_trials,
                                   tf.constant([5, 6], tf.int64)))
      self.assertTrue(
          set(np.asarray(probs).tolist()) <=
          {mechanism.p_low, 0.5, mechanism.p_high})

  def test_bin_counts_are_the_processes_bins(self):
    encoding = hg.encoding('flat', 8)
    values = _values(1000)
    counts, missing = qr.bin_counts(encoding, values, 0.0, 10.0, chunk=97)
    self.assertEqual(missing, 1)
    index = hg.bin_index(values[1:].astype(np.float32), 0.0, 10.0, 8)
    np.testing.assert_array_equal(counts, np.bincount(index, minlength=8))


class RoundTest(parameterized.TestCase):

  def test_refused_before_anything_is_drawn(self):
    params, options = _setup('tree', 'discrete_gaussian', 500)
    capacity = params.ring_capacity().capacity
    with self.assertRaises(rounds.RoundRefusedError):
      qr.run_round(params,
                   options,
                   np.zeros(capacity + 1),
                   progress=lambda *a: self.fail('drew'))

  @parameterized.product(mechanism=qc.MECHANISMS)
  def test_noise_is_fresh_unless_seeded(self, mechanism):
    params, options = _setup('haar', mechanism, 3000)
    values = _values(3000)
    # The whole CDF (b = 8 values, each from several noisy coordinates):
    # one coordinate's discrete noise alone may repeat (it did: p ~ 1e-3).
    cdfs = [
        qr.run_round(params, options, values, noise_seed=s).cdf
        for s in (None, None, 7, 7)
    ]
    self.assertFalse(np.array_equal(cdfs[0], cdfs[1]))
    np.testing.assert_array_equal(cdfs[2], cdfs[3])


@pytest.mark.slow  # 6 x 40 rounds of 2 10^4 clients: ~15-30 s each
class LawTest(parameterized.TestCase):

  @parameterized.product(method=hg.METHODS, mechanism=qc.MECHANISMS)
  def test_noisy_total_has_the_processes_law(self, method, mechanism):
    # 20,000 clients (3 without a value), 40 fresh rounds: the noisy total
    # (the true count plus the noise of the total) standardised by the
    # stddev the process reports is N(0, 1) up to the sampler's
    # (negligible) distance; the mean of 40 is within 4.5 / sqrt(40) of 0
    # and the variance within the chi^2_40 bounds at ~1e-5 ([0.33, 2.1]).
    n, reps = 20000, 40
    params, options = _setup(method, mechanism, n)
    values = _values(n)
    truth = n - 1
    z = []
    for _ in range(reps):
      out = qr.run_round(params, options, values)
      self.assertEqual(out.status, 'ok')
      z.append((out.noisy_total - truth) / out.noisy_total_stddev)
    z = np.asarray(z)
    self.assertLess(abs(z.mean()), 4.5 / math.sqrt(reps))
    self.assertBetween(z.var(ddof=1), 0.33, 2.1)


@pytest.mark.slow  # a TFF round of 2000 clients each: ~20 s
class AgainstTffTest(parameterized.TestCase):

  @parameterized.product(mechanism=qc.MECHANISMS)
  def test_a_tff_round_lands_in_the_same_law(self, mechanism):
    n = 2000
    # Fresh entropy in the process: under a test seed, clients with equal
    # messages (a bin's) share their noise seed, not the deployed law.
    params, options = _setup('tree', mechanism, n)
    values = _values(n)
    process = q.build_quantile_process_from_parameters(params, 0.0, 10.0,
                                                       _LEVELS,
                                                       options.estimation)
    tff_out = process.next(process.initialize(),
                           list(values.astype(np.float32)))
    batched = qr.run_round(params, options, values)
    stddev = float(tff_out.measurements['noisy_total_stddev'])
    self.assertAlmostEqual(batched.noisy_total_stddev, stddev)
    for total in (float(tff_out.measurements['noisy_total']),
                  batched.noisy_total):
      self.assertLess(abs(total - (n - 1)) / stddev, 5.0)
    width = 10.0 / 8
    np.testing.assert_allclose(batched.result,
                               tff_out.result,
                               atol=width + 1e-9)


class ProgressLinesTest(parameterized.TestCase):

  def test_lines_are_rate_limited_and_close_their_step(self):
    now = [0.0]
    out = io.StringIO()
    progress = common.ProgressLines('quantiles',
                                    every=5.0,
                                    stream=out,
                                    clock=lambda: now[0])
    progress('tree', 10, 100)  # t = 0: nothing yet
    now[0] = 6.0
    progress('tree', 50, 100)
    now[0] = 7.0
    progress('tree', 60, 100)  # within 5 s: dropped
    progress('tree', 100, 100)  # the step's end: printed
    progress('haar', 100, 100)  # a short step: nothing
    self.assertEqual(out.getvalue().splitlines(), [
        'tff-ddp quantiles: tree: 50 of 100 clients, 6 s',
        'tff-ddp quantiles: tree: 100 of 100 clients, 7 s'
    ])
