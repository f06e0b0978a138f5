"""Federated frequency estimation with a privately chosen clip (TFFE, MFFE,
the baselines): the public names; docs/notes/frequency_protocols.md."""

from tff_ddp.analytics.frequency.process import build_frequency_process
from tff_ddp.analytics.frequency.process import build_frequency_process_from_parameters
from tff_ddp.analytics.frequency.process import frequency_parameters
from tff_ddp.analytics.frequency.process import FrequencyParameters
from tff_ddp.analytics.frequency.setting import CalibrateNumTrials
from tff_ddp.analytics.frequency.setting import CalibrateTheta
from tff_ddp.analytics.frequency.setting import FrequencySetting
from tff_ddp.analytics.frequency.single_release import FixedClipParameters
from tff_ddp.analytics.frequency.multi_round import MultiRoundParameters
from tff_ddp.analytics.frequency.single_release import NormalizeParameters
from tff_ddp.analytics.frequency.single_release import SampleParameters
from tff_ddp.analytics.frequency.two_phase import TwoPhaseParameters
