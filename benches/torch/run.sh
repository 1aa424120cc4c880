#!/usr/bin/env bash
# torch.distributed.all_reduce through the "jitccl" backend beside Gloo
# (benches/torch/allreduce_vs_gloo.py), at 2 and 4 ranks started by `jitccl launch` in the
# Debian PyTorch chroot of scripts/setup-torch.sh (set up if missing; needs root).
#
# Usage: benches/torch/run.sh                 (NRANKS="2 4"; BENCH_REPS, BENCH_SIZES,
#                                              BENCH_BATCH_S as the script says)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cargo build --release -q -p jitccl-capi -p jitccl
bash scripts/setup-torch.sh >/dev/null
rel=${CARGO_TARGET_DIR:-$root/target}/release
for n in ${NRANKS:-2 4}; do
  env -u NCCL_COMM_ID -u JITCCL_COMM_ID JITCCL_DEVICE=host PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1 \
    JITCCL_NCCL_SO="$rel/libnccl.so.2" JITCCL_BIN="$rel/jitccl" JITCCL_TORCH_BIND="$rel" \
    USE_LIBUV=0 GLOO_SOCKET_IFNAME=lo \
    "$rel/jitccl" launch -n "$n" -- bash scripts/setup-torch.sh run python3 benches/torch/allreduce_vs_gloo.py 2>&1 |
    grep -v ' WARN \| INFO ' | sed 's/^\[0\] //'
done
