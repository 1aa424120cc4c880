#!/usr/bin/env bash
# What the network plugin layer costs (docs/performance.md, "Network plugins"): 2 ranks, one
# in each of two network namespaces joined by a veth pair in 198.18.0.0/15, run SendRecv and
# AllReduce (`jitccl perf`, sizes 8 B to 64 MiB) over the built-in Socket and over the
# project's Fabric plugin (libfabric's tcp provider), and, in the same run, the plugin's own
# isend/irecv exchanging the same bytes
# (benches/netplugin_raw.c: each side sends SIZE and receives SIZE per iteration, as a
# 2-rank SendRecv does), once in one message a size and once in 512 KiB messages, 8 at once
# (as jitccl's 4 MiB FIFOs of 8 steps move them: what that design can take at best). Prints
# per size the time (µs) of each (the raw plugin's median, jitccl's mean) and the ratios to the
# raw plugin's one message. Needs root, iproute2, cc and libfabric.
# Usage: benches/net_plugin.sh [iterations] (default 10) with target/release/jitccl and the
# plugins built (cargo build --release), or JITCCL=path/to/jitccl, FABRIC=path/to/libnccl-net-fabric.so.
set -euo pipefail
iters=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
jitccl=${JITCCL:-$root/target/release/jitccl}
fabric=${FABRIC:-$(ls -t "$root"/target/release/build/jitccl-plugins-*/out/libnccl-net-fabric.so 2>/dev/null | head -1)}
[ -x "$jitccl" ] || { echo "no jitccl binary at $jitccl: cargo build --release" >&2; exit 1; }
[ -f "$fabric" ] || { echo "no Fabric plugin (FABRIC=...): cargo build --release -p jitccl-plugins" >&2; exit 1; }
tag="jcnp$$"
work=$(mktemp -d)
# shellcheck source=benches/two_hosts.sh
. "$(dirname "$0")/two_hosts.sh"
cleanup() { two_hosts_down "$tag"; rm -rf "$work"; }
trap cleanup EXIT INT TERM
two_hosts_up "$tag"
cc -O2 -I"$root/plugins/include" "$root/benches/netplugin_raw.c" -o "$work/raw" -ldl
sizes="8 64 512 4096 32768 262144 2097152 16777216 67108864"
pin=(FI_PROVIDER=tcp FI_TCP_IFACE=veth0 JITCCL_SOCKET_IFNAME==veth0)

# The raw plugin, in messages of at most $1 bytes (0: one a size): "size µs" per size.
raw() {
    rm -f "$work"/handle.*
    timeout 300 ip netns exec "${tag}b" env "${pin[@]}" CHUNK="$1" "$work/raw" "$fabric" 1 "$work" "$iters" $sizes \
        >/dev/null &
    timeout 300 ip netns exec "${tag}a" env "${pin[@]}" CHUNK="$1" "$work/raw" "$fabric" 0 "$work" "$iters" $sizes
    wait
}

# jitccl perf of $1 over the network $2 (Socket or Fabric), sizes as $3 says: "size µs"
# per size (rank 0's out-of-place time), every result checked.
perf() {
    local r ns
    # shellcheck disable=SC2086
    for r in 0 1; do
        ns=$([ $r = 0 ] && echo a || echo b)
        timeout 300 ip netns exec "${tag}$ns" env MASTER_ADDR=198.18.0.1 MASTER_PORT=29519 RANK=$r WORLD_SIZE=2 \
            LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 "${pin[@]}" NCCL_NET_PLUGIN="$fabric" NCCL_NET="$2" \
            "$jitccl" perf "$1" $3 -w 3 -n "$iters" >"$work/perf.$r" 2>&1 &
    done
    wait
    grep -q "Out of bounds values : 0 OK" "$work/perf.0" || { cat "$work/perf.0" >&2; exit 1; }
    # nccl-tests' columns: size count type redop root time ...
    awk '!/^#/ && NF > 8 { print $1, $6 }' "$work/perf.0"
}

raw 0 >"$work/raw.txt"
raw $((512 << 10)) >"$work/raw512k.txt"
for coll in sendrecv all_reduce; do
    for net in Socket Fabric; do
        # 64 MiB is past -f 8's last step from 8 B: a run of its own.
        { perf "$coll" "$net" "-b 8 -e 16M -f 8"; perf "$coll" "$net" "-b 64M -e 64M"; } >"$work/$coll.$net.txt"
    done
done
printf "%-10s %10s %10s %14s %14s %14s %14s %8s %8s\n" size "raw µs" "raw 512K" "sendrecv Sock" "sendrecv Fab" \
    "allred Sock" "allred Fab" "SR/raw" "AR/raw"
for s in $sizes; do
    get() { awk -v s="$s" '$1 == s { print $2 }' "$work/$1"; }
    r=$(get raw.txt) rk=$(get raw512k.txt)
    ss=$(get sendrecv.Socket.txt) sf=$(get sendrecv.Fabric.txt) as=$(get all_reduce.Socket.txt) af=$(get all_reduce.Fabric.txt)
    printf "%-10s %10s %10s %14s %14s %14s %14s %8s %8s\n" "$s" "$r" "$rk" "${ss:--}" "${sf:--}" "${as:--}" "${af:--}" \
        "$([ -n "$sf" ] && awk -v a="$sf" -v b="$r" 'BEGIN { printf "%.2f", a / b }' || echo -)" \
        "$([ -n "$af" ] && awk -v a="$af" -v b="$r" 'BEGIN { printf "%.2f", a / b }' || echo -)"
done
