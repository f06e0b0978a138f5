"""The noise of the B.3 runs under the quantile paper's accounting vs ours.

"Differentially Private Federated Quantiles with the Distributed Discrete
Gaussian Mechanism" (Section 5) accounts DP-Delta-FL and DP-FedAvg "together
with amplification by subsampling": against someone who does not know the
cohorts. tff_ddp's numbers for the same runs are against the server that
picks the cohorts (`adversary='server'`), where amplification is not valid.
This prints, for DP-FedAvg's update release (a Gaussian of noise multiplier
z; 100 of 2500 clients per round, 1000 rounds, delta = 1/2500):

  z for each epsilon under dp-accounting's sampled-Gaussian RDP (Poisson
  rate 0.04: the paper's kind of accounting; a central Gaussian, quoted
  only to compare noise levels), and the epsilon that accounting gives to
  the noise multipliers our calibration chose against the server;

  and z for each epsilon against the server when the protocol samples by
  private coins instead of cohorts: all 2500 clients in the secure sum,
  each keeping its update with probability 0.04 (the DDG aggregator's
  `client_sampling_rate`, `SelfSampledDpEvent`: amplification valid for
  every adversary; our accountant on the DDG event of the B.3 linear
  model's 210-float update, C = 0.1, 20-bit ring, 2500 noise shares). The
  learning processes do not offer this sampling yet; the column says what
  it would buy.

  .venv/bin/python benchmarks/deltafl_paper_accounting.py
"""

import warnings

import _harness as harness  # (sets sys.path)
import dp_accounting
from dp_accounting import rdp
import numpy as np

POPULATION = 2500
RATE, ROUNDS, DELTA = 100 / POPULATION, 1000, 1 / POPULATION
# DP-FedAvg's z_w chosen by tff_ddp.learning.calibrate against the server
# (the table of benchmarks/RESULTS.md, "Delta-FL: Figure 3", config column).
OURS = {5.0: 5.30, 10.0: 3.07, 20.0: 1.84}


def amplified_epsilon(z: float) -> float:
  accountant = rdp.RdpAccountant()
  accountant.compose(
      dp_accounting.PoissonSampledDpEvent(RATE,
                                          dp_accounting.GaussianDpEvent(z)),
      ROUNDS)
  return accountant.get_epsilon(DELTA)


def amplified_z(epsilon: float) -> float:
  lo, hi = 0.3, 50.0
  for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if amplified_epsilon(mid) > epsilon else (lo, mid)
  return hi


def self_sampled_z(epsilon: float) -> float:
  """Least DDG noise multiplier for `epsilon` against the server, all
  POPULATION clients in each round's sum with private coins of rate RATE."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import calibrated
  update = tff.StructType([('kernel', tff.TensorType(np.float32, [20, 10])),
                           ('bias', tff.TensorType(np.float32, [10]))])
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    result = calibrated.discrete_gaussian(update,
                                          epsilon,
                                          DELTA,
                                          rounds=ROUNDS,
                                          sampling='self',
                                          rate=RATE,
                                          expected_clients_per_round=POPULATION,
                                          bits=20,
                                          l2_clip=0.1,
                                          adversary='server')
  assert result.parameter == 'noise_multiplier', result.parameter
  return result.value


def run():
  """One row per epsilon of the B.3 table."""
  table = harness.Table(
      [('eps', 'eps (ours, server)', '.1f'), ('z', 'z ours', '.2f'),
       ('z_amplified', 'z amplified for that eps', '.3f'),
       ('eps_amplified', 'eps amplified of z ours', '.3f'),
       ('z_self', 'z self-sampled, server', '.3f')],
      title=f'DP-FedAvg update, q = {RATE}, T = {ROUNDS}, delta = {DELTA}')
  for eps, z in OURS.items():
    table.add(eps=eps,
              z=z,
              z_amplified=amplified_z(eps),
              eps_amplified=amplified_epsilon(z),
              z_self=self_sampled_z(eps))
  return table


if __name__ == '__main__':
  harness.main(run, __doc__)
