/* LL128 protocol, host: 128-byte lines of 15 data words and a flag word (step + 1, with
   the sending call's tag above it: JC_LL128_TAG_SHIFT; a line of this step with another
   tag fails the call, as ranks that call differently must not pair their steps). The
   flag is word 7, the last of the line's first 64-byte cache line, so that a step of up to
   56 bytes is one cache line handed over, not two in sequence (with the flag last, an 8-byte
   AllReduce at 2 ranks lost 16-39% in the VM's slower cross-CPU phases). The data are plain
   stores published by a release store of the flag; the reader acquires the flag before it
   reads either half. 120 data bytes per line: 56 before the flag, 64 after. */
#define JC_PROTO 2
#define JC_LL128_ELEMS (120 / sizeof(T))
#define JC_LL128_FLAG 7
#define JC_LL128_HEAD (56 / sizeof(T)) /* elements before the flag */

/* One contiguous run of a line: elements [base, base + k_end) of the step, read from `in`
   (the received line's run, or none) and written to `out` (the sent line's run, or none).
   Not forced inline: two copies of its loops in every primitive made LL128 kernels take
   1.7x as long to compile, for no measurable gain at 8 B. */
static JC_DEVICE void jc_ll128_run(struct jc_ctx* x, const T* in, T* out, const T* src, T* dst,
                                   jc_u64 base, jc_u64 k_end, int pre, int post) {
  if ((in || src) && !(in && src) && !pre && !post) {
    /* A pure move goes through jc_copy, as Simple's do: collectives that only move data
       run as bytes, and an element loop over a line's 120 bytes cost Broadcast at
       2 ranks 64 B 0.70 us against Simple's 0.52. */
    const T* from = in ? in : src + base;
    if (dst && dst + base != from) jc_copy(dst + base, from, k_end * sizeof(T));
    if (out) jc_copy(out, from, k_end * sizeof(T));
    return;
  }
  for (jc_u64 k = 0; k < k_end; k++) {
    T v = jc_elem(x, in ? in[k] : (T)0, in != 0, src, base + k, pre, post);
    if (dst) dst[base + k] = v;
    if (out) out[k] = v;
  }
}

static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  if (s) JC_CHECK(jc_wait_space(x, s));
  jc_u64* rl = r ? (jc_u64*)jc_slot(r, JC_PROTO) : 0;
  jc_u64* sl = s ? (jc_u64*)jc_slot(s, JC_PROTO) : 0;
  jc_u64 rflag = r ? (r->step + 1) | x->tag_recv << JC_LL128_TAG_SHIFT : 0;
  jc_u64 sflag = s ? (s->step + 1) | x->tag_send << JC_LL128_TAG_SHIFT : 0;
  const jc_u64 step_mask = (1ull << JC_LL128_TAG_SHIFT) - 1;
  jc_u64 nlines = (n + JC_LL128_ELEMS - 1) / JC_LL128_ELEMS;
  for (jc_u64 l = 0; l < nlines; l++) {
    jc_u64* in = r ? rl + 16 * l : 0;
    if (r) {
      jc_u64 spins = 0;
      int e = JC_OK;
      jc_u64 f;
      while ((f = jc_load_acquire(in + JC_LL128_FLAG)) != rflag) {
        if ((f & step_mask) == (rflag & step_mask)) return jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
        if (e) return jc_fail(x, e, r->peer, JC_WAIT_DATA); /* still short after a failed check */
        e = jc_check(x, ++spins, r->peer);
        if (!e) jc_relax(spins, x->args->spin);
      }
      x->wait_start = 0;
    }
    jc_u64* out = s ? sl + 16 * l : 0;
    jc_u64 base = l * JC_LL128_ELEMS, k_end = jc_min(JC_LL128_ELEMS, n - base);
    jc_u64 head = jc_min(JC_LL128_HEAD, k_end);
    jc_ll128_run(x, (const T*)in, (T*)out, src, dst, base, head, pre, post);
    if (k_end > head)
      jc_ll128_run(x, in ? (const T*)(in + JC_LL128_FLAG + 1) : 0, out ? (T*)(out + JC_LL128_FLAG + 1) : 0,
                   src, dst, base + head, k_end - head, pre, post);
    if (s) jc_store_release(out + JC_LL128_FLAG, sflag);
  }
  if (r) jc_store_release(r->head, ++r->step);
  if (s) jc_post_step(x, s, JC_PROTO, nlines * 128);
  return JC_OK;
}
