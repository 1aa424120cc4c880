#!/usr/bin/env bash
# Two builds of `jitccl` side by side: `jitccl perf all_reduce` (f32 sum, plain buffers,
# the model's picks; COLL: another collective) of BEFORE and AFTER, alternating, their order swapped every
# repetition, so that the VM's phases and foreign load hit both alike. Per size and
# placement (out of place, in place), the median of the repetitions' paired ratios
# after / before, with their quartiles; and the ratio of the two builds' lower quartiles of
# time, which foreign load (other processes on the VM's cores) disturbs least.
#
#   tools/compare-builds.sh /tmp/jitccl-before target/release/jitccl          # 8 B and 1 MiB
#   NRANKS=4 REPEATS=9 tools/compare-builds.sh old/jitccl new/jitccl 8 16K 1M
#   COLL=all_to_all JITCCL_TRANSPORT=net tools/compare-builds.sh old/jitccl new/jitccl 8
set -euo pipefail
before=$1
after=$2
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(8 1M)
nranks=${NRANKS:-2}
repeats=${REPEATS:-15}
iters=${ITERS:-40}
coll=${COLL:-all_reduce}

# "out in" times (µs) of one run of binary $1 at size $2.
times() {
  "$1" perf "$coll" -N "$nranks" -b "$2" -e "$2" -n "$iters" -w 5 | awk '!/^#/ && NF >= 13 {print $6, $10}'
}

# a / b, or N/A where either is (a collective with no in-place form).
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN {if (a == "N/A" || b == "N/A") print "N/A"; else print a / b}'
}

# The lower quartile of the numbers on stdin.
lower() {
  sort -g | awk '{a[NR]=$1} END {print a[int((NR + 3) / 4)]}'
}

# "median (q1-q3)" of the numbers on stdin, or N/A.
quartiles() {
  sort -g | awk '$1 == "N/A" {na = 1} {a[NR]=$1} END {
    if (na) { print "N/A"; exit }
    m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    i1 = int((NR + 3) / 4); i3 = NR + 1 - i1
    printf "%.2f (%.2f-%.2f)", m, a[i1], a[i3]
  }'
}

echo "# $coll, $(nproc) cores, $nranks ranks, $repeats repetitions of -n $iters -w 5; after / before: median (quartiles)"
echo "| size | out of place | in place | lower quartiles, out of place | in place |"
echo "|---|---|---|---|---|"
for size in "${sizes[@]}"; do
  out=() inp=() tbo=() tbi=() tao=() tai=()
  for r in $(seq 1 "$repeats"); do
    if (( r % 2 )); then
      read -r bo bi < <(times "$before" "$size")
      read -r ao ai < <(times "$after" "$size")
    else
      read -r ao ai < <(times "$after" "$size")
      read -r bo bi < <(times "$before" "$size")
    fi
    tbo+=("$bo") tbi+=("$bi") tao+=("$ao") tai+=("$ai")
    out+=("$(ratio "$ao" "$bo")")
    inp+=("$(ratio "$ai" "$bi")")
  done
  lq() {
    awk -v a="$(printf '%s\n' "${!1}" | lower)" -v b="$(printf '%s\n' "${!2}" | lower)" \
      'BEGIN {if (a == "N/A" || b == "N/A") print "N/A"; else printf "%.2f", a / b}'
  }
  echo "| $size | $(printf '%s\n' "${out[@]}" | quartiles) | $(printf '%s\n' "${inp[@]}" | quartiles) |" \
    "$(lq 'tao[@]' 'tbo[@]') | $(lq 'tai[@]' 'tbi[@]') |"
done
