/*
 * Network plugins for a loader's edge cases, one shared library per variant of this file:
 *
 *   EDGE_V8ONLY    "EdgeV8": exports only ncclNetPlugin_v8, forwarding to the inner plugin's
 *   EDGE_INITFAIL  "EdgeInitFail": v12 and v8 tables whose init fails (ncclInternalError)
 *   EDGE_NODEV     "EdgeNoDev": v12 and v8 tables; init succeeds, no devices
 *   EDGE_FAILSEND  "EdgeFailSend": v12, forwarding to the inner plugin's, except that the
 *                  Nth send of the process (N = JITCCL_EDGE_FAIL_SEND, from 1) fails with
 *                  ncclSystemError and its communicator fails every later test
 *   EDGE_STANDIN   "EdgeStandIn": v12, forwarding to the inner plugin's, standing in for a
 *                  hardware plugin: devices with the PCI paths JITCCL_EDGE_PCI_PATHS lists,
 *                  and a process abort when a receive comm closes with a receive posted
 *
 * The inner plugin (the data path) is the library named by JITCCL_EDGE_INNER, else the
 * EDGE_INNER_DEFAULT path compiled in. The variants that need none never load it.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jitccl_net.h"
#include "plugin_log.h"

#define EXPORT __attribute__((visibility("default")))

#if defined(EDGE_V8ONLY) || defined(EDGE_FAILSEND) || defined(EDGE_STANDIN)

#ifndef EDGE_INNER_DEFAULT
#error "EDGE_INNER_DEFAULT must name the inner plugin library"
#endif

/* The inner plugin's table of the given symbol, loaded once. */
static const void* inner_table(const char* symbol) {
  const char* path = getenv("JITCCL_EDGE_INNER");
  if (path == NULL || path[0] == '\0') path = EDGE_INNER_DEFAULT;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    PLUGIN_LOG(NCCL_LOG_WARN, "NET/Edge: cannot load the inner plugin %s: %s", path, dlerror());
    return NULL;
  }
  const void* table = dlsym(lib, symbol);
  if (table == NULL) PLUGIN_LOG(NCCL_LOG_WARN, "NET/Edge: %s has no %s", path, symbol);
  return table;
}

/* Forwards to the inner table `in` (each variant has its own); a call before a successful
 * init is refused rather than followed through a NULL table. */
#define FWD(call) (in != NULL ? in->call : ncclInvalidUsage)

#endif

/* ================================================================================ */
#if defined(EDGE_V8ONLY)

static const ncclNet_v8_t* in;

static ncclResult_t v8_init(ncclDebugLogger_t log) {
  plugin_logger = log;
  if (in == NULL) in = inner_table("ncclNetPlugin_v8");
  return in != NULL ? in->init(log) : ncclSystemError;
}
static ncclResult_t v8_devices(int* n) { return FWD(devices(n)); }
static ncclResult_t v8_props(int d, ncclNetProperties_v8_t* p) { return FWD(getProperties(d, p)); }
static ncclResult_t v8_listen(int d, void* h, void** c) { return FWD(listen(d, h, c)); }
static ncclResult_t v8_connect(int d, void* h, void** c, ncclNetDeviceHandle_v8_t** dc) { return FWD(connect(d, h, c, dc)); }
static ncclResult_t v8_accept(void* l, void** c, ncclNetDeviceHandle_v8_t** dc) { return FWD(accept(l, c, dc)); }
static ncclResult_t v8_reg(void* c, void* d, size_t s, int t, void** m) { return FWD(regMr(c, d, s, t, m)); }
static ncclResult_t v8_reg_dmabuf(void* c, void* d, size_t s, int t, uint64_t o, int fd, void** m) {
  return FWD(regMrDmaBuf(c, d, s, t, o, fd, m));
}
static ncclResult_t v8_dereg(void* c, void* m) { return FWD(deregMr(c, m)); }
static ncclResult_t v8_isend(void* c, void* d, int s, int t, void* m, void** r) { return FWD(isend(c, d, s, t, m, r)); }
static ncclResult_t v8_irecv(void* c, int n, void** d, int* s, int* t, void** m, void** r) {
  return FWD(irecv(c, n, d, s, t, m, r));
}
static ncclResult_t v8_iflush(void* c, int n, void** d, int* s, void** m, void** r) { return FWD(iflush(c, n, d, s, m, r)); }
static ncclResult_t v8_test(void* r, int* done, int* s) { return FWD(test(r, done, s)); }
static ncclResult_t v8_close_send(void* c) { return FWD(closeSend(c)); }
static ncclResult_t v8_close_recv(void* c) { return FWD(closeRecv(c)); }
static ncclResult_t v8_close_listen(void* c) { return FWD(closeListen(c)); }

EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "EdgeV8",
    .init = v8_init,
    .devices = v8_devices,
    .getProperties = v8_props,
    .listen = v8_listen,
    .connect = v8_connect,
    .accept = v8_accept,
    .regMr = v8_reg,
    .regMrDmaBuf = v8_reg_dmabuf,
    .deregMr = v8_dereg,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .iflush = v8_iflush,
    .test = v8_test,
    .closeSend = v8_close_send,
    .closeRecv = v8_close_recv,
    .closeListen = v8_close_listen,
};

/* ================================================================================ */
#elif defined(EDGE_INITFAIL) || defined(EDGE_NODEV)

/*
 * Both variants have no device: every call past init and devices is refused. The tables are
 * complete (no NULL member a loader could trip on), so what a loader sees is exactly the
 * behaviour under test.
 */
#if defined(EDGE_INITFAIL)
#define EDGE_NAME "EdgeInitFail"
static ncclResult_t edge_init(ncclDebugLogger_t log) {
  plugin_logger = log;
  PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeInitFail: init fails by design");
  return ncclInternalError;
}
#else
#define EDGE_NAME "EdgeNoDev"
static ncclResult_t edge_init(ncclDebugLogger_t log) {
  plugin_logger = log;
  return ncclSuccess;
}
#endif

static ncclResult_t refuse(const char* call) {
  PLUGIN_LOG(NCCL_LOG_WARN, "NET/%s: %s refused: the plugin has no device", EDGE_NAME, call);
  return ncclInvalidUsage;
}

static ncclResult_t none_devices(int* n) {
  if (n == NULL) return ncclInvalidArgument;
  *n = 0;
  return ncclSuccess;
}
static ncclResult_t none_props_v8(int d, ncclNetProperties_v8_t* p) { (void)d; (void)p; return refuse("getProperties"); }
static ncclResult_t none_props_v12(int d, ncclNetProperties_v12_t* p) { (void)d; (void)p; return refuse("getProperties"); }
static ncclResult_t none_listen_v8(int d, void* h, void** c) { (void)d; (void)h; (void)c; return refuse("listen"); }
static ncclResult_t none_listen_v12(void* x, int d, void* h, void** c) { (void)x; return none_listen_v8(d, h, c); }
static ncclResult_t none_connect_v8(int d, void* h, void** c, ncclNetDeviceHandle_v8_t** dc) {
  (void)d; (void)h; (void)c; (void)dc;
  return refuse("connect");
}
static ncclResult_t none_connect_v12(void* x, int d, void* h, void** c, ncclNetDeviceHandle_v12_t** dc) {
  (void)x;
  return none_connect_v8(d, h, c, dc);
}
static ncclResult_t none_accept(void* l, void** c, ncclNetDeviceHandle_v8_t** dc) { (void)l; (void)c; (void)dc; return refuse("accept"); }
static ncclResult_t none_reg(void* c, void* d, size_t s, int t, void** m) { (void)c; (void)d; (void)s; (void)t; (void)m; return refuse("regMr"); }
static ncclResult_t none_reg_dmabuf(void* c, void* d, size_t s, int t, uint64_t o, int fd, void** m) {
  (void)c; (void)d; (void)s; (void)t; (void)o; (void)fd; (void)m;
  return refuse("regMrDmaBuf");
}
static ncclResult_t none_dereg(void* c, void* m) { (void)c; (void)m; return refuse("deregMr"); }
static ncclResult_t none_isend_v8(void* c, void* d, int s, int t, void* m, void** r) {
  (void)c; (void)d; (void)s; (void)t; (void)m; (void)r;
  return refuse("isend");
}
static ncclResult_t none_isend_v12(void* c, void* d, size_t s, int t, void* m, void* ph, void** r) {
  (void)c; (void)d; (void)s; (void)t; (void)m; (void)ph; (void)r;
  return refuse("isend");
}
static ncclResult_t none_irecv_v8(void* c, int n, void** d, int* s, int* t, void** m, void** r) {
  (void)c; (void)n; (void)d; (void)s; (void)t; (void)m; (void)r;
  return refuse("irecv");
}
static ncclResult_t none_irecv_v12(void* c, int n, void** d, size_t* s, int* t, void** m, void** ph, void** r) {
  (void)c; (void)n; (void)d; (void)s; (void)t; (void)m; (void)ph; (void)r;
  return refuse("irecv");
}
static ncclResult_t none_iflush(void* c, int n, void** d, int* s, void** m, void** r) {
  (void)c; (void)n; (void)d; (void)s; (void)m; (void)r;
  return refuse("iflush");
}
static ncclResult_t none_test(void* r, int* done, int* s) { (void)r; (void)done; (void)s; return refuse("test"); }
static ncclResult_t none_close(void* c) { (void)c; return refuse("close"); }
/* The context is opaque to the caller; one non-NULL token serves every init. */
static int context_token;
static ncclResult_t none_init_v12(void** ctx, uint64_t id, ncclNetCommConfig_v12_t* cfg, ncclDebugLogger_t log,
                                  ncclProfilerCallback_t prof) {
  (void)id; (void)cfg; (void)prof;
  if (ctx == NULL) return ncclInvalidArgument;
  *ctx = NULL;
  ncclResult_t rc = edge_init(log);
  if (rc == ncclSuccess) *ctx = &context_token;
  return rc;
}
static ncclResult_t none_finalize(void* ctx) { (void)ctx; return ncclSuccess; }

EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = EDGE_NAME,
    .init = edge_init,
    .devices = none_devices,
    .getProperties = none_props_v8,
    .listen = none_listen_v8,
    .connect = none_connect_v8,
    .accept = none_accept,
    .regMr = none_reg,
    .regMrDmaBuf = none_reg_dmabuf,
    .deregMr = none_dereg,
    .isend = none_isend_v8,
    .irecv = none_irecv_v8,
    .iflush = none_iflush,
    .test = none_test,
    .closeSend = none_close,
    .closeRecv = none_close,
    .closeListen = none_close,
};

EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = EDGE_NAME,
    .init = none_init_v12,
    .devices = none_devices,
    .getProperties = none_props_v12,
    .listen = none_listen_v12,
    .connect = none_connect_v12,
    .accept = none_accept,
    .regMr = none_reg,
    .regMrDmaBuf = none_reg_dmabuf,
    .deregMr = none_dereg,
    .isend = none_isend_v12,
    .irecv = none_irecv_v12,
    .iflush = none_iflush,
    .test = none_test,
    .closeSend = none_close,
    .closeRecv = none_close,
    .closeListen = none_close,
    .finalize = none_finalize,
};

/* ================================================================================ */
#elif defined(EDGE_FAILSEND) || defined(EDGE_STANDIN)

/*
 * Both variants forward to the inner plugin's v12 table through comms and requests of their
 * own: test must know a request's communicator, and a receive comm what it still has posted.
 * Requests live in their communicator, so closing it with requests in flight frees them too.
 */
static const ncclNet_v12_t* in;

struct edge_comm;
struct edge_req {
  void* inner;
  struct edge_comm* comm;
};
struct edge_comm {
  void* inner;
  int failed;
  struct edge_req reqs[NCCL_NET_MAX_REQUESTS];
};

/* NULL stays NULL, for the inner plugin to refuse. */
static void* inner_of(void* comm) { return comm != NULL ? ((struct edge_comm*)comm)->inner : NULL; }

static ncclResult_t wrap_comm(void* inner, void** out) {
  *out = NULL;
  if (inner == NULL) return ncclSuccess;
  struct edge_comm* c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->inner = inner;
  *out = c;
  return ncclSuccess;
}

static ncclResult_t wrap_req(struct edge_comm* c, void* inner, void** out) {
  *out = NULL;
  if (inner == NULL) return ncclSuccess;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    struct edge_req* r = &c->reqs[i];
    if (r->inner != NULL) continue;
    r->inner = inner;
    r->comm = c;
    *out = r;
    return ncclSuccess;
  }
  PLUGIN_LOG(NCCL_LOG_WARN, "NET/Edge: the inner plugin took more than %d requests", NCCL_NET_MAX_REQUESTS);
  return ncclInternalError;
}

#if defined(EDGE_FAILSEND)

#define EDGE_NAME "EdgeFailSend"
/* Sends the inner plugin took, process-wide; the one that would be number N fails instead. */
static long sends_taken;
/* Whether that send has failed: ranks on threads of one process send at once, so two sends
 * may both read N - 2 taken, and the count pass N - 1 without any send reading it. */
static int failed_once;

static long fail_at(void) {
  const char* env = getenv("JITCCL_EDGE_FAIL_SEND");
  return env != NULL ? atol(env) : 0;
}

/* Whether this send fails by design (and its comm with it). */
static int send_fails(struct edge_comm* c) {
  long n = __atomic_load_n(&sends_taken, __ATOMIC_RELAXED) + 1;
  long at = fail_at();
  if (at < 1 || n < at || __atomic_exchange_n(&failed_once, 1, __ATOMIC_RELAXED)) return 0;
  __atomic_add_fetch(&sends_taken, 1, __ATOMIC_RELAXED);
  c->failed = 1;
  PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeFailSend: send %ld fails by design (JITCCL_EDGE_FAIL_SEND)", n);
  return 1;
}

static void send_taken(void) { __atomic_add_fetch(&sends_taken, 1, __ATOMIC_RELAXED); }

/* Every device is the inner plugin's own. */
static int inner_dev(int d) { return d; }
static void record(const char* call, int d) { (void)call; (void)d; }
static ncclResult_t fs_devices(int* n) { return FWD(devices(n)); }
static ncclResult_t fs_props(int d, ncclNetProperties_v12_t* p) { return FWD(getProperties(d, p)); }
static void on_init(void) {}
static void check_close_recv(struct edge_comm* c) { (void)c; }

#else /* EDGE_STANDIN */

/*
 * "EdgeStandIn" stands in for a hardware plugin on a machine without the hardware:
 *  - JITCCL_EDGE_PCI_PATHS (comma-separated sysfs paths) makes it report one device per
 *    path, with that pciPath, each carried by the inner plugin's device 0;
 *  - JITCCL_EDGE_TRACE names a file to which each listen and connect appends its device;
 *  - closing a receive comm with a receive still posted aborts the process, as plugins do
 *    that cannot take a posted receive back from their hardware.
 */
#define EDGE_NAME "EdgeStandIn"
#define STANDIN_MAX_DEVICES 16

static int standin_ndev;
static char* standin_paths[STANDIN_MAX_DEVICES];
static char standin_names[STANDIN_MAX_DEVICES][24];

static int send_fails(struct edge_comm* c) { (void)c; return 0; }
static void send_taken(void) {}

static void parse_paths(void) {
  const char* env = getenv("JITCCL_EDGE_PCI_PATHS");
  if (env == NULL || env[0] == '\0') return;
  char* list = strdup(env);
  char* save = NULL;
  for (char* p = strtok_r(list, ",", &save); p != NULL && standin_ndev < STANDIN_MAX_DEVICES;
       p = strtok_r(NULL, ",", &save)) {
    snprintf(standin_names[standin_ndev], sizeof standin_names[0], "standin%d", standin_ndev);
    standin_paths[standin_ndev++] = p;
  }
}

/* Reads JITCCL_EDGE_PCI_PATHS once: init may be called for every communicator. */
static void on_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, parse_paths);
}

static int inner_dev(int d) { return standin_ndev > 0 ? 0 : d; }

static void record(const char* call, int d) {
  const char* path = getenv("JITCCL_EDGE_TRACE");
  if (path == NULL || path[0] == '\0') return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  char line[64];
  int n = snprintf(line, sizeof line, "%s %d\n", call, d);
  /* One write per line: O_APPEND keeps the lines of concurrent callers whole. */
  if (write(fd, line, (size_t)n) != n) PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeStandIn: writing %s failed", path);
  close(fd);
}

static ncclResult_t fs_devices(int* n) {
  if (standin_ndev == 0) return FWD(devices(n));
  if (n == NULL) return ncclInvalidArgument;
  *n = standin_ndev;
  return ncclSuccess;
}

static ncclResult_t fs_props(int d, ncclNetProperties_v12_t* p) {
  if (standin_ndev == 0) return FWD(getProperties(d, p));
  if (d < 0 || d >= standin_ndev) return ncclInvalidArgument;
  ncclResult_t rc = FWD(getProperties(0, p));
  if (rc != ncclSuccess) return rc;
  p->name = standin_names[d];
  p->pciPath = standin_paths[d];
  p->guid = (uint64_t)d + 1;
  return ncclSuccess;
}

/* Requests of a comm that were posted and have not completed. */
static int outstanding(const struct edge_comm* c) {
  int n = 0;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) n += c->reqs[i].inner != NULL;
  return n;
}

static void check_close_recv(struct edge_comm* c) {
  int posted = c != NULL ? outstanding(c) : 0;
  if (posted == 0) return;
  PLUGIN_LOG(NCCL_LOG_WARN, "NET/EdgeStandIn: closeRecv with %d receive(s) still posted: aborting", posted);
  fprintf(stderr, "NET/EdgeStandIn: closeRecv with %d receive(s) still posted: aborting\n", posted);
  abort();
}

#endif

static int valid_dev(int d) {
  int n = 0;
  return fs_devices(&n) == ncclSuccess && d >= 0 && d < n;
}

static ncclResult_t fs_init(void** ctx, uint64_t id, ncclNetCommConfig_v12_t* cfg, ncclDebugLogger_t log,
                            ncclProfilerCallback_t prof) {
  plugin_logger = log;
  if (in == NULL) in = inner_table("ncclNetPlugin_v12");
  on_init();
  return in != NULL ? in->init(ctx, id, cfg, log, prof) : ncclSystemError;
}
static ncclResult_t fs_listen(void* x, int d, void* h, void** c) {
  if (!valid_dev(d)) return ncclInvalidArgument;
  record("listen", d);
  void* inner = NULL;
  ncclResult_t rc = FWD(listen(x, inner_dev(d), h, &inner));
  return rc != ncclSuccess ? rc : wrap_comm(inner, c);
}
static ncclResult_t fs_connect(void* x, int d, void* h, void** c, ncclNetDeviceHandle_v12_t** dc) {
  if (!valid_dev(d)) return ncclInvalidArgument;
  void* inner = NULL;
  ncclResult_t rc = FWD(connect(x, inner_dev(d), h, &inner, dc));
  if (rc == ncclSuccess && inner != NULL) record("connect", d);
  return rc != ncclSuccess ? rc : wrap_comm(inner, c);
}
static ncclResult_t fs_accept(void* l, void** c, ncclNetDeviceHandle_v12_t** dc) {
  void* inner = NULL;
  ncclResult_t rc = FWD(accept(inner_of(l), &inner, dc));
  return rc != ncclSuccess ? rc : wrap_comm(inner, c);
}
static ncclResult_t fs_reg(void* c, void* d, size_t s, int t, void** m) {
  return FWD(regMr(inner_of(c), d, s, t, m));
}
static ncclResult_t fs_reg_dmabuf(void* c, void* d, size_t s, int t, uint64_t o, int fd, void** m) {
  return FWD(regMrDmaBuf(inner_of(c), d, s, t, o, fd, m));
}
static ncclResult_t fs_dereg(void* c, void* m) { return FWD(deregMr(inner_of(c), m)); }

static ncclResult_t fs_isend(void* comm, void* d, size_t s, int t, void* m, void* ph, void** r) {
  struct edge_comm* c = comm;
  if (c == NULL || r == NULL) return ncclInvalidArgument;
  *r = NULL;
  if (c->failed || send_fails(c)) return ncclSystemError;
  void* inner = NULL;
  ncclResult_t rc = FWD(isend(c->inner, d, s, t, m, ph, &inner));
  if (rc != ncclSuccess) return rc;
  if (inner != NULL) send_taken();
  return wrap_req(c, inner, r);
}
static ncclResult_t fs_irecv(void* comm, int n, void** d, size_t* s, int* t, void** m, void** ph, void** r) {
  struct edge_comm* c = comm;
  if (c == NULL || r == NULL) return ncclInvalidArgument;
  void* inner = NULL;
  ncclResult_t rc = FWD(irecv(c->inner, n, d, s, t, m, ph, &inner));
  return rc != ncclSuccess ? rc : wrap_req(c, inner, r);
}
static ncclResult_t fs_iflush(void* c, int n, void** d, int* s, void** m, void** r) {
  return FWD(iflush(inner_of(c), n, d, s, m, r));
}
static ncclResult_t fs_test(void* request, int* done, int* sizes) {
  struct edge_req* r = request;
  if (r == NULL || done == NULL) return ncclInvalidArgument;
  *done = 0;
  if (r->inner == NULL) return ncclInvalidUsage;
  if (r->comm->failed) {
    /* The inner request stays with the inner plugin, which cancels or drains it at close. */
    r->inner = NULL;
    return ncclSystemError;
  }
  ncclResult_t rc = FWD(test(r->inner, done, sizes));
  if (rc != ncclSuccess || *done) r->inner = NULL;
  return rc;
}
static ncclResult_t fs_close(void* comm, ncclResult_t rc) {
  free(comm);
  return rc;
}
static ncclResult_t fs_close_send(void* c) { return fs_close(c, FWD(closeSend(inner_of(c)))); }
static ncclResult_t fs_close_recv(void* c) {
  check_close_recv(c);
  return fs_close(c, FWD(closeRecv(inner_of(c))));
}
static ncclResult_t fs_close_listen(void* c) { return fs_close(c, FWD(closeListen(inner_of(c)))); }
static ncclResult_t fs_finalize(void* ctx) { return FWD(finalize(ctx)); }

EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = EDGE_NAME,
    .init = fs_init,
    .devices = fs_devices,
    .getProperties = fs_props,
    .listen = fs_listen,
    .connect = fs_connect,
    .accept = fs_accept,
    .regMr = fs_reg,
    .regMrDmaBuf = fs_reg_dmabuf,
    .deregMr = fs_dereg,
    .isend = fs_isend,
    .irecv = fs_irecv,
    .iflush = fs_iflush,
    .test = fs_test,
    .closeSend = fs_close_send,
    .closeRecv = fs_close_recv,
    .closeListen = fs_close_listen,
    .finalize = fs_finalize,
};

#else
#error "define one of EDGE_V8ONLY, EDGE_INITFAIL, EDGE_NODEV, EDGE_FAILSEND, EDGE_STANDIN"
#endif
