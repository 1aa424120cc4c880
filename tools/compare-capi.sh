#!/usr/bin/env bash
# The C API's cost beside the Rust API's: blocking f32 AllReduces through libnccl.so.2 and
# through the Rust API, in the same rank processes, alternating in blocks
# (benches/capi_overhead.rs), so that the VM's phases hit both alike. For each size, RUNS
# runs at NRANKS ranks started by `jitccl launch`; each run prints rank 0's medians and the
# median of its rounds' ratios C / Rust. The last line per size is the median of the runs'
# ratios and their range.
#
#   tools/compare-capi.sh                 # 8 B and 16 MiB, 2 ranks, 5 runs each
#   NRANKS=4 RUNS=3 tools/compare-capi.sh 8 1M
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
nranks=${NRANKS:-2}
runs=${RUNS:-5}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(8 16M)
cargo build --release -q -p jitccl-capi -p jitccl-cli
cargo build --release -q -p jitccl-benches --example capi_overhead
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for s in "${sizes[@]}"; do
  b=$(numfmt --from=iec "$s")
  # Blocks of about 2-20 ms, 20 rounds.
  block=$(( b <= 65536 ? 5000 : (b <= 1048576 ? 200 : 5) ))
  ratios=()
  for i in $(seq "$runs"); do
    line=$(RUST_COMM_ID=127.0.0.1:$(port) NCCL_COMM_ID=127.0.0.1:$(port) NCCL_SO="$root/target/release/libnccl.so.2" \
      target/release/jitccl launch -n "$nranks" -- target/release/examples/capi_overhead "$b" "$block" 20 | sed -n 's/^\[0\] //p')
    echo "$s, $nranks ranks, run $i: $line"
    ratios+=("$(echo "$line" | sed -n 's/.*c\/rust \([0-9.]*\).*/\1/p')")
  done
  printf '%s\n' "${ratios[@]}" | sort -g | awk -v s="$s" -v n="$nranks" \
    '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%s, %d ranks: C / Rust %.3f (median of %d runs; %.3f..%.3f)\n", s, n, m, NR, a[1], a[NR]}'
done
