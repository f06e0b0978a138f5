"""Fuzz tests of Delta-FL learning: the entry points of
`learning_entry_points`."""

from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.learning_entry_points import ENTRY_POINTS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzLearningTest, SlowFuzzLearningTest = fz.test_classes(
    'Learning', ENTRY_POINTS, __name__)
