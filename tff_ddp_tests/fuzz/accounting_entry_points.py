"""The fuzz entry points of the accounting: the accountant, the RDP curves,
subsampling, conversions, calibration and event extraction (see `strategies`).

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_accounting_test.py and a
row of bad_inputs.py.
"""

import math

import dp_accounting
from hypothesis import strategies as st
import numpy as np

from tff_ddp.accounting import accountant
from tff_ddp.accounting import calibration
from tff_ddp.accounting import conversions
from tff_ddp.accounting import ddg_rdp
from tff_ddp.accounting import event_io
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm_rdp
from tff_ddp.accounting import subsampling
from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg_mechanism
from tff_ddp_tests.fuzz import strategies as fz

NeighborRel = dp_accounting.NeighboringRelation
_ORDERS = [1.5, 2.0, 3.0, 8.0, 64.0]
_EVENT_NAMES = ('event', 'Event', 'noise_multiplier', 'l2_sensitivity',
                'local_stddev', 'num_clients', 'dimension', 'l1_sensitivity',
                'sampler_tv_distance', 'theta', 'num_trials',
                'replace_one_dimension', 'sampling_probability', 'sample_size',
                'population_size', 'count', 'target_delta', 'target_epsilon',
                'orders', 'adversary', 'neighboring_relation')
_UNSUPPORTED = (TypeError, ValueError, dp_accounting.UnsupportedEventError)


def _mixed(valid):
  """Mostly valid values, sometimes anything."""
  return st.one_of(valid, valid, fz.any_value())


_REALS = _mixed(st.floats(0.0, 1e6))
_COUNTS = _mixed(st.integers(1, 10**6))
_PROBABILITIES = _mixed(st.floats(0.0, 1.0))


def _leaf_events():
  return st.one_of(
      st.builds(dp_accounting.GaussianDpEvent, _mixed(st.floats(0.0, 100.0))),
      st.builds(events.DistributedDiscreteGaussianDpEvent,
                l2_sensitivity=_REALS,
                local_stddev=_REALS,
                num_clients=_COUNTS,
                dimension=_COUNTS,
                l1_sensitivity=st.one_of(st.none(), _REALS),
                sampler_tv_distance=st.one_of(st.none(), _PROBABILITIES)),
      st.builds(events.PoissonBinomialDpEvent,
                theta=_mixed(st.floats(0.0, 0.25)),
                num_trials=_COUNTS,
                num_clients=_mixed(st.integers(1, 10**5)),
                dimension=_COUNTS,
                replace_one_dimension=st.one_of(st.none(), _COUNTS)),
      st.just(dp_accounting.NoOpDpEvent()),
      st.just(dp_accounting.NonPrivateDpEvent()),
      st.builds(dp_accounting.LaplaceDpEvent, st.floats(0.1, 10.0)),
  )


def _wrap(inner):
  return st.one_of(
      st.builds(dp_accounting.PoissonSampledDpEvent, _PROBABILITIES, inner),
      st.builds(events.SelfSampledDpEvent, _PROBABILITIES, inner),
      st.builds(dp_accounting.SampledWithoutReplacementDpEvent,
                _mixed(st.integers(1, 1000)), _mixed(st.integers(0, 1000)),
                inner),
      st.builds(dp_accounting.SelfComposedDpEvent, inner,
                _mixed(st.integers(0, 10**6))),
      st.builds(dp_accounting.ComposedDpEvent, st.lists(inner, max_size=3)),
  )


def dp_events():
  return st.recursive(_leaf_events(), _wrap, max_leaves=3)


RELATIONS = st.sampled_from(list(NeighborRel))


def _check_accountant(kwargs, acc):
  if not isinstance(acc, accountant.RdpAccountant):
    return f'{type(acc).__name__}'
  orders = kwargs['orders']
  if orders is not None and len(acc.orders) != len(list(np.ravel(orders))):
    return f'orders {acc.orders} for {orders!r}'
  return None if acc.adversary in accountant.ADVERSARIES else 'adversary'


def _check_epsilon(_kwargs, result):
  eps, order = result
  return fz.first_error(
      fz.epsilon_ok(eps),
      None if math.isinf(eps) or order > 1 else f'order {order!r}')


def _compose(event, count, target_delta, adversary):
  acc = accountant.RdpAccountant(adversary=adversary)
  acc.compose(event, count)
  return acc, acc.get_epsilon(target_delta)


def _check_compose(kwargs, result):
  acc, eps = result
  if fz.epsilon_ok(eps):
    return fz.epsilon_ok(eps)
  # Twice the composition is never cheaper.
  more = accountant.RdpAccountant(adversary=kwargs['adversary'])
  more.compose(kwargs['event'], 2 * kwargs['count'])
  if more.get_epsilon(kwargs['target_delta']) < eps * (1 - 1e-9):
    return 'composing twice as many rounds lowered epsilon'
  del acc
  return None


def _composed_accountant(adversary='server'):
  acc = accountant.RdpAccountant(adversary=adversary)
  acc.compose(
      dp_accounting.PoissonSampledDpEvent(
          0.01,
          events.DistributedDiscreteGaussianDpEvent(
              10.0, 5.0, 100, 64, sampler_tv_distance=2.0**-108)), 100)
  return acc


_ACCOUNTANT = _composed_accountant()


def _check_get_epsilon(kwargs, eps):
  delta = float(kwargs['target_delta'])
  larger = min(0.5 * (delta + 1.0), 2 * delta)
  return fz.first_error(
      fz.epsilon_ok(eps), None if _ACCOUNTANT.get_epsilon(larger) <= eps else
      f'epsilon grows with delta ({larger})')


def _check_get_delta(kwargs, delta):
  eps = float(kwargs['target_epsilon'])
  return fz.first_error(
      fz.delta_ok(delta), None if _ACCOUNTANT.get_delta(eps + 1.0) <= delta else
      'delta grows with epsilon')


def _curve_checker(length_of=lambda kwargs: int(
    np.size(np.asarray(kwargs['orders'], dtype=object)))):

  def check(kwargs, curve):
    return fz.curve_ok(curve, length_of(kwargs))

  return check


def _gaussian_rdp(orders):
  return np.asarray(orders) / 2.0


def _check_subsampled(kwargs, curve):
  orders = np.reshape(np.asarray(kwargs['orders'], dtype=np.float64), [-1])
  return fz.first_error(
      fz.curve_ok(curve, len(orders)), None if np.all(
          curve <= _gaussian_rdp(orders) *
          (1 + 1e-9)) else 'subsampled curve above the unsampled one')


def _check_tau(kwargs, t):
  n = int(kwargs['num_clients'])
  if not (math.isfinite(t) and 0 <= t <= 10.0 * (n - 1) * (1 + 1e-12)):
    return f'tau {t!r} outside [0, 10 (n - 1)]'
  return None


def _check_rho(kwargs, rho):
  if not (fz.is_real(rho) and 0 <= rho < math.inf):
    return f'rho {rho!r}'
  back = conversions.zcdp_to_approx_dp(rho, kwargs['target_delta'])
  if back > float(kwargs['target_epsilon']) * (1 + 1e-6) + 1e-12:
    return f'rho {rho} gives epsilon {back} > the target'
  return None


def _check_calibrate(kwargs, result):
  if result.epsilon > float(kwargs['target_epsilon']) * (1 + 1e-9):
    return f'epsilon {result.epsilon} above the target'
  return fz.epsilon_ok(result.epsilon)


# One release per mechanism, x -> event, and the parameters searched:
# `calibrate` gets any pair (a mismatched one must still end in a result
# within the target or a clear error).
_RELEASES = {
    'gaussian': dp_accounting.GaussianDpEvent,
    'ddg': lambda s: ddg_mechanism.release_event(100.0, s, 10, 64),
    'skellam': lambda s: events.DistributedSkellamDpEvent(100.0, s * s, 10, 64),
    'cpbm theta': lambda t: events.PoissonBinomialDpEvent(t, 16, 10, 8),
    'cpbm trials': lambda m: events.PoissonBinomialDpEvent(0.1, m, 10, 8),
}
_NOISE_MULTIPLIER = calibration.Parameter.noise('noise_multiplier')
_PARAMETERS = {
    'noise_multiplier':
        _NOISE_MULTIPLIER,
    'local_stddev':
        calibration.Parameter.noise('local_stddev', 0.5),
    'theta':
        calibration.Parameter.signal('theta', 2.0**-40, 0.25),
    'num_trials':
        calibration.Parameter.signal('num_trials', 1, 2**31 - 1, discrete=True),
}


def _calibrate_rounds(make_event, rounds, sampling, rate, **kwargs):
  """`calibration.calibrate` over `rounds` sampled rounds of make_event(x),
  against the server."""
  if callable(make_event):
    one = make_event
    make_event = lambda x: calibration.rounds_event(one(x), rounds, sampling,
                                                    rate)
    calibration.rounds_event(dp_accounting.NoOpDpEvent(), rounds, sampling,
                             rate)  # argument errors now, as the callers do
  return calibration.calibrate(accountant.RdpAccountant, make_event, **kwargs)


def _check_event(_kwargs, event):
  if not isinstance(event, dp_accounting.DpEvent):
    return f'not a DpEvent: {event!r}'
  return None


def _curve_kwargs(event_cls, fields):

  def call(relation='zero_out', orders=tuple(_ORDERS), **kwargs):
    return fields(event_cls(**kwargs), orders, relation)

  return call


_DDG_FIELDS = dict(l2_sensitivity=10.0,
                   local_stddev=5.0,
                   num_clients=100,
                   dimension=64)
_PBM_FIELDS = dict(theta=0.1, num_trials=16, num_clients=100, dimension=64)
_MEASUREMENTS = st.recursive(
    st.one_of(
        fz.any_value(),
        st.builds(
            event_io.event_structure,
            _leaf_events().filter(
                lambda e: not isinstance(e, dp_accounting.LaplaceDpEvent)))),
    lambda inner: st.dictionaries(st.sampled_from(
        ['dp_event', 'module_name', 'class_name', 'a', 'noise_multiplier']),
                                  inner,
                                  max_size=3),
    max_leaves=4)

ENTRY_POINTS = [
    fz.EntryPoint(
        name='accounting.RdpAccountant',
        call=accountant.RdpAccountant,
        baseline=dict(orders=None,
                      neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE,
                      adversary='server'),
        check=_check_accountant,
        hints=dict(orders=st.lists(fz.floats(), max_size=4),
                   neighboring_relation=RELATIONS,
                   adversary=st.sampled_from(['server', 'release', 'both'])),
        examples=[('orders with inf', dict(orders=[2.0, math.inf]),
                   'clear_error'),
                  ('orders 1e9', dict(orders=[2.0, 1e9]), 'clear_error')]),
    fz.EntryPoint(
        name='accounting.epsilon',
        call=accountant.epsilon,
        baseline=dict(event=dp_accounting.GaussianDpEvent(1.0),
                      target_delta=1e-5,
                      adversary='server',
                      neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE,
                      orders=None),
        check=_check_epsilon,
        hints=dict(event=dp_events(),
                   target_delta=fz.floats(),
                   neighboring_relation=RELATIONS,
                   orders=st.lists(st.floats(1.0, 2.0**17), max_size=3)),
        names=_EVENT_NAMES,
        error_types=_UNSUPPORTED,
        max_examples=20,
        examples=[
            ('DDG 1e9 clients',
             dict(event=events.DistributedDiscreteGaussianDpEvent(
                 10.0, 10.0, 10**9, 100)), 'documented'),
            ('DDG 1e9 clients (float)',
             dict(event=events.DistributedDiscreteGaussianDpEvent(
                 10.0, 10.0, 1e9, 100)), 'clear_error'),
            ('cPBM 1e7 clients',
             dict(event=events.PoissonBinomialDpEvent(0.1, 16, 10**7, 100)),
             'documented'),
            ('cPBM theta 1e-300',
             dict(event=events.PoissonBinomialDpEvent(1e-300, 16, 10, 100)),
             'documented'),
            ('Gaussian nan',
             dict(event=dp_accounting.GaussianDpEvent(math.nan)),
             'clear_error'),
            ('Poisson rate nan',
             dict(event=dp_accounting.PoissonSampledDpEvent(
                 math.nan, dp_accounting.GaussianDpEvent(1.0))), 'clear_error'),
            ('count -3',
             dict(event=dp_accounting.SelfComposedDpEvent(
                 dp_accounting.GaussianDpEvent(1.0), -3)), 'clear_error'),
        ]),
    fz.EntryPoint(name='accounting.RdpAccountant.compose',
                  call=_compose,
                  baseline=dict(event=dp_accounting.GaussianDpEvent(1.0),
                                count=1,
                                target_delta=1e-5,
                                adversary='server'),
                  check=_check_compose,
                  hints=dict(event=dp_events(),
                             count=_mixed(st.integers(0, 10**9)),
                             adversary=st.sampled_from(['server', 'release'])),
                  fuzzed=('event', 'count'),
                  names=_EVENT_NAMES,
                  error_types=_UNSUPPORTED,
                  max_examples=20,
                  examples=[('count 2.5', dict(count=2.5), 'clear_error'),
                            ('event str', dict(event='x'), 'clear_error')]),
    fz.EntryPoint(
        name='accounting.RdpAccountant.get_epsilon',
        call=_ACCOUNTANT.get_epsilon,
        baseline=dict(target_delta=1e-5),
        check=_check_get_epsilon,
        hints=dict(target_delta=st.one_of(fz.floats(), st.floats(0.0, 1.0))),
        examples=[('nan', dict(target_delta=math.nan), 'clear_error')]),
    fz.EntryPoint(
        name='accounting.RdpAccountant.get_delta',
        call=_ACCOUNTANT.get_delta,
        baseline=dict(target_epsilon=1.0),
        check=_check_get_delta,
        hints=dict(target_epsilon=st.one_of(fz.floats(), st.floats(0.0, 1e3))),
        examples=[('nan', dict(target_epsilon=math.nan), 'clear_error'),
                  ('negative', dict(target_epsilon=-1.0), 'clear_error')]),
    fz.EntryPoint(name='accounting.ddg_rdp.rdp',
                  call=_curve_kwargs(events.DistributedDiscreteGaussianDpEvent,
                                     ddg_rdp.rdp),
                  baseline=dict(_DDG_FIELDS,
                                orders=_ORDERS,
                                relation='zero_out'),
                  check=_curve_checker(),
                  hints=dict(l2_sensitivity=fz.floats(),
                             local_stddev=fz.floats(),
                             num_clients=fz.ints(),
                             dimension=fz.ints(),
                             l1_sensitivity=fz.floats(),
                             sampler_tv_distance=fz.floats(),
                             orders=st.lists(fz.floats(), max_size=3),
                             relation=st.sampled_from(
                                 ['zero_out', 'replace_one', 'add_remove']))),
    fz.EntryPoint(name='accounting.ddg_rdp.tau',
                  call=ddg_rdp.tau,
                  baseline=dict(local_stddev=1.0, num_clients=100),
                  check=_check_tau,
                  hints=dict(local_stddev=fz.floats(), num_clients=fz.ints())),
    fz.EntryPoint(
        name='accounting.pbm_rdp.rdp',
        call=_curve_kwargs(events.PoissonBinomialDpEvent, pbm_rdp.rdp),
        baseline=dict(_PBM_FIELDS, orders=_ORDERS, relation='zero_out'),
        check=_curve_checker(),
        hints=dict(theta=fz.floats(),
                   num_trials=fz.ints(),
                   num_clients=st.one_of(st.integers(1, 10**6), fz.ints()),
                   dimension=fz.ints(),
                   replace_one_dimension=fz.ints(),
                   orders=st.lists(fz.floats(), max_size=3),
                   relation=st.sampled_from(['zero_out', 'replace_one'])),
        max_examples=20),
    fz.EntryPoint(name='accounting.pbm_rdp.per_trial_rdp',
                  call=pbm_rdp.per_trial_rdp,
                  baseline=dict(theta=0.1,
                                num_clients=100,
                                orders=_ORDERS,
                                relation='zero_out'),
                  check=_curve_checker(),
                  hints=dict(theta=fz.floats(),
                             num_clients=st.one_of(st.integers(1, 10**6),
                                                   fz.ints()),
                             orders=st.lists(fz.floats(), max_size=3)),
                  max_examples=20),
    fz.EntryPoint(
        name='accounting.subsampling.poisson_rdp',
        call=lambda **kw: subsampling.poisson_rdp(_gaussian_rdp, **kw),
        baseline=dict(sampling_probability=0.01, orders=_ORDERS),
        check=_check_subsampled,
        hints=dict(sampling_probability=st.one_of(fz.floats(),
                                                  st.floats(0.0, 1.0)),
                   orders=st.lists(st.floats(1.0, 64.0), max_size=3))),
    fz.EntryPoint(name='accounting.subsampling.without_replacement_rdp',
                  call=lambda **kw: subsampling.without_replacement_rdp(
                      _gaussian_rdp, **kw),
                  baseline=dict(sample_size=10,
                                population_size=1000,
                                orders=_ORDERS),
                  check=_check_subsampled,
                  hints=dict(sample_size=fz.ints(),
                             population_size=fz.ints(),
                             orders=st.lists(st.floats(1.0, 64.0),
                                             max_size=3))),
    fz.EntryPoint(
        name='accounting.subsampling.known_sample_rdp',
        call=lambda **kw: subsampling.known_sample_rdp(_gaussian_rdp, **kw),
        baseline=dict(sampling_probability=0.01, orders=_ORDERS),
        check=_check_subsampled,
        hints=dict(sampling_probability=st.one_of(fz.floats(),
                                                  st.floats(0.0, 1.0)),
                   orders=st.lists(fz.floats(), max_size=3))),
    fz.EntryPoint(name='accounting.conversions.rdp_to_epsilon',
                  call=conversions.rdp_to_epsilon,
                  baseline=dict(orders=[2.0, 8.0],
                                rdp=[0.1, 0.5],
                                target_delta=1e-5),
                  check=lambda kw, r: fz.epsilon_ok(r[0]),
                  hints=dict(rdp=st.lists(fz.floats(), min_size=2, max_size=2),
                             orders=st.lists(fz.floats(),
                                             min_size=2,
                                             max_size=2),
                             target_delta=fz.floats())),
    fz.EntryPoint(name='accounting.conversions.rdp_to_delta',
                  call=conversions.rdp_to_delta,
                  baseline=dict(orders=[2.0, 8.0],
                                rdp=[0.1, 0.5],
                                target_epsilon=1.0),
                  check=lambda kw, r: fz.delta_ok(r[0]),
                  hints=dict(rdp=st.lists(fz.floats(), min_size=2, max_size=2),
                             orders=st.lists(fz.floats(),
                                             min_size=2,
                                             max_size=2),
                             target_epsilon=fz.floats())),
    fz.EntryPoint(name='accounting.conversions.zcdp_to_approx_dp',
                  call=conversions.zcdp_to_approx_dp,
                  baseline=dict(rho=0.5, target_delta=1e-5),
                  check=lambda kw, eps: fz.epsilon_ok(eps),
                  hints=dict(rho=fz.floats(), target_delta=fz.floats())),
    fz.EntryPoint(name='accounting.conversions.zcdp_to_delta',
                  call=conversions.zcdp_to_delta,
                  baseline=dict(rho=0.5, target_epsilon=1.0),
                  check=lambda kw, d: fz.delta_ok(d),
                  hints=dict(rho=fz.floats(), target_epsilon=fz.floats())),
    fz.EntryPoint(name='accounting.conversions.approx_dp_to_zcdp',
                  call=conversions.approx_dp_to_zcdp,
                  baseline=dict(target_epsilon=1.0, target_delta=1e-5),
                  check=_check_rho,
                  hints=dict(target_epsilon=fz.floats(),
                             target_delta=fz.floats()),
                  examples=[('epsilon 1e300', dict(target_epsilon=1e300),
                             'documented'),
                            ('epsilon 5e-324', dict(target_epsilon=5e-324),
                             'documented')]),
    fz.EntryPoint(name='mechanisms.distributed_discrete_gaussian.release_event',
                  call=ddg_mechanism.release_event,
                  baseline=dict(l2_sensitivity=10.0,
                                local_stddev=5.0,
                                num_clients=10,
                                dimension=8),
                  check=_check_event,
                  hints=dict(l2_sensitivity=fz.floats(),
                             local_stddev=fz.floats(),
                             num_clients=fz.ints(),
                             dimension=fz.ints(),
                             l1_sensitivity=fz.floats(),
                             noise_sampler=st.sampled_from(
                                 ['table', 'exact', 'fast'])),
                  examples=[
                      ('below Theorem 9', dict(local_stddev=0.25),
                       'clear_error'),
                      ('unknown sampler', dict(noise_sampler='fast'),
                       'clear_error'),
                  ]),
    fz.EntryPoint(
        name='accounting.calibration.rounds_event',
        call=calibration.rounds_event,
        baseline=dict(
            event=dp_accounting.GaussianDpEvent(1.0),
            rounds=10,
            sampling='poisson',
            rate=0.01,
            sample_size=None,
            population=None),
        check=_check_event,
        hints=dict(
            rounds=fz.ints(),
            sampling=st.sampled_from(list(calibration.SAMPLINGS) + ['random']),
            rate=fz.floats(),
            sample_size=fz.ints(),
            population=fz.ints())),
    fz.EntryPoint(name='accounting.calibration.calibrate',
                  call=_calibrate_rounds,
                  baseline=dict(make_event=dp_accounting.GaussianDpEvent,
                                parameter=_NOISE_MULTIPLIER,
                                target_epsilon=1.0,
                                target_delta=1e-5,
                                rounds=1,
                                sampling='none',
                                rate=None),
                  check=_check_calibrate,
                  hints=dict(
                      target_epsilon=fz.floats(),
                      target_delta=fz.floats(),
                      rounds=st.one_of(st.integers(1, 10**6), fz.ints()),
                      sampling=st.sampled_from(['none', 'poisson', 'self']),
                      rate=st.one_of(fz.floats(), st.floats(0.0, 1.0)),
                      make_event=st.sampled_from(list(_RELEASES.values())),
                      parameter=st.sampled_from(list(_PARAMETERS.values()))),
                  max_examples=20,
                  examples=[
                      ('unreachable cPBM',
                       dict(make_event=lambda t: events.PoissonBinomialDpEvent(
                           t, 16, 2, 10**6),
                            parameter=_PARAMETERS['theta'],
                            target_epsilon=1e-3,
                            target_delta=1e-10,
                            rounds=10**6), 'clear_error'),
                      ('unreachable Gaussian',
                       dict(target_epsilon=1e-9,
                            target_delta=1e-10,
                            rounds=10**9), 'clear_error'),
                      ('DDG unreachable (brentq signs)',
                       dict(make_event=lambda s: ddg_mechanism.release_event(
                           1e6, s, 2, 10**6),
                            parameter=_PARAMETERS['local_stddev'],
                            target_epsilon=1e-6,
                            target_delta=1e-10), 'clear_error'),
                      ('a mechanism name where the event belongs',
                       dict(make_event='ddg'), 'clear_error'),
                  ]),
    fz.EntryPoint(
        name='accounting.event_io.extract_dp_event',
        call=event_io.extract_dp_event,
        baseline=dict(
            measurements={
                'dp_event':
                    event_io.event_structure(dp_accounting.GaussianDpEvent(1.0))
            }),
        check=_check_event,
        hints=dict(measurements=_MEASUREMENTS),
        names=('measurements', 'dp_event', 'event', 'Event', 'field')),
]
