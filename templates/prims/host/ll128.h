/* LL128 protocol, host: 128-byte lines of 15 data words and a flag word (the last). The
   data are plain stores published by a release store of the flag (step + 1); the reader
   acquires the flag before it reads the line. 120 data bytes per line. */
#define JC_PROTO 2
#define JC_LL128_ELEMS (120 / sizeof(T))

static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  if (s) JC_CHECK(jc_wait_space(x, s));
  jc_u64* rl = r ? (jc_u64*)jc_slot(r, JC_PROTO) : 0;
  jc_u64* sl = s ? (jc_u64*)jc_slot(s, JC_PROTO) : 0;
  jc_u64 rflag = r ? r->step + 1 : 0, sflag = s ? s->step + 1 : 0;
  jc_u64 nlines = (n + JC_LL128_ELEMS - 1) / JC_LL128_ELEMS;
  for (jc_u64 l = 0; l < nlines; l++) {
    const T* in = 0;
    if (r) {
      jc_u64* line = rl + 16 * l;
      jc_u64 spins = 0;
      int e = JC_OK;
      while (jc_load_acquire(line + 15) != rflag) {
        if (e) return jc_fail(x, e, r->peer, JC_WAIT_DATA); /* still short after a failed check */
        e = jc_check(x, ++spins, r->peer);
        if (!e) jc_relax(spins, x->args->spin);
      }
      x->wait_start = 0;
      in = (const T*)line;
    }
    T* out = s ? (T*)(sl + 16 * l) : 0;
    jc_u64 base = l * JC_LL128_ELEMS, k_end = jc_min(JC_LL128_ELEMS, n - base);
    if ((in || src) && !(in && src) && !pre && !post) {
      /* A pure move goes through jc_copy, as Simple's do: collectives that only move data
         run as bytes, and an element loop over a line's 120 bytes cost Broadcast at
         2 ranks 64 B 0.70 us against Simple's 0.52. */
      const T* from = in ? in : src + base;
      if (dst && dst + base != from) jc_copy(dst + base, from, k_end * sizeof(T));
      if (out) jc_copy(out, from, k_end * sizeof(T));
    } else {
      for (jc_u64 k = 0; k < k_end; k++) {
        T v = jc_elem(x, in ? in[k] : (T)0, in != 0, src, base + k, pre, post);
        if (dst) dst[base + k] = v;
        if (out) out[k] = v;
      }
    }
    if (s) jc_store_release(sl + 16 * l + 15, sflag);
  }
  if (r) jc_store_release(r->head, ++r->step);
  if (s) jc_post_step(s, JC_PROTO, nlines * 128);
  return JC_OK;
}
