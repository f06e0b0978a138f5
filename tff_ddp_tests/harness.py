"""One `main()` for every test module, so each runs on its own as pytest does.

`python tff_ddp_tests/<path>_test.py` (and the Bazel `py_test` targets, which
run exactly that) sets TFF's C++ test execution context -- needed for the
secure sum -- runs every test of the module, slow ones included, and ends the
TFF workers it started when the interpreter exits.
"""


def main():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_ddp.utils import processes  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  processes.end_workers_at_exit()
  tf.test.main()
