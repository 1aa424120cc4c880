#!/usr/bin/env bash
# Installs NVRTC (and the CUDA headers it needs) from PyPI wheels into the project-local,
# git-ignored folder .deps/nvrtc. No GPU is needed. Idempotent: a complete install is kept.
# The runtime finds this folder by itself (see codegen/src/compile/nvrtc/discovery.rs); override with
# JITCCL_NVRTC_PATH=<dir or libnvrtc.so path>.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.deps/nvrtc"
lib="$dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
hdr="$dir/nvidia/cuda_runtime/include/cuda_fp16.h"
if [ -f "$lib" ] && [ -f "$hdr" ]; then
  echo "nvrtc: present at $dir"
  exit 0
fi
rm -rf "$dir.tmp"
echo "nvrtc: installing the NVRTC 12.9 wheels into $dir (about 93 MB download)"
# One pip call: a second --target install into the same folder silently skips.
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir.tmp" \
  nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79
[ -f "$dir.tmp/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ] || { echo "nvrtc: install incomplete" >&2; exit 1; }
rm -rf "$dir" && mv "$dir.tmp" "$dir"
echo "nvrtc: installed at $dir"
