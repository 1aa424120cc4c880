#!/usr/bin/env bash
# Side-by-side AllReduce comparison on the host target, in one run: OpenMPI's MPI_Allreduce
# over its shared-memory BTL (benches/mpi/allreduce.c), Intel oneCCL's CPU build
# (benches/oneccl/oneccl_bench.sh, from PyPI wheels) and `jitccl perf all_reduce` (once per
# buffer mode in JITCCL_R: -R 0 plain buffers, -R 2 symmetric memory), all f32 sum, out of
# place, the same rank counts, sizes and iteration counts. One row per (ranks, size, jitccl
# mode), against the best peer of that row:
#   - sizes up to 1 MiB:  jitccl time <= best peer's time          (ratio = jitccl / peer <= 1.00,
#                         of each side's lower-quartile run; see below)
#   - larger sizes:       jitccl busbw >= 1.0x the best peer's, 1.2x with registered buffers
# Each row also shows the cross-CPU round trip measured before and after every run
# (benches/pingpong.c, rtt_ns min..max). On a VM it moves between phases that last seconds,
# and the small sizes' times follow it, every side's alike; a round trip beside a run cannot
# tell which phase the run had (the phase changes within a run's start-up). A median of a
# few runs would count which side drew more slow phases, a fastest run which side drew a rare
# faster one. So up to 1 MiB each side runs 9 times and a row compares each side's
# lower-quartile run (the 3rd fastest of 9), which lies in the usual phase unless 7 of its 9
# runs drew a slow one or 3 a rare faster one; the verdict also gives the medians' ratio. The
# latest results: docs/performance.md, "Host AllReduce beside OpenMPI and oneCCL".
# A missed target is a finding, not an error: the script exits non-zero only when it cannot
# set up or run a side (missing packages, failed build, a run with no result).
#
# Usage: tools/compare-mpi.sh [SIZE...]      (default sizes: 8 1M 16M 256M)
# Environment:
#   NRANKS      rank counts (default "2 4")
#   REPEATS     runs per figure, the median is shown (default 3, and 9 up to 1 MiB, whose
#               runs the round trip's phases split); the sides alternate within each
#               repetition, so a burst of foreign load hits all of them
#   JITCCL_R    jitccl buffer modes, perf's -R values (default "0 2")
#   JITCCL_Z    jitccl's perf -z values, a row each (default "0 1"): 0 queues a size's calls
#               and synchronizes once (perf's default, nccl-tests' way); 1 synchronizes after
#               every call, the peers' way (MPI_Allreduce blocks; the oneCCL bench waits on
#               each call's event)
#   LOAD=1      run one busy-looping process per core beside every run (the "loaded" case)
#   PEERS       which peers run (default "mpi oneccl")
#   MPIRUN_ARGS extra arguments for mpirun; ONECCL_MODE etc. see benches/oneccl/oneccl_bench.sh
# Logs of every run go to $CARGO_TARGET_DIR/compare-mpi/ (default target/compare-mpi/),
# every sample to samples.tsv there, and each side's median busbw per size and rank count to
# busbw-Nr.csv, which benches/busbw_svg.py draws beside it as busbw-Nr.svg.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
nranks_list=${NRANKS:-2 4}
repeats=${REPEATS:-}
modes=${JITCCL_R:-0 2}
syncs=${JITCCL_Z:-0 1}
peers=${PEERS:-mpi oneccl}
[[ -z $repeats || $repeats =~ ^[1-9][0-9]*$ ]] || { echo "compare-mpi: REPEATS must be a positive count" >&2; exit 1; }
if [ $# -eq 0 ]; then
  set -- 8 1M 16M 256M
fi

die() { echo "compare-mpi: $*" >&2; exit 1; }

for z in $syncs; do [[ $z =~ ^[01]$ ]] || die "JITCCL_Z holds '$z'; perf's -z takes 0 or 1"; done
[ -n "$syncs" ] || die "JITCCL_Z is empty: no jitccl row to show"
for m in $modes; do [[ $m =~ ^[012]$ ]] || die "JITCCL_R holds '$m'; perf's -R takes 0, 1 or 2"; done
for p in $peers; do [[ $p =~ ^(mpi|oneccl)$ ]] || die "PEERS holds '$p'; the peers are mpi and oneccl"; done
[ -n "$peers" ] || die "PEERS is empty: nothing to compare against"

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

# Warmup and timed iterations per size, the same for every side (but see run_side). Many where a call takes
# microseconds (the latency figure needs them to average out scheduling noise), few where
# one call moves hundreds of MiB; on 2 cores the default run stays within minutes.
warmup_for() {
  if [ "$1" -le 65536 ]; then echo 200; elif [ "$1" -le $((2 << 20)) ]; then echo 20; elif [ "$1" -le $((32 << 20)) ]; then echo 5; else echo 2; fi
}
iters_for() {
  if [ "$1" -le 65536 ]; then echo 2000; elif [ "$1" -le $((2 << 20)) ]; then echo 200; elif [ "$1" -le $((32 << 20)) ]; then echo 40; else echo 8; fi
}

# Runs per figure: REPEATS, or by default 9 up to 1 MiB (short runs, which the round trip's
# phases split: see the header) and 3 above.
repeats_for() {
  if [ -n "$repeats" ]; then echo "$repeats"; elif [ "$1" -le $((1 << 20)) ]; then echo 9; else echo 3; fi
}

sizes=()
for s in "$@"; do
  b=$(to_bytes "$s")
  [ "$b" -ge 4 ] || die "size '$s' is smaller than one float"
  sizes+=("$b")
done

# --- OpenMPI from Debian packages -------------------------------------------------------
mpirun_args=()
if [[ " $peers " == *" mpi "* ]]; then
  # mpicc without the headers is a half install (openmpi-bin without libopenmpi-dev).
  if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1 ||
    ! [ -e "$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')/mpi.h" ]; then
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
fi

# --- builds -------------------------------------------------------------------------------
bash scripts/setup.sh >/dev/null
mkdir -p "$target/compare-mpi"
logs=$target/compare-mpi
mpi_bin=$logs/allreduce
if [[ " $peers " == *" mpi "* ]]; then
  mpicc -O2 -o "$mpi_bin" benches/mpi/allreduce.c || die "mpicc failed on benches/mpi/allreduce.c"
fi
oneccl=$root/benches/oneccl/oneccl_bench.sh
if [[ " $peers " == *" oneccl "* ]]; then
  # Its first run downloads and builds oneCCL (a few seconds once cached); do it before timing.
  bash "$oneccl" 2 8 1 1 >"$logs/oneccl-setup.log" 2>&1 ||
    { cat "$logs/oneccl-setup.log" >&2; die "oneCCL set-up failed (log: $logs/oneccl-setup.log)"; }
fi
# The cross-CPU round trip beside each row (see the header).
pingpong=$logs/pingpong
# Round trips per probe: 7-25 ms on a quiet 2-core VM (fewer blur the phases together),
# up to a second beside busy loops.
rtt_rounds=50000
cc -O2 -pthread -o "$pingpong" benches/pingpong.c || die "cc failed on benches/pingpong.c"
cargo build --release --quiet -p jitccl-cli || die "cargo build --release failed"
jitccl=$target/release/jitccl
[ -x "$jitccl" ] || die "no jitccl binary at $jitccl"

# --- load -----------------------------------------------------------------------------------
load_pids=()
stop_load() { [ ${#load_pids[@]} -eq 0 ] || kill "${load_pids[@]}" 2>/dev/null || true; }
trap stop_load EXIT
if [ "${LOAD:-0}" = 1 ]; then
  for _ in $(seq 1 "$(nproc)"); do
    (while :; do :; done) &
    load_pids+=($!)
  done
fi

# --- runs ---------------------------------------------------------------------------------
# One run of each side prints "time_us busbw wrong" and keeps its log. A run with wrong
# elements still prints its row, which the verdict reports; a run with no row is an error.
run_mpi() { # n bytes warmup iters log
  mpirun "${mpirun_args[@]}" -np "$1" "$mpi_bin" -w "$3" -i "$4" "$2" >"$5" 2>&1 || true
  # "bytes time_us algbw busbw wrong warmup iters"
  awk '$1 ~ /^[0-9]+$/ && NF >= 7 { print $2, $4, $5; found = 1; exit } END { exit !found }' "$5" ||
    { cat "$5" >&2; die "MPI run with $1 ranks, $2 B gave no result (log: $5)"; }
}
run_oneccl() { # n bytes warmup iters log
  bash "$oneccl" "$1" "$2" "$3" "$4" >"$5" 2>&1 || true
  # "size_bytes time_us algbw busbw ok|BAD"
  awk 'NF == 5 && $1 ~ /^[0-9]+$/ { print $2, $4, ($5 == "ok") ? 0 : "BAD"; found = 1; exit } END { exit !found }' "$5" ||
    { cat "$5" >&2; die "oneCCL run with $1 ranks, $2 B gave no result (log: $5)"; }
}
run_jitccl() { # n bytes warmup iters log mode sync
  local reg=()
  [ "$6" = 0 ] || reg=(-R "$6") # -R 0 is perf's default
  # -a 3: the slowest rank's time, as both peers report it (perf's default is the mean)
  "$jitccl" perf all_reduce -N "$1" -b "$2" -e "$2" -f 2 -d float -o sum -w "$3" -n "$4" -z "$7" -a 3 "${reg[@]}" >"$5" 2>&1 || true
  # the nccl-tests row: out-of-place time is field 6, busbw 8, #wrong 9
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $6, $8, $9; found = 1; exit } END { exit !found }' "$5" ||
    { cat "$5" >&2; die "jitccl run with $1 ranks, $2 B, -R $6 gave no result (log: $5)"; }
}
# jitccl's sides: one per (buffer mode, synchronization), named jitccl-R<mode>-z<sync>.
jitccl_sides=$(for m in $modes; do for z in $syncs; do echo "jitccl-R$m-z$z"; done; done)
mode_of() { local s=${1#jitccl-R}; echo "${s%%-z*}"; }

# One run of `side`, repeated with more iterations when its timed ones took under
# min_run_us: a shorter run can fit into one scheduler time slice (about 4 ms here), so
# under load it times the luck of that slice rather than the load (2000 MPI calls of 8 B
# take 0.5 ms). The longer run aims at twice min_run_us.
min_run_us=50000
run_side() { # side n bytes warmup iters log
  local side=$1 n=$2 b=$3 w=$4 i=$5 log=$6 sample
  for _ in 1 2; do
    case $side in
      mpi) sample=$(run_mpi "$n" "$b" "$w" "$i" "$log") ;;
      oneccl) sample=$(run_oneccl "$n" "$b" "$w" "$i" "$log") ;;
      jitccl-R*) sample=$(run_jitccl "$n" "$b" "$w" "$i" "$log" "$(mode_of "$side")" "${side##*-z}") ;;
    esac
    i=$(awk -v t="${sample%% *}" -v i="$i" -v min="$min_run_us" \
      'BEGIN { if (t * i >= min || t <= 0) print 0; else { k = int(2 * min / t) + 1; print (k > 10000000) ? 10000000 : k } }')
    [ "$i" -gt 0 ] || break
  done
  echo "$sample"
}

# The sample with the median time ("time busbw wrong" lines on stdin; the lower median for
# an even count), the spread of the times around it, with wrong replaced by the largest
# wrong count of any sample ("BAD" counts as 1), then the lower quartile's time (the
# ceil(n/4)-th fastest).
median() {
  sort -g | awk '{ t[NR] = $1; b[NR] = $2; x = ($3 == "BAD") ? 1 : $3 + 0; if (x > w) w = x }
    END { m = int((NR + 1) / 2); q = int((NR + 3) / 4); printf "%s %s %d %.0f %.0f %s\n", t[m], b[m], w,
          100 * (t[1] / t[m] - 1), 100 * (t[NR] / t[m] - 1), t[q] }'
}

echo "# compare-mpi: ${ompi_version:+OpenMPI $ompi_version (pml ob1, btl self,$btl); }peers: $peers; jitccl $jitccl, -R in: $modes, -z in: $syncs"
[ ${#mpirun_args[@]} -eq 0 ] || echo "# mpirun ${mpirun_args[*]}"
echo "# $(nproc) cores; load: ${LOAD:-0} (busy loops beside the runs: ${#load_pids[@]}); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# out-of-place f32 sum; time = slowest rank's per-iteration average; busbw = algbw * 2(n-1)/n"
echo "# each figure: median of ${repeats:-3 (9 up to 1 MiB)} runs (spread of the times in %, min..max against the median); every run in $logs/samples.tsv"
echo "# rtt_ns: the cross-CPU round trip (benches/pingpong.c) before and after every run, min..max"
echo "# metric: up to 1 MiB the time of each side's lower-quartile run (q1), the medians' ratio beside the verdict; above, busbw of the medians"
echo "#"
printf '# %2s %5s %2s %2s | %9s | %9s %8s %9s | %9s %8s %9s | %9s %8s %9s | %9s %6s %7s  %s\n' \
  n size R z rtt_ns mpi_us mpi_bus spread occl_us occl_bus spread jit_us jit_bus spread metric ratio target verdict

printf 'n\tbytes\tside\trun\ttime_us\tbusbw\twrong\trtt_ns\n' >"$logs/samples.tsv"
for n in $nranks_list; do echo "series,size_bytes,busbw_GBps" >"$logs/busbw-${n}r.csv"; done
# A side's name in the plots' legends.
legend() {
  case $1 in
    mpi) echo "OpenMPI ${ompi_version:-}" ;;
    oneccl) echo "oneCCL" ;;
    *) echo "jitccl -R $(mode_of "$1") -z ${1##*-z}" ;;
  esac
}
pass=0 fail=0 failures=()
for n in $nranks_list; do
  for b in "${sizes[@]}"; do
    w=$(warmup_for "$b") i=$(iters_for "$b") name=$(human "$b")
    declare -A samples=()
    rtts=()
    for r in $(seq 1 "$(repeats_for "$b")"); do
      before=$("$pingpong" "$rtt_rounds") || die "benches/pingpong.c's program failed"
      rtts+=("$before")
      for side in $peers $jitccl_sides; do
        log=$logs/$side-n$n-$name.$r.log
        sample=$(run_side "$side" "$n" "$b" "$w" "$i" "$log")
        after=$("$pingpong" "$rtt_rounds") || die "benches/pingpong.c's program failed"
        rtts+=("$after")
        samples[$side]+="$sample"$'\n'
        # The larger round trip of the two around the run.
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$b" "$side" "$r" "${sample// /$'\t'}" \
          "$((before > after ? before : after))" >>"$logs/samples.tsv"
        before=$after
      done
    done
    declare -A us=() bus=() wrong=() spread=() q1=()
    for side in "${!samples[@]}"; do
      read -r us[$side] bus[$side] wrong[$side] lo hi q1[$side] < <(printf '%s' "${samples[$side]}" | median)
      spread[$side]="$lo..+$hi"
    done
    for side in $peers $jitccl_sides; do
      printf '%s,%s,%s\n' "$(legend "$side")" "$b" "${bus[$side]}" >>"$logs/busbw-${n}r.csv"
    done
    cell() { # side: "us busbw spread" or dashes when the side did not run
      if [ -n "${us[$1]:-}" ]; then printf '%9.2f %8.2f %9s' "${us[$1]}" "${bus[$1]}" "${spread[$1]}"
      else printf '%9s %8s %9s' - - -; fi
    }
    rtt_range=$(printf '%s\n' "${rtts[@]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo ".." hi }')
    # The best peer: lowest time (equivalently highest busbw at one size), by the figure
    # the row's verdict compares.
    small=0
    [ "$b" -gt $((1 << 20)) ] || small=1
    figure() { if [ "$small" = 1 ]; then echo "${q1[$1]}"; else echo "${us[$1]}"; fi; }
    peer_best=""
    for p in $peers; do
      if [ -z "$peer_best" ] || awk -v a="$(figure "$p")" -v b="$(figure "$peer_best")" 'BEGIN { exit !(a < b) }'; then
        peer_best=$p
      fi
    done
    for side in $jitccl_sides; do
      m=$(mode_of "$side") z=${side##*-z}
      medians=""
      if [ "$small" = 1 ]; then
        metric=q1 target="<=1.00"
        ratio=$(awk -v j="$(figure "$side")" -v p="$(figure "$peer_best")" 'BEGIN { printf "%.2f", j / p }')
        ok=$(awk -v r="$ratio" 'BEGIN { print (r <= 1.0) ? 1 : 0 }')
        medians="; medians $(awk -v j="${us[$side]}" -v p="${us[$peer_best]}" 'BEGIN { printf "%.2f", j / p }')"
      else
        need=1.0
        [ "$m" = 0 ] || need=1.2
        metric=busbw target=">=$need"
        ratio=$(awk -v j="${bus[$side]}" -v p="${bus[$peer_best]}" 'BEGIN { printf "%.2f", (p > 0) ? j / p : 0 }')
        ok=$(awk -v r="$ratio" -v t="$need" 'BEGIN { print (r >= t) ? 1 : 0 }')
      fi
      verdict="PASS (vs $peer_best)$medians"
      [ "$ok" = 1 ] || verdict="FAIL (vs $peer_best)$medians"
      # Wrong elements void the comparison, whichever side they are on.
      for s in $peers "$side"; do
        [ "${wrong[$s]}" = 0 ] || verdict="FAIL ($s #wrong ${wrong[$s]})"
      done
      if [[ $verdict == PASS* ]]; then
        pass=$((pass + 1))
      else
        fail=$((fail + 1))
        failures+=("n=$n $name -R $m -z $z $metric ratio $ratio")
      fi
      printf '  %2s %5s %2s %2s | %9s | %s | %s | %s | %9s %6s %7s  %s\n' "$n" "$name" "$m" "$z" "$rtt_range" \
        "$(cell mpi)" "$(cell oneccl)" "$(cell "$side")" "$metric" "$ratio" "$target" "$verdict"
    done
    unset samples us bus wrong spread q1
  done
done

echo "# load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $nranks_list; do
  python3 benches/busbw_svg.py "$logs/busbw-${n}r.csv" "$logs/busbw-${n}r.svg" \
    --title "AllReduce f32, $n ranks on $(nproc) cores: busbw against size (median)" ||
    die "benches/busbw_svg.py could not draw $logs/busbw-${n}r.csv"
done
echo "# busbw against size: $logs/busbw-Nr.csv and .svg"
if [ "$fail" -eq 0 ]; then
  echo "# compare-mpi: all $pass targets met"
else
  missed=$(printf '%s; ' "${failures[@]}")
  echo "# compare-mpi: $fail of $((pass + fail)) targets missed: ${missed%; }"
fi
