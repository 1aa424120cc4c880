#!/usr/bin/env bash
# benches/gpu/nccl_side.py (gpu-check.sh's stage nccl_side) without a GPU: the same driver
# and rank script with --device cpu, in the Debian PyTorch chroot of scripts/setup-torch.sh
# (set up if missing; needs root): jitccl perf on the host target, torch on jitccl's own
# backend "jitccl" beside gloo, threads_side.cu built with the C++ compiler against a host
# stand-in for the CUDA runtime (cpu-stub/) and run on jitccl's libnccl.so.2 in the place of
# NCCL, and host memory's copy rate. Every (collective, size) is checked against the
# reference before it is timed, so a bug in the scripts or the program shows here.
#
# Usage: benches/gpu/cpu-check.sh [nccl_side.py flags]   (default: 2 ranks, one round, to 512 KiB;
#                                                         about a minute)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cargo build --release -q -p jitccl-capi -p jitccl-cli
bash scripts/setup-torch.sh >/dev/null
rel=${CARGO_TARGET_DIR:-$root/target}/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
c++ -O2 -std=c++17 -x c++ -Ibenches/gpu/cpu-stub -Icapi/include benches/gpu/threads_side.cu -L"$rel" -l:libnccl.so.2 \
  -Wl,-rpath,"$rel" -o "$out/threads_side"
env -u NCCL_COMM_ID -u JITCCL_COMM_ID PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1 JITCCL_TORCH_BIND="$rel" \
  python3 benches/gpu/nccl_side.py --device cpu --jitccl "$rel/jitccl" --libnccl "$rel/libnccl.so.2" --out "$out" \
  --threads "$out/threads_side" --nccl "$rel/libnccl.so.2" \
  --py "bash scripts/setup-torch.sh run python3" --ranks 2 --rounds 1 --sizes "16 128 1024 8192 65536 524288" "$@"
