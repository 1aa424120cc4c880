/*
 * Surviving a dead rank with ncclCommShrink. Four ranks (started directly by
 * the harness, not by `jitccl launch`, which would end the others when one
 * dies) run an AllReduce; then rank 2 kills itself with SIGKILL. The survivors'
 * next AllReduce must fail (an error, not a hang), and
 * ncclCommShrink(comm, {2}, 1, &child, NULL, NCCL_SHRINK_ABORT) must give them
 * a 3-rank communicator whose collectives are right.
 *
 * Option: --dead R (default 2) names the rank that dies.
 *
 * With --healthy (under `jitccl launch`, 3+ ranks, none dies): the ranks but
 * the last shrink the communicator with NCCL_SHRINK_DEFAULT (the excluded rank
 * does not call, as NCCL specifies); the child's AllReduce is checked, then the
 * parent, still whole, serves an AllReduce and an ncclCommSplit of all ranks.
 */
#include "common.h"

#include <signal.h>

static float val(int r, size_t i, int salt) { return (float)(r * 7 + (int)(i % 97) + salt); }

/* AllReduce (sum) of `count` floats on `comm`, whose rank k is world rank members[k]. */
static void allreduce_check(ncclComm_t comm, const int* members, int n, size_t count, int salt,
                            const char* what) {
  int me = -1;
  NCCLCHECK(ncclCommUserRank(comm, &me));
  float* s = (float*)malloc(count * sizeof(float));
  float* r = (float*)malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) s[i] = val(members[me], i, salt), r[i] = -1;
  NCCLCHECK(ncclAllReduce(s, r, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int k = 0; k < n; k++) want += val(members[k], i, salt);
    if (r[i] != want) die("%s: element %zu: expected %g, got %g", what, i, (double)want, (double)r[i]);
  }
  pass();
  free(s);
  free(r);
}

/* Shrinking a healthy communicator leaves the parent usable by every rank. */
static int healthy(int rank, int nranks) {
  if (nranks < 3) die("--healthy needs 3+ ranks");
  ncclUniqueId id = uid_from_env();
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  int world[64];
  for (int r = 0; r < nranks; r++) world[r] = r;
  int out = nranks - 1;
  if (rank != out) {
    ncclComm_t child = NULL;
    NCCLCHECK(ncclCommShrink(comm, &out, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(child != NULL, "ncclCommShrink (default): expected a communicator, got NULL");
    allreduce_check(child, world, nranks - 1, 1023, 5, "AllReduce on the shrunk comm (default)");
    NCCLCHECK(ncclCommDestroy(child));
  }
  allreduce_check(comm, world, nranks, 1023, 6, "AllReduce on the parent after a shrink");
  double t0 = now_s();
  ncclComm_t dup = NULL;
  ncclResult_t r = ncclCommSplit(comm, 0, rank, &dup, NULL);
  if (r != ncclSuccess)
    die("ncclCommSplit of the parent after an ncclCommShrink that excluded rank %d: expected 0, got %d "
        "after %.1f s: %s", out, (int)r, now_s() - t0, ncclGetLastError(NULL));
  pass();
  allreduce_check(dup, world, nranks, 1023, 7, "AllReduce on a split of the parent after a shrink");
  NCCLCHECK(ncclCommDestroy(dup));
  NCCLCHECK(ncclCommDestroy(comm));
  report_passed();
  return 0;
}

int main(int argc, char** argv) {
  int rank, nranks, dead = 2;
  if (argc == 3 && !strcmp(argv[1], "--dead")) dead = atoi(argv[2]);
  rank_from_env(&rank, &nranks);
  if (argc == 2 && !strcmp(argv[1], "--healthy")) return healthy(rank, nranks);
  if (nranks < 2 || dead < 0 || dead >= nranks) die("need 2+ ranks and a dead rank among them");
  ncclUniqueId id = uid_from_env();
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  int world[64];
  for (int r = 0; r < nranks; r++) world[r] = r;
  allreduce_check(comm, world, nranks, 1023, 1, "AllReduce of all ranks");
  allreduce_check(comm, world, nranks, 70000, 2, "AllReduce of all ranks, 70000 elements");

  /* A barrier: when it is done on the dying rank, every rank has finished the checks
   * above, so the death cannot fail them. The survivors' barrier itself may see the
   * death (or not): either is right. */
  int one = 1, all = 0;
  ncclResult_t bar = ncclAllReduce(&one, &all, 1, ncclInt32, ncclSum, comm, NULL);
  if (rank == dead) {
    if (bar != ncclSuccess || all != nranks)
      die("the barrier before dying: expected result 0 and sum %d, got %d and %d", nranks, (int)bar, all);
    note("dying");
    raise(SIGKILL);
    die("still alive after SIGKILL");
  }

  note("the barrier returned %d", (int)bar);
  /* The dead rank never joins: the call must fail, not hang. */
  size_t count = 4096;
  float* s = (float*)calloc(count, sizeof(float));
  float* r = (float*)calloc(count, sizeof(float));
  double t0 = now_s();
  ncclResult_t res = ncclAllReduce(s, r, count, ncclFloat, ncclSum, comm, NULL);
  double took = now_s() - t0;
  note("the AllReduce without rank %d returned %d (%s) after %.2f s: %s", dead, (int)res,
       ncclGetErrorString(res), took, ncclGetLastError(NULL));
  EXPECT(res != ncclSuccess && res != ncclInProgress,
         "an AllReduce with a dead rank: expected an error, got %d", (int)res);
  EXPECT(took < 30, "an AllReduce with a dead rank: expected the error within 30 s, took %.1f s", took);
  ncclResult_t state = ncclSuccess;
  NCCLCHECK(ncclCommGetAsyncError(comm, &state));
  EXPECT(state != ncclSuccess && state != ncclInProgress,
         "ncclCommGetAsyncError after a peer died: expected an error, got %d", (int)state);

  int exclude[1] = {dead};
  ncclComm_t child = NULL;
  t0 = now_s();
  NCCLCHECK(ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_ABORT));
  note("ncclCommShrink took %.2f s", now_s() - t0);
  EXPECT(child != NULL, "ncclCommShrink: expected a communicator, got NULL");
  int members[64], n = 0;
  for (int k = 0; k < nranks; k++)
    if (k != dead) members[n++] = k;
  int got_n = -1, got_rank = -1;
  NCCLCHECK(ncclCommCount(child, &got_n));
  NCCLCHECK(ncclCommUserRank(child, &got_rank));
  EXPECT(got_n == nranks - 1, "shrunk comm: ncclCommCount: expected %d, got %d", nranks - 1, got_n);
  EXPECT(got_rank == (rank < dead ? rank : rank - 1),
         "shrunk comm: ncclCommUserRank: expected %d, got %d", rank < dead ? rank : rank - 1, got_rank);
  allreduce_check(child, members, n, 1023, 3, "AllReduce on the shrunk comm");
  allreduce_check(child, members, n, 300000, 4, "AllReduce on the shrunk comm, 300000 elements");

  /* A broadcast from the child's last rank (a former rank above the dead one). */
  int root = n - 1;
  for (size_t i = 0; i < count; i++) s[i] = got_rank == root ? (float)(i % 1000) : -1;
  NCCLCHECK(ncclBroadcast(s, s, count, ncclFloat, root, child, NULL));
  for (size_t i = 0; i < count; i++)
    if (s[i] != (float)(i % 1000))
      die("Broadcast on the shrunk comm: element %zu: expected %g, got %g", i, (double)(i % 1000), (double)s[i]);
  pass();

  NCCLCHECK(ncclCommFinalize(child));
  NCCLCHECK(ncclCommDestroy(child));
  NCCLCHECK(ncclCommAbort(comm));
  free(s);
  free(r);
  report_passed();
  return 0;
}
