/* What the CUDA protocols share at the end of a FIFO step and before a flag a peer polls:
   a fence whose scope is the connectors' (GPU scope where the peer's kernels run on this
   GPU in this process, `same_gpu`; system scope otherwise: another GPU, the host, another
   process), then plain stores of the counters (a release store each would fence again, at
   system scope; see docs/performance.md for what each costs a small call). */
static JC_DEVICE JC_INLINE void jc_fence_conns(const struct jc_conn* r, const struct jc_conn* s) {
  if ((r && !r->same_gpu) || (s && !s->same_gpu)) __threadfence_system();
  else __threadfence();
}

/* Thread 0, after a block barrier made every thread's slot accesses its own: posts the send
   step's size word, fences once, then frees the recv slot and posts the send step. */
static JC_DEVICE JC_INLINE void jc_end_step(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s, int proto,
                                            jc_u64 bytes) {
  if (s) jc_post_size(x, s, proto, bytes);
  jc_fence_conns(r, s);
  if (r) jc_store_relaxed(r->head, ++r->step);
  if (s) jc_store_relaxed(s->tail, ++s->step);
}
