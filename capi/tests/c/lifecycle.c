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
 *  - a group of sends and receives to and from every peer (itself included),
 *    posted in different orders, of different sizes, some larger than a FIFO
 *    slot; a group over two communicators; nested groups;
 *  - ncclGroupSimulateEnd: an estimate, and nothing run;
 *  - ncclMemAlloc / ncclMemFree, ncclCommRegister, windows on ncclMemAlloc'd
 *    buffers with an AllReduce on them (and refused on malloc'd memory);
 *  - the functions jitccl refuses: ncclInvalidUsage naming them;
 *  - ncclCommInitAll of 4 ranks in one process, driven by one thread in a group;
 *  - ncclCommFinalize + ncclCommDestroy, and calls on a destroyed communicator;
 *  - ncclCommAbort from another thread while the main thread waits in an
 *    AllReduce that rank 1 never joins: the call returns an error, promptly.
 */
/* common.h first: it asks for POSIX 2008 before any system header. */
#include "common.h"

#include <pthread.h>

#define MAXR 64

static int rank_, nranks_;

/* Rank r's AllReduce input element i: whole, small, exact as floats. */
static float ar_val(int r, size_t i, int salt) { return (float)((r + 1) * 3 + (int)(i % 101) + salt); }

/* An AllReduce (sum, float) of `count` elements on `comm`, whose members are
 * the world ranks members[0..n) (member k is the comm's rank k), checked.
 * A nonblocking comm is polled. */
static void allreduce_check(ncclComm_t comm, const int* members, int n, size_t count,
                            const char* what) {
  int me = -1;
  NCCLCHECK(ncclCommUserRank(comm, &me));
  if (me < 0 || me >= n) die("%s: ncclCommUserRank gave %d of %d", what, me, n);
  /* The same on every member: a hash of the label and size. */
  int salt = (int)(count % 7);
  for (const char* c = what; *c; c++) salt = (salt * 31 + *c) % 1000;
  float* s = (float*)malloc((count ? count : 1) * sizeof(float));
  float* r = (float*)malloc((count ? count : 1) * sizeof(float));
  for (size_t i = 0; i < count; i++) s[i] = ar_val(members[me], i, salt), r[i] = -1;
  wait_comm(comm, ncclAllReduce(s, r, count, ncclFloat, ncclSum, comm, NULL), what, 60);
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int k = 0; k < n; k++) want += ar_val(members[k], i, salt);
    if (r[i] != want)
      die("%s: AllReduce element %zu: expected %g, got %g", what, i, (double)want, (double)r[i]);
  }
  pass();
  free(s);
  free(r);
}

static int all_ranks[MAXR];

static void world_check(ncclComm_t world, const char* what) {
  allreduce_check(world, all_ranks, nranks_, 1023, what);
}

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

/* The world communicator, made with the config of an older NCCL (2.17): the
 * struct ends before splitShare, whose bytes here hold values that would be
 * refused (splitShare 7) or crash (commName 0x1) if they were read. */
static ncclComm_t init_world(ncclUniqueId id) {
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = offsetof(ncclConfig_t, splitShare);
  old.version = 21700;
  old.blocking = 1;
  old.splitShare = 7;
  old.commName = (const char*)1;
  old.maxP2pPeers = -5;
  ncclComm_t world = NULL;
  NCCLCHECK(ncclCommInitRankConfig(&world, nranks_, id, rank_, &old));
  EXPECT(world != NULL, "ncclCommInitRankConfig: expected a communicator, got NULL");
  return world;
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

/* Parity halves, keys reversed: the child's rank 0 is the highest world rank. */
static ncclComm_t split_checks(ncclComm_t world, int* members, int* nmembers) {
  ncclComm_t half = NULL;
  NCCLCHECK(ncclCommSplit(world, rank_ % 2, nranks_ - rank_, &half, NULL));
  EXPECT(half != NULL, "ncclCommSplit: expected a communicator, got NULL");
  int n = 0;
  for (int r = nranks_ - 1; r >= 0; r--)
    if (r % 2 == rank_ % 2) members[n++] = r;
  *nmembers = n;
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

/* ---- Groups ------------------------------------------------------------------------ */

/* Elements rank `from` sends to rank `to`: some above a FIFO slot (128 KiB). */
static size_t p2p_count(int from, int to) {
  return (from + to) % 2 == 0 ? 70000 + 1000 * (size_t)from + (size_t)to
                              : 100 + 10 * (size_t)from + (size_t)to;
}

static float p2p_val(int from, int to, size_t i) {
  return (float)(from * 1000000 + to * 100000 + (int)(i % 99991));
}

/* Every rank sends to every rank (itself included) in ascending order, then
 * receives from every rank in descending order, all in one group. */
static void p2p_group_checks(ncclComm_t world) {
  float *sendb[MAXR], *recvb[MAXR];
  for (int p = 0; p < nranks_; p++) {
    size_t ns = p2p_count(rank_, p), nr = p2p_count(p, rank_);
    sendb[p] = (float*)malloc(ns * sizeof(float));
    recvb[p] = (float*)malloc(nr * sizeof(float));
    for (size_t i = 0; i < ns; i++) sendb[p][i] = p2p_val(rank_, p, i);
    for (size_t i = 0; i < nr; i++) recvb[p][i] = -1;
  }
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < nranks_; p++)
    NCCLCHECK(ncclSend(sendb[p], p2p_count(rank_, p), ncclFloat, p, world, NULL));
  for (int p = nranks_ - 1; p >= 0; p--)
    NCCLCHECK(ncclRecv(recvb[p], p2p_count(p, rank_), ncclFloat, p, world, NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int p = 0; p < nranks_; p++) {
    for (size_t i = 0; i < p2p_count(p, rank_); i++)
      if (recvb[p][i] != p2p_val(p, rank_, i))
        die("grouped p2p: from rank %d, element %zu of %zu: expected %g, got %g", p, i,
            p2p_count(p, rank_), (double)p2p_val(p, rank_, i), (double)recvb[p][i]);
    pass();
    free(sendb[p]);
    free(recvb[p]);
  }
}

/* One group over the world and the parity split. */
static void two_comm_group_checks(ncclComm_t world, ncclComm_t half, const int* members, int n) {
  enum { N = 3000 };
  static float ws[N], wr[N], hs[N], hr[N];
  for (int i = 0; i < N; i++) ws[i] = (float)(rank_ * 10 + i % 13), hs[i] = (float)(rank_ + 1);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(ws, wr, N, ncclFloat, ncclSum, world, NULL));
  NCCLCHECK(ncclAllReduce(hs, hr, N, ncclFloat, ncclProd, half, NULL));
  NCCLCHECK(ncclGroupEnd());
  float hwant = 1;
  for (int k = 0; k < n; k++) hwant *= (float)(members[k] + 1);
  for (int i = 0; i < N; i++) {
    float wwant = 0;
    for (int k = 0; k < nranks_; k++) wwant += (float)(k * 10 + i % 13);
    if (wr[i] != wwant || hr[i] != hwant)
      die("group over two comms, element %d: expected %g (world) and %g (split), got %g and %g", i,
          (double)wwant, (double)hwant, (double)wr[i], (double)hr[i]);
  }
  pass();
}

/* Groups nest: only the outermost ncclGroupEnd runs what was posted. */
static void nested_group_checks(ncclComm_t world) {
  enum { N = 777 };
  static float s[N], r[N];
  for (int i = 0; i < N; i++) s[i] = (float)(rank_ * 2 + i % 3), r[i] = -1;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(s, r, N, ncclFloat, ncclMax, world, NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int i = 0; i < N; i++)
    if (r[i] != -1) die("an inner ncclGroupEnd ran the group: recv[%d] = %g", i, (double)r[i]);
  pass();
  NCCLCHECK(ncclGroupEnd());
  for (int i = 0; i < N; i++)
    if (r[i] != (float)((nranks_ - 1) * 2 + i % 3))
      die("nested groups: element %d: expected %g, got %g", i, (double)((nranks_ - 1) * 2 + i % 3), (double)r[i]);
  pass();
}

/* A call that fails inside a group fails the group, as in NCCL: ncclGroupEnd returns its
 * error and runs nothing of the group; the communicator still works. */
static void failed_group_checks(ncclComm_t world) {
  enum { N = 555 };
  static float s[N], r[N];
  for (int i = 0; i < N; i++) s[i] = (float)(rank_ + i % 5), r[i] = -1;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(s, r, N, ncclFloat, ncclSum, world, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclAllReduce(s, r, N, (ncclDataType_t)99, ncclSum, world, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclGroupEnd());
  EXPECT(strstr(ncclGetLastError(NULL), "data type 99") != NULL, "last error: %s", ncclGetLastError(NULL));
  for (int i = 0; i < N; i++)
    if (r[i] != -1) die("a failed group ran a call: recv[%d] = %g", i, (double)r[i]);
  pass();
  world_check(world, "AllReduce after a failed group");
}

static void simulate_checks(ncclComm_t world) {
  size_t count = (1 << 20) / sizeof(float);
  float* s = (float*)malloc(count * sizeof(float));
  float* r = (float*)malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) s[i] = 1;
  memset(r, 0xA5, count * sizeof(float));
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(s, r, count, ncclFloat, ncclSum, world, NULL));
  NCCLCHECK(ncclGroupSimulateEnd(&info));
  EXPECT(info.estimatedTime > 0, "ncclGroupSimulateEnd of a 1 MiB AllReduce: expected a time > 0, got %g",
         (double)info.estimatedTime);
  EXPECT(isfinite(info.estimatedTime), "estimatedTime: expected finite, got %g", (double)info.estimatedTime);
  const unsigned char* b = (const unsigned char*)r;
  for (size_t i = 0; i < count * sizeof(float); i++)
    if (b[i] != 0xA5) die("ncclGroupSimulateEnd ran the AllReduce: recv byte %zu is %#x", i, b[i]);
  pass();
  /* The group is closed: nothing is left open or queued. */
  EXPECT_RESULT(ncclInvalidUsage, ncclGroupEnd());
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(s, r, count, ncclFloat, ncclSum, world, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclGroupSimulateEnd(&bad));
  EXPECT_RESULT(ncclInvalidUsage, ncclGroupEnd());
  for (size_t i = 0; i < count * sizeof(float); i++)
    if (b[i] != 0xA5) die("a refused ncclGroupSimulateEnd ran the AllReduce: recv byte %zu is %#x", i, b[i]);
  pass();
  world_check(world, "AllReduce after ncclGroupSimulateEnd");
  free(s);
  free(r);
}

/* ---- Memory ------------------------------------------------------------------------- */

static void memory_checks(ncclComm_t world) {
  void* p = NULL;
  NCCLCHECK(ncclMemAlloc(&p, 1 << 20));
  EXPECT(p != NULL, "ncclMemAlloc: expected a pointer, got NULL");
  unsigned char* b = (unsigned char*)p;
  for (size_t i = 0; i < (1 << 20); i++) b[i] = (unsigned char)(i * 7 + 3);
  for (size_t i = 0; i < (1 << 20); i++)
    if (b[i] != (unsigned char)(i * 7 + 3)) die("ncclMemAlloc'd byte %zu did not keep its value", i);
  pass();
  NCCLCHECK(ncclMemFree(p));
  EXPECT_RESULT(ncclInvalidArgument, ncclMemFree(p));
  void* m = malloc(64);
  EXPECT_RESULT(ncclInvalidArgument, ncclMemFree(m));
  free(m);
  EXPECT_RESULT(ncclInvalidArgument, ncclMemAlloc(&p, 0));
  EXPECT_RESULT(ncclInvalidArgument, ncclMemAlloc(NULL, 64));

  /* Local registration. */
  float local[256];
  void* h = NULL;
  NCCLCHECK(ncclCommRegister(world, local, sizeof local, &h));
  NCCLCHECK(ncclCommDeregister(world, h));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommDeregister(world, h));

  /* Windows (collective) on ncclMemAlloc'd buffers, then AllReduces on them. */
  const size_t count = 300000;
  float *ws = NULL, *wr = NULL;
  NCCLCHECK(ncclMemAlloc((void**)&ws, count * sizeof(float)));
  NCCLCHECK(ncclMemAlloc((void**)&wr, count * sizeof(float)));
  ncclWindow_t w1 = NULL, w2 = NULL;
  NCCLCHECK(ncclCommWindowRegister(world, ws, count * sizeof(float), &w1, NCCL_WIN_DEFAULT));
  NCCLCHECK(ncclCommWindowRegister(world, wr, count * sizeof(float), &w2, NCCL_WIN_COLL_SYMMETRIC));
  void* up = NULL;
  NCCLCHECK(ncclWinGetUserPtr(world, w1, &up));
  EXPECT(up == ws, "ncclWinGetUserPtr: expected %p, got %p", (void*)ws, up);
  size_t sizes[2] = {1023, count};
  for (int k = 0; k < 2; k++) {
    size_t n = sizes[k];
    for (size_t i = 0; i < n; i++) ws[i] = (float)(rank_ + 1) * (float)(i % 31), wr[i] = -1;
    NCCLCHECK(ncclAllReduce(ws, wr, n, ncclFloat, ncclSum, world, NULL));
    float f = (float)(nranks_ * (nranks_ + 1) / 2);
    for (size_t i = 0; i < n; i++)
      if (wr[i] != f * (float)(i % 31))
        die("AllReduce on windows, %zu elements: element %zu: expected %g, got %g", n, i,
            (double)(f * (float)(i % 31)), (double)wr[i]);
    pass();
    /* In place on the window. */
    NCCLCHECK(ncclAllReduce(wr, wr, n, ncclFloat, ncclSum, world, NULL));
    for (size_t i = 0; i < n; i++)
      if (wr[i] != f * (float)(i % 31) * (float)nranks_)
        die("in-place AllReduce on a window, %zu elements: element %zu: expected %g, got %g", n, i,
            (double)(f * (float)(i % 31) * (float)nranks_), (double)wr[i]);
    pass();
  }
  NCCLCHECK(ncclCommWindowDeregister(world, w1));
  NCCLCHECK(ncclCommWindowDeregister(world, w2));
  /* A window on malloc'd memory: ranks in other processes cannot map it, so every rank
   * is refused (ncclInvalidUsage); with one rank there is no other process. */
  float* plain = (float*)malloc(count * sizeof(float));
  ncclWindow_t w3 = NULL;
  ncclResult_t wr3 = ncclCommWindowRegister(world, plain, count * sizeof(float), &w3, NCCL_WIN_DEFAULT);
  if (nranks_ > 1) {
    EXPECT(wr3 == ncclInvalidUsage, "a window on malloc'd memory across processes: expected %d, got %d",
           (int)ncclInvalidUsage, (int)wr3);
    EXPECT(strstr(ncclGetLastError(world), "ncclCommWindowRegister") != NULL,
           "a refused window: expected the comm's last error to name ncclCommWindowRegister, got '%s'",
           ncclGetLastError(world));
  } else {
    EXPECT(wr3 == ncclSuccess, "a window on malloc'd memory, one rank: expected 0, got %d (%s)", (int)wr3,
           ncclGetLastError(world));
    NCCLCHECK(ncclCommWindowDeregister(world, w3));
  }
  free(plain);
  EXPECT_RESULT(ncclInvalidArgument, ncclCommWindowDeregister(world, w1));
  EXPECT_RESULT(ncclInvalidArgument, ncclWinGetUserPtr(world, w2, &up));
  NCCLCHECK(ncclMemFree(ws));
  NCCLCHECK(ncclMemFree(wr));
  world_check(world, "AllReduce after the windows are gone");
}

/* ---- Refused functions ------------------------------------------------------------ */

#define REFUSED_USE(fn, call)                                                                   \
  do {                                                                                          \
    EXPECT_RESULT(ncclInvalidUsage, call);                                                      \
    const char* e_ = ncclGetLastError(NULL);                                                    \
    EXPECT(e_ && strstr(e_, fn), "%s: expected a last error naming %s, got '%s'", #call, fn, e_); \
  } while (0)

static void refused_checks(ncclComm_t world, ncclUniqueId id) {
  ncclComm_t grown = NULL;
  ncclUniqueId other;
  uint64_t u64 = 0;
  float buf[4] = {0};
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  ncclParamHandle_t ph = NULL;
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  const char* str = NULL;
  const char** keys = NULL;
  int len = 0;
  char raw[16];
  REFUSED_USE("ncclCommGrow", ncclCommGrow(world, nranks_ + 1, &id, rank_, &grown, NULL));
  REFUSED_USE("ncclCommGetUniqueId", ncclCommGetUniqueId(world, &other));
  REFUSED_USE("ncclCommSuspend", ncclCommSuspend(world, NCCL_SUSPEND_MEM));
  REFUSED_USE("ncclCommResume", ncclCommResume(world));
  REFUSED_USE("ncclCommMemStats", ncclCommMemStats(world, ncclStatGpuMemTotal, &u64));
  REFUSED_USE("ncclPutSignal", ncclPutSignal(buf, 1, ncclFloat, 0, NULL, 0, 0, 0, 0, world, NULL));
  REFUSED_USE("ncclSignal", ncclSignal(0, 0, 0, 0, world, NULL));
  REFUSED_USE("ncclWaitSignal", ncclWaitSignal(1, &desc, world, NULL));
  REFUSED_USE("ncclParamBind", ncclParamBind(&ph, "NCCL_DEBUG"));
  REFUSED_USE("ncclParamGetI8", ncclParamGetI8(ph, &i8));
  REFUSED_USE("ncclParamGetI16", ncclParamGetI16(ph, &i16));
  REFUSED_USE("ncclParamGetI32", ncclParamGetI32(ph, &i32));
  REFUSED_USE("ncclParamGetI64", ncclParamGetI64(ph, &i64));
  REFUSED_USE("ncclParamGetU8", ncclParamGetU8(ph, &u8));
  REFUSED_USE("ncclParamGetU16", ncclParamGetU16(ph, &u16));
  REFUSED_USE("ncclParamGetU32", ncclParamGetU32(ph, &u32));
  REFUSED_USE("ncclParamGetU64", ncclParamGetU64(ph, &u64));
  REFUSED_USE("ncclParamGetStr", ncclParamGetStr(ph, &str));
  REFUSED_USE("ncclParamGet", ncclParamGet(ph, raw, sizeof raw, &len));
  REFUSED_USE("ncclParamGetParameter", ncclParamGetParameter("NCCL_DEBUG", &str, &len));
  REFUSED_USE("ncclParamGetAllParameterKeys", ncclParamGetAllParameterKeys(&keys, &len));
  ncclParamDumpAll();
  EXPECT(strstr(ncclGetLastError(NULL), "ncclParamDumpAll") != NULL,
         "ncclParamDumpAll: expected a last error naming it, got '%s'", ncclGetLastError(NULL));
  EXPECT(grown == NULL, "a refused ncclCommGrow: expected no communicator, got %p", (void*)grown);
  world_check(world, "AllReduce after the refused calls");
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
  rank_from_env(&rank_, &nranks_);
  if (nranks_ > MAXR) die("at most %d ranks", MAXR);
  for (int r = 0; r < nranks_; r++) all_ranks[r] = r;
  ncclUniqueId id = uid_from_env();

  local_checks(id);
  ncclComm_t world = init_world(id);
  query_checks(world);
  world_check(world, "AllReduce on the world");
  bad_argument_checks(world);
  nonblocking_checks(world);
  int members[MAXR], nmembers = 0;
  ncclComm_t half = split_checks(world, members, &nmembers);
  p2p_group_checks(world);
  two_comm_group_checks(world, half, members, nmembers);
  nested_group_checks(world);
  failed_group_checks(world);
  simulate_checks(world);
  memory_checks(world);
  refused_checks(world, id);
  if (rank_ == 0) init_all_checks();
  destroyed_checks(half);
  abort_checks(world);
  NCCLCHECK(ncclCommFinalize(world));
  NCCLCHECK(ncclCommDestroy(world));
  REFUSED_ARG(NULL, "ncclCommUserRank", ncclCommUserRank(world, &nmembers));
  report_passed();
  return 0;
}
