/*
 * jitccl's extensions to NCCL's C API (nccl.h, which stays NCCL's), served by the same
 * libnccl.so.2. JITCCL_H_VERSION tells a program which extensions it may call.
 *
 * Wire formats: a collective may carry its elements between ranks in a narrower format
 * than its data type; every hop decodes, reduces in fp32 and encodes again, and every rank
 * ends with the same bits. The error bound of each format is in docs/guide.md, "Wire
 * formats". Nothing is compressed unless asked: per call with the jitcclWiredX variants
 * below, or for every call where it fits with JITCCL_WIRE=<name> (programs that cannot
 * change).
 */
#ifndef JITCCL_H_
#define JITCCL_H_

#include "nccl.h"

#define JITCCL_H_VERSION 4 /* 1: wire formats; 2: the settings (jitcclSettingsJson, jitcclCacheDir); 3: jitcclAgree;
                              4: the process group (jitcclProcessGroupX, jitcclWorkX) */

#ifdef __cplusplus
extern "C" {
#endif

/* The formats. The scaled ones (fp8 and int8) carry one scale per `block` elements. */
typedef enum {
  jitcclWireExact = 0,   /* the elements as they are */
  jitcclWireBf16 = 1,    /* bfloat16 */
  jitcclWireFp16 = 2,    /* IEEE half */
  jitcclWireFp8E4M3 = 3, /* fp8 e4m3, a power-of-two scale per block */
  jitcclWireFp8E5M2 = 4, /* fp8 e5m2, a power-of-two scale per block */
  jitcclWireInt8 = 5     /* int8, an fp32 scale per block */
} jitcclWireFormat_t;

/* A wire: a format and, for the scaled formats, the elements per scale (32, 64, 128 or
 * 256; 0: 64). The unscaled formats take block 0. */
typedef struct {
  jitcclWireFormat_t format;
  int block;
} jitcclWire_t;

/* The wire of `name`, as JITCCL_WIRE takes it: "exact", "bf16", "fp16", "fp8e4m3",
 * "fp8e5m2", "int8", the scaled ones with their block as "int8b128" (without: 64). An
 * unknown name or block returns ncclInvalidArgument (ncclGetLastError(NULL) says why) and
 * leaves *wire as it was. */
ncclResult_t jitcclWireFromName(const char* name, jitcclWire_t* wire);

/* The collectives with their elements carried in `wire`: the arguments, semantics, groups,
 * streams and errors of ncclX otherwise. They take f32, f16 or bf16 elements wider than
 * the wire's codes, with ncclSum or ncclAvg; anything else (an integer type, another op, a
 * bad wire) fails with ncclInvalidArgument, ncclGetLastError says why, and nothing is
 * queued. jitcclWireExact sends the elements as they are, whatever JITCCL_WIRE says. */
ncclResult_t jitcclWiredAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, jitcclWire_t wire, ncclComm_t comm, cudaStream_t stream);
ncclResult_t jitcclWiredBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, jitcclWire_t wire, ncclComm_t comm, cudaStream_t stream);
ncclResult_t jitcclWiredReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, jitcclWire_t wire, ncclComm_t comm, cudaStream_t stream);
ncclResult_t jitcclWiredAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  jitcclWire_t wire, ncclComm_t comm, cudaStream_t stream);
ncclResult_t jitcclWiredReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, jitcclWire_t wire, ncclComm_t comm,
                                      cudaStream_t stream);

/* Settings as this library reads them (the table of docs/settings.md), for programs and
 * bindings that would otherwise read the variables themselves. Each copies its text and a
 * NUL into buf, which holds *len bytes, and sets *len to the bytes needed; with buf NULL or
 * too small it returns ncclInvalidArgument (and *len says how much to give). */
/* Every setting as JSON, as `jitccl env --all --json` prints it: an array of objects with
 * "name", "nccl", "field", "kind", "default", "ranks", "scope", "about", "source" (the
 * variable read, or "default"), "given", "value" and "problem" (why a value given is
 * refused, else null). */
ncclResult_t jitcclSettingsJson(char* buf, size_t* len);
/* The kernel cache's folder (JITCCL_CACHE_DIR, else the user's cache folder), "" if none. */
ncclResult_t jitcclCacheDir(char* buf, size_t* len);

/* The ranks' agreement on a call, for bindings whose users pass their own tensors: a
 * kernel fails a call whose ranks pass other counts, types or ops, but the rank that notices
 * names only its peer. Every rank describes its call; jitcclAgree all-gathers the
 * descriptions over comm (a blocking communicator, outside a group) and compares them.
 * Names are the caller's own vocabulary (PyTorch's: "allreduce", "float32",
 * "ReduceOp.SUM"), NUL-terminated, at most 31, 15 and 23 bytes. */
typedef struct {
  const char* operation;     /* the operation's name */
  const char* type;          /* the element type's name; NULL: none */
  const size_t* counts;      /* the element count of each tensor (ncounts of them) */
  size_t ncounts;            /* 0: no counts (a barrier, or counts checked otherwise) */
  int root;                  /* -1: none */
  const char* reduction;     /* the reduction's name; NULL: none */
  const jitcclWire_t* wire;  /* the wire format asked for; NULL: none */
} jitcclCall_t;

/* Every rank of comm calls it with its call. ncclSuccess with refusal "" when every rank
 * described the same call; ncclSuccess with refusal set, on every rank alike, to a text
 * naming each rank's call when they differ ("the ranks called it differently: rank 0:
 * allreduce of 100 float32 elements, ReduceOp.SUM; rank 1: ..."), cut to fit len bytes
 * with its NUL; an error code where the all-gather fails (a peer gone, the timeout) or an
 * argument is bad. */
ncclResult_t jitcclAgree(const jitcclCall_t* call, char* refusal, size_t len, ncclComm_t comm);

/* The process group, in the design of PyTorch's c10d ProcessGroupNCCL: operations queued in
 * order on the caller's thread, a work handle for each, and a watchdog that only watches:
 * once the oldest pending operation has run longer than the group's timeout, it fails that
 * operation and every one behind it (each work's error names the rank, the operation, its
 * number in the group and the peer waited for) and aborts the communicator, whose later
 * calls then fail at once.
 *
 * An operation is a job: a function of the caller's, run at once on the calling thread,
 * that makes NCCL calls (any, grouped or not, on the caller's own memory) on the group's
 * communicator. Its calls return once queued rather than when done; its work completes when
 * they have run. A job returns ncclSuccess, or the code of the call that failed: the work
 * then fails with that call's error and code, once the calls the job made before it have
 * run; one that failed the communicator, or an ncclRemoteError or ncclTimeout, fails every
 * pending work. Calls on other communicators inside a job complete as outside one. The
 * caller keeps the memory the calls use valid until the work has ended.
 *
 * Handles are checked: NULL, released or destroyed ones are refused with
 * ncclInvalidArgument, never read. Every failure's text is in ncclGetLastError(NULL). */
typedef struct jitcclProcessGroup* jitcclProcessGroup_t;
typedef struct jitcclWork* jitcclWork_t;
typedef ncclResult_t (*jitcclJob_t)(void* arg);

/* A group over comm, a blocking communicator on the host (a GPU's is refused with
 * ncclInvalidUsage), with a timeout in seconds (more than 0). Destroy the group before
 * the communicator. */
ncclResult_t jitcclProcessGroupCreate(ncclComm_t comm, double timeout, jitcclProcessGroup_t* group);
/* Runs job(arg) now as the group's next operation, named `operation` in errors (as
 * "allreduce"), with `peer` the rank it exchanges with (-1: none), and sets *work. The
 * work is made even when the job fails or the group has failed (then it has failed
 * already); outside a job and outside ncclGroupStart/End only. */
ncclResult_t jitcclProcessGroupSubmit(jitcclProcessGroup_t group, const char* operation, int peer, jitcclJob_t job,
                                      void* arg, jitcclWork_t* work);
/* Waits up to timeoutMs milliseconds (negative: until the work ends, which the watchdog
 * bounds): ncclSuccess once done, the work's error code if it failed (ncclTimeout past a
 * timeout), ncclInProgress if the time ran out first. */
ncclResult_t jitcclWorkWait(jitcclWork_t work, int64_t timeoutMs);
/* *completed = 1 once the work has ended, with success or not; never waits. */
ncclResult_t jitcclWorkIsCompleted(jitcclWork_t work, int* completed);
/* The work's error text ("" while pending or after a success), copied with its NUL into
 * buf (*len bytes; *len set to the bytes needed; too small: ncclInvalidArgument). A NULL
 * buf asks for the size: *len is set and ncclSuccess returned. */
ncclResult_t jitcclWorkError(jitcclWork_t work, char* buf, size_t* len);
/* Lets go of a work handle (the operation goes on if pending). Release every work. */
ncclResult_t jitcclWorkRelease(jitcclWork_t work);
/* Fails every pending work and aborts the group's communicator, from any thread. */
ncclResult_t jitcclProcessGroupAbort(jitcclProcessGroup_t group);
/* Ends the group once its pending work has ended (bounded by its timeout and watchdog). */
ncclResult_t jitcclProcessGroupDestroy(jitcclProcessGroup_t group);

#ifdef __cplusplus
}
#endif

#endif /* JITCCL_H_ */
