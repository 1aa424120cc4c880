#!/usr/bin/env bash
# What gpu-check.sh's stages nccl_side and nccl_tests carry to the GPU machine beside jitccl
# (which has no network), fetched here from PyPI into target/gpu-extras/ (ignored, 41 MiB);
# `gpu-check.sh build` then copies it into target/gpu-check/extras/ (within its 64 MiB):
#
#   libnccl.so.2.xz   NVIDIA's NCCL 2.30.7 (wheel nvidia-nccl-cu13), its machine code cut to
#                     sm_90 (scripts/nccl_sm90.py says how), with NCCL-License.txt: PyTorch 2.11
#                     bundles NCCL 2.28.9, which cannot run several ranks on one GPU
#   mpich.tar.xz      MPICH 5.0.2 (wheel mpich): mpiexec, libmpi, mpi.h and its licences, for
#                     nccl-tests, which runs several rank processes only under MPI
#
# Usage: scripts/gpu-extras.sh   (the wheels stay in target/gpu-extras-cache/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/target/gpu-extras
cache=$root/target/gpu-extras-cache
mpich_version=5.0.2
mkdir -p "$dest" "$cache"

python3 "$root/scripts/nccl_sm90.py" --out "$dest" --cache "$cache"

shopt -s nullglob
whl=("$cache"/mpich-"$mpich_version"-*.whl)
if [ ${#whl[@]} -eq 0 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
    -d "$cache" "mpich==$mpich_version"
  whl=("$cache"/mpich-"$mpich_version"-*.whl)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "${whl[0]}" "$tmp/whl"
data=$tmp/whl/mpich-$mpich_version.data/data
m=$tmp/mpich
# What nccl-tests needs: the header to build, libmpi with the libraries it loads
# (lib/mpich: libfabric, UCX), and hydra (mpiexec and its proxy) to start the ranks.
mkdir -p "$m/bin" "$m/lib/mpich" "$m/include" "$m/licenses"
cp "$data"/include/*.h "$m/include/"
cp -P "$data/lib/libmpi.so" "$data/lib/libmpi.so.12" "$m/lib/"
cp "$data"/lib/mpich/*.so.* "$m/lib/mpich/"
cp "$data/bin/mpiexec.hydra" "$data/bin/hydra_pmi_proxy" "$m/bin/"
ln -s mpiexec.hydra "$m/bin/mpiexec"
cp "$tmp"/whl/mpich-"$mpich_version".dist-info/licenses/* "$m/licenses/"
chmod +x "$m"/bin/*
strip "$m/lib/libmpi.so.12" "$m"/lib/mpich/*.so.* "$m/bin/mpiexec.hydra" "$m/bin/hydra_pmi_proxy" 2>/dev/null || true
# It must start ranks here as it will there.
"$m/bin/mpiexec" -np 2 true
tar -cJf "$dest/mpich.tar.xz" -C "$tmp" mpich
echo "gpu-extras: $dest ($(du -sm "$dest" | cut -f1) MiB): $(cd "$dest" && echo *)"
