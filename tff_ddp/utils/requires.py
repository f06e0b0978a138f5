"""The TFF layer's import check: one line that names what it needs.

tff_ddp has two layers. The core -- `tff_ddp.mechanisms`,
`tff_ddp.encoders`, `tff_ddp.accounting` (and `tff_ddp.utils`) -- needs
TensorFlow, numpy, scipy and dp-accounting and runs on today's Python.
The TFF layer -- `tff_ddp.aggregators`, `.analytics`, `.learning`,
`.queries` and the CLI commands that run federated computations -- is
built on TensorFlow Federated 0.87, the last release, which installs only on
Python 3.11. Each TFF-layer package calls `require_tff` first, so that
without TFF its import fails with one line instead of a traceback from
deep inside.
"""

import importlib.util

NEEDS = ("TensorFlow Federated 0.87 on Python 3.11: pip install "
         "'tff_ddp[tff]' with the jaxlib override of "
         "requirements/overrides.txt (README, Install)")


class MissingTffError(ImportError):
  """A TFF-layer module was imported where TFF is not installed."""


def require_tff(module: str) -> None:
  """Raises MissingTffError naming `module` if TFF is not installed."""
  if importlib.util.find_spec('tensorflow_federated') is None:
    raise MissingTffError(
        f'{module} is part of tff_ddp\'s TFF layer and needs {NEEDS}; the '
        'core (tff_ddp.mechanisms, tff_ddp.encoders, tff_ddp.accounting) '
        'runs without it.')
