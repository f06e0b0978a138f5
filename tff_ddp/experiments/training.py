"""DP-FedAvg on the DDG paper's tasks, round by round: `tff-ddp train`.

`run(TrainConfig(...))` trains one of `tff_ddp.experiments.paper_tasks`' tasks
(Federated EMNIST-62, Stack Overflow next-word prediction) as Section 6.2 of
Kairouz, Liu & Steinke (2021, arXiv:2102.06387) does:
`tff.learning.algorithms.build_unweighted_fed_avg` (uniform client weights)
with server momentum, on TFF's loaders' data
(`tff.simulation.compose_dataset_computation_with_learning_process`: a
round takes the cohort's client ids), each round's cohort of n clients
drawn uniformly without replacement from the N training clients
(independently across rounds), the model updates averaged by the mechanism
chosen (`tff_ddp.experiments.train_mechanisms`: 'ddg', 'skellam', 'gaussian'
or 'none').

No client metric leaves the clients (`tff_ddp.learning.withhold_metrics`).
Each round's event (`Mechanism.round_event`) is composed by a
`train_mechanisms.Ledger` against the server (no amplification by
sampling: it draws the cohorts) and against the release (amplified: the
paper's kind). Every round run is accounted, including rounds run again
after a resume (their models were computed and may have been seen).

Two epsilons per adversary. Each round prints the running epsilon of the
rounds so far by RDP (`Ledger.epsilon`, an upper bound). At the end of the
run the events of every round run are composed again with the tightest
accountant (`tff_ddp.accounting.pld_accountant.tightest`: the smaller of
the privacy loss distribution bound and RDP, named; `Ledger.tightest`):
the run's reported epsilon (`Summary.final`). `--target-epsilon`
calibrates with that same accountant, so a calibrated run's final epsilon
against `calibrate_against` is at most the target, while its running RDP
epsilon may end above it.

Output directory: `config.json` (the run's settings), `metrics.csv` and
`metrics.json` (a row per round: seconds, test accuracy every
`eval_every` rounds, the running epsilon against both adversaries;
metrics.json's `final`: the end-of-run epsilons and their bounds),
`events.jsonl`
(each round's DP event, what the ledger composed), `checkpoints/`
(`tff.program.FileProgramStateManager`, every `checkpoint_every` rounds
and the last), and for Stack Overflow `vocabulary.txt` when built.
"""

import asyncio
import csv
import dataclasses
import json
import math
import os
import secrets
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from tff_ddp.experiments import databases
from tff_ddp.experiments import paper_tasks
from tff_ddp.experiments import train_mechanisms
from tff_ddp.utils import checks
from tff_ddp.utils import deltas

if TYPE_CHECKING:  # the annotations only; imported where used
  from tff_ddp.accounting import pld_accountant

CONFIG_FILE = 'config.json'
EVENTS_FILE = 'events.jsonl'
METRICS_CSV = 'metrics.csv'
METRICS_JSON = 'metrics.json'
VOCABULARY_FILE = 'vocabulary.txt'
CHECKPOINTS = 'checkpoints'
# The cohorts' secret seed (the server's; never part of the release).
COHORT_SEED_FILE = 'cohort_seed'
_CHECKPOINT_PREFIX = 'round_'
# Databases with more training clients than this get the index hint.
_INDEX_HINT_CLIENTS = 1000
# Settings a resumed run may change (the rest must match the saved run).
_MAY_CHANGE = ('rounds', 'eval_every', 'eval_clients', 'checkpoint_every',
               'resume', 'vocab_file', 'vocab_from_training_data')


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """What `run` trains; None means the task's Section 6.2 default."""
  task: str
  mechanism: str
  data_dir: str
  output_dir: str
  noise_multiplier: Optional[float] = None
  target_epsilon: Optional[float] = None
  calibrate_against: str = 'release'
  bits: int = 16
  rounds: Optional[int] = None
  clients_per_round: Optional[int] = None
  clip: Optional[float] = None
  client_learning_rate: Optional[float] = None
  server_learning_rate: Optional[float] = None
  server_momentum: Optional[float] = None
  client_batch_size: Optional[int] = None
  client_epochs: Optional[int] = None
  max_examples_per_client: Optional[int] = None
  delta: Optional[float] = None
  k_stddevs: float = 4.0
  noise_sampler: Optional[str] = None
  vocab_size: int = paper_tasks.VOCABULARY_SIZE
  vocab_file: Optional[str] = None
  vocab_from_training_data: bool = False
  eval_every: int = 10
  eval_clients: Optional[int] = None
  checkpoint_every: int = 10
  seed: int = 0
  cohort_seed: Optional[int] = None
  resume: bool = False

  def resolved(self, paper_task: paper_tasks.PaperTask) -> 'TrainConfig':
    """Defaults filled in from the task, every value checked."""
    d = paper_task.defaults
    pick = lambda value, default: default if value is None else value
    return dataclasses.replace(
        self,
        bits=checks.integer(self.bits, 'bits', 1, 30),
        rounds=checks.integer(pick(self.rounds, d.rounds), 'rounds', 1),
        clients_per_round=checks.integer(
            pick(self.clients_per_round, d.clients_per_round),
            'clients_per_round', 1),
        clip=checks.positive(pick(self.clip, d.clip), 'clip'),
        client_learning_rate=checks.positive(
            pick(self.client_learning_rate, d.client_learning_rate),
            'client_learning_rate'),
        server_learning_rate=checks.positive(
            pick(self.server_learning_rate, d.server_learning_rate),
            'server_learning_rate'),
        server_momentum=checks.real(pick(self.server_momentum,
                                         d.server_momentum),
                                    'server_momentum',
                                    0.0,
                                    1.0,
                                    high_open=True),
        client_batch_size=checks.integer(
            pick(self.client_batch_size, d.client_batch_size),
            'client_batch_size', 1),
        client_epochs=checks.integer(pick(self.client_epochs, d.client_epochs),
                                     'client_epochs', 1),
        max_examples_per_client=checks.optional_integer(
            self.max_examples_per_client, 'max_examples_per_client', 1),
        k_stddevs=checks.positive(self.k_stddevs, 'k_stddevs'),
        vocab_size=checks.integer(self.vocab_size, 'vocab_size', 1),
        vocab_from_training_data=checks.boolean(self.vocab_from_training_data,
                                                'vocab_from_training_data'),
        eval_every=checks.integer(self.eval_every, 'eval_every', 0),
        eval_clients=checks.integer(pick(self.eval_clients, d.eval_clients),
                                    'eval_clients', 0),
        checkpoint_every=checks.integer(self.checkpoint_every,
                                        'checkpoint_every', 1),
        seed=checks.integer(self.seed, 'seed', 0, 2**32 - 1),
        cohort_seed=checks.optional_integer(self.cohort_seed, 'cohort_seed', 0),
        resume=checks.boolean(self.resume, 'resume'))


# ---------------------------------------------------------------------------
# Preparing a run: every check before TFF builds anything


@dataclasses.dataclass
class Setup:
  """A checked run: its resolved config, task, mechanism, data and delta.

  Attributes:
    config: the `TrainConfig`, defaults filled in.
    task: the `paper_tasks.PaperTask`.
    mechanism: the `train_mechanisms.Mechanism`.
    saved: the saved `config.json` of the run being resumed, or None.
    data: the loaded `paper_tasks.Data`.
    delta: of every epsilon.
    dimension: d, the model's trainable parameters.
    calibration: the `tff_ddp.accounting.CalibrationResult` that chose the
      noise multiplier (with --target-epsilon; its `bound` names the bound
      its epsilon is), or None.
    delta_warning: a given delta not well below 1/N
      (`tff_ddp.utils.deltas.delta_warning`), or None.
  """
  config: TrainConfig
  task: paper_tasks.PaperTask
  mechanism: train_mechanisms.Mechanism
  saved: Optional[dict]
  data: paper_tasks.Data
  delta: float
  dimension: int
  calibration: Optional[object] = None
  delta_warning: Optional[str] = None


def _settings(config: TrainConfig) -> dict:
  out = dataclasses.asdict(config)
  out['data_dir'] = _same_path(config.data_dir)
  out['output_dir'] = _same_path(config.output_dir)
  return out


def _same_path(path: str) -> str:
  """One spelling of a folder: absolute, `~` expanded, no trailing `/`
  (`run` and `run/`, relative and absolute, are one run)."""
  return os.path.normpath(os.path.abspath(os.path.expanduser(path)))


def _read_json(path):
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _write_json(path, value):
  scratch = path + '.tmp'
  with open(scratch, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=1, allow_nan=False)
  os.replace(scratch, path)


def _check_noise(config: TrainConfig, chosen) -> TrainConfig:
  """Exactly one of noise_multiplier and target_epsilon for a DP
  mechanism, neither for 'none'."""
  given = [
      f for f in ('noise_multiplier', 'target_epsilon')
      if getattr(config, f) is not None
  ]
  if config.noise_sampler is not None and not chosen.secure_sum:
    raise ValueError(f'--noise-sampler is for --mechanism ddg or skellam, '
                     f'not {chosen.name}.')
  if not chosen.needs_noise:
    if given:
      raise ValueError(f'--mechanism none adds no noise: drop '
                       f'--{given[0].replace("_", "-")}.')
    return config
  if len(given) != 1:
    raise ValueError(f'--mechanism {chosen.name} needs --noise-multiplier '
                     'or --target-epsilon (one of them; --mechanism none '
                     'trains without noise).')
  if not chosen.private[checks.choice(
      config.calibrate_against, 'calibrate_against',
      ('release', 'server'))] and config.target_epsilon is not None:
    raise ValueError(f'--mechanism {chosen.name} is not private against the '
                     f'{config.calibrate_against}: calibrate against the '
                     'release.')
  return dataclasses.replace(
      config, **{f: checks.positive(getattr(config, f), f) for f in given})


def calibrate_noise(setup: 'Setup', value_type) -> 'Setup':
  """The setup with the least noise multiplier whose `rounds` rounds (each
  a cohort of n of the N clients, without replacement) are
  (target_epsilon, delta)-DP against `calibrate_against`
  (`tff_ddp.accounting.calibrate` over the mechanism's planning event,
  with the tightest accountant: the one of the run's final epsilon)."""
  from tff_ddp import accounting
  from tff_ddp.accounting import calibration
  from tff_ddp.accounting import pld_accountant
  config = setup.config

  def make_event(z):
    planned = setup.mechanism.planning_event(
        dataclasses.replace(config, noise_multiplier=z), value_type)
    return calibration.rounds_event(planned,
                                    config.rounds,
                                    'without-replacement',
                                    sample_size=config.clients_per_round,
                                    population=setup.data.population)

  result = accounting.calibrate(
      lambda: pld_accountant.tightest(adversary=config.calibrate_against),
      make_event, config.target_epsilon, setup.delta,
      accounting.Parameter.noise('noise_multiplier'))
  return dataclasses.replace(setup,
                             config=dataclasses.replace(
                                 config, noise_multiplier=result.value),
                             calibration=result)


def _check_output_dir(config: TrainConfig) -> Optional[dict]:
  """The saved settings of the run to resume (None: a new run)."""
  path = os.path.join(config.output_dir, CONFIG_FILE)
  exists = os.path.isfile(path)
  if not config.resume:
    if exists:
      raise ValueError(
          f'--output-dir {config.output_dir} holds a run already: pass '
          '--resume to continue it, or give another --output-dir.')
    return None
  if not exists:
    raise ValueError(f'--resume: --output-dir {config.output_dir} holds no '
                     f'run ({CONFIG_FILE} is missing).')
  saved = _read_json(path)
  now = _settings(config)
  before = dict(saved.get('settings', {}))
  for key in ('data_dir', 'output_dir'):  # (runs saved before: as given)
    if isinstance(before.get(key), str):
      before[key] = _same_path(before[key])
  changed = sorted(
      k for k in now if k not in _MAY_CHANGE and before.get(k) != now[k])
  if changed:
    raise ValueError(
        f'--resume: the run in {config.output_dir} was started with other '
        'settings: ' +
        ', '.join(f'{k.replace("_", "-")} {saved["settings"].get(k)!r} (now '
                  f'{now[k]!r})' for k in changed) + '; resume with the saved '
        'settings or give another --output-dir.')
  return saved


def _vocabulary(task, config, database, saved, progress):
  """Stack Overflow's vocabulary: the named file, the saved one of a
  resumed run, or built from the training split."""
  if task is not paper_tasks.STACKOVERFLOW_TASK:
    if config.vocab_file is not None or config.vocab_from_training_data:
      flag = ('--vocab-file' if config.vocab_file is not None else
              '--vocab-from-training-data')
      raise ValueError(f'{flag} is for --task stackoverflow.')
    return None
  built = os.path.join(config.output_dir, VOCABULARY_FILE)
  if saved is not None:
    vocabulary = paper_tasks.read_vocabulary(saved['vocabulary_file'],
                                             config.vocab_size)
    if vocabulary.digest != saved['vocabulary_digest']:
      raise ValueError(f'--resume: the vocabulary of the run in '
                       f'{config.output_dir} ({saved["vocabulary_file"]}) '
                       'changed since it started.')
    return paper_tasks.Vocabulary(vocabulary.words, saved['vocabulary_source'])
  if config.vocab_file is not None:
    if config.vocab_from_training_data:
      raise ValueError('give --vocab-file or --vocab-from-training-data, '
                       'not both.')
    return paper_tasks.read_vocabulary(config.vocab_file, config.vocab_size)
  if not config.vocab_from_training_data:
    raise ValueError(
        '--task stackoverflow needs --vocab-file (a public word list, e.g. '
        'TFF\'s stackoverflow.word_count) or --vocab-from-training-data (the '
        'vocabulary is then counted from the private training split without '
        'noise: not covered by epsilon).')
  return paper_tasks.build_vocabulary(database, config.vocab_size, built,
                                      progress)


def prepare(config: TrainConfig, progress: Optional[Callable] = None) -> Setup:
  """Checks the settings, the output directory and the database, then loads
  the data through TFF's loader (and Stack Overflow's vocabulary)."""
  task = paper_tasks.task(config.task)
  chosen = train_mechanisms.mechanism(config.mechanism)
  config = _check_noise(config.resolved(task), chosen)
  saved = _check_output_dir(config)
  database = databases.check(task.database, config.data_dir)
  os.makedirs(config.output_dir, exist_ok=True)
  vocabulary = _vocabulary(task, config, database, saved, progress)
  data = task.load(config.data_dir, config.client_batch_size,
                   config.client_epochs, config.max_examples_per_client,
                   vocabulary)
  if config.clients_per_round > data.population:
    raise ValueError(
        f'--clients-per-round {config.clients_per_round} is more than the '
        f'{data.population} training clients of {data.database}.')
  delta = config.delta
  warning = None
  if delta is None:  # well below 1/N (the paper's 1/N for EMNIST is not)
    delta = deltas.default_delta(data.population)
  else:
    delta = checks.probability(delta, 'delta', allow_one=False)
    warning = deltas.delta_warning(delta, data.population)
  value_type, dimension = update_type(task, data)
  setup = Setup(config,
                task,
                chosen,
                saved,
                data,
                delta,
                dimension,
                delta_warning=warning)
  if config.target_epsilon is not None:
    if saved is not None:  # the run's noise, whatever --rounds is now
      setup = dataclasses.replace(
          setup,
          config=dataclasses.replace(
              config, noise_multiplier=saved['noise_multiplier']))
    else:
      setup = calibrate_noise(setup, value_type)
  if saved is None:
    _write_json(
        os.path.join(config.output_dir, CONFIG_FILE),
        dict(settings=_settings(config),
             noise_multiplier=setup.config.noise_multiplier,
             vocabulary_file=vocabulary and
             os.path.abspath(config.vocab_file or
                             os.path.join(config.output_dir, VOCABULARY_FILE)),
             vocabulary_source=vocabulary and vocabulary.source,
             vocabulary_digest=vocabulary and vocabulary.digest))
  return setup


def update_type(task: paper_tasks.PaperTask, data: paper_tasks.Data):
  """(the TFF type of a model update, its dimension d): the trainable
  weights."""
  import numpy as np
  import tensorflow_federated as tff
  model = task.keras_model(data)
  return tff.types.to_type([
      tff.TensorType(np.float32, w.shape.as_list())
      for w in model.trainable_weights
  ]), paper_tasks.parameter_count(model)


def build_process(setup: Setup):
  """(the learning process taking client ids, the model's dimension d)."""
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_ddp import learning
  config = setup.config
  tf.keras.utils.set_random_seed(config.seed)  # the model's initialization
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      setup.task.model_fn(setup.data),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          config.client_learning_rate),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          config.server_learning_rate, momentum=config.server_momentum),
      model_aggregator=setup.mechanism.aggregator(config),
      metrics_aggregator=learning.withhold_metrics)
  process = tff.simulation.compose_dataset_computation_with_learning_process(
      setup.data.train.dataset_computation, process)
  return process, setup.dimension


# ---------------------------------------------------------------------------
# The output directory


@dataclasses.dataclass
class Row:
  """One round as printed and written."""
  round: int
  clients: int
  seconds: float
  accuracy: Optional[float]
  epsilon_server: float
  epsilon_release: float


class RunFiles:
  """The run's files in its output directory (module docstring)."""

  def __init__(self, output_dir: str):
    import tensorflow_federated as tff
    self._dir = output_dir
    self.events = os.path.join(output_dir, EVENTS_FILE)
    self.csv = os.path.join(output_dir, METRICS_CSV)
    self.json = os.path.join(output_dir, METRICS_JSON)
    self.checkpoints = os.path.join(output_dir, CHECKPOINTS)
    self._manager = tff.program.FileProgramStateManager(
        self.checkpoints,
        prefix=_CHECKPOINT_PREFIX,
        keep_total=2,
        keep_first=False)

  def append_event(self, round_number: int, cohort_size: int, event) -> None:
    """Written before the round is printed: the ledger on disk never lacks
    a round anyone saw."""
    with open(self.events, 'a', encoding='utf-8') as f:
      f.write(
          json.dumps(
              dict(round=round_number,
                   cohort=cohort_size,
                   event=event and train_mechanisms.event_to_json(event))) +
          '\n')

  def events_run(self) -> List[Tuple[object, int]]:
    """(event, cohort) of every round run so far, re-runs included."""
    if not os.path.isfile(self.events):
      return []
    with open(self.events, encoding='utf-8') as f:
      records = [json.loads(line) for line in f if line.strip()]
    return [(r['event'] and
             train_mechanisms.event_from_json(r['event']), r['cohort'])
            for r in records]

  def write_metrics(self, rows: List[Row], header: dict) -> None:
    with open(self.csv, 'w', newline='', encoding='utf-8') as f:
      writer = csv.writer(f)
      writer.writerow([field.name for field in dataclasses.fields(Row)] +
                      ['delta'])
      for row in rows:
        writer.writerow([
            row.round, row.clients, f'{row.seconds:.3f}',
            '' if row.accuracy is None else f'{row.accuracy:.6f}',
            row.epsilon_server, row.epsilon_release, header['delta']
        ])
    # Strict JSON: an infinite epsilon as the string 'inf'.
    _write_json(
        self.json,
        dict(header,
             rows=[{
                 k: ('inf' if isinstance(v, float) and math.isinf(v) else v)
                 for k, v in dataclasses.asdict(row).items()
             }
                   for row in rows]))

  def rows_until(self, last_round: int) -> List[Row]:
    if not os.path.isfile(self.json):
      return []
    rows = [
        Row(**r)
        for r in _read_json(self.json)['rows']
        if r['round'] <= last_round
    ]
    for row in rows:
      row.epsilon_server = float(row.epsilon_server)
      row.epsilon_release = float(row.epsilon_release)
    return rows

  def save_state(self, state, round_number: int) -> None:
    asyncio.run(self._manager.save(state, round_number))

  def latest_state(self, structure):
    """(round, state) of the last checkpoint, or (0, None)."""
    versions = asyncio.run(self._manager.get_versions()) or []
    if not versions:
      return 0, None
    return versions[-1], asyncio.run(self._manager.load(versions[-1],
                                                        structure))


# ---------------------------------------------------------------------------
# The run


@dataclasses.dataclass
class Summary:
  """What `run` returns: the rows of the run and its last values.

  `epsilon_server` and `epsilon_release` are the last running epsilons
  (RDP, upper bounds); `final` maps each adversary to the run's epsilon by
  the tightest accountant (`pld_accountant.FinalEpsilon`: the value, the
  bound it is, the adversary and neighbouring relation).
  """
  rows: List[Row]
  accuracy: Optional[float]
  epsilon_server: float
  epsilon_release: float
  delta: float
  population: int
  dimension: int
  seconds_per_round: float
  noise_multiplier: Optional[float] = None
  vocabulary_source: Optional[str] = None
  final: Dict[str, 'pld_accountant.FinalEpsilon'] = dataclasses.field(
      default_factory=dict)


def _format_seconds(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f'{seconds}s'
  if seconds < 3600:
    return f'{seconds // 60}m{seconds % 60:02d}s'
  return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m'


def _epsilon_text(value: float) -> str:
  return 'inf' if math.isinf(value) else f'{value:.4g}'


def _format_row(row: Row, eta: float) -> str:
  accuracy = '-' if row.accuracy is None else f'{row.accuracy:.4f}'
  return (f'{row.round:6d} {accuracy:>9s} '
          f'{_epsilon_text(row.epsilon_server):>12s} '
          f'{_epsilon_text(row.epsilon_release):>13s} '
          f'{row.seconds:8.2f} {_format_seconds(eta):>7s}')


def run(config: TrainConfig,
        print_fn: Callable[[str], None] = print,
        progress: Optional[Callable] = None) -> Summary:
  """Trains, printing a line per round; returns the `Summary`.

  Args:
    config: the run (`TrainConfig`; None fields take the task's defaults).
    print_fn: where the report goes.
    progress: optional `progress(iterable, description, total)` wrapper for
      long preparations (building a vocabulary).

  Raises:
    ValueError / TypeError: a setting, database or output directory the run
      cannot use (one-line messages).
  """
  from tff_ddp.utils import processes
  setup = prepare(config, progress)
  config = setup.config
  _print_header(print_fn, setup, setup.dimension)
  process, dimension = build_process(setup)
  files = RunFiles(config.output_dir)
  ledger = train_mechanisms.Ledger(setup.mechanism, setup.data.population,
                                   setup.delta)
  processes.use_test_context()
  state = process.initialize()
  start, rows = 0, []
  if setup.saved is not None:
    for event, size in files.events_run():
      ledger.compose(event, size)
    start, restored = files.latest_state(state)
    state = restored if restored is not None else state
    rows = files.rows_until(start)
  header = _header(setup, dimension)
  if setup.saved is not None:
    again = ledger.rounds_accounted - start
    print_fn(f'resumed after round {start} (its checkpoint)' +
             (f'; {again} round(s) run after it before the interruption stay '
              'accounted (their models were computed)' if again > 0 else '') +
             '.')
  evaluator = None
  if config.eval_every:
    evaluator = paper_tasks.Evaluator(
        setup.task, setup.data,
        paper_tasks.eval_client_ids(setup.data, config.eval_clients,
                                    config.seed))
  print_fn('eps(server), eps(release): the running epsilon of the rounds so '
           'far, by RDP (an upper bound); the end of the run reports the '
           'tightest bound.')
  print_fn(f'{"round":>6s} {"accuracy":>9s} {"eps(server)":>12s} '
           f'{"eps(release)":>13s} {"s/round":>8s} {"eta":>7s}')
  client_ids = list(setup.data.train.client_ids)
  secret = cohort_seed(config)
  times = []
  for round_number in range(start + 1, config.rounds + 1):
    ids = cohort(client_ids, config.clients_per_round, secret, round_number)
    began = time.perf_counter()
    output = _read_round(process, state, ids, round_number, setup.data.database)
    times.append(time.perf_counter() - began)
    state = output.state
    event = setup.mechanism.round_event(output, state)
    files.append_event(round_number, len(ids), event)
    ledger.compose(event, len(ids))
    last = round_number == config.rounds
    accuracy = None
    if evaluator and (round_number % config.eval_every == 0 or last):
      accuracy = evaluator.accuracy(process.get_model_weights(state))
    rows.append(
        Row(round_number, len(ids), times[-1], accuracy,
            ledger.epsilon('server'), ledger.epsilon('release')))
    print_fn(
        _format_row(rows[-1],
                    sum(times) / len(times) * (config.rounds - round_number)))
    files.write_metrics(rows, header)
    if round_number % config.checkpoint_every == 0 or last:
      files.save_state(state, round_number)
  final = {a: ledger.tightest(a) for a in ('server', 'release')}
  header['final'] = {a: _final_json(f) for a, f in final.items()}
  files.write_metrics(rows, header)
  _print_final(print_fn, setup, ledger, final)
  _print_footer(print_fn, setup, ledger)
  accuracies = [r.accuracy for r in rows if r.accuracy is not None]
  return Summary(rows=rows,
                 accuracy=accuracies[-1] if accuracies else None,
                 epsilon_server=ledger.epsilon('server'),
                 epsilon_release=ledger.epsilon('release'),
                 delta=setup.delta,
                 population=setup.data.population,
                 dimension=dimension,
                 seconds_per_round=(sum(times[1:]) /
                                    (len(times) - 1) if len(times) > 1 else
                                    (times[0] if times else math.nan)),
                 noise_multiplier=config.noise_multiplier,
                 vocabulary_source=(setup.data.vocabulary and
                                    setup.data.vocabulary.source),
                 final=final)


def _final_json(final: 'pld_accountant.FinalEpsilon') -> dict:
  """metrics.json's record of an end-of-run epsilon (strict JSON)."""
  return dict(epsilon=('inf' if math.isinf(final.epsilon) else final.epsilon),
              bound=final.bound,
              adversary=final.adversary,
              description=final.description,
              rdp_epsilon=('inf' if math.isinf(final.rdp_epsilon) else
                           final.rdp_epsilon))


def _print_final(print_fn, setup: Setup, ledger, final):
  """The run's epsilons by the tightest accountant, each naming its
  adversary, neighbouring relation and bound, the running RDP beside."""
  config = setup.config
  print_fn(f'end of run: epsilon of the {ledger.rounds_accounted} round(s) '
           f'run at delta = {setup.delta:.3g}, the tightest bound of their '
           'events:')
  for adversary in ('server', 'release'):
    f = final[adversary]
    target = ''
    if (config.target_epsilon is not None and setup.saved is None and
        adversary == config.calibrate_against):
      target = f' (target {config.target_epsilon:g})'
    running = ('' if f.bound is None else
               f'; running RDP {_epsilon_text(f.rdp_epsilon)}')
    value = 'inf' if math.isinf(f.epsilon) else f'{f.epsilon:.6g}'
    print_fn(f'eps({adversary}) = {value}{target}: '
             f"{f.description.rstrip('.') if running else f.description}"
             f'{running}')


# What TF / TFF say about an example they cannot use (a damaged row a
# sampled `databases.check` did not read, a label out of range).
_DATA_ERRORS = ('DecodeError', 'Error parsing message', 'Could not parse',
                'label value', 'Invalid argument: Key: ', 'Name: <unknown>')


def _read_round(process, state, ids, round_number, database):
  """`process.next(state, ids)`; an error reading the cohort's examples is
  one line naming the round, its clients and the database."""
  try:
    return process.next(state, ids)
  except Exception as e:  # pylint: disable=broad-except  # data errors reworded, the rest re-raised
    text = str(e)
    found = next((m for m in _DATA_ERRORS if m in text), None)
    if found is None:
      raise
    excerpt = ' '.join(text[text.index(found):].split())[:160]
    shown = ', '.join(ids[:5]) + (', ...' if len(ids) > 5 else '')
    raise databases.DatabaseError(
        f'round {round_number}: the examples of its clients ({shown}) '
        f'cannot be read ({excerpt}); {database} has a damaged row or a '
        'value outside the task\'s range.') from None


def cohort_seed(config: TrainConfig) -> int:
  """The seed of the run's cohorts: --cohort-seed if given, else 128 bits
  of OS entropy drawn when the run starts and kept in the output directory
  (the server's file), so that a resumed run draws the same cohorts and
  the cohorts stay secret from readers of the release, whom the
  amplification by sampling of eps(release) assumes do not know them."""
  if config.cohort_seed is not None:
    return config.cohort_seed
  path = os.path.join(config.output_dir, COHORT_SEED_FILE)
  if not os.path.isfile(path):
    if config.resume:
      raise ValueError(f'--resume: {path} is missing (the run\'s secret '
                       'cohort seed); the run cannot draw its cohorts again.')
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, 'w') as f:
      f.write(f'{secrets.randbits(128)}\n')
  with open(path, encoding='utf-8') as f:
    return int(f.read())


def cohort(client_ids, size, seed, round_number) -> List[str]:
  """Round `round_number`'s cohort: `size` of the clients uniformly without
  replacement, from a generator seeded by (seed, round) (a resumed run
  draws the same cohorts)."""
  import numpy as np
  rng = np.random.default_rng([seed, 0, round_number])
  return [
      client_ids[i]
      for i in sorted(rng.choice(len(client_ids), size, replace=False))
  ]


def _header(setup: Setup, dimension: int) -> dict:
  """What metrics.json says about its numbers."""
  vocabulary = setup.data.vocabulary
  return dict(task=setup.task.name,
              mechanism=setup.mechanism.name,
              population=setup.data.population,
              clients_per_round=(setup.config.clients_per_round),
              dimension=dimension,
              delta=setup.delta,
              database=setup.data.database,
              vocabulary_source=vocabulary and vocabulary.source,
              accuracy=setup.task.metric,
              epsilon_server=setup.mechanism.notes['server'],
              epsilon_release=setup.mechanism.notes['release'])


def _print_header(print_fn, setup: Setup, dimension: int):
  config, data = setup.config, setup.data
  padded = 1 << max(dimension - 1, 0).bit_length()
  q = config.clients_per_round / data.population
  print_fn(f'tff-ddp train: {setup.task.title}, DP-FedAvg '
           f'(Kairouz, Liu & Steinke 2021, Section 6.2)')
  print_fn(f'data: {data.database} (TFF\'s loader): N = {data.population} '
           'training clients')
  if data.population > _INDEX_HINT_CLIENTS and not databases.has_client_index(
      data.database):
    print_fn('note: the database has no index on examples(client_id), so '
             'each client read scans the whole table; this makes it: ' +
             databases.index_hint(data.database))
  if data.vocabulary is not None:
    print_fn(data.vocabulary.source + '.')
  print_fn(f'model: d = {dimension:,} parameters (Hadamard padding to '
           f'2^{padded.bit_length() - 1} = {padded:,})')
  print_fn(f'setting: {config.rounds} rounds of n = '
           f'{config.clients_per_round} clients drawn uniformly without '
           f'replacement (q = n/N = {q:.4g}), {config.client_epochs} local '
           f'epoch(s), batch {config.client_batch_size}, client LR '
           f'{config.client_learning_rate:g}, server LR '
           f'{config.server_learning_rate:g} with momentum '
           f'{config.server_momentum:g}, clients weighted uniformly')
  print_fn(f'mechanism: {setup.mechanism.describe(config)}')
  if config.target_epsilon is not None:
    print_fn(f'noise: z = {config.noise_multiplier:.4g} calibrated so that '
             f'{config.rounds if setup.saved is None else "the first"} '
             f'rounds are ({config.target_epsilon:g}, {setup.delta:.3g})-DP '
             f'against the {config.calibrate_against}' +
             (' (the run\'s calibration, kept on resume)' if setup.
              saved is not None else '') +
             (_calibration_bound(setup.calibration, setup.delta) if setup.
              calibration is not None else ''))
  print_fn('client metrics: withheld (no exact client value reaches the '
           'server)')
  if config.cohort_seed is not None:
    print_fn(f'cohorts: drawn from --cohort-seed {config.cohort_seed}: '
             'reproducible, and known to whoever knows the seed; '
             'eps(release)\'s amplification by sampling holds only against '
             'readers who do not.')
  if setup.delta_warning:
    print_fn(f'warning: {setup.delta_warning}')
  print_fn(f'delta = {setup.delta:.3g}' +
           ('' if config.
            delta is not None else f' ({deltas.RULE}, N = {data.population})') +
           f'; accuracy: {setup.task.metric}, every '
           f'{config.eval_every or "-"} round(s) and the last')


def _calibration_bound(result, delta) -> str:
  """'; calibrated epsilon 9.998, zero-out neighbours, bound: ...'."""
  from tff_ddp.accounting import accountant
  from tff_ddp.accounting import pld_accountant
  return (f'; its epsilon {result.epsilon:.6g} at delta {delta:.3g}, '
          f'{accountant.describe_relation(result.neighboring_relation)} '
          f'neighbours, bound: {pld_accountant.bound_label(result.order)} '
          '(the tightest accountant)')


def _print_footer(print_fn, setup: Setup, ledger):
  chosen = setup.mechanism
  print_fn(chosen.notes['server'])
  print_fn(chosen.notes['release'])
  if chosen.private['release']:
    print_fn(f'Neighbours: {ledger.relation()} (one client\'s examples '
             f'removed: it still {chosen.empty_client}); each round: '
             f'{chosen.theorem}, with the event its metrics report; every '
             f'round run accounted; delta = {setup.delta:.3g}.')
  print_fn('accuracy: measured by the simulation on held-out test examples; '
           'not released by the protocol, not covered by epsilon.')
  out = setup.config.output_dir
  print_fn(f'metrics: {os.path.join(out, METRICS_CSV)}, {METRICS_JSON}, '
           f'{EVENTS_FILE}; checkpoints in {os.path.join(out, CHECKPOINTS)} '
           '(--resume).')
