"""Privacy accounting for the mechanisms of tff_ddp."""
from tff_ddp.accounting.events import DistributedDiscreteGaussianDpEvent
from tff_ddp.accounting.events import PoissonBinomialDpEvent
from tff_ddp.accounting import ddg
from tff_ddp.accounting import pbm
from tff_ddp.accounting import conversions
from tff_ddp.accounting import subsampling
from tff_ddp.accounting.accountant import RdpAccountant
from tff_ddp.accounting.calibration import calibrate
from tff_ddp.accounting.calibration import CalibrationResult
