/*
 * Surviving dead ranks with ncclCommShrink. Four ranks (started directly by
 * the harness, not by `jitccl launch`, which would end the others when one
 * dies) run an AllReduce; then rank 2 kills itself with SIGKILL. The survivors'
 * next AllReduce must fail (an error, not a hang), and
 * ncclCommShrink(comm, {2}, 1, &child, NULL, NCCL_SHRINK_ABORT) must give them
 * a 3-rank communicator whose collectives are right.
 *
 * Option: --dead R[,R...] (default 2) names the ranks that die (all the ranks
 * of a host, when the harness places them on several).
 *
 * With --healthy FILE (under `jitccl launch`, 3+ ranks, none dies): the ranks
 * but the last shrink the communicator with NCCL_SHRINK_DEFAULT (the excluded
 * rank does not call, as NCCL specifies); the child's AllReduce is checked;
 * the child grows back to every rank with ncclCommGrow (its rank 0 makes the
 * grow id with ncclCommGetUniqueId and hands it to the last rank through FILE,
 * which joins as a new rank), and the grown communicator's AllReduce is
 * checked; then the parent, still whole, serves an AllReduce and an
 * ncclCommSplit of all ranks.
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

/* Writes the grow id to `path` whole (through a rename), for the new rank. */
static void publish_id(const char* path, const ncclUniqueId* id) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0) die("writing the grow id to %s", tmp);
  if (rename(tmp, path) != 0) die("renaming %s to %s", tmp, path);
}

/* Reads the grow id from `path`, waiting up to 30 s for it. */
static ncclUniqueId read_id(const char* path) {
  ncclUniqueId id;
  double t0 = now_s();
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    if (now_s() - t0 > 30) die("no grow id in %s after 30 s", path);
    sleep_ms(10);
  }
}

/* Shrinking a healthy communicator leaves the parent usable by every rank, and
 * the shrunk one grows back with the excluded rank joining it as a new rank. */
static int healthy(int rank, int nranks, const char* id_file) {
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
    ncclUniqueId gid;
    if (rank == 0) {
      NCCLCHECK(ncclCommGetUniqueId(child, &gid));
      publish_id(id_file, &gid);
    }
    ncclComm_t grown = NULL;
    NCCLCHECK(ncclCommGrow(child, nranks, rank == 0 ? &gid : NULL, -1, &grown, NULL));
    allreduce_check(grown, world, nranks, 1023, 8, "AllReduce on the grown comm (a rank of the shrunk one)");
    NCCLCHECK(ncclCommDestroy(grown));
    NCCLCHECK(ncclCommDestroy(child));
  } else {
    ncclUniqueId gid = read_id(id_file);
    ncclComm_t grown = NULL;
    NCCLCHECK(ncclCommGrow(NULL, nranks, &gid, rank, &grown, NULL));
    allreduce_check(grown, world, nranks, 1023, 8, "AllReduce on the grown comm (the new rank)");
    NCCLCHECK(ncclCommDestroy(grown));
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
  int rank, nranks, dead[64], ndead = 1;
  dead[0] = 2;
  if (argc == 3 && !strcmp(argv[1], "--dead")) {
    ndead = 0;
    for (char* t = strtok(argv[2], ","); t && ndead < 64; t = strtok(NULL, ",")) dead[ndead++] = atoi(t);
  }
  rank_from_env(&rank, &nranks);
  if (argc == 3 && !strcmp(argv[1], "--healthy")) return healthy(rank, nranks, argv[2]);
  if (nranks > 64) die("at most 64 ranks");
  int is_dead[64] = {0};
  for (int k = 0; k < ndead; k++) {
    if (dead[k] < 0 || dead[k] >= nranks) die("dead rank %d is not among %d ranks", dead[k], nranks);
    is_dead[dead[k]] = 1;
  }
  if (ndead < 1 || ndead >= nranks) die("need at least one dead rank and one survivor");
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
  if (is_dead[rank]) {
    if (bar != ncclSuccess || all != nranks)
      die("the barrier before dying: expected result 0 and sum %d, got %d and %d", nranks, (int)bar, all);
    note("dying");
    raise(SIGKILL);
    die("still alive after SIGKILL");
  }

  note("the barrier returned %d", (int)bar);
  /* The dead ranks never join: the call must fail, not hang. */
  size_t count = 4096;
  float* s = (float*)calloc(count, sizeof(float));
  float* r = (float*)calloc(count, sizeof(float));
  double t0 = now_s();
  ncclResult_t res = ncclAllReduce(s, r, count, ncclFloat, ncclSum, comm, NULL);
  double took = now_s() - t0;
  note("the AllReduce without rank %d returned %d (%s) after %.2f s: %s", dead[0], (int)res,
       ncclGetErrorString(res), took, ncclGetLastError(NULL));
  EXPECT(res != ncclSuccess && res != ncclInProgress,
         "an AllReduce with a dead rank: expected an error, got %d", (int)res);
  EXPECT(took < 30, "an AllReduce with a dead rank: expected the error within 30 s, took %.1f s", took);
  ncclResult_t state = ncclSuccess;
  NCCLCHECK(ncclCommGetAsyncError(comm, &state));
  EXPECT(state != ncclSuccess && state != ncclInProgress,
         "ncclCommGetAsyncError after a peer died: expected an error, got %d", (int)state);

  ncclComm_t child = NULL;
  t0 = now_s();
  NCCLCHECK(ncclCommShrink(comm, dead, ndead, &child, NULL, NCCL_SHRINK_ABORT));
  note("ncclCommShrink took %.2f s", now_s() - t0);
  EXPECT(child != NULL, "ncclCommShrink: expected a communicator, got NULL");
  int members[64], n = 0, want_rank = -1;
  for (int k = 0; k < nranks; k++) {
    if (k == rank) want_rank = n;
    if (!is_dead[k]) members[n++] = k;
  }
  int got_n = -1, got_rank = -1;
  NCCLCHECK(ncclCommCount(child, &got_n));
  NCCLCHECK(ncclCommUserRank(child, &got_rank));
  EXPECT(got_n == n, "shrunk comm: ncclCommCount: expected %d, got %d", n, got_n);
  EXPECT(got_rank == want_rank, "shrunk comm: ncclCommUserRank: expected %d, got %d", want_rank, got_rank);
  allreduce_check(child, members, n, 1023, 3, "AllReduce on the shrunk comm");
  allreduce_check(child, members, n, 300000, 4, "AllReduce on the shrunk comm, 300000 elements");

  /* A broadcast from the child's last rank (a former rank above a dead one). */
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
