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

`warn_if_underspent` wraps the public calibration (`frequency_parameters`)
so that such a result comes with an `UnderspentBudgetWarning` naming what
was spent, what was asked, and the calibration that spends it (computed,
with its m and epsilon). Nothing changes in the result: a user who wants
the extra privacy keeps it.
"""

import functools
import inspect
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

  def __init__(self, message, protocol=None, spent=None, target=None,
               num_trials=None, offer=None):
    super().__init__(message)
    self.protocol, self.spent, self.target = protocol, spent, target
    self.num_trials, self.offer = num_trials, offer


def _spending_calibration(calibrate_fn, bound, epsilon):
  """The parameters of the trials calibrated at theta = 1/4 for the same
  call, or None when that cannot be calibrated or spends no more."""
  call = dict(bound.arguments)
  call.update(call.pop('options', None) or {})
  call.update(calibrate='num_trials', theta=MAX_THETA)
  call.pop('num_trials', None)
  try:
    params = calibrate_fn(**call)
  except (TypeError, ValueError):
    return None
  return params if params.epsilon > epsilon else None


def warn_if_underspent(calibrate_fn):
  """Wraps a frequency calibration `f(protocol, dim,
  expected_clients_per_round, epsilon, delta, **options)` returning
  parameters with `.epsilon`, `.theta`, `.num_trials` (module docstring)."""
  signature = inspect.signature(calibrate_fn)

  @functools.wraps(calibrate_fn)
  def calibrate(*args, **kwargs):
    params = calibrate_fn(*args, **kwargs)
    bound = signature.bind(*args, **kwargs)
    target = float(bound.arguments['epsilon'])
    spent = float(params.epsilon)
    if not spent < SPENT_FRACTION * target:
      return params
    calibrated_theta = bound.arguments.get(
        'calibrate', bound.arguments.get('options', {}).get(
            'calibrate', 'theta')) == 'theta'
    name = calibrate_fn.__name__
    protocol = bound.arguments['protocol']
    if calibrated_theta and params.theta >= MAX_THETA:
      reason = (f'theta is at its largest, {MAX_THETA} (with '
                f'num_trials={params.num_trials}), so this run spends '
                f'epsilon={spent:.4g} of the epsilon={target:g} given')
    else:
      reason = (f'this run spends epsilon={spent:.4g} of the '
                f'epsilon={target:g} given')
    offer = None
    if calibrated_theta:
      offer = _spending_calibration(calibrate_fn, bound, spent)
    if offer is not None:
      advice = (f"calibrate='num_trials', theta={MAX_THETA} spends "
                f'epsilon={offer.epsilon:.4g} with '
                f'num_trials={offer.num_trials} (less noise); keep this '
                'result if the extra privacy is wanted.')
    else:
      advice = ('no calibration of these parameters spends more; more '
                'clients per round would.')
    warnings.warn(UnderspentBudgetWarning(
        f'{name}({protocol!r}, ...): {reason} (at delta='
        f'{bound.arguments["delta"]:g}, against the '
        f'{params.adversary}): it adds more noise than the budget needs. '
        f'{advice}', protocol=protocol, spent=spent, target=target,
        num_trials=params.num_trials, offer=offer), stacklevel=2)
    return params

  return calibrate
