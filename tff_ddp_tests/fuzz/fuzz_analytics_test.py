"""Fuzz tests of the analytics: the entry points of `analytics_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.analytics_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzAnalyticsTest, SlowFuzzAnalyticsTest = fz.test_classes(
    'Analytics', ENTRY_POINTS, __name__)
