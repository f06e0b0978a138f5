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

import argparse
import math

import _common  # pylint: disable=unused-import
import numpy as np


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--log2-dims', type=int, nargs='+', default=[10, 14])
  parser.add_argument('--bits', type=int, nargs='+', default=[12, 16])
  parser.add_argument('--clients', type=int, default=50)
  parser.add_argument('--epsilon', type=float, default=2.0)
  parser.add_argument('--delta', type=float, default=1e-5)
  parser.add_argument('--rounds', type=int, default=10)
  args = parser.parse_args()

  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.aggregators import calibrated  # pylint: disable=g-import-not-at-top
  from tff_ddp.aggregators import simulation  # pylint: disable=g-import-not-at-top

  print(f'DDG sum, {args.clients} clients, one round at (eps, delta) = '
        f'({args.epsilon:g}, {args.delta:g}) against the server, l2_clip 1, '
        f'beta e^-1/2; MSE per coordinate over {args.rounds} rounds\n')
  header = (f'{"d":>6s} {"bits":>4s} | {"D hd":>6s} {"z hd":>6s} '
            f'{"MSE hd":>10s} {"se":>8s} | {"D dft":>6s} {"z dft":>6s} '
            f'{"MSE dft":>10s} {"se":>8s} | {"dft/hd":>6s}')
  print(header)
  for k in args.log2_dims:
    d = 2**k + 1
    rng = np.random.default_rng(k)
    data = rng.normal(size=(args.clients, d))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    true_sum = data.sum(0)
    value_type = tff.TensorType(np.float32, [d])
    for bits in args.bits:
      row = {}
      for rotation in ('hd', 'dft'):
        result = calibrated.discrete_gaussian(
            value_type, target_epsilon=args.epsilon,
            target_delta=args.delta, expected_clients_per_round=args.clients,
            bits=bits, l2_clip=1.0, beta=math.exp(-0.5),
            rotation_type=rotation)
        batched = simulation.BatchedSum(result.factory, value_type)
        errors = [np.mean((batched(data, r, seed=1000 + r)[0] - true_sum)**2)
                  for r in range(args.rounds)]
        output_dim = result.factory.mechanism(value_type).output_dim
        row[rotation] = (output_dim, result.value, np.mean(errors),
                         np.std(errors, ddof=1) / math.sqrt(len(errors)))
      hd, ft = row['hd'], row['dft']
      print(f'{d:6d} {bits:4d} | {hd[0]:6d} {hd[1]:6.3f} {hd[2]:10.4e} '
            f'{hd[3]:8.1e} | {ft[0]:6d} {ft[1]:6.3f} {ft[2]:10.4e} '
            f'{ft[3]:8.1e} | {ft[2] / hd[2]:6.3f}', flush=True)
  _common.end_workers()


if __name__ == '__main__':
  main()
