/*
 * jitccl.h's wire formats from C, each rank checking against its own reference (every rank
 * makes every rank's inputs):
 *
 * - jitcclWireFromName on good and bad names;
 * - the five jitcclWiredX calls in several wires, on f32 (and f16 / bf16) elements: within
 *   the wire's documented bound of the exact result (docs/guide.md, "Wire formats"), not
 *   the exact bits (the wire is used), and the same bits on every rank;
 * - inside a group, and a group holding a refused call (nothing of it runs);
 * - bad input refused with ncclInvalidArgument, ncclGetLastError saying why, and nothing
 *   written: an unknown format, a bad block, an integer type, an op other than sum or avg,
 *   a wire no narrower than the type;
 * - with `--default NAME` (the harness sets JITCCL_WIRE=NAME, or nothing for "exact"):
 *   plain ncclAllReduce is the wired call of that wire bit for bit where it fits, and stays
 *   exact for an integer type and for max.
 */
#include "common.h"
#include "jitccl.h"

static int rank_, nranks_;
static ncclComm_t comm_;

/* Rank r's input element i (salted per call): in [-1, 1), full f32 mantissas, and an
 * outlier of magnitude 300 every 97 elements, so that blocks differ in scale. */
static double input(int r, size_t i, int salt) {
  uint32_t h = (uint32_t)(r * 7919 + salt * 104729) ^ (uint32_t)(i * 2654435761u);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  double v = (double)(h & 0xFFFFFF) / (double)0x800000 - 1.0;
  return i % 97 == 5 ? v * 300.0 : v;
}

/* ---- Error bounds (docs/guide.md, "Wire formats") ---------------------------------------- */

typedef struct {
  const char* name;
  double u, c, t; /* relative, block-relative and absolute terms of one encoding */
  int block;      /* elements per scale (0: unscaled) */
} law;

static law law_of(const char* name) {
  jitcclWire_t w;
  NCCLCHECK(jitcclWireFromName(name, &w));
  law l = {name, 0, 0, 0, w.block};
  switch (w.format) {
    case jitcclWireBf16: l.u = 0x1p-8; l.t = 0x1p-134; break;
    case jitcclWireFp16: l.u = 0x1p-11; l.t = 0x1p-25; break;
    case jitcclWireFp8E4M3: l.u = 0x1p-4; l.c = 0x1p-17; l.t = 0x1p-136; break;
    case jitcclWireFp8E5M2: l.u = 0x1p-3; l.c = 0x1p-31; l.t = 0x1p-143; break;
    case jitcclWireInt8: l.c = 1.0 / 250; l.t = 0x1p-140; break;
    default: die("%s: no error law for format %d", name, (int)w.format);
  }
  return l;
}

/* The bound of `hops` encodings of an element whose sum of magnitudes is M, A the largest
 * such sum within a block of it; `out_u`: the final rounding to a 16-bit element type. */
static double bound(const law* l, int hops, double M, double A, double ref, double out_u) {
  return hops * ((l->u + 0x1p-24) * M + l->c * A + l->t) * pow(1 + l->u, hops) + out_u * fabs(ref) + 1e-30;
}

/* A[i]: the largest M[j] with |i - j| < block (block 0: M[i] itself). */
static void window_max(const double* M, double* A, size_t n, int block) {
  for (size_t i = 0; i < n; i++) {
    double a = M[i];
    size_t lo = block && i + 1 >= (size_t)block ? i + 1 - (size_t)block : 0;
    size_t hi = block ? i + (size_t)block : i + 1;
    for (size_t j = block ? lo : i; j < hi && j < n; j++) a = fmax(a, M[j]);
    A[i] = a;
  }
}

/* ---- Helpers ------------------------------------------------------------------------------ */

static jitcclWire_t wire_named(const char* name) {
  jitcclWire_t w = {jitcclWireExact, -7};
  NCCLCHECK(jitcclWireFromName(name, &w));
  return w;
}

/* Every rank holds the same `bytes` at `buf` (gathered exactly, compared here). */
static void same_on_every_rank(const void* buf, size_t bytes, const char* what) {
  unsigned char* all = (unsigned char*)malloc(bytes * (size_t)nranks_ + 1);
  if (!all) die("out of memory");
  NCCLCHECK(ncclAllGather(buf, all, bytes, ncclUint8, comm_, NULL));
  for (int q = 0; q < nranks_; q++)
    EXPECT(memcmp(all + (size_t)q * bytes, buf, bytes) == 0, "%s: rank %d's result differs from rank %d's", what, q,
           rank_);
  free(all);
}

static const char* last(void) { return ncclGetLastError(NULL); }

/* ---- Names ---------------------------------------------------------------------------------- */

static void names(void) {
  static const struct { const char* name; jitcclWireFormat_t format; int block; } good[] = {
      {"exact", jitcclWireExact, 0},        {"bf16", jitcclWireBf16, 0},
      {"FP16", jitcclWireFp16, 0},          {"fp8e4m3", jitcclWireFp8E4M3, 64},
      {"fp8e4m3b128", jitcclWireFp8E4M3, 128}, {"e5m2b32", jitcclWireFp8E5M2, 32},
      {"int8b256", jitcclWireInt8, 256},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    jitcclWire_t w = wire_named(good[i].name);
    EXPECT(w.format == good[i].format && w.block == good[i].block, "%s: got format %d block %d", good[i].name,
           (int)w.format, w.block);
  }
  static const struct { const char* name; const char* why; } bad[] = {
      {"int4", "unknown wire 'int4'"}, {"int8b48", "the blocks are 32, 64, 128, 256"},
      {"bf16b64", "takes no block"},   {"", "unknown wire"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    jitcclWire_t w = {jitcclWireInt8, 99};
    EXPECT_RESULT(ncclInvalidArgument, jitcclWireFromName(bad[i].name, &w));
    EXPECT(strstr(last(), bad[i].why) && strstr(last(), "jitcclWireFromName"), "'%s': last error '%s'", bad[i].name,
           last());
    EXPECT(w.format == jitcclWireInt8 && w.block == 99, "'%s': *wire was written", bad[i].name);
  }
  EXPECT_RESULT(ncclInvalidArgument, jitcclWireFromName(NULL, NULL));
}

/* ---- The wired collectives ------------------------------------------------------------------ */

enum coll { ALLREDUCE, REDUCE, REDUCESCATTER, ALLGATHER, BROADCAST };
static const char* COLL_NAMES[] = {"AllReduce", "Reduce", "ReduceScatter", "AllGather", "Broadcast"};

/* One wired call of `coll` in the wire `name` on `count` elements (per rank's block for
 * ReduceScatter and AllGather) of `type`, checked against the exact result. Returns the
 * elements that differ from the exact result. */
static size_t wired(enum coll coll, const char* name, const type_info* t, size_t count, int salt) {
  law l = law_of(name);
  jitcclWire_t w = wire_named(name);
  const int n = nranks_, root = n - 1;
  const size_t in_n = coll == REDUCESCATTER ? count * (size_t)n : count;
  const size_t out_n = coll == ALLGATHER ? count * (size_t)n : count;
  const int reduces = coll == ALLREDUCE || coll == REDUCE || coll == REDUCESCATTER;
  const double out_u = t->dt == ncclBfloat16 ? 0x1p-8 : t->dt == ncclFloat16 ? 0x1p-11 : 0;
  void* send = xalloc(t, in_n);
  void* recv = xalloc(t, out_n);
  double* ref = (double*)calloc(out_n, sizeof(double));
  double* M = (double*)calloc(out_n, sizeof(double));
  double* A = (double*)calloc(out_n, sizeof(double));
  if (!ref || !M || !A) die("out of memory");
  for (size_t i = 0; i < in_n; i++) store(t, send, i, input(rank_, i, salt));
  /* The exact result (of the values as the type holds them), and the sums of magnitudes. */
  void* tmp = xalloc(t, in_n);
  for (int q = 0; q < n; q++) {
    for (size_t i = 0; i < in_n; i++) store(t, tmp, i, input(q, i, salt));
    for (size_t i = 0; i < out_n; i++) {
      double v;
      if (reduces) {
        v = load(t, tmp, coll == REDUCESCATTER ? (size_t)rank_ * count + i : i);
      } else if (coll == ALLGATHER) {
        if ((size_t)q != i / count) continue;
        v = load(t, tmp, i % count);
      } else {
        if (q != root) continue;
        v = load(t, tmp, i);
      }
      ref[i] += v;
      M[i] += fabs(v);
    }
  }
  free(tmp);
  window_max(M, A, out_n, l.block);
  poison(t, recv, out_n);
  ncclResult_t r = ncclSuccess;
  switch (coll) {
    case ALLREDUCE: r = jitcclWiredAllReduce(send, recv, count, t->dt, ncclSum, w, comm_, NULL); break;
    case REDUCE: r = jitcclWiredReduce(send, recv, count, t->dt, ncclSum, root, w, comm_, NULL); break;
    case REDUCESCATTER: r = jitcclWiredReduceScatter(send, recv, count, t->dt, ncclSum, w, comm_, NULL); break;
    case ALLGATHER: r = jitcclWiredAllGather(send, recv, count, t->dt, w, comm_, NULL); break;
    case BROADCAST: r = jitcclWiredBroadcast(send, recv, count, t->dt, root, w, comm_, NULL); break;
  }
  if (r != ncclSuccess)
    die("jitcclWired%s in %s of %s: %d (%s); last error: %s", COLL_NAMES[coll], name, t->name, (int)r,
        ncclGetErrorString(r), ncclGetLastError(comm_));
  pass();
  const int hops = reduces ? n : 1;
  size_t differ = 0;
  if (coll == REDUCE && rank_ != root) {
    EXPECT(is_poisoned(t, recv, out_n), "Reduce in %s: a non-root's recv was written", name);
  } else {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < out_n; i++) {
      double got = load(t, recv, i), err = fabs(got - ref[i]);
      double b = bound(&l, hops, M[i], A[i], ref[i], out_u);
      if (!(err <= b))
        die("%s in %s of %s, %d ranks: element %zu is %.9g, exact %.9g: error %.3g above the bound %.3g",
            COLL_NAMES[coll], name, t->name, n, i, got, ref[i], err, b);
      if (err / b > worst) worst = err / b, at = i;
      /* The exact f32 sum may round differently from a double's: count real departures. */
      if (err > 0x1p-20 * M[i]) differ++;
    }
    pass();
    note("%s in %s of %zu %s: largest error %.2f of the bound (element %zu); %zu of %zu elements off the exact",
         COLL_NAMES[coll], name, count, t->name, worst, at, differ, out_n);
  }
  if (coll == ALLREDUCE || coll == ALLGATHER || coll == BROADCAST)
    same_on_every_rank(recv, out_n * t->size, COLL_NAMES[coll]);
  free(send);
  free(recv);
  free(ref);
  free(M);
  free(A);
  return differ;
}

static void collectives(void) {
  const type_info* f32 = type_named("float");
  /* Every collective in bf16 and in a scaled wire; AllReduce in every format. */
  const char* both[] = {"bf16", "int8b64"};
  for (int c = ALLREDUCE; c <= BROADCAST; c++)
    for (int k = 0; k < 2; k++) {
      size_t differ = wired((enum coll)c, both[k], f32, c == REDUCESCATTER || c == ALLGATHER ? 300 : 700, c + k);
      if (nranks_ > 1 && !(c == REDUCE && rank_ != nranks_ - 1))
        EXPECT(differ > 0, "%s in %s: every element exact: the wire was not used", COLL_NAMES[c], both[k]);
    }
  const char* more[] = {"fp16", "fp8e4m3b128", "fp8e5m2b32"};
  for (int k = 0; k < 3; k++) {
    size_t differ = wired(ALLREDUCE, more[k], f32, 700, 10 + k);
    if (nranks_ > 1) EXPECT(differ > 0, "AllReduce in %s: every element exact", more[k]);
  }
  /* 16-bit elements in an 8-bit wire. */
  wired(ALLREDUCE, "fp8e4m3", type_named("half"), 500, 20);
  wired(ALLREDUCE, "int8b32", type_named("bfloat16"), 500, 21);
}

/* In a group: two wired calls run at its end; a group holding a refused call runs nothing. */
static void groups(void) {
  const size_t count = 256;
  float* a = (float*)malloc(count * sizeof(float));
  float* b = (float*)malloc(count * (size_t)nranks_ * sizeof(float));
  float* ref_a = (float*)malloc(count * sizeof(float));
  float mine = (float)input(rank_, 3, 31);
  if (!a || !b || !ref_a) die("out of memory");
  for (size_t i = 0; i < count; i++) a[i] = (float)input(rank_, i, 30);
  NCCLCHECK(jitcclWiredAllReduce(a, ref_a, count, ncclFloat32, ncclSum, wire_named("bf16"), comm_, NULL));
  for (size_t i = 0; i < count; i++) a[i] = (float)input(rank_, i, 30);
  memset(b, 0, count * (size_t)nranks_ * sizeof(float));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(jitcclWiredAllReduce(a, a, count, ncclFloat32, ncclSum, wire_named("bf16"), comm_, NULL));
  NCCLCHECK(jitcclWiredAllGather(&mine, b, 1, ncclFloat32, wire_named("int8b32"), comm_, NULL));
  NCCLCHECK(ncclGroupEnd());
  EXPECT(memcmp(a, ref_a, count * sizeof(float)) == 0, "the AllReduce in a group differs from the one outside");
  /* One value per block: its scale makes it the block's largest, within a / 250. */
  for (int q = 0; q < nranks_; q++) {
    double want = (double)(float)input(q, 3, 31);
    EXPECT(fabs(b[q] - want) <= fabs(want) / 250 + 0x1p-140, "AllGather in a group: rank %d's value %g, not %g", q,
           (double)b[q], want);
  }

  /* A refused call in a group: the group fails, and its other call does not run. */
  const type_info* f32 = type_named("float");
  poison(f32, b, count);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(jitcclWiredAllReduce(a, b, count, ncclFloat32, ncclSum, wire_named("bf16"), comm_, NULL));
  EXPECT_RESULT(ncclInvalidArgument,
                jitcclWiredAllReduce(a, a, count, ncclFloat32, ncclMax, wire_named("bf16"), comm_, NULL));
  EXPECT_RESULT(ncclInvalidArgument, ncclGroupEnd());
  EXPECT(is_poisoned(f32, b, count), "a group holding a refused call ran its other call");
  free(a);
  free(b);
  free(ref_a);
}

/* Bad input: refused, said why, nothing written; the communicator stays usable. */
static void refused(void) {
  const size_t count = 64;
  int32_t ints[64];
  float f[64];
  unsigned char out[64 * 4];
  for (size_t i = 0; i < count; i++) ints[i] = (int32_t)i, f[i] = (float)i;
  const jitcclWire_t bf16 = wire_named("bf16");
  const struct { jitcclWire_t w; ncclDataType_t dt; ncclRedOp_t op; const char* why; } cases[] = {
      {{(jitcclWireFormat_t)9, 0}, ncclFloat32, ncclSum, "the formats are 0 (exact) to 5 (int8)"},
      {{jitcclWireInt8, 100}, ncclFloat32, ncclSum, "the blocks are 32, 64, 128, 256"},
      {{jitcclWireInt8, -32}, ncclFloat32, ncclSum, "out of range"},
      {{jitcclWireBf16, 64}, ncclFloat32, ncclSum, "takes no block"},
      {bf16, ncclInt32, ncclSum, "carries f32, f16 or bf16 elements, not i32"},
      {bf16, ncclFloat32, ncclMax, "sum or avg only"},
      {bf16, ncclBfloat16, ncclSum, "no narrower than bf16"},
      {wire_named("int8"), ncclFloat64, ncclSum, "not f64"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    memset(out, 0xA5, sizeof out);
    const void* in = cases[k].dt == ncclInt32 ? (const void*)ints : (const void*)f;
    size_t n = cases[k].dt == ncclFloat64 ? count / 2 : count;
    EXPECT_RESULT(ncclInvalidArgument,
                  jitcclWiredAllReduce(in, out, n, cases[k].dt, cases[k].op, cases[k].w, comm_, NULL));
    const char* e = ncclGetLastError(comm_);
    EXPECT(strstr(e, cases[k].why) && strstr(e, "jitcclWiredAllReduce"), "case %zu: last error '%s'", k, e);
    int untouched = 1;
    for (size_t i = 0; i < sizeof out; i++) untouched &= out[i] == 0xA5;
    EXPECT(untouched, "case %zu: a refused call wrote its output", k);
  }
  /* The others name themselves too. */
  EXPECT_RESULT(ncclInvalidArgument, jitcclWiredBroadcast(ints, out, count, ncclInt32, 0, bf16, comm_, NULL));
  EXPECT(strstr(last(), "jitcclWiredBroadcast") != NULL, "%s", last());
  EXPECT_RESULT(ncclInvalidArgument, jitcclWiredAllGather(ints, out, 1, ncclInt8, bf16, comm_, NULL));
  EXPECT(strstr(last(), "jitcclWiredAllGather") != NULL, "%s", last());
  EXPECT_RESULT(ncclInvalidArgument, jitcclWiredReduce(f, out, count, ncclFloat32, ncclProd, 0, bf16, comm_, NULL));
  EXPECT(strstr(last(), "jitcclWiredReduce") != NULL, "%s", last());
  EXPECT_RESULT(ncclInvalidArgument,
                jitcclWiredReduceScatter(f, out, 1, ncclFloat32, ncclSum, (jitcclWire_t){jitcclWireFp16, 32}, comm_,
                                         NULL));
  EXPECT(strstr(last(), "jitcclWiredReduceScatter") != NULL, "%s", last());
  EXPECT_RESULT(ncclInvalidArgument, jitcclWiredAllReduce(f, out, count, ncclFloat32, ncclSum, bf16, NULL, NULL));
  /* Still usable, every rank alike. */
  NCCLCHECK(jitcclWiredAllReduce(f, out, count, ncclFloat32, ncclSum, bf16, comm_, NULL));
  float got;
  memcpy(&got, out + 4 * 5, 4);
  EXPECT(got == 5.0f * (float)nranks_, "after the refusals: element 5 is %g", (double)got);
}

/* `--default NAME`: what JITCCL_WIRE (set to NAME by the harness) does to NCCL's calls. */
static void defaults(const char* name) {
  const size_t count = 700;
  float* send = (float*)malloc(count * sizeof(float));
  float* plain = (float*)malloc(count * sizeof(float));
  float* in_wire = (float*)malloc(count * sizeof(float));
  float* exact = (float*)malloc(count * sizeof(float));
  if (!send || !plain || !in_wire || !exact) die("out of memory");
  for (size_t i = 0; i < count; i++) send[i] = (float)input(rank_, i, 40);
  NCCLCHECK(ncclAllReduce(send, plain, count, ncclFloat32, ncclSum, comm_, NULL));
  NCCLCHECK(jitcclWiredAllReduce(send, in_wire, count, ncclFloat32, ncclSum, wire_named(name), comm_, NULL));
  NCCLCHECK(jitcclWiredAllReduce(send, exact, count, ncclFloat32, ncclSum, wire_named("exact"), comm_, NULL));
  EXPECT(memcmp(plain, in_wire, count * sizeof(float)) == 0, "ncclAllReduce is not the %s wire's result", name);
  int is_exact = memcmp(plain, exact, count * sizeof(float)) == 0;
  if (strcmp(name, "exact") != 0 && nranks_ > 1)
    EXPECT(!is_exact, "JITCCL_WIRE=%s: ncclAllReduce gave the exact result", name);
  else
    EXPECT(is_exact, "without JITCCL_WIRE: ncclAllReduce is not exact");
  /* What the default does not fit stays exact, without an error: max, and an integer type. */
  NCCLCHECK(ncclAllReduce(send, plain, count, ncclFloat32, ncclMax, comm_, NULL));
  for (size_t i = 0; i < count; i++) {
    double m = -INFINITY;
    for (int q = 0; q < nranks_; q++) m = fmax(m, (double)(float)input(q, i, 40));
    if ((double)plain[i] != m) die("JITCCL_WIRE=%s: max of element %zu is %g, not %g", name, i, (double)plain[i], m);
  }
  pass();
  int32_t ints[16], sums[16];
  for (int i = 0; i < 16; i++) ints[i] = 1000003 * (rank_ + 1) + i;
  NCCLCHECK(ncclAllReduce(ints, sums, 16, ncclInt32, ncclSum, comm_, NULL));
  for (int i = 0; i < 16; i++)
    EXPECT(sums[i] == 1000003 * nranks_ * (nranks_ + 1) / 2 + nranks_ * i, "int32 sum of element %d: %d", i,
           (int)sums[i]);
  free(send);
  free(plain);
  free(in_wire);
  free(exact);
}

int main(int argc, char** argv) {
  rank_from_env(&rank_, &nranks_);
  g_rank = rank_;
  const char* dflt = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--default") && i + 1 < argc) dflt = argv[++i];
    else die("usage: wire [--default NAME]");
  }
  ncclUniqueId id = uid_from_env();
  NCCLCHECK(ncclCommInitRank(&comm_, nranks_, id, rank_));
  if (dflt) {
    defaults(dflt);
  } else {
    names();
    collectives();
    groups();
    refused();
  }
  NCCLCHECK(ncclCommDestroy(comm_));
  report_passed();
  return 0;
}
