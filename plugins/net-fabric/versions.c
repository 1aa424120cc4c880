/*
 * The exported tables, one per interface version, as thin adapters over the core.
 * The library is built with hidden visibility: these five symbols are all it exports.
 */
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

#define EXPORT __attribute__((visibility("default")))
#define PLUGIN_NAME "Fabric"

/* The fields every version shares; v9+ add theirs after this. */
#define FILL_COMMON(p, f)                                   \
  do {                                                      \
    memset((p), 0, sizeof *(p));                            \
    (p)->name = (f).name;                                   \
    (p)->pciPath = (f).pci_path;                            \
    (p)->guid = (f).guid;                                   \
    (p)->ptrSupport = NCCL_PTR_HOST;                        \
    (p)->regIsGlobal = 0;                                   \
    (p)->speed = (f).speed_mbps;                            \
    (p)->port = 0;                                          \
    (p)->latency = (f).latency_us;                          \
    (p)->maxComms = (f).max_comms;                          \
    (p)->maxRecvs = (f).max_recvs;                          \
    (p)->netDeviceType = NCCL_NET_DEVICE_HOST;              \
    (p)->netDeviceVersion = 0;                              \
  } while (0)

/* v9+: one physical device per virtual NIC, and the transfer caps. */
#define FILL_V9(p, f, dev)                                  \
  do {                                                      \
    (p)->forceFlush = 0;                                    \
    (p)->vProps.ndevs = 1;                                  \
    (p)->vProps.devs[0] = (dev);                            \
    (p)->maxP2pBytes = (f).max_p2p_bytes;                   \
    (p)->maxCollBytes = (f).max_p2p_bytes;                  \
  } while (0)

static ncclResult_t props_v8(int dev, ncclNetProperties_v8_t* p) {
  struct fab_props f;
  ncclResult_t rc = p != NULL ? fab_properties(dev, &f) : ncclInvalidArgument;
  if (rc != ncclSuccess) return rc;
  FILL_COMMON(p, f);
  return ncclSuccess;
}

static ncclResult_t props_v9(int dev, ncclNetProperties_v9_t* p) {
  struct fab_props f;
  ncclResult_t rc = p != NULL ? fab_properties(dev, &f) : ncclInvalidArgument;
  if (rc != ncclSuccess) return rc;
  FILL_COMMON(p, f);
  FILL_V9(p, f, dev);
  return ncclSuccess;
}

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t* p) {
  struct fab_props f;
  ncclResult_t rc = p != NULL ? fab_properties(dev, &f) : ncclInvalidArgument;
  if (rc != ncclSuccess) return rc;
  FILL_COMMON(p, f);
  FILL_V9(p, f, dev);
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}

static ncclResult_t props_v12(int dev, ncclNetProperties_v12_t* p) {
  struct fab_props f;
  ncclResult_t rc = p != NULL ? fab_properties(dev, &f) : ncclInvalidArgument;
  if (rc != ncclSuccess) return rc;
  FILL_COMMON(p, f);
  FILL_V9(p, f, dev);
  p->maxMultiRequestSize = 1;
  p->railId = NCCL_NET_ID_UNDEF;
  p->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

/* ---- init flavours ---- */

static ncclResult_t init_v8(ncclDebugLogger_t log) { return fab_init(log); }

static ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof; /* no profiler events are emitted */
  return fab_init(log);
}

static ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t log,
                             ncclProfilerCallback_t prof) {
  (void)prof;
  if (ctx == NULL) return ncclInvalidArgument;
  *ctx = NULL;
  ncclResult_t rc = fab_init(log);
  if (rc != ncclSuccess) return rc;
  struct fab_ctx* c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->comm_id = comm_id;
  c->traffic_class = config != NULL ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t finalize_v11(void* ctx) {
  /* Devices and domains outlive contexts: communicators of other contexts may still use them. */
  if (ctx == NULL) return ncclInvalidArgument;
  free(ctx);
  return ncclSuccess;
}

/* ---- calls whose signature changed between versions ---- */

static ncclResult_t listen_ctx(void* ctx, int dev, void* handle, void** comm) {
  if (ctx == NULL) return ncclInvalidArgument;
  return fab_listen(dev, handle, comm);
}

static ncclResult_t connect_v8(int dev, void* handle, void** comm, ncclNetDeviceHandle_v8_t** dev_comm) {
  (void)dev_comm; /* no device offload: properties say NCCL_NET_DEVICE_HOST */
  return fab_connect(dev, handle, comm);
}

static ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** comm,
                                ncclNetDeviceHandle_v10_t** dev_comm) {
  (void)config; /* the traffic class has no meaning on a TCP endpoint */
  return connect_v8(dev, handle, comm, dev_comm);
}

static ncclResult_t connect_ctx(void* ctx, int dev, void* handle, void** comm, ncclNetDeviceHandle_v11_t** dev_comm) {
  if (ctx == NULL) return ncclInvalidArgument;
  return connect_v8(dev, handle, comm, dev_comm);
}

static ncclResult_t accept_any(void* listen_comm, void** comm, ncclNetDeviceHandle_v8_t** dev_comm) {
  (void)dev_comm;
  return fab_accept(listen_comm, comm);
}

static ncclResult_t isend_v8(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)tag; /* matching is by order, as in NCCL's own transports */
  if (size < 0) return ncclInvalidArgument;
  return fab_isend(comm, data, (size_t)size, mhandle, request);
}

static ncclResult_t isend_v9(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  (void)tag;
  return fab_isend(comm, data, size, mhandle, request);
}

static ncclResult_t isend_v10(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                              void** request) {
  (void)phandle;
  return isend_v9(comm, data, size, tag, mhandle, request);
}

static ncclResult_t irecv_v8(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  (void)tags;
  if (sizes == NULL || n < 1) return ncclInvalidArgument;
  if (sizes[0] < 0) return ncclInvalidArgument;
  size_t size = (size_t)sizes[0];
  /* n > 1 is refused by the core (maxRecvs is 1), so only the first size matters. */
  return fab_irecv(comm, n, data, &size, mhandles, request);
}

static ncclResult_t irecv_v9(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                             void** request) {
  (void)tags;
  return fab_irecv(comm, n, data, sizes, mhandles, request);
}

static ncclResult_t irecv_v10(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** phandles, void** request) {
  (void)phandles;
  return irecv_v9(comm, n, data, sizes, tags, mhandles, request);
}

/* ---- the tables ---- */

EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = PLUGIN_NAME,
    .init = init_v8,
    .devices = fab_devices,
    .getProperties = props_v8,
    .listen = fab_listen,
    .connect = connect_v8,
    .accept = accept_any,
    .regMr = fab_reg_mr,
    .regMrDmaBuf = fab_reg_mr_dmabuf,
    .deregMr = fab_dereg_mr,
    .isend = isend_v8,
    .irecv = irecv_v8,
    .iflush = fab_iflush,
    .test = fab_test,
    .closeSend = fab_close_send,
    .closeRecv = fab_close_recv,
    .closeListen = fab_close_listen,
};

EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = PLUGIN_NAME,
    .init = init_v8,
    .devices = fab_devices,
    .getProperties = props_v9,
    .listen = fab_listen,
    .connect = connect_v8,
    .accept = accept_any,
    .regMr = fab_reg_mr,
    .regMrDmaBuf = fab_reg_mr_dmabuf,
    .deregMr = fab_dereg_mr,
    .isend = isend_v9,
    .irecv = irecv_v9,
    .iflush = fab_iflush,
    .test = fab_test,
    .closeSend = fab_close_send,
    .closeRecv = fab_close_recv,
    .closeListen = fab_close_listen,
};

EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = PLUGIN_NAME,
    .init = init_v10,
    .devices = fab_devices,
    .getProperties = props_v9,
    .listen = fab_listen,
    .connect = connect_v10,
    .accept = accept_any,
    .regMr = fab_reg_mr,
    .regMrDmaBuf = fab_reg_mr_dmabuf,
    .deregMr = fab_dereg_mr,
    .isend = isend_v10,
    .irecv = irecv_v10,
    .iflush = fab_iflush,
    .test = fab_test,
    .closeSend = fab_close_send,
    .closeRecv = fab_close_recv,
    .closeListen = fab_close_listen,
};

EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = PLUGIN_NAME,
    .init = init_v11,
    .devices = fab_devices,
    .getProperties = props_v11,
    .listen = listen_ctx,
    .connect = connect_ctx,
    .accept = accept_any,
    .regMr = fab_reg_mr,
    .regMrDmaBuf = fab_reg_mr_dmabuf,
    .deregMr = fab_dereg_mr,
    .isend = isend_v10,
    .irecv = irecv_v10,
    .iflush = fab_iflush,
    .test = fab_test,
    .closeSend = fab_close_send,
    .closeRecv = fab_close_recv,
    .closeListen = fab_close_listen,
    .finalize = finalize_v11,
};

EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = PLUGIN_NAME,
    .init = init_v11,
    .devices = fab_devices,
    .getProperties = props_v12,
    .listen = listen_ctx,
    .connect = connect_ctx,
    .accept = accept_any,
    .regMr = fab_reg_mr,
    .regMrDmaBuf = fab_reg_mr_dmabuf,
    .deregMr = fab_dereg_mr,
    .isend = isend_v10,
    .irecv = irecv_v10,
    .iflush = fab_iflush,
    .test = fab_test,
    .closeSend = fab_close_send,
    .closeRecv = fab_close_recv,
    .closeListen = fab_close_listen,
    .finalize = finalize_v11,
};
