"""Tests' shorthand for a DDG / Skellam factory from flat keywords."""

import dataclasses

from tff_ddp.aggregators import discrete_gaussian

_REQUEST_FIELDS = frozenset(
    f.name for f in dataclasses.fields(discrete_gaussian.Request))


def make(cls=discrete_gaussian.DiscreteGaussianSumFactory, **kwargs):
  """`cls(Request(<the Request's keywords>), <the others>)`."""
  request = {k: kwargs.pop(k) for k in list(kwargs) if k in _REQUEST_FIELDS}
  return cls(discrete_gaussian.Request(**request), **kwargs)
