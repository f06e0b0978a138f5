"""Privacy accounting for the mechanisms of tff_ddp.

Every epsilon names its adversary ('server' or 'release') and neighbouring
relation; see `tff_ddp.accounting.accountant`.
"""
from tff_ddp.accounting import conversions
from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import skellam_rdp
from tff_ddp.accounting import subsampling
from tff_ddp.accounting.accountant import ADVERSARIES
from tff_ddp.accounting.accountant import Adversary
from tff_ddp.accounting.pld_accountant import epsilon
from tff_ddp.accounting.accountant import RdpAccountant
from tff_ddp.accounting.calibration import calibrate
from tff_ddp.accounting.calibration import CalibrationResult
from tff_ddp.accounting.calibration import Parameter
from tff_ddp.accounting.event_io import extract_dp_event
from tff_ddp.accounting.events import DistributedDiscreteGaussianDpEvent
from tff_ddp.accounting.events import DistributedSkellamDpEvent
from tff_ddp.accounting.events import PoissonBinomialDpEvent
from tff_ddp.accounting.events import SelfSampledDpEvent
from tff_ddp.accounting.pld_accountant import PldAccountant
from tff_ddp.accounting.pld_accountant import tightest_epsilon
from tff_ddp.accounting.running import TabulatedAccountant
