/*
 * jitccl.h's process group from C, at 2 ranks (1 skips what needs a peer):
 *
 * - bad handles and arguments (NULL, never made, released, destroyed) refused with
 *   ncclInvalidArgument, never a crash; a job inside ncclGroupStart/End or inside a job
 *   refused with ncclInvalidUsage;
 * - works of jobs on the caller's memory: an all_reduce, 24 jobs in flight completing in
 *   order against a sequential reference, a job of grouped sends and receives;
 * - a job whose call is refused: its work fails with that code, naming the operation and
 *   the rank; the group goes on; the text's size is asked for without a failure; a job's
 *   other codes are its work's; a job that queued a call before the one refused ends once
 *   that call has run;
 * - a bounded wait that runs out (ncclInProgress) on a work that then completes;
 * - the watchdog: a send whose receiver never comes fails after the group's timeout with
 *   ncclTimeout, naming the operation, its number, the rank and the peer; the work behind
 *   it fails as not run, and the communicator is aborted;
 * - abort: pending works fail at once, later ones too;
 * - destroy, and a group whose communicator was destroyed first.
 */
#include "common.h"
#include "jitccl.h"

static int rank_, nranks_;
static ncclComm_t comm_;

/* The arguments of the jobs below. */
typedef struct {
  void* buf;
  size_t count;
  ncclDataType_t type;
  int root; /* broadcast's root; -1: an all_reduce */
  ncclComm_t comm;
} coll_t;

static ncclResult_t coll_job(void* arg) {
  coll_t* c = (coll_t*)arg;
  if (c->root < 0) return ncclAllReduce(c->buf, c->buf, c->count, c->type, ncclSum, c->comm, NULL);
  return ncclBroadcast(c->buf, c->buf, c->count, c->type, c->root, c->comm, NULL);
}

typedef struct {
  float* out;
  float* in;
  size_t count;
  int peer;
  ncclComm_t comm;
} ring_t;

/* Sends `in` to the next rank and receives the previous rank's into `out`, as one group. */
static ncclResult_t ring_job(void* arg) {
  ring_t* r = (ring_t*)arg;
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return res;
  ncclSend(r->in, r->count, ncclFloat, (rank_ + 1) % nranks_, r->comm, NULL);
  ncclRecv(r->out, r->count, ncclFloat, (rank_ + nranks_ - 1) % nranks_, r->comm, NULL);
  return ncclGroupEnd();
}

static ncclResult_t send_job(void* arg) {
  ring_t* r = (ring_t*)arg;
  return ncclSend(r->in, r->count, ncclFloat, r->peer, r->comm, NULL);
}

static ncclResult_t empty_job(void* arg) {
  (void)arg;
  return ncclSuccess;
}

/* A job that tries to submit another job: refused. */
static ncclResult_t nested_job(void* arg) {
  jitcclWork_t w = NULL;
  ncclResult_t r = jitcclProcessGroupSubmit(*(jitcclProcessGroup_t*)arg, "inner", -1, empty_job, NULL, &w);
  return r == ncclInvalidUsage && w == NULL ? ncclSuccess : ncclInternalError;
}

static ncclResult_t bad_type_job(void* arg) {
  coll_t* c = (coll_t*)arg;
  return ncclAllReduce(c->buf, c->buf, c->count, (ncclDataType_t)99, ncclSum, c->comm, NULL);
}

/* An all_reduce queued, then a refused call. */
static ncclResult_t queued_then_bad_job(void* arg) {
  ncclResult_t r = coll_job(arg);
  return r != ncclSuccess ? r : bad_type_job(arg);
}

/* A job that fails with the code it is given. */
static ncclResult_t code_job(void* arg) {
  return *(ncclResult_t*)arg;
}

/* The work's error text. */
static const char* error_of(jitcclWork_t w) {
  static char text[2048];
  size_t len = sizeof text;
  NCCLCHECK(jitcclWorkError(w, text, &len));
  return text;
}

static int completed(jitcclWork_t w) {
  int c = -1;
  NCCLCHECK(jitcclWorkIsCompleted(w, &c));
  return c;
}

/* Every rank's all_reduce on the main communicator: the ranks meet here. */
static void barrier(void) {
  int x = 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm_, NULL));
}

static void bad_handles(jitcclProcessGroup_t pg) {
  jitcclProcessGroup_t g = NULL;
  jitcclWork_t w = NULL;
  jitcclProcessGroup_t bogus_group = (jitcclProcessGroup_t)(uintptr_t)0x7fff1234;
  jitcclWork_t bogus_work = (jitcclWork_t)(uintptr_t)0x7fff1234;
  int c;
  size_t len = 8;
  char text[8];
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupCreate(NULL, 1.0, &g));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupCreate(comm_, 0.0, &g));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupCreate(comm_, -1.0, &g));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupCreate(comm_, NAN, &g));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupCreate(comm_, 1.0, NULL));
  EXPECT(g == NULL, "a refused create sets no group");
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(NULL, "x", -1, empty_job, NULL, &w));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(bogus_group, "x", -1, empty_job, NULL, &w));
  EXPECT(strstr(ncclGetLastError(NULL), "not a live process group") != NULL, "%s", ncclGetLastError(NULL));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(pg, "x", -1, NULL, NULL, &w));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(pg, NULL, -1, empty_job, NULL, &w));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(pg, "x", -1, empty_job, NULL, NULL));
  EXPECT(w == NULL, "a refused submit sets no work");
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkWait(NULL, 0));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkWait(bogus_work, 0));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkIsCompleted(NULL, &c));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkError(bogus_work, text, &len));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkRelease(NULL));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkRelease(bogus_work));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupAbort(NULL));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupDestroy(bogus_group));
  /* Inside a group of NCCL calls, and inside a job. */
  NCCLCHECK(ncclGroupStart());
  EXPECT_RESULT(ncclInvalidUsage, jitcclProcessGroupSubmit(pg, "x", -1, empty_job, NULL, &w));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "outer", -1, nested_job, &pg, &w));
  EXPECT_RESULT(ncclSuccess, jitcclWorkWait(w, -1));
  /* A released work is refused, everywhere. */
  EXPECT_RESULT(ncclSuccess, jitcclWorkRelease(w));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkRelease(w));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkWait(w, -1));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkIsCompleted(w, &c));
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkError(w, text, &len));
  EXPECT(strstr(ncclGetLastError(NULL), "not a live work") != NULL, "%s", ncclGetLastError(NULL));
}

static void works(jitcclProcessGroup_t pg) {
  /* One all_reduce. */
  enum { N = 1024 };
  float* x = malloc(N * sizeof *x);
  for (int i = 0; i < N; i++) x[i] = (float)(rank_ + 1) * (float)(i % 7);
  coll_t c = {x, N, ncclFloat, -1, comm_};
  jitcclWork_t w = NULL;
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "allreduce", -1, coll_job, &c, &w));
  EXPECT(w != NULL, "a work");
  EXPECT_RESULT(ncclSuccess, jitcclWorkWait(w, -1));
  EXPECT(completed(w) == 1, "completed after its wait");
  float want = (float)(nranks_ * (nranks_ + 1) / 2);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += x[i] != want * (float)(i % 7);
  EXPECT(bad == 0, "%d of %d elements wrong", bad, N);
  size_t len = 0;
  EXPECT_RESULT(ncclSuccess, jitcclWorkError(w, NULL, &len));
  EXPECT(len == 1, "an error text of a success is \"\": %zu bytes needed", len);
  EXPECT(strcmp(error_of(w), "") == 0, "no error: %s", error_of(w));
  NCCLCHECK(jitcclWorkRelease(w));
  free(x);

  /* 24 jobs in flight, waited for from the last: the value depends on their order. */
  enum { K = 24 };
  int64_t v = rank_ + 1, ref[8];
  for (int q = 0; q < nranks_; q++) ref[q] = q + 1;
  coll_t cs[K];
  jitcclWork_t ws[K];
  for (int i = 0; i < K; i++) {
    cs[i] = (coll_t){&v, 1, ncclInt64, i % 3 == 2 ? (i / 3) % nranks_ : -1, comm_};
    NCCLCHECK(jitcclProcessGroupSubmit(pg, i % 3 == 2 ? "broadcast" : "allreduce", -1, coll_job, &cs[i], &ws[i]));
    if (cs[i].root < 0) {
      int64_t s = 0;
      for (int q = 0; q < nranks_; q++) s += ref[q];
      for (int q = 0; q < nranks_; q++) ref[q] = s;
    } else {
      int64_t b = ref[cs[i].root];
      for (int q = 0; q < nranks_; q++) ref[q] = b;
    }
  }
  EXPECT_RESULT(ncclSuccess, jitcclWorkWait(ws[K - 1], -1));
  int done = 0;
  for (int i = 0; i < K; i++) done += completed(ws[i]);
  EXPECT(done == K, "the last work's end is every earlier one's: %d of %d completed", done, K);
  EXPECT(v == ref[rank_], "24 works in order: %lld, expected %lld", (long long)v, (long long)ref[rank_]);
  for (int i = 0; i < K; i++) {
    EXPECT_RESULT(ncclSuccess, jitcclWorkWait(ws[i], 0));
    NCCLCHECK(jitcclWorkRelease(ws[i]));
  }

  /* A job of grouped sends and receives. */
  float in[5], out[5] = {0};
  for (int i = 0; i < 5; i++) in[i] = (float)(100 * rank_ + i);
  ring_t r = {out, in, 5, -1, comm_};
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "ring", -1, ring_job, &r, &w));
  EXPECT_RESULT(ncclSuccess, jitcclWorkWait(w, -1));
  int prev = (rank_ + nranks_ - 1) % nranks_;
  EXPECT(out[0] == (float)(100 * prev) && out[4] == (float)(100 * prev + 4), "received %g..%g", out[0], out[4]);
  NCCLCHECK(jitcclWorkRelease(w));

  /* A refused call: the work fails with its code and names operation and rank. */
  float y[2] = {1, 2};
  coll_t bad_c = {y, 2, ncclFloat, -1, comm_};
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "badtype", -1, bad_type_job, &bad_c, &w));
  EXPECT(completed(w) == 1, "a refused job's work has ended");
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkWait(w, -1));
  const char* e = error_of(w);
  char rank_text[32];
  snprintf(rank_text, sizeof rank_text, "rank %d", rank_);
  EXPECT(strstr(e, "badtype") && strstr(e, rank_text) && strstr(e, "data type 99"), "%s", e);
  EXPECT(y[0] == 1 && y[1] == 2, "nothing written");
  /* Its size is asked for without a failure: the call's error stays the last one. */
  char last[512];
  snprintf(last, sizeof last, "%s", ncclGetLastError(NULL));
  len = 0;
  EXPECT_RESULT(ncclSuccess, jitcclWorkError(w, NULL, &len));
  EXPECT(len == strlen(e) + 1, "%zu bytes asked for a text of %zu", len, strlen(e));
  EXPECT(strcmp(last, ncclGetLastError(NULL)) == 0, "the last error stays: %s", ncclGetLastError(NULL));
  NCCLCHECK(jitcclWorkRelease(w));
  /* A job's other codes are its work's. */
  ncclResult_t codes[3] = {ncclUnhandledCudaError, ncclSystemError, ncclInternalError};
  for (int i = 0; i < 3; i++) {
    NCCLCHECK(jitcclProcessGroupSubmit(pg, "coded", -1, code_job, &codes[i], &w));
    EXPECT_RESULT(codes[i], jitcclWorkWait(w, -1));
    NCCLCHECK(jitcclWorkRelease(w));
  }
  /* A call refused after an all_reduce was queued (rank 1 comes 300 ms late): the work
   * ends once the all_reduce has run, on memory the caller kept until then. */
  float q[3] = {1, 2, 3};
  coll_t cq = {q, 3, ncclFloat, -1, comm_};
  if (rank_ == 1) sleep_ms(300);
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "queuedthenbad", -1, queued_then_bad_job, &cq, &w));
  if (rank_ == 0 && nranks_ > 1) EXPECT(completed(w) == 0, "pending while its all_reduce is");
  EXPECT_RESULT(ncclInvalidArgument, jitcclWorkWait(w, -1));
  EXPECT(q[0] == (float)nranks_ && q[2] == (float)(3 * nranks_), "the all_reduce ran: %g %g", q[0], q[2]);
  NCCLCHECK(jitcclWorkRelease(w));
  /* The group goes on. */
  coll_t c2 = {y, 2, ncclFloat, -1, comm_};
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "allreduce", -1, coll_job, &c2, &w));
  EXPECT_RESULT(ncclSuccess, jitcclWorkWait(w, -1));
  EXPECT(y[0] == (float)nranks_ && y[1] == (float)(2 * nranks_), "after a refused job: %g %g", y[0], y[1]);
  NCCLCHECK(jitcclWorkRelease(w));

  /* A bounded wait that runs out: rank 1 comes 600 ms late. */
  int32_t z = rank_;
  coll_t cz = {&z, 1, ncclInt32, -1, comm_};
  if (rank_ == 1) sleep_ms(600);
  NCCLCHECK(jitcclProcessGroupSubmit(pg, "allreduce", -1, coll_job, &cz, &w));
  if (rank_ == 0 && nranks_ > 1) {
    double t0 = now_s();
    EXPECT_RESULT(ncclInProgress, jitcclWorkWait(w, 100));
    double took = now_s() - t0;
    EXPECT(took >= 0.09 && took < 0.5, "a 100 ms wait gave up after %.3f s", took);
    EXPECT(completed(w) == 0, "still pending");
    EXPECT(strcmp(error_of(w), "") == 0, "a pending work has no error: %s", error_of(w));
  }
  EXPECT_RESULT(ncclSuccess, jitcclWorkWait(w, -1));
  EXPECT(z == nranks_ * (nranks_ - 1) / 2, "late all_reduce: %d", z);
  NCCLCHECK(jitcclWorkRelease(w));
}

/* A group of `timeout` seconds over a communicator split from the main one (*sub). */
static jitcclProcessGroup_t split_group(double timeout, ncclComm_t* sub) {
  jitcclProcessGroup_t pg;
  NCCLCHECK(ncclCommSplit(comm_, 0, rank_, sub, NULL));
  NCCLCHECK(jitcclProcessGroupCreate(*sub, timeout, &pg));
  return pg;
}

/* The watchdog: rank 1 never receives rank 0's send, larger than the FIFOs. */
static void watchdog(void) {
  ncclComm_t sub;
  jitcclProcessGroup_t pg = split_group(1.0, &sub);
  if (rank_ == 0) {
    enum { N = 1 << 20 };
    float* b = calloc(N, sizeof *b);
    ring_t r = {NULL, b, N, 1, sub};
    jitcclWork_t send, after;
    double t0 = now_s();
    NCCLCHECK(jitcclProcessGroupSubmit(pg, "send", 1, send_job, &r, &send));
    NCCLCHECK(jitcclProcessGroupSubmit(pg, "after", -1, empty_job, NULL, &after));
    EXPECT_RESULT(ncclTimeout, jitcclWorkWait(send, -1));
    double took = now_s() - t0;
    EXPECT(took >= 1.0 && took < 6.0, "the watchdog ended the send after %.2f s (timeout 1 s)", took);
    const char* e = error_of(send);
    EXPECT(strstr(e, "send #1") && strstr(e, "rank 0") && strstr(e, "waiting for rank 1") &&
               strstr(e, "watchdog aborted"),
           "%s", e);
    EXPECT_RESULT(ncclTimeout, jitcclWorkWait(after, 1000));
    e = error_of(after);
    EXPECT(strstr(e, "after #2") && strstr(e, "not run: send #1 failed first"), "%s", e);
    ncclResult_t async = ncclSuccess;
    NCCLCHECK(ncclCommGetAsyncError(sub, &async));
    EXPECT(async != ncclSuccess, "the communicator is aborted: %d", (int)async);
    /* Later works fail at once. */
    jitcclWork_t later;
    NCCLCHECK(jitcclProcessGroupSubmit(pg, "later", -1, empty_job, NULL, &later));
    EXPECT(completed(later) == 1 && jitcclWorkWait(later, 0) != ncclSuccess, "a later work fails at once");
    note("the watchdog ended a send after %.2f s: %s", took, error_of(send));
    NCCLCHECK(jitcclWorkRelease(send));
    NCCLCHECK(jitcclWorkRelease(after));
    NCCLCHECK(jitcclWorkRelease(later));
    free(b);
  }
  barrier();
  NCCLCHECK(jitcclProcessGroupDestroy(pg));
  NCCLCHECK(ncclCommAbort(sub));
}

/* Abort: rank 1 never joins rank 0's all_reduce. */
static void aborted(void) {
  ncclComm_t sub;
  jitcclProcessGroup_t pg = split_group(60.0, &sub);
  if (rank_ == 0) {
    float b[64] = {0};
    coll_t c = {b, 64, ncclFloat, -1, sub};
    jitcclWork_t w[2];
    NCCLCHECK(jitcclProcessGroupSubmit(pg, "allreduce", -1, coll_job, &c, &w[0]));
    NCCLCHECK(jitcclProcessGroupSubmit(pg, "allreduce", -1, coll_job, &c, &w[1]));
    sleep_ms(200);
    EXPECT(completed(w[0]) == 0, "pending before the abort");
    double t0 = now_s();
    EXPECT_RESULT(ncclSuccess, jitcclProcessGroupAbort(pg));
    for (int i = 0; i < 2; i++) {
      ncclResult_t r = jitcclWorkWait(w[i], 2000);
      EXPECT(r != ncclSuccess && r != ncclInProgress, "an aborted work fails: %d", (int)r);
      EXPECT(strstr(error_of(w[i]), "aborted") != NULL, "%s", error_of(w[i]));
      NCCLCHECK(jitcclWorkRelease(w[i]));
    }
    EXPECT(now_s() - t0 < 1.5, "the abort ended the works in %.2f s", now_s() - t0);
  }
  barrier();
  NCCLCHECK(jitcclProcessGroupDestroy(pg));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupDestroy(pg));
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupAbort(pg));
  jitcclWork_t w = NULL;
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(pg, "x", -1, empty_job, NULL, &w));
  NCCLCHECK(ncclCommAbort(sub));
}

/* A group whose communicator was destroyed first: its jobs are refused. */
static void comm_destroyed_first(void) {
  ncclComm_t sub;
  jitcclProcessGroup_t pg = split_group(10.0, &sub);
  NCCLCHECK(ncclCommDestroy(sub));
  jitcclWork_t w = NULL;
  EXPECT_RESULT(ncclInvalidArgument, jitcclProcessGroupSubmit(pg, "x", -1, empty_job, NULL, &w));
  EXPECT(strstr(ncclGetLastError(NULL), "the group's communicator") != NULL, "%s", ncclGetLastError(NULL));
  EXPECT_RESULT(ncclSuccess, jitcclProcessGroupDestroy(pg));
}

int main(void) {
  rank_from_env(&rank_, &nranks_);
  ncclUniqueId id = uid_from_env();
  NCCLCHECK(ncclCommInitRank(&comm_, nranks_, id, rank_));
  jitcclProcessGroup_t pg = NULL;
  EXPECT_RESULT(ncclSuccess, jitcclProcessGroupCreate(comm_, 30.0, &pg));
  bad_handles(pg);
  works(pg);
  EXPECT_RESULT(ncclSuccess, jitcclProcessGroupDestroy(pg));
  barrier();
  if (nranks_ >= 2) {
    watchdog();
    aborted();
  }
  comm_destroyed_first();
  NCCLCHECK(ncclCommDestroy(comm_));
  report_passed();
  return 0;
}
