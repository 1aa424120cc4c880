# Sourced by scripts/gpu-check.sh: its stages nccl_side and nccl_tests, which set jitccl
# beside NVIDIA's NCCL on the GPU machine, and build_nccl_side, which `build` calls for what
# they carry. They use gpu-check.sh's `step`, $out (target/gpu-check) and $OUT.
# shellcheck shell=bash disable=SC2154 # $out is gpu-check.sh's

# What those two stages carry: the scripts of benches/gpu, nccl-tests' source with the API
# header it is built against, and what scripts/gpu-extras.sh fetched into target/gpu-extras
# (NCCL 2.30.7 cut to sm_90, MPICH), where it was run.
build_nccl_side() {
  mkdir -p "$out/gpu"
  cp benches/gpu/nccl_side.py benches/gpu/torch_side.py benches/gpu/threads_side.cu benches/gpu/nccl_tests_table.py \
    "$out/gpu/"
  cp -r benches/gpu/third_party/nccl-tests benches/gpu/nccl-tests-api scripts/gpu-check-nccl.sh "$out/"
  if [ -d target/gpu-extras ]; then
    cp -r target/gpu-extras "$out/extras"
  else
    echo "gpu-check build: no target/gpu-extras (scripts/gpu-extras.sh): stages nccl_side and nccl_tests" \
      "will run without NCCL 2.30 and MPI"
  fi
}

# A folder for what the stages unpack, once per run.
extras_dir() {
  local d="${TMPDIR:-/tmp}/jitccl-gpu-extras"
  mkdir -p "$d" && echo "$d"
}

# The path of NCCL 2.30's libnccl.so.2 unpacked from the carried one; fails where none was carried.
nccl230() {
  local src="$out/extras/libnccl.so.2.xz" dir
  [ -f "$src" ] || return 1
  dir="$(extras_dir)/nccl-2.30"
  if [ ! -f "$dir/libnccl.so.2" ]; then
    mkdir -p "$dir" && python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
      "$src" "$dir/libnccl.so.2.part" && mv "$dir/libnccl.so.2.part" "$dir/libnccl.so.2" || return 1
  fi
  echo "$dir/libnccl.so.2"
}

# The MPICH folder (bin/mpiexec, include/mpi.h, lib/libmpi.so) unpacked from the carried one.
mpich() {
  local src="$out/extras/mpich.tar.xz" dir
  [ -f "$src" ] || return 1
  dir="$(extras_dir)"
  [ -x "$dir/mpich/bin/mpiexec" ] ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$src" "$dir" ||
    return 1
  echo "$dir/mpich"
}

# benches/gpu/nccl_side.py: AllReduce, AllGather and ReduceScatter at 16 B - 256 MiB, 2 and 4
# ranks on GPU 0, through jitccl perf, NCCL's ranks in one process (threads_side.cu, built
# here with nvcc), PyTorch on jitccl's libnccl.so.2 and PyTorch on NCCL (2.30 where it was
# carried, else PyTorch's own), and the device's copy rate, in interleaved rounds; the table
# goes to $OUT/nccl-side.txt, every sample to nccl-side.json.
nccl_side() {
  local nccl threads
  nccl=$(nccl230) || { echo "no NCCL 2.30 carried (scripts/gpu-extras.sh): torch+NCCL runs PyTorch's own NCCL"; nccl=; }
  threads="$(extras_dir)/threads_side"
  nvcc -O2 -arch=native -I"$out/capi" "$out/gpu/threads_side.cu" -L"$out" -l:libnccl.so.2 -o "$threads" ||
    { echo "threads_side.cu did not build: no threads+NCCL rows"; threads=; }
  # Five minutes of rounds: the rows of PyTorch (one process a rank, time-sliced) take most.
  timeout 350 python3 "$out/gpu/nccl_side.py" --jitccl "$out/jitccl" --libnccl "$out/libnccl.so.2" \
    ${nccl:+--nccl "$nccl"} ${threads:+--threads "$threads"} --out "${OUT:-$(extras_dir)}" \
    --ranks 2,4 --rounds 3 --budget 0.05 --deadline 310
}

stage_nccl_side() {
  step "jitccl beside NCCL: AllReduce, AllGather, ReduceScatter 16 B - 256 MiB, 2 and 4 ranks on GPU 0" nccl_side
}

# The folder of nvcc's libcudart.so (nccl-tests links it, and its programs load it).
cuda_lib() {
  local cuda lib
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
  for lib in "$cuda/lib64" "$cuda/lib" "$cuda/targets/x86_64-linux/lib"; do
    [ -e "$lib/libcudart.so" ] && echo "$lib" && return 0
  done
  echo "no libcudart.so beside $cuda/bin/nvcc" >&2
  return 1
}

# nccl-tests built with nvcc against jitccl's nccl.h (NCCL 2.27's API level:
# benches/gpu/nccl-tests-api/nccl.h says why) and libnccl.so.2, with MPI where MPICH was
# carried (one process a rank, every one on GPU 0 through NCCL_TESTS_DEVICE=0):
# nccl_tests_build HOME MPI_HOME (empty: without MPI).
nccl_tests_build() {
  local home=$1 mpi=$2 lib
  lib=$(cuda_lib) || return 1
  rm -rf "$home" && mkdir -p "$home/include" "$home/capi" "$home/lib" || return 1
  cp "$out/nccl-tests-api/nccl.h" "$home/include/" && cp "$out/capi/nccl.h" "$home/capi/" &&
    ln -s "$out/libnccl.so.2" "$home/lib/libnccl.so" && cp -r "$out/nccl-tests" "$home/src" || return 1
  # The GPU's own architecture (NCCL_TESTS_GENCODE: another, to try the build without one).
  local flags=(CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")" CUDA_LIB="$lib" NCCL_HOME="$home"
    BUILDDIR="$home/build" NVCC_GENCODE="${NCCL_TESTS_GENCODE:--arch=native}")
  [ -z "$mpi" ] || flags+=(MPI=1 MPI_HOME="$mpi")
  make -j"$(nproc)" -C "$home/src/src" "${flags[@]}" "$home"/build/{all_reduce,all_gather,reduce_scatter}_perf
}

# What nccl-tests' programs load besides libnccl.so.2: libcudart, and libmpi under MPI.
nccl_tests_libs() {
  echo "$(cuda_lib)${NT_MPI:+:$NT_MPI/lib}:${LD_LIBRARY_PATH:-}"
}

# One nccl-tests run: nccl_tests_one LOG LIBDIR NRANKS COLL [FLAGS...], under MPI where there
# is one; it must pass nccl-tests' own check of every element, within 120 s and before the
# stage's end ($NT_END, in $SECONDS).
nccl_tests_one() {
  local log=$1 libdir=$2 n=$3 coll=$4 rc left=$((NT_END - SECONDS))
  shift 4
  [ "$left" -ge 20 ] || { echo "not run: the stage's time is spent" | tee "$log"; return 1; }
  local cmd=("$NT_HOME/build/${coll}_perf" -b 8 -e 128M -f 4 -n 10 -w 3 -c 1 "$@")
  [ -z "$NT_MPI" ] || cmd=("$NT_MPI/bin/mpiexec" -np "$n" "${cmd[@]}")
  LD_LIBRARY_PATH="$libdir:$(nccl_tests_libs)" NCCL_TESTS_DEVICE=0 timeout $((left < 120 ? left : 120)) "${cmd[@]}" \
    >"$log" 2>&1
  rc=$?
  grep -v ' INFO \|^#  Rank' "$log" | tail -n 22
  [ $rc -eq 0 ] && grep -q 'Out of bounds values : 0 OK' "$log"
}

nccl_tests() {
  local dir nccl n coll failed=0
  dir="$(extras_dir)/nccl-tests-logs"
  rm -rf "$dir" && mkdir -p "$dir"
  NT_HOME="$(extras_dir)/nccl-tests" NT_MPI=$(mpich) || {
    NT_MPI=
    echo "no MPICH carried (scripts/gpu-extras.sh): nccl-tests runs one process, so one rank on one GPU"
  }
  # Four minutes in all, the build (about a minute) included.
  NT_END=$((SECONDS + 240))
  export NT_HOME NT_MPI NT_END
  nccl_tests_build "$NT_HOME" "$NT_MPI" >"$dir/build.log" 2>&1 || { tail -n 30 "$dir/build.log"; return 1; }
  echo "built: $(cd "$NT_HOME/build" && echo *_perf)"
  nccl=$(nccl230) || nccl=
  local ranks=1
  [ -z "$NT_MPI" ] || ranks="1 2 4"
  for n in $ranks; do
    for coll in all_reduce all_gather reduce_scatter; do
      echo "-- $coll, $n rank(s) on GPU 0: jitccl"
      JITCCL_DEBUG=INFO nccl_tests_one "$dir/jitccl-$coll-$n.txt" "$out" "$n" "$coll" -g 1 || failed=1
      grep -q "init_rank: rank $((n - 1)) of $n" "$dir/jitccl-$coll-$n.txt" ||
        { echo "jitccl's log shows no init_rank: did jitccl serve nccl-tests?"; failed=1; }
      [ -n "$nccl" ] || continue
      echo "-- $coll, $n rank(s) on GPU 0: NCCL 2.30"
      NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_DEBUG=VERSION \
        nccl_tests_one "$dir/nccl-$coll-$n.txt" "$(dirname "$nccl")" "$n" "$coll" -g 1 ||
        echo "(NCCL's run failed: its rows are missing from the table)"
    done
  done
  # Without MPI, ranks of one process are its threads (-t) or GPUs (-g), and rank i takes
  # GPU NCCL_TESTS_DEVICE + i: with one GPU, more than one rank asks for a GPU 1. Shown, not
  # counted: a second rank in one process, and whether CUDA lists GPU 0 twice when told to.
  echo "-- one process, two ranks (rank 1 asks for GPU 1)"
  local probe vars one=()
  [ -z "$NT_MPI" ] || one=("$NT_MPI/bin/mpiexec" -np 1)
  for probe in "-g 2" "-t 2 -g 1" "CUDA_VISIBLE_DEVICES=0,0 -g 2"; do
    vars=${probe%%-*}
    # shellcheck disable=SC2086 # the variables and flags are words
    if env LD_LIBRARY_PATH="$out:$(nccl_tests_libs)" NCCL_TESTS_DEVICE=0 $vars timeout 60 "${one[@]}" \
      "$NT_HOME/build/all_reduce_perf" -b 8 -e 8 -${probe#*-} >"$dir/probe.txt" 2>&1; then
      echo "$probe: ran: $(grep -m1 'Out of bounds' "$dir/probe.txt")"
    else
      echo "$probe: failed: $(grep -m1 -i 'error\|invalid\|fail' "$dir/probe.txt")"
    fi
  done
  python3 "$out/gpu/nccl_tests_table.py" "$dir" | tee "${OUT:-$dir}/nccl-tests.txt"
  for f in "$dir"/*-*-*.txt; do
    { echo "==> $(basename "$f")"; grep -v ' INFO ' "$f"; } >>"${OUT:-$dir}/nccl-tests.txt"
  done
  return $failed
}

stage_nccl_tests() {
  step "nccl-tests on jitccl (nvcc, nccl.h, libnccl.so.2): AllReduce, AllGather, ReduceScatter beside NCCL" nccl_tests
}
