/* Simple protocol with a wire format, host: the framing of prims/host/simple.h (a step in
   one slot, its size word, then the tail with release order), with the step's elements
   encoded in the slot (common/wire.h) and decoded on arrival, folded in fp32. A received
   step forwarded unchanged keeps its bytes: re-encoding its decoded values could give
   other bits (a scale recomputed from decoded values), and every rank must decode the same. */
#define JC_PROTO 0
#define JC_WIRE_TILE (JC_WIRE_BLOCK ? JC_WIRE_BLOCK : 256)
#define JC_SLOT_READ const
/* The host has no instructions for the narrow float formats: common/wire.h's branch-free
   conversions, which vectorize with the loops over a block that make them. */
#define JC_WIRE_SOFT_CVT
{% include "common/wire.h" %}
static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  const jc_u64 bytes = jc_wire_bytes(n);
  if (s) JC_CHECK(jc_wait_space(x, s));
  if (r) {
    JC_CHECK(jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA));
    if (jc_load_relaxed(&r->sizes[r->step % JC_STEPS]) != jc_size_word(JC_PROTO, bytes, x->tag_recv))
      return jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
  }
  const char* in = r ? jc_slot(r, JC_PROTO) : 0;
  char* out = s ? jc_slot(s, JC_PROTO) : 0;
  if (in && out && !src && !pre && !post) {
    jc_copy(out, in, bytes);
    out = 0;
  }
  /* Whole tiles with their length a constant: loops of known trip count, no remainder. */
  jc_u64 b = 0;
  for (; b + JC_WIRE_TILE <= n; b += JC_WIRE_TILE) jc_wire_tile(x, in, out, src, dst, n, b, JC_WIRE_TILE, pre, post);
  if (b < n) jc_wire_tile(x, in, out, src, dst, n, b, n - b, pre, post);
  if (r) jc_store_release(r->head, ++r->step);
  if (s) jc_post_step(x, s, JC_PROTO, bytes);
  return JC_OK;
}

/* Sends the step last posted on `sent` again, its bytes as they are, through `s`. */
static JC_DEVICE int jc_wire_resend(struct jc_ctx* x, const struct jc_conn* sent, struct jc_conn* s, jc_u64 n) {
  const jc_u64 bytes = jc_wire_bytes(n);
  JC_CHECK(jc_wait_space(x, s));
  jc_copy(jc_slot(s, JC_PROTO), jc_wire_posted(sent), bytes);
  jc_post_step(x, s, JC_PROTO, bytes);
  return JC_OK;
}
