/*
 * What the lifecycle and group programs share: the rank, the world communicator (made
 * with the config of an older NCCL), a checked AllReduce on any communicator of world
 * ranks, and the parity split.
 */
#ifndef JITCCL_CAPI_TEST_WORLD_H
#define JITCCL_CAPI_TEST_WORLD_H

/* common.h first: it asks for POSIX 2008 before any system header. */
#include "common.h"

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

/* Parity halves, keys reversed: the child's rank 0 is the highest world rank; its
 * members (world ranks, in child-rank order) go to members[0..*nmembers). */
static ncclComm_t parity_split(ncclComm_t world, int* members, int* nmembers) {
  ncclComm_t half = NULL;
  NCCLCHECK(ncclCommSplit(world, rank_ % 2, nranks_ - rank_, &half, NULL));
  EXPECT(half != NULL, "ncclCommSplit: expected a communicator, got NULL");
  int n = 0;
  for (int r = nranks_ - 1; r >= 0; r--)
    if (r % 2 == rank_ % 2) members[n++] = r;
  *nmembers = n;
  return half;
}

/* Rank, size and the id from the launcher; every world rank listed in all_ranks. */
static ncclUniqueId world_start(void) {
  rank_from_env(&rank_, &nranks_);
  if (nranks_ > MAXR) die("at most %d ranks", MAXR);
  for (int r = 0; r < nranks_; r++) all_ranks[r] = r;
  return uid_from_env();
}

#endif
