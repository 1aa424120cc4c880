#!/usr/bin/env bash
# Builds the Python package's wheel as users install it: `pip wheel ./python` (which builds
# libnccl.so.2 with cargo, or ships the one JITCCL_NCCL_SO names), then `auditwheel repair`,
# which reads what the library links (glibc's symbol versions, other shared libraries) and
# gives the wheel the manylinux tag that fits, bundling any library outside that policy.
#
#   scripts/wheel.sh [OUTDIR]    the wheel into OUTDIR (default dist/); prints its path
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
bash "$root/scripts/setup-wheel.sh" >&2
tools="$root/.deps/wheel-tools"
raw=$(mktemp -d "${TMPDIR:-/tmp}/jitccl-wheel.XXXXXX")
trap 'rm -rf "$raw"' EXIT
python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$raw" "$root/python" >&2
PATH="$tools/bin:$PATH" auditwheel repair -w "$raw/tagged" "$raw"/jitccl-*.whl >&2
# Moved on its own, so that the path printed is this build's, whatever OUTDIR already holds.
wheel=$(cd "$raw/tagged" && echo jitccl-*.whl)
mv -f "$raw/tagged/$wheel" "$out/"
echo "$out/$wheel"
