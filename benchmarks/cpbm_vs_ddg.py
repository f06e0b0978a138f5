"""cPBM vs DDG mean estimation at equal epsilon (one round each).

Same run for every mechanism: n clients holding vectors uniform on the unit
sphere of R^d (DDG paper Section 6.1); each configuration is calibrated so
that ONE round is (eps, delta)-DP under zero-out neighbours against the server
that runs the protocol, by our
accountant (`tff_ddp.aggregators.calibrated`), and run R times through the
real TFF process (secure modular sum) to estimate the mean squared error of
the *mean* estimate, per coordinate:

* DDG: `DiscreteGaussianSumFactory` (l2_clip 1 = the data's norm, 16 bits,
  beta = exp(-1/2), Hadamard rotation); calibrated: the noise multiplier.
* cPBM 'l2': `PoissonBinomialSumFactory` with the Kashin encoder and
  Algorithm 3 as published (p = 1/2 + theta y / C); calibrated: theta, with
  m = --trials Bernoulli trials.
* cPBM 'linf': the same with divisor='linf' (p = 1/2 + theta y / B,
  B = K C / sqrt(D) the Kashin level bound; same privacy event).

For cPBM, C is the largest Kashin-representation norm among the clients (an
oracle choice: nothing is clipped, as for DDG whose clip equals the data
norm). The 'pred' columns are the analytic variances: DDG
(z^2 C^2 + n gamma^2 / 4) / n^2, cPBM tr(U Var(yhat) U^T) / d / n^2 with the
per-coordinate bound n B^2 / (4 m theta^2) (an upper bound: U U^T = I).

  .venv/bin/python benchmarks/cpbm_vs_ddg.py [--rounds 10]
"""

import argparse
import math

import _common
import numpy as np


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--clients', type=int, default=100)
  parser.add_argument('--dim', type=int, default=256)
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--epsilons', type=float, nargs='+',
                      default=[1.0, 2.0, 4.0, 8.0])
  parser.add_argument('--delta', type=float, default=1e-5)
  parser.add_argument('--bits', type=int, default=16)
  parser.add_argument('--trials', type=int, default=256)
  args = parser.parse_args()

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.aggregators import calibrated  # pylint: disable=g-import-not-at-top
  from tff_ddp.encoders import KashinEncoder  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()

  n, d = args.clients, args.dim
  rng = np.random.default_rng(0)
  data = rng.normal(size=(n, d))
  data /= np.linalg.norm(data, axis=1, keepdims=True)
  data = data.astype(np.float32)
  true_mean = data.astype(np.float64).mean(0)
  value_type = tff.TensorType(np.float32, [d])

  # C for cPBM: the largest representation norm over the clients in a few
  # random frames, plus 5% (the runs report how many were clipped anyway).
  encoder = KashinEncoder(d)
  norms = []
  for r in range(5):
    seed = tf.constant([r, 7], tf.int64)
    norms.extend(float(tf.norm(encoder.encode(tf.constant(x, tf.float64),
                                              seed))) for x in data)
  cpbm_clip = max(norms) * 1.05

  def mse(results):
    return float(np.mean([np.mean((np.asarray(r, np.float64) / n
                                   - true_mean) ** 2) for r in results]))

  rows = []
  try:
    for eps in args.epsilons:
      ddg = calibrated.discrete_gaussian(
          value_type, eps, args.delta, expected_clients_per_round=n,
          bits=args.bits, l2_clip=1.0, beta=math.exp(-0.5))
      params = ddg.factory.mechanism(value_type)
      results, _ = _common.time_rounds(ddg.factory.create(value_type),
                                       list(data), args.rounds)
      ddg_pred = ((ddg.value * 1.0)**2 + n * params.gamma**2 / 4) / n**2
      row = [eps, ddg.value, mse(results), ddg_pred]
      for divisor in ('l2', 'linf'):
        pbm = calibrated.poisson_binomial(
            value_type, eps, args.delta, parameter='theta',
            num_trials=args.trials, expected_clients_per_round=n,
            l2_clip=cpbm_clip, divisor=divisor)
        p = pbm.factory.mechanism(value_type)
        results, _ = _common.time_rounds(pbm.factory.create(value_type),
                                         list(data), args.rounds)
        # Var(U yhat) = U Var(yhat) U^T <= v U U^T = v I (orthonormal rows),
        # v the per-representation-coordinate bound: <= v / n^2 per mean
        # coordinate.
        pred = p.noise_stddev(n)**2 / n**2
        row += [pbm.value, mse(results), pred]
      rows.append(row)
  finally:
    _common.end_workers()

  print(f'\n{n} clients, d = {d} (Kashin D = {encoder.output_dim}, level '
        f'{encoder.level:.2f}), one round per release at delta = '
        f'{args.delta}, MSE of the mean per coordinate over {args.rounds} '
        f'releases; DDG {args.bits} bits, cPBM m = {args.trials}, '
        f'C = {cpbm_clip:.3f}\n')
  print(f'{"eps":>4s} {"DDG z":>7s} {"MSE DDG":>10s} {"pred":>10s} | '
        f'{"theta l2":>9s} {"MSE cPBM":>10s} {"pred":>10s} {"xDDG":>8s} | '
        f'{"theta linf":>10s} {"MSE cPBM":>10s} {"pred":>10s} {"xDDG":>6s}')
  for (eps, z, m_ddg, p_ddg, t2, m2, p2, ti, mi, pi) in rows:
    print(f'{eps:4.0f} {z:7.3f} {m_ddg:10.3e} {p_ddg:10.3e} | '
          f'{t2:9.2e} {m2:10.3e} {p2:10.3e} {m2 / m_ddg:8.1f} | '
          f'{ti:10.2e} {mi:10.3e} {pi:10.3e} {mi / m_ddg:6.2f}')


if __name__ == '__main__':
  main()
