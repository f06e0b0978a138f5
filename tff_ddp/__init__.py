"""tff_ddp: distributed differential privacy with secure aggregation for TFF."""

__version__ = '0.1.0'
