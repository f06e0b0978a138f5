"""One DDG round with the clients spread over several TFF workers.

  # start N worker_binary processes on loopback, end them afterwards:
  python scripts/workers_demo.py --local 2
  # workers already running elsewhere (`worker_binary --port=8000` on each):
  python scripts/workers_demo.py --workers hostA:8000,hostB:8000
  TFF_DDP_WORKERS=hostA:8000,hostB:8000 python scripts/workers_demo.py
"""

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
# pylint: disable=wrong-import-position  # after the sys.path entry above

import numpy as np
import tensorflow_federated as tff

from tff_ddp.aggregators import DiscreteGaussianSumFactory
from tff_ddp.utils import workers
# pylint: enable=wrong-import-position


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--local',
                      type=int,
                      default=0,
                      help='start this many local workers')
  parser.add_argument('--workers',
                      default=None,
                      help='host:port,... of running workers '
                      '(default: $TFF_DDP_WORKERS)')
  parser.add_argument('--clients', type=int, default=12)
  parser.add_argument('--dim', type=int, default=8)
  parser.add_argument('--call-timeout', type=float, default=None)
  args = parser.parse_args()

  rng = np.random.default_rng(0)
  values = [
      rng.normal(size=args.dim).astype(np.float32) / args.dim
      for _ in range(args.clients)
  ]
  process = DiscreteGaussianSumFactory.from_tff_arguments(
      noise_multiplier=0.0,
      expected_clients_per_round=args.clients,
      bits=16,
      l2_clip=10.0).create(tff.TensorType(np.float32, [args.dim]))

  if args.local:
    manager = workers.local_workers(num_workers=args.local,
                                    call_timeout=args.call_timeout)
  else:
    targets = (args.workers.split(',')
               if args.workers else workers.targets_from_env())
    if not targets:
      parser.error('give --local N, --workers or $TFF_DDP_WORKERS')
    manager = workers.remote_workers(targets, call_timeout=args.call_timeout)

  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    with manager as handle:
      context = getattr(handle, 'context', handle)
      output = process.next(process.initialize(), values)
      spread = [(c.target, c.clients_per_invocation[:1])
                for c in context.worker_contexts]
  print('clients per worker (first call):', spread)
  print('participating clients:', output.measurements['participating_clients'])
  print('max |DDG sum - true sum|:',
        float(np.max(np.abs(output.result - np.sum(values, axis=0)))))


if __name__ == '__main__':
  main()
