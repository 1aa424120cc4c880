/* Simple protocol with a wire format, host: the framing of prims/host/simple.h (a step in
   one slot, its size word, then the tail with release order), with the step's elements
   encoded in the slot (common/wire.h) and decoded on arrival, folded in fp32. A received
   step forwarded unchanged keeps its bytes: re-encoding its decoded values could give
   other bits (a scale recomputed from decoded values), and every rank must decode the same.
   Partial sums cross a connector between ranks that share memory (wire_plain) as fp32:
   only the hops through the network round them. A partial sum is a step whose sender keeps
   no decoding of it (no dst) and whose receiver reduces its source into it (src); a final
   value, which every rank must hold with the same bits, travels as codes on every hop. */
#define JC_PROTO 0
#define JC_WIRE_TILE (JC_WIRE_BLOCK ? JC_WIRE_BLOCK : 256)
#define JC_SLOT_READ const
/* The host has no instructions for the narrow float formats: common/wire.h's branch-free
   conversions, which vectorize with the loops over a block that make them. */
#define JC_WIRE_SOFT_CVT
{% include "common/wire.h" %}
static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  const int rplain = r && src && r->wire_plain, splain = s && !dst && s->wire_plain;
  const jc_u64 rbytes = jc_wire_step_bytes(n, rplain), sbytes = jc_wire_step_bytes(n, splain);
  if (s) JC_CHECK(jc_wait_space(x, s));
  if (r) {
    JC_CHECK(jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA));
    if (jc_load_relaxed(&r->sizes[r->step % JC_STEPS]) != jc_size_word(JC_PROTO, rbytes, x->tag_recv))
      return jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
  }
  const char* in = r ? jc_slot(r, JC_PROTO) : 0;
  char* out = s ? jc_slot(s, JC_PROTO) : 0;
  if (in && out && !src && !pre && !post && rplain == splain) {
    jc_copy(out, in, rbytes);
    out = 0;
  }
  /* Whole tiles with their length a constant: loops of known trip count, no remainder. */
  jc_u64 b = 0;
  for (; b + JC_WIRE_TILE <= n; b += JC_WIRE_TILE)
    jc_wire_tile(x, in, rplain, out, splain, src, dst, n, b, JC_WIRE_TILE, pre, post);
  if (b < n) jc_wire_tile(x, in, rplain, out, splain, src, dst, n, b, n - b, pre, post);
  if (r) jc_store_release(r->head, ++r->step);
  if (s) jc_post_step(x, s, JC_PROTO, sbytes);
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
