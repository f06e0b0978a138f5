#!/usr/bin/env bash
# Creates .venv/ at the repository root with the pinned dependencies and the
# package in editable mode. Idempotent: when requirements/lock.txt and setup.py
# have not changed since the last successful run it returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."

STAMP=.venv/.tff_ddp_installed
want=$(cat requirements/lock.txt setup.py | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x .venv/bin/python ]; then
  exit 0
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3 python; do
    if command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
fi
if [ -z "$PY" ]; then
  echo "tff_ddp: no Python found. Install Python 3.11 (TensorFlow Federated 0.87 needs 3.11)." >&2
  exit 1
fi
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$ver" != "3.11" ]; then
  echo "tff_ddp: found Python $ver at $(command -v "$PY"), but TensorFlow Federated 0.87 needs Python 3.11" >&2
  echo "         (it has no wheels for 3.12+). Install python3.11 or run: make PYTHON=/path/to/python3.11 ..." >&2
  exit 1
fi


echo "tff_ddp: setting up .venv (pinned dependencies from requirements/lock.txt)"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.9.5"
# lock.txt is the complete, resolved set (made by `make lock` with the jaxlib
# override in requirements/overrides.txt), so it installs without resolution.
.venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -r requirements/lock.txt
.venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
.venv/bin/python -c "import tensorflow_federated, dp_accounting, tff_ddp" >/dev/null 2>&1 || {
  echo "tff_ddp: installation finished but imports fail; see: .venv/bin/python -c 'import tensorflow_federated'" >&2
  exit 1
}
echo "$want" > "$STAMP"
echo "tff_ddp: .venv ready"
