#!/usr/bin/env bash
# Side-by-side AlltoAll, AlltoAllv, Gather, Scatter and Send/Recv on the host target, in one
# run: OpenMPI's MPI_Alltoall / MPI_Alltoallv / MPI_Gather / MPI_Scatter / MPI_Sendrecv (to
# rank + 1, from rank - 1) over its shared-memory BTL (benches/mpi/moves.c) against
# `jitccl perf` of the same collective (processes, plain buffers, f32, out of place, root
# 0, one synchronization per call as MPI blocks: -z 1; -a 3: the slowest rank's time, as
# MPI's program reports it). The size is the whole buffer of n blocks, as nccl-tests
# counts it (sendrecv: the one block each rank sends). The two sides alternate within
# every repetition, so that the VM's slow phases and foreign load hit both alike; each
# figure is the median of REPEATS runs with the spread of the times around it (min..max,
# %), and the ratio is jitccl's median over MPI's (below 1.00: jitccl is faster). Target: ratio <= 1.00 at every size.
# A missed target is a finding, not an error: the script exits non-zero only when a side
# cannot be built or run, or gives wrong elements.
#
# Usage: tools/compare-moves.sh [SIZE...]      (default sizes: 4K 64K 1M 16M 256M)
# Environment:
#   NRANKS   rank counts (default "2 4")
#   COLLS    collectives (default "all_to_all gather scatter"; also all_to_allv, sendrecv)
#   REPEATS  runs per figure (default 3)
#   JITCCL_BIN  a jitccl binary to measure instead of building this tree's (e.g. a copy
#               of an earlier build, for a before/after table)
#   JITCCL_ALGO etc. reach jitccl's side (e.g. JITCCL_ALGO=alltoall:ring for the rounds)
# Logs of every run go to $CARGO_TARGET_DIR/compare-moves/ (default target/compare-moves/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
nranks_list=${NRANKS:-2 4}
colls=${COLLS:-all_to_all gather scatter}
repeats=${REPEATS:-3}
die() { echo "compare-moves: $*" >&2; exit 1; }
[[ $repeats =~ ^[1-9][0-9]*$ ]] || die "REPEATS must be a positive count"
for c in $colls; do [[ $c =~ ^(all_to_all|all_to_allv|gather|scatter|sendrecv)$ ]] || die "COLLS holds '$c'"; done
[ $# -gt 0 ] || set -- 4K 64K 1M 16M 256M
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  die "mpicc/mpirun not found: install OpenMPI (Debian: apt-get install openmpi-bin libopenmpi-dev)"
btl=vader
ompi_info --parsable | grep -q '^mca:btl:vader:' || btl=sm
mpirun_args=(--oversubscribe --mca pml ob1 --mca btl "self,$btl")
[ "$(id -u)" != 0 ] || mpirun_args+=(--allow-run-as-root)

logs=$target/compare-moves
mkdir -p "$logs"
mpicc -O2 -o "$logs/moves" benches/mpi/moves.c || die "mpicc failed on benches/mpi/moves.c"
jitccl=${JITCCL_BIN:-$target/release/jitccl}
[ -n "${JITCCL_BIN:-}" ] || cargo build --release --quiet -p jitccl-cli || die "cargo build --release failed"
[ -x "$jitccl" ] || die "no jitccl binary at $jitccl"

# Iterations per size: enough that a run lasts tens of ms, few where a call moves 256 MiB.
iters_for() {
  if [ "$1" -le 65536 ]; then echo "200 2000"; elif [ "$1" -le $((2 << 20)) ]; then echo "20 200"
  elif [ "$1" -le $((32 << 20)) ]; then echo "3 20"; else echo "1 4"; fi
}
bytes_of() {
  local s=$1 m=1
  case $s in *[kK]) m=1024 s=${s%?} ;; *[mM]) m=$((1 << 20)) s=${s%?} ;; *[gG]) m=$((1 << 30)) s=${s%?} ;; esac
  [[ $s =~ ^[0-9]+$ ]] || die "bad size '$1'"
  echo $((s * m))
}
# "time_us wrong" of one run.
run_mpi() { # coll n size w i log
  mpirun "${mpirun_args[@]}" -np "$2" "$logs/moves" -c "$1" -w "$4" -i "$5" "$3" >"$6" 2>&1 || true
  awk '$1 ~ /^[0-9]+$/ && NF >= 7 { print $2, $5; f = 1; exit } END { exit !f }' "$6" || { cat "$6" >&2; die "MPI run gave no result ($6)"; }
}
run_jitccl() { # coll n size w i log
  "$jitccl" perf "$1" -N "$2" -b "$3" -e "$3" -d float -w "$4" -n "$5" -z 1 -a 3 >"$6" 2>&1 || true
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $6, $9; f = 1; exit } END { exit !f }' "$6" || { cat "$6" >&2; die "jitccl run gave no result ($6)"; }
}
# "median spread" of the times on stdin.
median() {
  sort -g | awk '{ t[NR] = $1 } END { m = int((NR + 1) / 2); printf "%s %.0f..+%.0f\n", t[m], 100 * (t[1] / t[m] - 1), 100 * (t[NR] / t[m] - 1) }'
}

echo "# compare-moves: $(ompi_info --parsable | sed -n 's/^ompi:version:full://p' | head -n 1) (pml ob1, btl self,$btl) against $jitccl"
echo "# $(nproc) cores; f32, out of place, root 0, time of one call (slowest rank), median of $repeats interleaved runs, spread min..max in %"
printf '# %-11s %2s %5s | %10s %9s | %10s %9s | %6s %s\n' coll n size mpi_us spread jit_us spread ratio verdict
bad=0 missed=0 total=0
for c in $colls; do
  for n in $nranks_list; do
    for s in "$@"; do
      b=$(bytes_of "$s")
      read -r w i < <(iters_for "$b")
      mpi_t="" jit_t=""
      for r in $(seq 1 "$repeats"); do
        read -r t x < <(run_mpi "$c" "$n" "$b" "$w" "$i" "$logs/mpi-$c-n$n-$s.$r.log")
        mpi_t+="$t"$'\n'; [ "$x" = 0 ] || bad=1
        read -r t x < <(run_jitccl "$c" "$n" "$b" "$w" "$i" "$logs/jitccl-$c-n$n-$s.$r.log")
        jit_t+="$t"$'\n'; [ "$x" = 0 ] || bad=1
      done
      read -r mu msp < <(printf '%s' "$mpi_t" | median)
      read -r ju jsp < <(printf '%s' "$jit_t" | median)
      ratio=$(awk -v j="$ju" -v m="$mu" 'BEGIN { printf "%.2f", j / m }')
      verdict=PASS
      awk -v r="$ratio" 'BEGIN { exit !(r > 1.0) }' && { verdict=MISS; missed=$((missed + 1)); }
      total=$((total + 1))
      printf '  %-11s %2s %5s | %10.2f %9s | %10.2f %9s | %6s %s\n' "$c" "$n" "$s" "$mu" "$msp" "$ju" "$jsp" "$ratio" "$verdict"
    done
  done
done
echo "# compare-moves: $((total - missed)) of $total targets met"
[ "$bad" = 0 ] || die "a run reported wrong elements (logs in $logs)"
