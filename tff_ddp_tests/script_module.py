"""Loads a repository script (scripts/x.py, not a package module) by path.

Tests of scripts/build_files.py and scripts/design_metrics.py call their
functions directly; the scripts stay runnable as `python scripts/x.py`.
"""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def load(relative_path: str):
  """The module of the script at `relative_path` (from the repository)."""
  path = os.path.join(ROOT, relative_path)
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
