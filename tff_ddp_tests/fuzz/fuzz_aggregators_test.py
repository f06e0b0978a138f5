"""Fuzz tests of the aggregation factories: the entry points of
`aggregators_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.aggregators_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzAggregatorsTest, SlowFuzzAggregatorsTest = fz.test_classes(
    'Aggregators', ENTRY_POINTS, __name__)
