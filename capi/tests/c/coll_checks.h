/*
 * The collective checks shared by collectives.c and collectives_mpi.c: each
 * collective of the plan (coll_plan.h) against the reference every rank computes.
 */
#ifndef JITCCL_CAPI_TEST_COLL_CHECKS_H
#define JITCCL_CAPI_TEST_COLL_CHECKS_H

#include "coll_plan.h"

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
