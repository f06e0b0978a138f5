#!/usr/bin/env bash
# Creates a virtual environment at the repository root with a pinned
# dependency set and the package in editable mode, for one of two lanes:
#
#   scripts/setup_env.sh        .venv/       TFF lane: Python 3.11, requirements/lock.txt
#                                            (TensorFlow Federated 0.87 and the whole library)
#   scripts/setup_env.sh core   .venv-core/  core lane: Python 3.12, requirements/lock-core.txt
#                                            (today's stack: no TFF; tff_ddp's core only)
#   scripts/setup_env.sh lint   .venv-lint/  lint tools: Python 3.11, requirements/lock-lint.txt
#                                            (yapf, pylint, mypy; not the package: they read
#                                            the source, so none of their pins meets a lane's)
#
# PYTHON names the interpreter (default python3.11 / python3.12). Idempotent:
# when the lock file, setup.py and the interpreter have not changed since the
# last successful run it returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."

lane="${1:-tff}"
case "$lane" in
  tff)  venv=.venv;      lock=requirements/lock.txt;      want=3.11
        why="TensorFlow Federated 0.87 needs Python 3.11 (it has no wheels for 3.12+)"
        check="import tensorflow_federated, dp_accounting, tff_ddp" ;;
  core) venv=.venv-core; lock=requirements/lock-core.txt; want=3.12
        why="the core lane's lock file (requirements/lock-core.txt) is resolved for Python 3.12"
        check="import tensorflow, dp_accounting, tff_ddp.accounting, tff_ddp.mechanisms, tff_ddp.encoders" ;;
  lint) venv=.venv-lint; lock=requirements/lock-lint.txt; want=3.11
        why="the lint tools' lock file (requirements/lock-lint.txt) is resolved for Python 3.11, the TFF lane's version"
        check="import yapf, pylint, mypy" ;;
  *) echo "usage: scripts/setup_env.sh [tff|core|lint]" >&2; exit 2 ;;
esac

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

# The interpreter: $PYTHON, else python$want, python3, python. A name that
# is on PATH but does not run (a pyenv shim for a version that is installed
# but not selected) is looked up among pyenv's installed versions.
find_python() {
  local cand ver
  for cand in ${PYTHON:-python$want python3 python}; do
    if ! command -v "$cand" >/dev/null 2>&1; then
      [ -n "${PYTHON:-}" ] && return 1         # named, but not there
      continue
    fi
    ver=$(version_of "$cand") || continue      # on PATH but does not run
    if [ "$ver" = "$want" ]; then command -v "$cand"; return 0; fi
    [ -n "${PYTHON:-}" ] && return 1           # runs, but another version
  done
  if command -v pyenv >/dev/null 2>&1; then
    for cand in $(ls -d "$(pyenv root)"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -V -r); do
      if [ "$(version_of "$cand")" = "$want" ]; then echo "$cand"; return 0; fi
    done
  fi
  return 1
}

if ! PY=$(find_python); then
  found=""
  if [ -n "${PYTHON:-}" ]; then
    found=" (PYTHON=$PYTHON: $(version_of "$PYTHON" || echo 'does not run'))"
  fi
  echo "tff_ddp: no Python $want found$found; $why. Install python$want or run: make PYTHON=/path/to/python$want ..." >&2
  exit 1
fi

# Up to date when the lock file, setup.py (not for the lint tools, which do
# not install the package) and the interpreter are those of the last
# successful run.
STAMP="$venv/.tff_ddp_installed"
package=setup.py
[ "$lane" = lint ] && package=/dev/null
stamp=$(cat "$lock" "$package" <(echo "$PY") | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$stamp" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi

echo "tff_ddp: setting up $venv with $PY (pinned dependencies from $lock)"
if [ ! -x "$venv/bin/python" ] || [ "$(version_of "$venv/bin/python")" != "$want" ]; then
  rm -rf "$venv"
  "$PY" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==0.9.5"
# The lock files are complete, resolved sets (`make lock`, `make lock-core`),
# so they install without resolution.
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -r "$lock"
if [ "$lane" != lint ]; then
  "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -e .
fi
"$venv/bin/python" -c "$check" >/dev/null 2>&1 || {
  echo "tff_ddp: installation finished but imports fail; see: $venv/bin/python -c '$check'" >&2
  exit 1
}
echo "$stamp" > "$STAMP"
echo "tff_ddp: $venv ready"
