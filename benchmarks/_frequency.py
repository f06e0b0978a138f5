"""Shared pieces of the frequency-estimation benchmarks (Tables 1-3, Fig. 3).

The paper ("Bounding Contribution Optimally for Federated Frequency
Estimation under User-level Distributed Differential Privacy") fixes the
cPBM parameters (theta, m) and reports epsilon by its Lemma 2; this library
takes epsilon. `at_paper_parameters` goes through the public API anyway:
it computes our accountant's epsilon of the paper's (theta, m) from the
events the processes' own aggregators hand out (zero-out, the Haar
encoding's l0, the l2 bound the l2-aware cPBM curve needs), asks for that
epsilon with theta fixed and m calibrated, and checks that m comes back as
the paper's. `published` is
the paper's column (Lemma 2 as printed: replace-one over all coordinates).
"""

import math
import os

import _common  # pylint: disable=unused-import  # sets sys.path and the worker guard
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = os.path.join(HERE, 'figures')


def epsilon_of(events, delta):
  import dp_accounting
  from tff_ddp.accounting import accountant
  return accountant.epsilon(dp_accounting.ComposedDpEvent(list(events)),
                            delta)[0]


def frequency_event(theta, m, n, d, divisor='l2'):
  """The event of the frequency release at (theta, m), as the processes'
  aggregator (`PoissonBinomialSumFactory`, Kashin, clip 1 on scaled
  inputs) hands it out -- with its l2 bound, so that the accountant's
  l2-aware curve applies exactly as in the process."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import PoissonBinomialSumFactory
  factory = PoissonBinomialSumFactory(1.0,
                                      theta,
                                      m,
                                      n,
                                      encoder='kashin',
                                      divisor=divisor)
  return factory.dp_event(tff.TensorType(np.float64, [d]))


def histogram_event(theta, m, n, num_bins):
  """The event of TFFE's phase-1 Haar histogram at (theta', m'), built as
  `quantiles.calibration.quantile_parameters` builds its aggregator."""
  import tensorflow_federated as tff  # pylint: disable=unused-import  # imported for its side effect
  from tff_ddp.aggregators import PoissonBinomialSumFactory
  from tff_ddp.analytics.quantiles import calibration as qc
  from tff_ddp.analytics.quantiles import encodings as hg
  encoding = hg.Haar(num_bins)
  _, l2, l0 = encoding.sensitivities()
  factory = PoissonBinomialSumFactory(l2,
                                      theta,
                                      m,
                                      n,
                                      encoder='none',
                                      divisor='linf',
                                      linf_clip=1.0,
                                      l0_clip=int(l0))
  return factory.dp_event(qc.encoding_type(encoding))


def indicator_event(theta, m, n):
  """The event of MFFE's clipped-indicator sum at (theta', m')."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import PoissonBinomialSumFactory
  factory = PoissonBinomialSumFactory(1.0,
                                      theta,
                                      m,
                                      n,
                                      encoder='none',
                                      divisor='linf',
                                      linf_clip=1.0)
  return factory.dp_event(tff.TensorType(np.float64, [1]))


def output_dim(d):
  from tff_ddp.encoders import registry
  return registry.make_encoder('kashin', d).output_dim


def at_paper_parameters(protocol,
                        d,
                        n,
                        delta,
                        theta=0.2,
                        m=30,
                        quantile_theta=0.2,
                        quantile_m=3,
                        num_bins=64,
                        indicator_m=None,
                        **kwargs):
  """FrequencyParameters with the paper's (theta, m) (and (theta', m')).

  Returns (params, our_epsilon, published_epsilon).
  """
  from tff_ddp.analytics.frequency import clipping as fq
  from tff_ddp.analytics.frequency import process as fp
  big_d = output_dim(d)
  freq = frequency_event(theta, m, n, d, kwargs.get('divisor', 'l2'))
  margin = 1 + 1e-4  # calibration stops <= 0.1% below its target
  if protocol == 'two_phase':
    first = histogram_event(quantile_theta, quantile_m, n, num_bins)
    eps1, eps2 = epsilon_of([first], delta), epsilon_of([freq], delta)
    ours = epsilon_of([first, freq], delta)
    published = fq.published_epsilon(
        [(theta, m, n, big_d),
         (quantile_theta, quantile_m, n, num_bins - 1)], delta)
    params = fp.frequency_parameters('two_phase',
                                     d,
                                     n,
                                     ours * margin,
                                     delta,
                                     calibrate='num_trials',
                                     theta=theta,
                                     quantile_num_trials=quantile_m,
                                     num_bins=num_bins,
                                     budget_fraction=eps1 / (eps1 + eps2),
                                     **kwargs)
  elif protocol == 'multi_round':
    indicator_m = m if indicator_m is None else indicator_m
    first = indicator_event(quantile_theta, indicator_m, n)
    eps1, eps2 = epsilon_of([first], delta), epsilon_of([freq], delta)
    ours = epsilon_of([first, freq], delta)
    published = fq.published_epsilon([(theta, m, n, big_d),
                                      (quantile_theta, indicator_m, n, 1)],
                                     delta)
    params = fp.frequency_parameters('multi_round',
                                     d,
                                     n,
                                     ours * margin,
                                     delta,
                                     calibrate='num_trials',
                                     theta=theta,
                                     indicator_num_trials=indicator_m,
                                     budget_fraction=eps1 / (eps1 + eps2),
                                     **kwargs)
  else:
    ours = epsilon_of([freq], delta)
    published = fq.published_epsilon([(theta, m, n, big_d)], delta)
    params = fp.frequency_parameters(protocol,
                                     d,
                                     n,
                                     ours * margin,
                                     delta,
                                     calibrate='num_trials',
                                     theta=theta,
                                     **kwargs)
  if params.num_trials != m:
    raise AssertionError(f'calibration gave m = {params.num_trials}, not {m}')
  return params, ours, published


def mean_std(values):
  values = np.asarray(values, np.float64)
  return float(values.mean()), float(values.std())


def cell(values, digits=2):
  mean, std = mean_std(values)
  return f'{mean:.{digits}f} ± {std:.{digits}f}'


def dataset(name, n, d, seed):
  from tff_ddp.analytics.frequency import data as fd
  return fd.load(name, n, d, seed)


def savefig(fig, name):
  os.makedirs(FIGURES, exist_ok=True)
  path = os.path.join(FIGURES, name)
  fig.savefig(path, dpi=110)
  return path


def fmt_ratio(a, b):
  return f'{a / b:.3f}' if b > 0 and math.isfinite(a) else 'nan'
