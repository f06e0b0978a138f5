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

import math

import _harness as harness
import numpy as np


def run(clients=100,
        dim=256,
        rounds=10,
        epsilons=(1.0, 2.0, 4.0, 8.0),
        delta=1e-5,
        bits=16,
        trials=256):
  """One row per epsilon: DDG, cPBM 'l2' and cPBM 'linf', measured and
  predicted MSE of the mean."""
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_ddp.aggregators import calibrated
  from tff_ddp.encoders import KashinEncoder

  n, d = clients, dim
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
    norms.extend(
        float(tf.norm(encoder.encode(tf.constant(x, tf.float64), seed)))
        for x in data)
  cpbm_clip = max(norms) * 1.05

  def mse(results):
    return float(
        np.mean([
            np.mean((np.asarray(r, np.float64) / n - true_mean)**2)
            for r in results
        ]))

  table = harness.Table(
      [('eps', 'eps', 'g'), ('z', 'DDG z', '.3f'),
       ('mse_ddg', 'MSE DDG', '.3e'), ('pred_ddg', 'pred', '.3e'),
       ('theta_l2', 'theta l2', '.2e'), ('mse_l2', 'MSE cPBM', '.3e'),
       ('pred_l2', 'pred', '.3e'), ('x_l2', 'xDDG', '.1f'),
       ('theta_linf', 'theta linf', '.2e'), ('mse_linf', 'MSE cPBM', '.3e'),
       ('pred_linf', 'pred', '.3e'), ('x_linf', 'xDDG', '.2f')],
      title=f'{n} clients, d = {d} (Kashin D = {encoder.output_dim}, level '
      f'{encoder.level:.2f}), one round per release at delta = {delta}, MSE '
      f'of the mean per coordinate over {rounds} releases; DDG {bits} bits, '
      f'cPBM m = {trials}, C = {cpbm_clip:.3f}')
  for eps in epsilons:
    ddg = calibrated.discrete_gaussian(value_type,
                                       eps,
                                       delta,
                                       expected_clients_per_round=n,
                                       bits=bits,
                                       l2_clip=1.0,
                                       beta=math.exp(-0.5))
    params = ddg.factory.mechanism(value_type)
    results, _ = harness.time_rounds(ddg.factory.create(value_type), list(data),
                                     rounds)
    row = table.add(eps=eps,
                    z=ddg.value,
                    mse_ddg=mse(results),
                    pred_ddg=((ddg.value * 1.0)**2 + n * params.gamma**2 / 4) /
                    n**2)
    for divisor in ('l2', 'linf'):
      pbm = calibrated.poisson_binomial(value_type,
                                        eps,
                                        delta,
                                        parameter='theta',
                                        num_trials=trials,
                                        expected_clients_per_round=n,
                                        l2_clip=cpbm_clip,
                                        divisor=divisor)
      p = pbm.factory.mechanism(value_type)
      results, _ = harness.time_rounds(pbm.factory.create(value_type),
                                       list(data), rounds)
      # Var(U yhat) = U Var(yhat) U^T <= v U U^T = v I (orthonormal rows),
      # v the per-representation-coordinate bound: <= v / n^2 per mean
      # coordinate.
      error = mse(results)
      row.update({
          f'theta_{divisor}': pbm.value,
          f'mse_{divisor}': error,
          f'pred_{divisor}': p.noise_stddev(n)**2 / n**2,
          f'x_{divisor}': error / row['mse_ddg']
      })
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               tff=True,
               clients='clients per round',
               dim='d, the vectors\' dimension',
               rounds='releases per mechanism and epsilon',
               epsilons='one-round target epsilons',
               delta='the target delta',
               bits='DDG bit width',
               trials='cPBM trials m')
