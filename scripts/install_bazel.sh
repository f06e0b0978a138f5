#!/usr/bin/env bash
# Installs Bazel for `make bazel-test`: Debian's bazel-bootstrap 4.2.3 (the
# only Bazel a package registry serves here; it brings a JDK and ~20 Java
# libraries, ~40 packages, ~38 MB). Idempotent: returns at once when
# /usr/bin/bazel-4 is there. Needs root (CI and the development machines run
# as root) or sudo. docs/notes/bazel.md says why this Bazel and how it
# builds offline.
set -euo pipefail

if [ -x /usr/bin/bazel-4 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_bazel: no apt-get; install Debian's bazel-bootstrap (Bazel 4.2.3) another way" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
echo "install_bazel: installing bazel-bootstrap (Bazel 4.2.3) from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine's package lists may be missing or old: update, then install.
$sudo nice -n 19 apt-get update -qq
$sudo nice -n 19 apt-get install -y -qq --no-install-recommends bazel-bootstrap >/dev/null
/usr/bin/bazel-4 --version
