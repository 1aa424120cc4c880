#!/usr/bin/env bash
# A PyTorch benchmark of benches/torch/ as ranks started by `jitccl launch` in the Debian
# PyTorch chroot of scripts/setup-torch.sh (set up if missing; needs root):
#
# - allreduce_vs_gloo.py (the default): torch.distributed.all_reduce through the "jitccl"
#   backend beside Gloo, at 2 and 4 ranks;
# - ddp_wire.py: DDP training with gradients in jitccl's wire formats beside PyTorch's
#   bf16_compress_hook (run it at 4 ranks: NRANKS=4).
#
# Usage: benches/torch/run.sh [SCRIPT]        (NRANKS="2 4"; the script's own variables, as
#                                              it says)
# allreduce_vs_gloo.py's medians go to $CARGO_TARGET_DIR/torch-bench/allreduce.csv (default
# target/), and benches/busbw_svg.py draws them beside it as allreduce.svg.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
script=benches/torch/${1:-allreduce_vs_gloo.py}
cargo build --release -q -p jitccl-capi -p jitccl-cli
bash scripts/setup-torch.sh >/dev/null
rel=${CARGO_TARGET_DIR:-$root/target}/release
out=${CARGO_TARGET_DIR:-$root/target}/torch-bench
mkdir -p "$out"
rm -f "$out/allreduce.csv"
for n in ${NRANKS:-2 4}; do
  env -u NCCL_COMM_ID -u JITCCL_COMM_ID -u JITCCL_WIRE JITCCL_DEVICE=host PYTHONPATH="$root/python" \
    PYTHONDONTWRITEBYTECODE=1 JITCCL_NCCL_SO="$rel/libnccl.so.2" JITCCL_BIN="$rel/jitccl" JITCCL_TORCH_BIND="$rel:$out" \
    BENCH_CSV="$out/allreduce.csv" USE_LIBUV=0 GLOO_SOCKET_IFNAME=lo \
    "$rel/jitccl" launch -n "$n" -- bash scripts/setup-torch.sh run python3 "$script" 2>&1 |
    grep -v ' WARN \| INFO ' | sed 's/^\[0\] //'
done
if [ -s "$out/allreduce.csv" ]; then
  python3 benches/busbw_svg.py "$out/allreduce.csv" "$out/allreduce.svg" \
    --title "torch.distributed.all_reduce, jitccl beside Gloo: busbw against size"
  echo "busbw against size: $out/allreduce.csv, $out/allreduce.svg"
fi
