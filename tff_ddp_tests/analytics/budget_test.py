"""A frequency budget that theta's cap leaves unspent is said.

With theta at most 1/4, 'fixed' and 'normalize' at m = 30, 100 clients and
d = 20 spend epsilon 1.86 of an epsilon of 4. Checked: the warning names
what was spent and asked, and offers the calibration of the trials at
theta = 1/4, which does spend the budget (recomputed here); the parameters
returned are the same as without the check; a budget that is spent (epsilon
0.5, theta calibrated below 1/4) gives no warning. 100 clients, not more:
the warning does not depend on the number, and each theta a calibration
visits costs the l2-aware constants at that number (~1.5 s at 100 clients,
12-24 s at 500).
"""

import warnings

from absl.testing import parameterized
import pytest

from tff_ddp.analytics import budget
from tff_ddp.analytics.frequency import process as fp
from tff_ddp.analytics.frequency import setting as setting_lib

_ARGS = dict(dim=20, expected_clients_per_round=100, delta=1e-5)
_PROTOCOLS = (('fixed', dict(clip=10.0)), ('normalize', {}))


def _calibrate(protocol, epsilon, **kwargs):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    params = fp.frequency_parameters(protocol,
                                     epsilon=epsilon,
                                     **_ARGS,
                                     **kwargs)
  return params, [
      w.message
      for w in caught
      if isinstance(w.message, budget.UnderspentBudgetWarning)
  ]


# Each theta grid point a cPBM calibration visits computes the l2-aware RDP
# bound's constants (tff_ddp.accounting.pbm_rdp.kappa), then cached.
@pytest.mark.slow
class UnderspentBudgetTest(parameterized.TestCase):

  @parameterized.parameters(*_PROTOCOLS)
  def test_capped_theta_warns_and_offers_the_trials_that_spend_it(
      self, protocol, kwargs):
    params, caught = _calibrate(protocol, 4.0, **kwargs)
    self.assertEqual(params.theta, 0.25)
    self.assertLess(params.epsilon, 0.5 * 4.0)
    self.assertLen(caught, 1)
    warning = caught[0]
    self.assertEqual((warning.protocol, warning.target), (protocol, 4.0))
    self.assertEqual(warning.spent, params.epsilon)
    text = str(warning)
    self.assertIn(f'spends epsilon={params.epsilon:.4g} of the epsilon=4', text)
    self.assertIn("calibrate='num_trials', theta=0.25", text)
    self.assertIn(f'num_trials={warning.offer.num_trials}', text)
    # The offer is what the user would get by following it, and it spends
    # the budget (within the integer step of m).
    offered, again = _calibrate(protocol,
                                4.0,
                                calibrate='num_trials',
                                theta=0.25,
                                **kwargs)
    self.assertEqual(again, [])
    self.assertEqual(offered.num_trials, warning.offer.num_trials)
    self.assertGreater(offered.num_trials, params.num_trials)
    self.assertBetween(offered.epsilon, budget.SPENT_FRACTION * 4.0, 4.0)
    # Nothing else changes: the result is the protocol's own calibration's.
    setting = setting_lib.FrequencySetting(epsilon=4.0, **_ARGS)
    plain = setting_lib.protocol_class(protocol).calibrate(setting, **kwargs)
    self.assertEqual((plain.theta, plain.num_trials, plain.epsilon),
                     (params.theta, params.num_trials, params.epsilon))

  @parameterized.parameters(*_PROTOCOLS)
  def test_a_spent_budget_says_nothing(self, protocol, kwargs):
    params, caught = _calibrate(protocol, 0.5, **kwargs)
    self.assertLess(params.theta, 0.25)
    self.assertGreaterEqual(params.epsilon, budget.SPENT_FRACTION * 0.5)
    self.assertEqual(caught, [])
