/*
 * "EdgeGpu": a network plugin (ncclNetPlugin_v12) that moves bytes over TCP sockets on
 * loopback and reaches GPU memory through the CUDA driver, standing in for a NIC with GPU
 * Direct RDMA on a machine that has a GPU but no such NIC:
 *
 *  - one device, "edgegpu0", reporting NCCL_PTR_HOST | NCCL_PTR_CUDA and forceFlush, with no
 *    PCI path;
 *  - regMr checks that the memory is what its type says (NCCL_PTR_CUDA: device memory,
 *    NCCL_PTR_HOST: not device memory, by the driver's pointer attributes) and refuses it
 *    otherwise, so a caller that registers the wrong kind fails there;
 *  - isend of GPU memory copies it out with cuMemcpyAsync on a non-blocking stream of the
 *    plugin's own (a kernel of the rank runs meanwhile), irecv into GPU memory copies the
 *    bytes in once they have all arrived;
 *  - iflush is counted; its request completes on its JITCCL_EDGE_FLUSH_TESTS-th test (1
 *    unless set), and the JITCCL_EDGE_FAIL_FLUSH-th iflush of the process fails with
 *    ncclSystemError;
 *  - finalize appends the process's counts to the file JITCCL_EDGE_COUNTS names: "pid P
 *    regmr_host H regmr_cuda C iflush F gpu_bytes_out O gpu_bytes_in I".
 *
 * libcuda.so.1 is loaded with dlopen, so the plugin builds and runs without CUDA; there it
 * accepts host memory only.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jitccl_net.h"
#include "plugin_log.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- The CUDA driver, loaded at first use ---- */

typedef int CUresult;
typedef void* CUcontext;
typedef void* CUstream;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2
#define CU_STREAM_NON_BLOCKING 1
#define GPU_MAX_ORDINALS 64

static struct {
  int ok;
  CUresult (*init)(unsigned flags);
  CUresult (*pointer_attribute)(void* out, int attribute, CUdeviceptr ptr);
  CUresult (*device_get)(CUdevice* dev, int ordinal);
  CUresult (*primary_retain)(CUcontext* ctx, CUdevice dev);
  CUresult (*set_current)(CUcontext ctx);
  CUresult (*stream_create)(CUstream* stream, unsigned flags);
  CUresult (*memcpy_async)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*stream_sync)(CUstream stream);
} cu;

static void load_cuda(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  cu.init = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
  cu.pointer_attribute = (CUresult(*)(void*, int, CUdeviceptr))dlsym(lib, "cuPointerGetAttribute");
  cu.device_get = (CUresult(*)(CUdevice*, int))dlsym(lib, "cuDeviceGet");
  cu.primary_retain = (CUresult(*)(CUcontext*, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
  cu.set_current = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
  cu.stream_create = (CUresult(*)(CUstream*, unsigned))dlsym(lib, "cuStreamCreate");
  cu.memcpy_async = (CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))dlsym(lib, "cuMemcpyAsync");
  cu.stream_sync = (CUresult(*)(CUstream))dlsym(lib, "cuStreamSynchronize");
  cu.ok = cu.init != NULL && cu.pointer_attribute != NULL && cu.device_get != NULL && cu.primary_retain != NULL &&
          cu.set_current != NULL && cu.stream_create != NULL && cu.memcpy_async != NULL && cu.stream_sync != NULL &&
          cu.init(0) == 0;
}

static int cuda_ready(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_cuda);
  return cu.ok;
}

/* Whether `p` is device memory, as the driver sees it. */
static int is_device_memory(const void* p) {
  if (!cuda_ready()) return 0;
  unsigned int type = 0;
  return cu.pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p) == 0 &&
         type == CU_MEMORYTYPE_DEVICE;
}

/* Per GPU: its primary context (where jitccl allocates) and a non-blocking stream in it,
 * so that a copy never waits for a kernel running on another stream. */
static struct {
  CUcontext ctx;
  CUstream stream;
} gpus[GPU_MAX_ORDINALS];
static pthread_mutex_t gpus_lock = PTHREAD_MUTEX_INITIALIZER;

/* Copies `bytes` between host and the GPU memory `gpu_ptr` (dst or src), on this thread. */
static ncclResult_t gpu_copy(void* dst, const void* src, size_t bytes, const void* gpu_ptr) {
  if (bytes == 0) return ncclSuccess;
  int ordinal = -1;
  if (cu.pointer_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)gpu_ptr) != 0 ||
      ordinal < 0 || ordinal >= GPU_MAX_ORDINALS) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: %p is not memory of a GPU it can use", gpu_ptr);
    return ncclUnhandledCudaError;
  }
  pthread_mutex_lock(&gpus_lock);
  CUresult rc = 0;
  if (gpus[ordinal].stream == NULL) {
    CUdevice dev;
    rc = cu.device_get(&dev, ordinal);
    if (rc == 0) rc = cu.primary_retain(&gpus[ordinal].ctx, dev);
    if (rc == 0) rc = cu.set_current(gpus[ordinal].ctx);
    if (rc == 0) rc = cu.stream_create(&gpus[ordinal].stream, CU_STREAM_NON_BLOCKING);
  }
  CUcontext ctx = gpus[ordinal].ctx;
  CUstream stream = gpus[ordinal].stream;
  pthread_mutex_unlock(&gpus_lock);
  if (rc == 0) rc = cu.set_current(ctx);
  if (rc == 0) rc = cu.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, stream);
  if (rc == 0) rc = cu.stream_sync(stream);
  if (rc != 0) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: copying %zu bytes with GPU %d failed: CUresult %d", bytes, ordinal, rc);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* ---- Counts ---- */

static long regmr_host, regmr_cuda, flushes, gpu_bytes_out, gpu_bytes_in;

static long count(long* c, long n) { return __atomic_add_fetch(c, n, __ATOMIC_RELAXED); }

static long env_long(const char* name, long fallback) {
  const char* v = getenv(name);
  return v != NULL && v[0] != '\0' ? atol(v) : fallback;
}

static void write_counts(void) {
  const char* path = getenv("JITCCL_EDGE_COUNTS");
  if (path == NULL || path[0] == '\0') return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  char line[256];
  int n = snprintf(line, sizeof line, "pid %d regmr_host %ld regmr_cuda %ld iflush %ld gpu_bytes_out %ld gpu_bytes_in %ld\n",
                   (int)getpid(), count(&regmr_host, 0), count(&regmr_cuda, 0), count(&flushes, 0),
                   count(&gpu_bytes_out, 0), count(&gpu_bytes_in, 0));
  /* One write per line: O_APPEND keeps the lines of concurrent processes whole. */
  if (write(fd, line, (size_t)n) != n) PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: writing %s failed", path);
  close(fd);
}

/* ---- Comms and requests ---- */

#define HANDLE_MAGIC 0x6a6e6574u

/* What listen puts in the handle; the connecting side keeps its socket after it. */
struct gpu_handle {
  uint32_t magic;
  uint16_t port;
  int connecting_fd; /* fd + 1 while a connect is under way */
};

struct gpu_mr {
  int cuda;
};

enum { REQ_FREE, REQ_SEND, REQ_RECV, REQ_FLUSH };

struct gpu_comm;
struct gpu_req {
  int kind;
  struct gpu_comm* comm;
  char* data;      /* the caller's buffer */
  size_t size;     /* bytes to send, or room to receive into */
  int cuda;        /* the buffer is GPU memory: `bounce` carries its bytes */
  char* bounce;
  uint64_t header; /* the message's size, first on the wire */
  size_t header_done;
  size_t moved;
  int complete;
  long tests;
};

struct gpu_comm {
  int fd;
  int broken;
  struct gpu_req reqs[NCCL_NET_MAX_REQUESTS];
  /* Sends and receives in the order they were posted: a stream moves them in that order. */
  int order[NCCL_NET_MAX_REQUESTS];
  int first, queued;
};

static struct gpu_req* take_req(struct gpu_comm* c, int kind) {
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    struct gpu_req* r = &c->reqs[i];
    if (r->kind != REQ_FREE) continue;
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->comm = c;
    if (kind != REQ_FLUSH) {
      c->order[(c->first + c->queued) % NCCL_NET_MAX_REQUESTS] = i;
      c->queued++;
    }
    return r;
  }
  return NULL;
}

static void free_req(struct gpu_req* r) {
  free(r->bounce);
  r->bounce = NULL;
  r->kind = REQ_FREE;
}

/* Moves `p[*done..want]` through the request's socket (sending or receiving): 1 when all
 * of it has moved, 0 when the socket has no room or nothing to read now, -1 when the
 * connection failed. */
static int transfer(struct gpu_req* r, char* p, size_t want, size_t* done) {
  while (*done < want) {
    size_t left = want - *done;
    ssize_t n = r->kind == REQ_SEND ? send(r->comm->fd, p + *done, left, MSG_NOSIGNAL)
                                    : recv(r->comm->fd, p + *done, left, 0);
    if (n > 0) {
      *done += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return 0;
    } else {
      return -1;
    }
  }
  return 1;
}

/* Moves `r`'s size header, then its bytes: 1 when it is done, 0 or -1 as `transfer`. */
static int move(struct gpu_req* r) {
  int rc = transfer(r, (char*)&r->header, sizeof r->header, &r->header_done);
  if (rc <= 0) return rc;
  if (r->kind == REQ_RECV && r->header > r->size) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: a message of %llu bytes for a receive of %zu", (unsigned long long)r->header,
            r->size);
    return -1;
  }
  rc = transfer(r, r->cuda ? r->bounce : r->data, r->header, &r->moved);
  if (rc <= 0) return rc;
  if (r->kind == REQ_RECV && r->cuda) {
    if (gpu_copy(r->data, r->bounce, r->moved, r->data) != ncclSuccess) return -1;
    count(&gpu_bytes_in, (long)r->moved);
  }
  return 1;
}

/* Moves the comm's queued sends or receives, oldest first, as far as the socket allows. */
static void progress(struct gpu_comm* c) {
  while (!c->broken && c->queued > 0) {
    struct gpu_req* r = &c->reqs[c->order[c->first]];
    int rc = move(r);
    if (rc < 0) c->broken = 1;
    if (rc <= 0) return;
    r->complete = 1;
    c->first = (c->first + 1) % NCCL_NET_MAX_REQUESTS;
    c->queued--;
  }
}

static ncclResult_t set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 ? ncclSuccess : ncclSystemError;
}

static ncclResult_t new_comm(int fd, void** out) {
  struct gpu_comm* c = calloc(1, sizeof *c);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->fd = fd;
  *out = c;
  return ncclSuccess;
}

/* ---- The table ---- */

static int context_token;

static ncclResult_t gpu_init(void** ctx, uint64_t id, ncclNetCommConfig_v12_t* cfg, ncclDebugLogger_t log,
                             ncclProfilerCallback_t prof) {
  (void)id;
  (void)cfg;
  (void)prof;
  if (ctx == NULL) return ncclInvalidArgument;
  plugin_logger = log;
  *ctx = &context_token;
  return ncclSuccess;
}

static ncclResult_t gpu_devices(int* n) {
  if (n == NULL) return ncclInvalidArgument;
  *n = 1;
  return ncclSuccess;
}

static ncclResult_t gpu_props(int d, ncclNetProperties_v12_t* p) {
  if (d != 0 || p == NULL) return ncclInvalidArgument;
  memset(p, 0, sizeof *p);
  p->name = (char*)"edgegpu0";
  p->pciPath = NULL;
  p->guid = 0x6564676567707530ull;
  p->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_CUDA;
  p->forceFlush = 1;
  p->speed = 10000;
  p->latency = 0;
  p->maxComms = 65536;
  p->maxRecvs = 1;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = 0;
  p->maxP2pBytes = (size_t)1 << 31;
  p->maxCollBytes = (size_t)1 << 31;
  p->maxMultiRequestSize = 1;
  p->railId = -1;
  p->planeId = -1;
  return ncclSuccess;
}

static ncclResult_t gpu_listen(void* ctx, int d, void* handle, void** listen_comm) {
  (void)ctx;
  if (d != 0 || handle == NULL || listen_comm == NULL) return ncclInvalidArgument;
  *listen_comm = NULL;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return ncclSystemError;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0 || set_nonblocking(fd) != ncclSuccess) {
    close(fd);
    return ncclSystemError;
  }
  struct gpu_handle h = {.magic = HANDLE_MAGIC, .port = ntohs(a.sin_port), .connecting_fd = 0};
  memcpy(handle, &h, sizeof h);
  int* l = malloc(sizeof *l);
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *l = fd;
  *listen_comm = l;
  return ncclSuccess;
}

static ncclResult_t gpu_connect(void* ctx, int d, void* handle, void** send_comm, ncclNetDeviceHandle_v12_t** dc) {
  (void)ctx;
  (void)dc;
  if (d != 0 || handle == NULL || send_comm == NULL) return ncclInvalidArgument;
  *send_comm = NULL;
  struct gpu_handle h;
  memcpy(&h, handle, sizeof h);
  if (h.magic != HANDLE_MAGIC) return ncclInvalidArgument;
  if (h.connecting_fd == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || set_nonblocking(fd) != ncclSuccess) {
      if (fd >= 0) close(fd);
      return ncclSystemError;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(h.port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0 && errno != EINPROGRESS) {
      close(fd);
      return ncclSystemError;
    }
    h.connecting_fd = fd + 1;
    memcpy(handle, &h, sizeof h);
  }
  int fd = h.connecting_fd - 1;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  if (poll(&p, 1, 0) == 0) return ncclSuccess;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    h.connecting_fd = 0;
    memcpy(handle, &h, sizeof h);
    return ncclSystemError;
  }
  return new_comm(fd, send_comm);
}

static ncclResult_t gpu_accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v12_t** dc) {
  (void)dc;
  if (listen_comm == NULL || recv_comm == NULL) return ncclInvalidArgument;
  *recv_comm = NULL;
  int fd = accept(*(int*)listen_comm, NULL, NULL);
  if (fd < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? ncclSuccess : ncclSystemError;
  if (set_nonblocking(fd) != ncclSuccess) {
    close(fd);
    return ncclSystemError;
  }
  return new_comm(fd, recv_comm);
}

static ncclResult_t gpu_reg(void* comm, void* data, size_t size, int type, void** mh) {
  if (comm == NULL || mh == NULL) return ncclInvalidArgument;
  int device = is_device_memory(data);
  if (type == NCCL_PTR_CUDA && !device) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: regMr of %zu bytes at %p as NCCL_PTR_CUDA, which is not GPU memory%s", size,
            data, cuda_ready() ? "" : " (no CUDA driver)");
    return ncclInvalidArgument;
  }
  if (type == NCCL_PTR_HOST && device) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: regMr of %zu bytes at %p as NCCL_PTR_HOST, which is GPU memory", size, data);
    return ncclInvalidArgument;
  }
  if (type != NCCL_PTR_CUDA && type != NCCL_PTR_HOST) return ncclInvalidArgument;
  struct gpu_mr* m = malloc(sizeof *m);
  if (m == NULL) return ncclSystemError;
  m->cuda = type == NCCL_PTR_CUDA;
  count(m->cuda ? &regmr_cuda : &regmr_host, 1);
  *mh = m;
  return ncclSuccess;
}

static ncclResult_t gpu_reg_dmabuf(void* c, void* d, size_t s, int t, uint64_t o, int fd, void** m) {
  (void)c; (void)d; (void)s; (void)t; (void)o; (void)fd; (void)m;
  PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: regMrDmaBuf refused: the plugin does not report NCCL_PTR_DMABUF");
  return ncclInvalidUsage;
}

static ncclResult_t gpu_dereg(void* comm, void* mh) {
  (void)comm;
  free(mh);
  return ncclSuccess;
}

static ncclResult_t gpu_isend(void* comm, void* data, size_t size, int tag, void* mh, void* ph, void** req) {
  (void)tag;
  (void)ph;
  struct gpu_comm* c = comm;
  if (c == NULL || mh == NULL || req == NULL) return ncclInvalidArgument;
  *req = NULL;
  if (c->broken) return ncclSystemError;
  struct gpu_req* r = take_req(c, REQ_SEND);
  if (r == NULL) return ncclSuccess;
  r->data = data;
  r->size = size;
  r->header = size;
  r->cuda = ((struct gpu_mr*)mh)->cuda;
  if (r->cuda && size > 0) {
    /* The bytes are posted: they are copied out now, and the socket sends the copy. */
    r->bounce = malloc(size);
    if (r->bounce == NULL || gpu_copy(r->bounce, data, size, data) != ncclSuccess) {
      c->broken = 1;
      return ncclSystemError;
    }
    count(&gpu_bytes_out, (long)size);
  }
  *req = r;
  progress(c);
  return ncclSuccess;
}

static ncclResult_t gpu_irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs, void** phs,
                              void** req) {
  (void)tags;
  (void)phs;
  struct gpu_comm* c = comm;
  if (c == NULL || n != 1 || data == NULL || sizes == NULL || mhs == NULL || mhs[0] == NULL || req == NULL)
    return ncclInvalidArgument;
  *req = NULL;
  if (c->broken) return ncclSystemError;
  int cuda = ((struct gpu_mr*)mhs[0])->cuda;
  char* bounce = NULL;
  if (cuda && sizes[0] > 0 && (bounce = malloc(sizes[0])) == NULL) return ncclSystemError;
  struct gpu_req* r = take_req(c, REQ_RECV);
  if (r == NULL) {
    free(bounce);
    return ncclSuccess;
  }
  r->data = data[0];
  r->size = sizes[0];
  r->cuda = cuda;
  r->bounce = bounce;
  *req = r;
  progress(c);
  return ncclSuccess;
}

static ncclResult_t gpu_iflush(void* comm, int n, void** data, int* sizes, void** mhs, void** req) {
  (void)data;
  (void)sizes;
  (void)mhs;
  struct gpu_comm* c = comm;
  if (c == NULL || n < 1 || req == NULL) return ncclInvalidArgument;
  *req = NULL;
  long k = count(&flushes, 1);
  if (k == env_long("JITCCL_EDGE_FAIL_FLUSH", 0)) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeGpu: iflush %ld fails by design (JITCCL_EDGE_FAIL_FLUSH)", k);
    return ncclSystemError;
  }
  struct gpu_req* r = take_req(c, REQ_FLUSH);
  if (r == NULL) return ncclInternalError;
  *req = r;
  return ncclSuccess;
}

static ncclResult_t gpu_test(void* request, int* done, int* sizes) {
  struct gpu_req* r = request;
  if (r == NULL || done == NULL || r->kind == REQ_FREE) return ncclInvalidArgument;
  *done = 0;
  if (r->kind == REQ_FLUSH) {
    if (++r->tests >= env_long("JITCCL_EDGE_FLUSH_TESTS", 1)) {
      *done = 1;
      free_req(r);
    }
    return ncclSuccess;
  }
  progress(r->comm);
  if (r->comm->broken) return ncclSystemError;
  if (!r->complete) return ncclSuccess;
  *done = 1;
  if (sizes != NULL) sizes[0] = (int)r->moved;
  free_req(r);
  return ncclSuccess;
}

static ncclResult_t gpu_close(void* comm) {
  struct gpu_comm* c = comm;
  if (c == NULL) return ncclInvalidArgument;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) free(c->reqs[i].bounce);
  close(c->fd);
  free(c);
  return ncclSuccess;
}

static ncclResult_t gpu_close_listen(void* listen_comm) {
  if (listen_comm == NULL) return ncclInvalidArgument;
  close(*(int*)listen_comm);
  free(listen_comm);
  return ncclSuccess;
}

static ncclResult_t gpu_finalize(void* ctx) {
  (void)ctx;
  write_counts();
  return ncclSuccess;
}

EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "EdgeGpu",
    .init = gpu_init,
    .devices = gpu_devices,
    .getProperties = gpu_props,
    .listen = gpu_listen,
    .connect = gpu_connect,
    .accept = gpu_accept,
    .regMr = gpu_reg,
    .regMrDmaBuf = gpu_reg_dmabuf,
    .deregMr = gpu_dereg,
    .isend = gpu_isend,
    .irecv = gpu_irecv,
    .iflush = gpu_iflush,
    .test = gpu_test,
    .closeSend = gpu_close,
    .closeRecv = gpu_close,
    .closeListen = gpu_close_listen,
    .finalize = gpu_finalize,
};
