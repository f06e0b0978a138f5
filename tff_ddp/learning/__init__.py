"""Tail-robust federated learning (Delta-FL) with distributed DP, and baselines.

  build_superquantile_fl  Delta-FL; with `privacy=` DP-Delta-FL (Algorithm 4
                          of the federated DP quantiles paper, corrected)
  build_dp_fedavg         DP-FedAvg on the same aggregator and accountant
  ddp_secure_aggregator   TFF's DP-FedAvg model_aggregator (zeroing, adaptive
                          clip, DDG sum, mean), private and accounted
  withhold_metrics, noised_metrics  TFF's metrics_aggregator: client
                          metrics withheld, or noised and accounted
  round_dp_event          the event of everything a learning round released
  build_baseline          non-private FedAvg, FedAvg-Sub, FedProx, q-FFL,
                          Tilted-ERM, Delta-FL (Algorithm 3)
  PrivacyConfig, calibrate  the DP configuration and its calibration to a
                          target (epsilon, delta) over T rounds
  tasks                   the B.3 task, the digits task, evaluation
  weighting               the client weightings' math (numpy references)

`tff-ddp train` (DP-FedAvg on TFF's EMNIST / Stack Overflow loaders, the
DDG paper's Section 6.2), imported on use:
  training                the run: prepare, build_process, run
  paper_tasks             the tasks' models, defaults, data, vocabulary
  train_mechanisms        ddg / skellam / gaussian / none, per-adversary ledger
  databases               TFF's database files: where, schema, check
  generated_databases     small databases in TFF's format (tests, demos)
"""

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.learning')

from tff_ddp.learning import tasks
from tff_ddp.learning import weighting
from tff_ddp.learning.aggregator import ddp_secure_aggregator
from tff_ddp.learning.metrics import noised_metrics
from tff_ddp.learning.metrics import round_dp_event
from tff_ddp.learning.metrics import withhold_metrics
from tff_ddp.learning.privacy import calibrate
from tff_ddp.learning.privacy import CalibratedPrivacy
from tff_ddp.learning.privacy import PrivacyConfig
from tff_ddp.learning.processes import build_baseline
from tff_ddp.learning.processes import build_dp_fedavg
from tff_ddp.learning.processes import build_superquantile_fl
