"""The `main` of every Bazel py_test: pytest on the test module(s) given.

Bazel runs a py_test as `python pytest_main.py <module>_test.py` in its
runfiles (//bazel:pytest.bzl), which hold pytest.ini and conftest.py too:
the test runs as under `make test` -- TFF's test context set, the TFF
workers the session started ended -- slow tests included.
"""

import sys

import pytest

if __name__ == '__main__':
  sys.exit(
      pytest.main(['-q', '--run-slow', '-p', 'no:cacheprovider'] +
                  sys.argv[1:]))
