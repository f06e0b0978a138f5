"""Federated analytics with distributed DP: quantiles from histograms, and
frequency estimation with a privately chosen clip (TFFE, MFFE)."""

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.analytics')

# pylint: disable=wrong-import-position  # after require_tff's clear error
from tff_ddp.analytics.frequency import build_frequency_process
from tff_ddp.analytics.frequency import build_frequency_process_from_parameters
from tff_ddp.analytics.frequency import frequency_parameters
from tff_ddp.analytics.frequency import FrequencyParameters
from tff_ddp.analytics.frequency import CalibrateNumTrials
from tff_ddp.analytics.frequency import CalibrateTheta
from tff_ddp.analytics.frequency import FixedClipParameters
from tff_ddp.analytics.frequency import FrequencySetting
from tff_ddp.analytics.frequency import MultiRoundParameters
from tff_ddp.analytics.frequency import NormalizeParameters
from tff_ddp.analytics.frequency import SampleParameters
from tff_ddp.analytics.frequency import TwoPhaseParameters
from tff_ddp.analytics.quantiles import build_quantile_process
from tff_ddp.analytics.quantiles import build_quantile_process_from_parameters
from tff_ddp.analytics.quantiles import CpbmNoise
from tff_ddp.analytics.quantiles import DdgNoise
from tff_ddp.analytics.quantiles import parameters_for_noise
from tff_ddp.analytics.quantiles import quantile_parameters
from tff_ddp.analytics.quantiles import QuantileEstimation
from tff_ddp.analytics.quantiles import QuantileParameters
from tff_ddp.analytics.quantiles import QuantileSetting
