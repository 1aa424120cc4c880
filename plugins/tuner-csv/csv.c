/* A tuner plugin that applies a CSV of overrides, in the format of NCCL's example tuner:
 *
 *   collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff[,chunkBytes]]]
 *
 * read from the file NCCL_TUNER_CONFIG_FILE names (else ./nccl_tuner.conf, if present).
 * -1 is "any" (nNodes, nRanks, numPipeOps, regBuff) or "leave it" (channels, chunkBytes);
 * bounds are inclusive; '#' starts a comment line. For a call, the first matching row whose
 * entry is available gets cost 0 (the cheapest) and its channels; v6 also gets its chunk
 * size. chunkBytes is jitccl's column (NCCL's example reads ten fields).
 *
 * Exports ncclTunerPlugin_v6 down to _v2; built with -DJT_V2_ONLY, only _v2 (which names
 * its algorithm and protocol instead of editing the cost table). */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jitccl_tuner.h"

#define PLUGIN_NAME "csv"
#define MAX_FIELDS 11

typedef struct {
  int coll;
  size_t min_bytes, max_bytes;
  int algorithm, protocol;
  long channels, nodes, ranks, pipe_ops, reg_buff, chunk;
  int line;
} row_t;

typedef struct {
  row_t* rows;
  int nrows;
  size_t nranks, nnodes;
  jt_logger_t log;
} ctx_t;

#define LOG(c, level, ...) \
  do { \
    if ((c)->log) (c)->log(level, JT_SUBSYS_TUNING, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

static const char* const COLLS[] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
static const char* const ALGOS[] = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
static const char* const PROTOS[] = {"ll", "ll128", "simple"};

/* The index of `s` in `names`, ignoring case and '_' (so all_reduce is allreduce, and
 * collnetdirect collnet_direct); -1 if absent. */
static int lookup(const char* s, const char* const* names, int n) {
  for (int i = 0; i < n; i++) {
    const char *a = s, *b = names[i];
    for (;;) {
      while (*a == '_') a++;
      while (*b == '_') b++;
      if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) break;
      if (!*a) return i;
      a++, b++;
    }
  }
  return -1;
}

static char* trim(char* s) {
  while (isspace((unsigned char)*s)) s++;
  char* e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

/* A whole number (or -1 where `minus_one` allows it). */
static int number(const char* s, int minus_one, long long* out) {
  if (minus_one && strcmp(s, "-1") == 0) {
    *out = -1;
    return 1;
  }
  if (!*s || !isdigit((unsigned char)*s)) return 0;
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > (unsigned long long)LLONG_MAX) return 0;
  *out = (long long)v;
  return 1;
}

static int refuse(const char** why, const char* reason) {
  *why = reason;
  return 0;
}

/* Parses one line into `r`; 0 with `why` (and `what`: the field) set if malformed. */
static int parse_row(char* line, row_t* r, const char** why, const char** what) {
  char* f[MAX_FIELDS + 1];
  int n = 0;
  for (char* save = NULL; n <= MAX_FIELDS; n++) {
    char* tok = strtok_r(n == 0 ? line : NULL, ",", &save);
    if (!tok) break;
    f[n] = trim(tok);
  }
  *what = "";
  if (n < 8 || n > MAX_FIELDS) return refuse(why, "expected 8 to 11 fields");
  long long v[MAX_FIELDS];
  *what = f[0];
  if ((r->coll = lookup(f[0], COLLS, 5)) < 0) return refuse(why, "unknown collective");
  *what = f[3];
  if ((r->algorithm = lookup(f[3], ALGOS, JT_NUM_ALGOS)) < 0) return refuse(why, "unknown algorithm");
  *what = f[4];
  if ((r->protocol = lookup(f[4], PROTOS, JT_NUM_PROTOS)) < 0) return refuse(why, "unknown protocol");
  for (int i = 1; i < n; i++) {
    if (i == 3 || i == 4) continue;
    *what = f[i];
    if (!number(f[i], i >= 5, &v[i])) return refuse(why, "not a number (or -1)");
  }
  for (int i = n; i < MAX_FIELDS; i++) v[i] = -1;
  r->min_bytes = (size_t)v[1];
  r->max_bytes = (size_t)v[2];
  *what = f[2];
  if (r->min_bytes > r->max_bytes) return refuse(why, "max_bytes is below min_bytes");
  r->channels = v[5], r->nodes = v[6], r->ranks = v[7], r->pipe_ops = v[8], r->reg_buff = v[9], r->chunk = v[10];
  *what = f[5];
  if (r->channels == 0) return refuse(why, "0 channels");
  return 1;
}

/* Reads the rows of `path`; a file that is named but cannot be read, or a malformed line,
 * is an error (logged). */
static jt_result_t load(ctx_t* c, const char* path, int named) {
  FILE* fp = fopen(path, "r");
  if (!fp) {
    if (!named) {
      LOG(c, JT_LOG_INFO, "TUNER/csv: no %s: no overrides", path);
      return JT_SUCCESS;
    }
    LOG(c, JT_LOG_WARN, "TUNER/csv: cannot read %s: %s", path, strerror(errno));
    return JT_SYSTEM_ERROR;
  }
  char buf[1024];
  int lineno = 0;
  jt_result_t ret = JT_SUCCESS;
  while (fgets(buf, sizeof buf, fp)) {
    lineno++;
    char* line = trim(buf);
    if (!*line || *line == '#') continue;
    row_t r;
    const char *why, *what;
    if (!parse_row(line, &r, &why, &what)) {
      LOG(c, JT_LOG_WARN, "TUNER/csv: %s:%d: %s ('%s')", path, lineno, why, what);
      ret = JT_INVALID_ARGUMENT;
      break;
    }
    r.line = lineno;
    row_t* grown = realloc(c->rows, (size_t)(c->nrows + 1) * sizeof *grown);
    if (!grown) {
      ret = JT_SYSTEM_ERROR;
      break;
    }
    c->rows = grown;
    c->rows[c->nrows++] = r;
  }
  fclose(fp);
  if (ret == JT_SUCCESS) LOG(c, JT_LOG_INFO, "TUNER/csv: %d row(s) from %s", c->nrows, path);
  return ret;
}

static jt_result_t start(size_t nranks, size_t nnodes, jt_logger_t log, void** out) {
  ctx_t* c = calloc(1, sizeof *c);
  if (!c) return JT_SYSTEM_ERROR;
  c->nranks = nranks, c->nnodes = nnodes, c->log = log;
  const char* path = getenv("NCCL_TUNER_CONFIG_FILE");
  jt_result_t ret = load(c, path ? path : "nccl_tuner.conf", path != NULL);
  if (ret != JT_SUCCESS) {
    free(c->rows);
    free(c);
    return ret;
  }
  LOG(c, JT_LOG_INFO, "TUNER/csv: started for %zu rank(s) on %zu node(s)", nranks, nnodes);
  *out = c;
  return JT_SUCCESS;
}

static jt_result_t stop(void* ctx) {
  ctx_t* c = ctx;
  if (c) free(c->rows);
  free(c);
  return JT_SUCCESS;
}

static int matches(const ctx_t* c, const row_t* r, int coll, size_t n_bytes, int pipe_ops, int reg_buff) {
  return r->coll == coll && n_bytes >= r->min_bytes && n_bytes <= r->max_bytes &&
         (r->nodes == -1 || (size_t)r->nodes == c->nnodes) && (r->ranks == -1 || (size_t)r->ranks == c->nranks) &&
         (r->pipe_ops == -1 || r->pipe_ops == pipe_ops) && (r->reg_buff == -1 || r->reg_buff == reg_buff);
}

static void set_channels(const row_t* r, int* n_channels) {
  if (r->channels > 0) *n_channels = (int)r->channels;
}

/* v2: the first matching row, named (the caller knows what it can run). */
static jt_result_t coll_info_v2(void* ctx, jt_func_t coll, size_t n_bytes, int collnet_support, int nvls_support,
                                int pipe_ops, int* algorithm, int* protocol, int* n_channels) {
  ctx_t* c = ctx;
  if (!c) return JT_INTERNAL_ERROR;
  if ((unsigned)coll > JT_ALL_REDUCE) return JT_SUCCESS;
  (void)collnet_support, (void)nvls_support;
  for (int i = 0; i < c->nrows; i++) {
    const row_t* r = &c->rows[i];
    if (!matches(c, r, (int)coll, n_bytes, pipe_ops, 0)) continue;
    *algorithm = r->algorithm;
    *protocol = r->protocol;
    set_channels(r, n_channels);
    LOG(c, JT_LOG_INFO, "TUNER/csv: %s %zu B: line %d: %s/%s, channels %ld", COLLS[coll], n_bytes, r->line,
        ALGOS[r->algorithm], PROTOS[r->protocol], r->channels);
    return JT_SUCCESS;
  }
  return JT_SUCCESS;
}

#ifndef JT_V2_ONLY
/* v3 and later: the first matching row whose entry is available gets cost 0. */
static jt_result_t coll_info(void* ctx, jt_func_t coll, size_t n_bytes, int pipe_ops, float** cost_table,
                             int n_algos, int n_protos, int reg_buff, int* n_channels) {
  ctx_t* c = ctx;
  if (!c || !cost_table || n_algos < JT_NUM_ALGOS || n_protos < JT_NUM_PROTOS) return JT_INTERNAL_ERROR;
  if ((unsigned)coll > JT_ALL_REDUCE) return JT_SUCCESS;
  jt_cost_row_t* table = (jt_cost_row_t*)cost_table;
  for (int i = 0; i < c->nrows; i++) {
    const row_t* r = &c->rows[i];
    if (!matches(c, r, (int)coll, n_bytes, pipe_ops, reg_buff)) continue;
    float* cost = &table[r->algorithm][r->protocol];
    if (*cost < 0) {
      LOG(c, JT_LOG_INFO, "TUNER/csv: %s %zu B: line %d asks for %s/%s, unavailable here: skipped", COLLS[coll],
          n_bytes, r->line, ALGOS[r->algorithm], PROTOS[r->protocol]);
      continue;
    }
    *cost = 0.0f;
    set_channels(r, n_channels);
    LOG(c, JT_LOG_INFO, "TUNER/csv: %s %zu B: line %d: %s/%s, channels %ld", COLLS[coll], n_bytes, r->line,
        ALGOS[r->algorithm], PROTOS[r->protocol], r->channels);
    return JT_SUCCESS;
  }
  return JT_SUCCESS;
}

/* v6: the chunk size of the first matching row for the chosen algorithm and protocol. */
static jt_result_t chunk_size(void* ctx, jt_func_t coll, size_t n_bytes, int algorithm, int protocol,
                              int n_channels, size_t* chunk) {
  ctx_t* c = ctx;
  if (!c || !chunk) return JT_INTERNAL_ERROR;
  (void)n_channels;
  for (int i = 0; i < c->nrows; i++) {
    const row_t* r = &c->rows[i];
    /* getChunkSize is not told the pipelined ops or registration: any row's values do. */
    if (!matches(c, r, (int)coll, n_bytes, (int)r->pipe_ops, (int)r->reg_buff)) continue;
    if (r->algorithm != algorithm || r->protocol != protocol) continue;
    if (r->chunk > 0) *chunk = (size_t)r->chunk;
    return JT_SUCCESS;
  }
  return JT_SUCCESS;
}

static jt_result_t start_v5(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes, jt_logger_t log,
                            jt_nvl_domains_t* nvl, jt_constants_t* constants) {
  (void)comm_id, (void)nvl, (void)constants;
  return start(nranks, nnodes, log, ctx);
}

static jt_result_t coll_info_v3(void* ctx, jt_func_t coll, size_t n_bytes, int pipe_ops, float** cost_table,
                                int n_algos, int n_protos, int* n_channels) {
  return coll_info(ctx, coll, n_bytes, pipe_ops, cost_table, n_algos, n_protos, 0, n_channels);
}

__attribute__((visibility("default"))) const jt_tuner_v6_t ncclTunerPlugin_v6 = {PLUGIN_NAME, start_v5, coll_info, stop, chunk_size};
__attribute__((visibility("default"))) const jt_tuner_v5_t ncclTunerPlugin_v5 = {PLUGIN_NAME, start_v5, coll_info, stop};
__attribute__((visibility("default"))) const jt_tuner_v4_t ncclTunerPlugin_v4 = {PLUGIN_NAME, start, coll_info, stop};
__attribute__((visibility("default"))) const jt_tuner_v3_t ncclTunerPlugin_v3 = {PLUGIN_NAME, start, coll_info_v3, stop};
#endif
__attribute__((visibility("default"))) const jt_tuner_v2_t ncclTunerPlugin_v2 = {PLUGIN_NAME, start, coll_info_v2, stop};
