"""Encoders that flatten client vectors before discretization."""
from tff_ddp.encoders.base import Encoder
from tff_ddp.encoders.dft import RandomizedDft
from tff_ddp.encoders.hadamard import RandomizedHadamard
from tff_ddp.encoders.kashin import KashinEncoder
from tff_ddp.encoders.registry import Identity
from tff_ddp.encoders.registry import make_encoder
