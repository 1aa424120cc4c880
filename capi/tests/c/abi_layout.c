/*
 * Prints the ABI facts of capi/include/nccl.h, one "name value" per line, to
 * be compared with capi/tests/abi_layout.expected (NCCL 2.30.7's values on an
 * LP64 target: x86_64 or aarch64 Linux). Calls no library function, so it
 * builds and runs without libnccl:
 *
 *   cc -std=c99 -I capi/include capi/tests/c/abi_layout.c -o abi_layout
 *   ./abi_layout | diff - capi/tests/abi_layout.expected
 */
#include <stddef.h>
#include <stdio.h>

#include "nccl.h"

#if !defined(JITCCL_NCCL_H)
#error "abi_layout.c checks jitccl's nccl.h"
#endif

#define VAL(name, expr) printf("%s %lld\n", name, (long long)(expr))
#define HEX(name, expr) printf("%s 0x%llx\n", name, (unsigned long long)(expr))
#define SIZE(type) VAL("sizeof(" #type ")", sizeof(type))
#define OFF(type, field) VAL("offsetof(" #type "," #field ")", offsetof(type, field))
#define ENUM(e) VAL(#e, e)

int main(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;

  /* Version */
  VAL("NCCL_MAJOR", NCCL_MAJOR);
  VAL("NCCL_MINOR", NCCL_MINOR);
  VAL("NCCL_PATCH", NCCL_PATCH);
  printf("NCCL_SUFFIX \"%s\"\n", NCCL_SUFFIX);
  VAL("NCCL_VERSION_CODE", NCCL_VERSION_CODE);
  VAL("NCCL_VERSION(2,30,7)", NCCL_VERSION(2, 30, 7));
  VAL("NCCL_VERSION(2,8,4)", NCCL_VERSION(2, 8, 4));
  VAL("NCCL_VERSION(3,0,0)", NCCL_VERSION(3, 0, 0));

  /* Unique id */
  VAL("NCCL_UNIQUE_ID_BYTES", NCCL_UNIQUE_ID_BYTES);
  SIZE(ncclUniqueId);

  /* ncclConfig_t */
  SIZE(ncclConfig_t);
  OFF(ncclConfig_t, size);
  OFF(ncclConfig_t, magic);
  OFF(ncclConfig_t, version);
  OFF(ncclConfig_t, blocking);
  OFF(ncclConfig_t, cgaClusterSize);
  OFF(ncclConfig_t, minCTAs);
  OFF(ncclConfig_t, maxCTAs);
  OFF(ncclConfig_t, netName);
  OFF(ncclConfig_t, splitShare);
  OFF(ncclConfig_t, trafficClass);
  OFF(ncclConfig_t, commName);
  OFF(ncclConfig_t, collnetEnable);
  OFF(ncclConfig_t, CTAPolicy);
  OFF(ncclConfig_t, shrinkShare);
  OFF(ncclConfig_t, nvlsCTAs);
  OFF(ncclConfig_t, nChannelsPerNetPeer);
  OFF(ncclConfig_t, nvlinkCentricSched);
  OFF(ncclConfig_t, graphUsageMode);
  OFF(ncclConfig_t, numRmaCtx);
  OFF(ncclConfig_t, maxP2pPeers);
  OFF(ncclConfig_t, graphStreamOrdering);

  /* NCCL_CONFIG_INITIALIZER */
  VAL("c.size", c.size);
  HEX("c.magic", c.magic);
  VAL("c.version", c.version);
  VAL("c.blocking", c.blocking);
  VAL("c.netName_is_null", c.netName == NULL);
  VAL("c.commName_is_null", c.commName == NULL);
  VAL("c.graphStreamOrdering", c.graphStreamOrdering);

  /* ncclSimInfo_t and its initializer */
  SIZE(ncclSimInfo_t);
  OFF(ncclSimInfo_t, size);
  OFF(ncclSimInfo_t, magic);
  OFF(ncclSimInfo_t, version);
  OFF(ncclSimInfo_t, estimatedTime);
  VAL("s.size", s.size);
  HEX("s.magic", s.magic);
  VAL("s.version", s.version);
  VAL("s.estimatedTime_is_undef", s.estimatedTime == NCCL_UNDEF_FLOAT);

  /* ncclWaitSignalDesc_t */
  SIZE(ncclWaitSignalDesc_t);
  OFF(ncclWaitSignalDesc_t, opCnt);
  OFF(ncclWaitSignalDesc_t, peer);
  OFF(ncclWaitSignalDesc_t, sigIdx);
  OFF(ncclWaitSignalDesc_t, ctx);

  /* Handle and enum sizes */
  SIZE(ncclComm_t);
  SIZE(ncclWindow_t);
  SIZE(ncclParamHandle_t);
  SIZE(ncclResult_t);
  SIZE(ncclRedOp_t);
  SIZE(ncclDataType_t);
  SIZE(ncclScalarResidence_t);
  SIZE(ncclCommMemStat_t);

  /* ncclResult_t */
  ENUM(ncclSuccess);
  ENUM(ncclUnhandledCudaError);
  ENUM(ncclSystemError);
  ENUM(ncclInternalError);
  ENUM(ncclInvalidArgument);
  ENUM(ncclInvalidUsage);
  ENUM(ncclRemoteError);
  ENUM(ncclInProgress);
  ENUM(ncclTimeout);
  ENUM(ncclNumResults);

  /* ncclDataType_t */
  ENUM(ncclInt8);
  ENUM(ncclChar);
  ENUM(ncclUint8);
  ENUM(ncclInt32);
  ENUM(ncclInt);
  ENUM(ncclUint32);
  ENUM(ncclInt64);
  ENUM(ncclUint64);
  ENUM(ncclFloat16);
  ENUM(ncclHalf);
  ENUM(ncclFloat32);
  ENUM(ncclFloat);
  ENUM(ncclFloat64);
  ENUM(ncclDouble);
  ENUM(ncclBfloat16);
  ENUM(ncclFloat8e4m3);
  ENUM(ncclFloat8e5m2);
  ENUM(ncclNumTypes);

  /* ncclRedOp_t */
  ENUM(ncclSum);
  ENUM(ncclProd);
  ENUM(ncclMax);
  ENUM(ncclMin);
  ENUM(ncclAvg);
  ENUM(ncclNumOps);
  ENUM(ncclMaxRedOp);

  /* Other enums */
  ENUM(ncclScalarDevice);
  ENUM(ncclScalarHostImmediate);
  ENUM(ncclStatGpuMemSuspend);
  ENUM(ncclStatGpuMemSuspended);
  ENUM(ncclStatGpuMemPersist);
  ENUM(ncclStatGpuMemTotal);

  /* Constants */
  HEX("NCCL_API_MAGIC", NCCL_API_MAGIC);
  VAL("NCCL_CONFIG_UNDEF_INT", NCCL_CONFIG_UNDEF_INT);
  VAL("NCCL_SPLIT_NOCOLOR", NCCL_SPLIT_NOCOLOR);
  VAL("NCCL_WIN_DEFAULT", NCCL_WIN_DEFAULT);
  VAL("NCCL_WIN_COLL_SYMMETRIC", NCCL_WIN_COLL_SYMMETRIC);
  VAL("NCCL_WIN_STRICT_ORDERING", NCCL_WIN_STRICT_ORDERING);
  VAL("NCCL_WIN_REQUIRED_ALIGNMENT", NCCL_WIN_REQUIRED_ALIGNMENT);
  VAL("NCCL_CTA_POLICY_DEFAULT", NCCL_CTA_POLICY_DEFAULT);
  VAL("NCCL_CTA_POLICY_EFFICIENCY", NCCL_CTA_POLICY_EFFICIENCY);
  VAL("NCCL_CTA_POLICY_ZERO", NCCL_CTA_POLICY_ZERO);
  VAL("NCCL_SHRINK_DEFAULT", NCCL_SHRINK_DEFAULT);
  VAL("NCCL_SHRINK_ABORT", NCCL_SHRINK_ABORT);
  VAL("NCCL_REVOKE_DEFAULT", NCCL_REVOKE_DEFAULT);
  VAL("NCCL_SUSPEND_MEM", NCCL_SUSPEND_MEM);
  return 0;
}
