/*
 * Connections and the data path.
 *
 * Every communicator owns one RDM endpoint with its own completion queue and address
 * vector, so a communicator has exactly one peer: messages are matched by a per-connection
 * sequence number carried in the tag, which gives NCCL's in-order matching whatever order
 * the provider delivers in. Control messages (the connect hello and liveness probes) use
 * tags with the top bit set.
 *
 * Liveness: a posted receive is not tied to a connection, so a peer that dies would leave
 * it pending forever, and so would a large send waiting for the receiver's reply. The RDM
 * layer (ofi_rxm) reports neither a lost connection nor a refused reconnection: it only
 * answers later sends with -FI_EAGAIN while it retries. So while a communicator has
 * transfers posted, it sends its peer a zero-byte probe every PROBE_INTERVAL (both sides keep
 * a receive posted for them). A probe that fails, or that cannot even be posted for
 * PEER_LOSS_TIMEOUT, fails every request of the communicator: on a connected link, posting
 * only blocks when more operations wait than the provider's transmit queue holds, far more
 * than the NCCL_NET_MAX_REQUESTS a communicator ever has. A link that silently stops
 * carrying packets (no reset, no refusal) is only noticed when TCP itself gives up.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fabric.h"

#define CONTROL_TAG (1ULL << 63)
#define HELLO_TAG (CONTROL_TAG | 1)
#define PROBE_TAG (CONTROL_TAG | 2)
#define PROBE_INTERVAL_NS 500000000LL
#define PEER_LOSS_TIMEOUT_NS 3000000000LL
/* Close waits this long for posted operations to be cancelled or to finish. */
#define CLOSE_DRAIN_NS 1000000000LL
#define HANDLE_MAGIC 0x4a464142u /* "JFAB" */
#define HELLO_MAGIC 0x4a46484cu /* "JFHL" */
#define ADDR_MAX 64
#define CQ_BATCH 16

/* What listen writes into NCCL's handle buffer. The connecting side keeps its in-progress
 * communicator in `connecting` between its non-blocking connect calls (the caller passes the
 * same handle buffer again, as NCCL does). */
struct fab_handle {
  uint32_t magic;
  uint32_t addr_format;
  uint32_t addr_len;
  uint8_t addr[ADDR_MAX];
  struct fab_comm* connecting;
};
_Static_assert(sizeof(struct fab_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds NCCL's handle size");

/* The connector's first message: its own endpoint address, so that the listener can probe it. */
struct fab_hello {
  uint32_t magic;
  uint32_t addr_len;
  uint8_t addr[ADDR_MAX];
};

enum comm_kind { COMM_LISTEN, COMM_SEND, COMM_RECV };
enum req_state { REQ_FREE, REQ_POSTED, REQ_DONE };

struct fab_comm;

struct fab_req {
  /* Provider scratch (FI_CONTEXT mode); completions hand back this address. */
  struct fi_context fi_ctx;
  struct fab_comm* comm;
  enum req_state state;
  ncclResult_t status;
  size_t size;
};

struct fab_comm {
  enum comm_kind kind;
  struct fab_device* dev;
  struct fid_ep* ep;
  struct fid_cq* cq;
  struct fid_av* av;
  fi_addr_t peer;
  /* The peer's address as text, for messages. */
  char peer_name[64];
  uint64_t next_seq;
  /* First error seen; every later call on the communicator reports it. */
  ncclResult_t failed;
  struct fab_req reqs[NCCL_NET_MAX_REQUESTS];
  struct fab_req hello_req;
  struct fab_hello hello;
  struct fab_req probe_send;
  struct fab_req probe_recv;
  long long last_probe_ns;
  /* When probes started being refused with -FI_EAGAIN; 0 while they go out. */
  long long probe_blocked_since_ns;
};

struct fab_mr {
  struct fid_mr* mr; /* NULL when the provider needs no registration */
};

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char* kind_name(enum comm_kind kind) {
  return kind == COMM_LISTEN ? "listen" : kind == COMM_SEND ? "send" : "recv";
}

static void req_post(struct fab_comm* c, struct fab_req* r) {
  r->comm = c;
  r->state = REQ_POSTED;
  r->status = ncclSuccess;
  r->size = 0;
}

/* The error NCCL sees for a failed completion: a short receive buffer is the caller's
 * mistake, anything else a failure of the connection. */
static ncclResult_t classify(int err) {
  if (err == FI_ETRUNC) return ncclInvalidUsage;
  return ncclSystemError;
}

static void fail_comm(struct fab_comm* c, ncclResult_t rc, const char* what, const char* why) {
  if (c->failed == ncclSuccess && rc != ncclSuccess) {
    FAB_WARN("%s comm %p on %s, peer %s: %s failed: %s", kind_name(c->kind), (void*)c, fab_device_name(c->dev),
             c->peer_name[0] ? c->peer_name : "unknown", what, why);
    c->failed = rc;
  }
}

/* Reads the completion queue once through; completes requests and records failures. */
static void progress(struct fab_comm* c) {
  struct fi_cq_tagged_entry entries[CQ_BATCH];
  for (;;) {
    ssize_t n = fi_cq_read(c->cq, entries, CQ_BATCH);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry err;
      memset(&err, 0, sizeof err);
      if (fi_cq_readerr(c->cq, &err, 0) <= 0) return;
      struct fab_req* r = err.op_context;
      if (r != NULL) {
        r->state = REQ_DONE;
        r->status = err.err == FI_ECANCELED ? ncclSuccess : classify(err.err);
        if (err.flags & FI_RECV) r->size = err.len;
      }
      if (err.err != FI_ECANCELED && err.err != FI_ETRUNC) {
        const char* what = r == &c->probe_send ? "liveness probe" : r == &c->hello_req ? "hello" : "transfer";
        fail_comm(c, classify(err.err), what, fi_strerror(err.err));
      } else if (err.err == FI_ETRUNC) {
        FAB_WARN("recv comm %p: message larger than the posted buffer of %zu bytes", (void*)c, err.len);
      }
      continue;
    }
    if (n < 0) {
      fail_comm(c, ncclSystemError, "completion queue read", fi_strerror((int)-n));
      return;
    }
    for (ssize_t i = 0; i < n; i++) {
      struct fab_req* r = entries[i].op_context;
      if (r == NULL) continue;
      r->state = REQ_DONE;
      if (entries[i].flags & FI_RECV) r->size = entries[i].len;
    }
  }
}

static int any_data_posted(struct fab_comm* c) {
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
    if (c->reqs[i].state == REQ_POSTED) return 1;
  return 0;
}

static void post_probe_recv(struct fab_comm* c) {
  req_post(c, &c->probe_recv);
  ssize_t rc = fi_trecv(c->ep, NULL, 0, NULL, FI_ADDR_UNSPEC, PROBE_TAG, 0, &c->probe_recv.fi_ctx);
  /* Without a posted receive the peer's probes wait in the provider's unexpected queue,
   * which is harmless; retry on the next pass. */
  if (rc != 0) c->probe_recv.state = REQ_FREE;
}

/* Progress, plus the liveness probes: a receive kept posted for the peer's, and one sent
 * while transfers wait. */
static void tend(struct fab_comm* c) {
  progress(c);
  if (c->kind == COMM_LISTEN || c->failed != ncclSuccess) return;
  if (c->probe_recv.state != REQ_POSTED) post_probe_recv(c);
  if (c->probe_send.state == REQ_POSTED || !any_data_posted(c)) {
    c->probe_blocked_since_ns = 0;
    return;
  }
  long long now = now_ns();
  if (now - c->last_probe_ns < PROBE_INTERVAL_NS) return;
  c->last_probe_ns = now;
  req_post(c, &c->probe_send);
  ssize_t rc = fi_tsend(c->ep, NULL, 0, NULL, c->peer, PROBE_TAG, &c->probe_send.fi_ctx);
  if (rc == 0) {
    c->probe_blocked_since_ns = 0;
    return;
  }
  c->probe_send.state = REQ_FREE;
  if (rc != -FI_EAGAIN) {
    fail_comm(c, ncclSystemError, "liveness probe", fi_strerror((int)-rc));
  } else if (c->probe_blocked_since_ns == 0) {
    c->probe_blocked_since_ns = now;
  } else if (now - c->probe_blocked_since_ns >= PEER_LOSS_TIMEOUT_NS) {
    fail_comm(c, ncclRemoteError, "liveness probe", "the peer is unreachable (connection lost or refused)");
  }
}

/* Enters the peer's address in the communicator's address vector. */
static int set_peer(struct fab_comm* c, const void* addr) {
  int inserted = fi_av_insert(c->av, addr, 1, &c->peer, 0, NULL);
  size_t len = sizeof c->peer_name;
  if (fi_av_straddr(c->av, addr, c->peer_name, &len) == NULL) c->peer_name[0] = '\0';
  c->peer_name[sizeof c->peer_name - 1] = '\0';
  return inserted == 1;
}

static void close_fid(struct fid* fid, const char* what) {
  if (fid == NULL) return;
  int rc = fi_close(fid);
  if (rc != 0) FAB_WARN("closing %s: %s", what, fi_strerror(-rc));
}

static int posted(struct fab_comm* c, struct fab_req* r) { return r->comm == c && r->state == REQ_POSTED; }

static int anything_posted(struct fab_comm* c) {
  return any_data_posted(c) || posted(c, &c->hello_req) || posted(c, &c->probe_send) || posted(c, &c->probe_recv);
}

/* Cancels what can be cancelled (receives), gives the rest a bounded time, then closes. */
static void comm_free(struct fab_comm* c) {
  if (c->ep != NULL) {
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
      if (posted(c, &c->reqs[i])) fi_cancel(&c->ep->fid, &c->reqs[i].fi_ctx);
    if (posted(c, &c->hello_req)) fi_cancel(&c->ep->fid, &c->hello_req.fi_ctx);
    if (posted(c, &c->probe_recv)) fi_cancel(&c->ep->fid, &c->probe_recv.fi_ctx);
    long long deadline = now_ns() + CLOSE_DRAIN_NS;
    while (c->failed == ncclSuccess && anything_posted(c) && now_ns() < deadline) progress(c);
    if (anything_posted(c))
      FAB_INFO("%s comm %p: closing with operations still in flight", kind_name(c->kind), (void*)c);
  }
  close_fid(c->ep ? &c->ep->fid : NULL, "endpoint");
  close_fid(c->cq ? &c->cq->fid : NULL, "completion queue");
  close_fid(c->av ? &c->av->fid : NULL, "address vector");
  free(c);
}

/* A communicator with its endpoint enabled on device `dev`; its address goes to addr. */
static ncclResult_t comm_open(int dev, enum comm_kind kind, struct fab_comm** out, uint8_t* addr, size_t* addr_len) {
  struct fab_device* d = fab_device_get(dev);
  if (d == NULL) return ncclInvalidArgument;
  struct fid_domain* domain = fab_device_domain(d);
  if (domain == NULL) return ncclSystemError;
  struct fab_comm* c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->kind = kind;
  c->dev = d;
  c->peer = FI_ADDR_UNSPEC;
  const char* step = "fi_endpoint";
  int rc = fi_endpoint(domain, fab_device_info(d), &c->ep, NULL);
  if (rc == 0) {
    step = "fi_cq_open";
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    rc = fi_cq_open(domain, &cq_attr, &c->cq, NULL);
  }
  if (rc == 0) {
    step = "fi_av_open";
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    rc = fi_av_open(domain, &av_attr, &c->av, NULL);
  }
  if (rc == 0) {
    step = "binding the completion queue";
    rc = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV);
  }
  if (rc == 0) {
    step = "binding the address vector";
    rc = fi_ep_bind(c->ep, &c->av->fid, 0);
  }
  if (rc == 0) {
    step = "fi_enable";
    rc = fi_enable(c->ep);
  }
  if (rc == 0) {
    step = "fi_getname";
    rc = fi_getname(&c->ep->fid, addr, addr_len);
  }
  if (rc != 0) {
    FAB_WARN("%s comm on %s: %s failed: %s", kind_name(kind), fab_device_name(d), step, fi_strerror(-rc));
    comm_free(c);
    return ncclSystemError;
  }
  *out = c;
  return ncclSuccess;
}

ncclResult_t fab_listen(int dev, void* handle, void** listen_comm) {
  if (handle == NULL || listen_comm == NULL) return ncclInvalidArgument;
  *listen_comm = NULL;
  struct fab_handle* h = handle;
  memset(h, 0, sizeof *h);
  struct fab_comm* c;
  size_t len = ADDR_MAX;
  ncclResult_t rc = comm_open(dev, COMM_LISTEN, &c, h->addr, &len);
  if (rc != ncclSuccess) return rc;
  h->magic = HANDLE_MAGIC;
  h->addr_format = fab_device_info(c->dev)->addr_format;
  h->addr_len = (uint32_t)len;
  req_post(c, &c->hello_req);
  ssize_t posted_rc =
      fi_trecv(c->ep, &c->hello, sizeof c->hello, NULL, FI_ADDR_UNSPEC, HELLO_TAG, 0, &c->hello_req.fi_ctx);
  if (posted_rc != 0) {
    FAB_WARN("listen on %s: posting the hello receive failed: %s", fab_device_name(c->dev),
             fi_strerror((int)-posted_rc));
    c->hello_req.state = REQ_FREE;
    comm_free(c);
    return ncclSystemError;
  }
  *listen_comm = c;
  return ncclSuccess;
}

ncclResult_t fab_connect(int dev, void* handle, void** send_comm) {
  if (handle == NULL || send_comm == NULL) return ncclInvalidArgument;
  *send_comm = NULL;
  struct fab_handle* h = handle;
  if (h->magic != HANDLE_MAGIC || h->addr_len == 0 || h->addr_len > ADDR_MAX) {
    FAB_WARN("connect on device %d: the handle was not written by this plugin's listen", dev);
    return ncclInvalidArgument;
  }
  struct fab_comm* c = h->connecting;
  if (c == NULL) {
    struct fab_device* d = fab_device_get(dev);
    if (d == NULL) return ncclInvalidArgument;
    if (fab_device_info(d)->addr_format != h->addr_format) {
      FAB_WARN("connect on %s: the listener's address family (format %u) differs from this device's (%u)",
               fab_device_name(d), h->addr_format, fab_device_info(d)->addr_format);
      return ncclInvalidArgument;
    }
    uint8_t own[ADDR_MAX];
    size_t len = sizeof own;
    ncclResult_t rc = comm_open(dev, COMM_SEND, &c, own, &len);
    if (rc != ncclSuccess) return rc;
    c->hello.magic = HELLO_MAGIC;
    c->hello.addr_len = (uint32_t)len;
    memcpy(c->hello.addr, own, len);
    if (!set_peer(c, h->addr)) {
      FAB_WARN("connect on %s: the listener's address was refused by the address vector", fab_device_name(d));
      comm_free(c);
      return ncclSystemError;
    }
    h->connecting = c;
  }
  if (c->hello_req.state == REQ_FREE) {
    req_post(c, &c->hello_req);
    ssize_t rc = fi_tsend(c->ep, &c->hello, sizeof c->hello, NULL, c->peer, HELLO_TAG, &c->hello_req.fi_ctx);
    if (rc != 0) {
      c->hello_req.state = REQ_FREE;
      if (rc != -FI_EAGAIN) fail_comm(c, ncclSystemError, "sending the hello", fi_strerror((int)-rc));
    }
  }
  progress(c);
  if (c->failed == ncclSuccess && c->hello_req.state == REQ_DONE && c->hello_req.status != ncclSuccess)
    c->failed = c->hello_req.status;
  if (c->failed != ncclSuccess) {
    ncclResult_t rc = c->failed;
    h->connecting = NULL;
    comm_free(c);
    return rc;
  }
  if (c->hello_req.state != REQ_DONE) return ncclSuccess;
  c->hello_req.state = REQ_FREE;
  h->connecting = NULL;
  *send_comm = c;
  return ncclSuccess;
}

ncclResult_t fab_accept(void* listen_comm, void** recv_comm) {
  struct fab_comm* l = listen_comm;
  if (l == NULL || recv_comm == NULL || l->kind != COMM_LISTEN) return ncclInvalidArgument;
  *recv_comm = NULL;
  if (l->ep == NULL) {
    FAB_WARN("listen comm %p: accept called again after its connection was accepted", (void*)l);
    return ncclInvalidUsage;
  }
  progress(l);
  if (l->failed != ncclSuccess) return l->failed;
  if (l->hello_req.state != REQ_DONE) return ncclSuccess;
  if (l->hello_req.status != ncclSuccess || l->hello.magic != HELLO_MAGIC || l->hello.addr_len == 0 ||
      l->hello.addr_len > ADDR_MAX) {
    FAB_WARN("listen comm %p on %s: the first message is not a connect hello", (void*)l, fab_device_name(l->dev));
    l->failed = ncclRemoteError;
    return l->failed;
  }
  if (!set_peer(l, l->hello.addr)) {
    FAB_WARN("listen comm %p on %s: the connector's address was refused by the address vector", (void*)l,
             fab_device_name(l->dev));
    l->failed = ncclSystemError;
    return l->failed;
  }
  struct fab_comm* r = calloc(1, sizeof *r);
  if (r == NULL) return ncclSystemError;
  /* The endpoint, with anything the peer already sent, moves to the receive side. */
  r->kind = COMM_RECV;
  r->dev = l->dev;
  r->ep = l->ep;
  r->cq = l->cq;
  r->av = l->av;
  r->peer = l->peer;
  memcpy(r->peer_name, l->peer_name, sizeof r->peer_name);
  l->ep = NULL;
  l->cq = NULL;
  l->av = NULL;
  *recv_comm = r;
  return ncclSuccess;
}

ncclResult_t fab_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  struct fab_comm* c = comm;
  if (c == NULL || mhandle == NULL) return ncclInvalidArgument;
  *mhandle = NULL;
  if (type != NCCL_PTR_HOST) {
    FAB_WARN("regMr of %p (%zu bytes): memory type 0x%x refused, this plugin moves host memory only", data, size,
             type);
    return ncclInvalidArgument;
  }
  struct fab_mr* m = calloc(1, sizeof *m);
  if (m == NULL) return ncclSystemError;
  if (fab_device_needs_mr(c->dev)) {
    int rc = fi_mr_reg(fab_device_domain(c->dev), data, size, FI_SEND | FI_RECV, 0, 0, 0, &m->mr, NULL);
    if (rc != 0) {
      FAB_WARN("regMr of %p (%zu bytes) on %s: %s", data, size, fab_device_name(c->dev), fi_strerror(-rc));
      free(m);
      return ncclSystemError;
    }
  }
  *mhandle = m;
  return ncclSuccess;
}

ncclResult_t fab_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               void** mhandle) {
  (void)comm;
  (void)offset;
  (void)fd;
  if (mhandle != NULL) *mhandle = NULL;
  FAB_WARN("regMrDmaBuf of %p (%zu bytes, type 0x%x) refused: dma-buf memory is not supported", data, size, type);
  return ncclInvalidArgument;
}

ncclResult_t fab_dereg_mr(void* comm, void* mhandle) {
  (void)comm;
  struct fab_mr* m = mhandle;
  if (m == NULL) return ncclInvalidArgument;
  if (m->mr != NULL) close_fid(&m->mr->fid, "memory registration");
  free(m);
  return ncclSuccess;
}

static void* mr_desc(struct fab_mr* m) { return m != NULL && m->mr != NULL ? fi_mr_desc(m->mr) : NULL; }

static struct fab_req* free_slot(struct fab_comm* c) {
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
    if (c->reqs[i].state == REQ_FREE) return &c->reqs[i];
  return NULL;
}

ncclResult_t fab_isend(void* send_comm, void* data, size_t size, void* mhandle, void** request) {
  struct fab_comm* c = send_comm;
  if (c == NULL || request == NULL || c->kind != COMM_SEND) return ncclInvalidArgument;
  *request = NULL;
  tend(c);
  if (c->failed != ncclSuccess) return c->failed;
  if (size > FAB_MAX_TRANSFER_BYTES) {
    FAB_WARN("send comm %p: isend of %zu bytes refused, maxP2pBytes is %zu", (void*)c, size, FAB_MAX_TRANSFER_BYTES);
    return ncclInvalidArgument;
  }
  if (mhandle == NULL && size > 0 && fab_device_needs_mr(c->dev)) {
    FAB_WARN("send comm %p: isend of %zu bytes without a memory registration", (void*)c, size);
    return ncclInvalidArgument;
  }
  struct fab_req* r = free_slot(c);
  if (r == NULL) return ncclSuccess;
  req_post(c, r);
  r->size = size;
  ssize_t rc = fi_tsend(c->ep, data, size, mr_desc(mhandle), c->peer, c->next_seq, &r->fi_ctx);
  if (rc != 0) {
    r->state = REQ_FREE;
    if (rc == -FI_EAGAIN) return ncclSuccess;
    fail_comm(c, ncclSystemError, "isend", fi_strerror((int)-rc));
    return c->failed;
  }
  c->next_seq++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t fab_irecv(void* recv_comm, int n, void** data, const size_t* sizes, void** mhandles, void** request) {
  struct fab_comm* c = recv_comm;
  if (c == NULL || request == NULL || c->kind != COMM_RECV || data == NULL || sizes == NULL)
    return ncclInvalidArgument;
  *request = NULL;
  if (n != 1) {
    FAB_WARN("recv comm %p: irecv of %d buffers refused, maxRecvs is 1", (void*)c, n);
    return ncclInvalidArgument;
  }
  tend(c);
  if (c->failed != ncclSuccess) return c->failed;
  if (sizes[0] > FAB_MAX_TRANSFER_BYTES) {
    FAB_WARN("recv comm %p: irecv of %zu bytes refused, maxP2pBytes is %zu", (void*)c, sizes[0],
             FAB_MAX_TRANSFER_BYTES);
    return ncclInvalidArgument;
  }
  struct fab_mr* m = mhandles != NULL ? mhandles[0] : NULL;
  if (m == NULL && sizes[0] > 0 && fab_device_needs_mr(c->dev)) {
    FAB_WARN("recv comm %p: irecv of %zu bytes without a memory registration", (void*)c, sizes[0]);
    return ncclInvalidArgument;
  }
  struct fab_req* r = free_slot(c);
  if (r == NULL) return ncclSuccess;
  req_post(c, r);
  ssize_t rc = fi_trecv(c->ep, data[0], sizes[0], mr_desc(m), FI_ADDR_UNSPEC, c->next_seq, 0, &r->fi_ctx);
  if (rc != 0) {
    r->state = REQ_FREE;
    if (rc == -FI_EAGAIN) return ncclSuccess;
    fail_comm(c, ncclSystemError, "irecv", fi_strerror((int)-rc));
    return c->failed;
  }
  c->next_seq++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t fab_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recv_comm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  if (request != NULL) *request = NULL;
  /* Only GPU memory ever needs a flush, and this plugin refuses to register any. */
  FAB_WARN("iflush refused: this plugin moves host memory only, which needs no flush");
  return ncclInternalError;
}

ncclResult_t fab_test(void* request, int* done, int* sizes) {
  struct fab_req* r = request;
  if (r == NULL || done == NULL || r->comm == NULL) return ncclInvalidArgument;
  *done = 0;
  struct fab_comm* c = r->comm;
  if (r->state == REQ_FREE) {
    FAB_WARN("%s comm %p: test of a request that is not in flight", kind_name(c->kind), (void*)c);
    return ncclInvalidUsage;
  }
  if (r->state == REQ_POSTED) tend(c);
  if (r->state == REQ_DONE) {
    ncclResult_t rc = r->status;
    r->state = REQ_FREE;
    if (rc != ncclSuccess) return rc;
    *done = 1;
    if (sizes != NULL) sizes[0] = (int)r->size;
    return ncclSuccess;
  }
  /* Still posted: the slot stays taken (the provider owns it) until close. */
  return c->failed;
}

ncclResult_t fab_close_send(void* send_comm) {
  struct fab_comm* c = send_comm;
  if (c == NULL || c->kind != COMM_SEND) return ncclInvalidArgument;
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t fab_close_recv(void* recv_comm) {
  struct fab_comm* c = recv_comm;
  if (c == NULL || c->kind != COMM_RECV) return ncclInvalidArgument;
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t fab_close_listen(void* listen_comm) {
  struct fab_comm* c = listen_comm;
  if (c == NULL || c->kind != COMM_LISTEN) return ncclInvalidArgument;
  comm_free(c);
  return ncclSuccess;
}
