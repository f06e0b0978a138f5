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

import argparse
import math

import _common
import numpy as np


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--clients', type=int, default=100)
  parser.add_argument('--dim', type=int, default=256)
  parser.add_argument('--rounds', type=int, default=20)
  parser.add_argument('--bits', type=int, nargs='+', default=[12, 14, 16])
  parser.add_argument('--noise', type=float, nargs='+', default=[0.5, 1.0, 2.0])
  parser.add_argument('--delta', type=float, default=1e-5)
  args = parser.parse_args()

  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp import accounting  # pylint: disable=g-import-not-at-top
  from tff_ddp.aggregators import DiscreteGaussianSumFactory  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()

  rng = np.random.default_rng(0)
  data = rng.normal(size=(args.clients, args.dim))
  data /= np.linalg.norm(data, axis=1, keepdims=True)
  data = data.astype(np.float32)
  true_sum = data.astype(np.float64).sum(0)
  value_type = tff.TensorType(np.float32, [args.dim])

  def mse(results, scale=1.0):
    return float(np.mean([np.mean((np.asarray(r, np.float64) * scale
                                   - true_sum) ** 2) for r in results]))

  rows = []
  try:
    for z in args.noise:
      gaussian = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          noise_multiplier=z, clients_per_round=args.clients, clip=1.0)
      results, _ = _common.time_rounds(gaussian.create(value_type),
                                       list(data), args.rounds)
      gauss_mse = mse(results, args.clients)  # it returns the mean
      for b in args.bits:
        factory = DiscreteGaussianSumFactory(
            noise_multiplier=z, expected_clients_per_round=args.clients,
            bits=b, l2_clip=1.0, beta=math.exp(-0.5))
        eps, _ = accounting.epsilon(factory.dp_event(value_type), args.delta)
        results, _ = _common.time_rounds(factory.create(value_type),
                                         list(data), args.rounds)
        rows.append((z, b, eps, mse(results), gauss_mse))
  finally:
    _common.end_workers()
  se = math.sqrt(2.0 / (args.dim * args.rounds)) * math.sqrt(2.0)
  print(f'\n{args.clients} clients, d = {args.dim}, {args.rounds} rounds; '
        f'eps of one round at delta = {args.delta} (DDG, against the server, '
        f'zero-out); ratio '
        f'standard error ~ {se:.3f}\n')
  print(f'{"noise mult":>10s} {"bits":>4s} {"eps(DDG)":>9s} {"MSE DDG":>10s} '
        f'{"MSE Gauss":>10s} {"ratio":>6s}')
  for z, b, eps, m, g in rows:
    print(f'{z:10.2f} {b:4d} {eps:9.3f} {m:10.4e} {g:10.4e} {m / g:6.3f}')


if __name__ == '__main__':
  main()
