/*
 * The collective checks shared by collectives.c (ranks from `jitccl launch`,
 * the id from NCCL_COMM_ID) and collectives_mpi.c (ranks from mpirun, rank 0's
 * id passed with MPI_Bcast): every collective against a reference each rank
 * computes locally. Rank r's input element i is gen(r, i), a deterministic
 * function, so every rank knows every rank's input.
 *
 * Options (all optional):
 *   --types  int8,uint8,int32,uint32,int64,uint64,half,float,double,
 *            bfloat16,fp8e4m3,fp8e5m2          (default float)
 *   --ops    sum,prod,max,min,avg,premulsum    (default sum; premulsum runs
 *            the op made with host-immediate and with device residence)
 *   --colls  allreduce,reduce,reducescatter,broadcast,bcast,allgather,
 *            alltoall,gather,scatter,sendrecv  (default all)
 *   --counts 0,1,1023                          (default 0,1,1023)
 *   --big N --big-types float                  (count N, larger than a FIFO
 *            slot, for these types too; default none)
 *
 * Inputs are whole multiples of a per-type stride, small enough that sums and
 * products over 4 ranks are exact in every type: Sum, Prod, Max and Min are
 * compared exactly. Avg and PreMulSum of floating types are compared within
 * a tolerance of the type's precision; Avg of integers is jitccl's (and
 * NCCL's) rule: the sum in the type, divided by nranks with C's integer
 * division (truncating toward zero).
 */
#ifndef JITCCL_CAPI_TEST_COLL_CHECKS_H
#define JITCCL_CAPI_TEST_COLL_CHECKS_H

#include "common.h"

#define MAXR 64
#define MAXLIST 16

typedef enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMUL_HOST, OP_PREMUL_DEV } op_kind;
static const char* const OP_NAMES[] = {"sum", "prod", "max", "min", "avg", "premulsum(host)",
                                       "premulsum(device)"};

enum {
  C_ALLREDUCE = 1 << 0,
  C_REDUCE = 1 << 1,
  C_REDUCESCATTER = 1 << 2,
  C_BROADCAST = 1 << 3,
  C_BCAST = 1 << 4,
  C_ALLGATHER = 1 << 5,
  C_ALLTOALL = 1 << 6,
  C_GATHER = 1 << 7,
  C_SCATTER = 1 << 8,
  C_SENDRECV = 1 << 9,
};
static const char* const COLL_NAMES[] = {"allreduce", "reduce",  "reducescatter", "broadcast",
                                         "bcast",     "allgather", "alltoall",    "gather",
                                         "scatter",   "sendrecv"};

typedef struct {
  ncclComm_t comm;
  int rank, nranks;
  const type_info* types[MAXLIST];
  int ntypes;
  op_kind ops[MAXLIST];
  int nops;
  unsigned colls;
  size_t counts[MAXLIST];
  int ncounts;
  size_t big;
  const type_info* big_types[MAXLIST];
  int nbig;
  int roots[3];
  int nroots;
} plan_t;

/* ---- Options --------------------------------------------------------------- */

/* Calls f(item, ctx) for each comma-separated item of s. */
static inline void each_item(const char* s, void (*f)(const char*, void*), void* ctx) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", s);
  for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) f(tok, ctx);
}

static inline void add_type(const char* s, void* ctx) {
  plan_t* p = (plan_t*)ctx;
  if (p->ntypes == MAXLIST) die("too many types");
  p->types[p->ntypes++] = type_named(s);
}

static inline void add_big_type(const char* s, void* ctx) {
  plan_t* p = (plan_t*)ctx;
  if (p->nbig == MAXLIST) die("too many big types");
  p->big_types[p->nbig++] = type_named(s);
}

static inline void add_op(const char* s, void* ctx) {
  plan_t* p = (plan_t*)ctx;
  if (p->nops >= MAXLIST - 1) die("too many ops");
  if (!strcmp(s, "premulsum")) {
    p->ops[p->nops++] = OP_PREMUL_HOST;
    p->ops[p->nops++] = OP_PREMUL_DEV;
    return;
  }
  for (int k = OP_SUM; k <= OP_AVG; k++)
    if (!strcmp(s, OP_NAMES[k])) {
      p->ops[p->nops++] = (op_kind)k;
      return;
    }
  die("unknown op '%s' (sum, prod, max, min, avg, premulsum)", s);
}

static inline void add_coll(const char* s, void* ctx) {
  plan_t* p = (plan_t*)ctx;
  for (size_t k = 0; k < sizeof COLL_NAMES / sizeof COLL_NAMES[0]; k++)
    if (!strcmp(s, COLL_NAMES[k])) {
      p->colls |= 1u << k;
      return;
    }
  die("unknown collective '%s'", s);
}

static inline void add_count(const char* s, void* ctx) {
  plan_t* p = (plan_t*)ctx;
  if (p->ncounts == MAXLIST) die("too many counts");
  p->counts[p->ncounts++] = (size_t)strtoull(s, NULL, 10);
}

static inline void parse_plan(plan_t* p, ncclComm_t comm, int rank, int nranks, int argc,
                              char** argv) {
  memset(p, 0, sizeof *p);
  p->comm = comm;
  p->rank = rank;
  p->nranks = nranks;
  if (nranks > MAXR) die("at most %d ranks", MAXR);
  for (int a = 1; a < argc; a++) {
    const char* opt = argv[a];
    if (a + 1 >= argc) die("option %s needs a value", opt);
    const char* v = argv[++a];
    if (!strcmp(opt, "--types"))
      each_item(v, add_type, p);
    else if (!strcmp(opt, "--ops"))
      each_item(v, add_op, p);
    else if (!strcmp(opt, "--colls"))
      each_item(v, add_coll, p);
    else if (!strcmp(opt, "--counts"))
      each_item(v, add_count, p);
    else if (!strcmp(opt, "--big"))
      p->big = (size_t)strtoull(v, NULL, 10);
    else if (!strcmp(opt, "--big-types"))
      each_item(v, add_big_type, p);
    else
      die("unknown option %s", opt);
  }
  if (!p->ntypes) add_type("float", p);
  if (!p->nops) add_op("sum", p);
  if (!p->colls) p->colls = ~0u;
  if (!p->ncounts) {
    p->counts[0] = 0;
    p->counts[1] = 1;
    p->counts[2] = 1023;
    p->ncounts = 3;
  }
  int cand[3] = {0, nranks - 1, nranks / 2};
  for (int k = 0; k < 3; k++) {
    int dup = 0;
    for (int j = 0; j < p->nroots; j++) dup |= p->roots[j] == cand[k];
    if (!dup) p->roots[p->nroots++] = cand[k];
  }
}

/* ---- Inputs and references ---------------------------------------------------- */

static inline int is_premul(op_kind op) { return op == OP_PREMUL_HOST || op == OP_PREMUL_DEV; }

/* Rank r's input element i for a call of `op` (salt tells calls apart). */
static inline double gen(const type_info* t, op_kind op, int salt, int r, size_t i) {
  unsigned long long h = (unsigned long long)r * 131u + (unsigned long long)i * 17u +
                         (unsigned long long)salt * 7919u + (unsigned long long)(i / 7) * 3u;
  if (op == OP_PROD) {
    static const double f[4] = {1, 2, -1, -2};
    double v = f[h % 4];
    return t->is_signed ? v : fabs(v);
  }
  double vmax = t->vmax;
  /* PreMulSum multiplies by up to 4 (sum of |scalars| <= 10 over 4 ranks). */
  if (is_premul(op)) vmax = floor(vmax * 2 / 5) > 1 ? floor(vmax * 2 / 5) : 1;
  unsigned long long m = (unsigned long long)vmax;
  double k = t->is_signed ? (double)(h % (2 * m + 1)) - vmax : (double)(h % (m + 1));
  return k * t->stride;
}

/* Rank r's PreMulSum scalar: whole for integers (negative on odd signed ranks),
 * halves for floating types. */
static inline double scalar_of(const type_info* t, int r) {
  if (!t->is_int) return 0.5 * (r + 1);
  if (t->is_signed && r % 2) return -(double)(r + 1);
  return (double)(r + 1);
}

/* The reduction of v[0..n) (rank r's input v[r]) and its tolerance. */
static inline double reduce_ref(const type_info* t, op_kind op, const double* v, int n,
                                double* tol) {
  double acc = v[0], mag = 0;
  *tol = 0;
  switch (op) {
    case OP_SUM:
      for (int r = 1; r < n; r++) acc += v[r];
      return acc;
    case OP_PROD:
      for (int r = 1; r < n; r++) acc *= v[r];
      return acc;
    case OP_MAX:
      for (int r = 1; r < n; r++) acc = v[r] > acc ? v[r] : acc;
      return acc;
    case OP_MIN:
      for (int r = 1; r < n; r++) acc = v[r] < acc ? v[r] : acc;
      return acc;
    case OP_AVG:
      for (int r = 1; r < n; r++) acc += v[r];
      if (t->is_int) {
        if (t->is_signed) return (double)((long long)acc / (long long)n);
        return (double)((unsigned long long)acc / (unsigned long long)n);
      }
      for (int r = 0; r < n; r++) mag += fabs(v[r]);
      *tol = ldexp(mag, -t->mb) * (n + 2);
      return acc / n;
    case OP_PREMUL_HOST:
    case OP_PREMUL_DEV:
      acc = 0;
      for (int r = 0; r < n; r++) {
        acc += scalar_of(t, r) * v[r];
        mag += fabs(scalar_of(t, r) * v[r]);
      }
      if (!t->is_int) *tol = ldexp(mag, -t->mb) * (n + 2);
      return acc;
  }
  die("reduce_ref: op %d", (int)op);
}

/* Compares n elements of buf with want[] within tol[] (NULL: exact). */
static inline void compare(const char* what, const type_info* t, const void* buf,
                           const double* want, const double* tol, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double got = load(t, buf, i), d = fabs(got - want[i]);
    double allowed = tol ? tol[i] : 0;
    if (!(d <= allowed))
      die("%s: element %zu of %zu: expected %.17g, got %.17g (tolerance %g)", what, i, n, want[i],
          got, allowed);
  }
  pass();
}

/* A reduction op for `t` and `op`: built-in, or made by ncclRedOpCreatePreMulSum
 * (host residence: the scalar's memory is overwritten after create; device:
 * the memory is written with the true scalar only after create, so a result
 * is right only if it is read when the call runs). */
typedef struct {
  ncclRedOp_t op;
  void* scalar_mem;
  int made;
} op_handle;

static inline op_handle op_begin(const plan_t* p, const type_info* t, op_kind op) {
  op_handle h;
  memset(&h, 0, sizeof h);
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  if (!is_premul(op)) {
    h.op = builtin[op];
    return h;
  }
  double s = scalar_of(t, p->rank);
  h.scalar_mem = xalloc(t, 1);
  h.made = 1;
  if (op == OP_PREMUL_HOST) {
    store(t, h.scalar_mem, 0, s);
    NCCLCHECK(ncclRedOpCreatePreMulSum(&h.op, h.scalar_mem, t->dt, ncclScalarHostImmediate, p->comm));
    store(t, h.scalar_mem, 0, s + 1); /* read at create: this must not matter */
  } else {
    store(t, h.scalar_mem, 0, s + 1); /* not read at create: this must not matter */
    NCCLCHECK(ncclRedOpCreatePreMulSum(&h.op, h.scalar_mem, t->dt, ncclScalarDevice, p->comm));
    store(t, h.scalar_mem, 0, s);
  }
  if ((int)h.op < (int)ncclNumOps)
    die("ncclRedOpCreatePreMulSum gave op %d, expected >= ncclNumOps", (int)h.op);
  return h;
}

static inline void op_end(const plan_t* p, op_handle* h) {
  if (!h->made) return;
  NCCLCHECK(ncclRedOpDestroy(h->op, p->comm));
  free(h->scalar_mem);
}

/* ---- The checks ------------------------------------------------------------------ */

/* Fills n elements of buf with rank r's inputs from offset `first`. */
static inline void fill(const type_info* t, op_kind op, int salt, int r, void* buf, size_t first,
                        size_t n) {
  for (size_t i = 0; i < n; i++) store(t, buf, i, gen(t, op, salt, r, first + i));
}

/* Checks that n elements of buf still hold rank r's inputs from `first`. */
static inline void check_input(const char* what, const type_info* t, op_kind op, int salt, int r,
                               const void* buf, size_t first, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double want = gen(t, op, salt, r, first + i), got = load(t, buf, i);
    if (got != want)
      die("%s: the send buffer changed: element %zu: expected %.17g, got %.17g", what, i, want, got);
  }
  pass();
}

static inline double* dalloc(size_t n) {
  double* d = (double*)calloc(n ? n : 1, sizeof(double));
  if (!d) die("out of memory");
  return d;
}

/* want[i], tol[i] = the reduction over ranks of gen(r, first + i). */
static inline void reduce_all(const plan_t* p, const type_info* t, op_kind op, int salt,
                              size_t first, size_t n, double* want, double* tol) {
  double v[MAXR];
  for (size_t i = 0; i < n; i++) {
    for (int r = 0; r < p->nranks; r++) v[r] = gen(t, op, salt, r, first + i);
    want[i] = reduce_ref(t, op, v, p->nranks, &tol[i]);
  }
}

static inline void check_poisoned(const char* what, const type_info* t, const void* buf, size_t n) {
  if (!is_poisoned(t, buf, n)) die("%s: a buffer of a call with count %zu was written", what, n);
  pass();
}

static int g_salt = 0;

static inline void chk_allreduce(const plan_t* p, const type_info* t, op_kind op, size_t count,
                                 int inplace) {
  char what[256];
  snprintf(what, sizeof what, "ncclAllReduce %s %s count=%zu %s", t->name, OP_NAMES[op], count,
           inplace ? "in-place" : "out-of-place");
  int salt = ++g_salt;
  void* send = xalloc(t, count);
  void* recv = inplace ? send : xalloc(t, count);
  fill(t, op, salt, p->rank, send, 0, count);
  if (!inplace) poison(t, recv, count);
  double *want = dalloc(count), *tol = dalloc(count);
  reduce_all(p, t, op, salt, 0, count, want, tol);
  op_handle h = op_begin(p, t, op);
  NCCLCHECK(ncclAllReduce(send, recv, count, t->dt, h.op, p->comm, NULL));
  op_end(p, &h);
  if (count == 0 && !inplace) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, tol, count);
  if (!inplace) check_input(what, t, op, salt, p->rank, send, 0, count);
  free(want);
  free(tol);
  if (!inplace) free(recv);
  free(send);
}

static inline void chk_reduce(const plan_t* p, const type_info* t, op_kind op, size_t count,
                              int root, int inplace) {
  char what[256];
  snprintf(what, sizeof what, "ncclReduce %s %s count=%zu root=%d %s", t->name, OP_NAMES[op],
           count, root, inplace ? "in-place" : "out-of-place (non-roots: recvbuff NULL)");
  int salt = ++g_salt;
  void* send = xalloc(t, count);
  void* recv = inplace ? send : (p->rank == root ? xalloc(t, count) : NULL);
  fill(t, op, salt, p->rank, send, 0, count);
  if (recv && !inplace) poison(t, recv, count);
  op_handle h = op_begin(p, t, op);
  NCCLCHECK(ncclReduce(send, recv, count, t->dt, h.op, root, p->comm, NULL));
  op_end(p, &h);
  if (p->rank == root) {
    double *want = dalloc(count), *tol = dalloc(count);
    reduce_all(p, t, op, salt, 0, count, want, tol);
    if (count == 0 && !inplace) check_poisoned(what, t, recv, 0);
    compare(what, t, recv, want, tol, count);
    free(want);
    free(tol);
  }
  if (!inplace) check_input(what, t, op, salt, p->rank, send, 0, count);
  if (recv && !inplace) free(recv);
  free(send);
}

static inline void chk_reducescatter(const plan_t* p, const type_info* t, op_kind op, size_t count,
                                     int inplace) {
  char what[256];
  snprintf(what, sizeof what, "ncclReduceScatter %s %s recvcount=%zu %s", t->name, OP_NAMES[op],
           count, inplace ? "in-place (recvbuff = sendbuff + rank*recvcount)" : "out-of-place");
  int salt = ++g_salt;
  size_t total = count * (size_t)p->nranks;
  void* send = xalloc(t, total);
  fill(t, op, salt, p->rank, send, 0, total);
  void* recv = inplace ? (char*)send + (size_t)p->rank * count * t->size : xalloc(t, count);
  if (!inplace) poison(t, recv, count);
  double *want = dalloc(count), *tol = dalloc(count);
  reduce_all(p, t, op, salt, (size_t)p->rank * count, count, want, tol);
  op_handle h = op_begin(p, t, op);
  NCCLCHECK(ncclReduceScatter(send, recv, count, t->dt, h.op, p->comm, NULL));
  op_end(p, &h);
  if (count == 0 && !inplace) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, tol, count);
  if (!inplace) {
    check_input(what, t, op, salt, p->rank, send, 0, total);
    free(recv);
  }
  free(want);
  free(tol);
  free(send);
}

/* mode 0: ncclBroadcast out of place (non-roots pass sendbuff NULL);
 * 1: ncclBroadcast in place; 2: ncclBcast. */
static inline void chk_broadcast(const plan_t* p, const type_info* t, size_t count, int root,
                                 int mode) {
  static const char* const modes[] = {"ncclBroadcast out-of-place (non-roots: sendbuff NULL)",
                                      "ncclBroadcast in-place", "ncclBcast"};
  char what[256];
  snprintf(what, sizeof what, "%s %s count=%zu root=%d", modes[mode], t->name, count, root);
  int salt = ++g_salt;
  void* send = p->rank == root || mode ? xalloc(t, count) : NULL;
  void* recv = mode ? send : xalloc(t, count);
  if (p->rank == root)
    fill(t, OP_SUM, salt, root, send, 0, count);
  else if (mode)
    poison(t, recv, count);
  if (!mode) poison(t, recv, count);
  double* want = dalloc(count);
  for (size_t i = 0; i < count; i++) want[i] = gen(t, OP_SUM, salt, root, i);
  if (mode == 2)
    NCCLCHECK(ncclBcast(recv, count, t->dt, root, p->comm, NULL));
  else
    NCCLCHECK(ncclBroadcast(send, recv, count, t->dt, root, p->comm, NULL));
  if (count == 0 && !mode) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, NULL, count);
  if (!mode && p->rank == root) check_input(what, t, OP_SUM, salt, root, send, 0, count);
  free(want);
  if (!mode) free(recv);
  free(send);
}

static inline void chk_allgather(const plan_t* p, const type_info* t, size_t count, int inplace) {
  char what[256];
  snprintf(what, sizeof what, "ncclAllGather %s sendcount=%zu %s", t->name, count,
           inplace ? "in-place (sendbuff = recvbuff + rank*sendcount)" : "out-of-place");
  int salt = ++g_salt;
  size_t total = count * (size_t)p->nranks;
  void* recv = xalloc(t, total);
  poison(t, recv, total);
  void* send = inplace ? (char*)recv + (size_t)p->rank * count * t->size : xalloc(t, count);
  fill(t, OP_SUM, salt, p->rank, send, 0, count);
  double* want = dalloc(total);
  for (int r = 0; r < p->nranks; r++)
    for (size_t i = 0; i < count; i++) want[(size_t)r * count + i] = gen(t, OP_SUM, salt, r, i);
  NCCLCHECK(ncclAllGather(send, recv, count, t->dt, p->comm, NULL));
  if (count == 0) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, NULL, total);
  if (!inplace) {
    check_input(what, t, OP_SUM, salt, p->rank, send, 0, count);
    free(send);
  }
  free(want);
  free(recv);
}

static inline void chk_alltoall(const plan_t* p, const type_info* t, size_t count) {
  char what[256];
  snprintf(what, sizeof what, "ncclAlltoAll %s count=%zu", t->name, count);
  int salt = ++g_salt;
  size_t total = count * (size_t)p->nranks;
  void *send = xalloc(t, total), *recv = xalloc(t, total);
  fill(t, OP_SUM, salt, p->rank, send, 0, total);
  poison(t, recv, total);
  double* want = dalloc(total);
  for (int r = 0; r < p->nranks; r++)
    for (size_t i = 0; i < count; i++)
      want[(size_t)r * count + i] = gen(t, OP_SUM, salt, r, (size_t)p->rank * count + i);
  NCCLCHECK(ncclAlltoAll(send, recv, count, t->dt, p->comm, NULL));
  if (count == 0) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, NULL, total);
  check_input(what, t, OP_SUM, salt, p->rank, send, 0, total);
  free(want);
  free(recv);
  free(send);
}

static inline void chk_gather(const plan_t* p, const type_info* t, size_t count, int root,
                              int inplace) {
  char what[256];
  snprintf(what, sizeof what, "ncclGather %s count=%zu root=%d %s", t->name, count, root,
           inplace ? "in-place at the root (sendbuff = recvbuff + root*count)"
                   : "out-of-place (non-roots: recvbuff NULL)");
  int salt = ++g_salt;
  size_t total = count * (size_t)p->nranks;
  void* recv = p->rank == root ? xalloc(t, total) : NULL;
  if (recv) poison(t, recv, total);
  int own = inplace && p->rank == root;
  void* send = own ? (char*)recv + (size_t)root * count * t->size : xalloc(t, count);
  fill(t, OP_SUM, salt, p->rank, send, 0, count);
  NCCLCHECK(ncclGather(send, recv, count, t->dt, root, p->comm, NULL));
  if (p->rank == root) {
    double* want = dalloc(total);
    for (int r = 0; r < p->nranks; r++)
      for (size_t i = 0; i < count; i++) want[(size_t)r * count + i] = gen(t, OP_SUM, salt, r, i);
    if (count == 0) check_poisoned(what, t, recv, 0);
    compare(what, t, recv, want, NULL, total);
    free(want);
  }
  if (!own) {
    check_input(what, t, OP_SUM, salt, p->rank, send, 0, count);
    free(send);
  }
  free(recv);
}

static inline void chk_scatter(const plan_t* p, const type_info* t, size_t count, int root,
                               int inplace) {
  char what[256];
  snprintf(what, sizeof what, "ncclScatter %s count=%zu root=%d %s", t->name, count, root,
           inplace ? "in-place at the root (recvbuff = sendbuff + root*count)"
                   : "out-of-place (non-roots: sendbuff NULL)");
  int salt = ++g_salt;
  size_t total = count * (size_t)p->nranks;
  void* send = p->rank == root ? xalloc(t, total) : NULL;
  if (send) fill(t, OP_SUM, salt, root, send, 0, total);
  int own = inplace && p->rank == root;
  void* recv = own ? (char*)send + (size_t)root * count * t->size : xalloc(t, count);
  if (!own) poison(t, recv, count);
  double* want = dalloc(count);
  for (size_t i = 0; i < count; i++) want[i] = gen(t, OP_SUM, salt, root, (size_t)p->rank * count + i);
  NCCLCHECK(ncclScatter(send, recv, count, t->dt, root, p->comm, NULL));
  if (count == 0 && !own) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, NULL, count);
  if (p->rank == root) check_input(what, t, OP_SUM, salt, root, send, 0, total);
  free(want);
  if (!own) free(recv);
  free(send);
}

/* In one group: a ring (send to rank+1, receive from rank-1; with one rank,
 * to itself), the receive posted first when `recv_first`. */
static inline void chk_sendrecv(const plan_t* p, const type_info* t, size_t count, int recv_first) {
  char what[256];
  int to = (p->rank + 1) % p->nranks, from = (p->rank + p->nranks - 1) % p->nranks;
  snprintf(what, sizeof what, "ncclSend/ncclRecv %s count=%zu to %d from %d (%s first, one group)",
           t->name, count, to, from, recv_first ? "recv" : "send");
  int salt = ++g_salt;
  void *send = xalloc(t, count), *recv = xalloc(t, count);
  fill(t, OP_SUM, salt, p->rank, send, 0, count);
  poison(t, recv, count);
  double* want = dalloc(count);
  for (size_t i = 0; i < count; i++) want[i] = gen(t, OP_SUM, salt, from, i);
  NCCLCHECK(ncclGroupStart());
  if (recv_first) NCCLCHECK(ncclRecv(recv, count, t->dt, from, p->comm, NULL));
  NCCLCHECK(ncclSend(send, count, t->dt, to, p->comm, NULL));
  if (!recv_first) NCCLCHECK(ncclRecv(recv, count, t->dt, from, p->comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  if (count == 0) check_poisoned(what, t, recv, 0);
  compare(what, t, recv, want, NULL, count);
  check_input(what, t, OP_SUM, salt, p->rank, send, 0, count);
  free(want);
  free(recv);
  free(send);
}

/* Every check the plan asks for, with `count` elements of `t`. */
static inline void run_count(const plan_t* p, const type_info* t, size_t count) {
  for (int k = 0; k < p->nops; k++) {
    op_kind op = p->ops[k];
    for (int inplace = 0; inplace < 2; inplace++) {
      if (p->colls & C_ALLREDUCE) chk_allreduce(p, t, op, count, inplace);
      if (p->colls & C_REDUCESCATTER) chk_reducescatter(p, t, op, count, inplace);
      for (int j = 0; j < p->nroots; j++)
        if (p->colls & C_REDUCE) chk_reduce(p, t, op, count, p->roots[j], inplace);
    }
  }
  for (int j = 0; j < p->nroots; j++) {
    int root = p->roots[j];
    if (p->colls & C_BROADCAST) {
      chk_broadcast(p, t, count, root, 0);
      chk_broadcast(p, t, count, root, 1);
    }
    if (p->colls & C_BCAST) chk_broadcast(p, t, count, root, 2);
    for (int inplace = 0; inplace < 2; inplace++) {
      if (p->colls & C_GATHER) chk_gather(p, t, count, root, inplace);
      if (p->colls & C_SCATTER) chk_scatter(p, t, count, root, inplace);
    }
  }
  for (int inplace = 0; inplace < 2; inplace++)
    if (p->colls & C_ALLGATHER) chk_allgather(p, t, count, inplace);
  if (p->colls & C_ALLTOALL) chk_alltoall(p, t, count);
  if (p->colls & C_SENDRECV) {
    chk_sendrecv(p, t, count, 0);
    chk_sendrecv(p, t, count, 1);
  }
}

/* Runs the plan the options describe on `comm`; returns the checks passed. */
static inline long run_collective_checks(ncclComm_t comm, int rank, int nranks, int argc,
                                         char** argv) {
  plan_t p;
  parse_plan(&p, comm, rank, nranks, argc, argv);
  int count, me;
  NCCLCHECK(ncclCommCount(comm, &count));
  NCCLCHECK(ncclCommUserRank(comm, &me));
  EXPECT(count == nranks, "ncclCommCount: expected %d, got %d", nranks, count);
  EXPECT(me == rank, "ncclCommUserRank: expected %d, got %d", rank, me);
  for (int k = 0; k < p.ntypes; k++) {
    const type_info* t = p.types[k];
    for (int c = 0; c < p.ncounts; c++) run_count(&p, t, p.counts[c]);
    for (int b = 0; b < p.nbig && p.big; b++)
      if (p.big_types[b] == t) run_count(&p, t, p.big);
  }
  /* Big types not among --types run the big count alone. */
  for (int b = 0; b < p.nbig && p.big; b++) {
    int seen = 0;
    for (int k = 0; k < p.ntypes; k++) seen |= p.types[k] == p.big_types[b];
    if (!seen) run_count(&p, p.big_types[b], p.big);
  }
  return g_checks;
}

#endif /* JITCCL_CAPI_TEST_COLL_CHECKS_H */
