/* LL protocol, host: 16-byte lines of two 8-byte {4 data bytes, 4-byte flag} halves. Each
   half is one 64-bit atomic store, so a matching flag (step + 1) certifies its own data and
   no fence is needed; 8 data bytes per line. A step's first line is its header: the step's
   bytes and the sending call's tag (jc_call_tag), which the receiver compares with its own
   before it takes any data, so that ranks calling differently fail instead of pairing steps
   (the header shares the first data lines' cache line: one handover still moves an 8-byte
   step). Tail is posted too, so that a later Simple step on the same connector finds the
   step count current. */
#define JC_PROTO 1
#define JC_LL_ELEMS (8 / sizeof(T))

/* The header line's 8 data bytes: the step's bytes, then the tag. */
static JC_DEVICE JC_INLINE jc_u64 jc_ll_header(jc_u64 n, jc_u64 tag) { return n * sizeof(T) | tag << 32; }

static JC_DEVICE int jc_ll_read(struct jc_ctx* x, struct jc_conn* r, const jc_u64* line, jc_u32 flag, jc_u64* data) {
  jc_u64 spins = 0;
  int e = JC_OK;
  for (;;) {
    jc_u64 lo = jc_load_relaxed(line), hi = jc_load_relaxed(line + 1);
    if ((jc_u32)(lo >> 32) == flag && (jc_u32)(hi >> 32) == flag) {
      *data = (lo & 0xffffffffull) | (hi << 32);
      x->wait_start = 0;
      return JC_OK;
    }
    if (e) return jc_fail(x, e, r->peer, JC_WAIT_DATA); /* still short after a failed check */
    e = jc_check(x, ++spins, r->peer);
    if (!e) jc_relax(spins, x->args->spin);
  }
}

static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  if (s) JC_CHECK(jc_wait_space(x, s));
  const jc_u64* rl = r ? (const jc_u64*)jc_slot(r, JC_PROTO) : 0;
  jc_u64* sl = s ? (jc_u64*)jc_slot(s, JC_PROTO) : 0;
  jc_u64 rflag = r ? (jc_u32)(r->step + 1) : 0, sflag = s ? (jc_u32)(s->step + 1) : 0;
  jc_u64 nlines = (n + JC_LL_ELEMS - 1) / JC_LL_ELEMS;
  if (r) {
    jc_u64 h;
    JC_CHECK(jc_ll_read(x, r, rl, (jc_u32)rflag, &h));
    if (h != jc_ll_header(n, x->tag_recv)) return jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
    rl += 2;
  }
  if (s) {
    jc_u64 h = jc_ll_header(n, x->tag_send);
    jc_store_relaxed(sl, (h & 0xffffffffull) | (sflag << 32));
    jc_store_relaxed(sl + 1, (h >> 32) | (sflag << 32));
    sl += 2;
  }
  for (jc_u64 l = 0; l < nlines; l++) {
    union { jc_u64 u; T v[JC_LL_ELEMS]; } in, out;
    in.u = 0;
    out.u = 0;
    if (r) JC_CHECK(jc_ll_read(x, r, rl + 2 * l, (jc_u32)rflag, &in.u));
    jc_u64 base = l * JC_LL_ELEMS, k_end = jc_min(JC_LL_ELEMS, n - base);
    for (jc_u64 k = 0; k < k_end; k++) {
      T v = jc_elem(x, in.v[k], r != 0, src, base + k, pre, post);
      if (dst) dst[base + k] = v;
      out.v[k] = v;
    }
    if (s) {
      jc_store_relaxed(sl + 2 * l, (out.u & 0xffffffffull) | (sflag << 32));
      jc_store_relaxed(sl + 2 * l + 1, (out.u >> 32) | (sflag << 32));
    }
  }
  if (r) jc_store_release(r->head, ++r->step);
  if (s) jc_post_step(x, s, JC_PROTO, (nlines + 1) * 16);
  return JC_OK;
}
