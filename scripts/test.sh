#!/usr/bin/env bash
# The whole test suite: sets up the C compiler and NVRTC, then runs every test with NVRTC
# required (a missing NVRTC fails the run instead of skipping the CUDA checks). Kernels
# are compiled into a fresh cache, so cold compiles and cache hits are both exercised.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export JITCCL_REQUIRE_NVRTC=1
cache=$(mktemp -d "${TMPDIR:-/tmp}/jitccl-test-cache.XXXXXX")
trap 'rm -rf "$cache"' EXIT
export JITCCL_CACHE_DIR="$cache"
cargo test --release --workspace --all-targets "$@"
