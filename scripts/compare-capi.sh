#!/usr/bin/env bash
# The C API's cost beside the Rust API's, in one run: blocking f32 AllReduces on host-arena
# buffers through libnccl.so.2 (capi/bench/allreduce_loop.c) and through the Rust API
# (examples/allreduce_loop.rs), the two alternating, RUNS times each per size, at NRANKS
# ranks started by `jitccl launch`. Prints each side's median time per call (rank 0's),
# the spread, and the ratio C / Rust.
#
#   scripts/compare-capi.sh                 # 8 B and 16 MiB, 2 ranks, 7 runs each
#   NRANKS=4 RUNS=5 scripts/compare-capi.sh 8 1M
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
nranks=${NRANKS:-2}
runs=${RUNS:-7}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(8 16M)
cargo build --release -q -p jitccl-capi -p jitccl --bin jitccl --example allreduce_loop
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${CC:-cc} -O2 -Icapi/include capi/bench/allreduce_loop.c -Ltarget/release -lnccl \
  -Wl,-rpath,"$root/target/release" -o "$work/c_loop"
bytes() { numfmt --from=iec "$1"; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
one() { # program bytes iters -> us per call of rank 0
  JITCCL_COMM_ID=127.0.0.1:$(port) target/release/jitccl launch -n "$nranks" -- "$1" "$2" "$3" \
    | sed -n 's/^\[0\] rank 0: .* B: \([0-9.]*\) us per call$/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f %.3f %.3f\n", m, a[1], a[NR]}'; }
printf "%-8s %-6s %-26s %-26s %s\n" size ranks "C API us (median min max)" "Rust us (median min max)" "C / Rust"
for s in "${sizes[@]}"; do
  b=$(bytes "$s")
  iters=$(( b <= 65536 ? 100000 : (b <= 1048576 ? 2000 : 100) ))
  : > "$work/c"; : > "$work/r"
  for _ in $(seq "$runs"); do
    one "$work/c_loop" "$b" "$iters" >> "$work/c"
    one target/release/examples/allreduce_loop "$b" "$iters" >> "$work/r"
  done
  read -r cm cmin cmax < <(median < "$work/c")
  read -r rm rmin rmax < <(median < "$work/r")
  printf "%-8s %-6s %-26s %-26s %.3f\n" "$s" "$nranks" "$cm ($cmin..$cmax)" "$rm ($rmin..$rmax)" \
    "$(echo "$cm / $rm" | bc -l)"
done
