#!/usr/bin/env bash
# The one command that proves the CUDA target on a GPU machine, in two halves:
#
#   bash tools/gpu-extras.sh        # here, optional (PyPI): NCCL 2.30 for the last
#                                   # stage, into target/gpu-extras
#   bash tools/gpu-check.sh build   # here (Rust, no GPU): release binaries, stripped, into
#                                   # target/gpu-check/ (ignored; GPU_CHECK_MAX_MIB, if set,
#                                   # bounds its size for a machine that takes no more)
#   bash tools/gpu-check.sh run [STAGE...]
#                                   # there (a GPU, the CUDA driver and NVRTC 12 or 13; no
#                                   # Rust, no network): runs from target/gpu-check/ only
#
# STAGE picks parts of `run` (default: all, in the order of STAGES below). Each step has a time limit, so that a hung kernel fails
# its step instead of the run, and the stages split the run into calls that each fit a
# remote command limit (the sweep is the longest, minutes). With $OUT set, the output is
# also written to $OUT/gpu-check.log as it goes.
# GPU_CHECK_UNTIL (seconds since the epoch) is when the run must end: nccl_side, the last
# stage, shortens its sweep to fit.
#
# `run` queries the device, detects the topology (`jitccl topo`: PCI, driver, NVML),
# compares asynchronous launches with the synchronous fallback (tests and perf's queued,
# blocking and CUDA-graph times), runs the direct kernels on registered and symmetric
# buffers (threads and CUDA IPC processes, and direct against ring in perf), runs the CUDA
# reference tests (every collective x algorithm x protocol over a sample of datatypes and
# every op; 1, 2, 4 and 8 ranks on GPU 0; counts
# 0, 1, odd and multi-step; in and out of place), the same with FIFOs staged in host memory
# (JITCCL_P2P_DISABLE=1), ranks joined by `init_rank`, rank processes through CUDA IPC and
# through the net proxy (`jitccl perf` checks every rank against the reference), over a
# network plugin with GPU memory registered directly (the project's EdgeGpu stand-in), the
# timeout and abort tests, a short `jitccl perf` sweep, the cost model's points, how the ring's
# bandwidth grows with channels, and a quick `jitccl tune` to 128 MiB on the GPU, then the C API (a CUDA C program built with nvcc
# against libnccl.so.2, PyTorch's backend "nccl" with it preloaded, and jitccl's own
# backend "jitccl" on CUDA tensors), and last jitccl beside NVIDIA's NCCL: `nccl_side`
# (benches/gpu/nccl_side.py: AllReduce, AllGather, ReduceScatter at 16 B - 256 MiB, 2 and 4
# ranks on GPU 0, through `jitccl perf` beside NCCL's ranks in one process, and PyTorch on
# jitccl's libnccl.so.2 beside PyTorch on NCCL, with the device's copy rate, in interleaved
# rounds; tables to $OUT/nccl-side.txt and .json). It uses what tools/gpu-extras.sh fetched
# here, if it was run before `build` (target/gpu-extras, carried in target/gpu-check/extras):
# NCCL 2.30.7's libnccl.so.2 (PyTorch 2.11 bundles NCCL 2.28.9, which cannot put several
# ranks on one GPU); without it the NCCL rows say why they are missing. nccl-tests is not
# run here: docs/guide.md ("nccl-tests") says how to build and run it by hand. It ends with
# `N passed, M failed` and exits non-zero on any failure. Kernels compile with the
# machine's NVRTC into a fresh cache.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# GPU_CHECK_DIR runs binaries built elsewhere (a branch beside these, say).
out="${GPU_CHECK_DIR:-$root/target/gpu-check}"

build() {
  set -e
  cd "$root"
  command -v cargo >/dev/null 2>&1 || { echo "gpu-check build: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
  cargo build --release -p jitccl-cli -p jitccl-capi
  # The test binary's path, from cargo's own report of what it built.
  local test_bin
  test_bin=$(cargo test --release -p jitccl --test cuda --no-run --message-format=json 2>/dev/null |
    grep '"kind":\["test"\]' | grep '"name":"cuda"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
  [ -x "$test_bin" ] || { echo "gpu-check build: no test binary for tests/cuda.rs" >&2; exit 1; }
  rm -rf "$out" && mkdir -p "$out"
  cp target/release/jitccl "$out/jitccl"
  cp "$test_bin" "$out/cuda-tests"
  # The GPU stand-in network plugin (no libfabric, no CUDA at build time), from its crate's
  # build script's output folder as cargo reports it.
  local plugins_out
  plugins_out=$(cargo build --release -p jitccl-plugins --message-format=json 2>/dev/null |
    grep '"reason":"build-script-executed"' | grep 'jitccl-plugins' | sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -n 1)
  [ -f "$plugins_out/libnccl-net-edge-gpu.so" ] || { echo "gpu-check build: no libnccl-net-edge-gpu.so" >&2; exit 1; }
  cp "$plugins_out/libnccl-net-edge-gpu.so" "$out/"
  # The C API: libnccl.so.2 (its soname) with its header and the GPU programs built there.
  cp target/release/libnccl.so "$out/libnccl.so.2"
  mkdir -p "$out/capi"
  cp capi/include/nccl.h capi/tests/gpu/cuda_ranks.cu capi/tests/gpu/torch_nccl.py "$out/capi/"
  # Debug info is most of their size, and the GPU machine has no debugger use for it.
  strip "$out/jitccl" "$out/cuda-tests" "$out/libnccl.so.2" "$out/libnccl-net-edge-gpu.so" 2>/dev/null ||
    echo "gpu-check build: strip not found; binaries kept whole"
  cp tools/gpu-check.sh tools/gpu-check-perf.sh "$out/"
  build_nccl_side
  git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
  local kib
  kib=$(du -sk "$out" | cut -f1)
  echo "gpu-check build: $out ($((kib / 1024)) MiB), commit $(cat "$out/COMMIT")"
  if [ -n "${GPU_CHECK_MAX_MIB:-}" ] && [ "$kib" -ge $((GPU_CHECK_MAX_MIB * 1024)) ]; then
    echo "gpu-check build: $out is over GPU_CHECK_MAX_MIB=$GPU_CHECK_MAX_MIB MiB" >&2
    exit 1
  fi
}

passed=0
failed=0
failures=()

# step NAME COMMAND...: runs one check, its output indented, and counts it.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name"
  if "$@" 2>&1 | sed 's/^/   /'; then
    passed=$((passed + 1))
    echo "-- PASS $name ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "-- FAIL $name ($((SECONDS - t0)) s)"
  fi
}

stage_query() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    step "device query (nvidia-smi)" nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  fi
  step "device query (jitccl): buffers on GPU 0" \
    timeout 120 "$out/cuda-tests" --exact gpu_buffers_copy_both_ways_and_slices_address_their_part --nocapture
}

# Topology detection where there are GPUs: sysfs's PCI tree, the driver's compute
# capability and NVML's NVLinks (its INFO log says whether NVML loaded). The detected GPU 0
# must show its sm; with $OUT the topology is also written as NCCL XML.
topo() {
  local t
  t=$(JITCCL_DEBUG=INFO timeout 60 "$out/jitccl" topo ${OUT:+--dump-xml "$OUT/topo.xml"} 2>&1) || { echo "$t"; return 1; }
  # The system and the first channels, then what detection logged (whether NVML loaded).
  echo "$t" | grep -v 'topology:' | head -n 16
  echo "$t" | grep 'topology:' || true
  echo "$t" | grep -q '^  gpu 0: .* sm [0-9]' || { echo "no GPU 0 with its sm in the detected topology"; return 1; }
}

stage_topo() {
  step "topology detection (sysfs, driver, NVML): jitccl topo finds GPU 0 and its sm" topo
}

stage_errors() {
  step "errors: no such device, mixed targets, process ranks" \
    timeout 120 "$out/cuda-tests" --skip gpu_
}

stage_sweep() {
  # The GPU tests take turns on GPU 0 whatever the thread count (gpu() in tests/cuda.rs
  # says why).
  step "reference sweep: every collective x algorithm x protocol, 1-8 ranks on GPU 0" \
    timeout 540 "$out/cuda-tests" gpu_all_ gpu_reduce gpu_broadcast gpu_sendrecv --test-threads 8
}

stage_staged() {
  step "host-staged FIFOs (JITCCL_P2P_DISABLE=1): ring AllReduce, every protocol" \
    env JITCCL_P2P_DISABLE=1 timeout 300 "$out/cuda-tests" gpu_all_reduce_ring_ --test-threads 4
}

stage_init_rank() {
  step "init_rank: ranks joined by a unique id on GPU 0 (device FIFOs, boards in shared memory)" \
    timeout 120 "$out/cuda-tests" --exact gpu_init_rank_ranks_on_one_gpu_match_the_reference
}

stage_ipc() {
  # Rank processes on one GPU: perf relaunches itself, one rank per process; every rank
  # checks its results against the reference and perf fails on any wrong element. Without
  # MPS the GPU time-slices the processes, so waits span slices: small sizes, few iterations.
  for proto in simple ll ll128; do
    step "rank processes through CUDA IPC: AllReduce $proto, 4 processes on GPU 0" \
      timeout 60 "$out/jitccl" perf all_reduce --target cuda -N 4 --devices 0,0,0,0 --proto "$proto" -b 8 -e 1M -f 8 -n 3 -w 1
  done
  step "rank processes through CUDA IPC: ReduceScatter, AllGather, Broadcast, 3 processes" \
    bash -c 'for c in reduce_scatter all_gather broadcast; do
      timeout 60 "$0" perf $c --target cuda -N 3 --devices 0,0,0 -b 8 -e 1M -f 8 -n 3 -w 1 || exit 1; done' "$out/jitccl"
}

stage_net() {
  step "rank processes through the net proxy (host-mapped FIFOs): AllReduce, 2 processes" \
    env JITCCL_TRANSPORT=net timeout 60 "$out/jitccl" perf all_reduce --target cuda -N 2 --devices 0,0 -b 8 -e 1M -f 8 -n 3 -w 1
}

# GPU memory straight to a network plugin: 2 rank processes on GPU 0 over the project's
# stand-in plugin EdgeGpu (sockets on loopback; GPU memory through the CUDA driver;
# NCCL_PTR_CUDA and forceFlush; regMr refuses memory of another kind than its type), perf
# checking every rank against the reference. With JITCCL_NET_GDR_LEVEL=SYS (the plugin's
# device has no PCI path, which counts as SYS) every connector must go direct: the log says
# so, and the plugin's counts show GPU memory registered, flushed and moved. With the
# default level (P2C) every connector must be staged, the plugin seeing host memory only.
net_direct() {
  local level=$1 dir log counts
  dir="${OUT:-${TMPDIR:-/tmp}}"
  log="$dir/net-direct-${level:-default}.log"
  counts="$dir/net-direct-${level:-default}.counts"
  rm -f "$counts"
  env JITCCL_TRANSPORT=net NCCL_NET_PLUGIN="$out/libnccl-net-edge-gpu.so" JITCCL_NET=EdgeGpu \
    ${level:+JITCCL_NET_GDR_LEVEL=$level} JITCCL_EDGE_COUNTS="$counts" JITCCL_DEBUG=INFO \
    timeout 120 "$out/jitccl" perf all_reduce --target cuda -N 2 --devices 0,0 --proto simple -b 8 -e 4M -f 8 \
    -n 3 -w 1 >"$log" 2>&1
  local rc=$?
  grep -v "INFO" "$log" | tail -n 20
  [ $rc -eq 0 ] || { echo "perf failed (rc $rc); log: $log"; return 1; }
  local direct staged
  direct=$(grep -c "direct, GPU memory registered as NCCL_PTR_CUDA" "$log")
  staged=$(grep -c "staged through page-locked host memory" "$log")
  grep -m 2 "direct, GPU memory\|staged through page-locked" "$log"
  # Per process its last counts line (finalize writes the totals so far), summed.
  local sums host_regs gpu_regs flushes out_bytes in_bytes
  sums=$(awk '{ last[$2] = $0 } END { for (p in last) { split(last[p], f, " ");
    h += f[4]; c += f[6]; fl += f[8]; o += f[10]; i += f[12] } print h, c, fl, o, i }' "$counts" 2>/dev/null)
  echo "connectors: $direct direct, $staged staged; EdgeGpu counts (host regs, GPU regs, iflush, GPU bytes out, in): $sums"
  read -r host_regs gpu_regs flushes out_bytes in_bytes <<<"$sums"
  if [ -n "$level" ]; then
    [ "$direct" -gt 0 ] && [ "$staged" -eq 0 ] || { echo "expected every connector direct"; return 1; }
    [ "${gpu_regs:-0}" -gt 0 ] && [ "${flushes:-0}" -gt 0 ] && [ "${out_bytes:-0}" -gt 0 ] && [ "${in_bytes:-0}" -gt 0 ] ||
      { echo "expected GPU memory registered, flushed and moved by the plugin"; return 1; }
  else
    [ "$direct" -eq 0 ] && [ "$staged" -gt 0 ] || { echo "expected every connector staged"; return 1; }
    [ "${gpu_regs:-1}" -eq 0 ] && [ "${flushes:-1}" -eq 0 ] && [ "${host_regs:-0}" -gt 0 ] ||
      { echo "expected host memory only"; return 1; }
  fi
}

stage_net_direct() {
  step "GPU memory direct to a network plugin (EdgeGpu, JITCCL_NET_GDR_LEVEL=SYS): AllReduce, 2 processes, iflush" \
    net_direct SYS
  step "the same plugin at the default JITCCL_NET_GDR_LEVEL (P2C): staged through host memory" net_direct ""
}

stage_wire() {
  # Two ranks on one GPU share memory, where a wire format runs exactly unless told to encode:
  # JITCCL_WIRE_LOCAL=encode times the wired kernels beside the exact ones (perf checks each
  # result against the wire's bound and the same bits on every rank).
  local w
  for w in exact bf16 fp8e4m3 int8; do
    step "wire $w: AllReduce f32, 2 ranks on GPU 0, encoded on every hop" \
      env JITCCL_WIRE_LOCAL=encode timeout 120 "$out/jitccl" perf all_reduce --target cuda -N 2 --devices 0,0 \
      --wire "$w" -b 1M -e 256M -f 4 -n 5 -w 2
  done
}

stage_failures() {
  step "a rank that never arrives is Error::Timeout, not a hang" \
    timeout 120 "$out/cuda-tests" --exact gpu_a_rank_that_never_arrives_is_a_timeout
  step "an abort ends a waiting kernel" \
    timeout 120 "$out/cuda-tests" --exact gpu_an_abort_ends_a_waiting_kernel
}

# The C API on the GPU: a CUDA C program built with nvcc against nccl.h and libnccl.so.2,
# 2 and 4 rank processes on GPU 0, each checking its results.
capi_ranks() {
  local bin="${TMPDIR:-/tmp}/jitccl-cuda-ranks" n port
  nvcc -O2 -I"$out/capi" "$out/capi/cuda_ranks.cu" -L"$out" -l:libnccl.so.2 -Xlinker -rpath="$out" -o "$bin" || return 1
  for n in 2 4; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    NCCL_COMM_ID=127.0.0.1:$port timeout 120 "$out/jitccl" launch -n "$n" -- "$bin" || return 1
  done
}

stage_capi() {
  step "C API: a CUDA C program (nvcc, nccl.h, libnccl.so.2), 2 and 4 rank processes on GPU 0" capi_ranks
}

# PyTorch's backend "nccl" with jitccl's libnccl.so.2 preloaded: every c10d collective and
# a DDP step beside gloo's, 2 processes on GPU 0; jitccl's log must show it served them.
torch_ranks() {
  local log="${OUT:-${TMPDIR:-/tmp}}/torch-nccl.log"
  LD_PRELOAD="$out/libnccl.so.2" JITCCL_DEBUG=INFO PYTHONUNBUFFERED=1 \
    timeout 300 "$out/jitccl" launch -n 2 -- python3 "$out/capi/torch_nccl.py" >"$log" 2>&1
  local rc=$?
  grep -v "INFO" "$log" | tail -n 40
  [ $rc -eq 0 ] || return 1
  grep -q "init_rank: rank 1 of 2" "$log" || { echo "jitccl's log shows no init_rank: was libnccl.so.2 preloaded?"; return 1; }
  [ "$(grep -c "checks passed" "$log")" -eq 2 ]
}

# jitccl's own PyTorch backend (python/, `import jitccl.torch`) as "cpu:jitccl,cuda:jitccl":
# the same checks with CUDA tensors on its GPU communicator (and a CPU tensor on its host
# one), DDP beside gloo, 2 processes on GPU 0. No preload: the package loads libnccl.so.2
# itself, beside the NCCL that torch links.
torch_jitccl_ranks() {
  local log="${OUT:-${TMPDIR:-/tmp}}/torch-jitccl.log"
  TORCH_BACKEND=jitccl PYTHONPATH="$root/python" JITCCL_NCCL_SO="$out/libnccl.so.2" PYTHONUNBUFFERED=1 \
    timeout 300 "$out/jitccl" launch -n 2 -- python3 "$out/capi/torch_nccl.py" >"$log" 2>&1
  local rc=$?
  # Which backend served (its C++ part compiled there, or the warning that says why not).
  grep "jitccl backend:\|C++ backend" "$log" | head -n 5
  grep -v "INFO" "$log" | tail -n 40
  [ $rc -eq 0 ] && [ "$(grep -c "checks passed" "$log")" -eq 2 ]
}

stage_torch() {
  step "PyTorch backend nccl on jitccl (LD_PRELOAD): every c10d collective, DDP beside gloo" torch_ranks
  step "PyTorch backend jitccl (python/): every c10d collective on CUDA tensors, DDP beside gloo" torch_jitccl_ranks
}

# Asynchronous launches (the default: a call returns once its kernel is queued) beside the
# synchronous fallback (JITCCL_CUDA_SYNC=1: every launch waited for), in one run: a sample
# of the reference sweep, calls queued back to back, a captured CUDA graph against eager
# calls, and the timeout and abort tests, each both ways.
stage_launches() {
  local sync
  for sync in 0 1; do
    step "launches (JITCCL_CUDA_SYNC=$sync): ring AllReduce x protocols, Broadcast, SendRecv, queued calls, a graph, a shift in place" \
      env JITCCL_CUDA_SYNC=$sync timeout 240 "$out/cuda-tests" gpu_all_reduce_ring_ gpu_broadcast_ring_simple \
      gpu_sendrecv_simple gpu_back_to_back_queued gpu_a_captured_graph gpu_a_shift_in_place --test-threads 4
    step "launches (JITCCL_CUDA_SYNC=$sync): a timeout and an abort end the kernel, naming rank and peer" \
      env JITCCL_CUDA_SYNC=$sync timeout 120 "$out/cuda-tests" gpu_a_rank_that_never_arrives_is_a_timeout \
      gpu_an_abort_ends_a_waiting_kernel --test-threads 1
  done
}

# The direct algorithms on the GPU: ranks loading from and storing to each other's
# registered or symmetric buffers. The CUDA reference tests of every direct kernel (ranks
# as threads on GPU 0, 1-8 of them, and 16 CTAs past 8 MiB), rank processes through CUDA
# IPC (symmetric buffers; perf checks every rank), then AllReduce direct (two-shot and
# one-shot) against ring at 2 ranks on registered buffers, busbw, the table also in
# $OUT/direct-perf.txt.
stage_direct() {
  step "direct kernels: the tests' 93 compiled in parallel (NVRTC, GPU 0's arch)" direct_kernels
  step "direct kernels: registered and symmetric buffers, 1-8 ranks as threads on GPU 0, 16 CTAs past 8 MiB" \
    timeout 240 "$out/cuda-tests" gpu_direct_ --test-threads 4
  step "direct kernels, 2 rank processes through CUDA IPC (symmetric buffers): AllReduce, ReduceScatter, AllGather, Broadcast, Reduce" \
    direct_ipc
  step "perf: direct against ring (AllReduce, AllGather, ReduceScatter), 2 ranks on GPU 0, registered buffers, 8 B - 256 MiB" \
    direct_perf
}

# The kernels of the direct tests (tests/cuda.rs's samples) into the run's cache, all at
# once: the tests take turns on the GPU and would compile them one at a time (about a
# second each).
direct_kernels() {
  local specs
  specs=$("$out/jitccl" kernels list --target cuda 2>/dev/null |
    grep -E '\.direct(_oneshot)?\.simple\.((f32|i32)\.[a-z]+|(f16|bf16|f64|u8|f8e4m3)\.(sum|max)|u8)$')
  [ -n "$specs" ] || { echo "no direct kernel specs listed"; return 1; }
  # shellcheck disable=SC2086 # one spec a word
  "$out/jitccl" kernels compile --target cuda -j "$(nproc)" $specs
}

direct_ipc() {
  local c algo
  for c in all_reduce:direct all_reduce:direct_oneshot reduce_scatter:direct all_gather:direct broadcast:direct \
    reduce:direct; do
    algo=${c#*:}
    timeout 60 "$out/jitccl" perf "${c%%:*}" --target cuda -N 2 --devices 0,0 -R 2 --algo "$algo" -b 8 -e 4M -f 8 \
      -n 3 -w 1 || { echo "direct over CUDA IPC: ${c%%:*} $algo failed"; return 1; }
  done
}

# The stages that time jitccl alone (perf, points, channels, tune, launch_perf, and the direct
# stage's tables).
# shellcheck source=tools/gpu-check-perf.sh
source "$root/tools/gpu-check-perf.sh"
# The stage that sets jitccl beside NVIDIA's NCCL (nccl_side), with what `build` carries
# for it (build_nccl_side).
# shellcheck source=tools/gpu-check-nccl.sh
source "$root/tools/gpu-check-nccl.sh"

# The stages of `run`, in order; each is the function stage_NAME above.
STAGES=(query topo errors launches direct launch_perf sweep staged init_rank ipc net net_direct wire failures perf points channels tune capi
  torch nccl_side)

run() {
  local stages=("$@") st
  [ ${#stages[@]} -gt 0 ] || stages=("${STAGES[@]}")
  for st in "${stages[@]}"; do
    declare -F "stage_$st" >/dev/null || {
      echo "gpu-check run: unknown stage '$st' (stages: ${STAGES[*]})" >&2
      exit 2
    }
  done
  [ -x "$out/cuda-tests" ] && [ -x "$out/jitccl" ] || {
    echo "gpu-check run: $out has no binaries: run 'bash tools/gpu-check.sh build' first (where Rust is)" >&2
    exit 1
  }
  cd "$root"
  echo "gpu-check run: binaries of commit $(cat "$out/COMMIT" 2>/dev/null || echo unknown)"
  # A missing GPU or NVRTC fails the tests instead of skipping them.
  export JITCCL_REQUIRE_GPU=1 JITCCL_REQUIRE_NVRTC=1
  # Functions load when their module loads, not at their first launch (see device/cuda/module.rs).
  export CUDA_MODULE_LOADING=EAGER
  JITCCL_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jitccl-gpu-check.XXXXXX")
  export JITCCL_CACHE_DIR
  trap 'rm -rf "$JITCCL_CACHE_DIR"' EXIT

  for st in "${stages[@]}"; do "stage_$st"; done
  echo
  for f in "${failures[@]}"; do echo "FAILED: $f"; done
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

case "${1:-}" in
  build) build ;;
  run)
    shift
    if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
      run "$@" 2>&1 | tee -a "$OUT/gpu-check.log"
      exit "${PIPESTATUS[0]}"
    fi
    run "$@"
    ;;
  *)
    echo "usage: bash tools/gpu-check.sh build | run [STAGE...]" >&2
    exit 2
    ;;
esac
