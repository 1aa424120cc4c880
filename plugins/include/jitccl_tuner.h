/* NCCL's tuner plugin interface (versions 2 to 6), declared from its documented layout:
 * binary compatible with NCCL's ncclTuner_v2_t .. ncclTuner_v6_t, so a plugin built on
 * this header loads in NCCL as in jitccl. */

#ifndef JITCCL_TUNER_H
#define JITCCL_TUNER_H

#include <stddef.h>
#include <stdint.h>

/* ncclResult_t (an int-sized enum): the values a tuner returns. */
typedef enum {
  JT_SUCCESS = 0,
  JT_SYSTEM_ERROR = 2,
  JT_INTERNAL_ERROR = 3,
  JT_INVALID_ARGUMENT = 4,
} jt_result_t;

/* ncclFunc_t: the collectives a tuner is asked about. */
typedef enum {
  JT_BROADCAST = 0,
  JT_REDUCE = 1,
  JT_ALL_GATHER = 2,
  JT_REDUCE_SCATTER = 3,
  JT_ALL_REDUCE = 4,
} jt_func_t;

/* Indices of the cost table: algorithms, then protocols. */
enum { JT_TREE, JT_RING, JT_COLLNET_DIRECT, JT_COLLNET_CHAIN, JT_NVLS, JT_NVLS_TREE, JT_PAT, JT_NUM_ALGOS };
enum { JT_LL, JT_LL128, JT_SIMPLE, JT_NUM_PROTOS };
/* A cost-table entry that cannot run. */
#define JT_UNAVAILABLE (-1.0f)

/* ncclDebugLogger_t and the levels and subsystem a tuner logs with. */
typedef void (*jt_logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
enum { JT_LOG_WARN = 2, JT_LOG_INFO = 3, JT_LOG_TRACE = 5 };
#define JT_SUBSYS_TUNING 0x40UL

/* ncclNvlDomainInfo_v5_t (v6 the same). */
typedef struct {
  int domains;
  int min_ranks;
  int max_ranks;
} jt_nvl_domains_t;

/* ncclTunerConstants_v5_t (v6 the same): by algorithm and protocol; link kind (NVLink,
 * PCI, network); GPU generation (4) and node-count scale (1, 2, 4+). */
typedef struct {
  double base_latencies[JT_NUM_ALGOS][JT_NUM_PROTOS];
  double hw_latencies[3][JT_NUM_ALGOS][JT_NUM_PROTOS];
  double ll_max_bws[4][3];
  double per_ch_max_ring_ll128_bws[4][3];
  double per_ch_max_tree_ll128_bws[4][3];
  double per_ch_max_tree_bws[4][3];
  double per_ch_max_nvls_tree_bws[4][3];
} jt_constants_t;

/* The cost table arrives as float** but is a contiguous float[JT_NUM_ALGOS][JT_NUM_PROTOS]. */
typedef float jt_cost_row_t[JT_NUM_PROTOS];

typedef struct {
  const char* name;
  jt_result_t (*init)(size_t n_ranks, size_t n_nodes, jt_logger_t log, void** ctx);
  jt_result_t (*get_coll_info)(void* ctx, jt_func_t coll, size_t n_bytes, int collnet_support, int nvls_support,
                               int pipe_ops, int* algorithm, int* protocol, int* n_channels);
  jt_result_t (*destroy)(void* ctx);
} jt_tuner_v2_t;

typedef struct {
  const char* name;
  jt_result_t (*init)(size_t n_ranks, size_t n_nodes, jt_logger_t log, void** ctx);
  jt_result_t (*get_coll_info)(void* ctx, jt_func_t coll, size_t n_bytes, int pipe_ops, float** cost_table,
                               int n_algos, int n_protos, int* n_channels);
  jt_result_t (*destroy)(void* ctx);
} jt_tuner_v3_t;

typedef struct {
  const char* name;
  jt_result_t (*init)(size_t n_ranks, size_t n_nodes, jt_logger_t log, void** ctx);
  jt_result_t (*get_coll_info)(void* ctx, jt_func_t coll, size_t n_bytes, int pipe_ops, float** cost_table,
                               int n_algos, int n_protos, int reg_buff, int* n_channels);
  jt_result_t (*destroy)(void* ctx);
} jt_tuner_v4_t;

typedef struct {
  const char* name;
  jt_result_t (*init)(void** ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes, jt_logger_t log,
                      jt_nvl_domains_t* nvl, jt_constants_t* constants);
  jt_result_t (*get_coll_info)(void* ctx, jt_func_t coll, size_t n_bytes, int pipe_ops, float** cost_table,
                               int n_algos, int n_protos, int reg_buff, int* n_channels);
  jt_result_t (*finalize)(void* ctx);
} jt_tuner_v5_t;

typedef struct {
  const char* name;
  jt_result_t (*init)(void** ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes, jt_logger_t log,
                      jt_nvl_domains_t* nvl, jt_constants_t* constants);
  jt_result_t (*get_coll_info)(void* ctx, jt_func_t coll, size_t n_bytes, int pipe_ops, float** cost_table,
                               int n_algos, int n_protos, int reg_buff, int* n_channels);
  jt_result_t (*finalize)(void* ctx);
  /* Optional (NULL): the chunk size for the chosen algorithm, protocol and channels. */
  jt_result_t (*get_chunk_size)(void* ctx, jt_func_t coll, size_t n_bytes, int algorithm, int protocol,
                                int n_channels, size_t* chunk_size);
} jt_tuner_v6_t;

#endif
