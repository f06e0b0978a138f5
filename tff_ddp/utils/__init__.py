"""Utilities: argument checks, entropy for noise seeds, TFF worker clean-up."""
from tff_ddp.utils import checks
from tff_ddp.utils import processes
