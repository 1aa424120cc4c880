#!/usr/bin/env bash
# What authentication and TLS cost (docs/performance.md, "Authentication and TLS"):
#  1. AllReduce bus bandwidth between two network namespaces (2 ranks, one per namespace,
#     joined by a veth pair in 198.18.0.0/15), plain TCP and TLS in interleaved rounds;
#  2. the time of an 8-rank job over the network transport to its first checked collective
#     (`jitccl perf`, 8 bytes, one iteration: init dominates it), with no key, with a key,
#     and with a key and TLS, interleaved.
# Prints the median, the lower quartile (the steadier figure on a loaded machine) and the
# spread (min..max) of each. Needs root and iproute2.
# Usage: benches/auth_tls.sh [rounds] [init rounds] (default 7 and 7), with
# target/release/jitccl built (or JITCCL=path/to/jitccl).
set -euo pipefail
rounds=${1:-7}
init_rounds=${2:-$rounds}
jitccl=${JITCCL:-$(cd "$(dirname "$0")/.." && pwd)/target/release/jitccl}
[ -x "$jitccl" ] || { echo "no jitccl binary at $jitccl: cargo build --release" >&2; exit 1; }
tag="jcbench$$"
# shellcheck source=benches/two_hosts.sh
. "$(dirname "$0")/two_hosts.sh"
cleanup() { two_hosts_down "$tag"; }
trap cleanup EXIT INT TERM
two_hosts_up "$tag"
secret="the benchmark's job secret, not a real one"

# busbw of rank 0's report at the sizes asked, one run, TLS $1 (0 or 1).
busbw() {
    local out
    for r in 0 1; do
        ns=$([ $r = 0 ] && echo a || echo b)
        timeout 120 ip netns exec "${tag}$ns" env MASTER_ADDR=198.18.0.1 MASTER_PORT=29517 RANK=$r WORLD_SIZE=2 \
            LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 JITCCL_SOCKET_IFNAME==veth0 JITCCL_AUTH_KEY="$secret" JITCCL_TLS="$1" \
            "$jitccl" perf all_reduce -b 64K -e 16M -f 16 -w 5 -n 20 >"/tmp/${tag}.$r" 2>&1 &
    done
    wait
    grep -q "Out of bounds values : 0 OK" "/tmp/${tag}.0" || { cat "/tmp/${tag}.0" >&2; exit 1; }
    # nccl-tests' columns: size ... out-of-place busbw is the 8th field.
    awk '!/^#/ && NF > 8 { print $1, $8 }' "/tmp/${tag}.0"
}

# Wall time in ms of one 8-rank job over the network transport, with the environment given.
job_ms() {
    local t0 t1
    t0=$(date +%s%N)
    env JITCCL_TRANSPORT=net "$@" timeout 120 "$jitccl" perf all_reduce -N 8 -b 8 -e 8 -n 1 -w 0 >"/tmp/${tag}.job" 2>&1 ||
        { cat "/tmp/${tag}.job" >&2; exit 1; }
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}

summary() {
    sort -n | awk '{ v[NR] = $1 } END {
        printf "median %s, lower quartile %s, spread %s..%s (%d runs)\n", v[int((NR + 1) / 2)], v[int((NR + 3) / 4)], v[1], v[NR], NR }'
}

: >"/tmp/${tag}.bw"
: >"/tmp/${tag}.init"
for ((i = 0; i < rounds; i++)); do
    for tls in 0 1; do busbw $tls | sed "s/^/$tls /" >>"/tmp/${tag}.bw"; done
done
for ((i = 0; i < init_rounds; i++)); do
    echo "none $(job_ms JITCCL_AUTH_KEY=)" >>"/tmp/${tag}.init"
    echo "key $(job_ms JITCCL_AUTH_KEY="$secret")" >>"/tmp/${tag}.init"
    echo "key+tls $(job_ms JITCCL_AUTH_KEY="$secret" JITCCL_TLS=1)" >>"/tmp/${tag}.init"
done
echo "AllReduce busbw (GB/s), 2 ranks in two namespaces:"
for size in $(awk '{ print $2 }' "/tmp/${tag}.bw" | sort -nu); do
    for tls in 0 1; do
        printf "  %9s B  %-5s " "$size" "$([ $tls = 1 ] && echo TLS || echo TCP)"
        awk -v s="$size" -v t="$tls" '$1 == t && $2 == s { print $3 }' "/tmp/${tag}.bw" | summary
    done
done
echo "8-rank job to its first collective (ms), JITCCL_TRANSPORT=net:"
for how in none key key+tls; do
    printf "  %-8s " "$how"
    awk -v h="$how" '$1 == h { print $2 }' "/tmp/${tag}.init" | summary
done
rm -f /tmp/${tag}.*
