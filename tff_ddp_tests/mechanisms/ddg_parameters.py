"""Tests' shorthand for a DDG / Skellam mechanism's parameters from flat
keywords, and the configuration the mechanism tests start from."""

import math

from tff_ddp.mechanisms import distributed_discrete_gaussian as ddg


def compute(module, dim, encoder=None, integer_inputs=False, **request):
  """module.compute_parameters with the request's fields given flat."""
  return module.compute_parameters(dim,
                                   module.Request(**request),
                                   encoder=encoder,
                                   integer_inputs=integer_inputs)


def make(module=ddg, **kwargs):
  """`compute(module, ...)` of d = 100, c = 1, z = 1, n = 10, 16 bits,
  modclip_prob 1e-4, beta = e^-0.5, with `kwargs` in their place."""
  args = dict(dim=100,
              l2_clip=1.0,
              noise_multiplier=1.0,
              expected_clients_per_round=10,
              bits=16,
              modclip_prob=1e-4,
              beta=math.exp(-0.5))
  args.update(kwargs)
  return compute(module, **args)
