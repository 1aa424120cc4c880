/*
 * Test driver for network plugins: loads a plugin, picks one interface version's table,
 * and plays one side of a connection. Two processes run it, the receiver first; the
 * handle travels through a file.
 *
 *   driver PLUGIN VERSION symbols                  list the ncclNetPlugin_vN symbols present
 *   driver PLUGIN VERSION info                     init, devices, properties of each device
 *   driver PLUGIN VERSION recv|send HANDLE SCENARIO
 *
 * Scenarios: data (sizes 0 .. 1 MiB with data checks, the request limit, close with
 * requests in flight), kill-sender / kill-receiver (one side idles and is killed by the
 * test while the other waits on a posted transfer, which must fail), failsend (the sender's Nth isend must fail and its
 * communicator with it, N = JITCCL_EDGE_FAIL_SEND in both processes' environments).
 * Every wait is bounded. Exit 0 = every check passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jitccl_net.h"

#define WAIT_NS (20LL * 1000000000LL)
#define KILL_DETECT_NS (30LL * 1000000000LL)
#define BIG (1 << 20)
#define CAPACITY (BIG + 4096)
#define CANARY 0xA5

static const char* role = "driver";

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] FAIL: ", role);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static void note(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] ", role);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s] plugin log L%d %s:%d %s\n", role, (int)level, file, line, text);
}

/* One calling convention over the five table versions. */
static int version;
static const void* table;
static void* ctx;

#define T(v) ((const ncclNet_v##v##_t*)table)
#define CALL(fn, ...) (version == 8 ? T(8)->fn(__VA_ARGS__) : version == 9 ? T(9)->fn(__VA_ARGS__) : version == 10 ? T(10)->fn(__VA_ARGS__) : version == 11 ? T(11)->fn(__VA_ARGS__) : T(12)->fn(__VA_ARGS__))

static const char* net_name(void) { return *(const char* const*)table; }

static ncclResult_t net_init(void) {
  ncclNetCommConfig_v12_t config = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (version) {
    case 8: return T(8)->init(logger);
    case 9: return T(9)->init(logger);
    case 10: return T(10)->init(logger, NULL);
    case 11: return T(11)->init(&ctx, 0x1234, &config, logger, NULL);
    default: return T(12)->init(&ctx, 0x1234, &config, logger, NULL);
  }
}

static ncclResult_t net_listen(int dev, void* handle, void** comm) {
  switch (version) {
    case 8: return T(8)->listen(dev, handle, comm);
    case 9: return T(9)->listen(dev, handle, comm);
    case 10: return T(10)->listen(dev, handle, comm);
    case 11: return T(11)->listen(ctx, dev, handle, comm);
    default: return T(12)->listen(ctx, dev, handle, comm);
  }
}

static ncclResult_t net_connect(int dev, void* handle, void** comm) {
  ncclNetDeviceHandle_v8_t* dev_comm = NULL;
  ncclNetCommConfig_v10_t config = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (version) {
    case 8: return T(8)->connect(dev, handle, comm, &dev_comm);
    case 9: return T(9)->connect(dev, handle, comm, &dev_comm);
    case 10: return T(10)->connect(dev, &config, handle, comm, &dev_comm);
    case 11: return T(11)->connect(ctx, dev, handle, comm, &dev_comm);
    default: return T(12)->connect(ctx, dev, handle, comm, &dev_comm);
  }
}

static ncclResult_t net_accept(void* listen_comm, void** comm) {
  ncclNetDeviceHandle_v8_t* dev_comm = NULL;
  return CALL(accept, listen_comm, comm, &dev_comm);
}

static ncclResult_t net_isend(void* comm, void* data, size_t size, void* mh, void** req) {
  switch (version) {
    case 8: return T(8)->isend(comm, data, (int)size, 7, mh, req);
    case 9: return T(9)->isend(comm, data, size, 7, mh, req);
    case 10: return T(10)->isend(comm, data, size, 7, mh, NULL, req);
    case 11: return T(11)->isend(comm, data, size, 7, mh, NULL, req);
    default: return T(12)->isend(comm, data, size, 7, mh, NULL, req);
  }
}

static ncclResult_t net_irecv(void* comm, void* data, size_t size, void* mh, void** req) {
  int tag = 7;
  int isize = (int)size;
  void* phandle = NULL;
  switch (version) {
    case 8: return T(8)->irecv(comm, 1, &data, &isize, &tag, &mh, req);
    case 9: return T(9)->irecv(comm, 1, &data, &size, &tag, &mh, req);
    case 10: return T(10)->irecv(comm, 1, &data, &size, &tag, &mh, &phandle, req);
    case 11: return T(11)->irecv(comm, 1, &data, &size, &tag, &mh, &phandle, req);
    default: return T(12)->irecv(comm, 1, &data, &size, &tag, &mh, &phandle, req);
  }
}

/* ---- checks ---- */

static unsigned char pattern(int msg, size_t i) { return (unsigned char)(msg * 131 + i * 7 + 3); }

static void fill(unsigned char* buf, int msg, size_t size) {
  for (size_t i = 0; i < size; i++) buf[i] = pattern(msg, i);
}

static void check_data(const unsigned char* buf, int msg, size_t size) {
  for (size_t i = 0; i < size; i++)
    if (buf[i] != pattern(msg, i)) die("message %d: byte %zu is 0x%02x, expected 0x%02x", msg, i, buf[i], pattern(msg, i));
  if (buf[size] != CANARY) die("message %d: wrote past its %zu bytes", msg, size);
}

/* Posts until the plugin takes the request (a NULL request means "try later"). */
static void* post(int send, void* comm, void* data, size_t size, void* mh, int msg) {
  long long deadline = now_ns() + WAIT_NS;
  for (;;) {
    void* req = NULL;
    ncclResult_t rc = send ? net_isend(comm, data, size, mh, &req) : net_irecv(comm, data, size, mh, &req);
    if (rc != ncclSuccess) die("%s of message %d (%zu bytes) returned %d", send ? "isend" : "irecv", msg, size, rc);
    if (req != NULL) return req;
    if (now_ns() > deadline) die("%s of message %d never got a request", send ? "isend" : "irecv", msg);
    sched_yield();
  }
}

static int wait_req(void* req, int msg) {
  long long deadline = now_ns() + WAIT_NS;
  for (;;) {
    int done = 0, size = -1;
    ncclResult_t rc = CALL(test, req, &done, &size);
    if (rc != ncclSuccess) die("test of message %d returned %d", msg, rc);
    if (done) return size;
    if (now_ns() > deadline) die("message %d did not complete in time", msg);
    sched_yield();
  }
}

static const size_t sizes[] = {0, 1, 4097, BIG};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void* register_mr(void* comm, void* buf, size_t size) {
  void* mh = NULL;
  void* refused = NULL;
  ncclResult_t rc = CALL(regMr, comm, buf, size, NCCL_PTR_CUDA, &refused);
  if (rc == ncclSuccess) die("regMr of a CUDA pointer was accepted by a host-only plugin");
  rc = CALL(regMr, comm, buf, size, NCCL_PTR_HOST, &mh);
  if (rc != ncclSuccess) die("regMr of host memory returned %d", rc);
  return mh;
}

/* ---- the two sides ---- */

static void write_handle(const char* path, const void* handle) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  if (f == NULL || fwrite(handle, NCCL_NET_HANDLE_MAXSIZE, 1, f) != 1 || fclose(f) != 0) die("writing %s", tmp);
  if (rename(tmp, path) != 0) die("renaming %s: %s", tmp, strerror(errno));
}

static void read_handle(const char* path, void* handle) {
  long long deadline = now_ns() + WAIT_NS;
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(handle, NCCL_NET_HANDLE_MAXSIZE, 1, f);
      fclose(f);
      if (n == 1) return;
    }
    if (now_ns() > deadline) die("no handle appeared in %s", path);
    usleep(10000);
  }
}

static void touch(const char* path, const char* suffix) {
  char name[4096];
  snprintf(name, sizeof name, "%s%s", path, suffix);
  FILE* f = fopen(name, "w");
  if (f == NULL || fclose(f) != 0) die("creating %s", name);
}

/* Waits, bounded, for the other side's touch(path, suffix). */
static void wait_touched(const char* path, const char* suffix) {
  char name[4096];
  snprintf(name, sizeof name, "%s%s", path, suffix);
  long long deadline = now_ns() + WAIT_NS;
  while (access(name, F_OK) != 0) {
    if (now_ns() > deadline) die("%s did not appear", name);
    usleep(1000);
  }
}

struct side {
  int send;
  void* comm;
  void* listen_comm;
  unsigned char* bufs; /* NCCL_NET_MAX_REQUESTS buffers of CAPACITY + 1 */
  void* mh;
};

static unsigned char* buf_at(struct side* s, int i) { return s->bufs + (size_t)i * (CAPACITY + 1); }

static void open_side(struct side* s, int send, const char* handle_path) {
  s->send = send;
  s->comm = NULL;
  s->listen_comm = NULL;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof handle);
  long long deadline = now_ns() + WAIT_NS;
  if (!send) {
    ncclResult_t rc = net_listen(0, handle, &s->listen_comm);
    if (rc != ncclSuccess || s->listen_comm == NULL) die("listen returned %d", rc);
    write_handle(handle_path, handle);
    while (s->comm == NULL) {
      rc = net_accept(s->listen_comm, &s->comm);
      if (rc != ncclSuccess) die("accept returned %d", rc);
      if (s->comm == NULL && now_ns() > deadline) die("accept did not complete in time");
      sched_yield();
    }
  } else {
    read_handle(handle_path, handle);
    while (s->comm == NULL) {
      ncclResult_t rc = net_connect(0, handle, &s->comm);
      if (rc != ncclSuccess) die("connect returned %d", rc);
      if (s->comm == NULL && now_ns() > deadline) die("connect did not complete in time");
      sched_yield();
    }
  }
  note("connected");
  size_t total = (size_t)NCCL_NET_MAX_REQUESTS * (CAPACITY + 1);
  s->bufs = malloc(total);
  if (s->bufs == NULL) die("out of memory");
  s->mh = register_mr(s->comm, s->bufs, total);
}

static void close_side(struct side* s) {
  ncclResult_t rc = CALL(deregMr, s->comm, s->mh);
  if (rc != ncclSuccess) die("deregMr returned %d", rc);
  rc = s->send ? CALL(closeSend, s->comm) : CALL(closeRecv, s->comm);
  if (rc != ncclSuccess) die("close returned %d", rc);
  if (s->listen_comm != NULL && (rc = CALL(closeListen, s->listen_comm)) != ncclSuccess) die("closeListen returned %d", rc);
  if (version >= 11) {
    rc = version == 11 ? T(11)->finalize(ctx) : T(12)->finalize(ctx);
    if (rc != ncclSuccess) die("finalize returned %d", rc);
  }
  free(s->bufs);
}

/* One message: sender fills and sends, receiver receives into a larger buffer and checks. */
static void one_message(struct side* s, int msg, size_t size, int slot) {
  unsigned char* buf = buf_at(s, slot);
  if (s->send) {
    fill(buf, msg, size);
    int got = wait_req(post(1, s->comm, buf, size, s->mh, msg), msg);
    if (got != (int)size) die("send of message %d reported %d bytes, sent %zu", msg, got, size);
  } else {
    memset(buf, CANARY, CAPACITY + 1);
    int got = wait_req(post(0, s->comm, buf, CAPACITY, s->mh, msg), msg);
    if (got != (int)size) die("message %d: received %d bytes, expected %zu", msg, got, size);
    check_data(buf, msg, size);
  }
}

static void scenario_data(struct side* s, const char* handle_path) {
  int msg = 0;
  for (int round = 0; round < 2; round++)
    for (size_t k = 0; k < NSIZES; k++) one_message(s, msg++, sizes[k], 0);
  note("sequential messages ok");

  /* The request limit: the plugin takes exactly NCCL_NET_MAX_REQUESTS, then says "later". */
  void* reqs[NCCL_NET_MAX_REQUESTS];
  int first = msg;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++, msg++) {
    unsigned char* buf = buf_at(s, i);
    size_t size = sizes[i % NSIZES];
    if (s->send) fill(buf, msg, size);
    else memset(buf, CANARY, CAPACITY + 1);
    reqs[i] = post(s->send, s->comm, buf, s->send ? size : CAPACITY, s->mh, msg);
  }
  void* extra = NULL;
  ncclResult_t rc = s->send ? net_isend(s->comm, buf_at(s, 0), 1, s->mh, &extra)
                            : net_irecv(s->comm, buf_at(s, 0), CAPACITY, s->mh, &extra);
  if (rc != ncclSuccess || extra != NULL) die("request %d beyond the limit: rc %d, request %p", NCCL_NET_MAX_REQUESTS + 1, rc, extra);
  /* Completed in reverse order: each request stands alone. */
  for (int i = NCCL_NET_MAX_REQUESTS - 1; i >= 0; i--) {
    int got = wait_req(reqs[i], first + i);
    size_t size = sizes[i % NSIZES];
    if (got != (int)size) die("in-flight message %d: %d bytes reported, expected %zu", first + i, got, size);
    if (!s->send) check_data(buf_at(s, i), first + i, size);
  }
  note("%d requests in flight ok", NCCL_NET_MAX_REQUESTS);

  /* Close with requests still in flight: receives the peer never matches, sends it may not take.
   * Neither side closes before the other has posted all three: a request posted after the
   * peer's close may rightly fail. */
  for (int i = 0; i < 3; i++) {
    void* req = NULL;
    rc = s->send ? net_isend(s->comm, buf_at(s, i), BIG, s->mh, &req) : net_irecv(s->comm, buf_at(s, i), CAPACITY, s->mh, &req);
    if (rc != ncclSuccess) die("in-flight post %d returned %d", i, rc);
  }
  touch(handle_path, s->send ? ".sender-posted" : ".receiver-posted");
  wait_touched(handle_path, s->send ? ".receiver-posted" : ".sender-posted");
}

/* The side named `victim` idles after one message until the test kills it; the other keeps
 * one transfer posted (a receive, or a send larger than the eager size) and must see it fail. */
static void scenario_kill(struct side* s, const char* handle_path, int victim_sends) {
  one_message(s, 0, 4097, 0);
  if (s->send == victim_sends) {
    touch(handle_path, ".idle");
    sleep(60);
    die("was not killed");
  }
  void* req = s->send ? post(1, s->comm, buf_at(s, 1), BIG, s->mh, 1) : post(0, s->comm, buf_at(s, 1), CAPACITY, s->mh, 1);
  touch(handle_path, ".ready");
  long long start = now_ns();
  for (;;) {
    int done = 0, size = -1;
    ncclResult_t rc = CALL(test, req, &done, &size);
    long long ms = (now_ns() - start) / 1000000;
    if (rc != ncclSuccess) {
      /* main then closes the communicator with the failed transfer still posted. */
      printf("peer loss reported: rc %d after %lld ms\n", rc, ms);
      return;
    }
    if (done) die("a transfer with a dead peer completed (%d bytes)", size);
    if (now_ns() - start > KILL_DETECT_NS) die("no error %lld ms after the peer died", ms);
    usleep(100);
  }
}

/* Sender: sends 1 .. N-2 complete; send N-1 is left in flight; send N must fail; then the
 * test of send N-1 and anything sent later must fail too. Receiver (same N in its
 * environment): messages 1 .. N-2 arrive, N-1 may, nothing after it. */
static void scenario_failsend(struct side* s) {
  const char* env = getenv("JITCCL_EDGE_FAIL_SEND");
  int n = env ? atoi(env) : 0;
  if (n < 2) die("JITCCL_EDGE_FAIL_SEND must be set to N >= 2");
  if (!s->send) {
    for (int k = 1; k <= n - 2; k++) one_message(s, k - 1, 4097, 0);
    int received = n - 2;
    long long deadline = now_ns() + 2000000000LL;
    unsigned char* buf = buf_at(s, 1);
    memset(buf, CANARY, CAPACITY + 1);
    void* req = post(0, s->comm, buf, CAPACITY, s->mh, received);
    while (now_ns() < deadline) {
      int done = 0, size = -1;
      ncclResult_t rc = CALL(test, req, &done, &size);
      if (rc != ncclSuccess) break;
      if (!done) continue;
      if (received != n - 2) die("message %d arrived after the sender's failed isend", received + 1);
      if (size != 4097) die("message %d: %d bytes", received + 1, size);
      check_data(buf, received, 4097);
      received++;
      memset(buf, CANARY, CAPACITY + 1);
      req = post(0, s->comm, buf, CAPACITY, s->mh, received);
    }
    printf("received %d messages\n", received);
    return;
  }
  for (int k = 1; k <= n - 2; k++) one_message(s, k - 1, 4097, 0);
  fill(buf_at(s, 0), n - 2, 4097);
  void* pending = post(1, s->comm, buf_at(s, 0), 4097, s->mh, n - 2);
  void* req = NULL;
  ncclResult_t rc = net_isend(s->comm, buf_at(s, 1), 4097, s->mh, &req);
  if (rc == ncclSuccess) die("isend %d succeeded, expected it to fail", n);
  printf("isend %d failed: rc %d\n", n, rc);
  int done = 0, size = -1;
  rc = CALL(test, pending, &done, &size);
  if (rc == ncclSuccess) die("test of isend %d after the failure returned success (done %d)", n - 1, done);
  printf("test of isend %d after the failure: rc %d\n", n - 1, rc);
  req = NULL;
  rc = net_isend(s->comm, buf_at(s, 2), 4097, s->mh, &req);
  if (rc == ncclSuccess && req != NULL) {
    long long deadline = now_ns() + WAIT_NS;
    for (;;) {
      rc = CALL(test, req, &done, &size);
      if (rc != ncclSuccess) break;
      if (done) die("isend %d after the failure reported success", n + 1);
      if (now_ns() > deadline) die("isend %d after the failure neither failed nor finished", n + 1);
    }
  }
  if (rc == ncclSuccess) die("isend %d after the failure returned success without a request", n + 1);
  printf("isend %d after the failure: rc %d\n", n + 1, rc);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: driver PLUGIN VERSION symbols|info|recv|send [HANDLE SCENARIO]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  const char* mode = argv[3];
  role = mode;
  version = atoi(argv[2]);
  if (version < 8 || version > 12) die("version %d is outside 8..12", version);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) die("dlopen: %s", dlerror());
  if (strcmp(mode, "symbols") == 0) {
    printf("symbols:");
    for (int v = 6; v <= 13; v++) {
      char name[32];
      snprintf(name, sizeof name, "ncclNetPlugin_v%d", v);
      if (dlsym(lib, name) != NULL) printf(" v%d", v);
    }
    printf("\n");
    return 0;
  }
  char symbol[32];
  snprintf(symbol, sizeof symbol, "ncclNetPlugin_v%d", version);
  table = dlsym(lib, symbol);
  if (table == NULL) die("%s not found", symbol);
  printf("name: %s\n", net_name());
  ncclResult_t rc = net_init();
  if (rc != ncclSuccess) {
    printf("init failed: rc %d\n", rc);
    return 0;
  }
  int ndev = -1;
  rc = CALL(devices, &ndev);
  if (rc != ncclSuccess) die("devices returned %d", rc);
  printf("devices: %d\n", ndev);
  if (strcmp(mode, "info") == 0) {
    for (int d = 0; d < ndev; d++) {
      /* v9 to v11 share the layout up to maxCollBytes; v12 moves what follows vProps. */
      union {
        ncclNetProperties_v8_t v8;
        ncclNetProperties_v9_t v9;
        ncclNetProperties_v11_t v11;
        ncclNetProperties_v12_t v12;
      } p;
      memset(&p, 0, sizeof p);
      switch (version) {
        case 8: rc = T(8)->getProperties(d, &p.v8); break;
        case 9: rc = T(9)->getProperties(d, &p.v9); break;
        case 10: rc = T(10)->getProperties(d, &p.v9); break;
        case 11: rc = T(11)->getProperties(d, &p.v11); break;
        default: rc = T(12)->getProperties(d, &p.v12); break;
      }
      if (rc != ncclSuccess) die("getProperties(%d) returned %d", d, rc);
      /* The fields up to latency sit at one offset in every version except v8's forceFlush gap. */
      if (version == 8) {
        printf("device %d: name=%s pci=%s speed=%d ptrSupport=%d maxRecvs=%d maxComms=%d type=%d", d, p.v8.name,
               p.v8.pciPath ? p.v8.pciPath : "-", p.v8.speed, p.v8.ptrSupport, p.v8.maxRecvs, p.v8.maxComms,
               (int)p.v8.netDeviceType);
      } else {
        printf("device %d: name=%s pci=%s speed=%d ptrSupport=%d maxRecvs=%d maxComms=%d type=%d vdevs=%d", d,
               p.v9.name, p.v9.pciPath ? p.v9.pciPath : "-", p.v9.speed, p.v9.ptrSupport, p.v9.maxRecvs,
               p.v9.maxComms, (int)p.v9.netDeviceType, p.v9.vProps.ndevs);
        printf(" maxP2pBytes=%zu", version == 12 ? p.v12.maxP2pBytes : p.v9.maxP2pBytes);
      }
      if (version == 11) printf(" maxMultiRequestSize=%d", p.v11.maxMultiRequestSize);
      if (version == 12) printf(" maxMultiRequestSize=%d railId=%d planeId=%d", p.v12.maxMultiRequestSize, p.v12.railId, p.v12.planeId);
      printf("\n");
    }
    return 0;
  }
  if (argc < 6) die("recv/send need HANDLE and SCENARIO");
  if (ndev < 1) die("no device to connect on");
  struct side s;
  open_side(&s, strcmp(mode, "send") == 0, argv[4]);
  const char* scenario = argv[5];
  if (strcmp(scenario, "data") == 0) scenario_data(&s, argv[4]);
  else if (strcmp(scenario, "kill-sender") == 0) scenario_kill(&s, argv[4], 1);
  else if (strcmp(scenario, "kill-receiver") == 0) scenario_kill(&s, argv[4], 0);
  else if (strcmp(scenario, "failsend") == 0) scenario_failsend(&s);
  else die("unknown scenario %s", scenario);
  close_side(&s);
  printf("OK\n");
  return 0;
}
