/*
 * A communicator's life through the C API, on ranks started by `jitccl launch`
 * (rank and size from RANK / WORLD_SIZE, the id from NCCL_COMM_ID):
 *
 *  - configs: a bad magic refused, an older and smaller ncclConfig_t accepted
 *    (its fields past `size` never read);
 *  - queries: ncclCommCount / UserRank / CuDevice, version, error strings;
 *  - bad arguments (data type, op, root, peer, NULL comm, count overflow, an op
 *    of another type or destroyed) refused with ncclInvalidArgument and a last
 *    error naming the call, the communicator working after them;
 *  - a nonblocking communicator (config.blocking = 0): init, calls, a group, a
 *    split and finalize polled with ncclCommGetAsyncError;
 *  - ncclCommSplit by parity with reversed keys, and with NCCL_SPLIT_NOCOLOR;
 *  - ncclCommInitRankScalable with two roots; ncclCommRevoke, then a shrink of the
 *    revoked communicator;
 *  - ncclCommInitAll of 4 ranks in one process, driven by one thread in a group;
 *  - ncclCommFinalize + ncclCommDestroy, and calls on a destroyed communicator;
 *  - ncclCommAbort from another thread while the main thread waits in an
 *    AllReduce that rank 1 never joins: the call returns an error, promptly.
 *
 * Groups, memory and the refused functions are groups.c's.
 */
#include "world.h"

#include <pthread.h>

/* ---- Configs and local checks ------------------------------------------------ */

static void local_checks(ncclUniqueId id) {
  int v = 0;
  NCCLCHECK(ncclGetVersion(&v));
  EXPECT(v == NCCL_VERSION_CODE, "ncclGetVersion: expected %d, got %d", NCCL_VERSION_CODE, v);
  EXPECT_RESULT(ncclInvalidArgument, ncclGetVersion(NULL));
  for (int r = ncclSuccess; r < ncclNumResults; r++) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    EXPECT(s && *s, "ncclGetErrorString(%d): expected a text, got %s", r, s ? "\"\"" : "NULL");
  }

  ncclComm_t c = (ncclComm_t)&v; /* must be reset to NULL by a refused init */
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0x12345678;
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRankConfig(&c, nranks_, id, rank_, &bad));
  EXPECT(c == NULL, "a refused init: expected the communicator NULL, got %p", (void*)c);
  EXPECT(strstr(ncclGetLastError(NULL), "magic") != NULL,
         "last error after a bad magic: expected it to name the magic, got '%s'",
         ncclGetLastError(NULL));

  ncclConfig_t badflag = NCCL_CONFIG_INITIALIZER;
  badflag.blocking = 2;
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRankConfig(&c, nranks_, id, rank_, &badflag));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRank(&c, nranks_, id, nranks_));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRank(&c, nranks_, id, -1));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRank(&c, 0, id, 0));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRank(NULL, nranks_, id, rank_));
  ncclUniqueId junk;
  memset(&junk, 0x5a, sizeof junk);
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitRank(&c, nranks_, junk, rank_));
  EXPECT_RESULT(ncclInvalidArgument, ncclGetUniqueId(NULL));
}

static void query_checks(ncclComm_t world) {
  int n = -1, me = -1, dev = 7;
  NCCLCHECK(ncclCommCount(world, &n));
  NCCLCHECK(ncclCommUserRank(world, &me));
  NCCLCHECK(ncclCommCuDevice(world, &dev));
  EXPECT(n == nranks_, "ncclCommCount: expected %d, got %d", nranks_, n);
  EXPECT(me == rank_, "ncclCommUserRank: expected %d, got %d", rank_, me);
  EXPECT(dev == -1, "ncclCommCuDevice on the host: expected -1, got %d", dev);
  EXPECT_RESULT(ncclInvalidArgument, ncclCommCount(world, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommUserRank(world, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommCuDevice(world, NULL));
  ncclResult_t state = ncclInternalError;
  NCCLCHECK(ncclCommGetAsyncError(world, &state));
  EXPECT(state == ncclSuccess, "ncclCommGetAsyncError of an idle comm: expected 0, got %d", (int)state);
}

/* ---- Bad arguments ------------------------------------------------------------- */

/* `call` must return ncclInvalidArgument with a last error (process-wide, and
 * the communicator's when it has one) that names `fn`. */
#define REFUSED_ARG(comm, fn, call)                                                          \
  do {                                                                                       \
    EXPECT_RESULT(ncclInvalidArgument, call);                                                \
    const char* e_ = ncclGetLastError(NULL);                                                 \
    EXPECT(e_ && strstr(e_, fn), "%s: expected a last error naming %s, got '%s'", #call, fn, \
           e_ ? e_ : "(NULL)");                                                              \
    if (comm) {                                                                              \
      const char* c_ = ncclGetLastError(comm);                                               \
      EXPECT(c_ && strstr(c_, fn), "%s: expected the comm's last error to name %s, got '%s'", \
             #call, fn, c_ ? c_ : "(NULL)");                                                 \
    }                                                                                        \
  } while (0)

static void bad_argument_checks(ncclComm_t world) {
  float s[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8];
  memset(r, 0, sizeof r);
  ncclComm_t none = NULL;
  REFUSED_ARG(world, "ncclAllReduce", ncclAllReduce(s, r, 8, (ncclDataType_t)99, ncclSum, world, NULL));
  REFUSED_ARG(world, "ncclAllReduce", ncclAllReduce(s, r, 8, ncclFloat, (ncclRedOp_t)42, world, NULL));
  REFUSED_ARG(world, "ncclAllReduce", ncclAllReduce(s, r, 8, ncclFloat, (ncclRedOp_t)-1, world, NULL));
  REFUSED_ARG(world, "ncclBroadcast", ncclBroadcast(s, r, 8, ncclFloat, nranks_, world, NULL));
  REFUSED_ARG(world, "ncclReduce", ncclReduce(s, r, 8, ncclFloat, ncclSum, -1, world, NULL));
  REFUSED_ARG(world, "ncclGather", ncclGather(s, r, 1, ncclFloat, nranks_ + 3, world, NULL));
  REFUSED_ARG(world, "ncclSend", ncclSend(s, 8, ncclFloat, -1, world, NULL));
  REFUSED_ARG(world, "ncclRecv", ncclRecv(r, 8, ncclFloat, nranks_, world, NULL));
  REFUSED_ARG(none, "ncclAllReduce", ncclAllReduce(s, r, 8, ncclFloat, ncclSum, NULL, NULL));
  REFUSED_ARG(none, "ncclCommCount", ncclCommCount(NULL, (int*)r));
  /* Counts whose bytes (or whose nranks blocks) do not fit in size_t. */
  REFUSED_ARG(world, "ncclAllReduce", ncclAllReduce(s, r, SIZE_MAX, ncclFloat, ncclSum, world, NULL));
  REFUSED_ARG(world, "ncclAllGather", ncclAllGather(s, r, SIZE_MAX / 2 + 1, ncclInt64, world, NULL));
  REFUSED_ARG(world, "ncclReduceScatter",
              ncclReduceScatter(s, r, SIZE_MAX / 2 + 1, ncclInt8, ncclSum, world, NULL));
  /* A PreMulSum op used with another type, then after it is destroyed. */
  ncclRedOp_t op;
  float two = 2;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, world));
  REFUSED_ARG(world, "ncclAllReduce", ncclAllReduce(s, r, 2, ncclInt32, op, world, NULL));
  NCCLCHECK(ncclRedOpDestroy(op, world));
  REFUSED_ARG(world, "ncclAllReduce", ncclAllReduce(s, r, 8, ncclFloat, op, world, NULL));
  REFUSED_ARG(world, "ncclRedOpDestroy", ncclRedOpDestroy(op, world));
  REFUSED_ARG(world, "ncclRedOpCreatePreMulSum",
              ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, (ncclScalarResidence_t)5, world));
  REFUSED_ARG(world, "ncclCommSplit", ncclCommSplit(world, -2, 0, &none, NULL));
  /* A group closed without being opened. */
  EXPECT_RESULT(ncclInvalidUsage, ncclGroupEnd());
  for (int i = 0; i < 8; i++) EXPECT(r[i] == 0, "a refused call wrote recv[%d] = %g", i, (double)r[i]);
  world_check(world, "AllReduce after the refused calls");
}

/* ---- Nonblocking ------------------------------------------------------------------ */

/* A fresh id from rank 0 (without NCCL_COMM_ID: a new root), broadcast over `world`. */
static ncclUniqueId fresh_id(ncclComm_t world) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank_ == 0) {
    unsetenv("NCCL_COMM_ID");
    unsetenv("JITCCL_COMM_ID");
    NCCLCHECK(ncclGetUniqueId(&id));
  }
  NCCLCHECK(ncclBroadcast(&id, &id, sizeof id, ncclUint8, 0, world, NULL));
  return id;
}

static void nonblocking_checks(ncclComm_t world) {
  ncclUniqueId id = fresh_id(world);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "nonblocking";
  ncclComm_t nb = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nb, nranks_, id, rank_, &cfg);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "nonblocking init: expected 0 or 7, got %d (%s)",
         (int)r, ncclGetLastError(NULL));
  EXPECT(nb != NULL, "nonblocking init: expected a communicator, got NULL");
  wait_comm(nb, r, "nonblocking ncclCommInitRankConfig", 60);
  int n = 0;
  NCCLCHECK(ncclCommCount(nb, &n));
  EXPECT(n == nranks_, "nonblocking comm: ncclCommCount: expected %d, got %d", nranks_, n);

  allreduce_check(nb, all_ranks, nranks_, 1023, "nonblocking AllReduce");
  allreduce_check(nb, all_ranks, nranks_, 300000, "nonblocking AllReduce, 300000 elements");

  /* Two calls in a group: ncclGroupEnd may return ncclInProgress. */
  enum { N = 5000 };
  static float a[N], b[N], ra[N], rb[N];
  for (int i = 0; i < N; i++) a[i] = (float)(rank_ + i % 7), b[i] = (float)(2 * rank_ - i % 5);
  NCCLCHECK(ncclGroupStart());
  r = ncclAllReduce(a, ra, N, ncclFloat, ncclSum, nb, NULL);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "an AllReduce in a group: expected 0 or 7, got %d", (int)r);
  r = ncclAllReduce(b, rb, N, ncclFloat, ncclMax, nb, NULL);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "an AllReduce in a group: expected 0 or 7, got %d", (int)r);
  wait_comm(nb, ncclGroupEnd(), "ncclGroupEnd of a nonblocking comm's group", 60);
  for (int i = 0; i < N; i++) {
    float wa = 0, wb = -1e30f;
    for (int k = 0; k < nranks_; k++) {
      wa += (float)(k + i % 7);
      wb = (float)(2 * k - i % 5) > wb ? (float)(2 * k - i % 5) : wb;
    }
    if (ra[i] != wa || rb[i] != wb)
      die("nonblocking group element %d: expected %g and %g, got %g and %g", i, (double)wa,
          (double)wb, (double)ra[i], (double)rb[i]);
  }
  pass();

  /* A split of a nonblocking comm is nonblocking too. */
  ncclComm_t child = NULL;
  r = ncclCommSplit(nb, 0, rank_, &child, NULL);
  EXPECT(child != NULL, "split of a nonblocking comm: expected a communicator, got NULL (%d)", (int)r);
  wait_comm(child, r, "ncclCommSplit of a nonblocking comm", 60);
  allreduce_check(child, all_ranks, nranks_, 1023, "AllReduce on a nonblocking comm's split");
  wait_comm(child, ncclCommFinalize(child), "ncclCommFinalize (nonblocking split)", 60);
  NCCLCHECK(ncclCommDestroy(child));

  wait_comm(nb, ncclCommFinalize(nb), "ncclCommFinalize (nonblocking)", 60);
  NCCLCHECK(ncclCommDestroy(nb));
  pass();
}

/* ---- Split ------------------------------------------------------------------------- */

/* The parity split, and a split without rank 0 (NCCL_SPLIT_NOCOLOR there). */
static ncclComm_t split_checks(ncclComm_t world, int* members, int* nmembers) {
  ncclComm_t half = parity_split(world, members, nmembers);
  int n = *nmembers;
  int want_rank = 0;
  while (members[want_rank] != rank_) want_rank++;
  int got_n = -1, got_rank = -1;
  NCCLCHECK(ncclCommCount(half, &got_n));
  NCCLCHECK(ncclCommUserRank(half, &got_rank));
  EXPECT(got_n == n, "parity split: ncclCommCount: expected %d, got %d", n, got_n);
  EXPECT(got_rank == want_rank, "parity split, reversed keys: ncclCommUserRank: expected %d, got %d",
         want_rank, got_rank);
  allreduce_check(half, members, n, 1023, "AllReduce on the parity split");
  allreduce_check(half, members, n, 70000, "AllReduce on the parity split, 70000 elements");

  /* Rank 0 takes no part: it gets NULL; the others a comm of nranks - 1. */
  ncclComm_t rest = (ncclComm_t)&n;
  NCCLCHECK(ncclCommSplit(world, rank_ == 0 ? NCCL_SPLIT_NOCOLOR : 3, rank_, &rest, NULL));
  if (rank_ == 0) {
    EXPECT(rest == NULL, "NCCL_SPLIT_NOCOLOR: expected NULL, got %p", (void*)rest);
  } else {
    EXPECT(rest != NULL, "split without rank 0: expected a communicator, got NULL");
    int c = -1, me = -1;
    NCCLCHECK(ncclCommCount(rest, &c));
    NCCLCHECK(ncclCommUserRank(rest, &me));
    EXPECT(c == nranks_ - 1 && me == rank_ - 1,
           "split without rank 0: expected rank %d of %d, got %d of %d", rank_ - 1, nranks_ - 1, me, c);
    allreduce_check(rest, all_ranks + 1, nranks_ - 1, 1023, "AllReduce on the split without rank 0");
    NCCLCHECK(ncclCommDestroy(rest));
  }
  return half;
}

/* ---- Scalable init, revoke ------------------------------------------------------------ */

/* ncclCommInitRankScalable with two roots (rank 0's and rank n/2's ids, each sent to all
 * over `world`): each root serves a contiguous block of ranks. */
static void scalable_checks(ncclComm_t world) {
  int nids = nranks_ >= 2 ? 2 : 1;
  ncclUniqueId ids[2];
  for (int k = 0; k < nids; k++) {
    int creator = k * (nranks_ / 2);
    memset(&ids[k], 0, sizeof ids[k]);
    if (rank_ == creator) {
      unsetenv("NCCL_COMM_ID");
      unsetenv("JITCCL_COMM_ID");
      NCCLCHECK(ncclGetUniqueId(&ids[k]));
    }
    NCCLCHECK(ncclBroadcast(&ids[k], &ids[k], sizeof ids[k], ncclUint8, creator, world, NULL));
  }
  ncclComm_t c = NULL, none = NULL;
  NCCLCHECK(ncclCommInitRankScalable(&c, nranks_, rank_, nids, ids, NULL));
  allreduce_check(c, all_ranks, nranks_, 1023, "AllReduce on a communicator of two roots");
  REFUSED_ARG(NULL, "ncclCommInitRankScalable", ncclCommInitRankScalable(&none, nranks_, rank_, 0, ids, NULL));
  NCCLCHECK(ncclCommDestroy(c));
}

/* ncclCommRevoke: calls on the revoked communicator are refused; a shrink of it (no rank
 * excluded) gives a working one. */
static void revoke_checks(ncclComm_t world) {
  ncclComm_t dup = NULL, fresh = NULL;
  NCCLCHECK(ncclCommSplit(world, 0, rank_, &dup, NULL));
  allreduce_check(dup, all_ranks, nranks_, 1023, "AllReduce before the revoke");
  REFUSED_ARG(dup, "ncclCommRevoke", ncclCommRevoke(dup, 5));
  NCCLCHECK(ncclCommRevoke(dup, NCCL_REVOKE_DEFAULT));
  float s[4] = {1, 2, 3, 4}, r[4];
  ncclResult_t after = ncclAllReduce(s, r, 4, ncclFloat, ncclSum, dup, NULL);
  EXPECT(after != ncclSuccess, "an AllReduce on a revoked communicator: expected an error, got success");
  NCCLCHECK(ncclCommShrink(dup, NULL, 0, &fresh, NULL, NCCL_SHRINK_DEFAULT));
  allreduce_check(fresh, all_ranks, nranks_, 1023, "AllReduce on the shrink of a revoked communicator");
  NCCLCHECK(ncclCommDestroy(fresh));
  NCCLCHECK(ncclCommDestroy(dup));
}

/* ---- InitAll ------------------------------------------------------------------------ */

static void init_all_checks(void) {
  enum { NDEV = 4, N = 4099 };
  ncclComm_t comms[NDEV];
  NCCLCHECK(ncclCommInitAll(comms, NDEV, NULL));
  static float s[NDEV][N], r[NDEV][N];
  for (int d = 0; d < NDEV; d++) {
    int n = -1, me = -1;
    NCCLCHECK(ncclCommCount(comms[d], &n));
    NCCLCHECK(ncclCommUserRank(comms[d], &me));
    EXPECT(n == NDEV && me == d, "ncclCommInitAll comm %d: expected rank %d of %d, got %d of %d", d,
           d, NDEV, me, n);
    for (int i = 0; i < N; i++) s[d][i] = (float)((d + 1) * (i % 17)), r[d][i] = -1;
  }
  NCCLCHECK(ncclGroupStart());
  for (int d = 0; d < NDEV; d++)
    NCCLCHECK(ncclAllReduce(s[d], r[d], N, ncclFloat, ncclSum, comms[d], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int d = 0; d < NDEV; d++)
    for (int i = 0; i < N; i++)
      if (r[d][i] != (float)(10 * (i % 17)))
        die("ncclCommInitAll, one thread's group: comm %d element %d: expected %g, got %g", d, i,
            (double)(10 * (i % 17)), (double)r[d][i]);
  pass();
  /* A second round, out of place into the send buffers of the next comm. */
  NCCLCHECK(ncclGroupStart());
  for (int d = 0; d < NDEV; d++)
    NCCLCHECK(ncclBroadcast(s[d], r[d], N, ncclFloat, 2, comms[d], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int d = 0; d < NDEV; d++)
    for (int i = 0; i < N; i++)
      if (r[d][i] != s[2][i])
        die("ncclCommInitAll broadcast: comm %d element %d: expected %g, got %g", d, i,
            (double)s[2][i], (double)r[d][i]);
  pass();
  for (int d = 0; d < NDEV; d++) NCCLCHECK(ncclCommDestroy(comms[d]));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommInitAll(comms, 0, NULL));
}

/* ---- The end of a communicator --------------------------------------------------- */

static void destroyed_checks(ncclComm_t half) {
  NCCLCHECK(ncclCommFinalize(half));
  NCCLCHECK(ncclCommDestroy(half));
  float s[4] = {1, 2, 3, 4}, r[4];
  int n;
  REFUSED_ARG(NULL, "ncclAllReduce", ncclAllReduce(s, r, 4, ncclFloat, ncclSum, half, NULL));
  REFUSED_ARG(NULL, "ncclCommCount", ncclCommCount(half, &n));
  REFUSED_ARG(NULL, "ncclSend", ncclSend(s, 4, ncclFloat, 0, half, NULL));
  REFUSED_ARG(NULL, "ncclCommSplit", ncclCommSplit(half, 0, 0, &half, NULL));
  REFUSED_ARG(NULL, "ncclCommDestroy", ncclCommDestroy(half));
  REFUSED_ARG(NULL, "ncclCommAbort", ncclCommAbort(half));
  ncclResult_t st;
  REFUSED_ARG(NULL, "ncclCommGetAsyncError", ncclCommGetAsyncError(half, &st));
}

/* ncclCommAbort from a second thread, while the main thread waits in an
 * AllReduce that rank 1 never joins. */
typedef struct {
  ncclComm_t comm;
  double delay_s, at;
  ncclResult_t result;
} aborter_t;

static void* aborter(void* arg) {
  aborter_t* a = (aborter_t*)arg;
  sleep_ms((long)(a->delay_s * 1000));
  a->at = now_s();
  a->result = ncclCommAbort(a->comm);
  return NULL;
}

static void abort_checks(ncclComm_t world) {
  if (nranks_ < 2) return;
  /* Equal keys: the parent's order decides, so the child's ranks are the world's. */
  ncclComm_t dup = NULL;
  NCCLCHECK(ncclCommSplit(world, 0, 0, &dup, NULL));
  int me = -1;
  NCCLCHECK(ncclCommUserRank(dup, &me));
  EXPECT(me == rank_, "a split with equal keys: expected rank %d (the parent's order), got %d", rank_, me);
  allreduce_check(dup, all_ranks, nranks_, 1023, "AllReduce on the communicator to abort");
  if (rank_ != 1) {
    enum { N = 1 << 16 };
    static float s[N], r[N];
    aborter_t a = {dup, 1.0, 0, ncclInternalError};
    pthread_t t;
    if (pthread_create(&t, NULL, aborter, &a)) die("pthread_create failed");
    double t0 = now_s();
    ncclResult_t res = ncclAllReduce(s, r, N, ncclFloat, ncclSum, dup, NULL);
    double waited = now_s() - t0;
    pthread_join(t, NULL);
    note("the AllReduce rank 1 skipped returned %d (%s) after %.2f s (abort at %.2f s): %s", (int)res,
         ncclGetErrorString(res), waited, a.at - t0, ncclGetLastError(NULL));
    EXPECT(res != ncclSuccess && res != ncclInProgress,
           "an AllReduce aborted from another thread: expected an error, got %d", (int)res);
    EXPECT(waited < 10, "an AllReduce aborted from another thread: expected it back within 10 s, took %.1f s",
           waited);
    EXPECT(a.result == ncclSuccess, "ncclCommAbort from another thread: expected 0, got %d (%s)",
           (int)a.result, ncclGetLastError(NULL));
  }
  /* The others are back: rank 1 ends its side too. */
  world_check(world, "AllReduce on the world after a split of it was aborted");
  if (rank_ == 1) NCCLCHECK(ncclCommAbort(dup));
  world_check(world, "AllReduce on the world after every rank ended the aborted split");
}

int main(void) {
  ncclUniqueId id = world_start();
  local_checks(id);
  ncclComm_t world = init_world(id);
  query_checks(world);
  world_check(world, "AllReduce on the world");
  bad_argument_checks(world);
  nonblocking_checks(world);
  int members[MAXR], nmembers = 0;
  ncclComm_t half = split_checks(world, members, &nmembers);
  scalable_checks(world);
  revoke_checks(world);
  if (rank_ == 0) init_all_checks();
  destroyed_checks(half);
  abort_checks(world);
  NCCLCHECK(ncclCommFinalize(world));
  NCCLCHECK(ncclCommDestroy(world));
  REFUSED_ARG(NULL, "ncclCommUserRank", ncclCommUserRank(world, &nmembers));
  report_passed();
  return 0;
}
