// Ranks as one process's communicators on GPU 0 (ncclCommInitAll over {0, 0, ...}), the
// layout of `jitccl perf -g N`: AllReduce, AllGather and ReduceScatter (float sum, out of
// place) at MIN, 8 x MIN, ... MAX bytes, nccl-tests' sizes. For benches/gpu/nccl_side.py,
// which runs it on NVIDIA's NCCL (NCCL_MULTI_RANK_GPU_ENABLE=1) beside jitccl's perf; it
// links whichever libnccl.so.2 the loader finds.
//
//   threads_side NRANKS MIN MAX ITERS CHECK
//
// Each size: CHECK=1 first checks one call of small integers against the reference (every
// element; a wrong one exits 1), then 3 untimed calls and ITERS timed ones (zeroes), all
// ranks' calls in one group a time, timed with events on rank 0's stream, which waits for
// the others'. Prints "COLL SIZE US BUSBW" lines.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDA(x)                                                                             \
  do {                                                                                      \
    cudaError_t cuda_err_ = (x);                                                            \
    if (cuda_err_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(cuda_err_)); \
      exit(2);                                                                              \
    }                                                                                       \
  } while (0)
#define NCCL(x)                                                                             \
  do {                                                                                      \
    ncclResult_t nccl_res_ = (x);                                                           \
    if (nccl_res_ != ncclSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #x, ncclGetErrorString(nccl_res_), \
              ncclGetLastError(NULL));                                                      \
      exit(3);                                                                              \
    }                                                                                       \
  } while (0)

enum Coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER };
static const char* NAMES[] = {"all_reduce", "all_gather", "reduce_scatter"};

struct Ranks {
  int n;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> send, recv;
  std::vector<cudaEvent_t> done;
};

// One call on every rank, grouped: `count` elements a rank (the per-rank part of AllGather's
// output and of ReduceScatter's input).
static void call(Ranks& R, Coll c, size_t count) {
  NCCL(ncclGroupStart());
  for (int r = 0; r < R.n; r++) {
    if (c == ALL_REDUCE)
      NCCL(ncclAllReduce(R.send[r], R.recv[r], count, ncclFloat, ncclSum, R.comms[r], R.streams[r]));
    else if (c == ALL_GATHER)
      NCCL(ncclAllGather(R.send[r], R.recv[r], count, ncclFloat, R.comms[r], R.streams[r]));
    else
      NCCL(ncclReduceScatter(R.send[r], R.recv[r], count, ncclFloat, ncclSum, R.comms[r], R.streams[r]));
  }
  NCCL(ncclGroupEnd());
}

// Rank r's input chunk q holds r + 1 + 10 q (exact in float); every element of every
// rank's output must be the reference's.
static void check(Ranks& R, Coll c, size_t count) {
  int n = R.n;
  size_t in = c == REDUCE_SCATTER ? count * n : count, out = c == ALL_GATHER ? count * n : count;
  std::vector<float> h(in > out ? in : out);
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < in; i++) h[i] = (float)(r + 1 + 10 * (c == REDUCE_SCATTER ? i / count : 0));
    CUDA(cudaMemcpy(R.send[r], h.data(), in * sizeof(float), cudaMemcpyHostToDevice));
  }
  call(R, c, count);
  for (int r = 0; r < n; r++) CUDA(cudaStreamSynchronize(R.streams[r]));
  for (int r = 0; r < n; r++) {
    CUDA(cudaMemcpy(h.data(), R.recv[r], out * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < out; i++) {
      float want = c == ALL_REDUCE ? n * (n + 1) / 2.0f
                 : c == ALL_GATHER ? (float)(i / count + 1)
                                   : n * (n + 1) / 2.0f + 10.0f * n * r;
      if (h[i] != want) {
        fprintf(stderr, "rank %d: %s of %zu elements a rank: element %zu is %g, expected %g\n", r, NAMES[c], count,
                i, h[i], want);
        exit(1);
      }
    }
  }
}

static double timed(Ranks& R, Coll c, size_t count, int iters) {
  cudaEvent_t start, end;
  CUDA(cudaEventCreate(&start));
  CUDA(cudaEventCreate(&end));
  CUDA(cudaEventRecord(start, R.streams[0]));
  for (int r = 1; r < R.n; r++) CUDA(cudaStreamWaitEvent(R.streams[r], start, 0));
  for (int i = 0; i < iters; i++) call(R, c, count);
  for (int r = 1; r < R.n; r++) {
    CUDA(cudaEventRecord(R.done[r], R.streams[r]));
    CUDA(cudaStreamWaitEvent(R.streams[0], R.done[r], 0));
  }
  CUDA(cudaEventRecord(end, R.streams[0]));
  CUDA(cudaEventSynchronize(end));
  float ms = 0;
  CUDA(cudaEventElapsedTime(&ms, start, end));
  CUDA(cudaEventDestroy(start));
  CUDA(cudaEventDestroy(end));
  return ms * 1e3 / iters;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s NRANKS MIN MAX ITERS CHECK\n", argv[0]);
    return 2;
  }
  Ranks R;
  R.n = atoi(argv[1]);
  size_t min = strtoull(argv[2], NULL, 10), max = strtoull(argv[3], NULL, 10);
  int iters = atoi(argv[4]), checking = atoi(argv[5]);
  if (R.n < 1 || min < 4 || max < min || iters < 1) {
    fprintf(stderr, "need NRANKS >= 1, 4 <= MIN <= MAX, ITERS >= 1\n");
    return 2;
  }
  int version = 0;
  NCCL(ncclGetVersion(&version));
  printf("# NCCL API version %d, %d ranks on GPU 0 in one process\n", version, R.n);
  std::vector<int> devs(R.n, 0);
  R.comms.resize(R.n);
  CUDA(cudaSetDevice(0));
  NCCL(ncclCommInitAll(R.comms.data(), R.n, devs.data()));
  R.streams.resize(R.n);
  R.send.resize(R.n);
  R.recv.resize(R.n);
  R.done.resize(R.n);
  for (int r = 0; r < R.n; r++) {
    CUDA(cudaStreamCreateWithFlags(&R.streams[r], cudaStreamNonBlocking));
    CUDA(cudaEventCreateWithFlags(&R.done[r], cudaEventDisableTiming));
    CUDA(cudaMalloc((void**)&R.send[r], max));
    CUDA(cudaMalloc((void**)&R.recv[r], max));
  }
  for (int c = ALL_REDUCE; c <= REDUCE_SCATTER; c++) {
    double bus = c == ALL_REDUCE ? 2.0 * (R.n - 1) / R.n : (double)(R.n - 1) / R.n;
    for (size_t size = min; size <= max; size *= 8) {
      // nccl-tests' sizes: the whole buffer (AllGather's output, ReduceScatter's input).
      size_t count = c == ALL_REDUCE ? size / sizeof(float) : size / sizeof(float) / R.n;
      if (checking) check(R, (Coll)c, count);
      for (int r = 0; r < R.n; r++) {
        CUDA(cudaMemset(R.send[r], 0, max));
        CUDA(cudaMemset(R.recv[r], 0, max));
      }
      CUDA(cudaDeviceSynchronize());
      timed(R, (Coll)c, count, 3);
      double us = timed(R, (Coll)c, count, iters);
      printf("%s %zu %.2f %.3f\n", NAMES[c], size, us, size / us / 1e3 * bus);
      fflush(stdout);
    }
  }
  for (int r = 0; r < R.n; r++) {
    CUDA(cudaStreamSynchronize(R.streams[r]));
    NCCL(ncclCommDestroy(R.comms[r]));
    CUDA(cudaFree(R.send[r]));
    CUDA(cudaFree(R.recv[r]));
  }
  return 0;
}
