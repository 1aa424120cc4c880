/*
 * Groups, memory and refusals through the C API, on ranks started by `jitccl launch`
 * (rank and size from RANK / WORLD_SIZE, the id from NCCL_COMM_ID):
 *
 *  - a group of sends and receives to and from every peer (itself included),
 *    posted in different orders, of different sizes, some larger than a FIFO
 *    slot; a group over two communicators; nested groups; a group with a failing
 *    call (ncclGroupEnd returns its error and runs nothing);
 *  - ncclGroupSimulateEnd: an estimate, and nothing run;
 *  - ncclMemAlloc / ncclMemFree, ncclCommRegister, windows on ncclMemAlloc'd
 *    buffers with an AllReduce on them (and refused on malloc'd memory);
 *  - the functions jitccl refuses: ncclInvalidUsage naming them; ncclCommGrow's misuses.
 */
#include "world.h"

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

static void refused_checks(ncclComm_t world) {
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
  /* Grow's misuses, refused before anything is exchanged: no more ranks than the
   * communicator's, a kept rank other than -1, a second grow id before a grow used the
   * first. */
  EXPECT_RESULT(ncclInvalidArgument, ncclCommGrow(world, nranks_, NULL, -1, &grown, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclCommGrow(world, nranks_ + 1, NULL, rank_, &grown, NULL));
  NCCLCHECK(ncclCommGetUniqueId(world, &other));
  EXPECT_RESULT(ncclInvalidUsage, ncclCommGetUniqueId(world, &other));
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

int main(void) {
  ncclUniqueId id = world_start();
  ncclComm_t world = init_world(id);
  int members[MAXR], nmembers = 0;
  ncclComm_t half = parity_split(world, members, &nmembers);
  p2p_group_checks(world);
  two_comm_group_checks(world, half, members, nmembers);
  nested_group_checks(world);
  failed_group_checks(world);
  simulate_checks(world);
  memory_checks(world);
  refused_checks(world);
  NCCLCHECK(ncclCommDestroy(half));
  NCCLCHECK(ncclCommDestroy(world));
  report_passed();
  return 0;
}
