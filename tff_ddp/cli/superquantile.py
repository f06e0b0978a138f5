"""`tff-ddp superquantile`: DP-Delta-FL (or DP-FedAvg) on the B.3 task.

The Appendix B.3 task of "Differentially Private Federated Quantiles with
the Distributed Discrete Gaussian Mechanism" (its DP-Delta-FL is Algorithm
4 there; Delta-FL is Algorithm 3 of "Federated Learning with Superquantile
Aggregation for Heterogeneous Data") (make_classification with its
parameters, 2500 training clients of 100 examples with Dir(0.5) label shift,
500 Dir(0.01) test clients, a linear model, one full-gradient local step of
learning rate 0.1), trained by the real TFF process of
`tff_ddp.learning` in the C++ test execution context: the loss histogram
and the model update each go through a secure sum with distributed discrete
Gaussian noise. The noise is calibrated so that all --rounds rounds of
--clients clients (a cohort drawn without replacement each round) are
(--epsilon, --delta)-DP against the named adversary, neighbours: one
client's examples removed, by the tightest accountant (the smaller of
the privacy loss distribution bound and RDP). The epsilon column is the
process's own running epsilon (its metrics: RDP, an upper bound); after
the last round the events the rounds reported are composed with the
tightest accountant, the run's epsilon, which names its bound.

Per round: round, loss (the private histogram's estimate of the mean
clipped loss; '-' for DP-FedAvg, which releases none), tail threshold Q,
epsilon so far (RDP), seconds. At the end: the run's epsilon (tightest
bound), the test clients' mean and 90th-percentile error.
"""

import time
from typing import Callable, Optional

import numpy as np

from tff_ddp.cli import common
from tff_ddp.cli import outputs
from tff_ddp.utils import checks
from tff_ddp.utils import processes

ALGORITHMS = ('deltafl', 'fedavg')
POPULATION = 2500


def run(algorithm: str = 'deltafl',
        rounds: int = 10,
        clients: int = 100,
        tail_fraction: float = 0.5,
        epsilon: float = 5.0,
        delta: Optional[float] = None,
        budget_ratio: float = 0.25,
        clip: float = 0.1,
        loss_bound: float = 1.5,
        bins: int = 16,
        histogram: str = 'tree',
        adversary: str = 'server',
        private: bool = True,
        learning_rate: float = 0.1,
        seed: int = 0,
        print_fn: Callable[[str], None] = print) -> dict:
  """Trains and prints the progress; returns the final test metrics (and,
  when private, the run's `epsilon` by the tightest accountant and its
  `bound`)."""
  algorithm = checks.choice(algorithm, 'algorithm', ALGORITHMS)
  rounds = checks.integer(rounds, 'rounds', 1)
  clients = checks.integer(clients, 'clients', 1, POPULATION)
  seed = checks.integer(seed, 'seed', 0)
  print_fn = outputs.wrapping(print_fn)  # lines fit 79 columns
  delta = common.resolve_delta(delta, POPULATION, print_fn)
  import tensorflow_federated as tff
  from tff_ddp import learning
  from tff_ddp.analytics.quantiles import encodings as hg
  from tff_ddp.learning import tasks
  # Checked here as well: the non-private runs build no PrivacyConfig.
  checks.choice(histogram, 'histogram', hg.METHODS + tuple(hg.ALIASES))

  task = tasks.b3_task()
  model_fn = task.model_fn()
  optimizer = tff.learning.optimizers.build_sgdm(
      checks.positive(learning_rate, 'learning_rate'))
  if private:
    calibrated = learning.calibrate(
        model_fn,
        epsilon,
        delta,
        rounds,
        clients,
        clip,
        budget_ratio=budget_ratio if algorithm == 'deltafl' else None,
        population=POPULATION,
        adversary=adversary,
        **(dict(loss_upper_bound=loss_bound, num_bins=bins, histogram=histogram)
           if algorithm == 'deltafl' else {}))
    config = calibrated.config
    if algorithm == 'deltafl':
      process = learning.build_superquantile_fl(model_fn,
                                                tail_fraction,
                                                optimizer,
                                                privacy=config)
      noise = (f'z_w={config.noise_multiplier:.3f} '
               f'z_q={config.quantile_noise_multiplier:.3f}')
    else:
      process = learning.build_dp_fedavg(model_fn, optimizer, privacy=config)
      noise = f'z_w={config.noise_multiplier:.3f}'
    print_fn(
        f'{"DP-Delta-FL" if algorithm == "deltafl" else "DP-FedAvg"} on B.3:'
        f' {rounds} rounds of {clients} of {POPULATION} clients, target '
        f'({epsilon:g}, {delta:.3g})-DP against the {adversary}; '
        f'{learning.privacy.NEIGHBOURS}; C={clip:g} {noise}' +
        (f' theta={tail_fraction:g} r={budget_ratio:g} B={loss_bound:g} '
         f'b={bins} ({histogram})' if algorithm == 'deltafl' else ''))
  else:
    if algorithm == 'deltafl':
      process = learning.build_superquantile_fl(model_fn,
                                                tail_fraction,
                                                optimizer,
                                                reweighting='exact')
    else:
      process = learning.build_baseline('fedavg', model_fn, optimizer)
    print_fn(f'{"Delta-FL" if algorithm == "deltafl" else "FedAvg"} on B.3 '
             f'(NOT PRIVATE): {rounds} rounds of {clients} clients')
  processes.use_test_context()
  print_fn(f'{"round":>5s} {"loss":>7s} {"threshold":>9s} '
           f'{"epsilon":>9s} {"seconds":>8s}')
  rng = np.random.default_rng(seed)
  state = process.initialize()
  round_events = []
  for t in range(rounds):
    cohort = rng.choice(POPULATION, clients, replace=False)
    data = task.train.datasets(cohort)
    start = time.perf_counter()
    out = process.next(state, data)
    seconds = time.perf_counter() - start
    state = out.state
    metrics = out.metrics
    if private:
      round_events.append(learning.round_dp_event(metrics))
    loss = float(metrics['client_work']['train']['loss'])
    tail = metrics['client_work'].get('tail')
    threshold = '-' if tail is None else f'{float(tail["threshold"]):.4f}'
    eps = float(metrics['privacy']['epsilon'])
    print_fn(f'{t + 1:5d} {("-" if np.isnan(loss) else f"{loss:.4f}"):>7s} '
             f'{threshold:>9s} {eps:9.4f} {seconds:8.2f}')
  if private:
    final = learning.final_epsilon(round_events, config)
    print_fn(f'epsilon of the {final.rounds} rounds = {final.epsilon:.4f} '
             f'at delta {final.delta:.3g} (target {epsilon:g}; the '
             f'running column is RDP): {final.description}')
  weights = process.get_model_weights(state)
  errors, _ = tasks.per_client_metrics(task.keras_model(), weights, task.test)
  summary = tasks.summarize_errors(errors)
  print_fn(f'test clients: mean error {summary["mean"]:.2f}%, 90th '
           f'percentile {summary["p90"]:.2f}%')
  if private:
    summary = dict(summary, epsilon=final.epsilon, bound=final.bound)
  return summary


def add_parser(subparsers):
  p = subparsers.add_parser('superquantile',
                            help='DP-Delta-FL / DP-FedAvg on the B.3 task',
                            description=__doc__,
                            formatter_class=common.HelpFormatter)
  p.add_argument('--algorithm',
                 default='deltafl',
                 choices=ALGORITHMS,
                 help='Delta-FL (tail clients) or FedAvg')
  p.add_argument('--rounds',
                 type=common.integer('--rounds', 1, 100000),
                 default=10,
                 help='rounds (the budget covers all of them)')
  p.add_argument('--clients',
                 type=common.integer('--clients', 1, POPULATION),
                 default=100,
                 help='clients per round (of 2500)')
  p.add_argument('--tail-fraction',
                 type=common.converter(
                     lambda v, n: checks.real(v, n, 0.0, 1.0, low_open=True),
                     '--tail-fraction'),
                 default=0.5,
                 help='theta')
  p.add_argument('--epsilon',
                 type=common.positive('--epsilon'),
                 default=5.0,
                 help='target epsilon of all rounds')
  p.add_argument('--delta',
                 type=common.probability_open('--delta'),
                 help=common.DELTA_HELP + f' (N = {POPULATION})')
  p.add_argument('--budget-ratio',
                 type=common.positive('--budget-ratio'),
                 default=0.25,
                 help='r: rho(quantile) / rho(update)')
  p.add_argument('--clip',
                 type=common.positive('--clip'),
                 default=0.1,
                 help='C, the update clip norm')
  p.add_argument('--loss-bound',
                 type=common.positive('--loss-bound'),
                 default=1.5,
                 help='B: losses clipped to [0, B]')
  p.add_argument('--bins',
                 type=common.integer('--bins', 2, 2**12),
                 default=16,
                 help='b (a power of two for tree and haar)')
  p.add_argument(
      '--histogram',
      default='tree',
      help='the loss histogram\'s encoding '
      '(tff_ddp.analytics.quantiles.encodings: flat, tree or its alias '
      'hierarchical, haar)')
  p.add_argument('--adversary',
                 default='server',
                 choices=['server', 'release'],
                 help='the adversary the calibration holds against')
  p.add_argument('--no-privacy',
                 action='store_true',
                 help='non-private Delta-FL (Algorithm 3) / FedAvg')
  p.add_argument('--learning-rate',
                 type=common.positive('--learning-rate'),
                 default=0.1,
                 help='client step size (one full-gradient step)')
  p.add_argument('--seed',
                 type=common.integer('--seed', 0, 2**32 - 1),
                 default=0,
                 help='cohorts (not the noise)')
  p.set_defaults(command='superquantile',
                 body=lambda args: run(algorithm=args.algorithm,
                                       rounds=args.rounds,
                                       clients=args.clients,
                                       tail_fraction=args.tail_fraction,
                                       epsilon=args.epsilon,
                                       delta=args.delta,
                                       budget_ratio=args.budget_ratio,
                                       clip=args.clip,
                                       loss_bound=args.loss_bound,
                                       bins=args.bins,
                                       histogram=args.histogram,
                                       adversary=args.adversary,
                                       private=not args.no_privacy,
                                       learning_rate=args.learning_rate,
                                       seed=args.seed) and 0)
  return p
