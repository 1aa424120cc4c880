/* LL protocol, CUDA: the host framing (prims/host/ll.h) — 16-byte lines of two 8-byte
   {4 data bytes, 4-byte flag = step + 1} halves, 8 data bytes per line — block-parallel:
   each thread owns lines l = tid, tid + nthreads, ... and waits for its own lines' flags.
   A line moves as one 16-byte volatile vector of two u64 halves, so every half (data and
   its flag) is a single 64-bit access, as on the host; no fence is needed. Thread 0 waits
   for space and advances the steps between barriers (see prims/cuda/simple.h); a failed
   line wait is shared through jc_line_err so that all threads leave together. The step's
   first line is the host's header (its bytes and the call's tag), which thread 0 checks
   before it writes the header it sends on, so that a step of a call that differs is never
   passed on as one of this call's. */
#define JC_PROTO 1
{% include "prims/cuda/step.h" %}
#define JC_LL_ELEMS (8 / sizeof(T))

/* The header line's 8 data bytes: the step's bytes, then the tag. */
static JC_DEVICE JC_INLINE jc_u64 jc_ll_header(jc_u64 n, jc_u64 tag) { return n * sizeof(T) | tag << 32; }

static JC_DEVICE JC_INLINE void jc_ll_load(const jc_u64* p, jc_u64* lo, jc_u64* hi) {
  asm volatile("ld.volatile.global.v2.u64 { %0, %1 }, [%2];" : "=l"(*lo), "=l"(*hi) : "l"(p) : "memory");
}
static JC_DEVICE JC_INLINE void jc_ll_store(jc_u64* p, jc_u64 lo, jc_u64 hi) {
  asm volatile("st.volatile.global.v2.u64 [%0], { %1, %2 };" : : "l"(p), "l"(lo), "l"(hi) : "memory");
}

static JC_DEVICE __noinline__ int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  __shared__ int jc_wait_err;              /* thread 0's space wait */
  __shared__ volatile int jc_line_err;     /* any thread's failed line wait */
  if (jc_tid() == 0) {
    jc_wait_err = s ? jc_wait_space(x, s) : JC_OK;
    jc_line_err = JC_OK;
  }
  const jc_u64* rl = r ? (const jc_u64*)jc_slot(r, JC_PROTO) : 0;
  jc_u64* sl = s ? (jc_u64*)jc_slot(s, JC_PROTO) : 0;
  jc_u32 rflag = r ? (jc_u32)(r->step + 1) : 0;
  jc_u64 sflag = s ? (jc_u64)(jc_u32)(s->step + 1) << 32 : 0;
  jc_barrier();
  int e = jc_wait_err;
  if (e) return e;
  jc_u64 nlines = (n + JC_LL_ELEMS - 1) / JC_LL_ELEMS;
  /* Line L of the slot: the header at 0, data line L - 1 after it. */
  for (jc_u64 L = jc_tid(); L < nlines + 1; L += jc_nthreads()) {
    union { jc_u64 u; T v[JC_LL_ELEMS]; } in, out;
    in.u = 0;
    out.u = 0;
    if (r) {
      jc_u64 lo, hi, spins = 0;
      int failed = JC_OK;
      for (;;) {
        jc_ll_load(rl + 2 * L, &lo, &hi);
        if ((jc_u32)(lo >> 32) == rflag && (jc_u32)(hi >> 32) == rflag) break;
        if (jc_line_err) { e = jc_line_err; break; }
        /* still short after a failed check */
        if (failed) { jc_line_err = e = jc_fail(x, failed, r->peer, JC_WAIT_DATA); break; }
        failed = jc_check(x, ++spins, r->peer);
        if (!failed) jc_relax(spins, x->args->spin);
      }
      if (e) break;
      x->wait_start = 0;
      in.u = (lo & 0xffffffffull) | (hi << 32);
      if (L == 0 && in.u != jc_ll_header(n, x->tag_recv)) {
        jc_line_err = e = jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
        break;
      }
    }
    if (L == 0) {
      jc_u64 h = jc_ll_header(n, x->tag_send);
      if (s) jc_ll_store(sl, (h & 0xffffffffull) | sflag, (h >> 32) | sflag);
      continue;
    }
    jc_u64 base = (L - 1) * JC_LL_ELEMS;
#pragma unroll
    for (jc_u64 k = 0; k < JC_LL_ELEMS; k++) {
      if (base + k >= n) break;
      T v = jc_elem(x, in.v[k], r != 0, src, base + k, pre, post);
      if (dst) dst[base + k] = v;
      out.v[k] = v;
    }
    if (s) jc_ll_store(sl + 2 * L, (out.u & 0xffffffffull) | sflag, (out.u >> 32) | sflag);
  }
  jc_barrier();
  e = jc_line_err;
  if (e) return e;
  if (jc_tid() == 0) jc_end_step(x, r, s, JC_PROTO, (nlines + 1) * 16);
  jc_barrier();
  return JC_OK;
}
