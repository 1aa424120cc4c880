/*
 * jitccl's nccl.h: NCCL 2.30's C API, served by jitccl (host target without a
 * GPU, CUDA with one).
 *
 * Source compatible with the public nccl.h of NCCL 2.30.7: the same names,
 * enum values, struct layouts and function signatures, so a program written
 * for NCCL builds against this header unchanged and runs on jitccl's
 * libnccl.so.2. Every API function also has a twin whose name is prefixed
 * with "p", with the same signature (the profiling entry point, as in NCCL).
 *
 * CUDA is optional. When <cuda_runtime.h> can be found it is included (as
 * NCCL does); otherwise, or when JITCCL_NO_CUDA_HEADERS is defined, only the
 * opaque stream handle type is declared here, which is all this API needs.
 */
#ifndef NCCL_H_
#define NCCL_H_

/* Lets a program tell this header from NVIDIA's. */
#define JITCCL_NCCL_H 1

/* ---- CUDA, when it is there ------------------------------------------- */
#if !defined(JITCCL_NO_CUDA_HEADERS)
#  if defined(__has_include)
#    if __has_include(<cuda_runtime.h>)
#      define JITCCL_NCCL_H_HAVE_CUDA 1
#    endif
#  endif
#endif

#if defined(JITCCL_NCCL_H_HAVE_CUDA)
#  include <cuda_runtime.h>
#  if __has_include(<cuda_fp16.h>)
#    include <cuda_fp16.h>
#  endif
#  if defined(CUDART_VERSION) && CUDART_VERSION >= 11000 && __has_include(<cuda_bf16.h>)
#    include <cuda_bf16.h>
#  endif
#  if defined(__cplusplus) && defined(CUDART_VERSION) && CUDART_VERSION >= 11080 && \
      __has_include(<cuda_fp8.h>)
#    include <cuda_fp8.h>
#  endif
#elif !defined(__DRIVER_TYPES_H__) && !defined(JITCCL_CUDA_STREAM_T_DECLARED)
/* The same type CUDA's driver_types.h declares, so a pointer taken from
 * either header is interchangeable. (A C99 program that includes
 * <cuda_runtime.h> after this header should not define
 * JITCCL_NO_CUDA_HEADERS; C11 and C++ accept the repeated typedef.) */
#  define JITCCL_CUDA_STREAM_T_DECLARED 1
typedef struct CUstream_st* cudaStream_t;
#endif

#include <stddef.h>
#include <stdint.h>
#include <limits.h>

/* ---- Version ------------------------------------------------------------ */
#define NCCL_MAJOR 2
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 23007
/* Versions up to 2.8 used X*1000+Y*100+Z; from 2.9 on, X*10000+Y*100+Z.
 * (The same expression as NCCL's, so every argument maps identically.) */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles and ids ---------------------------------------------------- */
/* A communicator: one rank's membership in a group of ranks. */
typedef struct ncclComm* ncclComm_t;
/* A registered memory window (ncclCommWindowRegister). */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* 128 opaque bytes that rank 0 creates and every rank passes to init; jitccl
 * keeps its bootstrap rendezvous address in it. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* ---- Results ------------------------------------------------------------ */
typedef enum {
  ncclSuccess            = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError        = 2,
  ncclInternalError      = 3,
  ncclInvalidArgument    = 4,
  ncclInvalidUsage       = 5,
  ncclRemoteError        = 6,
  ncclInProgress         = 7, /* nonblocking communicator: not finished yet */
  ncclTimeout            = 8,
  ncclNumResults         = 9
} ncclResult_t;

/* ---- Constants ---------------------------------------------------------- */
/* "Not set by the caller" markers for ncclConfig_t fields. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
/* "Not set" marker for float outputs (ncclSimInfo_t.estimatedTime). */
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommSplit color for a rank that joins no new communicator. */
#define NCCL_SPLIT_NOCOLOR -1

/* Stamp in ncclConfig_t.magic; a config without it is rejected. */
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister winFlags. */
#define NCCL_WIN_DEFAULT          0x00
#define NCCL_WIN_COLL_SYMMETRIC   0x01
#define NCCL_WIN_STRICT_ORDERING  0x02
/* Required alignment (bytes) of a symmetric window's buffer. */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT    0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO       0x02

/* ncclCommShrink shrinkFlags: DEFAULT expects the parent idle; ABORT first
 * stops the parent's pending operations. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT   0x01

/* ncclCommRevoke revokeFlags (only 0 is valid). */
#define NCCL_REVOKE_DEFAULT 0x00

/* ncclCommSuspend flags: release the memory that can be reallocated. */
#define NCCL_SUSPEND_MEM 0x01

/* ---- Communicator configuration ---------------------------------------- */
/* Always start from NCCL_CONFIG_INITIALIZER, then set the fields you want.
 * jitccl reads `size` and `version` first, so configs built against older
 * NCCL headers (fewer fields) are accepted, and fields left UNDEF get the
 * defaults. Field order and types are NCCL 2.30.7's (96 bytes on LP64). */
typedef struct ncclConfig_v23000 {
  size_t size;               /* sizeof(ncclConfig_t) of the caller's header */
  unsigned int magic;        /* NCCL_API_MAGIC */
  unsigned int version;      /* NCCL_VERSION_CODE of the caller's header */
  int blocking;              /* 0: calls may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;             /* NCCL_CTA_POLICY_* */
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;
  int numRmaCtx;
  int maxP2pPeers;
  int graphStreamOrdering;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {                                        \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE,             \
    NCCL_CONFIG_UNDEF_INT, /* blocking */                                \
    NCCL_CONFIG_UNDEF_INT, /* cgaClusterSize */                          \
    NCCL_CONFIG_UNDEF_INT, /* minCTAs */                                 \
    NCCL_CONFIG_UNDEF_INT, /* maxCTAs */                                 \
    NCCL_CONFIG_UNDEF_PTR, /* netName */                                 \
    NCCL_CONFIG_UNDEF_INT, /* splitShare */                              \
    NCCL_CONFIG_UNDEF_INT, /* trafficClass */                            \
    NCCL_CONFIG_UNDEF_PTR, /* commName */                                \
    NCCL_CONFIG_UNDEF_INT, /* collnetEnable */                           \
    NCCL_CONFIG_UNDEF_INT, /* CTAPolicy */                               \
    NCCL_CONFIG_UNDEF_INT, /* shrinkShare */                             \
    NCCL_CONFIG_UNDEF_INT, /* nvlsCTAs */                                \
    NCCL_CONFIG_UNDEF_INT, /* nChannelsPerNetPeer */                     \
    NCCL_CONFIG_UNDEF_INT, /* nvlinkCentricSched */                      \
    NCCL_CONFIG_UNDEF_INT, /* graphUsageMode */                          \
    NCCL_CONFIG_UNDEF_INT, /* numRmaCtx */                               \
    NCCL_CONFIG_UNDEF_INT, /* maxP2pPeers */                             \
    NCCL_CONFIG_UNDEF_INT  /* graphStreamOrdering */                     \
  }

/* ---- Group simulation result ------------------------------------------- */
/* Filled by ncclGroupSimulateEnd: jitccl's cost-model estimate of the group. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;        /* JITCCL_SIM_INFO_MAGIC */
  unsigned int version;
  float estimatedTime;       /* microseconds; NCCL_UNDEF_FLOAT until filled */
} ncclSimInfo_t;

/* The magic NCCL_SIM_INFO_INITIALIZER stamps (NCCL has no name for it). */
#define JITCCL_SIM_INFO_MAGIC 0x74685283

#define NCCL_SIM_INFO_INITIALIZER {                                      \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT \
  }

/* ---- Reduction ops, data types ----------------------------------------- */
/* Helper enum whose only use is sizing ncclMaxRedOp below. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;

typedef enum {
  ncclSum    = 0,
  ncclProd   = 1,
  ncclMax    = 2,
  ncclMin    = 3,
  ncclAvg    = 4,
  /* Count of built-in ops; ops made by ncclRedOpCreate* are >= this. */
  ncclNumOps = 5,
  /* Largest value an op may take without growing the enum past int. */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8       = 0,  ncclChar   = 0,
  ncclUint8      = 1,
  ncclInt32      = 2,  ncclInt    = 2,
  ncclUint32     = 3,
  ncclInt64      = 4,
  ncclUint64     = 5,
  ncclFloat16    = 6,  ncclHalf   = 6,
  ncclFloat32    = 7,  ncclFloat  = 7,
  ncclFloat64    = 8,  ncclDouble = 8,
  ncclBfloat16   = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes   = 12
} ncclDataType_t;

/* Where ncclRedOpCreatePreMulSum's scalar lives. */
typedef enum {
  ncclScalarDevice        = 0, /* device memory, read when the op runs */
  ncclScalarHostImmediate = 1  /* host memory, read before create returns */
} ncclScalarResidence_t;

/* ncclCommMemStats selectors. */
typedef enum {
  ncclStatGpuMemSuspend   = 0, /* bytes that suspend can release */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist   = 2, /* bytes that stay allocated */
  ncclStatGpuMemTotal     = 3  /* all bytes the communicator holds */
} ncclCommMemStat_t;

/* ncclWaitSignal: wait for opCnt signals from peer on (sigIdx, ctx). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

/* Opaque handle to one runtime parameter (ncclParamBind). */
typedef struct ncclParamHandle* ncclParamHandle_t;

/* ======================================================================== */
/* Functions. All return ncclResult_t unless written otherwise.             */
/* ======================================================================== */

/* Library: version and unique ids. ncclGetVersion reports the
 * NCCL_VERSION_CODE of the API jitccl implements (23007). ncclGetUniqueId
 * makes a fresh id on the calling rank, to be handed to every rank. */
ncclResult_t  ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);
ncclResult_t  ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* Memory: buffers suited to jitccl's transports, on the current device
 * (host memory on the host target). The size may be rounded up. */
ncclResult_t  ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t  ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

/* Communicator creation. Every rank of the new communicator calls once with
 * the same id(s); InitAll makes all ranks in this process at once;
 * InitRankScalable spreads the bootstrap over nId ids. */
ncclResult_t  ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t  ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);
ncclResult_t  ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t  ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);

/* Communicator teardown and fault handling. Finalize flushes pending work
 * (a nonblocking communicator then reports ncclInProgress through
 * ncclCommGetAsyncError until it is quiet), Destroy frees, Abort stops and
 * frees; Revoke stops in-flight work and leaves the communicator fit only
 * for Destroy/Split/Shrink. */
ncclResult_t  ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t  ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t  ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
ncclResult_t  ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* Derived communicators. Split groups ranks by color and orders them by key
 * (config NULL: inherit the parent's); Shrink drops the listed ranks (only
 * survivors call); Grow adds ranks using an id from ncclCommGetUniqueId. */
ncclResult_t  ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config);
ncclResult_t  ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t  ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t  ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                           ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                           ncclComm_t* newcomm, ncclConfig_t* config);

/* Errors and queries. The strings belong to the library; ncclGetLastError
 * accepts a NULL comm (last error of the calling thread). */
const char*  ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);
const char*  ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);
ncclResult_t  ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t  ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t  ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t  ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/* Deprecated: re-read the logging environment. As in NCCL, the prototype is
 * visible only when NCCL_OS_LINUX is defined; otherwise the call compiles to
 * nothing. The library still exports both symbols. */
#if defined(NCCL_OS_LINUX)
#  if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("ncclResetDebugInit is deprecated and will be removed")))
#  endif
void  ncclResetDebugInit(void);
#  if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("pncclResetDebugInit is deprecated and will be removed")))
#  endif
void pncclResetDebugInit(void);
#else
#  define ncclResetDebugInit()
#  define pncclResetDebugInit()
#endif

/* Suspend/resume: release and later restore the memory a communicator can
 * rebuild; ncclCommMemStats reports it (ncclCommMemStat_t). */
ncclResult_t  ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t  ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);
ncclResult_t  ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);

/* Buffer registration. Register/Deregister let the library prepare a
 * buffer for zero-copy use; window registration is collective (every rank
 * calls) and makes the targets of the one-sided operations below. */
ncclResult_t  ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t  ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t  ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags);
ncclResult_t  ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t  ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);

/* Custom reduction: sum of the inputs, each first multiplied by *scalar.
 * The op is valid only with this comm and datatype, until destroyed. */
ncclResult_t  ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t  ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* Collectives. Each rank calls with matching arguments; the call enqueues
 * the operation on `stream` and returns (completion is observed through the
 * stream). jitccl compiles the kernel for (collective, algorithm, protocol,
 * type, op) the first time it is needed. In place when sendbuff == recvbuff
 * (AllGather/ReduceScatter/Gather/Scatter: at the rank's own block). */
ncclResult_t  ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
/* Old in-place form of ncclBroadcast. */
ncclResult_t  ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t  ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t  ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
/* recvcount elements per rank; sendbuff holds nranks * recvcount. */
ncclResult_t  ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
/* sendcount elements per rank; recvbuff holds nranks * sendcount. */
ncclResult_t  ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* count elements to and from every rank (block j of sendbuff goes to rank j). */
ncclResult_t  ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* count elements from every rank into block i of root's recvbuff. */
ncclResult_t  ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);
/* Block i of root's sendbuff (count elements) to rank i. */
ncclResult_t  ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);

/* Point to point. A send must meet a recv of the same count and type on the
 * peer; put several in one group to let them progress together. */
ncclResult_t  ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t  ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* One-sided. PutSignal writes count elements into the peer's window at
 * peerWinOffset bytes, then raises signal sigIdx in context ctx on it;
 * Signal raises it alone; WaitSignal blocks the stream until every
 * descriptor's count of signals has arrived. flags must be 0. */
ncclResult_t  ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                            int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                            int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t  ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t  ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                             cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                             cudaStream_t stream);

/* Groups. Calls between Start and End are collected and launched together
 * at End (which, for nonblocking communicators, may return ncclInProgress).
 * SimulateEnd plans the group as End would, launches nothing, and reports
 * jitccl's estimated time. Groups nest; only the outermost End launches. */
ncclResult_t  ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t  ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
ncclResult_t  ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

/* Runtime parameters (the NCCL_* / JITCCL_* settings jitccl reads). Bind a
 * key to a handle, then read it typed (I/U = signed/unsigned, 8..64 bits),
 * as a string (valid until this thread's next GetStr), or as raw bytes.
 * The key-based calls return strings owned by the library, valid until the
 * same thread's next call of that function. */
ncclResult_t  ncclParamBind(ncclParamHandle_t* out, const char* key);
ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key);
ncclResult_t  ncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t pncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t  ncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t pncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t  ncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t pncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t  ncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t  ncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t pncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t  ncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t pncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t  ncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t pncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t  ncclParamGetU64(ncclParamHandle_t h, uint64_t* out);
ncclResult_t pncclParamGetU64(ncclParamHandle_t h, uint64_t* out);
ncclResult_t  ncclParamGetStr(ncclParamHandle_t h, const char** out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out);
ncclResult_t  ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t  ncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t  ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen);
/* Logs every parameter with its current value. */
void  ncclParamDumpAll(void);
void pncclParamDumpAll(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
