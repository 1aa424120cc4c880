/* LL128 protocol, CUDA: the host's line (prims/host/ll128.h) — 128-byte lines of 15 data
   words and a flag word (step + 1 and the call's tag), 120 data bytes per line — but with the flag last,
   as a warp writes the line whole; eight threads a line, each moving 16 bytes of it (the
   eighth: the last data word and the flag), so that a warp reads and writes four whole
   lines at once (coalesced). JC_LL128_UNROLL lines per thread are in flight. A line's
   eighth thread acquires its flag; a __syncwarp hands that to the other seven before they
   read (the pattern of Simple's thread 0 and barrier). Writers store all their lines'
   data, and after a __syncwarp each line's eighth thread fences once (jc_fence_conns) and
   stores the flags, so no flag is visible before its data. Thread 0 waits for space and
   advances the steps between barriers (see prims/cuda/simple.h); a failed wait is shared
   through jc_line_err, read by a warp as one value so that the warp leaves together, and
   every warp sees it at its next pass. */
#define JC_PROTO 2
{% include "prims/cuda/step.h" %}
#define JC_LL128_ELEMS (120 / sizeof(T))
#define JC_LL128_FLAG 15 /* the line's last word, the eighth thread's second */
#define JC_LL128_UNROLL 2
#define JC_FULL_WARP 0xffffffffu

static JC_DEVICE JC_INLINE void jc_ll128_load(const jc_u64* p, jc_u64* a, jc_u64* b) {
  asm volatile("ld.volatile.v2.u64 { %0, %1 }, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}

static JC_DEVICE __noinline__ int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  __shared__ int jc_wait_err;              /* thread 0's space wait */
  __shared__ volatile int jc_line_err;     /* any thread's failed line wait */
  if (jc_tid() == 0) {
    jc_wait_err = s ? jc_wait_space(x, s) : JC_OK;
    jc_line_err = JC_OK;
  }
  jc_u64* rl = r ? (jc_u64*)jc_slot(r, JC_PROTO) : 0;
  jc_u64* sl = s ? (jc_u64*)jc_slot(s, JC_PROTO) : 0;
  /* Flags carry the call's tag above the step, as on the host (prims/host/ll128.h). */
  jc_u64 rflag = r ? (r->step + 1) | x->tag_recv << JC_LL128_TAG_SHIFT : 0;
  jc_u64 sflag = s ? (s->step + 1) | x->tag_send << JC_LL128_TAG_SHIFT : 0;
  const jc_u64 step_mask = (1ull << JC_LL128_TAG_SHIFT) - 1;
  jc_barrier();
  int e = jc_wait_err;
  if (e) return e;
  const jc_u64 nlines = (n + JC_LL128_ELEMS - 1) / JC_LL128_ELEMS;
  const int part = jc_tid() & 7;
  /* Lines a pass of the block covers: blocks are whole warps, so eight threads a line. */
  const jc_u64 lpp = (jc_u64)jc_nthreads() / 8, mine = (jc_u64)jc_tid() / 8;
  const int first = part * (int)JC_PACK, count = part == 7 ? (int)JC_PACK / 2 : (int)JC_PACK;
  /* Every thread runs the same passes (the bound is the block's), so the warp barriers
     below always find all 32 threads. */
  for (jc_u64 base = 0; base < nlines; base += JC_LL128_UNROLL * lpp) {
    union { jc_u64 w[2]; T v[JC_PACK]; } in[JC_LL128_UNROLL], out;
    if (r) {
#pragma unroll
      for (int u = 0; u < JC_LL128_UNROLL; u++) {
        const jc_u64 l = base + u * lpp + mine;
        if (part != 7 || l >= nlines) continue;
        jc_u64* flag = rl + 16 * l + JC_LL128_FLAG;
        jc_u64 spins = 0;
        int failed = JC_OK;
        jc_u64 f;
        while ((f = jc_load_acquire(flag)) != rflag) {
          if (jc_line_err) break;
          /* this step's line from a call that differs */
          if ((f & step_mask) == (rflag & step_mask)) { jc_line_err = jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA); break; }
          /* still short after a failed check */
          if (failed) { jc_line_err = jc_fail(x, failed, r->peer, JC_WAIT_DATA); break; }
          failed = jc_check(x, ++spins, r->peer);
          if (!failed) jc_relax(spins, x->args->spin);
        }
        x->wait_start = 0;
      }
      __syncwarp(JC_FULL_WARP);
      e = __shfl_sync(JC_FULL_WARP, jc_line_err, 0);
      if (e) break;
#pragma unroll
      for (int u = 0; u < JC_LL128_UNROLL; u++) {
        const jc_u64 l = base + u * lpp + mine;
        in[u].w[0] = in[u].w[1] = 0;
        if (l < nlines) jc_ll128_load(rl + 16 * l + 2 * part, &in[u].w[0], &in[u].w[1]);
      }
    }
    /* Every line's source elements are loaded before any result is stored: with a store to
       dst between them, each load would wait for the one before (dst may alias src). */
    union { jc_u64 w[2]; T v[JC_PACK]; } sv[JC_LL128_UNROLL];
#pragma unroll
    for (int u = 0; u < JC_LL128_UNROLL; u++) {
      const jc_u64 l = base + u * lpp + mine, e0 = l * JC_LL128_ELEMS + first;
      sv[u].w[0] = sv[u].w[1] = 0;
#pragma unroll
      for (int k = 0; k < (int)JC_PACK; k++)
        if (src && l < nlines && k < count && e0 + k < n) sv[u].v[k] = src[e0 + k];
    }
#pragma unroll
    for (int u = 0; u < JC_LL128_UNROLL; u++) {
      const jc_u64 l = base + u * lpp + mine;
      if (l >= nlines) continue;
      const jc_u64 e0 = l * JC_LL128_ELEMS + first;
      out.w[0] = out.w[1] = 0;
#pragma unroll
      for (int k = 0; k < (int)JC_PACK; k++) {
        if (k >= count || e0 + k >= n) break;
        T v = jc_fold(x, r ? in[u].v[k] : (T)0, r != 0, src != 0, sv[u].v[k], pre, post);
        if (dst) dst[e0 + k] = v;
        out.v[k] = v;
      }
      if (s) {
        jc_u64* o = sl + 16 * l + 2 * part;
        o[0] = out.w[0];
        if (part != 7) o[1] = out.w[1];
      }
    }
  }
  if (s && !e) {
    __syncwarp(JC_FULL_WARP);
    if (part == 7) {
      jc_fence_conns(0, s);
      for (jc_u64 l = mine; l < nlines; l += lpp) jc_store_relaxed(sl + 16 * l + JC_LL128_FLAG, sflag);
    }
  }
  jc_barrier();
  e = jc_line_err;
  if (e) return e;
  if (jc_tid() == 0) jc_end_step(x, r, s, JC_PROTO, nlines * 128);
  jc_barrier();
  return JC_OK;
}
