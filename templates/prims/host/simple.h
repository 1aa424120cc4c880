/* Simple protocol, host: a step's elements are copied straight into the receiver's slot;
   the tail counter is published with release order after them, and the receiver hands the
   slot back through head. Pure moves go through jc_copy (memcpy, the C library's fastest copy);
   only steps that compute run the element loop, a tile at a time. Copying steps of
   JC_STREAM_MIN bytes or more, and computing steps of JC_STREAM_MIN_COMPUTED or more, are
   written into the slot with the prelude's cache-bypassing jc_stream: the receiver reads
   them from memory, not from this core's cache, which measured faster for a computing step
   from 4 KiB but slower for a copy below 16 KiB. Large outputs are
   written the same way (the prelude's JC_BYPASS_OUTPUT).
   Over the built-in sockets (a proxied connector) a large step that only moves bytes skips
   the FIFO's copies: a send posts the address of its bytes (JC_SIZE_REF), which the proxy
   writes to the socket from there, and a receive into the output posts where it goes
   (jc_land), where the proxy reads it from the socket; the kernel returns only once its
   steps by reference are written out (jc_settle). */
#define JC_PROTO 0
#define JC_STREAM_MIN 16384
#define JC_STREAM_MIN_COMPUTED 4096
#define JC_TILE_BYTES 2048
#define JC_LANDS 1
/* Posts where r's next step of n elements may land, before any wait for it: at dst, when it
   only moves bytes into the output and is large (the proxy then also keeps the steps after
   it in the socket until the kernel reaches them, rather than reading them ahead into their
   slots); else nothing, and it lands in its slot. Returns whether it posted dst. */
static JC_DEVICE int jc_land(struct jc_ctx* x, struct jc_conn* r, T* dst, jc_u64 n) {
  if (!r->proxied || !dst || n * sizeof(T) < JC_REF_MIN || ((jc_u64)dst >> JC_LAND_TAG_SHIFT) != 0) return 0;
  jc_u64* l = r->lands;
  jc_u64 at = (jc_u64)dst | ((r->step & 0xffff) << JC_LAND_TAG_SHIFT);
  if (l[JC_LAND_AT] != at) { /* not posted yet (a caller may post before polling) */
    l[JC_LAND_WANT] = jc_size_word(JC_PROTO, n * sizeof(T), x->tag_recv);
    jc_store_release(&l[JC_LAND_AT], at);
  }
  return 1;
}
static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  int lands = r && jc_land(x, r, src || pre || post ? 0 : dst, n), landed = 0;
  if (s) JC_CHECK(jc_wait_space(x, s));
  if (r) {
    JC_CHECK(jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA));
    /* The sender's size word of this step, written before its tail: another size or tag
       means its call differs, and pairing the steps would give a wrong result. */
    jc_u64 got = jc_load_relaxed(&r->sizes[r->step % JC_STEPS]);
    if (lands) {
      jc_store_release(&r->lands[JC_LAND_AT], 0);
      landed = (got & JC_SIZE_REF) != 0;
      got &= ~JC_SIZE_REF;
    }
    if (got != jc_size_word(JC_PROTO, n * sizeof(T), x->tag_recv))
      return jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
  }
  const T* in = landed ? dst : r ? (const T*)jc_slot(r, JC_PROTO) : 0;
  T* out = s ? (T*)jc_slot(s, JC_PROTO) : 0;
  const T* from = in ? in : src;
  int computes = (in && src) || (pre && JC_HAS_PRE) || ((post & JC_POST) && JC_HAS_POST);
  /* A step that only moves bytes may go by reference: from the output it just wrote (final
     in every algorithm), or from the input where the call never writes it; never from a
     receive slot, which is handed back now. (A computed step is written into the slot as it
     is computed, which measured faster than sending it from the output afterwards.) */
  const T* keep = computes ? 0 : dst ? dst : (!r && x->ref_input) ? src : 0;
  int ref = out && s->proxied && keep && n * sizeof(T) >= JC_REF_MIN;
  if (ref) out = 0; /* the slot carries the address only */
  int stream = out && n * sizeof(T) >= (computes ? JC_STREAM_MIN_COMPUTED : JC_STREAM_MIN) && ((jc_u64)out & 15) == 0;
  int dstream = dst && JC_BYPASS_OUTPUT(x->args) && ((jc_u64)dst & 15) == 0;
  if (!computes) {
    if (dst && dst != from) { if (dstream) jc_stream(dst, from, n * sizeof(T)); else jc_copy(dst, from, n * sizeof(T)); }
    if (stream) jc_stream(out, from, n * sizeof(T));
    else if (out) jc_copy(out, from, n * sizeof(T));
  } else {
    T tile[JC_TILE_BYTES / sizeof(T)];
    for (jc_u64 b = 0; b < n; b += JC_TILE_BYTES / sizeof(T)) {
      jc_u64 m = jc_min(JC_TILE_BYTES / sizeof(T), n - b);
      /* Computed into the tile alone, which nothing can alias, so that the loop vectorizes
         whether or not the call is in place; the output and the slot are copied from it (a
         store of each element to them as well kept the loop scalar, or made it check for
         overlap and fall back to scalar in place). */
      for (jc_u64 i = 0; i < m; i++) tile[i] = jc_elem(x, in ? in[b + i] : (T)0, in != 0, src, b + i, pre, post);
      if (dstream) jc_stream(dst + b, tile, m * sizeof(T));
      else if (dst) jc_copy(dst + b, tile, m * sizeof(T));
      if (stream) jc_stream(out + b, tile, m * sizeof(T));
      else if (out) jc_copy(out + b, tile, m * sizeof(T));
    }
  }
  if (stream || dstream) jc_stream_fence();
  if (r) jc_store_release(r->head, ++r->step);
  if (ref) {
    *(const T**)jc_slot(s, JC_PROTO) = keep;
    x->refs = 1;
    s->refs = s->step + 1;
    s->sizes[s->step % JC_STEPS] = jc_size_word(JC_PROTO, n * sizeof(T), x->tag_send) | JC_SIZE_REF;
    jc_store_release(s->tail, ++s->step);
  } else if (s) {
    jc_post_step(x, s, JC_PROTO, n * sizeof(T));
  }
  return JC_OK;
}
