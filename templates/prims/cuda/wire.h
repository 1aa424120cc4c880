/* Simple protocol with a wire format, CUDA: the framing of prims/cuda/simple.h (thread 0
   waits, a barrier hands the step to the block, thread 0 posts it after a second one) with
   the step encoded as prims/host/wire.h does, each thread folding its own tiles: single
   elements for the unscaled formats, whole blocks (and their scales) for the scaled ones.
   A forwarded step's bytes are copied as they are, a word at a time where they allow;
   partial sums cross a connector between ranks that share memory as fp32, as on the host. */
#define JC_PROTO 0
{% include "prims/cuda/step.h" %}
#define JC_WIRE_TILE (JC_WIRE_BLOCK ? JC_WIRE_BLOCK : 1)
/* The peer wrote the slot from outside this SM: volatile loads skip stale L1 lines. */
#define JC_SLOT_READ const volatile
{% include "common/wire.h" %}
/* A step's bytes copied as they are by the block's threads, a word at a time where they
   allow. */
static JC_DEVICE JC_INLINE void jc_wire_copy(char* out, JC_SLOT_READ char* in, jc_u64 bytes) {
  const jc_u64 nt = (jc_u64)jc_nthreads(), words = (bytes & 3) ? 0 : bytes / 4;
  for (jc_u64 i = (jc_u64)jc_tid(); i < words; i += nt) ((jc_u32*)out)[i] = ((JC_SLOT_READ jc_u32*)in)[i];
  for (jc_u64 i = words * 4 + (jc_u64)jc_tid(); i < bytes; i += nt) out[i] = in[i];
}

static JC_DEVICE __noinline__ int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  __shared__ int jc_wait_err;
  const int rplain = r && src && r->wire_plain, splain = s && !dst && s->wire_plain;
  const jc_u64 rbytes = jc_wire_step_bytes(n, rplain), sbytes = jc_wire_step_bytes(n, splain);
  if (jc_tid() == 0) {
    int e = s ? jc_wait_space(x, s) : JC_OK;
    if (!e && r) e = jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA);
    if (!e && r && jc_load_relaxed(&r->sizes[r->step % JC_STEPS]) != jc_size_word(JC_PROTO, rbytes, x->tag_recv))
      e = jc_fail(x, JC_ERR_MISMATCH, r->peer, JC_WAIT_DATA);
    jc_wait_err = e;
  }
  const volatile char* in = r ? (const volatile char*)jc_slot(r, JC_PROTO) : 0;
  char* out = s ? jc_slot(s, JC_PROTO) : 0;
  jc_barrier();
  int e = jc_wait_err;
  if (e) return e;
  const jc_u64 nt = (jc_u64)jc_nthreads();
  if (in && out && !src && !pre && !post && rplain == splain) {
    jc_wire_copy(out, in, rbytes);
    out = 0;
  }
  for (jc_u64 b = (jc_u64)jc_tid() * JC_WIRE_TILE; b < n; b += nt * JC_WIRE_TILE)
    jc_wire_tile(x, in, rplain, out, splain, src, dst, n, b, jc_min(JC_WIRE_TILE, n - b), pre, post);
  jc_barrier();
  if (jc_tid() == 0) jc_end_step(x, r, s, JC_PROTO, sbytes);
  jc_barrier();
  return JC_OK;
}

/* Sends the step last posted on `sent` again, its bytes as they are, through `s`. */
static JC_DEVICE __noinline__ int jc_wire_resend(struct jc_ctx* x, const struct jc_conn* sent, struct jc_conn* s, jc_u64 n) {
  __shared__ int jc_wait_err;
  const jc_u64 bytes = jc_wire_bytes(n);
  if (jc_tid() == 0) jc_wait_err = jc_wait_space(x, s);
  jc_barrier();
  if (jc_wait_err) return jc_wait_err;
  jc_wire_copy(jc_slot(s, JC_PROTO), jc_wire_posted(sent), bytes);
  jc_barrier();
  if (jc_tid() == 0) jc_end_step(x, 0, s, JC_PROTO, bytes);
  jc_barrier();
  return JC_OK;
}
