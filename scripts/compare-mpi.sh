#!/usr/bin/env bash
# Side-by-side AllReduce comparison on the host target: OpenMPI's MPI_Allreduce over its
# shared-memory BTL (benches/mpi/allreduce.c) against `jitccl perf all_reduce`, both with
# f32 sum, the same rank counts, sizes and iteration counts, in one run. It prints one row
# per (ranks, size) and checks jitccl against the targets:
#   - small sizes (<= 1 KiB, latency bound): jitccl time / MPI time <= 2.0
#   - larger sizes (bandwidth bound):         jitccl busbw / MPI busbw >= 1.0
# A missed target is a finding, not an error: the script exits non-zero only when it
# cannot set up or run a side (missing packages, failed build, a run with no result).
#
# Usage: scripts/compare-mpi.sh [SIZE...]      (default sizes: 8 16M 256M)
# Environment: NRANKS (default "2 4"); REPEATS, runs per figure, the median is shown
# (default 3); MPIRUN_ARGS, extra arguments for mpirun.
# Logs of every run go to $CARGO_TARGET_DIR/compare-mpi/ (default target/compare-mpi/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
nranks_list=${NRANKS:-2 4}
repeats=${REPEATS:-3}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "compare-mpi: REPEATS must be a positive count" >&2; exit 1; }
if [ $# -eq 0 ]; then
  set -- 8 16M 256M
fi

die() { echo "compare-mpi: $*" >&2; exit 1; }

# Bytes of a size with a K/M/G suffix (powers of 1024, as jitccl and nccl-tests read them).
to_bytes() {
  local s=$1 mult=1
  case $s in
    *[kK]) mult=1024 s=${s%?} ;;
    *[mM]) mult=$((1 << 20)) s=${s%?} ;;
    *[gG]) mult=$((1 << 30)) s=${s%?} ;;
  esac
  [[ $s =~ ^[0-9]+$ ]] || die "bad size '$1' (expected e.g. 8, 64K, 16M, 1G)"
  echo $((s * mult))
}

# Short name of a byte count for the table.
human() {
  local b=$1
  if [ "$b" -ge $((1 << 30)) ] && [ $((b % (1 << 30))) -eq 0 ]; then echo "$((b >> 30))G"
  elif [ "$b" -ge $((1 << 20)) ] && [ $((b % (1 << 20))) -eq 0 ]; then echo "$((b >> 20))M"
  elif [ "$b" -ge 1024 ] && [ $((b % 1024)) -eq 0 ]; then echo "$((b >> 10))K"
  else echo "${b}B"
  fi
}

# Warmup and timed iterations per size, the same for both sides. Many where a call takes
# microseconds (the latency figure needs them to average out scheduling noise), few where
# one call moves hundreds of MiB; on 2 cores the default run stays within a few minutes.
warmup_for() {
  if [ "$1" -le 65536 ]; then echo 200; elif [ "$1" -le $((32 << 20)) ]; then echo 5; else echo 2; fi
}
iters_for() {
  if [ "$1" -le 65536 ]; then echo 2000; elif [ "$1" -le $((32 << 20)) ]; then echo 40; else echo 8; fi
}

sizes=()
for s in "$@"; do
  b=$(to_bytes "$s")
  [ "$b" -ge 4 ] || die "size '$s' is smaller than one float"
  sizes+=("$b")
done

# --- OpenMPI from Debian packages -------------------------------------------------------
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "compare-mpi: installing OpenMPI (openmpi-bin libopenmpi-dev)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
  else
    die "mpicc/mpirun not found: install OpenMPI (Debian: apt-get install openmpi-bin libopenmpi-dev)"
  fi
fi
command -v ompi_info >/dev/null 2>&1 || die "ompi_info not found: this script expects OpenMPI, not another MPI"
ompi_version=$(ompi_info --parsable | sed -n 's/^ompi:version:full://p' | head -n 1)
# The shared-memory BTL is 'vader' in OpenMPI 3.x/4.x and was renamed 'sm' in 5.x.
if ompi_info --parsable | grep -q '^mca:btl:vader:'; then
  btl=vader
elif ompi_info --parsable | grep -q '^mca:btl:sm:'; then
  btl=sm
else
  die "OpenMPI $ompi_version has no shared-memory BTL (neither vader nor sm)"
fi

# 4 ranks on a 2-core machine: without --oversubscribe OpenMPI refuses more ranks than cores.
mpirun_args=(--oversubscribe)
# OpenMPI refuses to start as root unless told so explicitly.
if [ "$(id -u)" = 0 ]; then
  mpirun_args+=(--allow-run-as-root)
fi
# pml ob1 is the PML that uses BTLs; another PML (ucx, cm) would bypass the btl choice.
mpirun_args+=(--mca pml ob1 --mca btl "self,$btl")
# shellcheck disable=SC2206 # MPIRUN_ARGS is a list of words on purpose
mpirun_args+=(${MPIRUN_ARGS:-})

# --- builds -------------------------------------------------------------------------------
bash scripts/setup.sh >/dev/null
mkdir -p "$target/compare-mpi"
logs=$target/compare-mpi
mpi_bin=$logs/allreduce
mpicc -O2 -o "$mpi_bin" benches/mpi/allreduce.c || die "mpicc failed on benches/mpi/allreduce.c"
cargo build --release --quiet || die "cargo build --release failed"
jitccl=$target/release/jitccl
[ -x "$jitccl" ] || die "no jitccl binary at $jitccl"

# --- runs ---------------------------------------------------------------------------------
# One run of each side prints "time_us busbw wrong" (out-of-place) and keeps its log. A
# run with wrong elements exits 1 but still prints its row, which the verdict reports;
# a run with no row at all is an error.
run_mpi() { # n bytes warmup iters log
  mpirun "${mpirun_args[@]}" -np "$1" "$mpi_bin" -w "$3" -i "$4" "$2" >"$5" 2>&1 || true
  # "bytes time_us algbw busbw wrong warmup iters"
  awk '$1 ~ /^[0-9]+$/ && NF >= 7 { print $2, $4, $5; found = 1; exit } END { exit !found }' "$5" ||
    { cat "$5" >&2; die "MPI run with $1 ranks, $2 B gave no result (log: $5)"; }
}
run_jitccl() { # n bytes warmup iters log
  "$jitccl" perf all_reduce -N "$1" -b "$2" -e "$2" -f 2 -d float -o sum -w "$3" -n "$4" >"$5" 2>&1 || true
  # the nccl-tests row: out-of-place time is field 6, busbw 8, #wrong 9
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $6, $8, $9; found = 1; exit } END { exit !found }' "$5" ||
    { cat "$5" >&2; die "jitccl run with $1 ranks, $2 B gave no result (log: $5)"; }
}
# The sample with the median time ("time busbw wrong" lines on stdin; the lower median
# for an even count), with wrong replaced by the largest wrong count of any sample.
median() {
  sort -g | awk '{ t[NR] = $1; b[NR] = $2; if ($3 + 0 > w) w = $3 + 0 }
    END { m = int((NR + 1) / 2); print t[m], b[m], w + 0 }'
}

echo "# compare-mpi: OpenMPI $ompi_version, pml ob1, btl self,$btl; jitccl $jitccl"
echo "# mpirun ${mpirun_args[*]}"
echo "# $(nproc) cores; load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# out-of-place f32 sum; time = slowest rank's per-iteration average; busbw = algbw * 2(n-1)/n"
echo "# each figure: median of $repeats runs, MPI and jitccl alternating; every run in $logs/samples.tsv"
echo "#"
printf '# %2s %6s %12s %9s %12s %9s %8s %7s %9s  %s\n' \
  n size "mpi_us" "mpi_busbw" "jitccl_us" "jit_busbw" metric ratio target verdict
printf '# %2s %6s %12s %9s %12s %9s\n' "" "" "(us)" "(GB/s)" "(us)" "(GB/s)"

printf 'n\tbytes\tside\trun\ttime_us\tbusbw\twrong\n' >"$logs/samples.tsv"
pass=0 fail=0 failures=()
for n in $nranks_list; do
  for b in "${sizes[@]}"; do
    w=$(warmup_for "$b") i=$(iters_for "$b") name=$(human "$b")
    mpi_samples="" jit_samples=""
    # Alternating the sides spreads a burst of foreign load over both instead of one.
    for r in $(seq 1 "$repeats"); do
      sample=$(run_mpi "$n" "$b" "$w" "$i" "$logs/mpi-n$n-$name.$r.log")
      mpi_samples+="$sample"$'\n'
      printf '%s\t%s\tmpi\t%s\t%s\n' "$n" "$b" "$r" "${sample// /$'\t'}" >>"$logs/samples.tsv"
      sample=$(run_jitccl "$n" "$b" "$w" "$i" "$logs/jitccl-n$n-$name.$r.log")
      jit_samples+="$sample"$'\n'
      printf '%s\t%s\tjitccl\t%s\t%s\n' "$n" "$b" "$r" "${sample// /$'\t'}" >>"$logs/samples.tsv"
    done
    read -r mpi_us mpi_bus mpi_wrong < <(printf '%s' "$mpi_samples" | median)
    read -r jit_us jit_bus jit_wrong < <(printf '%s' "$jit_samples" | median)

    if [ "$b" -le 1024 ]; then
      metric=latency target="<=2.00"
      ratio=$(awk -v j="$jit_us" -v m="$mpi_us" 'BEGIN { printf "%.2f", j / m }')
      ok=$(awk -v r="$ratio" 'BEGIN { print (r <= 2.0) ? 1 : 0 }')
    else
      metric=busbw target=">=1.00"
      ratio=$(awk -v j="$jit_bus" -v m="$mpi_bus" 'BEGIN { printf "%.2f", (m > 0) ? j / m : 0 }')
      ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 1.0) ? 1 : 0 }')
    fi
    verdict=PASS
    if [ "$ok" != 1 ]; then verdict=FAIL; fi
    # Wrong elements void the comparison, whichever side they are on.
    if [ "$jit_wrong" != 0 ]; then verdict="FAIL (jitccl #wrong $jit_wrong)"; fi
    if [ "$mpi_wrong" != 0 ]; then verdict="FAIL (MPI #wrong $mpi_wrong)"; fi
    if [ "$verdict" = PASS ]; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      failures+=("n=$n $name $metric ratio $ratio")
    fi
    printf '  %2s %6s %12.2f %9.2f %12.2f %9.2f %8s %7s %9s  %s\n' \
      "$n" "$name" "$mpi_us" "$mpi_bus" "$jit_us" "$jit_bus" "$metric" "$ratio" "$target" "$verdict"
  done
done

echo "# load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$fail" -eq 0 ]; then
  echo "# compare-mpi: all $pass targets met"
else
  missed=$(printf '%s; ' "${failures[@]}")
  echo "# compare-mpi: $fail of $((pass + fail)) targets missed: ${missed%; }"
fi
