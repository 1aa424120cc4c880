#!/usr/bin/env bash
# What gpu-check.sh's stage nccl_side carries to the GPU machine beside jitccl (which has no
# network), fetched here from PyPI into target/gpu-extras/ (ignored); `gpu-check.sh build`
# then copies it into target/gpu-check/extras/:
#
#   libnccl.so.2.xz   NVIDIA's NCCL 2.30.7 (wheel nvidia-nccl-cu13), its machine code cut to
#                     sm_90 (tools/nccl_sm90.py says how), with NCCL-License.txt: PyTorch 2.11
#                     bundles NCCL 2.28.9, which cannot run several ranks on one GPU
#
# Usage: tools/gpu-extras.sh   (the wheel stays in target/gpu-extras-cache/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/target/gpu-extras
cache=$root/target/gpu-extras-cache
mkdir -p "$dest" "$cache"
python3 "$root/tools/nccl_sm90.py" --out "$dest" --cache "$cache"
echo "gpu-extras: $dest ($(du -sm "$dest" | cut -f1) MiB): $(cd "$dest" && echo *)"
