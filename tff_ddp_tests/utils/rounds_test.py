"""`tff_ddp.utils.rounds`: statuses as str, refusals out of TFF's errors.

TFF 0.87 returns a tf.string result as bytes (so `status == 'ok'` was
always False) and surfaces a failed TF assertion as a gRPC error. Checked
here: `Status` compares equal to the text as str and as bytes (code written
for either keeps working), the refusal's text is recovered exactly from
the error TFF raises (escaping undone), and a `user_facing` computation is
the same TFF computation (proto, type) with only its Python results
changed -- also when traced into another computation. Without a context
that runs secure sums, the error says which call installs one.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_ddp.utils import processes
from tff_ddp.utils import rounds


class StatusTest(tf.test.TestCase):

  def test_equals_str_and_bytes(self):
    status = rounds.Status('ok')
    self.assertEqual(status, 'ok')
    self.assertEqual(status, b'ok')
    self.assertTrue(status == 'ok')
    self.assertFalse(status != b'ok')
    self.assertNotEqual(status, 'too_few_values')
    self.assertNotEqual(status, b'no_clients')
    self.assertEqual(status.decode(), 'ok')
    self.assertIsInstance(status, str)
    self.assertEqual(hash(status), hash('ok'))
    self.assertIn(status, {'ok': 1})
    self.assertEqual(repr(status), "Status('ok')")


class RefusalMessageTest(tf.test.TestCase):

  def test_recovers_the_text_from_tff_errors(self):
    text = "F: 5 clients, use x >= 5 or on_wrap='flag' [sic] \"q\"."
    escaped = text.replace("'", "\\'").replace('"', '\\"')
    error = RuntimeError(
        'details = "Failed to run computation: assertion failed: [' +
        rounds.REFUSAL_PREFIX + escaped + ']\n\t [[{{node Assert}}]]"')
    self.assertEqual(rounds.refusal_message(error), text)
    self.assertIsNone(rounds.refusal_message(RuntimeError('other')))

  def test_refusal_check_fails_the_tf_computation(self):

    @tf.function
    def guarded(n):
      check = rounds.refusal_check(
          n <= 3, tf.strings.join(['too many: ',
                                   tf.strings.as_string(n)]))
      with tf.control_dependencies([check]):
        return tf.identity(n)

    self.assertEqual(guarded(tf.constant(3)).numpy(), 3)
    with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
      guarded(tf.constant(4))
    self.assertEqual(rounds.refusal_message(raised.exception), 'too many: 4')


class UserFacingTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()

    @tff.tensorflow.computation(np.int32)
    def server(n):
      check = rounds.refusal_check(
          n <= 3, tf.strings.join(['n=', tf.strings.as_string(n)]))
      with tf.control_dependencies([check]):
        n = tf.identity(n)
      return collections.OrderedDict(n=n,
                                     status=tf.constant('ok'),
                                     inner=collections.OrderedDict(
                                         status=tf.constant('too_few_values'),
                                         name=tf.constant('bytes stay')))

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def run(values):
      return tff.federated_map(server, tff.federated_sum(values))

    self.plain = run
    self.wrapped = rounds.user_facing(run)

  def test_same_computation_other_python_results(self):
    self.assertEqual(self.wrapped.type_signature, self.plain.type_signature)
    self.assertEqual(self.wrapped, self.plain)
    self.assertIs(rounds.user_facing(self.wrapped), self.wrapped)
    out = self.wrapped([1, 2])
    self.assertIsInstance(out['status'], rounds.Status)
    self.assertEqual(out['status'], 'ok')
    self.assertEqual(out['inner']['status'], 'too_few_values')
    self.assertEqual(out['inner']['name'], b'bytes stay')  # not a status
    self.assertEqual(self.plain([1, 2])['status'], b'ok')

  def test_refusal_is_a_round_refused_error(self):
    with self.assertRaisesRegex(rounds.RoundRefusedError, '^n=4$'):
      self.wrapped([2, 2])

  def test_a_numpy_value_of_another_dtype_says_what_to_pass(self):
    # TFF's "Failed to serialize a value of dtype" with
    # np.float64 values into a float32 quantile process; here int32.
    with self.assertRaisesRegex(
        TypeError, r'takes int32 values and got float64 .*'
        r'np.asarray\(values, np.int32\)'):
      self.wrapped([np.float64(1.0), np.float64(2.0)])
    self.assertEqual(self.wrapped([1, 2])['n'], 3)

  def test_traced_into_another_computation_stays_tff(self):
    wrapped = self.wrapped

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def outer(values):
      return wrapped(values)

    self.assertEqual(outer.type_signature.result,
                     self.plain.type_signature.result)
    self.assertEqual(outer([1])['status'], b'ok')  # outer is not wrapped

  def test_processes_keep_their_kind(self):
    process = tff.templates.MeasuredProcess(
        tff.federated_computation(lambda: tff.federated_value(0, tff.SERVER)),
        tff.federated_computation(
            lambda s: tff.templates.MeasuredProcessOutput(
                s, s,
                tff.federated_value(collections.OrderedDict(status='ok'), tff.
                                    SERVER)),
            tff.FederatedType(np.int32, tff.SERVER)))
    wrapped = rounds.user_facing_process(process)
    self.assertIsInstance(wrapped, tff.templates.MeasuredProcess)
    output = wrapped.next(wrapped.initialize())
    self.assertIsInstance(output.measurements['status'], rounds.Status)
    with self.assertRaisesRegex(TypeError, 'MeasuredProcess'):
      rounds.user_facing_process(object())


class MissingContextTest(tf.test.TestCase):
  """A user who forgot set_sync_test_cpp_execution_context() is told so.

  TFF's default local context (what `import tensorflow_federated`
  installs) cannot run a secure sum: it used to end in gRPC's "Cannot embed
  a federated value", with no word about contexts.
  """

  def setUp(self):
    super().setUp()

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def secure(values):
      return tff.backends.mapreduce.federated_secure_modular_sum(values, 8)

    self.secure = secure
    # Whatever happens, the next test gets the test context back.
    self.addCleanup(processes.use_test_context)

  def test_default_context_and_no_context_name_the_call_to_make(self):
    wrapped = rounds.user_facing(self.secure)
    processes.use_test_context()
    self.assertEqual(wrapped([3, 7]), 2)  # 10 mod 8: the test context runs it
    for install in (tff.backends.native.set_sync_local_cpp_execution_context,
                    processes.drop_tff_contexts):
      processes.drop_tff_contexts()
      install()
      with self.subTest(install=install.__name__):
        with self.assertRaisesRegex(
            rounds.MissingContextError,
            r'set_sync_test_cpp_execution_context\(\)') as raised:
          wrapped([3, 7])
        self.assertIn('secure sums', str(raised.exception))
        self.assertIsNotNone(raised.exception.__cause__)  # TFF's own error

  def test_other_errors_pass_through(self):
    self.assertIsNone(rounds.missing_context(ValueError('bits must be')))
    wrapped = rounds.user_facing(self.secure)
    with self.assertRaises(TypeError):  # not a MissingContextError
      wrapped('not a list of ints')
