#!/usr/bin/env bash
# The main job: sets up, builds, and runs the `jitccl perf` AllReduce sweep on the default
# target (the host without a GPU). Extra arguments go to `jitccl perf`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cargo build --release --quiet -p jitccl-cli
if [ $# -eq 0 ]; then
  set -- -N 2 -b 8 -e 64M -f 2
fi
exec "${CARGO_TARGET_DIR:-target}/release/jitccl" perf all_reduce "$@"
