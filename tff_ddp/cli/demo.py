"""`tff-ddp demo`: federated mean estimation with distributed DP (`make demo`).

Synthetic clients hold vectors drawn uniformly from the l2 sphere of radius
`l2_clip`/2 around a common centre of norm `l2_clip`/2 (DDG paper Section 6.1
uses the sphere; the centre gives the mean something to find). Each
configuration runs the real TFF aggregation process (client encode,
`federated_secure_modular_sum`, server decode) in the C++ test execution
context for a few rounds; the report gives the mean squared error of the
estimated mean, the epsilon of all rounds -- each round accounted with the
DP event its own measurements carry -- with the adversary it holds against,
and the time per round.
"""

import dataclasses
import math
import time
from typing import List, Optional

import numpy as np

from tff_ddp.cli import common
from tff_ddp.utils import checks
from tff_ddp.utils import processes

DESCRIPTION = __doc__
# The range of l2_clip (times the clients or the noise) that the float32
# client data, noise and sums of the demo hold without overflow.
_FLOAT32_SAFE_MIN = 1e-30
_FLOAT32_SAFE_MAX = 1e30


@dataclasses.dataclass
class Row:
  name: str
  bits: Optional[int]
  mse: float
  epsilon: float
  adversary: str
  seconds_per_round: float
  wrapped: Optional[bool] = None


def make_clients(num_clients, dim, l2_clip, seed):
  """Vectors on the sphere of radius l2_clip/2 around a centre of norm
  l2_clip/2, so every client's norm is at most l2_clip."""
  rng = np.random.default_rng(seed)
  centre = rng.normal(size=dim)
  centre *= 0.5 * l2_clip / np.linalg.norm(centre)
  offsets = rng.normal(size=(num_clients, dim))
  offsets *= 0.5 * l2_clip / np.linalg.norm(offsets, axis=1, keepdims=True)
  return (centre + offsets).astype(np.float32)


def run_process(process, client_data, rounds, description='rounds'):
  """Runs `rounds` rounds; returns (sums, seconds/round, measurements of
  every round). The first round (tracing) is not timed when rounds > 1."""
  state = process.initialize()
  sums, times, measurements = [], [], []
  for _ in common.progress(range(rounds), description):
    start = time.perf_counter()
    output = process.next(state, list(client_data))
    times.append(time.perf_counter() - start)
    state = output.state
    measurements.append(output.measurements)
    sums.append(np.asarray(output.result, dtype=np.float64))
  timed = times[1:] if len(times) > 1 else times
  return sums, float(np.mean(timed)), measurements


def run(num_clients=100,
        dim=1024,
        rounds=3,
        bits=(12, 14, 16, 20),
        noise_multiplier=1.0,
        l2_clip=1.0,
        delta=None,
        seed=0,
        print_fn=print) -> List[Row]:
  """Runs every configuration and prints the report; returns the rows."""
  num_clients = checks.integer(num_clients, 'clients', 1)
  dim = checks.integer(dim, 'dim', 1)
  rounds = checks.integer(rounds, 'rounds', 1)
  noise_multiplier = checks.positive(noise_multiplier, 'noise_multiplier')
  l2_clip = checks.positive(l2_clip, 'l2_clip')
  delta = common.resolve_delta(
      None if delta is None else checks.probability(
          delta, 'delta', allow_one=False), num_clients, print_fn)
  # The clients' data, TFF's central Gaussian and the float sums are
  # float32: keep data, sums and noise far inside its range (3.4e38), and
  # the data away from its subnormals.
  largest = l2_clip * max(num_clients, noise_multiplier, 1.0)
  if not (l2_clip >= _FLOAT32_SAFE_MIN and largest <= _FLOAT32_SAFE_MAX):
    raise ValueError(
        f'l2_clip={l2_clip:g} with noise_multiplier={noise_multiplier:g} and '
        f'{num_clients} clients leaves the demo\'s float32 range: need '
        f'l2_clip >= {_FLOAT32_SAFE_MIN:g} and l2_clip * max(clients, '
        f'noise_multiplier) <= {_FLOAT32_SAFE_MAX:g}.')
  import dp_accounting
  import tensorflow_federated as tff
  from tff_ddp import accounting
  from tff_ddp.aggregators import DiscreteGaussianSumFactory

  factories = [
      DiscreteGaussianSumFactory.from_tff_arguments(
          noise_multiplier=noise_multiplier,
          expected_clients_per_round=num_clients,
          bits=b,
          l2_clip=l2_clip,
          beta=math.exp(-0.5)) for b in bits
  ]
  value_type = tff.TensorType(np.float32, [dim])
  for factory in factories:  # refuses bad configurations before any run
    factory.dp_event(value_type)
  processes.use_test_context()
  data = make_clients(num_clients, dim, l2_clip, seed)
  true_mean = data.astype(np.float64).mean(axis=0)

  def mse(sums):
    return float(
        np.mean([np.mean((s / num_clients - true_mean)**2) for s in sums]))

  rows = []
  for b, factory in zip(bits, factories):
    sums, spr, measured = run_process(factory.create(value_type), data, rounds,
                                      f'DDG {b} bits')
    accountant = accounting.RdpAccountant(adversary='server')
    for m in measured:  # the event each round reports, measured clients
      accountant.compose(accounting.extract_dp_event(m))
    rows.append(
        Row('DDG (distributed, SecAgg)', b, mse(sums),
            accountant.get_epsilon(delta), 'server', spr,
            any(bool(m['sum_may_wrap']) for m in measured)))

  gaussian = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=noise_multiplier,
      clients_per_round=num_clients,
      clip=l2_clip)
  sums, spr, _ = run_process(gaussian.create(value_type), data, rounds,
                             'central Gaussian')
  # TFF's DP factory returns the noised mean; scale back to a sum.
  sums = [s * num_clients for s in sums]
  central = accounting.RdpAccountant(adversary='release')
  central.compose(dp_accounting.GaussianDpEvent(noise_multiplier), rounds)
  rows.append(
      Row('Gaussian (central, same noise)', None, mse(sums),
          central.get_epsilon(delta), 'release', spr))

  plain = tff.aggregators.SumFactory()
  sums, spr, _ = run_process(plain.create(value_type), data, rounds, 'no noise')
  rows.append(
      Row('no noise (float sum)', None, mse(sums), math.inf, 'none', spr))
  print_fn(
      format_report(rows, num_clients, dim, rounds, noise_multiplier, l2_clip,
                    delta))
  return rows


def format_report(rows, num_clients, dim, rounds, noise_multiplier, l2_clip,
                  delta) -> str:
  lines = [
      '',
      'tff_ddp demo: federated mean estimation, '
      f'{num_clients} clients, d = {dim}, {rounds} rounds, '
      f'l2_clip = {l2_clip}, noise multiplier = {noise_multiplier}',
      f'MSE = mean over rounds of ||mean estimate - true mean||^2 / d; '
      f'eps at delta = {delta} for all {rounds} rounds.',
      '',
      f'{"mechanism":31s} {"bits":>4s} {"MSE":>10s} {"eps":>8s} '
      f'{"against":>8s} {"s/round":>8s} {"wrap?":>5s}',
  ]
  for r in rows:
    lines.append(
        f'{r.name:31s} {str(r.bits or "-"):>4s} {r.mse:10.3e} '
        f'{r.epsilon:8.3f} {r.adversary:>8s} {r.seconds_per_round:8.3f} '
        f'{"-" if r.wrapped is None else ("yes" if r.wrapped else "no"):>5s}')
  lines += [
      '',
      'DDG eps holds against the server that runs the secure sum (it sees '
      'who',
      'takes part and the sum), for zero-out neighbours (one client\'s '
      'vector',
      'replaced by zeros): RDP of Kairouz, Liu & Steinke (2021) Thm 5 / Prop '
      '10',
      'with the rounding-inflated sensitivity and the tau term, each round '
      'at the',
      'number of clients its measurements report. The central Gaussian\'s '
      'eps',
      'holds only against readers of the release (the server adds the '
      'noise, so',
      'against it there is no privacy); dp-accounting, add/remove. wrap?: '
      'a round',
      'had more clients than the ring was sized for (sum_may_wrap).',
  ]
  return '\n'.join(lines)


def add_parser(subparsers):
  p = subparsers.add_parser(
      'demo',
      help='federated DDG mean estimation with a privacy/utility '
      'report',
      description=DESCRIPTION,
      formatter_class=common.HelpFormatter)
  p.add_argument('--clients',
                 type=common.integer('--clients', 1),
                 default=100,
                 help='clients per round')
  p.add_argument('--dim',
                 type=common.integer('--dim', 1, 2**24),
                 default=1024,
                 help='dimension of each client vector')
  p.add_argument('--rounds',
                 type=common.integer('--rounds', 1, 10000),
                 default=3,
                 help='rounds per configuration')
  p.add_argument('--bits',
                 type=common.integer('--bits', 1, 30),
                 nargs='+',
                 default=[12, 14, 16, 20],
                 help='DDG bit widths')
  p.add_argument('--noise-multiplier',
                 type=common.positive('--noise-multiplier'),
                 default=1.0,
                 help='central noise stddev / l2 clip')
  p.add_argument('--l2-clip',
                 type=common.positive('--l2-clip'),
                 default=1.0,
                 help='l2 clip norm')
  p.add_argument('--delta',
                 type=common.probability_open('--delta'),
                 help=common.DELTA_HELP + ' (of the reported epsilon)')
  p.add_argument('--seed',
                 type=common.integer('--seed', 0, 2**32 - 1),
                 default=0,
                 help='seed of the synthetic data (not the noise)')
  p.set_defaults(command='demo',
                 body=lambda args: run(num_clients=args.clients,
                                       dim=args.dim,
                                       rounds=args.rounds,
                                       bits=tuple(args.bits),
                                       noise_multiplier=args.noise_multiplier,
                                       l2_clip=args.l2_clip,
                                       delta=args.delta,
                                       seed=args.seed) and 0)
  return p
