/* Simple protocol, CUDA: the host contract and framing (prims/host/simple.h), block-parallel.
   Thread 0 waits for the send slot's space and the recv slot's tail, a barrier hands the
   result to the block, every thread copies a strided share of the elements, and after a
   second barrier thread 0 fences once and posts head/tail. The step counters
   live in global memory: all threads read them before the first barrier, thread 0 alone
   advances them after the second, and a third barrier publishes them to the next call.
   jc_generic is __noinline__ (here and in ll.h, ll128.h): one copy per kernel instead of one
   per call site halves NVRTC's compile time; its branches on r/s/src/dst are uniform. */
#define JC_PROTO 0
{% include "prims/cuda/step.h" %}
/* 16-byte packs in flight per thread and stream: four (eight ran slower on a GPU);
   two for 1-byte types that reduce, whose 16 elements a pack make each pack's code (and
   NVRTC's time) four times a float's. Kernels that only move bytes (JC_OP_COPY) move whole
   packs, four. */
#ifdef JC_OP_COPY
#define JC_UNROLL 4
#else
#define JC_UNROLL (sizeof(T) == 1 ? 2 : 4)
#endif
struct __align__(16) jc_v16 { jc_u32 w[4]; };
union jc_pack { struct jc_v16 v; T e[JC_PACK]; };
static JC_DEVICE JC_INLINE int jc_aligned16(const volatile void* p) { return ((jc_u64)p & 15) == 0; }
static JC_DEVICE JC_INLINE struct jc_v16 jc_zero16(void) {
  struct jc_v16 z;
  z.w[0] = z.w[1] = z.w[2] = z.w[3] = 0;
  return z;
}
/* The peer wrote the slot from outside this SM: a volatile load skips stale L1 lines. */
static JC_DEVICE JC_INLINE struct jc_v16 jc_load16_volatile(const volatile T* p) {
  struct jc_v16 v;
  asm volatile("ld.volatile.v4.u32 { %0, %1, %2, %3 }, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3]) : "l"(p));
  return v;
}
/* One pack's outputs: jc_fold on each element, then one 16-byte store per destination. The
   packs come by value: a pointer to one (null without a source) kept them in local memory. */
static JC_DEVICE JC_INLINE void jc_pack_out(struct jc_ctx* x, union jc_pack rv, int has_recv, union jc_pack sv,
                                            int has_src, T* dst, T* out, jc_u64 i, int pre, int post) {
  union jc_pack o;
#ifdef JC_OP_COPY
  /* jc_fold without an op: the source, unless the received value is the right operand. */
  o.v = has_src && !(has_recv && (post & JC_SRC_FIRST)) ? sv.v : rv.v;
#else
#pragma unroll
  for (int k = 0; k < (int)JC_PACK; k++) o.e[k] = jc_fold(x, rv.e[k], has_recv, has_src, sv.e[k], pre, post);
#endif
  if (dst) *(struct jc_v16*)(dst + i) = o.v;
  if (out) *(struct jc_v16*)(out + i) = o.v;
}
static JC_DEVICE __noinline__ int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  __shared__ int jc_wait_err;     /* thread 0's wait result, read by all after the barrier */
  if (jc_tid() == 0) {
    int e = s ? jc_wait_space(x, s) : JC_OK;
    if (!e && r) e = jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA);
    /* The sender's size word, written before its tail: another size or tag means its call
       differs (prims/host/simple.h). */
    if (!e && r && jc_load_relaxed(&r->sizes[r->step % JC_STEPS]) != jc_size_word(JC_PROTO, n * sizeof(T), x->tag_recv))
      e = jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
    jc_wait_err = e;
  }
  /* Volatile for the same reason as jc_load16_volatile. */
  const volatile T* in = r ? (const volatile T*)jc_slot(r, JC_PROTO) : 0;
  T* out = s ? (T*)jc_slot(s, JC_PROTO) : 0;
  jc_barrier();
  int e = jc_wait_err;
  if (e) return e;                /* every thread saw the same value: all leave together */
  /* 16-byte packs where every pointer allows (the algorithms keep chunk boundaries on 16
     bytes), JC_UNROLL of them per thread loaded before any is used; the rest one element at
     a time. With 4-byte loads a CTA's warps waited on memory most of the time on an H200:
     the copy, not the handshake, bounded a channel. The strides keep each warp's accesses coalesced. */
  const jc_u64 nt = (jc_u64)jc_nthreads();
  const int aligned = jc_aligned16(in) && jc_aligned16(src) && jc_aligned16(dst) && jc_aligned16(out);
  const jc_u64 np = aligned ? n / JC_PACK : 0;
  /* One loop: the last pass's missing packs are predicated off (a second loop for them
     would double the code NVRTC compiles). */
  for (jc_u64 p = (jc_u64)jc_tid(); p < np; p += JC_UNROLL * nt) {
    union jc_pack rv[JC_UNROLL], sv[JC_UNROLL];
#pragma unroll
    for (int u = 0; u < JC_UNROLL; u++) {
      const jc_u64 q = p + u * nt;
      rv[u].v = in && q < np ? jc_load16_volatile(in + q * JC_PACK) : jc_zero16();
    }
#pragma unroll
    for (int u = 0; u < JC_UNROLL; u++) {
      const jc_u64 q = p + u * nt;
      sv[u].v = src && q < np ? *(const struct jc_v16*)(src + q * JC_PACK) : jc_zero16();
    }
#pragma unroll
    for (int u = 0; u < JC_UNROLL; u++)
      if (p + u * nt < np) jc_pack_out(x, rv[u], in != 0, sv[u], src != 0, dst, out, (p + u * nt) * JC_PACK, pre, post);
  }
  for (jc_u64 i = np * JC_PACK + (jc_u64)jc_tid(); i < n; i += nt) {
    T v = jc_elem(x, in ? in[i] : (T)0, in != 0, src, i, pre, post);
    if (dst) dst[i] = v;
    if (out) out[i] = v;
  }
  jc_barrier();
  if (jc_tid() == 0) jc_end_step(x, r, s, JC_PROTO, n * sizeof(T));
  jc_barrier();
  return JC_OK;
}
