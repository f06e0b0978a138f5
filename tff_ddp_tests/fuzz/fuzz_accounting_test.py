"""Fuzz tests of the accounting: the entry points of
`accounting_entry_points`, and a property of the release adversary on
random event trees."""

from absl.testing import parameterized
import dp_accounting
import hypothesis
from hypothesis import strategies as st
import numpy as np

from tff_ddp.accounting import accountant
from tff_ddp.accounting import events
from tff_ddp_tests.fuzz import strategies as fz
from tff_ddp_tests.fuzz.accounting_entry_points import ENTRY_POINTS
from tff_ddp_tests.fuzz.accounting_entry_points import RELATIONS as _RELATIONS

# pylint: disable-next=invalid-name  # test classes made by fz.test_classes
FuzzAccountingTest, SlowFuzzAccountingTest = fz.test_classes(
    'Accounting', ENTRY_POINTS, __name__)


def valid_event_trees():
  """Event trees the accountant costs: every leaf and wrapper it knows,
  with parameters in their valid ranges, nested up to 5 leaves."""
  leaves = st.one_of(
      st.builds(dp_accounting.GaussianDpEvent, st.floats(0.2, 20.0)),
      st.builds(events.DistributedDiscreteGaussianDpEvent,
                l2_sensitivity=st.floats(1.0, 1e3),
                local_stddev=st.floats(0.5, 1e3),
                num_clients=st.integers(1, 200),
                dimension=st.integers(1, 10**4),
                sampler_tv_distance=st.sampled_from([None, 2.0**-106])),
      st.builds(events.DistributedSkellamDpEvent,
                l2_sensitivity=st.floats(1.0, 1e3),
                local_variance=st.floats(1.0, 1e5),
                num_clients=st.integers(1, 200),
                dimension=st.integers(1, 10**4)),
      st.builds(events.PoissonBinomialDpEvent,
                theta=st.floats(0.01, 0.25),
                num_trials=st.integers(1, 64),
                num_clients=st.integers(1, 200),
                dimension=st.integers(1, 1000)),
      st.just(dp_accounting.NoOpDpEvent()))
  rates = st.floats(0.0, 1.0)

  def cohort(inner):
    return st.integers(1, 2000).flatmap(
        lambda n: st.builds(dp_accounting.SampledWithoutReplacementDpEvent,
                            st.just(n), st.integers(0, n), inner))

  return st.recursive(
      leaves,
      lambda inner: st.one_of(
          st.builds(dp_accounting.PoissonSampledDpEvent, rates, inner),
          st.builds(events.SelfSampledDpEvent, rates, inner),
          cohort(inner),
          # count >= 1: dp-accounting's ledger refuses 0 at any depth.
          st.builds(dp_accounting.SelfComposedDpEvent, inner,
                    st.integers(1, 1000)),
          st.builds(dp_accounting.ComposedDpEvent,
                    st.lists(inner, min_size=1, max_size=3))),
      max_leaves=5)


class ReleaseNeverAboveServerTest(parameterized.TestCase):
  """Property: on every event tree, for every relation, the release
  adversary's RDP curve is at most the server's at every order, and so is
  its epsilon (the release sees a function of what the server sees; the
  accountant takes per order the least of the valid bounds, the server's
  among them)."""

  @hypothesis.settings(hypothesis.settings.get_profile(fz.PROFILE),
                       max_examples=60,
                       deadline=None)
  @hypothesis.given(event=valid_event_trees(), relation=_RELATIONS)
  def test_release_never_above_server(self, event, relation):
    orders = [1.5, 2.0, 3.0, 8.0, 32.0]
    server = accountant.RdpAccountant(orders, relation, 'server')
    release = accountant.RdpAccountant(orders, relation, 'release')
    server.compose(event)
    release.compose(event)
    self.assertTrue(np.all(release.rdp <= server.rdp * (1 + 1e-12)),
                    (release.rdp, server.rdp))
    self.assertEqual(release.sampler_tv_mass, server.sampler_tv_mass)
    self.assertLessEqual(release.get_epsilon(1e-6), server.get_epsilon(1e-6))
