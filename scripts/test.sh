#!/usr/bin/env bash
# The whole test suite: sets up the C compiler and NVRTC, then runs every test with NVRTC
# required (a missing NVRTC fails the run instead of skipping the CUDA checks). Kernels go
# to the machine's kernel cache (jitccl's default, ~/.cache/jitccl), so a run compiles only
# what changed since the last, as a build cache would; its keys name the source, compiler
# and flags, so no entry outlives what it was built from. The cache's own tests, and those
# of cold compiles, make caches of their own. JITCCL_CACHE_DIR chooses another.
# With arguments, they go to one `cargo test --release --workspace --all-targets`.
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
# Named, not left to the default, so that the PyTorch test shows it inside its chroot.
export JITCCL_CACHE_DIR="${JITCCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jitccl}"
# An unfinished set-up goes with the run, all its processes (its own process group).
trap '[ -z "$torch_setup" ] || kill -- "-$torch_setup" 2>/dev/null || true; rm -f "$torch_log"' EXIT
if [ $# -gt 0 ]; then
  cargo test --release --workspace --all-targets "$@"
  exit
fi
# The whole suite: built once, then its targets two at a time (scripts/run_tests.py).
python3 scripts/run_tests.py
