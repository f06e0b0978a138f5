"""Figure 2 of the DDG paper at a scale that runs here: bits vs accuracy, eps.

Kairouz, Liu & Steinke (2021), Figure 2: DP-FedAvg's test accuracy on
EMNIST for the distributed discrete Gaussian at B in {12, ..., 20} bits and
the central Gaussian, each calibrated to the same epsilon. Its shape: with
enough bits the DDG matches the Gaussian; at low bits the conditional
rounding inflates the DDG's sensitivity (Theorem 5's gamma^2 d / 4 term,
gamma ~ 2 k z c / 2^B), so the same epsilon needs more noise and accuracy
drops.

Here, at two noise levels z instead of two epsilons (the same comparison
read the other way: at equal noise the rounding shows in epsilon): `tff-ddp
train`'s own `tff_ddp.experiments.training.run` on a generated EMNIST database
in TFF's format (`clients` writers of `examples` examples, TFF's loader),
the paper's ConvNet (d = 1,018,174, padded to 2^20), n = `per_round`
clients per round drawn without replacement, `rounds` rounds; accuracy on
the test split after the last round, epsilon against the release (the
paper's kind, amplified by sampling) and the server (not amplified; inf
for the central Gaussian, which the server adds), delta = 1/N, and
seconds per round. A 'none' row (no noise) shows what the scale learns.
Every run draws the same cohorts (`--cohort-seed`: the comparison's
control; a run meant to be private keeps its cohort seed secret).

What differs from the paper, to learn faster: clip 0.3 and client
learning rate 0.1 (the paper: 0.03 and 0.032 over 1500 rounds of 100
clients of ~200 examples). At n = 20 the noise an informative epsilon
needs swamps the mean update (its norm z c sqrt(d) / n against at most c),
so the noise levels are small and the epsilons large. Even so, 15 rounds
(the recorded run, ~29 minutes at load 17) leave every model, the no-DP
one included, near chance: at this scale the comparison is in epsilon,
and the accuracy gap of the paper's Figure 2 needs its scale.

  .venv/bin/python benchmarks/train_figure2.py
"""

import shutil
import tempfile

import _harness as harness

from tff_ddp.experiments import generated_databases
from tff_ddp.experiments import training


def _row(name, bits, z, folder, common):
  config = training.TrainConfig(task='emnist',
                                mechanism=name,
                                data_dir=folder,
                                output_dir=tempfile.mkdtemp(dir=folder),
                                noise_multiplier=z,
                                bits=bits or 16,
                                **common)
  row = dict(mechanism=name, bits=bits, z=z)
  try:
    summary = training.run(config, print_fn=lambda line: None)
  except ValueError as e:
    return dict(row, note=str(e).split('. ', maxsplit=1)[0])
  return dict(row,
              accuracy=summary.accuracy,
              eps_server=summary.epsilon_server,
              eps_release=summary.epsilon_release,
              seconds=summary.seconds_per_round)


def run(clients=100,
        examples=40,
        per_round=20,
        rounds=30,
        bits=(12, 16, 20),
        noise_multipliers=(0.1, 0.3),
        clip=0.3,
        client_lr=0.1,
        seed=0):
  """One row per (noise level, mechanism, bits), plus 'none'."""
  if per_round > clients or rounds < 1:
    raise harness.UsageError('--per-round <= --clients, --rounds >= 1')
  folder = tempfile.mkdtemp(prefix='train_figure2_')
  try:
    return _measure(clients, examples, per_round, rounds, bits,
                    noise_multipliers, clip, client_lr, seed, folder)
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def _measure(clients, examples, per_round, rounds, bits, noise_multipliers,
             clip, client_lr, seed, folder):
  """`run` in `folder` (deleted after)."""
  generated_databases.write_emnist(folder, clients, examples,
                                   max(1, examples // 4), seed)
  common = dict(rounds=rounds,
                clients_per_round=per_round,
                clip=clip,
                client_learning_rate=client_lr,
                eval_every=rounds,
                checkpoint_every=rounds,
                seed=seed,
                cohort_seed=seed)
  rows = [_row('none', None, None, folder, common)]
  for z in noise_multipliers:
    rows.append(_row('gaussian', None, z, folder, common))
    for b in bits:
      rows.append(_row('ddg', b, z, folder, common))
  return harness.Table(
      [('z', 'z', 'g'), ('mechanism', 'mechanism', 's'), ('bits', 'bits', 'd'),
       ('accuracy', 'accuracy', '.3f'), ('eps_release', 'eps release', '.4g'),
       ('eps_server', 'eps server', '.4g'), ('seconds', 's/round', '.2f'),
       ('note', 'note', 's')],
      rows,
      title=(f'EMNIST (generated, TFF format): N = {clients} writers x '
             f'{examples} examples, n = {per_round} per round, {rounds} '
             f'rounds, clip {clip:g}, client LR {client_lr:g}, server LR 1 '
             f'momentum 0.9, delta = 1/N; accuracy after round {rounds}'),
      notes=[
          'eps release: cohorts secret, amplified by sampling (the '
          "paper's kind); eps server: the server draws the cohorts (no "
          'amplification), inf for the central Gaussian, which it adds'
      ])


if __name__ == '__main__':
  harness.main(run,
               __doc__,
               tff=True,
               clients='N, writers in the database',
               examples='training examples per writer',
               per_round='n',
               rounds='T',
               bits='DDG bit widths',
               noise_multipliers='noise levels z',
               clip='c',
               client_lr='client learning rate',
               seed='data, cohorts, model initialization')
