/* CUDA prelude: NVRTC, sm_80 or newer (fp8 conversions: sm_89 or newer). The same names as
   prelude/host.h. No headers (NVRTC has no libc; includes cost compile time): the types are
   builtin ones, memory orders and conversions are inline PTX. Loads and stores of the step
   counters are system-scoped, because the peer at the other end may be another GPU or the
   host. */
/* Each kernel uses a few of the primitives and conversions it is given: say nothing of the
   rest, so that the warnings NVRTC does log (debug level) are worth reading. */
#pragma nv_diag_suppress 177
typedef signed char jc_i8;
typedef unsigned char jc_u8;
typedef unsigned short jc_u16;
typedef int jc_i32;
typedef unsigned int jc_u32;
typedef long long jc_i64;
typedef unsigned long long jc_u64;

#define JC_DEVICE __device__
#define JC_INLINE __forceinline__
#define JC_STATIC_ASSERT(c, m) static_assert(c, m)

static __device__ __forceinline__ int jc_tid(void) { return (int)threadIdx.x; }
static __device__ __forceinline__ int jc_nthreads(void) { return (int)blockDim.x; }
static __device__ __forceinline__ void jc_barrier(void) { __syncthreads(); }

/* Generic addressing: head/tail may be device, peer or mapped host memory. */
static __device__ __forceinline__ jc_u64 jc_load_acquire(const jc_u64* p) {
  jc_u64 v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ jc_u64 jc_load_relaxed(const jc_u64* p) {
  jc_u64 v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void jc_store_release(jc_u64* p, jc_u64 v) {
  asm volatile("st.release.sys.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ void jc_store_relaxed(jc_u64* p, jc_u64 v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ int jc_load_flag(const jc_i32* p) { return *(const volatile jc_i32*)p; }
/* GPU scope: what the CTAs of one kernel count together (device memory). */
static __device__ __forceinline__ jc_u64 jc_fetch_add(jc_u64* p, jc_u64 v) {
  jc_u64 old;
  asm volatile("atom.acq_rel.gpu.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}

static __device__ __forceinline__ jc_u64 jc_now_ns(void) {
  jc_u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Back-off while waiting on a peer: spin first (LL latency), then sleep a little, longer
   the longer the wait (the SM's other CTAs and the memory system get the cycles). */
/* `spin` is the host's busy-poll budget; a GPU thread always backs off the same way. */
static __device__ void jc_relax(jc_u64 spins, jc_u64 spin) {
  (void)spin;
  if (spins < 64) return;
  jc_u32 ns = spins < 1024 ? 32u : spins < 16384 ? 256u : 1000u;
  asm volatile("nanosleep.u32 %0;" : : "r"(ns));
}

/* Conversions for the narrow float types, stored as raw bits (jc_u16 / jc_u8) like on the
   host; the cvt instructions round to nearest even, fp8 saturates to the largest finite
   value (satfinite), matching host.h. */
static __device__ __forceinline__ float jc_bits_f32(jc_u32 b) { return __uint_as_float(b); }
static __device__ __forceinline__ jc_u32 jc_f32_bits(float f) { return __float_as_uint(f); }
static __device__ __forceinline__ float jc_f16_to_f32(jc_u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
static __device__ __forceinline__ jc_u16 jc_f32_to_f16(float f) {
  jc_u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
static __device__ __forceinline__ float jc_bf16_to_f32(jc_u16 h) { return __uint_as_float((jc_u32)h << 16); }
static __device__ __forceinline__ jc_u16 jc_f32_to_bf16(float f) {
  jc_u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

#if __CUDA_ARCH__ >= 890
/* fp8x2 <-> two values; the low byte is the second operand of the packing cvt. */
static __device__ __forceinline__ float jc_e4m3_to_f32(jc_u8 b) {
  jc_u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((jc_u16)b));
  return jc_f16_to_f32((jc_u16)h2);
}
static __device__ __forceinline__ jc_u8 jc_f32_to_e4m3(float f) {
  jc_u16 b2;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(b2) : "f"(0.0f), "f"(f));
  return (jc_u8)b2;
}
static __device__ __forceinline__ float jc_e5m2_to_f32(jc_u8 b) {
  jc_u32 h2;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"((jc_u16)b));
  return jc_f16_to_f32((jc_u16)h2);
}
static __device__ __forceinline__ jc_u8 jc_f32_to_e5m2(float f) {
  jc_u16 b2;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(b2) : "f"(0.0f), "f"(f));
  return (jc_u8)b2;
}
#endif

/* Elements a direct kernel's thread folds at once (registers/local memory per thread). */
#define JC_SYM_TILE 4
/* What a CTA's threads share: the direct kernels' view of every rank (3 KiB at 64 ranks,
   in shared memory rather than in every thread's local memory) and thread 0's results.
   A barrier counter is published after a block barrier by one fence, which orders every
   thread's loads and stores of peers' buffers before it, then a plain store (a release
   store would fence again, at system scope): GPU scope where every rank's kernels run on
   this GPU in this process (`same_gpu`), system scope for peers on other GPUs or in other
   processes (as the protocols' steps, prims/cuda/step.h). */
#define JC_SHARED __shared__
static __device__ __forceinline__ void jc_publish_counter(jc_u64* p, jc_u64 v, int same_gpu) {
  if (same_gpu) __threadfence();
  else __threadfence_system();
  jc_store_relaxed(p, v);
}
/* The direct kernels' copies move 16-byte packs, four in flight per thread (as Simple's). */
struct __align__(16) jc_pack16 { jc_u32 w[4]; };
#define JC_SYM_PACK_UNROLL 4
