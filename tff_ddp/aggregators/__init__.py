"""TFF aggregation factories with distributed DP and secure aggregation."""
from tff_ddp.aggregators.discrete_gaussian import DiscreteGaussianSumFactory
