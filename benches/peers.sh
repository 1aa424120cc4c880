#!/usr/bin/env bash
# jitccl beside OpenMPI's TCP transport and Gloo across hosts: H network namespaces
# ("hosts", made here) joined by a bridge, L rank processes in each, every byte between
# hosts through TCP over the hosts' links, unlimited or rate-limited. For each collective
# (AllReduce f32 sum, AllGather, ReduceScatter f32 sum, Broadcast, AlltoAll; out of place
# where it has two buffers, Broadcast in place on every side, Gloo's AllReduce in place) and
# size:
#
# - jitccl: `jitccl perf COLL -z 1 -a 3` as rank processes in torchrun's environment,
#   JITCCL_SOCKET_IFNAME pinned to the host's link (between hosts the network, within a
#   host jitccl's own choice);
# - OpenMPI: benches/mpi/ (allreduce.c, spread.c, moves.c) under `mpirun --mca pml ob1
#   --mca btl self,tcp` (TCP within a host too), btl_tcp_if_include and oob_tcp_if_include
#   pinned to the hosts' subnet, ranks not bound to cores (nor are the other sides').
#   mpirun runs in the bridge's namespace, which has an address on the bridge, and starts
#   its daemons in the hosts' namespaces through benches/netns_rsh.sh (`--mca
#   plm_rsh_agent`, a hostfile of the namespaces' names), as it would start them on other
#   machines over ssh;
# - Gloo: torch.distributed on CPU tensors (benches/torch/gloo_perf.py in the PyTorch chroot
#   of scripts/setup-torch.sh), GLOO_SOCKET_IFNAME pinned to the host's link.
#
# Every side times its calls the same way: the same warm-up and iteration counts per size,
# a barrier, then each call waited for; the figure is the slowest rank's time per call, and
# each run checks one call's results (a wrong element ends the bench). Sizes count bytes as
# nccl-tests do (AllGather's output, ReduceScatter's and AlltoAll's input), rounded up to
# a whole float per rank. Each round runs every side in turn (the first side rotating from
# round to round; Gloo's collectives all from one start of PyTorch, which takes seconds), so
# a phase of the machine's load hits all of them; each figure is the median of the rounds
# with the spread of the times around it (min..max, in % of it), and the ratio is jitccl's
# median over the peer's (<= 1.00: jitccl at least as fast). The machine's load average
# (1 min) is sampled before every run and shown per table.
#
# Usage: benches/peers.sh [SIZE...]     (default sizes: 8 64K 1M 16M; FULL=1: 8 B to 256 MiB
#                                        by 8x, and 256 MiB)
# Environment:
#   HOSTS     host counts (default "2 4")
#   PER_HOST  ranks per host (default "1"; the full set: "1 2")
#   RATES     each host's link: "none" (unlimited) or a tc rate such as 1gbit, limiting both
#             ends of the link with tbf (default "none 1gbit")
#   COLLS     collectives (default "all_reduce all_gather reduce_scatter broadcast all_to_all")
#   SIDES     (default "mpi gloo jitccl")
#   BASELINE  another jitccl binary (an older build) to run as one more side, "before"
#   ROUNDS    rounds per figure (default 3)
#   ITERS     most timed iterations per run (default: by size, 1000 at 8 B down to 3 at
#             256 MiB; warm-up a fifth of them)
#   LIMIT     seconds any one run may take (default 300)
# Needs root (namespaces), iproute2 (ip, tc), OpenMPI (mpicc, mpirun) and, for Gloo, the
# chroot of scripts/setup-torch.sh (made on first use). Namespaces are named
# jcpeers<pid>-*, in 198.18.0.0/24 (198.18.0.0/15 is set aside for network benchmarks),
# and removed with everything running in them on every exit. Logs and every sample:
# $CARGO_TARGET_DIR/peers-bench/ (default target/peers-bench/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
full_sizes="8 64 512 4K 32K 256K 2M 16M 128M 256M"
if [ $# -eq 0 ]; then
  if [ "${FULL:-0}" = 1 ]; then set -- $full_sizes; else set -- 8 64K 1M 16M; fi
fi
hosts_list=${HOSTS:-2 4}
per_host_list=${PER_HOST:-$([ "${FULL:-0}" = 1 ] && echo "1 2" || echo 1)}
rates=${RATES:-none 1gbit}
colls=${COLLS:-all_reduce all_gather reduce_scatter broadcast all_to_all}
sides=${SIDES:-mpi gloo jitccl}
rounds=${ROUNDS:-3}
limit=${LIMIT:-300}
iters_cap=${ITERS:-0}
die() { echo "peers.sh: $*" >&2; exit 1; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive count"
[[ $iters_cap =~ ^[0-9]+$ ]] || die "ITERS must be a count"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
for c in $colls; do
  case $c in all_reduce | all_gather | reduce_scatter | broadcast | all_to_all) ;; *) die "unknown collective '$c'" ;; esac
done
for s in $sides; do
  case $s in mpi | gloo | jitccl) ;; *) die "unknown side '$s' (mpi, gloo, jitccl)" ;; esac
done
[[ " $sides " == *" jitccl "* ]] || die "SIDES must include jitccl (the ratios are against it)"
[ -z "${BASELINE:-}" ] || { [ -x "$BASELINE" ] || die "BASELINE $BASELINE is not a program"; sides="$sides before"; }
for h in $hosts_list; do [[ $h =~ ^[1-9][0-9]*$ ]] && [ "$h" -le 200 ] || die "bad host count '$h' (1 to 200)"; done
for l in $per_host_list; do [[ $l =~ ^[1-9][0-9]*$ ]] || die "bad ranks per host '$l'"; done

# shellcheck source=benches/rounds.sh
. "$root/benches/rounds.sh"
# A size as every side runs it at n ranks: the collectives of n blocks need a whole float
# per rank, so round up to a multiple of 4n bytes.
bytes_for() { # coll size n
  local b
  b=$(to_bytes "$2")
  case $1 in all_reduce | broadcast) echo "$b" ;; *) echo $(((b + 4 * $3 - 1) / (4 * $3) * 4 * $3)) ;; esac
}

for s in "$@"; do to_bytes "$s" >/dev/null; done

# Timed iterations at `bytes`, within ITERS.
iters_at() {
  local i
  i=$(iters_for "$1")
  [ "$iters_cap" = 0 ] || [ "$i" -le "$iters_cap" ] || i=$iters_cap
  echo "$i"
}

logs=$target/peers-bench
mkdir -p "$logs"
jitccl=$target/release/jitccl
if [[ " $sides " == *" mpi "* ]]; then
  command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
    die "mpicc/mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
  for p in allreduce spread moves; do
    mpicc -O2 -o "$logs/$p" "benches/mpi/$p.c" || die "mpicc failed on benches/mpi/$p.c"
  done
fi
cargo build --release --quiet -p jitccl-cli || die "cargo build failed"
if [[ " $sides " == *" gloo "* ]]; then
  bash scripts/setup-torch.sh >/dev/null || die "scripts/setup-torch.sh failed (Gloo needs its chroot)"
fi

# --- the hosts -------------------------------------------------------------------------
tag="jcpeers$$"
made=()
# Removes every namespace made here, ending what still runs in them first (only this
# bench's processes live there).
hosts_down() {
  local ns
  for ns in "${made[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  made=()
}
# OpenMPI's daemons' folders, one per namespace (benches/netns_rsh.sh).
export NETNS_RSH_TMPDIR=$logs/mpi-tmp
trap 'hosts_down; rm -rf "$NETNS_RSH_TMPDIR"' EXIT
trap 'exit 130' INT TERM
# H hosts, $tag-0 .. $tag-(H-1), each with net0 at 198.18.0.(i+1)/24 joined to the bridge
# br0 in the namespace $tag-br (198.18.0.254), where mpirun runs.
hosts_up() { # h
  local i ns
  ip netns add "$tag-br"
  made+=("$tag-br")
  ip -n "$tag-br" link set lo up
  ip -n "$tag-br" link add br0 type bridge
  ip -n "$tag-br" addr add 198.18.0.254/24 dev br0
  ip -n "$tag-br" link set br0 up
  for ((i = 0; i < $1; i++)); do
    ns=$tag-$i
    ip netns add "$ns"
    made+=("$ns")
    ip -n "$ns" link set lo up
    ip -n "$ns" link add net0 type veth peer name "p$i" netns "$tag-br"
    ip -n "$tag-br" link set "p$i" master br0 up
    ip -n "$ns" addr add "198.18.0.$((i + 1))/24" dev net0
    ip -n "$ns" link set net0 up
  done
}
# Limits every host's link to `rate` each way (tbf on both ends), or lifts the limits.
hosts_rate() { # h rate
  local i bits ns dev ns_dev
  for ((i = 0; i < $1; i++)); do
    for ns_dev in "$tag-$i:net0" "$tag-br:p$i"; do
      ns=${ns_dev%%:*} dev=${ns_dev#*:}
      if [ "$2" = none ]; then
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
      else
        bits=$(numfmt --from=si "$(tr a-z A-Z <<<"${2%bit}")") || die "bad rate '$2' (expected e.g. 1gbit)"
        # A burst of one timer tick's worth of bytes (at 100 Hz), at least 16 KiB.
        tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$2" burst $((bits / 800 > 16384 ? bits / 800 : 16384)) latency 100ms
      fi
    done
  done
}

# --- one run of each side: prints "bytes time_us wrong" per size ------------------------
port=30000
next_port() { port=$((port == 30999 ? 30000 : port + 1)); }
mpirun_args=(--allow-run-as-root --bind-to none --mca plm_rsh_agent "$root/benches/netns_rsh.sh" --mca pml ob1 --mca btl self,tcp
  --mca btl_tcp_if_include 198.18.0.0/24 --mca oob_tcp_if_include 198.18.0.0/24)
# Rank r's torchrun environment on host r / l.
rank_env() { # r h l port
  echo MASTER_ADDR=198.18.0.1 MASTER_PORT="$4" RANK="$1" WORLD_SIZE=$(($2 * $3)) LOCAL_RANK=$(($1 % $3)) LOCAL_WORLD_SIZE="$3"
}
run_mpi() { # coll h l bytes iters log
  local prog=spread
  case $1 in all_reduce) prog=allreduce ;; all_to_all) prog=moves ;; esac
  local i w=$(($5 / 5 + 1))
  for ((i = 0; i < $2; i++)); do echo "$tag-$i slots=$3"; done >"$logs/hostfile"
  local coll=(-c "$1")
  [ "$prog" != allreduce ] || coll=()
  timeout "$limit" ip netns exec "$tag-br" mpirun "${mpirun_args[@]}" --hostfile "$logs/hostfile" -np $(($2 * $3)) \
    "$logs/$prog" "${coll[@]}" -w "$w" -i "$5" "$4" >"$6" 2>&1 || true
  awk '$1 ~ /^[0-9]+$/ && NF >= 7 { print $1, $2, $5 }' "$6"
}
run_jitccl() { # coll h l bytes iters log
  local r op=()
  case $1 in all_reduce | reduce_scatter) op=(-o sum) ;; esac
  next_port
  for ((r = 0; r < $2 * $3; r++)); do
    # shellcheck disable=SC2046 # one word per variable
    timeout "$limit" ip netns exec "$tag-$((r / $3))" env -u NCCL_COMM_ID -u JITCCL_COMM_ID -u JITCCL_TRANSPORT \
      $(rank_env "$r" "$2" "$3" "$port") JITCCL_SOCKET_IFNAME==net0 \
      "${bin:-$jitccl}" perf "$1" -N $(($2 * $3)) -b "$4" -e "$4" -d float "${op[@]}" -w $(($5 / 5 + 1)) -n "$5" -z 1 -a 3 >"$6.$r" 2>&1 &
  done
  wait
  # The out-of-place columns, but Broadcast's in place: MPI_Bcast and Gloo's broadcast have
  # one buffer, where an out-of-place root also copies its input to its output.
  local at=6
  [ "$1" != broadcast ] || at=10
  awk -v at="$at" '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $at, $(at + 3) }' "$6.0"
}
run_before() { bin=$BASELINE run_jitccl "$@"; }
run_gloo() { # h l "coll:bytes:warmup:iters..." log
  local r
  next_port
  for ((r = 0; r < $1 * $2; r++)); do
    # shellcheck disable=SC2046,SC2086 # one word per variable, per run
    timeout "$limit" ip netns exec "$tag-$((r / $2))" env $(rank_env "$r" "$1" "$2" "$port") GLOO_SOCKET_IFNAME=net0 \
      USE_LIBUV=0 PYTHONDONTWRITEBYTECODE=1 \
      bash scripts/setup-torch.sh run python3 benches/torch/gloo_perf.py $3 >"$4.$r" 2>&1 &
  done
  wait
}
# The "bytes time_us wrong" lines of one collective in a run of gloo_perf.py.
gloo_rows() { # coll log
  awk -v c="$1" '$1 == "#" && $2 == "torch.distributed" { cur = $3 } cur == c && $1 ~ /^[0-9]+$/ && NF >= 7 { print $1, $2, $5 }' "$2"
}

# --- the rounds ------------------------------------------------------------------------
samples=$logs/samples.tsv
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' hosts per_host rate coll bytes side round time_us wrong load >"$samples"
failures=0
# Appends one run's "bytes time wrong" lines to the samples; a run short of sizes is noted.
record() { # h l rate coll side round load expected_sizes log
  local h=$1 l=$2 rate=$3 coll=$4 side=$5 round=$6 load=$7 want=$8 log=$9 b t w got=0
  while read -r b t w; do
    [ "$w" = 0 ] || die "$side, $coll at $b B, $h hosts x $l: $w wrong elements (log: $log)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$h" "$l" "$rate" "$coll" "$b" "$side" "$round" "$t" "$w" "$load" >>"$samples"
    got=$((got + 1))
  done
  if [ "$got" -lt "$want" ]; then
    echo "peers.sh: $side, $coll, $h hosts x $l, link $rate, round $round: $got of $want sizes (log: $log*)" >&2
    failures=$((failures + 1))
  fi
}
load() { cut -d' ' -f1 /proc/loadavg; }

# One table: a row per collective and size, a column group per side.
table() { # h l rate
  awk -F'\t' -v h="$1" -v l="$2" -v rate="$3" -v sides="$sides" "$stats_awk"'
    NR > 1 && $1 == h && $2 == l && $3 == rate {
      key = $4 SUBSEP $5
      if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
      t[key, $6] = t[key, $6] " " $8
      if (lmin == "" || $10 < lmin) lmin = $10
      if ($10 > lmax) lmax = $10
    }
    END {
      printf "# %d hosts x %d ranks, link %s; load average (1 min) %s..%s during these runs\n", h, l, rate, lmin, lmax
      ns = split(sides, s, " ")
      printf "# %-14s %10s |", "coll", "bytes"
      for (j = 1; j <= ns; j++) printf " %10s %11s |", s[j] "_us", "spread"
      for (j = 1; j <= ns; j++) if (s[j] != "jitccl") printf " %9s", "j/" s[j]
      print ""
      for (o = 1; o <= nk; o++) {
        split(order[o], kb, SUBSEP)
        printf "  %-14s %10s |", kb[1], kb[2]
        for (j = 1; j <= ns; j++) {
          if ((order[o], s[j]) in t) split(stats(t[order[o], s[j]]), q, " ")
          else { q[1] = "-"; q[2] = "-" }
          med[s[j]] = q[1]
          printf " %10s %11s |", q[1], q[2]
        }
        for (j = 1; j <= ns; j++) if (s[j] != "jitccl")
          printf " %9s", (med[s[j]] == "-" || med["jitccl"] == "-") ? "-" : sprintf("%.2f", med["jitccl"] / med[s[j]])
        print ""
      }
    }' "$samples"
}

echo "# peers.sh: jitccl beside OpenMPI $(mpirun --version 2>/dev/null | head -n 1 | awk '{print $NF}') (pml ob1, btl self,tcp) and Gloo, across network namespaces joined by a bridge, $(nproc) cores"
echo "# each figure: median of $rounds interleaved rounds in us per call, spread min..max in % of it; j/peer = jitccl's median / the peer's (<= 1.00: jitccl at least as fast)"
nside=$(wc -w <<<"$sides")
for h in $hosts_list; do
  hosts_down
  hosts_up "$h"
  for l in $per_host_list; do
    n=$((h * l))
    for rate in $rates; do
      hosts_rate "$h" "$rate"
      for round in $(seq 1 "$rounds"); do
        # The first side rotates from round to round.
        order=$(awk -v r="$round" -v k="$nside" '{ for (i = 0; i < k; i++) printf "%s ", $((i + r - 1) % k + 1) }' <<<"$sides")
        for side in $order; do
          if [ "$side" = gloo ]; then
            # One start of PyTorch for all the collectives of the round.
            base=$logs/gloo-h$h-l$l-$rate.$round runs=""
            for coll in $colls; do
              for s in "$@"; do
                b=$(bytes_for "$coll" "$s" "$n") i=$(iters_at "$b")
                runs+="$coll:$b:$((i / 5 + 1)):$i "
              done
            done
            ld=$(load)
            run_gloo "$h" "$l" "$runs" "$base.log"
            for coll in $colls; do
              record "$h" "$l" "$rate" "$coll" gloo "$round" "$ld" $# "$base.log" < <(gloo_rows "$coll" "$base.log.0")
            done
            continue
          fi
          for coll in $colls; do
            for s in "$@"; do
              base=$logs/$side-h$h-l$l-$rate-$coll.$round
              b=$(bytes_for "$coll" "$s" "$n") i=$(iters_at "$b") ld=$(load)
              record "$h" "$l" "$rate" "$coll" "$side" "$round" "$ld" 1 "$base-$b.log" \
                < <("run_$side" "$coll" "$h" "$l" "$b" "$i" "$base-$b.log")
            done
          done
        done
      done
      table "$h" "$l" "$rate"
    done
  done
  hosts_rate "$h" none
done
[ "$failures" = 0 ] || die "$failures runs gave no result for some sizes (their logs are named above)"
