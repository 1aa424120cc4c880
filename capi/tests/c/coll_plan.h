/*
 * What the collective checks (coll_checks.h) run on: the command line's plan,
 * and each rank's inputs and references. The checks are shared by collectives.c
 * (ranks from `jitccl launch`, the id from NCCL_COMM_ID) and collectives_mpi.c
 * (ranks from mpirun, rank 0's id passed with MPI_Bcast): every collective
 * against a reference each rank computes locally. Rank r's input element i is
 * gen(r, i), a deterministic function, so every rank knows every rank's input.
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
#ifndef JITCCL_CAPI_TEST_COLL_PLAN_H
#define JITCCL_CAPI_TEST_COLL_PLAN_H

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

#endif /* JITCCL_CAPI_TEST_COLL_PLAN_H */
