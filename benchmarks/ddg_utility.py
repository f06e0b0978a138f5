"""Utility of the DDG sum vs the continuous Gaussian with the same central noise.

Same run for both: 100 clients, d = 256, vectors uniform on the sphere of
radius l2_clip = 1 (DDG paper Section 6.1), noise multipliers 0.5, 1, 2 (the
central noise stddev is noise_multiplier * l2_clip in both), R rounds each.
DDG goes through DiscreteGaussianSumFactory (secure modular sum, beta =
exp(-1/2)); the Gaussian through TFF's DifferentiallyPrivateFactory
.gaussian_fixed (central DP, float sum). MSE is ||estimate - sum||^2 / d
averaged over rounds; the ratio's standard error is about
sqrt(2/(d R)) * sqrt(2) (two independent MSE estimates).

  .venv/bin/python benchmarks/ddg_utility.py [--rounds 20]
"""

import math

import _harness as harness
import numpy as np


def run(clients=100,
        dim=256,
        rounds=20,
        bits=(12, 14, 16),
        noise=(0.5, 1.0, 2.0),
        delta=1e-5):
  """One row per (noise multiplier, bits): DDG's MSE beside the Gaussian's."""
  import tensorflow_federated as tff
  from tff_ddp import accounting
  from tff_ddp.aggregators import DiscreteGaussianSumFactory

  rng = np.random.default_rng(0)
  data = rng.normal(size=(clients, dim))
  data /= np.linalg.norm(data, axis=1, keepdims=True)
  data = data.astype(np.float32)
  true_sum = data.astype(np.float64).sum(0)
  value_type = tff.TensorType(np.float32, [dim])

  def mse(results, scale=1.0):
    return float(
        np.mean([
            np.mean((np.asarray(r, np.float64) * scale - true_sum)**2)
            for r in results
        ]))

  se = math.sqrt(2.0 / (dim * rounds)) * math.sqrt(2.0)
  table = harness.Table(
      [('noise', 'noise mult', '.2f'), ('bits', 'bits', 'd'),
       ('eps', 'eps(DDG)', '.3f'), ('mse_ddg', 'MSE DDG', '.4e'),
       ('mse_gauss', 'MSE Gauss', '.4e'), ('ratio', 'ratio', '.3f')],
      title=f'{clients} clients, d = {dim}, {rounds} rounds; eps of one '
      f'round at delta = {delta} (DDG, against the server, zero-out); ratio '
      f'standard error ~ {se:.3f}')
  for z in noise:
    gaussian = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=z, clients_per_round=clients, clip=1.0)
    results, _ = harness.time_rounds(gaussian.create(value_type), list(data),
                                     rounds)
    gauss_mse = mse(results, clients)  # it returns the mean
    for b in bits:
      factory = DiscreteGaussianSumFactory.from_tff_arguments(
          noise_multiplier=z,
          expected_clients_per_round=clients,
          bits=b,
          l2_clip=1.0,
          beta=math.exp(-0.5))
      eps, _ = accounting.epsilon(factory.dp_event(value_type), delta)
      results, _ = harness.time_rounds(factory.create(value_type), list(data),
                                       rounds)
      ddg_mse = mse(results)
      table.add(noise=z,
                bits=b,
                eps=eps,
                mse_ddg=ddg_mse,
                mse_gauss=gauss_mse,
                ratio=ddg_mse / gauss_mse)
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               tff=True,
               clients='clients per round',
               dim='d, the vectors\' dimension',
               rounds='rounds per setting',
               bits='DDG bit widths',
               noise='noise multipliers',
               delta='the delta of the epsilon')
