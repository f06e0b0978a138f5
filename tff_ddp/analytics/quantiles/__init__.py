"""Federated quantiles with distributed DP, one concept per module.

- `encodings`: the histogram encodings (`Encoding`: `Flat`, `Tree`,
  `Haar`), bins, and the CDF and quantile read-outs;
- `calibration`: the aggregator behind a quantile process for a budget
  (`QuantileSetting`, `QuantileParameters` with its `DdgNoise` or
  `CpbmNoise`; the ring and its scaling);
- `process`: the TFF MeasuredProcess (`build_quantile_process`,
  `QuantileEstimation`, the estimators and statuses);
- `rounds`: the same round over many clients in batches, without TFF's
  per-client calls (distribution-exact);
- `simulation`: a fast, distribution-exact sample of one round's noisy
  sum, for sweeps.
"""

from tff_ddp.analytics.quantiles.calibration import CpbmNoise
from tff_ddp.analytics.quantiles.calibration import DdgNoise
from tff_ddp.analytics.quantiles.calibration import parameters_for_noise
from tff_ddp.analytics.quantiles.calibration import quantile_parameters
from tff_ddp.analytics.quantiles.calibration import QuantileParameters
from tff_ddp.analytics.quantiles.calibration import QuantileSetting
from tff_ddp.analytics.quantiles.process import build_quantile_process
from tff_ddp.analytics.quantiles.process import build_quantile_process_from_parameters
from tff_ddp.analytics.quantiles.process import QuantileEstimation
