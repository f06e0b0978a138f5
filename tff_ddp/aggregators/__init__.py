"""TFF aggregation factories for distributed DP with secure aggregation."""
from tff_ddp.utils import requires

requires.require_tff('tff_ddp.aggregators')

# pylint: disable=wrong-import-position  # after require_tff's clear error
from tff_ddp.aggregators import calibrated
from tff_ddp.aggregators.adaptive_clip import AdaptiveClipping
from tff_ddp.aggregators.discrete_gaussian import DiscreteGaussianSumFactory
from tff_ddp.aggregators.discrete_gaussian import Request
from tff_ddp.aggregators.discrete_gaussian import SkellamSumFactory
from tff_ddp.aggregators.poisson_binomial import PoissonBinomialSumFactory
from tff_ddp.aggregators.secure_sum import MechanismSumFactory
