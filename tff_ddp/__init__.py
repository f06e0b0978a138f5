"""tff_ddp: distributed differential privacy with secure aggregation for TFF.

Subpackages load on first use (TFF's own convention), so
`import tff_ddp; tff_ddp.aggregators.Request(...)` works
without importing them one by one, and `import tff_ddp` alone stays fast:

  tff_ddp.aggregators  TFF aggregation factories (DDG, cPBM), calibrated ones
  tff_ddp.accounting   DP events, RDP curves, the accountant, calibration
  tff_ddp.analytics    federated quantiles, frequency estimation
  tff_ddp.learning     Delta-FL / DP-Delta-FL and baselines (tff.learning)
  tff_ddp.experiments  the paper's runs on it (`tff-ddp train`)
  tff_ddp.queries      the mechanisms as TF Privacy DPQueries
  tff_ddp.audit        empirical lower bounds on a round's epsilon
  tff_ddp.mechanisms   the mechanisms' math and the exact samplers
  tff_ddp.encoders     randomized Hadamard, Kashin
  tff_ddp.utils        argument checks, entropy, ending TFF workers
"""

import importlib

__version__ = '0.2.0'
_SUBPACKAGES = ('accounting', 'aggregators', 'analytics', 'audit', 'cli',
                'encoders', 'experiments', 'learning', 'mechanisms', 'queries',
                'utils')


def __getattr__(name):
  if name in _SUBPACKAGES:
    return importlib.import_module(f'tff_ddp.{name}')
  raise AttributeError(f'module tff_ddp has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_SUBPACKAGES))
