"""Federated analytics with distributed DP: quantiles from histograms."""

from tff_ddp.analytics.quantiles import build_quantile_process
from tff_ddp.analytics.quantiles import quantile_parameters
from tff_ddp.analytics.quantiles import QuantileParameters
