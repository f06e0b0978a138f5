"""Per-user item histograms for federated frequency estimation experiments.

The frequency paper ("Bounding Contribution Optimally for Federated
Frequency Estimation under User-level Distributed Differential Privacy",
Section 5, "Common setup") uses two synthetic datasets after Liu et al.
(2022), "Histogram Estimation under User-level Privacy with Heterogeneous
Data", and two real ones that cannot be downloaded here. Every generator
returns int64 counts x of shape [n, d] (x[i, j] = how many times user i
holds item j) and is a function of its seed: `iid` (100 items per user
i.i.d. from p_j proportional to 1/j), `heterogeneous` (the reading of the
paper's Dir/Poisson description that matches its own Table 2 norms) and
`docstrings` (the real-world stand-in: users are the docstrings of
installed scientific packages, items their d most frequent words).
`max_items(x)` is B / K of the paper (footnote 4: public). Why each
reading, and what `docstrings` is and is not:
docs/notes/frequency_estimation.md, "Datasets".
"""

import collections
import functools
import os
import re
import sysconfig
from typing import Optional, Sequence, Tuple

import numpy as np

from tff_ddp.utils import checks

DATASETS = ('iid', 'heterogeneous', 'docstrings')
ITEMS_PER_USER = 100
DOCSTRING_PACKAGES = ('numpy', 'scipy', 'sklearn', 'matplotlib',
                      'tensorflow_probability')
_DOCSTRING = re.compile(r'(?:"""|\'\'\')(.*?)(?:"""|\'\'\')', re.S)
_WORD = re.compile(r'[a-z]+')


def zipf(dim: int) -> np.ndarray:
  """p[j] proportional to 1/j, j = 1..dim (the paper's p)."""
  dim = checks.integer(dim, 'dim', 1)
  p = 1.0 / np.arange(1, dim + 1)
  return p / p.sum()


def iid(num_users: int,
        dim: int,
        seed: int = 0,
        items: int = ITEMS_PER_USER) -> np.ndarray:
  """[n, d] counts: each user draws `items` items i.i.d. from `zipf(d)`."""
  n = checks.integer(num_users, 'num_users', 1)
  items = checks.integer(items, 'items', 1)
  rng = np.random.default_rng(checks.integer(seed, 'seed', 0))
  return rng.multinomial(items, zipf(dim), size=n).astype(np.int64)


def log_gamma_samples(shape_parameters: np.ndarray, rng) -> np.ndarray:
  """log G with G ~ Gamma(a, 1) elementwise, exact for tiny a.

  Gamma(a) equals Gamma(a + 1) U^(1/a) in law (U uniform on (0, 1)), so
  log G = log Gamma(a + 1) + log(U) / a, finite even when G underflows.
  """
  a = np.asarray(shape_parameters, np.float64)
  g = rng.gamma(a + 1.0)
  u = rng.uniform(size=a.shape)
  u = np.where(u > 0.0, u, np.finfo(np.float64).tiny)
  return np.log(g) + np.log(u) / a


def dirichlet(concentration: np.ndarray, size: int, rng) -> np.ndarray:
  """[size, len(concentration)] rows ~ Dir(concentration), stable."""
  logs = log_gamma_samples(
      np.broadcast_to(concentration, (size, len(concentration))), rng)
  logs -= logs.max(axis=1, keepdims=True)
  w = np.exp(logs)
  return w / w.sum(axis=1, keepdims=True)


def heterogeneous(num_users: int,
                  dim: int,
                  seed: int = 0,
                  items: int = ITEMS_PER_USER,
                  size_concentration: float = 2.0) -> np.ndarray:
  """[n, d] counts of the heterogeneous dataset (its reading of the paper:
  docs/notes/frequency_estimation.md, "Datasets")."""
  n = checks.integer(num_users, 'num_users', 1)
  items = checks.integer(items, 'items', 1)
  size_concentration = checks.positive(size_concentration, 'size_concentration')
  rng = np.random.default_rng(checks.integer(seed, 'seed', 0))
  kappa = dirichlet(np.full(n, size_concentration), 1, rng)[0]
  sizes = rng.poisson(items * n * kappa)
  p = dirichlet(zipf(dim) / 2.0, n, rng)
  # A multinomial row per user (numpy takes one n per row).
  out = np.empty((n, dim), np.int64)
  for i in range(n):
    out[i] = rng.multinomial(sizes[i], p[i])
  return out


@functools.lru_cache(maxsize=2)
def _docstring_words(root: str, packages: Tuple[str, ...]):
  """[Counter of words] of every docstring in `packages` under `root`."""
  users = []
  for package in packages:
    base = os.path.join(root, package)
    if not os.path.isdir(base):
      raise ValueError(
          f'the docstrings dataset reads the sources of {packages}; '
          f'{package!r} is not installed under {root}.')
    for dirpath, dirnames, filenames in os.walk(base):
      dirnames.sort()
      for name in sorted(filenames):
        if not name.endswith('.py'):
          continue
        try:
          with open(os.path.join(dirpath, name), encoding='utf-8') as f:
            source = f.read()
        except (OSError, UnicodeDecodeError):
          continue
        for match in _DOCSTRING.finditer(source):
          words = _WORD.findall(match.group(1).lower())
          if words:
            users.append(collections.Counter(words))
  return users


def docstrings(num_users: int,
               dim: int,
               seed: int = 0,
               packages: Sequence[str] = DOCSTRING_PACKAGES,
               root: Optional[str] = None) -> np.ndarray:
  """[n, d] word counts of n docstrings over the d most frequent words.

  What it is and is not: docs/notes/frequency_estimation.md, "Datasets".
  `root` defaults to this interpreter's site-packages.
  """
  n = checks.integer(num_users, 'num_users', 1)
  dim = checks.integer(dim, 'dim', 1)
  root = root or sysconfig.get_paths()['purelib']
  users = _docstring_words(root, tuple(packages))
  total = collections.Counter()
  for counter in users:
    total.update(counter)
  # Ties broken alphabetically, so the vocabulary is a function of the data.
  words = [
      w for w, _ in sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:dim]
  ]
  index = {w: j for j, w in enumerate(words)}
  rows = []
  for counter in users:
    row = np.zeros(len(words), np.int64)
    for word, count in counter.items():
      j = index.get(word)
      if j is not None:
        row[j] = count
    if row.any():
      rows.append(row)
  if n > len(rows):
    raise ValueError(f'num_users={n} exceeds the {len(rows)} docstrings that '
                     f'hold one of the {dim} words.')
  rng = np.random.default_rng(checks.integer(seed, 'seed', 0))
  pick = np.sort(rng.choice(len(rows), size=n, replace=False))
  return np.stack([rows[i] for i in pick])


def vocabulary(dim: int,
               packages: Sequence[str] = DOCSTRING_PACKAGES,
               root: Optional[str] = None):
  """The d items (words) of `docstrings`, most frequent first."""
  root = root or sysconfig.get_paths()['purelib']
  total = collections.Counter()
  for counter in _docstring_words(root, tuple(packages)):
    total.update(counter)
  return [
      w for w, _ in sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:dim]
  ]


def load(name: str, num_users: int, dim: int, seed: int = 0) -> np.ndarray:
  """One of DATASETS by name (see the module docstring)."""
  name = checks.choice(name, 'dataset', DATASETS)
  return {
      'iid': iid,
      'heterogeneous': heterogeneous,
      'docstrings': docstrings
  }[name](num_users, dim, seed)


def max_items(x: np.ndarray) -> int:
  """max_i ||x_i||_1: the paper's public bound on the items per user."""
  x = np.asarray(x)
  return int(np.max(np.abs(x).sum(axis=1)))
