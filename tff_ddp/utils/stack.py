"""The versions of the stack tff_ddp runs on, in one line.

`python -m tff_ddp.utils.stack` prints it (the core lane of CI does, first);
paste it into a bug report. TFF's version is named when it is installed.
"""

import importlib.metadata
import platform

_PACKAGES = (('tensorflow', 'tensorflow'), ('numpy', 'numpy'),
             ('dp-accounting', 'dp-accounting'), ('tensorflow-federated',
                                                  'tff'))


def describe() -> str:
  """'core stack: python X.Y.Z, tensorflow A, numpy B, dp-accounting C'
  (and ', tff D' where TensorFlow Federated is installed)."""
  parts = [f'python {platform.python_version()}']
  for distribution, label in _PACKAGES:
    try:
      parts.append(f'{label} {importlib.metadata.version(distribution)}')
    except importlib.metadata.PackageNotFoundError:
      if label != 'tff':
        parts.append(f'{label} not installed')
  return 'core stack: ' + ', '.join(parts)


if __name__ == '__main__':
  print(describe())
