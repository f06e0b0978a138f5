"""An RDP accountant that also knows the DDG and cPBM events.

`RdpAccountant` extends `dp_accounting.rdp.RdpAccountant` through its
`_maybe_compose` hook. Everything the base class supports is left to it --
in particular a subtree of only `GaussianDpEvent`s (under `ComposedDpEvent` /
`SelfComposedDpEvent`), sampled or not, stays on its tight path.

Neighbouring relations, per event (the accountant's `neighboring_relation`):

* Unsampled `DistributedDiscreteGaussianDpEvent` / `PoissonBinomialDpEvent`:
  ADD_OR_REMOVE_ONE and REPLACE_SPECIAL give the **zero-out** curve (a client
  replaced by a zero input, its noise still in the sum; distributed noise has
  no plain add/remove analysis, see events.py). REPLACE_ONE gives the
  replace-one curve: DDG with both sensitivities doubled (triangle
  inequality on the sum), cPBM Lemma 2 as published (a coordinate moving
  between -C and +C), where its zero-out curve moves it to 0 only (pbm.py).
* `PoissonSampledDpEvent` (needs ADD_OR_REMOVE_ONE, as in the base class):
  Zhu & Wang's bound (subsampling.poisson_rdp) on the zero-out curve. That
  bound needs the add/remove structure P = (1-q) mu_0 + q mu_1 vs Q = mu_0,
  i.e. the neighbouring client contributes the same distribution mu_0 when
  it is not sampled as when it is sampled with a zero input. This holds for
  zero-out Poisson sampling of a secure sum in which a client that is not
  sampled still takes part with a zero input (so its noise share, or its
  Binomial(m, 1/2) draws, are in the sum either way); `num_clients` is then
  the number of noise-adding participants. If unsampled clients leave the
  sum instead, "not sampled" removes one noise share and the number is the
  one the DDG paper reports for its experiments (generic amplification on
  the zero-out curve), not a proved bound; use sampling without replacement
  for a proved bound in that setting.
* `SampledWithoutReplacementDpEvent` (needs REPLACE_ONE, as in the base
  class): WBK19's bound (subsampling.without_replacement_rdp) on the
  replace-one curve. A fixed number of clients takes part, so the noise
  shares are the same on both sides; this is the proved route when
  unsampled clients do not participate.

A subtree under sampling may mix Gaussian, DDG and cPBM events composed
with `ComposedDpEvent` / `SelfComposedDpEvent`; Gaussian parts then use their
plain RDP alpha / (2 z^2) inside the generic bound. Nested sampling and other
events under sampling are unsupported.
"""

from typing import Optional, Sequence, Union

import dp_accounting
import numpy as np

from tff_ddp.accounting import ddg
from tff_ddp.accounting import events
from tff_ddp.accounting import pbm
from tff_ddp.accounting import subsampling

NeighborRel = dp_accounting.NeighboringRelation
_ErrorDetails = dp_accounting.PrivacyAccountant.CompositionErrorDetails
_OUR_EVENTS = (events.DistributedDiscreteGaussianDpEvent,
               events.PoissonBinomialDpEvent)


def _is_gaussian_only(event: dp_accounting.DpEvent) -> bool:
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return True
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return _is_gaussian_only(event.event)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return all(_is_gaussian_only(e) for e in event.events)
  return False


def _first_unsupported(event) -> Optional[dp_accounting.DpEvent]:
  """The first event of a sampled subtree that has no RDP curve here."""
  if isinstance(event, (dp_accounting.GaussianDpEvent,
                        dp_accounting.NoOpDpEvent) + _OUR_EVENTS):
    return None
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return _first_unsupported(event.event)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    for e in event.events:
      bad = _first_unsupported(e)
      if bad is not None:
        return bad
    return None
  return event


def event_rdp(
    event: dp_accounting.DpEvent,
    orders: Sequence[float],
    neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
) -> np.ndarray:
  """Unsampled RDP curve of a Gaussian / DDG / cPBM (composed) event.

  The relation chooses the zero-out or replace-one curve of our events (see
  the module docstring); Gaussian events use alpha / (2 z^2) under every
  relation, as dp-accounting does.
  """
  orders = np.asarray(orders, dtype=np.float64)
  if isinstance(event, dp_accounting.NoOpDpEvent):
    return np.zeros(orders.shape)
  if isinstance(event, dp_accounting.GaussianDpEvent):
    if event.noise_multiplier == 0:
      return np.full(orders.shape, np.inf)
    return orders / (2.0 * event.noise_multiplier**2)
  if isinstance(event, events.DistributedDiscreteGaussianDpEvent):
    if neighboring_relation is NeighborRel.REPLACE_ONE:
      l1 = event.l1_sensitivity
      d = event.dimension
      if l1 is None:  # The default of ddg.py, for the undoubled vector.
        l1 = min(np.sqrt(d) * event.l2_sensitivity, event.l2_sensitivity**2)
      event = events.DistributedDiscreteGaussianDpEvent(
          l2_sensitivity=2 * event.l2_sensitivity,
          local_stddev=event.local_stddev,
          num_clients=event.num_clients, dimension=d,
          l1_sensitivity=2 * l1)
    return ddg.rdp(event, orders)
  if isinstance(event, events.PoissonBinomialDpEvent):
    return pbm.rdp(event, orders, 'replace_one' if (
        neighboring_relation is NeighborRel.REPLACE_ONE) else 'zero_out')
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.count * event_rdp(event.event, orders, neighboring_relation)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    total = np.zeros(orders.shape)
    for e in event.events:
      total = total + event_rdp(e, orders, neighboring_relation)
    return total
  raise TypeError(f'No RDP curve for {type(event).__name__}.')


class RdpAccountant(dp_accounting.rdp.RdpAccountant):
  """dp-accounting's RDP accountant, plus DDG and cPBM events.

  Example:

    accountant = RdpAccountant()
    round_event = dp_accounting.PoissonSampledDpEvent(
        0.01, DistributedDiscreteGaussianDpEvent(
            l2_sensitivity=1000.0, local_stddev=2000.0, num_clients=100,
            dimension=2**16))
    accountant.compose(round_event, 1000)
    accountant.get_epsilon_and_optimal_order(1e-6)

  See the module docstring for the neighbouring relation of every result.
  Curves of our events are cached per (event, relation), so composing many
  identical rounds one by one costs one evaluation.
  """

  def __init__(
      self,
      orders: Optional[Sequence[float]] = None,
      neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE,
  ):
    super().__init__(orders, neighboring_relation)
    self._curve_cache = {}

  def _cached(self, key, compute) -> np.ndarray:
    try:
      return self._curve_cache[key]
    except (KeyError, TypeError):
      value = compute()
      try:
        self._curve_cache[key] = value
      except TypeError:  # Unhashable (e.g. an event holding a list).
        pass
      return value

  def _maybe_compose(
      self, event: dp_accounting.DpEvent, count: int, do_compose: bool
  ) -> Optional[_ErrorDetails]:
    relation = self._neighboring_relation
    if isinstance(event, _OUR_EVENTS):
      if do_compose:
        self._rdp += count * self._cached(
            ('plain', event, relation),
            lambda: event_rdp(event, self._orders, relation))
      return None
    if isinstance(event, (dp_accounting.PoissonSampledDpEvent,
                          dp_accounting.SampledWithoutReplacementDpEvent)):
      if _is_gaussian_only(event.event):
        return super()._maybe_compose(event, count, do_compose)
      poisson = isinstance(event, dp_accounting.PoissonSampledDpEvent)
      needed = (NeighborRel.ADD_OR_REMOVE_ONE if poisson
                else NeighborRel.REPLACE_ONE)
      if relation is not needed:
        return _ErrorDetails(
            invalid_event=event,
            error_message=(f'neighboring_relation must be `{needed.name}` '
                           f'for `{type(event).__name__}`. Found {relation}.'))
      bad = _first_unsupported(event.event)
      if bad is not None:
        return _ErrorDetails(
            invalid_event=event,
            error_message=(
                f'Subevent of `{type(event).__name__}` must be built from '
                'Gaussian, DistributedDiscreteGaussian and PoissonBinomial '
                'events with ComposedDpEvent / SelfComposedDpEvent. Found '
                f'subevent {bad}.'))
      if do_compose:
        self._rdp += count * self._cached(
            ('sampled', event, relation),
            lambda: self._sampled_rdp(event))
      return None
    return super()._maybe_compose(event, count, do_compose)

  def _sampled_rdp(
      self,
      event: Union[dp_accounting.PoissonSampledDpEvent,
                   dp_accounting.SampledWithoutReplacementDpEvent],
  ) -> np.ndarray:
    relation = self._neighboring_relation

    def base(orders):
      return event_rdp(event.event, orders, relation)

    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
      return subsampling.poisson_rdp(
          base, event.sampling_probability, self._orders)
    return subsampling.without_replacement_rdp(
        base, event.sample_size, event.source_dataset_size, self._orders)
