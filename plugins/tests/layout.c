/*
 * Pins the binary layout of jitccl_net.h to the one NCCL's loader uses: the sizes of
 * every properties struct, the offsets of the fields a version added or moved, and the
 * slot of the members each function table added. Any slip stops this file compiling.
 */
#include <stddef.h>
#include <stdio.h>

#include "jitccl_net.h"

#define PIN(expr, value) _Static_assert((expr) == (value), #expr " must be " #value)

/* Properties: v8 64 bytes, v9 and v10 104, v11 112, v12 128. */
PIN(sizeof(ncclNetProperties_v8_t), 64);
PIN(offsetof(ncclNetProperties_v8_t, guid), 16);
PIN(offsetof(ncclNetProperties_v8_t, ptrSupport), 24);
PIN(offsetof(ncclNetProperties_v8_t, speed), 32);
PIN(offsetof(ncclNetProperties_v8_t, latency), 40);
PIN(offsetof(ncclNetProperties_v8_t, maxRecvs), 48);
PIN(offsetof(ncclNetProperties_v8_t, netDeviceVersion), 56);

PIN(sizeof(ncclNetProperties_v9_t), 104);
PIN(sizeof(ncclNetProperties_v10_t), 104);
PIN(offsetof(ncclNetProperties_v9_t, forceFlush), 32);
PIN(offsetof(ncclNetProperties_v9_t, speed), 36);
PIN(offsetof(ncclNetProperties_v9_t, latency), 44);
PIN(offsetof(ncclNetProperties_v9_t, maxRecvs), 52);
PIN(offsetof(ncclNetProperties_v9_t, netDeviceType), 56);
PIN(offsetof(ncclNetProperties_v9_t, vProps), 64);
PIN(offsetof(ncclNetProperties_v9_t, maxP2pBytes), 88);
PIN(offsetof(ncclNetProperties_v9_t, maxCollBytes), 96);

PIN(sizeof(ncclNetProperties_v11_t), 112);
PIN(offsetof(ncclNetProperties_v11_t, vProps), 64);
PIN(offsetof(ncclNetProperties_v11_t, maxP2pBytes), 88);
PIN(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize), 104);

PIN(sizeof(ncclNetProperties_v12_t), 128);
PIN(offsetof(ncclNetProperties_v12_t, vProps), 64);
PIN(offsetof(ncclNetProperties_v12_t, maxP2pBytes), 104);
PIN(offsetof(ncclNetProperties_v12_t, maxCollBytes), 112);
PIN(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize), 120);
PIN(offsetof(ncclNetProperties_v12_t, railId), 124);
PIN(offsetof(ncclNetProperties_v12_t, planeId), 126);

PIN(sizeof(ncclNetVDeviceProps_v9_t), 20);
PIN(sizeof(ncclNetVDeviceProps_v12_t), 36);
PIN(sizeof(ncclNetDeviceHandle_v8_t), 32);
PIN(sizeof(ncclNetAttr_v11_t), 44);

/* Function tables: name plus 18 calls in v8, 19 in v9 and v10, 21 in v11 and v12. */
#define SLOT(table, member) (offsetof(table, member) / sizeof(void*))
PIN(sizeof(ncclNet_v8_t), 19 * sizeof(void*));
PIN(SLOT(ncclNet_v8_t, init), 1);
PIN(SLOT(ncclNet_v8_t, listen), 4);
PIN(SLOT(ncclNet_v8_t, regMrDmaBuf), 8);
PIN(SLOT(ncclNet_v8_t, isend), 10);
PIN(SLOT(ncclNet_v8_t, test), 13);
PIN(SLOT(ncclNet_v8_t, closeListen), 16);
PIN(SLOT(ncclNet_v8_t, irecvConsumed), 18);
PIN(sizeof(ncclNet_v9_t), 20 * sizeof(void*));
PIN(SLOT(ncclNet_v9_t, makeVDevice), 19);
PIN(sizeof(ncclNet_v10_t), 20 * sizeof(void*));
PIN(SLOT(ncclNet_v10_t, connect), 5);
PIN(SLOT(ncclNet_v10_t, makeVDevice), 19);
PIN(sizeof(ncclNet_v11_t), 22 * sizeof(void*));
PIN(SLOT(ncclNet_v11_t, finalize), 20);
PIN(SLOT(ncclNet_v11_t, setNetAttr), 21);
PIN(sizeof(ncclNet_v12_t), 22 * sizeof(void*));
PIN(SLOT(ncclNet_v12_t, test), 13);
PIN(SLOT(ncclNet_v12_t, finalize), 20);

/* Constants of the interface. */
PIN(NCCL_NET_HANDLE_MAXSIZE, 128);
PIN(NCCL_NET_MAX_REQUESTS, 32);
PIN(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 7);
PIN(ncclSystemError, 2);
PIN(ncclInternalError, 3);
PIN(ncclRemoteError, 6);
PIN(sizeof(ncclResult_t), 4);

int main(void) {
  printf("props v8 %zu v9 %zu v10 %zu v11 %zu v12 %zu\n", sizeof(ncclNetProperties_v8_t),
         sizeof(ncclNetProperties_v9_t), sizeof(ncclNetProperties_v10_t), sizeof(ncclNetProperties_v11_t),
         sizeof(ncclNetProperties_v12_t));
  return 0;
}
