"""Fuzz tests of the tff-ddp command: the entry points of `cli_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.cli_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzCliTest, SlowFuzzCliTest = fz.test_classes('Cli', ENTRY_POINTS, __name__)
