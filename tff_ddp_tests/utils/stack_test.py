"""The one-line description of the stack (what the core lane prints)."""

import importlib.metadata
import platform
import re

from absl.testing import absltest

from tff_ddp.utils import stack


class StackTest(absltest.TestCase):

  def test_names_the_installed_versions(self):
    line = stack.describe()
    self.assertRegex(
        line, r'^core stack: python \S+, tensorflow \S+, numpy \S+, '
        r'dp-accounting \S+(, tff \S+)?$')
    self.assertIn(f'python {platform.python_version()},', line)
    for name in ('tensorflow', 'numpy', 'dp-accounting'):
      version = importlib.metadata.version(name)
      self.assertIsNotNone(re.search(rf'\b{name} {re.escape(version)}\b', line),
                           (name, line))
