"""Tail-robust federated learning (Delta-FL) with distributed DP, and baselines.

  build_superquantile_fl  Delta-FL; with `privacy=` DP-Delta-FL (Algorithm 4
                          of the federated DP quantiles paper, corrected)
  build_dp_fedavg         DP-FedAvg on the same aggregator and accountant
  ddp_secure_aggregator   TFF's DP-FedAvg model_aggregator (zeroing, adaptive
                          clip, DDG sum, mean), private and accounted
  as_uniform_weighted_aggregator  it for TFF's weighted builders, weights
                          ignored on purpose
  withhold_metrics, noised_metrics  TFF's metrics_aggregator: client
                          metrics withheld, or noised and accounted
  round_dp_event          the event of everything a learning round released
  build_baseline          non-private FedAvg, FedAvg-Sub, FedProx, q-FFL,
                          Tilted-ERM, Delta-FL (Algorithm 3)
  PrivacyConfig, calibrate  the DP configuration and its calibration to a
                          target (epsilon, delta) over T rounds
  final_epsilon           a run's epsilon by the tightest accountant, from
                          its rounds' events (the metrics' is RDP)
  tasks                   the B.3 task, the digits task, evaluation
  weighting               the client weightings' math (numpy references)

`tff-ddp train`, the paper's application on it: `tff_ddp.experiments`.
"""

import importlib

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.learning')

# Public names -> their modules. Loaded on first use (as `tff_ddp` loads its
# subpackages), so that `tff-ddp train` checks a database, a file or a flag
# before TensorFlow and TFF are imported (seconds, not a one-line error
# after ~12 s).
_NAMES = {
    'as_uniform_weighted_aggregator': 'aggregator',
    'ddp_secure_aggregator': 'aggregator',
    'noised_metrics': 'metrics',
    'round_dp_event': 'metrics',
    'withhold_metrics': 'metrics',
    'calibrate': 'privacy',
    'CalibratedPrivacy': 'privacy',
    'final_epsilon': 'privacy',
    'PrivacyConfig': 'privacy',
    'build_baseline': 'processes',
    'build_dp_fedavg': 'processes',
    'build_superquantile_fl': 'processes',
}
# The modules the package loaded eagerly before (`tff_ddp.learning.tasks`
# works without importing it); the others are imported by name (`from
# tff_ddp.learning import simulation`).
_MODULES = ('aggregator', 'metrics', 'privacy', 'processes', 'tasks',
            'weighting')


def __getattr__(name):
  module = _NAMES.get(name, name)
  if module in _MODULES:
    loaded = importlib.import_module(f'tff_ddp.learning.{module}')
    return loaded if module == name else getattr(loaded, name)
  raise AttributeError(f'module tff_ddp.learning has no attribute {name!r}')


def __dir__():
  return sorted(set(globals()) | set(_NAMES) | set(_MODULES))
