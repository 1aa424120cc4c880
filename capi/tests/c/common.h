/*
 * Shared helpers of the C API's test programs (the .c files beside it), built by
 * capi/tests/c_api.rs with -std=c99 -Wall -Wextra -Werror against
 * capi/include/nccl.h and libnccl.so.
 *
 * - failure reporting: every failed check prints "rank R: FAILED: <what>:
 *   expected X, got Y" (or the call, its result and ncclGetLastError) and
 *   exits 1, so the launcher fails fast;
 * - a check counter, reported at the end as "rank R: N checks passed";
 * - rank, size and the unique id from the environment (RANK, WORLD_SIZE,
 *   NCCL_COMM_ID set by the harness; MASTER_ADDR/MASTER_PORT as a fallback);
 * - the 12 data types: names, sizes, and conversions from/to double,
 *   including our own half, bfloat16 and fp8 (e4m3 "fn", saturating; e5m2)
 *   codecs, so the references do not depend on the library's.
 *
 * Every function is static inline: each program includes this header once
 * and uses a subset, without unused-function warnings.
 */
#ifndef JITCCL_CAPI_TEST_COMMON_H
#define JITCCL_CAPI_TEST_COMMON_H

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl.h"

#if defined(__GNUC__)
#define TEST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TEST_NORETURN __attribute__((noreturn))
#else
#define TEST_PRINTF(f, a)
#define TEST_NORETURN
#endif

/* ---- Identity and counting --------------------------------------------- */

/* This process's rank in messages (-1 until known) and the checks passed. */
static int g_rank = -1;
static long g_checks = 0;

static inline TEST_NORETURN TEST_PRINTF(1, 2) void die(const char* fmt, ...) {
  va_list ap;
  char msg[2048];
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, msg);
  fflush(stderr);
  fflush(stdout);
  exit(1);
}

static inline TEST_PRINTF(1, 2) void note(const char* fmt, ...) {
  va_list ap;
  char msg[2048];
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("rank %d: %s\n", g_rank, msg);
  fflush(stdout);
}

/* One passed check. */
static inline void pass(void) { g_checks++; }

/* The final line the harness looks for. */
static inline void report_passed(void) {
  printf("rank %d: %ld checks passed\n", g_rank, g_checks);
  fflush(stdout);
}

/* A call that must succeed. */
#define NCCLCHECK(call)                                                                   \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess)                                                                \
      die("%s:%d: %s returned %d (%s); last error: %s", __FILE__, __LINE__, #call, (int)r_, \
          ncclGetErrorString(r_), ncclGetLastError(NULL));                                \
  } while (0)

/* A call that must return `want` (a counted check). */
#define EXPECT_RESULT(want, call)                                                           \
  do {                                                                                      \
    ncclResult_t r_ = (call);                                                               \
    if (r_ != (want))                                                                       \
      die("%s:%d: %s: expected result %d (%s), got %d (%s); last error: %s", __FILE__,      \
          __LINE__, #call, (int)(want), ncclGetErrorString(want), (int)r_,                  \
          ncclGetErrorString(r_), ncclGetLastError(NULL));                                  \
    pass();                                                                                 \
  } while (0)

/* A condition (a counted check). */
#define EXPECT(cond, ...)                                                        \
  do {                                                                           \
    if (!(cond)) die("%s:%d: %s: %s", __FILE__, __LINE__, #cond, fmt_msg(__VA_ARGS__)); \
    pass();                                                                      \
  } while (0)

static inline TEST_PRINTF(1, 2) const char* fmt_msg(const char* fmt, ...) {
  static char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void sleep_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&t, NULL);
}

/* ---- Environment -------------------------------------------------------- */

static inline int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end;
  long x = strtol(v, &end, 10);
  if (*end) die("%s='%s' is not a whole number", name, v);
  return (int)x;
}

/* RANK and WORLD_SIZE as torchrun (and `jitccl launch`) set them. */
static inline void rank_from_env(int* rank, int* nranks) {
  *rank = env_int("RANK", -1);
  *nranks = env_int("WORLD_SIZE", -1);
  g_rank = *rank;
  if (*rank < 0 || *nranks < 1 || *rank >= *nranks)
    die("RANK=%d WORLD_SIZE=%d: run under `jitccl launch -n N`", *rank, *nranks);
}

/* The id every rank computes from NCCL_COMM_ID (rank 0's init starts the root
 * there). Without NCCL_COMM_ID, MASTER_ADDR:MASTER_PORT+1 is used. */
static inline ncclUniqueId uid_from_env(void) {
  if (!getenv("NCCL_COMM_ID") || !*getenv("NCCL_COMM_ID")) {
    const char* a = getenv("MASTER_ADDR");
    const char* p = getenv("MASTER_PORT");
    if (!a || !p) die("neither NCCL_COMM_ID nor MASTER_ADDR/MASTER_PORT is set");
    char spec[256];
    snprintf(spec, sizeof spec, "%s:%d", a, atoi(p) + 1);
    setenv("NCCL_COMM_ID", spec, 1);
  }
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  return id;
}

/* ---- Small floats -------------------------------------------------------- */

/* Encodes v in a binary float of `eb` exponent and `mb` mantissa bits, rounding
 * to nearest even. `fn`: the "finite" variant (fp8 e4m3fn: no infinities, NaN
 * is all ones, overflow saturates to the largest finite value); otherwise IEEE
 * (overflow gives infinity). */
static inline uint32_t mf_encode(double v, int eb, int mb, int fn) {
  const int bias = (1 << (eb - 1)) - 1;
  const uint32_t all = (1u << (eb + mb)) - 1;
  const uint32_t inf = ((1u << eb) - 1) << mb;
  const uint32_t maxfin = fn ? (((1u << eb) - 1) << mb) | ((1u << mb) - 2) : inf - 1;
  uint32_t sign = signbit(v) ? 1u << (eb + mb) : 0;
  double a = fabs(v);
  if (isnan(v)) return fn ? (sign | all) : (inf | (1u << (mb - 1)));
  if (a == 0) return sign;
  if (isinf(v)) return sign | (fn ? maxfin : inf);
  int e;
  (void)frexp(a, &e);
  int E = e - 1; /* a = 1.m * 2^E */
  if (E < 1 - bias) E = 1 - bias;
  double m = rint(ldexp(a, mb - E)); /* the significand in units of the last place */
  if (m >= ldexp(1.0, mb + 1)) {
    E++;
    m = ldexp(1.0, mb);
  }
  uint32_t bits;
  if (m < ldexp(1.0, mb)) {
    bits = (uint32_t)m; /* subnormal */
  } else if (E + bias > (int)((1u << eb) - 1)) {
    bits = fn ? maxfin : inf;
  } else {
    bits = ((uint32_t)(E + bias) << mb) | ((uint32_t)m - (1u << mb));
  }
  if (bits > maxfin) bits = fn ? maxfin : inf;
  return sign | bits;
}

static inline double mf_decode(uint32_t bits, int eb, int mb, int fn) {
  const int bias = (1 << (eb - 1)) - 1;
  uint32_t ef = (bits >> mb) & ((1u << eb) - 1), mf = bits & ((1u << mb) - 1);
  int neg = (bits >> (eb + mb)) & 1;
  double v;
  if (fn && ef == (1u << eb) - 1 && mf == (1u << mb) - 1) return NAN;
  if (!fn && ef == (1u << eb) - 1) return mf ? NAN : (neg ? -INFINITY : INFINITY);
  if (ef == 0)
    v = ldexp((double)mf, 1 - bias - mb);
  else
    v = ldexp((double)(mf | (1u << mb)), (int)ef - bias - mb);
  return neg ? -v : v;
}

/* ---- Data types ------------------------------------------------------------ */

typedef struct {
  const char* name;
  ncclDataType_t dt;
  size_t size;
  int is_int, is_signed;
  int eb, mb, fn; /* floats: exponent and mantissa bits, e4m3fn variant */
  /* Input magnitudes: values are whole multiples of `stride`, at most `vmax`
   * of them, so that a sum over 4 ranks stays exact in the type. */
  double vmax, stride;
} type_info;

static const type_info TYPES[] = {
    {"int8", ncclInt8, 1, 1, 1, 0, 0, 0, 20, 1},
    {"uint8", ncclUint8, 1, 1, 0, 0, 0, 0, 60, 1},
    {"int32", ncclInt32, 4, 1, 1, 0, 0, 0, 1000, 65537},
    {"uint32", ncclUint32, 4, 1, 0, 0, 0, 0, 1000, 65537},
    {"int64", ncclInt64, 8, 1, 1, 0, 0, 0, 1000, 4294967297.0},
    {"uint64", ncclUint64, 8, 1, 0, 0, 0, 0, 1000, 4294967297.0},
    {"half", ncclFloat16, 2, 0, 1, 5, 10, 0, 500, 1},
    {"float", ncclFloat32, 4, 0, 1, 8, 23, 0, 1000, 1},
    {"double", ncclFloat64, 8, 0, 1, 11, 52, 0, 1000, 1048577},
    {"bfloat16", ncclBfloat16, 2, 0, 1, 8, 7, 0, 60, 1},
    {"fp8e4m3", ncclFloat8e4m3, 1, 0, 1, 4, 3, 1, 4, 1},
    {"fp8e5m2", ncclFloat8e5m2, 1, 0, 1, 5, 2, 0, 2, 1},
};
#define NTYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

static inline const type_info* type_named(const char* name) {
  static const struct { const char* alias; const char* name; } aliases[] = {
      {"char", "int8"},       {"int", "int32"},     {"float16", "half"},
      {"float32", "float"},   {"float64", "double"}, {"bf16", "bfloat16"},
      {"e4m3", "fp8e4m3"},    {"e5m2", "fp8e5m2"},   {"float8e4m3", "fp8e4m3"},
      {"float8e5m2", "fp8e5m2"},
  };
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (!strcmp(name, aliases[i].alias)) name = aliases[i].name;
  for (int i = 0; i < NTYPES; i++)
    if (!strcmp(name, TYPES[i].name)) return &TYPES[i];
  die("unknown data type '%s'", name);
}

static inline const type_info* type_of(ncclDataType_t dt) {
  for (int i = 0; i < NTYPES; i++)
    if (TYPES[i].dt == dt) return &TYPES[i];
  die("no data type %d", (int)dt);
}

/* Element i of `buf` as a double (exact for every value the tests use). */
static inline double load(const type_info* t, const void* buf, size_t i) {
  const unsigned char* p = (const unsigned char*)buf + i * t->size;
  switch (t->dt) {
    case ncclInt8: return (double)*(const int8_t*)p;
    case ncclUint8: return (double)*(const uint8_t*)p;
    case ncclInt32: { int32_t x; memcpy(&x, p, 4); return (double)x; }
    case ncclUint32: { uint32_t x; memcpy(&x, p, 4); return (double)x; }
    case ncclInt64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclUint64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclFloat32: { float x; memcpy(&x, p, 4); return (double)x; }
    case ncclFloat64: { double x; memcpy(&x, p, 8); return x; }
    case ncclFloat16:
    case ncclBfloat16: { uint16_t x; memcpy(&x, p, 2); return mf_decode(x, t->eb, t->mb, t->fn); }
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return mf_decode(*p, t->eb, t->mb, t->fn);
    default: die("load: data type %d", (int)t->dt);
  }
}

/* Stores v (a value of the type: integers are whole and in range) at element i. */
static inline void store(const type_info* t, void* buf, size_t i, double v) {
  unsigned char* p = (unsigned char*)buf + i * t->size;
  switch (t->dt) {
    case ncclInt8: *(int8_t*)p = (int8_t)v; break;
    case ncclUint8: *(uint8_t*)p = (uint8_t)v; break;
    case ncclInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case ncclFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case ncclFloat64: memcpy(p, &v, 8); break;
    case ncclFloat16:
    case ncclBfloat16: { uint16_t x = (uint16_t)mf_encode(v, t->eb, t->mb, t->fn); memcpy(p, &x, 2); break; }
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: *p = (unsigned char)mf_encode(v, t->eb, t->mb, t->fn); break;
    default: die("store: data type %d", (int)t->dt);
  }
}

/* A buffer of n elements (at least one, so that count 0 still has a sentinel). */
static inline void* xalloc(const type_info* t, size_t n) {
  void* p = malloc((n ? n : 1) * t->size);
  if (!p) die("out of memory (%zu elements of %s)", n, t->name);
  return p;
}

/* Fills n elements with a sentinel byte pattern. */
static inline void poison(const type_info* t, void* buf, size_t n) {
  memset(buf, 0xA5, (n ? n : 1) * t->size);
}

/* Whether n elements (at least one) still hold the sentinel. */
static inline int is_poisoned(const type_info* t, const void* buf, size_t n) {
  const unsigned char* p = (const unsigned char*)buf;
  for (size_t i = 0; i < (n ? n : 1) * t->size; i++)
    if (p[i] != 0xA5) return 0;
  return 1;
}

/* Polls a nonblocking communicator until its pending work is done; its final
 * state must be ncclSuccess. `r` is what the call returned. */
static inline void wait_comm(ncclComm_t comm, ncclResult_t r, const char* what, double limit_s) {
  if (r != ncclSuccess && r != ncclInProgress)
    die("%s returned %d (%s); last error: %s", what, (int)r, ncclGetErrorString(r),
        ncclGetLastError(comm));
  double t0 = now_s();
  ncclResult_t state = r;
  while (state == ncclInProgress) {
    NCCLCHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) {
      if (now_s() - t0 > limit_s) die("%s still in progress after %.0f s", what, limit_s);
      sleep_ms(1);
    }
  }
  if (state != ncclSuccess)
    die("%s: ncclCommGetAsyncError gave %d (%s); last error: %s", what, (int)state,
        ncclGetErrorString(state), ncclGetLastError(comm));
}

#endif /* JITCCL_CAPI_TEST_COMMON_H */
