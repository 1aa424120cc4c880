/*
 * The "Fabric" network plugin: NCCL's network interface over libfabric RDM endpoints
 * (the tcp provider by default), host memory only.
 *
 * One core (devices.c, comm.c) speaks in plain types; versions.c adapts it to each
 * interface version's table. Internal declarations only: nothing here is exported.
 */
#ifndef JITCCL_FABRIC_H
#define JITCCL_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include "jitccl_net.h"

/* ---- log.c ---- */
void fab_set_logger(ncclDebugLogger_t logger);
void fab_log(ncclDebugLogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FAB_WARN(...) fab_log(NCCL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define FAB_INFO(...) fab_log(NCCL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)

/* Largest single transfer, as in NCCL's socket transport; test reports sizes as int. */
#define FAB_MAX_TRANSFER_BYTES ((size_t)1 << 30)

/* ---- devices.c ---- */

/* What every version's properties struct is filled from. */
struct fab_props {
  char* name;
  char* pci_path;
  uint64_t guid;
  int speed_mbps;
  float latency_us;
  int max_comms;
  int max_recvs;
  size_t max_p2p_bytes;
};

struct fab_device;

/* Discovers the devices on first call; later calls only install the logger. */
ncclResult_t fab_init(ncclDebugLogger_t logger);
ncclResult_t fab_devices(int* ndev);
ncclResult_t fab_properties(int dev, struct fab_props* props);
/* The device of index dev, or NULL (logged) when out of range or init never ran. */
struct fab_device* fab_device_get(int dev);
/* The device's libfabric description (its source address has port 0). */
struct fi_info* fab_device_info(struct fab_device* d);
/* The device's domain, opened on first use and kept for the process's lifetime. */
struct fid_domain* fab_device_domain(struct fab_device* d);
/* Whether the domain wants buffers registered before use (FI_MR_LOCAL). */
int fab_device_needs_mr(struct fab_device* d);
const char* fab_device_name(struct fab_device* d);

/* ---- comm.c ---- */

/* Per-communicator init context of interface v11+. */
struct fab_ctx {
  uint64_t comm_id;
  int traffic_class;
};

ncclResult_t fab_listen(int dev, void* handle, void** listen_comm);
ncclResult_t fab_connect(int dev, void* handle, void** send_comm);
ncclResult_t fab_accept(void* listen_comm, void** recv_comm);
ncclResult_t fab_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t fab_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               void** mhandle);
ncclResult_t fab_dereg_mr(void* comm, void* mhandle);
ncclResult_t fab_isend(void* send_comm, void* data, size_t size, void* mhandle, void** request);
ncclResult_t fab_irecv(void* recv_comm, int n, void** data, const size_t* sizes, void** mhandles, void** request);
ncclResult_t fab_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t fab_test(void* request, int* done, int* sizes);
ncclResult_t fab_close_send(void* send_comm);
ncclResult_t fab_close_recv(void* recv_comm);
ncclResult_t fab_close_listen(void* listen_comm);

#endif /* JITCCL_FABRIC_H */
