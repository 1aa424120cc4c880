/* The C side of scripts/compare-capi.sh: one rank times ITERS blocking float AllReduces of
 * BYTES through the C API (a blocking call on the host is complete when it returns), on
 * buffers from ncclMemAlloc (the host arena), as examples/allreduce_loop.rs does in Rust.
 * Rank and size from the launcher (RANK, WORLD_SIZE); NCCL_COMM_ID fixes the root.
 * Prints "rank R: BYTES B: T us per call". */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
  fprintf(stderr, "allreduce_loop: %s: %s\n", #call, ncclGetLastError(NULL)); return 1; } } while (0)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  const char *r = getenv("RANK"), *n = getenv("WORLD_SIZE");
  if (argc != 3 || !r || !n) { fprintf(stderr, "usage: RANK=.. WORLD_SIZE=.. allreduce_loop BYTES ITERS\n"); return 2; }
  int rank = atoi(r), size = atoi(n);
  size_t bytes = strtoull(argv[1], NULL, 10), count = bytes / 4;
  long iters = atol(argv[2]);
  ncclUniqueId id;
  ncclComm_t comm;
  void *send, *recv;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, size, id, rank));
  CHECK(ncclMemAlloc(&send, bytes));
  CHECK(ncclMemAlloc(&recv, bytes));
  for (long i = 0; i < (iters + 9) / 10; i++) CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
  double t0 = now_us();
  for (long i = 0; i < iters; i++) CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
  printf("rank %d: %zu B: %.3f us per call\n", rank, bytes, (now_us() - t0) / iters);
  CHECK(ncclMemFree(send));
  CHECK(ncclMemFree(recv));
  CHECK(ncclCommDestroy(comm));
  return 0;
}
