"""Fuzz tests of the encoders: the entry points of `encoders_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.encoders_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzEncodersTest, SlowFuzzEncodersTest = fz.test_classes(
    'Encoders', ENTRY_POINTS, __name__)
