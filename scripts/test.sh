#!/usr/bin/env bash
# The whole test suite: sets up the C compiler and NVRTC, then runs every test with NVRTC
# required (a missing NVRTC fails the run instead of skipping the CUDA checks). Kernels
# are compiled into a fresh cache, so cold compiles and cache hits are both exercised.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
# For the whole suite, PyTorch's chroot (capi/tests/torch.rs; once per machine) is
# downloaded and unpacked while the tests build; the test waits for it (the script's lock)
# and reports a failed set-up. A run of some tests leaves that to the test.
torch_log=$(mktemp "${TMPDIR:-/tmp}/jitccl-setup-torch.XXXXXX")
torch_setup=
if [ $# -eq 0 ]; then
  setsid bash scripts/setup-torch.sh >"$torch_log" 2>&1 &
  torch_setup=$!
fi
export JITCCL_REQUIRE_NVRTC=1
cache=$(mktemp -d "${TMPDIR:-/tmp}/jitccl-test-cache.XXXXXX")
# An unfinished set-up goes with the run, all its processes (its own process group).
trap '[ -z "$torch_setup" ] || kill -- "-$torch_setup" 2>/dev/null; rm -rf "$cache" "$torch_log"' EXIT
export JITCCL_CACHE_DIR="$cache"
cargo test --release --workspace --all-targets "$@"
