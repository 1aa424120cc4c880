#!/usr/bin/env bash
# jitccl's network transport beside OpenMPI's TCP transport, over loopback, in one run:
# f32 sum AllReduce, out of place, every byte through TCP on both sides
# (`JITCCL_TRANSPORT=net` rank processes; `mpirun --mca pml ob1 --mca btl self,tcp` pinned
# to lo), each call synchronized (`perf -z 1`: MPI_Allreduce blocks). The sides alternate
# within each round, so a phase of the machine's load hits all of them; each figure is the
# median of the rounds, with the spread of the times around it, and the ratio to OpenMPI's
# median of the same run.
#
# Usage: benches/socket.sh [SIZE...]        (default sizes: 8 64K 1M 16M)
# Environment:
#   NRANKS    rank counts (default "2 4"; 0: no loopback rows)
#   ROUNDS    rounds per figure (default 5)
#   BASELINE  another jitccl binary (an older build) to run as a third side, "before"
#   LIMIT     seconds any one run may take (default 120)
#   RATE      also run jitccl between two network namespaces (one rank each, a veth pair in
#             198.18.0.0/15, made and removed here; mpirun cannot reach ranks there), both
#             ends rate-limited to RATE (tc tbf, e.g. 1gbit; "none": unlimited), and report
#             busbw against the rate, at the sizes of 1 MiB and more
# Logs and every sample: $CARGO_TARGET_DIR/socket-bench/ (default target/socket-bench/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
nranks_list=${NRANKS:-2 4}
rounds=${ROUNDS:-5}
limit=${LIMIT:-120}
[ $# -gt 0 ] || set -- 8 64K 1M 16M
die() { echo "socket.sh: $*" >&2; exit 1; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive count"
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  die "mpicc/mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"

# shellcheck source=benches/rounds.sh
. "$root/benches/rounds.sh"

logs=$target/socket-bench
mkdir -p "$logs"
mpicc -O2 -o "$logs/allreduce" benches/mpi/allreduce.c || die "mpicc failed on benches/mpi/allreduce.c"
cargo build --release --quiet -p jitccl-cli || die "cargo build failed"
jitccl=$target/release/jitccl
sides="mpi jitccl"
[ -z "${BASELINE:-}" ] || { [ -x "$BASELINE" ] || die "BASELINE $BASELINE is not a program"; sides="mpi before jitccl"; }
mpirun_args=(--oversubscribe --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
  --mca oob_tcp_if_include lo)
[ "$(id -u)" != 0 ] || mpirun_args+=(--allow-run-as-root)

# One run: prints "time_us wrong".
run() { # side n bytes iters log
  local side=$1 n=$2 b=$3 i=$4 log=$5 w=$(($4 / 5 + 1)) bin=$jitccl
  case $side in
    mpi)
      timeout "$limit" mpirun "${mpirun_args[@]}" -np "$n" "$logs/allreduce" -w "$w" -i "$i" "$b" >"$log" 2>&1 || true
      awk '$1 ~ /^[0-9]+$/ && NF >= 7 { print $2, $5; f = 1; exit } END { exit !f }' "$log" ;;
    *)
      [ "$side" = jitccl ] || bin=$BASELINE
      JITCCL_TRANSPORT=net timeout "$limit" "$bin" perf all_reduce -N "$n" -b "$b" -e "$b" -d float -o sum \
        -w "$w" -n "$i" -z 1 -a 3 >"$log" 2>&1 || true
      awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $6, $9; f = 1; exit } END { exit !f }' "$log" ;;
  esac || die "$side with $n ranks, $b B gave no result (log: $log)"
}

echo "# socket.sh: AllReduce f32 sum over TCP on loopback, $(nproc) cores; OpenMPI $(mpirun --version 2>/dev/null | head -n 1 | awk '{print $NF}') (pml ob1, btl self,tcp, lo) beside jitccl (JITCCL_TRANSPORT=net, perf -z 1)"
echo "# each figure: median of $rounds interleaved rounds, spread min..max in % of it; ratio = median / OpenMPI's median (<= 1.00: jitccl at least as fast)"
printf '%s\t%s\t%s\t%s\t%s\t%s\n' n bytes side round time_us wrong >"$logs/samples.tsv"
printf '# %2s %9s | %10s %11s |' n bytes mpi_us spread
for s in $sides; do [ "$s" = mpi ] || printf ' %10s %11s %6s |' "${s}_us" spread ratio; done
echo
for n in $nranks_list; do
  [ "$n" -gt 0 ] || continue
  for s in "$@"; do
    b=$(to_bytes "$s") i=$(iters_for "$(to_bytes "$s")")
    for r in $(seq 1 "$rounds"); do
      for side in $sides; do
        read -r t wrong < <(run "$side" "$n" "$b" "$i" "$logs/$side-n$n-$b.$r.log")
        [ "$wrong" = 0 ] || die "$side with $n ranks, $b B: $wrong wrong elements (log: $logs/$side-n$n-$b.$r.log)"
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$b" "$side" "$r" "$t" "$wrong" >>"$logs/samples.tsv"
      done
    done
    # median and spread per side, from this row's samples
    awk -F'\t' -v n="$n" -v b="$b" -v sides="$sides" "$stats_awk"'
      $1 == n && $2 == b { t[$3] = t[$3] " " $5 }
      END {
        split(stats(t["mpi"]), p, " "); printf "  %2s %9s | %10s %11s |", n, b, p[1], p[2]
        ns = split(sides, s, " ")
        for (j = 1; j <= ns; j++) if (s[j] != "mpi") {
          split(stats(t[s[j]]), q, " "); printf " %10s %11s %6.2f |", q[1], q[2], q[1] / p[1]
        }
        print ""
      }' "$logs/samples.tsv"
  done
done

# --- between two namespaces, the link rate-limited ---------------------------------------
[ -n "${RATE:-}" ] || exit 0
[ "$(id -u)" = 0 ] || die "RATE needs root (network namespaces)"
tag="jcsock$$"
# shellcheck source=benches/two_hosts.sh
. "$root/benches/two_hosts.sh"
trap 'two_hosts_down "$tag"' EXIT INT TERM
two_hosts_up "$tag"
bits=0
if [ "$RATE" != none ]; then
  bits=$(numfmt --from=si "$(tr a-z A-Z <<<"${RATE%bit}")")
  for h in a b; do
    # A burst of one timer tick's worth of bytes (at 100 Hz), as benches/wire.sh sets it.
    tc -n "${tag}$h" qdisc replace dev veth0 root tbf rate "$RATE" burst $((bits / 800)) latency 100ms
  done
fi
# busbw (GB/s) of one run of `bin` between the namespaces at `bytes`.
hosts_run() { # bin bytes iters log
  for r in 0 1; do
    h=$([ $r = 0 ] && echo a || echo b)
    timeout "$limit" ip netns exec "${tag}$h" env MASTER_ADDR=198.18.0.1 MASTER_PORT=29531 RANK=$r WORLD_SIZE=2 \
      LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 JITCCL_SOCKET_IFNAME==veth0 \
      "$1" perf all_reduce -b "$2" -e "$2" -d float -o sum -w $(($3 / 5 + 1)) -n "$3" -z 1 >"$4.$r" 2>&1 &
  done
  wait
  # busbw from the time (perf prints two decimals): at 2 ranks, bytes per time.
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 && $9 == 0 { printf "%.4f\n", $1 / $6 / 1000; f = 1; exit } END { exit !f }' "$4.0" ||
    die "jitccl between namespaces at $2 B gave no checked result (log: $4.0)"
}
echo "# between two namespaces, 1 rank each, link $RATE: busbw GB/s, median of $rounds interleaved rounds (% of the rate)"
: >"$logs/hosts.tsv"
for s in "$@"; do
  b=$(to_bytes "$s") i=$(iters_for "$(to_bytes "$s")")
  # The link's rate bounds the large sizes only.
  [ "$b" -ge $((1 << 20)) ] || continue
  for r in $(seq 1 "$rounds"); do
    for side in $sides; do
      [ "$side" != mpi ] || continue
      bin=$jitccl
      [ "$side" = jitccl ] || bin=$BASELINE
      printf '%s\t%s\t%s\n' "$side" "$b" "$(hosts_run "$bin" "$b" "$i" "$logs/hosts-$side-$b.$r.log")" >>"$logs/hosts.tsv"
    done
  done
  for side in $sides; do
    [ "$side" != mpi ] || continue
    awk -F'\t' -v b="$b" -v side="$side" '$1 == side && $2 == b { print $3 }' "$logs/hosts.tsv" | sort -g |
      awk -v b="$b" -v side="$side" -v bits="$bits" '{ v[NR] = $1 } END {
        m = v[int((NR + 1) / 2)]
        printf "  %9s %-7s %8.3f  %s\n", b, side, m, (bits > 0) ? sprintf("%.0f%%", 100 * m * 8e9 / bits) : "" }'
  done
done
