"""The TFF pieces the frequency protocols' processes share.

"Bounding Contribution Optimally for Federated Frequency Estimation under
User-level Distributed Differential Privacy" (the federated frequency
estimation paper): Algorithm 6 (TFFE), Algorithm 7 (MFFE), Algorithm 3
(one cPBM release). Each protocol's builder (in `two_phase`, `multi_round`,
`single_release`) takes its parameters and returns a `MeasuredProcess` (or
TFFE's phases); the pieces are the library's, composed:

* the frequency release is `PoissonBinomialSumFactory` (Kashin encoder) --
  one secure sum;
* TFFE's first phase is the Haar quantile process of
  `tff_ddp.analytics.quantiles.process` (cPBM over the Haar coefficients)
  on the clients' representation norms -- a second secure sum;
* MFFE's indicator is a second `PoissonBinomialSumFactory` on one
  coordinate.

A data-dependent clip C (TFFE's C-hat, MFFE's C^(r)) is applied by scaling
(`two_phase`, `multi_round`): clients send x / C to a cPBM aggregator built with
l2_clip = 1 and the server multiplies the decoded sum by C. Kashin's
representation is positively homogeneous (its truncation levels scale with
||x||), so the representation of x / C is y / C, its clip to 1 is
clip_C(y) / C, and the Bernoulli probabilities 1/2 + theta y'[k] are those
of Algorithm 3 with clip C: the same distribution, from an aggregator whose
configuration is public and fixed. (Its `l2_clip` measurement therefore
says 1; the clip in use is the process's `clip` measurement.) The privacy
event does not depend on C (Lemma 2).

Every builder refuses (on_wrap='raise') or flags (on_wrap='flag') a round
with more clients than the parameters' `ring_capacity()`.
"""

import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.aggregators import secure_sum
from tff_ddp.analytics.quantiles import process as quantiles_lib


def selector(struct_type, name):
  return tff.tensorflow.computation(lambda s: s[name], struct_type)


def as_float64(x):
  return tf.cast(x, tf.float64)


def all_finite(x):
  return tf.reduce_all(tf.math.is_finite(x))


def status_code(n, may_wrap):
  """The frequency round's status code (an index into STATUSES)."""
  statuses = quantiles_lib.STATUSES

  def code(name):
    return tf.constant(statuses.index(name), tf.int32)

  return tf.where(tf.equal(n, 0), code('no_clients'),
                  tf.where(may_wrap, code('sum_may_wrap'), code('ok')))


def status_text(code):
  return tf.gather(tf.constant(list(quantiles_lib.STATUSES)), code)


def checked(ring, on_wrap, n, *values):
  """`values` gated by the refusal of a round above `ring` (`on_wrap`, an
  OnWrap, RAISE), and whether the round's sums may wrap."""
  n = tf.cast(n, tf.int64)
  may_wrap = ring.may_wrap(n)
  if on_wrap is not secure_sum.OnWrap.RAISE:
    return (may_wrap,) + values
  with tf.control_dependencies([ring.assertion(n)]):
    return (tf.identity(may_wrap),) + tf.nest.map_structure(tf.identity, values)
