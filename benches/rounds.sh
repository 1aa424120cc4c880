# shellcheck shell=bash
# Sourced by the side-by-side benchmarks (socket.sh, peers.sh): how they read sizes, how many
# iterations a size gets, and how a figure sums up its interleaved rounds.

# Bytes of a size with a K/M/G suffix (powers of 1024, as jitccl and nccl-tests read them).
to_bytes() { numfmt --from=iec "$1" 2>/dev/null || die "bad size '$1' (expected e.g. 8, 64K, 16M)"; }

# Iterations per run: enough to average a small call's noise, few for hundreds of MiB.
iters_for() {
  if [ "$1" -le 65536 ]; then echo 1000; elif [ "$1" -le $((2 << 20)) ]; then echo 100; elif [ "$1" -le $((32 << 20)) ]; then echo 10; else echo 3; fi
}

# An awk function for the benchmarks' awk programs: stats(" t1 t2 ...") is "MEDIAN SPREAD",
# the median of the times and their spread around it (min..max, in % of the median).
# shellcheck disable=SC2034 # used by the scripts that source this one
stats_awk='
function stats(list,   a, k, m, i, j, x) {
  k = split(list, a, " ")
  for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
  m = a[int((k + 1) / 2)]
  return sprintf("%.1f %+.0f..%+.0f%%", m, 100 * (a[1] / m - 1), 100 * (a[k] / m - 1))
}'
