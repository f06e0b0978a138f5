"""Fuzz tests of the mechanisms: the entry points of
`mechanisms_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.mechanisms_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzMechanismsTest, SlowFuzzMechanismsTest = fz.test_classes(
    'Mechanisms', ENTRY_POINTS, __name__)
