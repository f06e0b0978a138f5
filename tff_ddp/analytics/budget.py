"""A budget a calibration cannot spend is said, with the one that spends it.

The frequency protocols calibrate the cPBM's theta for a given number of
trials m (`calibrate='theta'`, the default). theta is at most 1/4 (the
Bernoulli probabilities 1/2 + theta y/B must stay in [1/4, 3/4] for the
clip; the frequency paper's Algorithm 3), so for few clients or a large
budget the largest theta spends less than the epsilon asked for: 'fixed'
and 'normalize' with m = 30, 500 clients, d = 20 and epsilon 2 spend 0.76.
That run is private -- it is *more* private than asked -- but it adds more
noise than the budget requires, and nothing used to say so. Calibrating the
trials at theta = 1/4 instead (`calibrate='num_trials', theta=0.25`) spends
the budget (in integer steps of m), with less noise.

`frequency.process.frequency_parameters` calls `warn_if_underspent` on its
result, so that such a result comes with an `UnderspentBudgetWarning`
naming what was spent, what was asked, and the calibration that spends it
(computed, with its m and epsilon). Nothing changes in the result: a user
who wants the extra privacy keeps it.
"""

import warnings

# A calibration spends its budget when it reaches this fraction of it
# (theta and the trials are found by bisection / integer steps; what is
# said here is the 1/4 cap, not a rounding).
SPENT_FRACTION = 0.99
MAX_THETA = 0.25


class UnderspentBudgetWarning(UserWarning):
  """A calibration spends less epsilon than asked (module docstring).

  Attributes:
    protocol: the protocol calibrated.
    spent, target: the epsilon spent and the one asked for.
    num_trials: the trials of the result (theta at its cap of 1/4).
    offer: the parameters of the calibration that spends more
      (`calibrate='num_trials', theta=0.25`), or None.
  """

  def __init__(self,
               message,
               protocol=None,
               spent=None,
               target=None,
               num_trials=None,
               offer=None):
    super().__init__(message)
    self.protocol, self.spent, self.target = protocol, spent, target
    self.num_trials, self.offer = num_trials, offer


def _spending_calibration(offer, spent):
  """offer() -- the same call with the trials calibrated at theta = 1/4 --
  or None when that cannot be calibrated or spends no more."""
  try:
    params = offer()
  except (TypeError, ValueError):
    return None
  return params if params.epsilon > spent else None


def warn_if_underspent(params, setting, offer, owner: str) -> None:
  """Warns (`UnderspentBudgetWarning`) when `params`, calibrated for
  `setting` (a `frequency.setting.FrequencySetting`), spend less than
  SPENT_FRACTION of its epsilon.

  Args:
    params: the calibrated parameters (`.epsilon`, `.theta`,
      `.num_trials`, `.adversary`).
    setting: what they were calibrated for (`.epsilon`, `.delta`,
      `.calibration`).
    offer: () -> the parameters of the same call with the trials
      calibrated at theta = MAX_THETA; called only when `setting`'s
      calibration cannot spend the budget (its `spends_budget` is False).
    owner: how the message names the call, e.g.
      "frequency_parameters('fixed', ...)".
  """
  target, spent = float(setting.epsilon), float(params.epsilon)
  if not spent < SPENT_FRACTION * target:
    return
  capped = not setting.calibration.spends_budget
  if capped and params.theta >= MAX_THETA:
    reason = (f'theta is at its largest, {MAX_THETA} (with '
              f'num_trials={params.num_trials}), so this run spends '
              f'epsilon={spent:.4g} of the epsilon={target:g} given')
  else:
    reason = (f'this run spends epsilon={spent:.4g} of the '
              f'epsilon={target:g} given')
  better = _spending_calibration(offer, spent) if capped else None
  if better is not None:
    advice = (f"calibrate='num_trials', theta={MAX_THETA} spends "
              f'epsilon={better.epsilon:.4g} with '
              f'num_trials={better.num_trials} (less noise); keep this '
              'result if the extra privacy is wanted.')
  else:
    advice = ('no calibration of these parameters spends more; more '
              'clients per round would.')
  protocol = getattr(params, 'protocol', None)
  warnings.warn(UnderspentBudgetWarning(
      f'{owner}: {reason} (at delta={setting.delta:g}, against the '
      f'{params.adversary}): it adds more noise than the budget needs. '
      f'{advice}',
      protocol=protocol,
      spent=spent,
      target=target,
      num_trials=params.num_trials,
      offer=better),
                stacklevel=3)
