# Sourced by tools/gpu-check.sh: the stages that time jitccl alone on the GPU machine
# (perf sweeps, the cost model's points, channels, a quick tune, queued / blocking / graph
# launches) and the direct stage's tables. They use gpu-check.sh's `step`, $out
# (target/gpu-check) and $OUT, and write their tables to $OUT.
# shellcheck shell=bash disable=SC2154 # $out is gpu-check.sh's

stage_perf() {
  step "perf: AllReduce 8 B - 256 MiB, 2 ranks on GPU 0" \
    timeout 240 "$out/jitccl" perf all_reduce --target cuda -N 2 -g 2 --devices 0,0 -b 8 -e 256M -f 4 -n 20 -w 5
  step "perf: AllReduce 8 B - 256 MiB, 8 ranks on GPU 0" \
    timeout 240 "$out/jitccl" perf all_reduce --target cuda -N 8 -g 8 --devices 0,0,0,0,0,0,0,0 -b 8 -e 256M -f 8 -n 10 -w 3
  step "perf: AllReduce 8 B - 64 MiB, 2 rank processes on GPU 0 (CUDA IPC, time-sliced)" \
    timeout 120 "$out/jitccl" perf all_reduce --target cuda -N 2 --devices 0,0 -b 8 -e 64M -f 8 -n 5 -w 2
}

# One forced choice, ranks as threads on GPU 0, its out-of-place time printed:
# point NRANKS ALGO PROTO CHANNELS BYTES [VAR=VALUE...] (the variables set for the run);
# POINT_FLAGS adds perf flags (-R 1: registered buffers, -G 10: CUDA graphs).
point() {
  local n=$1 algo=$2 proto=$3 ch=$4 bytes=$5 t devs us
  shift 5
  t=$(mktemp)
  printf 'allreduce,0,1099511627776,%s,%s,%s,1,%s,-1,0\n' "$algo" "$proto" "$ch" "$n" >"$t"
  devs=$(printf '0,%.0s' $(seq "$n"))
  # shellcheck disable=SC2086 # POINT_FLAGS are words
  us=$(env "$@" JITCCL_TUNER_CONFIG_FILE="$t" timeout 60 "$out/jitccl" perf all_reduce --target cuda -N "$n" -g "$n" \
    --devices "${devs%,}" -b "$bytes" -e "$bytes" -n 10 -w 3 ${POINT_FLAGS:-} | awk '/^ +[0-9]+ /{print $6}')
  rm -f "$t"
  [ -n "$us" ] || { echo "point $n $algo $proto $ch $bytes $* ${POINT_FLAGS:-}: no time"; return 1; }
  echo "point: $n ranks, $algo/$proto, $ch channel(s), $bytes B${*:+ ($*)}${POINT_FLAGS:+ [${POINT_FLAGS}]}: $us us"
}

# The CUDA cost model's points (the_cuda_model_reproduces_the_h200_measurements in
# runtime/src/tune/tests.rs), each choice forced by a one-row tuning table.
points() {
  local p
  for p in "2 ring simple 1 8" "4 ring simple 1 8" "8 ring simple 1 8" "8 ring ll 1 8" \
    "8 oneshot simple 1 8" "8 tree ll 1 8" "2 ring simple 1 64M" "2 ring simple 8 64M" \
    "2 ring simple 16 64M" "4 ring simple 16 64M" "8 ring simple 1 64M" "8 tree simple 8 64M" \
    "4 oneshot simple 1 16M" "2 ring ll 1 4M" "2 ring ll 8 4M" "2 ring ll128 8 16M"; do
    # shellcheck disable=SC2086 # the fields are words
    point $p || return 1
  done
}

stage_points() {
  step "the CUDA cost model's points, each choice forced by a one-row table" points
  # LL's step is 16 KiB of lines by default (JITCCL_BUFFSIZE / 64): two lines for each of
  # a block's 512 threads between barriers, where NCCL's LL gives a thread 8. Four times
  # the FIFO gives LL 64 KiB steps: if that runs LL much faster, its steps are what bound it.
  step "probe: ring LL, 2 ranks, 1 channel, 4 MiB, with 16 and 64 KiB steps" probe_ll_steps
}

probe_ll_steps() {
  point 2 ring ll 1 4M && point 2 ring ll 1 4M JITCCL_BUFFSIZE=4194304
}

# The defaults' choices checked again: the ring at 2 ranks on 32 and on the default 64 channels
# (2 ranks of 64 CTAs: 128 on an H200's 132 SMs), the same with a 4 MiB FIFO (NCCL's default
# step size; 1 MiB is jitccl's), two-shot direct AllReduce on registered buffers with kernels
# specialized for the rank count (the default on GPUs) on 32 and 64 channels, and one rank's
# copy (no peer, no FIFO) on 64 CTAs as the ceiling beside them.
channels() {
  local ch
  for ch in 32 64; do point 2 ring simple "$ch" 256M JITCCL_NCHANNELS="$ch" || return 1; done
  point 2 ring simple 64 256M JITCCL_NCHANNELS=64 JITCCL_BUFFSIZE=4194304 || return 1
  for ch in 32 64; do POINT_FLAGS="-R 1" point 2 direct simple "$ch" 256M JITCCL_NCHANNELS="$ch" || return 1; done
  point 1 ring simple 64 256M JITCCL_NCHANNELS=64
}

stage_channels() {
  step "channels: AllReduce 256 MiB, 2 ranks, ring Simple on 32 and 64 channels and with a 4 MiB FIFO, direct on 32 and 64; 1 rank's copy on 64" \
    channels
}

stage_tune() {
  # A GPU tuning table measured, not modelled: every candidate side by side, then the
  # table against the model alone and the best fixed candidates (--verify).
  local table="${OUT:-${TMPDIR:-/tmp}}/tune-cuda-2r.csv"
  # To 128 MiB: the tune skips what the model puts far behind there (on an H100, measuring
  # every candidate to 128 MiB did not end in 170 s; not yet run with the skipping).
  step "tune: AllReduce 8 B - 128 MiB, 2 ranks on GPU 0, table $table" \
    timeout 300 "$out/jitccl" tune --quick --target cuda -N 2 --devices 0,0 -e 128M --verify 3 -o "$table"
}

# One perf point of AllReduce, 2 ranks as threads on GPU 0 (checked against the reference):
# launch_point SYNC BYTES [PERF FLAGS...] prints "sync flags bytes: time busbw wrong" of
# the out-of-place column.
launch_point() {
  local sync=$1 bytes=$2 row
  shift 2
  row=$(env JITCCL_CUDA_SYNC="$sync" timeout 120 "$out/jitccl" perf all_reduce --target cuda -N 2 -g 2 \
    --devices 0,0 -b "$bytes" -e "$bytes" -n 50 -w 5 "$@" | awk '/^ +[0-9]+ /{print $6, $8, $9}')
  [ -n "$row" ] || { echo "launch_point JITCCL_CUDA_SYNC=$sync $bytes $*: no row"; return 1; }
  # shellcheck disable=SC2086 # the row's three fields are words
  printf '%-16s %-8s %10s %12s us %10s GB/s busbw, %s wrong\n' "JITCCL_CUDA_SYNC=$sync" "${*:-}" "$bytes" $row
  [ "$(echo "$row" | awk '{print $3}')" = 0 ]
}

# Queued (-z 0, nccl-tests' default), blocking (-z 1) and graph-replayed (-G 10) AllReduce
# at 8 B and 128 MiB, asynchronous and synchronous launches interleaved, three rounds;
# the table also goes to $OUT/launch-perf.txt.
launch_perf() {
  local table="${OUT:-${TMPDIR:-/tmp}}/launch-perf.txt" bytes
  {
    echo "# AllReduce f32, 2 ranks as threads on GPU 0, out of place, -n 50 -w 5; commit $(cat "$out/COMMIT" 2>/dev/null)"
    for _ in 1 2; do
      for bytes in 8 128M; do
        launch_point 0 "$bytes" -z 0 && launch_point 1 "$bytes" -z 0 &&
          launch_point 0 "$bytes" -z 1 && launch_point 1 "$bytes" -z 1 &&
          launch_point 0 "$bytes" -G 10 || return 1
      done
    done
    # Where an 8-byte call's time goes: one rank queued eagerly (the host's launch path, one
    # thread) and in graphs (a kernel and no peer: the GPU's floor), then 2 ranks in graphs
    # per forced algorithm and protocol on one channel (the exchange, no host in the way).
    POINT_FLAGS="-z 0" point 1 ring simple 1 8 && POINT_FLAGS="-G 10" point 1 ring simple 1 8 &&
      POINT_FLAGS="-G 10" point 2 ring ll 1 8 && POINT_FLAGS="-G 10" point 2 ring simple 1 8 &&
      POINT_FLAGS="-G 10" point 2 oneshot ll 1 8 && POINT_FLAGS="-G 10 -R 1" point 2 direct_oneshot simple 1 8 || return 1
    if JITCCL_CUDA_SYNC=1 timeout 60 "$out/jitccl" perf all_reduce --target cuda -N 2 -g 2 --devices 0,0 -b 8 -e 8 \
      -G 1 >/dev/null 2>&1; then
      echo "-G with JITCCL_CUDA_SYNC=1 was not refused"
      return 1
    fi
  } | tee "$table"
  return "${PIPESTATUS[0]}"
}

stage_launch_perf() {
  step "perf: AllReduce 8 B and 128 MiB, 2 ranks, queued / blocking / CUDA graph, async and sync launches" launch_perf
}

# Each algorithm's out-of-place time and busbw per size, side by side (perf checks results):
# AllReduce direct, direct one-shot and ring, then AllGather and ReduceScatter direct and
# ring (the CUDA model gives every direct collective AllReduce's measured factor).
direct_perf() {
  : >"${OUT:-${TMPDIR:-/tmp}}/direct-perf.txt"
  direct_table all_reduce direct direct_oneshot ring && direct_table all_gather direct ring &&
    direct_table reduce_scatter direct ring
}

# direct_table COLL ALGO...: COLL's time us / busbw GB/s / wrong per size and algorithm,
# 2 ranks as threads on GPU 0, registered buffers; appended to $OUT/direct-perf.txt.
direct_table() {
  local coll=$1 table="${OUT:-${TMPDIR:-/tmp}}/direct-perf.txt" algo dir files=()
  shift
  dir=$(mktemp -d)
  for algo in "$@"; do
    # One-shot reads every rank's whole input: to 64 MiB.
    local e=256M
    [ "$algo" = direct_oneshot ] && e=64M
    timeout 90 "$out/jitccl" perf "$coll" --target cuda -N 2 -g 2 --devices 0,0 -R 1 --algo "$algo" \
      -b 8 -e "$e" -f 4 -n 10 -w 3 | awk '/^ +[0-9]+ /{print $1, $6, $8, $9}' >"$dir/$algo" || {
      echo "perf $coll --algo $algo failed"
      return 1
    }
    files+=("$dir/$algo")
  done
  {
    echo "# $coll f32, 2 ranks as threads on GPU 0, registered buffers (-R 1), out of place, -n 10 -w 3;"
    echo "# commit $(cat "$out/COMMIT" 2>/dev/null); time us / busbw GB/s / wrong per algorithm"
    printf '%12s' bytes
    printf ' %24s' "$@"
    echo
    # Rows by size, in the last algorithm's order (the ring runs every size); "-" where an
    # algorithm did not.
    awk -v na=$# 'FNR == 1 { f++ } { t[f, $1] = $2 " " $3 " " $4 } f == na { order[++n] = $1 }
      END { for (i = 1; i <= n; i++) { s = order[i]; line = sprintf("%12s", s)
        for (g = 1; g <= na; g++) { v = ((g, s) in t) ? t[g, s] : "- - -"; split(v, x, " ")
          line = line sprintf(" %9s %7s %6s", x[1], x[2], x[3]) }
        print line } }' "${files[@]}"
  } >"$dir/table"
  tee -a "$table" <"$dir/table"
  # Every row of every algorithm checked: no wrong element anywhere.
  ! awk 'NR > 3 { for (i = 4; i <= NF; i += 3) if ($i != "-" && $i != 0) bad = 1 } END { exit !bad }' "$dir/table"
  local rc=$?
  rm -rf "$dir"
  return $rc
}
