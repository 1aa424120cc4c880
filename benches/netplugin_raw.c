/*
 * What a network plugin itself takes to move bytes: two processes drive its v12 table
 * directly (no jitccl), each sending SIZE bytes to the other and receiving SIZE bytes per
 * iteration, one isend and one irecv each, as a 2-rank exchange moves them. Rank 0 prints
 * "SIZE MICROSECONDS" (the median iteration) per size. The listen handles travel through
 * files in DIR (the two processes may run in different network namespaces).
 *
 *   netplugin_raw PLUGIN RANK DIR ITERS SIZE...
 *
 * With CHUNK set, each direction's bytes go as messages of at most CHUNK bytes, up to
 * INFLIGHT (default 8) at once (see main).
 *
 * Every wait is bounded (60 s); exit 0 = every size ran.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jitccl_net.h"

#define WAIT_US 60e6
#define WARMUP 10

/* Exits with what failed; the peer then fails its bounded waits. */
#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "netplugin_raw: ");        \
    fprintf(stderr, __VA_ARGS__);              \
    fputc('\n', stderr);                       \
    exit(1);                                   \
  } while (0)

/* Monotonic time in microseconds, the unit the figures are printed in. */
static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void quiet(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (level > NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "plugin %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

#define CHECK(call)                                              \
  do {                                                           \
    ncclResult_t rc_ = (call);                                   \
    if (rc_ != ncclSuccess) FAIL("%s failed: rc %d", #call, rc_); \
  } while (0)

static void write_handle(const char* dir, int rank, const void* handle) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/handle.%d.tmp", dir, rank);
  snprintf(path, sizeof path, "%s/handle.%d", dir, rank);
  FILE* f = fopen(tmp, "wb");
  if (f == NULL || fwrite(handle, NCCL_NET_HANDLE_MAXSIZE, 1, f) != 1 || fclose(f) != 0) FAIL("writing %s", tmp);
  if (rename(tmp, path) != 0) FAIL("renaming %s", tmp);
}

static void read_handle(const char* dir, int rank, void* handle) {
  char path[4096];
  snprintf(path, sizeof path, "%s/handle.%d", dir, rank);
  double end = now_us() + WAIT_US;
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(handle, NCCL_NET_HANDLE_MAXSIZE, 1, f);
      fclose(f);
      if (n == 1) return;
    }
    if (now_us() > end) FAIL("no handle from rank %d in %s", rank, dir);
    usleep(1000);
  }
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc < 6) FAIL("usage: netplugin_raw PLUGIN RANK DIR ITERS SIZE...");
  int rank = atoi(argv[2]);
  const char* dir = argv[3];
  int iters = atoi(argv[4]);
  if ((rank != 0 && rank != 1) || iters < 1) FAIL("RANK is 0 or 1, ITERS at least 1");
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) FAIL("%s", dlerror());
  const ncclNet_v12_t* net = dlsym(lib, "ncclNetPlugin_v12");
  if (net == NULL) FAIL("%s exports no ncclNetPlugin_v12", argv[1]);
  void* ctx = NULL;
  CHECK(net->init(&ctx, 1, NULL, quiet, NULL));
  int ndev = 0;
  CHECK(net->devices(&ndev));
  if (ndev < 1) FAIL("the plugin has no device");

  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0}, peer[NCCL_NET_HANDLE_MAXSIZE];
  void *listen = NULL, *send = NULL, *recv = NULL;
  CHECK(net->listen(ctx, 0, handle, &listen));
  write_handle(dir, rank, handle);
  read_handle(dir, 1 - rank, peer);
  double end = now_us() + WAIT_US;
  while (send == NULL || recv == NULL) {
    ncclNetDeviceHandle_v12_t* dh = NULL;
    if (send == NULL) CHECK(net->connect(ctx, 0, peer, &send, &dh));
    if (recv == NULL) CHECK(net->accept(listen, &recv, &dh));
    if (now_us() > end) FAIL("connecting timed out");
  }

  size_t max = 0;
  for (int a = 5; a < argc; a++) max = (size_t)atoll(argv[a]) > max ? (size_t)atoll(argv[a]) : max;
  char* sbuf = calloc(1, max + 1);
  char* rbuf = calloc(1, max + 1);
  double* times = calloc((size_t)iters, sizeof *times);
  if (sbuf == NULL || rbuf == NULL || times == NULL) FAIL("out of memory");
  void *smh = NULL, *rmh = NULL;
  CHECK(net->regMr(send, sbuf, max + 1, NCCL_PTR_HOST, &smh));
  CHECK(net->regMr(recv, rbuf, max + 1, NCCL_PTR_HOST, &rmh));

  for (int a = 5; a < argc; a++) {
    size_t size = (size_t)atoll(argv[a]);
    /* CHUNK (bytes, 0: the whole size): each direction's bytes go as messages of at most
     * CHUNK, up to INFLIGHT (default 8) posted at once, as a FIFO of INFLIGHT slots of CHUNK
     * bytes moves them: what such a design can take at best. */
    size_t chunk = getenv("CHUNK") ? (size_t)atoll(getenv("CHUNK")) : 0;
    int inflight = getenv("INFLIGHT") ? atoi(getenv("INFLIGHT")) : 8;
    if (chunk == 0 || chunk > size) chunk = size > 0 ? size : 1;
    if (inflight < 1 || inflight > 8) inflight = 8;
    size_t nmsg = size == 0 ? 1 : (size + chunk - 1) / chunk;
    for (int i = -WARMUP; i < iters; i++) {
      double t0 = now_us(), deadline = t0 + WAIT_US;
      void *sreqs[8] = {0}, *rreqs[8] = {0};
      size_t sposted = 0, rposted = 0, sdone = 0, rdone = 0;
      while (sdone < nmsg || rdone < nmsg) {
        while (rposted < nmsg && rposted - rdone < (size_t)inflight) {
          size_t off = rposted * chunk, len = size - off < chunk ? size - off : chunk;
          void* data[1] = {rbuf + off};
          size_t sizes[1] = {len};
          int tags[1] = {0};
          void* mhs[1] = {rmh};
          void* req = NULL;
          CHECK(net->irecv(recv, 1, data, sizes, tags, mhs, NULL, &req));
          if (req == NULL) break;
          rreqs[rposted++ % 8] = req;
        }
        while (sposted < nmsg && sposted - sdone < (size_t)inflight) {
          size_t off = sposted * chunk, len = size - off < chunk ? size - off : chunk;
          void* req = NULL;
          CHECK(net->isend(send, sbuf + off, len, 0, smh, NULL, &req));
          if (req == NULL) break;
          sreqs[sposted++ % 8] = req;
        }
        int done = 0, n = 0;
        if (sdone < sposted) {
          CHECK(net->test(sreqs[sdone % 8], &done, &n));
          sdone += done;
        }
        if (rdone < rposted) {
          CHECK(net->test(rreqs[rdone % 8], &done, &n));
          rdone += done;
        }
        if (now_us() > deadline) FAIL("the exchange of %zu B did not complete", size);
      }
      if (i >= 0) times[i] = now_us() - t0;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp);
    if (rank == 0) printf("%zu %.2f\n", size, times[iters / 2]);
    fflush(stdout);
  }
  CHECK(net->deregMr(send, smh));
  CHECK(net->deregMr(recv, rmh));
  CHECK(net->closeSend(send));
  CHECK(net->closeRecv(recv));
  CHECK(net->closeListen(listen));
  CHECK(net->finalize(ctx));
  return 0;
}
