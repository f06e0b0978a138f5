"""The fuzz classifier's time budget is CPU time, with a wall-clock limit
only for calls that wait: what `classify` reports for a call that spins, one
that waits past its budget but not for ever, and one that waits for ever.

Budgets of a tenth of a second keep this module at a few seconds.
"""

import time

from absl.testing import absltest

from tff_ddp_tests.fuzz import strategies as fz


def _entry(call, wait_budget=600.0):
  """An entry point of a 0.1 s CPU budget; `wait_budget` wall seconds."""
  return fz.EntryPoint(name='f',
                       call=call,
                       baseline={},
                       check=lambda kwargs, result: None,
                       budget=0.1,
                       wait_budget=wait_budget)


def _spin(seconds):
  end = time.process_time() + seconds
  while time.process_time() < end:
    pass
  return 'done'


class ClassifyTest(absltest.TestCase):

  def test_a_quick_call_is_documented(self):
    outcome = fz.classify(_entry(lambda: 'done'), {})
    self.assertEqual(outcome.kind, 'documented', msg=str(outcome))

  def test_cpu_over_the_budget_is_a_hang(self):
    # Measured, not interrupted: 0.3 s of CPU is over 0.1 but under the
    # timer's 2 * 0.1 + 1 s.
    outcome = fz.classify(_entry(lambda: _spin(0.3)), {})
    self.assertEqual(outcome.kind, 'hang', msg=str(outcome))
    self.assertGreaterEqual(outcome.seconds, 0.3)
    self.assertIn('CPU budget', outcome.detail)

  def test_a_spinning_call_is_interrupted(self):
    # A pure-Python loop that would run for a minute is stopped by the CPU
    # timer at 2 * budget + 1 = 1.2 s of CPU.
    start = time.process_time()
    outcome = fz.classify(_entry(lambda: _spin(60.0)), {})
    self.assertEqual(outcome.kind, 'hang', msg=str(outcome))
    # Under the loop's 60 s of CPU: it was stopped (CPU time, which other
    # work on the machine does not stretch).
    self.assertLess(time.process_time() - start, 60.0)

  def test_waiting_beyond_the_budget_is_not_a_hang(self):
    # 0.3 s of wall time with no CPU: over the 0.1 s budget (the old wall
    # budget called this a hang; so would a loaded machine), well under
    # the default wall limit of WALL_FACTOR budgets (no wait_budget).
    self.assertGreater(fz.WALL_FACTOR * 0.1, 0.3 * 6)
    outcome = fz.classify(
        _entry(lambda: time.sleep(0.3) or 'done', wait_budget=None), {})
    self.assertEqual(outcome.kind, 'documented', msg=str(outcome))

  def test_waiting_for_ever_is_a_hang(self):
    # time.sleep is interrupted by the wall timer at the 1 s wait budget;
    # under the sleep's 600 s means it was stopped, not finished.
    start = time.monotonic()
    outcome = fz.classify(_entry(lambda: time.sleep(600), wait_budget=1.0), {})
    self.assertEqual(outcome.kind, 'hang', msg=str(outcome))
    self.assertLess(time.monotonic() - start, 600.0)
