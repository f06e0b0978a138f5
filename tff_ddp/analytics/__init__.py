"""Federated analytics with distributed DP: quantiles from histograms."""

from tff_ddp.analytics.quantile_calibration import quantile_parameters
from tff_ddp.analytics.quantile_calibration import QuantileParameters
from tff_ddp.analytics.quantiles import build_quantile_process
