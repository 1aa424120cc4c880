/* LL128 protocol, CUDA: the host framing (prims/host/ll128.h) — 128-byte lines of 15 data
   words and a flag word (the last, = step + 1), 120 data bytes per line — block-parallel:
   each thread owns whole lines l = tid, tid + nthreads, ... It acquires a line's flag before
   reading the line; it writes all its send lines' data, fences once at system scope, then
   stores their flags, so no flag is visible before its data. Thread 0 waits for space and
   advances the steps between barriers (see prims/cuda/simple.h); a failed line wait is
   shared through jc_line_err so that all threads leave together. */
#define JC_PROTO 2
#define JC_LL128_ELEMS (120 / sizeof(T))

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
  jc_u64 rflag = r ? r->step + 1 : 0, sflag = s ? s->step + 1 : 0;
  jc_barrier();
  int e = jc_wait_err;
  if (e) return e;
  jc_u64 nlines = (n + JC_LL128_ELEMS - 1) / JC_LL128_ELEMS;
  for (jc_u64 l = jc_tid(); l < nlines; l += jc_nthreads()) {
    const volatile T* in = 0;
    if (r) {
      jc_u64* line = rl + 16 * l;
      jc_u64 spins = 0;
      int failed = JC_OK;
      while (jc_load_acquire(line + 15) != rflag) {
        if (jc_line_err) { e = jc_line_err; break; }
        /* still short after a failed check */
        if (failed) { jc_line_err = e = jc_fail(x, failed, r->peer, JC_WAIT_DATA); break; }
        failed = jc_check(x, ++spins, r->peer);
        if (!failed) jc_relax(spins, x->args->spin);
      }
      if (e) break;
      x->wait_start = 0;
      in = (const volatile T*)line;
    }
    T* out = s ? (T*)(sl + 16 * l) : 0;
    jc_u64 base = l * JC_LL128_ELEMS, k_end = jc_min(JC_LL128_ELEMS, n - base);
    for (jc_u64 k = 0; k < k_end; k++) {
      T v = jc_elem(x, in ? in[k] : (T)0, in != 0, src, base + k, pre, post);
      if (dst) dst[base + k] = v;
      if (out) out[k] = v;
    }
  }
  if (s && !e) {
    __threadfence_system();
    for (jc_u64 l = jc_tid(); l < nlines; l += jc_nthreads()) jc_store_relaxed(sl + 16 * l + 15, sflag);
  }
  jc_barrier();
  e = jc_line_err;
  if (e) return e;
  if (jc_tid() == 0) {
    if (r) jc_store_release(r->head, ++r->step);
    if (s) jc_post_step(s, JC_PROTO, nlines * 128);
  }
  jc_barrier();
  return JC_OK;
}
