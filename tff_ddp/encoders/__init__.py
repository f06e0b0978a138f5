"""Encoders that flatten client vectors before discretization."""
from tff_ddp.encoders.hadamard import RandomizedHadamard
from tff_ddp.encoders.kashin import KashinEncoder
