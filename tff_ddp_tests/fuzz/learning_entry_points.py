"""The fuzz entry points of Delta-FL learning: `PrivacyConfig` (construction and
validation, its planning epsilon), `calibrate` (few cases: each is a noise
search), and the validation of `build_superquantile_fl`, `build_dp_fedavg`
and `build_baseline` before any TFF tracing: `processes._trace` is replaced
by a sentinel returning what it would trace (the processes themselves are
covered by processes_test).

Each `EntryPoint` of ENTRY_POINTS is a test of fuzz_learning_test.py and a row
of bad_inputs.py.
"""

import math
from unittest import mock

from hypothesis import strategies as st
import numpy as np
import tensorflow_federated as tff

from tff_ddp.learning import privacy as pv
from tff_ddp.learning import processes as pr
from tff_ddp.learning import tasks
from tff_ddp.learning import weighting
from tff_ddp_tests.fuzz import strategies as fz

_VALUE_TYPE = tff.TensorType(np.float32, [10])
_CONFIG = dict(clients_per_round=10,
               l2_clip=1.0,
               noise_multiplier=1.0,
               quantile_noise_multiplier=1.0,
               population=100)


def _model_fn():
  return tasks.keras_model_fn(lambda: tasks.linear_keras_model((4,), 2), (4,))()


def _sgd():
  return tff.learning.optimizers.build_sgdm(learning_rate=0.1)


def _config(**kwargs):
  return pv.PrivacyConfig(**{**_CONFIG, **kwargs})


# ----------------------------------------------------------------------------
# PrivacyConfig and calibrate.


def _check_config(_kwargs, config):
  if not isinstance(config, pv.PrivacyConfig):
    return f'{type(config).__name__}'
  problems = []
  for name, kind in (('clients_per_round', int), ('l2_clip', float),
                     ('noise_multiplier', float), ('loss_upper_bound', float),
                     ('bits', int), ('quantile_bits', int), ('delta', float),
                     ('max_clients', int)):
    value = getattr(config, name)
    if type(value) is not kind:  # pylint: disable=unidiomatic-typecheck  # the exact type, subclasses excluded
      problems.append(f'{name} {value!r} is not a {kind.__name__}')
  if config.max_clients < config.clients_per_round:
    problems.append(f'max_clients {config.max_clients} < clients_per_round '
                    f'(every planned round would report epsilon inf)')
  if (config.sampling == 'none') != (config.population is None):
    problems.append(f'sampling {config.sampling} population '
                    f'{config.population}')
  if config.population is not None and (config.population
                                        < config.clients_per_round):
    problems.append(f'population {config.population}')
  if (config.sampling == 'self' and config.has_quantile and
      config.count != 'estimated'):
    problems.append('self-sampling with a count the server cannot know')
  if config.max_clients < config.clients_in_sum:
    problems.append(f'max_clients {config.max_clients} < the clients in '
                    f'the sum {config.clients_in_sum}')
  if config.histogram not in ('flat', 'tree', 'haar'):
    problems.append(f'histogram {config.histogram!r}')
  if not 0 < config.delta < 1:
    problems.append(f'delta {config.delta}')
  return '; '.join(problems) or None


def _check_epsilon(kwargs, epsilon):
  del kwargs
  return fz.epsilon_ok(epsilon)


_PLANNING = None


def _planning_config():
  global _PLANNING
  if _PLANNING is None:
    _PLANNING = _config()
  return _PLANNING


def _config_epsilon(value_type, rounds):
  return _planning_config().epsilon(value_type, rounds)


def _check_calibrated(kwargs, result):
  if not isinstance(result, pv.CalibratedPrivacy):
    return f'{type(result).__name__}'
  target = float(kwargs['target_epsilon'])
  problems = []
  if not 0 <= result.epsilon <= target * (1 + 1e-9):
    problems.append(f'epsilon {result.epsilon} for the target {target}')
  if result.rounds != int(kwargs['rounds']):
    problems.append(f'rounds {result.rounds}')
  config = result.config
  if not (math.isfinite(config.noise_multiplier) and
          config.noise_multiplier > 0):
    problems.append(f'noise_multiplier {config.noise_multiplier}')
  if config.has_quantile != (kwargs.get('budget_ratio') is not None):
    problems.append('a histogram noise without a budget_ratio (or none '
                    'with one)')
  if config.delta != float(kwargs['target_delta']):
    problems.append(f'delta {config.delta}')
  return fz.first_error('; '.join(problems) or None,
                        _check_config(kwargs, config))


_HISTOGRAMS = st.sampled_from(['flat', 'tree', 'haar', 'hierarchical', 'x'])
_CONFIG_HINTS = dict(
    clients_per_round=st.one_of(st.integers(1, 1000), fz.ints()),
    l2_clip=fz.floats(),
    noise_multiplier=fz.floats(),
    quantile_noise_multiplier=st.one_of(st.none(), fz.floats()),
    loss_upper_bound=fz.floats(),
    num_bins=st.one_of(st.sampled_from([2, 16, 17, 64, 2**16, 2**17]),
                       fz.ints()),
    histogram=_HISTOGRAMS,
    count=st.sampled_from(['exact', 'estimated', 'x']),
    tail_count=st.sampled_from(['expected', 'histogram', 'x']),
    bits=st.one_of(st.integers(0, 31), fz.ints()),
    quantile_bits=st.one_of(st.integers(0, 31), fz.ints()),
    delta=fz.floats(),
    sampling=st.sampled_from(
        ['none', 'poisson', 'without-replacement', 'self', 'x']),
    population=st.one_of(st.none(), st.integers(1, 10**4), fz.ints()),
    adversary=st.sampled_from(['server', 'release', 'both']),
    max_clients=st.one_of(st.none(), st.integers(1, 100), fz.ints()),
    encoder=st.sampled_from(['hadamard', 'kashin', 'none', 'x']),
    seed=st.one_of(st.none(), fz.ints()))
_VALUE_TYPES = st.sampled_from([
    _VALUE_TYPE,
    tff.TensorType(np.float64, [3, 2]),
    tff.TensorType(np.int32, [4]),
    tff.TensorType(np.float32, [None]),
    tff.TensorType(np.bool_, [2]), np.float32, _model_fn, print, float
])

ENTRY_POINTS = [
    fz.EntryPoint(
        name='learning.PrivacyConfig',
        call=pv.PrivacyConfig,
        baseline=dict(_CONFIG),
        check=_check_config,
        hints=dict(_CONFIG_HINTS),
        names=tuple(_CONFIG_HINTS),
        examples=[
            ("histogram None (the message named 'method')",
             dict(histogram=None), 'clear_error'),
            ('max_clients below clients_per_round (every planned round '
             'reported epsilon inf)', dict(max_clients=5), 'clear_error'),
            ('sampling none with a population', dict(sampling='none'),
             'clear_error'),
            ('sampling none', dict(sampling='none',
                                   population=None), 'documented'),
        ]),
    fz.EntryPoint(name='learning.PrivacyConfig.epsilon',
                  call=_config_epsilon,
                  baseline=dict(value_type=_VALUE_TYPE, rounds=5),
                  check=_check_epsilon,
                  hints=dict(value_type=_VALUE_TYPES,
                             rounds=st.one_of(st.integers(1, 1000), fz.ints())),
                  max_examples=10,
                  budget=20.0),
    fz.EntryPoint(
        name='learning.calibrate',
        call=pv.calibrate,
        baseline=dict(value_type=_VALUE_TYPE,
                      target_epsilon=2.0,
                      target_delta=1e-5,
                      rounds=5,
                      clients_per_round=10,
                      l2_clip=1.0,
                      budget_ratio=0.25,
                      population=100),
        check=_check_calibrated,
        hints=dict(value_type=_VALUE_TYPES,
                   target_epsilon=st.one_of(st.floats(0.1, 50), fz.floats()),
                   target_delta=fz.floats(),
                   rounds=st.one_of(st.integers(1, 100), fz.ints()),
                   clients_per_round=st.one_of(st.integers(1, 100), fz.ints()),
                   l2_clip=fz.floats(),
                   budget_ratio=st.one_of(st.none(), st.floats(0.01, 10),
                                          fz.floats()),
                   population=st.one_of(st.none(), st.integers(1, 10**4)),
                   sampling=st.sampled_from(
                       ['none', 'poisson', 'without-replacement', 'x']),
                   adversary=st.sampled_from(['server', 'release', 'x'])),
        names=('value_type', 'target_epsilon', 'target_delta', 'rounds',
               'clients_per_round', 'l2_clip', 'budget_ratio', 'population',
               'sampling', 'adversary', 'noise_multiplier'),
        max_examples=10,
        budget=30.0,
        examples=[
            ("target_delta nan (the message named 'delta')",
             dict(target_delta=math.nan), 'clear_error'),
            ("value_type print (TFF's 'Expected VariableModel')",
             dict(value_type=print), 'clear_error'),
            ('a model_fn', dict(value_type=_model_fn), 'documented'),
            ('DP-FedAvg', dict(budget_ratio=None), 'documented'),
        ]),
]

# ----------------------------------------------------------------------------
# The process builders, up to the tracing.


def _traced(model_fn, client_optimizer, server_optimizer, spec, data_type,
            weights_type):
  del model_fn, data_type
  return ('traced', spec, client_optimizer, server_optimizer, weights_type)


def _validated(build):

  def call(*args, **kwargs):
    with mock.patch.object(pr, '_trace', _traced):
      return build(*args, **kwargs)

  return call


def _traced_parts(result):
  if not (isinstance(result, tuple) and result[0] == 'traced'):
    return None, f'{result!r:.100}'
  _, spec, client, server, _ = result
  problems = [
      f'{name} {opt!r}' for name, opt in (('client', client), ('server',
                                                               server))
      if not isinstance(opt, tff.learning.optimizers.Optimizer)
  ]
  return spec, '; '.join(problems) or None


def _check_privacy_range(config, update_type):
  """An accepted process's float32 update stays finite and nonzero: the
  update sum's decoded bound fits float32 and its clip is a normal float32
  (the contract of `Mechanism.output_range`)."""
  if config is None:
    return None
  clip, bound = config.update_factory().mechanism(update_type).output_range()
  info = np.finfo(np.float32)
  if not (clip >= info.tiny and bound <= info.max):
    return (f'l2_clip {config.l2_clip} noise {config.noise_multiplier}: '
            f'the float32 update overflows (clip {clip:g}, bound {bound:g})')
  return None


def _check_superquantile(kwargs, result):
  spec, problem = _traced_parts(result)
  if spec is None or problem:
    return problem
  theta = float(kwargs['tail_fraction'])
  privacy = kwargs.get('privacy')
  problems = []
  objective = spec.objective
  if not isinstance(objective, weighting.Superquantile) or (
      objective.tail_fraction != theta) or not 0 < theta <= 1:
    problems.append(f'spec {spec}')
  if spec.privacy is not privacy:
    problems.append('privacy replaced')
  if privacy is not None and not (privacy.has_quantile and not objective.exact):
    problems.append('DP-Delta-FL without a histogram or with exact '
                    'reweighting')
  return fz.first_error('; '.join(problems) or None,
                        _check_privacy_range(spec.privacy, result[4].trainable))


def _check_dp_fedavg(kwargs, result):
  spec, problem = _traced_parts(result)
  if spec is None or problem:
    return problem
  privacy = kwargs['privacy']
  # pylint: disable-next=unidiomatic-typecheck  # exactly FedAvg, no subclass
  if type(spec.objective) is not weighting.FedAvg or (
      spec.privacy is not privacy) or privacy.has_quantile:
    return f'spec {spec}'
  return _check_privacy_range(privacy, result[4].trainable)


_NEEDS = {
    'fedavg_sub': ('tail_fraction',),
    'superquantile': ('tail_fraction',),
    'fedprox': ('proximal_strength',),
    'qffl': ('q', 'lipschitz'),
    'tilted': ('tilt',)
}


def _check_baseline(kwargs, result):
  spec, problem = _traced_parts(result)
  if spec is None or problem:
    return problem
  objective = kwargs['objective']
  if spec.objective.name != objective or spec.privacy is not None:
    return f'spec {spec}'
  for name in ('tail_fraction', 'proximal_strength', 'q', 'lipschitz', 'tilt'):
    given = kwargs.get(name)
    value = getattr(spec.objective, name, None)
    if name in _NEEDS.get(objective, ()):
      if not (fz.is_real(value) and math.isfinite(value) and value > 0 and
              value == float(given)):
        return f'{name} {value!r} for {given!r}'
    elif given is not None:
      return f'{name} {given!r} accepted for {objective}'
  return None


_DP = None


def _privacy_configs():
  """Valid, invalid-for-the-builder and out-of-range configurations."""
  global _DP
  if _DP is None:
    _DP = dict(deltafl=_config(),
               fedavg=_config(quantile_noise_multiplier=None),
               huge_clip=_config(l2_clip=1e300),
               tiny_clip=_config(l2_clip=1e-300),
               huge_noise=_config(noise_multiplier=1e300,
                                  quantile_noise_multiplier=None))
  return _DP


class _Privacy:
  """A named PrivacyConfig, resolved at call time (the configs are built
  lazily, not at import)."""

  def __init__(self, name):
    self.name = name

  def __repr__(self):
    return f'<PrivacyConfig {self.name}>'


def _resolve(kwargs):
  return {
      k: (_privacy_configs()[v.name] if isinstance(v, _Privacy) else v)
      for k, v in kwargs.items()
  }


def _resolving(build, check):

  def call(**kwargs):
    return _validated(build)(**_resolve(kwargs))

  def checked(kwargs, result):
    return check(_resolve(kwargs), result)

  return call, checked


_PRIVACY = st.one_of(
    st.sampled_from([
        _Privacy(n)
        for n in ('deltafl', 'fedavg', 'huge_clip', 'tiny_clip', 'huge_noise')
    ]), st.none())
_OPTIMIZERS = st.one_of(
    st.sampled_from([
        _sgd(),
        tff.learning.optimizers.build_adam(0.01), _sgd, 'sgd', None, 0, '', []
    ]), fz.any_value())
_MODEL_FNS = st.one_of(
    st.just(_model_fn),
    st.sampled_from([tasks.linear_keras_model, lambda: None,
                     lambda: _model_fn]))
_BUILD_NAMES = ('model_fn', 'tail_fraction', 'client_optimizer_fn',
                'server_optimizer_fn', 'privacy', 'reweighting', 'l2_clip',
                'quantile_noise_multiplier', 'objective', 'proximal_strength',
                'q', 'lipschitz', 'tilt', 'seed')

_superquantile, _superquantile_check = _resolving(pr.build_superquantile_fl,
                                                  _check_superquantile)
_dp_fedavg, _dp_fedavg_check = _resolving(pr.build_dp_fedavg, _check_dp_fedavg)

BUILD_ENTRY_POINTS = [
    fz.EntryPoint(
        name='learning.build_superquantile_fl (validation)',
        call=_superquantile,
        check=_superquantile_check,
        baseline=dict(model_fn=_model_fn,
                      tail_fraction=0.5,
                      client_optimizer_fn=_sgd(),
                      server_optimizer_fn=None,
                      privacy=_Privacy('deltafl'),
                      reweighting='threshold'),
        hints=dict(model_fn=_MODEL_FNS,
                   tail_fraction=st.one_of(st.floats(0, 1), fz.floats()),
                   client_optimizer_fn=_OPTIMIZERS,
                   server_optimizer_fn=_OPTIMIZERS,
                   privacy=_PRIVACY,
                   reweighting=st.sampled_from(['threshold', 'exact', 'x'])),
        names=_BUILD_NAMES,
        max_examples=20,
        budget=20.0,
        examples=[
            ('l2_clip 1e300 on float32 weights (the update was +-inf)',
             dict(privacy=_Privacy('huge_clip')), 'clear_error'),
            ('l2_clip 1e-300 on float32 weights',
             dict(privacy=_Privacy('tiny_clip')), 'clear_error'),
            ('server optimizer 0 (silently the default SGD)',
             dict(server_optimizer_fn=0), 'clear_error'),
            ("server optimizer '' (silently the default SGD)",
             dict(server_optimizer_fn=''), 'clear_error'),
            ('server optimizer array (ambiguous truth value)',
             dict(server_optimizer_fn=np.array([1.0, 2.0])), 'clear_error'),
            ('non-private exact', dict(privacy=None,
                                       reweighting='exact'), 'documented'),
        ]),
    fz.EntryPoint(name='learning.build_dp_fedavg (validation)',
                  call=_dp_fedavg,
                  check=_dp_fedavg_check,
                  baseline=dict(model_fn=_model_fn,
                                client_optimizer_fn=_sgd(),
                                server_optimizer_fn=None,
                                privacy=_Privacy('fedavg')),
                  hints=dict(model_fn=_MODEL_FNS,
                             client_optimizer_fn=_OPTIMIZERS,
                             server_optimizer_fn=_OPTIMIZERS,
                             privacy=_PRIVACY),
                  names=_BUILD_NAMES,
                  max_examples=15,
                  budget=20.0,
                  examples=[
                      ('noise 1e300 on float32 weights (the update was +-inf)',
                       dict(privacy=_Privacy('huge_noise')), 'clear_error'),
                  ]),
    fz.EntryPoint(
        name='learning.build_baseline (validation)',
        call=_validated(pr.build_baseline),
        check=_check_baseline,
        baseline=dict(objective='qffl',
                      model_fn=_model_fn,
                      client_optimizer_fn=_sgd(),
                      q=1.0,
                      lipschitz=10.0),
        hints=dict(
            objective=st.sampled_from(list(weighting.OBJECTIVES) + ['x']),
            model_fn=_MODEL_FNS,
            client_optimizer_fn=_OPTIMIZERS,
            server_optimizer_fn=_OPTIMIZERS,
            tail_fraction=st.one_of(st.none(), fz.floats()),
            proximal_strength=st.one_of(st.none(), fz.floats()),
            q=st.one_of(st.none(), fz.floats()),
            lipschitz=st.one_of(st.none(), fz.floats()),
            tilt=st.one_of(st.none(), fz.floats()),
            seed=st.one_of(st.none(), fz.ints())),
        names=_BUILD_NAMES,
        max_examples=20,
        budget=20.0,
        examples=[
            ('fedavg', dict(objective='fedavg', q=None,
                            lipschitz=None), 'documented'),
            ('tilted without tilt',
             dict(objective='tilted', q=None, lipschitz=None), 'clear_error'),
        ]),
]

ENTRY_POINTS.extend(BUILD_ENTRY_POINTS)
