# Sourced by tools/gpu-check.sh: its stage nccl_side, which sets jitccl beside NVIDIA's
# NCCL on the GPU machine, and build_nccl_side, which `build` calls for what it carries.
# They use gpu-check.sh's `step`, $out (target/gpu-check) and $OUT.
# shellcheck shell=bash disable=SC2154 # $out is gpu-check.sh's

# What the stage carries: the scripts of benches/gpu, and what tools/gpu-extras.sh fetched
# into target/gpu-extras (NCCL 2.30.7), where it was run.
build_nccl_side() {
  mkdir -p "$out/gpu"
  cp benches/gpu/nccl_side.py benches/busbw_svg.py benches/gpu/torch_side.py benches/gpu/threads_side.cu "$out/gpu/"
  cp tools/gpu-check-nccl.sh "$out/"
  if [ -d target/gpu-extras ]; then
    cp -r target/gpu-extras "$out/extras"
  else
    echo "gpu-check build: no target/gpu-extras (tools/gpu-extras.sh): stage nccl_side" \
      "will run without NCCL 2.30"
  fi
}

# A folder for what the stage unpacks, once per run.
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

# benches/gpu/nccl_side.py: AllReduce, AllGather and ReduceScatter at 16 B - 256 MiB, 2 and 4
# ranks on GPU 0, through jitccl perf, NCCL's ranks in one process (threads_side.cu, built
# here with nvcc), PyTorch on jitccl's libnccl.so.2 and PyTorch on NCCL (2.30 where it was
# carried, else PyTorch's own), and the device's copy rate, in interleaved rounds; the table
# goes to $OUT/nccl-side.txt, every sample to nccl-side.json.
nccl_side() {
  local nccl threads
  nccl=$(nccl230) || { echo "no NCCL 2.30 carried (tools/gpu-extras.sh): torch+NCCL runs PyTorch's own NCCL"; nccl=; }
  threads="$(extras_dir)/threads_side"
  nvcc -O2 -arch=native -I"$out/capi" "$out/gpu/threads_side.cu" -L"$out" -l:libnccl.so.2 -o "$threads" ||
    { echo "threads_side.cu did not build: no threads+NCCL rows"; threads=; }
  # Five minutes of rounds: the rows of PyTorch (one process a rank, time-sliced) take most.
  # GPU_CHECK_UNTIL (seconds since the epoch) ends the sweep in time for a remote command's
  # limit: the rounds begun by then are what the tables show.
  local deadline=310
  if [ -n "${GPU_CHECK_UNTIL:-}" ]; then
    deadline=$((GPU_CHECK_UNTIL - $(date +%s) - 20))
    [ "$deadline" -gt 310 ] && deadline=310
    [ "$deadline" -ge 60 ] || { echo "GPU_CHECK_UNTIL leaves ${deadline} s: too little for nccl_side"; return 1; }
  fi
  timeout $((deadline + 40)) python3 "$out/gpu/nccl_side.py" --jitccl "$out/jitccl" --libnccl "$out/libnccl.so.2" \
    ${nccl:+--nccl "$nccl"} ${threads:+--threads "$threads"} --out "${OUT:-$(extras_dir)}" \
    --ranks 2,4 --rounds 3 --budget 0.05 --deadline "$deadline"
}

stage_nccl_side() {
  step "jitccl beside NCCL: AllReduce, AllGather, ReduceScatter 16 B - 256 MiB, 2 and 4 ranks on GPU 0" nccl_side
}
