"""DDG sum with the randomized DFT vs the randomized Hadamard at equal epsilon.

At d = 2^k + 1 the Hadamard pads to D = 2^(k+1), the DFT (TFF's
rotation_type='dft', `tff_ddp.encoders.dft`) to D = 2^k + 2. For each
encoder and bit width the noise multiplier is calibrated to the same
one-round (epsilon, delta) against the server
(`tff_ddp.aggregators.calibrated.discrete_gaussian`), then R rounds of the
factory's own client and server code run batched without TFF
(`tff_ddp.aggregators.simulation.BatchedSum`, independent client seeds: the
process's distribution). Clients hold vectors uniform on the sphere of
radius l2_clip = 1 (DDG paper Section 6.1); MSE is ||estimate - sum||^2 / d,
averaged over rounds; "se" is its standard error over the rounds.

Where a gain can come from: decoding keeps d of the D rotated coordinates,
so the central noise costs sigma^2 per coordinate whatever D is. D enters
through the conditional rounding, whose norm bound (Theorem 5 (3) of the
DDG paper) grows with D gamma^2 / 4 and inflates the sensitivity, so a
smaller D needs less noise for the same epsilon when gamma is large, i.e.
at few bits; with many bits gamma is small and both rotations converge.

  .venv/bin/python benchmarks/dft_vs_hadamard.py [--rounds 10]
"""

import math

import _harness as harness
import numpy as np


def run(log2_dims=(10, 14),
        bits=(12, 16),
        clients=50,
        epsilon=2.0,
        delta=1e-5,
        rounds=10):
  """One row per (d, bits): the Hadamard beside the DFT."""
  import tensorflow_federated as tff
  from tff_ddp.aggregators import calibrated
  from tff_ddp.aggregators import simulation

  columns = [('d', 'd', 'd'), ('bits', 'bits', 'd')]
  for rotation in ('hd', 'dft'):
    columns += [(f'D_{rotation}', f'D {rotation}', 'd'),
                (f'z_{rotation}', f'z {rotation}', '.3f'),
                (f'mse_{rotation}', f'MSE {rotation}', '.4e'),
                (f'se_{rotation}', 'se', '.1e')]
  table = harness.Table(
      columns + [('ratio', 'dft/hd', '.3f')],
      title=f'DDG sum, {clients} clients, one round at (eps, delta) = '
      f'({epsilon:g}, {delta:g}) against the server, l2_clip 1, beta e^-1/2; '
      f'MSE per coordinate over {rounds} rounds')
  for k in log2_dims:
    d = 2**k + 1
    rng = np.random.default_rng(k)
    data = rng.normal(size=(clients, d))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    true_sum = data.sum(0)
    value_type = tff.TensorType(np.float32, [d])
    for b in bits:
      row = table.add(d=d, bits=b)
      for rotation in ('hd', 'dft'):
        result = calibrated.discrete_gaussian(
            value_type,
            target_epsilon=epsilon,
            target_delta=delta,
            expected_clients_per_round=clients,
            bits=b,
            l2_clip=1.0,
            beta=math.exp(-0.5),
            rotation_type=rotation)
        batched = simulation.BatchedSum(result.factory, value_type)
        errors = [
            np.mean((batched(data, r, seed=1000 + r)[0] - true_sum)**2)
            for r in range(rounds)
        ]
        row.update({
            f'D_{rotation}': result.factory.mechanism(value_type).output_dim,
            f'z_{rotation}': result.value,
            f'mse_{rotation}': np.mean(errors),
            f'se_{rotation}': np.std(errors, ddof=1) / math.sqrt(len(errors))
        })
      row['ratio'] = row['mse_dft'] / row['mse_hd']
      print(f'd = {d}, {b} bits: done', flush=True)
  return table


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               log2_dims='k: d = 2^k + 1',
               bits='DDG bit widths',
               clients='clients per round',
               epsilon='one-round target epsilon',
               delta='the target delta',
               rounds='rounds per (d, bits, rotation)')
