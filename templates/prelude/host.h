/* Host prelude: C11 for the system C compiler. A CTA is one OS thread, so a block's thread
   indices run serially (jc_tid() == 0, jc_nthreads() == 1), barriers are no-ops, and the
   volatile loads/stores and fences of the CUDA side map to GCC's __atomic builtins. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

typedef signed char jc_i8;
typedef unsigned char jc_u8;
typedef unsigned short jc_u16;
typedef int jc_i32;
typedef unsigned int jc_u32;
typedef long long jc_i64;
typedef unsigned long long jc_u64;

#define JC_DEVICE
#define JC_INLINE inline __attribute__((always_inline))
#define JC_STATIC_ASSERT(c, m) _Static_assert(c, m)

static JC_INLINE int jc_tid(void) { return 0; }
static JC_INLINE int jc_nthreads(void) { return 1; }
static JC_INLINE void jc_barrier(void) {}

static JC_INLINE jc_u64 jc_load_acquire(const jc_u64* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static JC_INLINE jc_u64 jc_load_relaxed(const jc_u64* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static JC_INLINE void jc_store_release(jc_u64* p, jc_u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static JC_INLINE void jc_store_relaxed(jc_u64* p, jc_u64 v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
static JC_INLINE int jc_load_flag(const jc_i32* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static JC_INLINE jc_u64 jc_fetch_add(jc_u64* p, jc_u64 v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }

static JC_INLINE jc_u64 jc_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (jc_u64)t.tv_sec * 1000000000ull + (jc_u64)t.tv_nsec;
}

/* Back-off while waiting on a peer, the kernel part of the wait policy described (with
   its reasons) in runtime/src/wait.rs: busy-poll for `spin` rounds (the runtime's budget);
   then give the core away for JC_RELAX_YIELDS rounds, so as not to starve a peer rank that
   shares it; then sleep. A yield that kept this thread off its core for more than
   JC_SLOW_YIELD_NS means a busy neighbour had the core (a yield hands it a whole time
   slice, and the peer may need this thread meanwhile): two such yields within
   JC_BUSY_SPELL_NS of each other start a spell of that length in which waits sleep at once
   after spinning (a sleeper is run as soon as it wakes, ahead of the neighbour). */
#define JC_RELAX_YIELDS 20000ull
#define JC_RELAX_SLEEP_NS 50000
#define JC_SLOW_YIELD_NS 1000000ull
#define JC_BUSY_SPELL_NS 20000000ull
static jc_u64 jc_slow_yield_at; /* when a yield last lost the core for long */
static jc_u64 jc_busy_until;    /* until when waits skip yielding */
/* The launch's network progress (jc_args' progress and progress_ctx), per CTA thread: a
   rank with peers over the network moves its sockets from its waits, on its own thread,
   rather than waiting for a proxy thread to be scheduled (which, with more threads than
   cores, costs a scheduling round per hop). Each round tries it first; one that moved
   anything looks again at once. */
static __thread int (*jc_progress_fn)(void*);
static __thread void* jc_progress_ctx;
static inline void jc_progress_enter(int (*fn)(void*), void* ctx) {
  jc_progress_fn = fn;
  jc_progress_ctx = ctx;
}
static inline void jc_relax(jc_u64 spins, jc_u64 spin) {
  if (jc_progress_fn && jc_progress_fn(jc_progress_ctx)) return;
  if (spins < spin) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
    return;
  }
  if (spins < spin + JC_RELAX_YIELDS) {
    jc_u64 now = jc_now_ns();
    if (now >= __atomic_load_n(&jc_busy_until, __ATOMIC_RELAXED)) {
      sched_yield();
      jc_u64 after = jc_now_ns();
      if (after - now > JC_SLOW_YIELD_NS) {
        if (after - __atomic_load_n(&jc_slow_yield_at, __ATOMIC_RELAXED) < JC_BUSY_SPELL_NS)
          __atomic_store_n(&jc_busy_until, after + JC_BUSY_SPELL_NS, __ATOMIC_RELAXED);
        __atomic_store_n(&jc_slow_yield_at, after, __ATOMIC_RELAXED);
      }
      return;
    }
  }
  struct timespec t = {0, JC_RELAX_SLEEP_NS};
  nanosleep(&t, 0);
}

/* Whether call `a` stores its output with jc_stream: out of place and 8 MiB or more, an
   output outgrows the cache and no step reads it back, and cached stores would first read
   every line (docs/performance.md, "Host AllReduce"). A macro: the ABI's jc_args comes after
   the prelude. */
#define JC_BYPASS_OUTPUT(a) ((a)->sendbuff != (const void*)(a)->recvbuff && (a)->count * sizeof(T) >= (8u << 20))
/* memcpy for the primitives' moves. A call into the C library costs a small move more than
   the move itself (an 8-byte AllReduce at 2 ranks makes three), so up to
   16 bytes move inline, as two loads and two stores that may overlap. */
static inline void jc_copy_ends(char* d, const char* s, jc_u64 n, jc_u64 w) {
  char a[8], b[8]; /* w <= n <= 2w, w <= 8: inlined with a constant w, plain moves */
  memcpy(a, s, w);
  memcpy(b, s + n - w, w);
  memcpy(d, a, w);
  memcpy(d + n - w, b, w);
}
static inline void jc_copy(void* dst, const void* src, jc_u64 n) {
  char* d = (char*)dst;
  const char* s = (const char*)src;
  if (n > 16) memcpy(d, s, n);
  else if (n >= 8) jc_copy_ends(d, s, n, 8);
  else if (n >= 4) jc_copy_ends(d, s, n, 4);
  else for (jc_u64 k = 0; k < n; k++) d[k] = s[k];
}
/* Copies n bytes to dst (16-byte aligned) with stores that bypass this core's caches, for
   data another core reads next (a FIFO slot): the reader then loads it from memory rather
   than from this core's dirty lines, which crossing cores costs far more on some machines
   (such as the VMs of docs/performance.md).
   jc_stream_fence orders them before the store that publishes the data. */
static inline void jc_stream(void* dst, const void* src, jc_u64 n) {
#if defined(__x86_64__)
  char* d = (char*)dst;
  const char* s = (const char*)src;
  jc_u64 k = 0;
  for (; k + 64 <= n; k += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(s + k)), b = _mm_loadu_si128((const __m128i*)(s + k + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(s + k + 32)), e = _mm_loadu_si128((const __m128i*)(s + k + 48));
    _mm_stream_si128((__m128i*)(d + k), a);
    _mm_stream_si128((__m128i*)(d + k + 16), b);
    _mm_stream_si128((__m128i*)(d + k + 32), c);
    _mm_stream_si128((__m128i*)(d + k + 48), e);
  }
  if (k < n) memcpy(d + k, s + k, n - k);
#else
  memcpy(dst, src, n);
#endif
}
static inline void jc_stream_fence(void) {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

/* Software conversions for the narrow float types (the host has no native ones).
   Round to nearest even, like the CUDA cvt.rn instructions. */
static inline float jc_bits_f32(jc_u32 b) { float f; memcpy(&f, &b, 4); return f; }
static inline jc_u32 jc_f32_bits(float f) { jc_u32 b; memcpy(&b, &f, 4); return b; }

/* Widens an IEEE-like value with `eb` exponent and `mb` mantissa bits; `fn` marks e4m3's
   "finite" encoding (no infinity; all-ones exponent and mantissa is NaN). Exact. */
static inline float jc_narrow_to_f32(jc_u32 h, int eb, int mb, int fn) {
  jc_u32 sign = (h >> (eb + mb)) & 1, e = (h >> mb) & ((1u << eb) - 1), m = h & ((1u << mb) - 1);
  int bias = (1 << (eb - 1)) - 1;
  jc_u32 s = sign << 31;
  if (!fn && e == (1u << eb) - 1) return jc_bits_f32(s | 0x7f800000u | (m ? 0x400000u : 0));
  if (fn && e == (1u << eb) - 1 && m == (1u << mb) - 1) return jc_bits_f32(s | 0x7fc00000u);
  if (e == 0) { /* subnormal: m * 2^(1 - bias - mb), exact in float */
    float v = (float)m * jc_bits_f32((jc_u32)(127 + 1 - bias - mb) << 23);
    return sign ? -v : v;
  }
  return jc_bits_f32(s | ((e - bias + 127) << 23) | (m << (23 - mb)));
}

/* Rounds a float to the narrow format. `sat`: out-of-range values (and infinity) become
   the largest finite value (CUDA's satfinite, used for fp8) instead of infinity. */
static inline jc_u32 jc_f32_to_narrow(float f, int eb, int mb, int fn, int sat) {
  jc_u32 x = jc_f32_bits(f), ax = x & 0x7fffffffu;
  jc_u32 sign = (x >> 31) << (eb + mb);
  int bias = (1 << (eb - 1)) - 1;
  jc_u32 inf = ((1u << eb) - 1) << mb;
  jc_u32 maxfin = fn ? inf | ((1u << mb) - 2) : inf - 1;
  if (ax > 0x7f800000u) return sign | (fn ? inf | ((1u << mb) - 1) : inf | (1u << (mb - 1)));
  if (ax == 0x7f800000u) return sign | (sat || fn ? maxfin : inf);
  int e = (int)(ax >> 23) - 127;
  if (e < -126) return sign; /* float subnormals are far below every narrow format */
  jc_u32 mant = (ax & 0x7fffffu) | 0x800000u;
  int emin = 1 - bias;
  int shift = 23 - mb + (e < emin ? emin - e : 0);
  if (shift > 25) return sign;
  jc_u32 r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1))) r++;
  jc_u32 enc = e < emin ? r : ((jc_u32)(e + bias) << mb) + r - (1u << mb);
  if (enc > maxfin) enc = (sat || fn) ? maxfin : inf;
  return sign | enc;
}

static inline float jc_f16_to_f32(jc_u16 h) { return jc_narrow_to_f32(h, 5, 10, 0); }
static inline jc_u16 jc_f32_to_f16(float f) { return (jc_u16)jc_f32_to_narrow(f, 5, 10, 0, 0); }
static inline float jc_bf16_to_f32(jc_u16 h) { return jc_bits_f32((jc_u32)h << 16); }
static inline jc_u16 jc_f32_to_bf16(float f) {
  jc_u32 x = jc_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (jc_u16)((x >> 16) | 0x40);
  return (jc_u16)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}
static inline float jc_e4m3_to_f32(jc_u8 h) { return jc_narrow_to_f32(h, 4, 3, 1); }
static inline jc_u8 jc_f32_to_e4m3(float f) { return (jc_u8)jc_f32_to_narrow(f, 4, 3, 1, 1); }
static inline float jc_e5m2_to_f32(jc_u8 h) { return jc_narrow_to_f32(h, 5, 2, 0); }
static inline jc_u8 jc_f32_to_e5m2(float f) { return (jc_u8)jc_f32_to_narrow(f, 5, 2, 0, 1); }

/* Elements a direct kernel's thread folds at once (its stack tile: the host's one thread
   per CTA takes big tiles). */
#define JC_SYM_TILE 1024
/* What a CTA's threads share (its one thread's stack), and how a direct kernel's barrier
   counter is published: a release store, which orders the one thread's accesses. */
#define JC_SHARED
static JC_INLINE void jc_publish_counter(jc_u64* p, jc_u64 v, int same_gpu) {
  (void)same_gpu;
  jc_store_release(p, v);
}
/* Every rank keeps every rank's flags area mapped for as long as it lives (its own mapping
   of each segment), so a peer may read a rank's area after that rank returned, even after
   it destroyed its communicator: the eager paths (common/eager.h, and the point-to-point
   eager slots of algo/sendrecv_direct.h) rely on it. A GPU
   rank's area is freed with its owner, so the GPUs keep the exit barrier. */
#define JC_SYM_EAGER_STAGING
