"""Fuzz tests of federated frequency estimation: the entry points of
`frequency_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.frequency_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzFrequencyTest, SlowFuzzFrequencyTest = fz.test_classes(
    'Frequency', ENTRY_POINTS, __name__)
