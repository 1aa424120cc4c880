#!/usr/bin/env bash
# PyTorch for the `jitccl` backend's tests (python/jitccl/torch.py): Debian trixie's
# CPU-only python3-torch (2.6) with numpy and a C compiler (jitccl's host target compiles
# its kernels with `cc` at run time), in a minbase debootstrap chroot in
# /var/cache/jitccl/torch-chroot: one per machine, shared by every checkout (it needs root
# anyway, and is some 2 GB). Needs root (debootstrap, chroot) and Debian's package servers.
#
#   scripts/setup-torch.sh                  set up, once: a marker file makes re-runs instant
#   scripts/setup-torch.sh run CMD [ARG..]  set up if needed, then run CMD in the chroot
#   scripts/setup-torch.sh dir              print the chroot's folder
#
# `run` gives CMD a private mount namespace (unshare --mount, no fork: CMD keeps this
# process's pid, so signals reach it directly) in which the host's /proc, /sys, /dev (with
# /dev/shm, where jitccl's ranks meet), /tmp, this repository (at the same path, read
# only) and the folders JITCCL_TORCH_BIND lists (colon-separated, at the same paths, for a
# library, kernel cache or output folder elsewhere) are bind-mounted into the chroot. The
# mounts belong to that namespace alone and vanish when CMD and its children exit, however
# they end: nothing is left to clean up.
# The environment passes through, so CMD may be one rank of `jitccl launch` run outside:
#   jitccl launch -n 2 -- scripts/setup-torch.sh run python3 python/tests/torch_collectives.py
# Override the folder with JITCCL_TORCH_CHROOT, the mirror with DEBIAN_MIRROR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${JITCCL_TORCH_CHROOT:-/var/cache/jitccl/torch-chroot}
marker="$dir/.jitccl-torch-ready"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# gcc and libc6-dev: jitccl compiles its host kernels with `cc` inside the chroot (its
# kernel cache keys name the compiler, so they never mix with the ones built outside).
# g++, libtorch-dev (PyTorch's C++ headers), pybind11-dev and python3-dev: the backend
# compiles its C++ part (python/jitccl/torch/_native.cpp) at first use.
packages=python3-torch,python3-numpy,gcc,libc6-dev,g++,libtorch-dev,pybind11-dev,python3-dev

need_root() {
  [ "$(id -u)" = 0 ] || { echo "setup-torch: $1 needs root (debootstrap, chroot, mount)" >&2; exit 1; }
}

# The packages of the list that the chroot at $1 lacks (one made before they joined it).
missing() {
  local p
  for p in ${packages//,/ }; do
    [ -f "$1/var/lib/dpkg/info/$p.list" ] || [ -f "$1/var/lib/dpkg/info/$p:amd64.list" ] || printf '%s ' "$p"
  done
}

setup() {
  if [ -f "$marker" ]; then
    local lacking
    lacking=$(missing "$dir")
    if [ -n "$lacking" ]; then
      need_root "adding packages"
      exec 9>"$dir.lock"
      flock 9
      lacking=$(missing "$dir")
      if [ -n "$lacking" ]; then
        echo "setup-torch: adding ${lacking% } to $dir"
        # shellcheck disable=SC2086 # one word per package
        if ! chroot "$dir" /usr/bin/env -i PATH=/usr/bin:/bin DEBIAN_FRONTEND=noninteractive \
          sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $lacking" >"$dir.log" 2>&1; then
          echo "setup-torch: apt-get install failed; the end of $dir.log:" >&2
          tail -n 30 "$dir.log" >&2
          exit 1
        fi
      fi
      exec 9>&-
    fi
    [ "${1:-}" = quiet ] || echo "setup-torch: present at $dir ($(cat "$marker"))"
    return 0
  fi
  need_root "setting up"
  # One set-up at a time (the ranks of a first `jitccl launch ... run` all come here).
  mkdir -p "$(dirname "$dir")"
  exec 9>"$dir.lock"
  flock 9
  if [ -f "$marker" ]; then
    exec 9>&-
    return 0
  fi
  local start=$SECONDS
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "setup-torch: installing debootstrap"
    apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
  fi
  # Into a fresh folder beside the final one, renamed when complete: an interrupted run
  # leaves no half-made chroot that looks ready.
  local tmp="$dir.tmp"
  rm -rf "$tmp"
  echo "setup-torch: debootstrap --variant=minbase --include=$packages trixie $dir (from $mirror)"
  local cache="$tmp-debs"
  mkdir -p "$cache"
  if ! debootstrap --variant=minbase --include="$packages" --cache-dir="$cache" trixie "$tmp" "$mirror" \
    >"$dir.log" 2>&1; then
    echo "setup-torch: debootstrap failed; the end of $dir.log:" >&2
    tail -n 30 "$dir.log" >&2
    exit 1
  fi
  local download
  download=$(du -sm "$cache" | cut -f1)
  rm -rf "$cache"
  # Check it: torch imports with Gloo, a tensor adds up, gcc builds a shared object with libm.
  local check='import torch, numpy, torch.distributed as d; assert d.is_available() and d.is_gloo_available(); '
  check+='assert torch.ones(3).add(1).sum().item() == 6; print("versions", torch.__version__, numpy.__version__)'
  local versions
  versions=$(enter "$tmp" /usr/bin/env -i PATH=/usr/bin:/bin python3 -c "$check" | grep '^versions ')
  echo 'double f(double x); double f(double x) { return x; }' >"$tmp/tmp/jitccl-torch-check.c"
  chroot "$tmp" /usr/bin/env -i PATH=/usr/bin:/bin \
    cc -O2 -fPIC -shared -o /tmp/jitccl-torch-check.so /tmp/jitccl-torch-check.c -lm
  rm -f "$tmp/tmp/jitccl-torch-check.c" "$tmp/tmp/jitccl-torch-check.so"
  versions=${versions#versions }
  local size
  size=$(du -sm "$tmp" | cut -f1)
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "torch ${versions% *}, numpy ${versions#* }, $(chroot "$dir" cc --version | head -n 1); ${download} MB of packages downloaded, ${size} MB installed, set up in $((SECONDS - start)) s" >"$marker"
  # Let go of the lock: `run` execs the command, which must not hold it.
  exec 9>&-
  echo "setup-torch: ready at $dir: $(cat "$marker")"
}

# Runs CMD in the chroot `$1` as described above: mounts private to CMD, which keeps this
# process's pid.
enter() {
  local dir=$1
  shift
  mkdir -p "$dir$root" "$dir/proc" "$dir/sys" "$dir/dev" "$dir/tmp"
  # The same working folder inside, where it is one of the mounted ones.
  local cwd=/
  case "$PWD/" in "$root"/* | /tmp/*) cwd=$PWD ;; esac
  # shellcheck disable=SC2016 # expanded by the inner shell
  exec unshare --mount --propagation private -- /bin/sh -euc '
    dir=$1 root=$2 cwd=$3 binds=$4; shift 4
    mount --rbind /proc "$dir/proc"
    mount --rbind /sys "$dir/sys"
    mount --rbind /dev "$dir/dev"
    mount --rbind /tmp "$dir/tmp"
    mount --bind "$root" "$dir$root"
    IFS=:
    for p in $binds; do
      [ -n "$p" ] || continue
      mkdir -p "$p" "$dir$p"
      mount --bind "$p" "$dir$p"
    done
    mount -o remount,bind,ro "$dir$root"
    exec chroot "$dir" /usr/bin/env --chdir="$cwd" "$@"' sh "$dir" "$root" "$cwd" "${JITCCL_TORCH_BIND:-}" "$@"
}

run() {
  [ $# -gt 0 ] || { echo "setup-torch: run: no command given" >&2; exit 2; }
  setup quiet
  need_root "run"
  enter "$dir" "$@"
}

case "${1:-}" in
  "") setup ;;
  run) shift; run "$@" ;;
  dir) echo "$dir" ;;
  *) echo "usage: $0 [run CMD [ARG...] | dir]" >&2; exit 2 ;;
esac
