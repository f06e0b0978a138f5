"""Per-user item histograms for federated frequency estimation experiments.

The federated frequency estimation paper ("Bounding Contribution Optimally
for Federated Frequency Estimation under User-level Distributed Differential
Privacy", Section 5, "Common setup") uses two synthetic datasets, following
Liu et al. (2022), "Histogram Estimation under User-level Privacy with
Heterogeneous Data", and two real ones (Foursquare check-ins, Sentiment140
tweets) that cannot be downloaded here. Every generator returns int64 counts
x of shape [n, d] (x[i, j] = how many times user i holds item j) and is a
function of its seed.

* `iid`: each user draws 100 items i.i.d. from p, p[j] proportional to
  1/j over [d] (a multinomial row per user).
* `heterogeneous`: the paper says "we sample n kappa's from Dir(2). Each
  user i draws 100 kappa_i Poisson samples from p_i ~ Dir(p/2)". Read
  literally (kappa a point of the n-simplex, mean 1/n) a user would hold
  100/n items on average -- 0.01 at n = 10^4 -- which contradicts the
  paper's own numbers: its Normalize and Sample errors on this dataset
  (28.1 / 28.4 for d = 50, Table 2) are ||x_bar||_2 minus a little, and
  ||x_bar||_2 = 28.3 is the norm of 100 p, i.e. 100 items per user on
  average. We therefore use the reading that gives that mean:
  kappa ~ Dir(2, ..., 2) over the n users, user i holds
  N_i ~ Poisson(100 n kappa_i) items (n kappa_i is about Gamma(2, 1/2):
  mean 1, variance 1/2), drawn i.i.d. from its own p_i ~ Dir(p / 2)
  (concentration sum 1/2: most users hold one or two items' worth of
  their mass). Dirichlet draws with concentrations as small as p_j / 2 ~
  1e-3 underflow numpy's gamma sampler, so we draw log-gammas exactly:
  Gamma(a) = Gamma(a + 1) U^(1/a) in distribution.
* `docstrings`: the real-world stand-in. Users are the docstrings (every
  triple-quoted string literal) of the Python sources of numpy 1.25.2,
  scipy 1.9.3, scikit-learn 1.7.2, matplotlib 3.8.4 and TensorFlow
  Probability 0.22.1 as installed in the project's environment (versions
  pinned in requirements/lock.txt), items the d words (lower-cased runs of
  a-z) most frequent over all of them; users holding none of the d words
  are dropped and n are sampled without replacement. Like Sentiment140
  (tweets per user, top-d words), it is real text with a heavy-tailed
  number of words per user (median ~20, 99th percentile ~600). It is
  neither Sentiment140 nor Foursquare, and the paper's numbers on those
  datasets are not comparable with ours on it.

`max_items(x)` is B / K of the paper: the largest number of items any user
holds, which the paper takes as a public, non-private value (footnote 4;
"commercial devices typically have default upper limits"). For `iid` it is
100 by construction; for the others we take it from the data as the paper
does, which a deployment would replace by a device limit.
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
  """[n, d] counts of the heterogeneous dataset (module docstring)."""
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

  See the module docstring. `root` defaults to this interpreter's
  site-packages.
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
