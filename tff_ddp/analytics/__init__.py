"""Federated analytics with distributed DP: quantiles from histograms."""
