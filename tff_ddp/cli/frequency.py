"""`tff-ddp frequency`: federated frequency estimation on synthetic data or yours.

Every row is the real TFF process of `build_frequency_process` (secure
modular sums in the C++ test execution context) on one dataset, calibrated
to (epsilon, delta) against the server that runs the protocol (neighbours:
one user's data removed). Protocols: two_phase (TFFE: the clip C-hat from
the Haar quantile of the representation norms, then OcPBM), multi_round
(MFFE: the clients split into --rounds batches, the clip updated each
round; the budget covers the rounds composed, or, with --disjoint-rounds,
one round's by the assumption that no user is in two batches), fixed
(cPBM at --clip), normalize and sample (the paper's baselines). Data: iid
and heterogeneous are the paper's synthetic datasets; docstrings is the
real-text stand-in (word counts of installed packages' docstrings), see
`tff_ddp.analytics.frequency.data`; --items FILE reads yours (lines
`client_id,item`: a client's items are its lines) over the public item
domain of --domain FILE. Every bound the protocols use is stated (--domain,
--max-items), never read from the data. The l2 error
and the clip C* are computed in the clear, to evaluate the estimate: the
protocol releases neither.
"""

import dataclasses
import math
import time
import warnings
from typing import Callable, List, Optional, Sequence

import numpy as np

from tff_ddp.cli import common
from tff_ddp.utils import checks
from tff_ddp.utils import processes

PROTOCOLS = ('two_phase', 'multi_round', 'fixed', 'normalize', 'sample')
# The dataset is a dense [clients, dim] array (int64, then float32): 2^26
# entries are 0.8 GB; --clients 10^6 --dim 4096 would need 49 GB.
MAX_ENTRIES = 2**26
# d, the items: --dim's limit, and that of the distinct items of --items.
MAX_DIM = 4096
# How the protocols run (--engine): 'tff', TFF's processes, calls per
# client; 'batched', `tff_ddp.analytics.frequency.rounds` for two_phase,
# normalize and fixed (the same client and server code in batches, the
# processes' distribution; multi_round and sample stay on TFF); 'auto',
# TFF up to AUTO_TFF_CLIENTS users, batched above.
ENGINES = ('auto', 'tff', 'batched')
AUTO_TFF_CLIENTS = 10**4


@dataclasses.dataclass
class Row:
  protocol: str
  error: float  # eq. 1: ||sum_i x_i - estimate||_2 / n
  clip: float
  epsilon: float
  seconds: float
  detail: str
  # The estimate of sum_i x_i (released) and the bound on its noise's
  # standard deviation per item (from the public configuration and clip).
  estimate: Optional[np.ndarray] = None
  noise_sd: float = math.nan


def _noise_sd(params, clips_and_clients) -> float:
  """The stddev bound of an item's noise in the estimate of sum_i x_i: per
  release with clip C and n clients, C (scaled protocols; else 1) times
  the cPBM's `noise_stddev(n)` (the frame's decoding keeps it: its rows
  are orthonormal); independent releases add variances."""
  mechanism = params.factory.mechanism(params.aggregated_type)
  variance = sum(
      ((clip if params.scaled else 1.0) * mechanism.noise_stddev(n))**2
      for clip, n in clips_and_clients)
  return math.sqrt(variance)


def _run_two_phase(params, x, progress):
  from tff_ddp.analytics.frequency import process as fp
  comps = fp.two_phase_computations(params)
  clients = list(x)
  state = comps.initialize()
  estimate = clip = None
  for phase in progress(('phase 1: clip', 'phase 2: frequencies'), 'two_phase'):
    if phase.startswith('phase 1'):
      _, clip, measurements = comps.estimate_clip(state, clients)
      status = measurements['quantile']['status']
    else:
      _, estimate, _ = comps.estimate_frequencies(state['frequency'], clients,
                                                  clip)
  status = status.decode() if isinstance(status, bytes) else str(status)
  return (estimate, float(clip), f'phase 1 status {status}',
          _noise_sd(params, [(float(clip), len(x))]))


def _run_multi_round(params, x, rounds, progress):
  from tff_ddp.analytics.frequency import process as fp
  process = fp.build_frequency_process_from_parameters(params)
  state = process.initialize()
  batches = np.array_split(x, rounds)
  clips = []
  for batch in progress(batches, 'multi_round'):
    output = process.next(state, list(batch))
    state = output.state
    clips.append(float(output.measurements['clip']))
  path = ' '.join(f'{c:.3g}' for c in clips[:6])
  return (output.result, float(output.measurements['next_clip']),
          f'C per round {path}{" ..." if len(clips) > 6 else ""}',
          _noise_sd(params, zip(clips, map(len, batches))))


def _run_single(params, x, progress):
  from tff_ddp.analytics.frequency import process as fp
  process = fp.build_frequency_process_from_parameters(params)
  output = None
  for _ in progress((0,), params.protocol):
    output = process.next(process.initialize(), list(x))
  clip = float(output.measurements['clip'])
  return output.result, clip, '', _noise_sd(params, [(clip, len(x))])


def run(
    protocols: Sequence[str] = ('two_phase', 'normalize'),
    data: str = 'iid',
    dim: int = 50,
    num_clients: int = 1000,
    epsilon: float = 2.8,
    delta: Optional[float] = None,
    num_trials: int = 30,
    num_bins: int = 64,
    budget_fraction: float = 1.0 / 11.0,
    clip: Optional[float] = None,
    sample_items: int = 1,
    rounds: int = 4,
    divisor: str = 'l2',
    seed: int = 0,
    print_fn: Callable[[str], None] = print,
    counts: Optional[np.ndarray] = None,
    source: str = '',
    max_items: Optional[int] = None,
    disjoint_rounds: bool = False,
    items: Optional[Sequence[str]] = None,
    output: Optional[str] = None,
    plot: Optional[str] = None,
    engine: str = 'auto',
    progress: Optional[Callable[[str, int, int], None]] = None) -> List[Row]:
  """Runs the protocols on one dataset; prints the error table; returns it.

  With `counts` (float [clients, items], e.g. `data_files.read_items` over
  the user's public domain) they are the dataset (data, num_clients, dim
  and seed are not used); `source` names it in the report.

  `max_items` is two_phase's public bound on a user's items (the range of
  its phase-1 histogram). It is stated, never read from the data (the
  largest user's count differs between neighbouring datasets): needed with
  `counts` and with synthetic data other than 'iid', whose users hold
  exactly `frequency.data.ITEMS_PER_USER` items by construction.

  `items` names the columns (default: 0 .. d-1). The report prints the
  estimated counts of the first items; `output` (CSV, or JSON for .json)
  gets every item's estimate with its noise bound and epsilon, `plot` a
  picture (`tff_ddp.cli.outputs`). Lines are wrapped to a terminal's
  width.

  `engine` (ENGINES) says how the protocols run, and the report says
  which ran; `progress(what, users done, users)` hears of their advance
  (default: `common.ProgressLines` on stderr).
  """
  from tff_ddp.cli import outputs
  print_fn = outputs.wrapping(print_fn)
  for path, flag in ((output, '--output'), (plot, '--plot')):
    if path is not None:
      outputs.check_path(path, flag)
  from tff_ddp.analytics import budget
  from tff_ddp.analytics.frequency import clipping as fq
  from tff_ddp.analytics.frequency import data as fd
  from tff_ddp.analytics.frequency import process as fp
  if counts is not None:
    num_clients, dim = np.shape(counts)
    data = source or 'items'
    if dim > MAX_DIM:
      raise common.UserError(
          f'{data} has {dim} distinct items; at most {MAX_DIM} (as --dim)')
  num_clients = checks.integer(num_clients, 'clients', 1)
  dim = checks.integer(dim, 'dim', 1)
  if num_clients * dim > MAX_ENTRIES:
    raise common.UserError(
        f'--clients {num_clients} x --dim {dim} = {num_clients * dim} count '
        f'entries; at most {MAX_ENTRIES} (the dataset is held in memory).')
  # --rounds (default 4) only splits the clients of multi_round.
  if 'multi_round' in protocols:
    rounds = checks.integer(rounds, 'rounds', 1, num_clients)
  if max_items is None and 'two_phase' in protocols:
    if counts is None and data == 'iid':
      max_items = fd.ITEMS_PER_USER  # every user's, by construction
    else:
      raise common.UserError(
          f'two_phase on {data} needs --max-items: a public bound on the '
          'items a user holds (a device limit, a policy), stated; the '
          "data's largest count differs between neighbouring datasets and "
          'is not public')
  if max_items is not None:
    max_items = checks.integer(max_items, 'max_items', 1)
  engine = checks.choice(engine, 'engine', ENGINES)
  if progress is None:
    progress = common.ProgressLines('frequency')
  delta = common.resolve_delta(delta, num_clients, print_fn)
  x = (fd.load(data, num_clients, dim, seed)
       if counts is None else np.asarray(counts)).astype(np.float32)
  common_args = dict(num_trials=num_trials, divisor=divisor)
  configurations = {}
  notes = []
  # Every configuration is calibrated (and refused if it cannot work)
  # before any process runs.
  for protocol in protocols:
    kwargs = dict(common_args)
    n = num_clients
    if protocol == 'two_phase':
      kwargs.update(max_items=max_items,
                    num_bins=num_bins,
                    budget_fraction=budget_fraction)
    elif protocol == 'multi_round':
      n = num_clients // rounds
      kwargs.update(rounds=rounds,
                    budget_fraction=budget_fraction,
                    disjoint_rounds=disjoint_rounds,
                    total_clients=num_clients)
    elif protocol == 'fixed':
      if clip is None:
        raise common.UserError("--protocols fixed needs --clip.")
      kwargs.update(clip=clip)
    elif protocol == 'sample':
      kwargs.update(sample_items=sample_items)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always', budget.UnderspentBudgetWarning)
      configurations[protocol] = fp.frequency_parameters(
          protocol, dim, n, epsilon, delta, **kwargs)
    notes += [
        _underspent_note(w.message)
        for w in caught
        if isinstance(w.message, budget.UnderspentBudgetWarning)
    ]
  from tff_ddp.analytics.frequency import rounds as fr
  batched = {
      p for p in protocols if p in fr.PROTOCOLS and (engine == 'batched' or (
          engine == 'auto' and num_clients > AUTO_TFF_CLIENTS))
  }
  if set(protocols) - batched:
    processes.use_test_context()
  rows = []
  for protocol in protocols:
    params = configurations[protocol]
    start = time.perf_counter()
    if protocol in batched:
      release = fr.run(params, x, progress=progress)
      estimate, used, sd = (release.estimate, release.clip,
                            _noise_sd(params, [(release.clip, num_clients)]))
      detail = ('' if protocol != 'two_phase' else
                f'phase 1 status {release.status}')
    elif protocol == 'two_phase':
      estimate, used, detail, sd = _run_two_phase(params, x, common.progress)
    elif protocol == 'multi_round':
      estimate, used, detail, sd = _run_multi_round(params, x, rounds,
                                                    common.progress)
    else:
      estimate, used, detail, sd = _run_single(params, x, common.progress)
    described = fp.describe(params).replace('; ' + fp.NEIGHBOURS, '')
    rows.append(
        Row(protocol, fq.l2_error(estimate, x), used, params.epsilon,
            time.perf_counter() - start,
            '; '.join(filter(None, [described, detail])),
            np.asarray(estimate, np.float64), sd))
  names = ([str(j) for j in range(dim)]
           if items is None else [str(i) for i in items])
  print_fn(f'{num_clients} clients, {data} data, d = {dim}' +
           ('' if max_items is
            None else f' (max items per user {max_items}, stated)'))
  print_fn(f'epsilon per run at delta = {delta:g} against the server; '
           f'{fp.NEIGHBOURS}')
  print_fn('engine: ' + ('; '.join(
      filter(None, [
          'batched rounds for ' + ', '.join(sorted(batched)) + ' (clients in '
          'batches, the secure sums mod 2^bits in int64: the TFF processes\' '
          'distribution)' if batched else '', 'TFF\'s processes for ' +
          ', '.join(p for p in protocols if p not in batched)
          if set(protocols) - batched else ''
      ]))))
  if 'multi_round' in protocols:
    print_fn(f'multi_round: {rounds} rounds composed' if not disjoint_rounds
             else f'multi_round: ASSUMED (--disjoint-rounds, not checked) '
             f'that no user is in two of the {rounds} batches; the epsilon '
             'is one round\'s and does not hold for users who repeat')
  print_fn(f'{"protocol":12s} {"l2 error":>9s} {"clip":>9s} '
           f'{"noise sd":>9s} {"eps":>7s} {"seconds":>8s}')
  for row in rows:
    print_fn(f'{row.protocol:12s} {row.error:9.4f} {row.clip:9.4g} '
             f'{row.noise_sd:9.4g} {row.epsilon:7.3f} {row.seconds:8.1f}')
  for row in rows:
    print_fn(f'  {row.detail}')
  for note in notes:
    print_fn(note)
  truth = x.astype(np.float64).sum(axis=0)
  _print_estimates(print_fn, names, truth, rows, output)
  if output is not None:
    outputs.write_records(output, [
        dict(protocol=row.protocol,
             item=names[j],
             estimate=float(row.estimate[j]),
             noise_sd=row.noise_sd,
             clip=row.clip,
             epsilon=row.epsilon,
             delta=delta,
             adversary='server',
             clients=num_clients,
             private=True) for row in rows for j in range(dim)
    ])
    print_fn(f'estimates written to {output} (every item; the true counts '
             'and errors are not in it)')
  if plot is not None:
    outputs.plot_frequencies(
        plot, names, truth, {
            row.protocol: (row.estimate, np.full(dim, row.noise_sd))
            for row in rows
        }, f'{num_clients} clients, {data} data, epsilon ' +
        '/'.join(f'{row.epsilon:.3g}' for row in rows) +
        f' at delta {delta:g} against the server')
    print_fn(f'picture written to {plot} (true counts drawn in the clear: '
             'for you, not a private release)')
  if 'two_phase' in configurations:
    params = configurations['two_phase']
    two_phase = rows[list(protocols).index('two_phase')]
    norms = _norms(params, x)
    best = fq.optimal_clip(norms, params.target_quantile)
    print_fn(
        f'two_phase chose C-hat = {two_phase.clip:.4g}; the non-private'
        f' eq. 5 clip is C* = {best:.4g} (the '
        f'{params.target_quantile:.4f} quantile of ||y_i||_2, one '
        'frame); Theorem 1 bound at C-hat (as published / tightened): '
        f'{float(fq.expected_l2_error_bound(two_phase.clip, norms, params.effective_dim, params.num_trials, params.theta, dim)):.4g}'
        f' / {float(fq.tightened_error_bound(two_phase.clip, x, norms, params.num_trials, params.theta)):.4g}'
    )
  return rows


# Items whose estimates the report prints (all of them go to --output).
SHOWN_ITEMS = 12


def _print_estimates(print_fn, names, truth, rows, output):
  """The first items' estimated counts, each protocol's with its noise
  bound, beside the true counts (computed in the clear)."""
  shown = min(len(names), SHOWN_ITEMS)
  width = max(8, max(len(n) for n in names[:shown]) + 1)
  which = ''
  if shown < len(names):
    which = f', items 1-{shown} of {len(names)}'
    if not output:
      which += ' (all: --output FILE)'
  print_fn('estimated counts (+- noise sd; true: in the clear, not '
           f'released){which}:')
  print_fn(f'  {"item":{width}s} {"true":>8s} ' +
           ' '.join(f'{row.protocol[:14]:>14s}' for row in rows))
  for j in range(shown):
    print_fn(f'  {names[j][:width]:{width}s} {truth[j]:8.0f} ' +
             ' '.join(f'{row.estimate[j]:14.1f}' for row in rows))
  print_fn(f'  {"+- sd":{width}s} {"":8s} ' +
           ' '.join(f'{row.noise_sd:14.1f}' for row in rows))


def _underspent_note(warning) -> str:
  """The CLI's words for `budget.UnderspentBudgetWarning` (its flags)."""
  text = (f'note: {warning.protocol} spends epsilon {warning.spent:.4g} of '
          f'the {warning.target:g} asked: theta is at most 1/4 with '
          f'--num-trials {warning.num_trials}, so it adds more noise than '
          'the budget needs.')
  if warning.offer is not None:
    text += (f' --num-trials {warning.offer.num_trials} spends epsilon '
             f'{warning.offer.epsilon:.4g}.')
  return text


def _norms(params, x):
  import tensorflow as tf
  from tff_ddp.analytics.frequency import simulation as fs
  y = fs.representations(params.encoder(), x, tf.constant([0, 1], tf.int64))
  return fs.norms_of(y)


def add_parser(subparsers):
  p = subparsers.add_parser('frequency',
                            help='federated frequency estimation (TFFE, MFFE, '
                            'baselines)',
                            description=__doc__,
                            formatter_class=common.HelpFormatter)
  p.add_argument('--protocols',
                 nargs='+',
                 default=['two_phase', 'normalize'],
                 choices=list(PROTOCOLS),
                 help='the protocols run, one row '
                 'each, on the same data')
  p.add_argument('--items',
                 metavar='FILE',
                 help='your data instead of synthetic: a CSV file of lines '
                 '`client_id,item`, a client\'s items its lines; d is the '
                 'distinct items (see docs/cli.md)')
  p.add_argument('--domain',
                 metavar='FILE',
                 help='with --items: the public item domain, one item a line '
                 '(d is its length; items of --items outside it are '
                 'dropped) (required with --items)')
  p.add_argument('--max-items',
                 type=common.integer('--max-items', 1),
                 help='two_phase: the public bound on the items a user holds '
                 '(the range of phase 1) (default: 100 for --data iid, whose '
                 'users hold 100 each; required otherwise)')
  p.add_argument('--data',
                 choices=['iid', 'heterogeneous', 'docstrings'],
                 help='the synthetic dataset (default: iid; not with '
                 '--items)')
  p.add_argument('--dim',
                 type=common.integer('--dim', 1, MAX_DIM),
                 help='d, the number of items (default: 50; not with '
                 '--items)')
  p.add_argument('--clients',
                 type=common.integer('--clients', 1, 10**6),
                 help='n, the users (all of them; multi_round splits them '
                 'into --rounds batches) (default: 1000; not with --items)')
  p.add_argument('--epsilon',
                 type=common.positive('--epsilon'),
                 default=2.8,
                 help='epsilon of a run against the server (multi_round: of '
                 'its rounds composed, or of one with --disjoint-rounds)')
  p.add_argument('--delta',
                 type=common.probability_open('--delta'),
                 help=common.DELTA_HELP + ' (of a run, as --epsilon)')
  p.add_argument('--num-trials',
                 type=common.integer('--num-trials', 1, 2**20),
                 default=30,
                 help='m of the frequency cPBM (theta calibrated)')
  p.add_argument('--bins',
                 type=common.integer('--bins', 2, 2**16),
                 default=64,
                 help='two_phase: Haar bins (a power of two)')
  p.add_argument('--budget-fraction',
                 type=common.converter(
                     lambda v, n: checks.real(v, n, 0.0, 1.0, True, True),
                     '--budget-fraction'),
                 default=1.0 / 11.0,
                 help='share of the standalone epsilons for the clip '
                 '(two_phase phase 1, multi_round indicator)')
  p.add_argument('--clip',
                 type=common.positive('--clip'),
                 default=None,
                 help='fixed: the clip C')
  p.add_argument('--sample-items',
                 type=common.integer('--sample-items', 1, 10**6),
                 default=1,
                 help='sample: items kept per user')
  p.add_argument('--rounds',
                 type=common.integer('--rounds', 1, 10**6),
                 default=4,
                 help='multi_round: R batches')
  p.add_argument('--output',
                 metavar='FILE',
                 help='write every item\'s private estimate, its noise bound '
                 'and epsilon: CSV, or JSON for a .json FILE (default: none)')
  p.add_argument('--plot',
                 metavar='FILE',
                 help='draw the estimates with error bars (2 noise sd) beside '
                 'the true counts: .png, .pdf, .svg (default: none)')
  p.add_argument('--disjoint-rounds',
                 action='store_true',
                 help='multi_round: account one round, ASSUMING no user '
                 'takes part in two (the paper\'s App. D; not checked) '
                 '(default: the rounds composed)')
  p.add_argument('--divisor',
                 default='l2',
                 choices=['l2', 'linf'],
                 help="cPBM's divisor: C (Algorithm 3) or the Kashin bound")
  p.add_argument('--seed',
                 type=common.integer('--seed', 0, 2**32 - 1),
                 help='seed of the synthetic data, not the noise (default: '
                 '0; not with --items)')
  p.add_argument('--engine',
                 choices=ENGINES,
                 default='auto',
                 help='how two_phase, normalize and fixed run: tff (TFF\'s '
                 'processes), batched (the same client and server code in '
                 'batches: the processes\' distribution) or auto (tff up '
                 f'to {AUTO_TFF_CLIENTS} users, batched above); multi_round '
                 'and sample run on TFF')
  p.set_defaults(command='frequency', body=_body)
  return p


def _body(args) -> int:
  """Runs the command: synthetic data, or the clients of --items."""
  from tff_ddp.cli import data_files
  if args.domain is not None and args.items is None:
    raise common.UserError('--domain is for --items (synthetic data has '
                           'its own: --dim)')
  dropped, domains = [], []

  def read(path):
    if args.domain is None:
      raise common.UserError(
          '--items needs --domain FILE: the item domain, public (one item a '
          'line, known without the users\' data: a catalogue, a '
          'vocabulary); the file\'s own distinct items differ between '
          'neighbouring datasets')
    domain = data_files.read_domain(args.domain)
    if len(domain) > MAX_DIM:
      raise common.UserError(
          f'--domain {args.domain} has {len(domain)} items; at most '
          f'{MAX_DIM} (as --dim)')
    items = data_files.read_items(path, MAX_ENTRIES, domain)
    dropped.append(items.dropped)
    domains.append(domain)
    return items.counts

  counts, value = data_files.file_or_synthetic(
      args.items, '--items', read,
      dict(data=(args.data, 'iid'),
           dim=(args.dim, 50),
           clients=(args.clients, 1000),
           seed=(args.seed, 0)), 'the clients and items are those of the file')
  if dropped and dropped[0]:
    print(f'note: {dropped[0]} line(s) of {args.items} name items outside '
          f'--domain {args.domain}: dropped from their clients\' vectors '
          '(counted in the clear from your file; nothing the protocol '
          'releases).')
  run(protocols=args.protocols,
      data=value['data'],
      dim=value['dim'],
      num_clients=value['clients'],
      epsilon=args.epsilon,
      delta=args.delta,
      num_trials=args.num_trials,
      num_bins=args.bins,
      budget_fraction=args.budget_fraction,
      clip=args.clip,
      sample_items=args.sample_items,
      rounds=args.rounds,
      disjoint_rounds=args.disjoint_rounds,
      items=domains[0] if domains else None,
      output=args.output,
      plot=args.plot,
      engine=args.engine,
      divisor=args.divisor,
      seed=value['seed'],
      counts=counts,
      source=args.items or '',
      max_items=args.max_items)
  return 0
