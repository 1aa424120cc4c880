#!/usr/bin/env bash
# What the wire formats give (docs/performance.md, "Wire formats"):
#  1. across two hosts: two network namespaces joined by a veth pair in 198.18.0.0/15 whose
#     ends are both rate-limited (tc tbf, 1 Gbit/s unless told), so that the link bounds the
#     exact run; 2 hosts x 1 rank and 2 hosts x 2 ranks (a host's ranks share memory, the
#     network transport joins the hosts); AllReduce busbw, counted on the f32 bytes, of the
#     exact, bf16, fp8e4m3 and int8 wires;
#  2. within one host (no namespace, no limit: shared memory): 2 rank processes, each wire's
#     AllReduce time against the exact one's, with JITCCL_WIRE_LOCAL=encode (without it, the
#     wired calls of a communicator on one host run exactly).
# The wires run in interleaved rounds, their order rotating from round to round; every run
# checks its results (`jitccl perf --wire`: within the wire's bound, the same bits on every
# rank). Prints per size and wire the median busbw (or time) and its spread (min..max), and
# the median of the per-round ratios to the exact run of the same round. Needs root, iproute2.
# Usage: benches/wire.sh [rounds] [rate] [host rounds] (default 5, 1gbit, 5), with
# target/release/jitccl built (or JITCCL=path/to/jitccl); SIZES='-b 256K -e 64M -f 4' the sweep,
# LAYOUTS='1 2' the ranks per host.
set -euo pipefail
rounds=${1:-5}
rate=${2:-1gbit}
host_rounds=${3:-$rounds}
jitccl=${JITCCL:-$(cd "$(dirname "$0")/.." && pwd)/target/release/jitccl}
[ -x "$jitccl" ] || { echo "no jitccl binary at $jitccl: cargo build --release" >&2; exit 1; }
wires=(exact bf16 fp8e4m3 int8)
layouts=${LAYOUTS:-1 2}
# shellcheck disable=SC2206 # words on purpose: perf flags
sizes=(${SIZES:--b 256K -e 64M -f 4})
tag="jcwire$$"
out="/tmp/${tag}"
# shellcheck source=benches/two_hosts.sh
. "$(dirname "$0")/two_hosts.sh"
cleanup() {
    # This script's rank processes first (each under its own `timeout`), then what it made.
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
    two_hosts_down "$tag"
    rm -f "${out}".*
}
trap cleanup EXIT INT TERM
two_hosts_up "$tag"
for n in a b; do
    # A burst of one timer tick's worth of bytes (at 100 Hz), as tests/common/hosts.rs sets it.
    tc -n "${tag}$n" qdisc replace dev veth0 root tbf rate "$rate" burst "$(($(numfmt --from=si "$(tr a-z A-Z <<<"${rate%bit}")") / 800))" \
        latency 100ms
done

# Prints "size busbw time" of rank 0's out-of-place columns ($3 ranks; busbw from the time,
# as perf counts it but with more digits); fails unless the check passed.
table() {
    grep -q "Out of bounds values : 0 OK" "$1" || { echo "$2 failed:" >&2; cat "$1" >&2; exit 1; }
    awk -v n="$3" '!/^#/ && NF > 8 { print $1, $1 / $6 / 1e3 * 2 * (n - 1) / n, $6 }' "$1"
}

# One run across the hosts: $1 ranks per host, $2 the wire.
across() {
    local l=$1 wire=$2 n=$(($1 * 2)) r
    for ((r = 0; r < n; r++)); do
        ns=$([ $r -lt "$l" ] && echo a || echo b)
        timeout 600 ip netns exec "${tag}$ns" env MASTER_ADDR=198.18.0.1 MASTER_PORT=29531 RANK=$r WORLD_SIZE=$n \
            LOCAL_RANK=$((r % l)) LOCAL_WORLD_SIZE="$l" JITCCL_SOCKET_IFNAME==veth0 JITCCL_TIMEOUT=300 \
            "$jitccl" perf all_reduce -N $n --wire "$wire" "${sizes[@]}" -w 1 -n 2 >"${out}.$r" 2>&1 &
    done
    wait
    table "${out}.0" "$wire across 2 hosts x $l" $n
}

# One run within this host: 2 rank processes (perf starts them), the wire $1.
within() {
    timeout 600 env JITCCL_WIRE_LOCAL=encode "$jitccl" perf all_reduce -N 2 --wire "$1" "${sizes[@]}" -w 2 -n 5 >"${out}.host" 2>&1 || true
    table "${out}.host" "$1 within the host" 2
}

# The wires of round $1, rotated by it.
order() {
    local k
    for ((k = 0; k < ${#wires[@]}; k++)); do echo "${wires[(k + $1) % ${#wires[@]}]}"; done
}

# From lines "round wire size value", per size and wire: the median value, its spread, and
# the median over rounds of value / exact's value in that round ($1: what the value is).
summary() {
    awk -v what="$1" -v wires="${wires[*]}" '
        function sorted(x, n,    i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
        }
        BEGIN { nw = split(wires, order, " ") }
        { v[$3, $2, $1] = $4; sizes[$3] = 1; rounds[$1] = 1 }
        END {
            for (s in sizes) {
                for (k = 1; k <= nw; k++) {
                    w = order[k]; m = 0; q = 0
                    for (r in rounds) {
                        if (!((s, w, r) in v)) continue
                        a[++m] = v[s, w, r]
                        if ((s, "exact", r) in v) b[++q] = v[s, w, r] / v[s, "exact", r]
                    }
                    sorted(a, m); sorted(b, q)
                    printf "%10d B %-8s %s median %9.4f  spread %.4f..%.4f  vs exact %.2fx (%d rounds)\n", s, w, what,
                        (a[int((m + 1) / 2)] + a[int(m / 2) + 1]) / 2, a[1], a[m], (b[int((q + 1) / 2)] + b[int(q / 2) + 1]) / 2, m
                    split("", a); split("", b)
                }
            }
        }' | sort -n -k1,1 -s
}

for l in $layouts; do
    : >"${out}.bw$l"
    for ((i = 0; i < rounds; i++)); do
        for wire in $(order "$i"); do
            # Not in a pipeline: the ranks stay this shell's jobs, which `cleanup` ends.
            across "$l" "$wire" >"${out}.rows"
            awk -v r="$i" -v w="$wire" '{ print r, w, $1, $2 }' "${out}.rows" >>"${out}.bw$l"
        done
    done
done
: >"${out}.time"
for ((i = 0; i < host_rounds; i++)); do
    for wire in $(order "$i"); do
        within "$wire" | awk -v r="$i" -v w="$wire" '{ print r, w, $1, $3 }' >>"${out}.time"
    done
done
for l in $layouts; do
    echo "AllReduce across 2 hosts x $l rank(s), link $rate each way, busbw (GB/s, f32 bytes):"
    summary busbw <"${out}.bw$l"
done
echo "AllReduce within one host, 2 ranks (shared memory), time (us):"
summary time <"${out}.time"
