// One rank of a CUDA C program on jitccl's libnccl.so.2, built with nvcc against
// capi/include/nccl.h on the GPU machine (tools/gpu-check.sh, stage `capi`): every rank
// uses the current device (GPU 0 unless CUDA_DEVICE says otherwise), fills its buffers with
// a kernel on its own stream, and checks AllReduce, Broadcast, AllGather, a group of
// sends and receives, two AllReduces queued back to back on the stream (calls return once
// queued), and an AllReduce captured into a CUDA graph and replayed, against a reference.
// Rank and size from the launcher (RANK, WORLD_SIZE); NCCL_COMM_ID fixes the root.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { \
  fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #x, ncclGetErrorString(r_), ncclGetLastError(NULL)); return 1; } } while (0)

__global__ void fill(float* p, size_t n, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (float)((i + 3 * rank) % 7 + 1);
}

static float input(int r, size_t i) { return (float)((i + 3 * r) % 7 + 1); }

static int expect(int rank, const char* what, const float* got, size_t n, float (*want)(size_t, int, int), int size) {
  for (size_t i = 0; i < n; i++) {
    float w = want(i, rank, size);
    if (got[i] != w) {
      fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g\n", rank, what, i, got[i], w);
      return 1;
    }
  }
  return 0;
}

static float sum_all(size_t i, int rank, int size) { (void)rank; float s = 0; for (int r = 0; r < size; r++) s += input(r, i); return s; }
static float from_last(size_t i, int rank, int size) { (void)rank; return input(size - 1, i); }
static float scale = 1;
static float scaled_sum(size_t i, int rank, int size) { return scale * sum_all(i, rank, size); }

int main(void) {
  int rank = atoi(getenv("RANK")), size = atoi(getenv("WORLD_SIZE"));
  const char* dev = getenv("CUDA_DEVICE");
  CUDA(cudaSetDevice(dev ? atoi(dev) : 0));
  const size_t n = 1 << 20;
  cudaStream_t s;
  CUDA(cudaStreamCreate(&s));
  float *a, *b, *big;
  CUDA(cudaMalloc(&a, n * sizeof(float)));
  CUDA(cudaMalloc(&b, n * sizeof(float)));
  CUDA(cudaMalloc(&big, n * size * sizeof(float)));
  float* host = (float*)malloc(n * size * sizeof(float));
  ncclUniqueId id;
  ncclComm_t comm;
  NCCL(ncclGetUniqueId(&id));
  NCCL(ncclCommInitRank(&comm, size, id, rank));
  int cu = -2;
  NCCL(ncclCommCuDevice(comm, &cu));
  int checks = 0;

  // The fill is queued on the caller's stream: the collective must see it.
  fill<<<64, 256, 0, s>>>(a, n, rank);
  NCCL(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(host, b, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (expect(rank, "AllReduce", host, n, sum_all, size)) return 1;
  checks++;

  fill<<<64, 256, 0, s>>>(a, n, rank);
  NCCL(ncclBroadcast(a, a, n, ncclFloat, size - 1, comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(host, a, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (expect(rank, "Broadcast", host, n, from_last, size)) return 1;
  checks++;

  fill<<<64, 256, 0, s>>>(a, n, rank);
  NCCL(ncclAllGather(a, big, n, ncclFloat, comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(host, big, n * size * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < size; r++)
    for (size_t i = 0; i < n; i++)
      if (host[r * n + i] != input(r, i)) { fprintf(stderr, "rank %d: AllGather block %d element %zu\n", rank, r, i); return 1; }
  checks++;

  // Send to the next rank, receive from the previous, posted in the other order too.
  fill<<<64, 256, 0, s>>>(a, n, rank);
  NCCL(ncclGroupStart());
  NCCL(ncclRecv(b, n, ncclFloat, (rank + size - 1) % size, comm, s));
  NCCL(ncclSend(a, n, ncclFloat, (rank + 1) % size, comm, s));
  NCCL(ncclGroupEnd());
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(host, b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++)
    if (host[i] != input((rank + size - 1) % size, i)) { fprintf(stderr, "rank %d: Send/Recv element %zu\n", rank, i); return 1; }
  checks++;

  // Back to back on the caller's stream, no wait between: the second reads what the
  // first wrote (a call returns once queued; the stream orders them).
  fill<<<64, 256, 0, s>>>(a, n, rank);
  NCCL(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, s));
  NCCL(ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(host, b, n * sizeof(float), cudaMemcpyDeviceToHost));
  scale = (float)size;
  if (expect(rank, "two queued AllReduces", host, n, scaled_sum, size)) return 1;
  checks++;

  // Captured into a CUDA graph (recorded, not run), then replayed twice: each replay
  // multiplies b by the rank count again.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  NCCL(ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm, s));
  CUDA(cudaStreamEndCapture(s, &graph));
  CUDA(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  CUDA(cudaGraphLaunch(exec, s));
  CUDA(cudaGraphLaunch(exec, s));
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaMemcpy(host, b, n * sizeof(float), cudaMemcpyDeviceToHost));
  scale = (float)size * size * size;
  if (expect(rank, "a captured AllReduce replayed twice", host, n, scaled_sum, size)) return 1;
  ncclResult_t async = ncclInternalError;
  NCCL(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) { fprintf(stderr, "rank %d: ncclCommGetAsyncError gives %d after the replays\n", rank, async); return 1; }
  CUDA(cudaGraphExecDestroy(exec));
  CUDA(cudaGraphDestroy(graph));
  checks++;

  NCCL(ncclCommDestroy(comm));
  printf("rank %d: cuda device %d: %d checks passed\n", rank, cu, checks);
  return 0;
}
