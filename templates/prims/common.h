/* The named primitives the algorithms use, all one call of the protocol's
   jc_generic(x, recv, send, src, dst, n, pre, post), which moves one FIFO step of n <=
   chunk_elems elements: wait for the recv connector's data and/or the send connector's free
   slot; out[i] = post(recv[i] (+) pre(src[i])) with the missing parts left out; write out to
   dst and/or the send slot; release the recv slot and post the send step.
   `pre` applies the op's pre-operation (PreMulSum scalar) to src: set it when src is user
   input; `post` (JC_POST) applies the post-operation (integer Avg division) to a final
   result, and with JC_SRC_FIRST the combination is src (+) recv instead.
   Target- and protocol-independent. */
static JC_DEVICE JC_INLINE int jc_send(struct jc_ctx* x, struct jc_conn* s, const T* src, jc_u64 n, int pre) {
  return jc_generic(x, 0, s, src, 0, n, pre, 0);
}
static JC_DEVICE JC_INLINE int jc_recv(struct jc_ctx* x, struct jc_conn* r, T* dst, jc_u64 n) {
  return jc_generic(x, r, 0, 0, dst, n, 0, 0);
}
static JC_DEVICE JC_INLINE int jc_recv_copy_send(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s, T* dst, jc_u64 n) {
  return jc_generic(x, r, s, 0, dst, n, 0, 0);
}
static JC_DEVICE JC_INLINE int jc_copy_send(struct jc_ctx* x, struct jc_conn* s, const T* src, T* dst, jc_u64 n, int pre) {
  /* In place (src == dst) the local copy is skipped unless the pre-op changes the data, or
     a wire format's decoding replaces it (the sender keeps what its receivers get). */
#ifdef JC_WIRE
  return jc_generic(x, 0, s, src, dst, n, pre, 0);
#else
  return jc_generic(x, 0, s, src, (src == dst && !pre) ? 0 : dst, n, pre, 0);
#endif
}
static JC_DEVICE JC_INLINE int jc_recv_reduce_send(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s, const T* src, jc_u64 n, int pre) {
  return jc_generic(x, r, s, src, 0, n, pre, 0);
}
static JC_DEVICE JC_INLINE int jc_recv_reduce_copy(struct jc_ctx* x, struct jc_conn* r, const T* src, T* dst, jc_u64 n, int pre, int post) {
  return jc_generic(x, r, 0, src, dst, n, pre, post);
}
/* dst = post(pre(src) (+) recv): the source element left of the received one. */
static JC_DEVICE JC_INLINE int jc_reduce_recv_copy(struct jc_ctx* x, struct jc_conn* r, const T* src, T* dst, jc_u64 n, int pre, int post) {
  return jc_generic(x, r, 0, src, dst, n, pre, (post ? JC_POST : 0) | JC_SRC_FIRST);
}
static JC_DEVICE JC_INLINE int jc_recv_reduce_copy_send(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s, const T* src, T* dst, jc_u64 n, int pre, int post) {
  return jc_generic(x, r, s, src, dst, n, pre, post);
}
/* No peer involved (a single rank): dst = post(pre(src)). */
static JC_DEVICE JC_INLINE int jc_local_copy(struct jc_ctx* x, const T* src, T* dst, jc_u64 n, int pre, int post) {
  if (src == dst && !pre && !post) return JC_OK;
  return jc_generic(x, 0, 0, src, dst, n, pre, post);
}
{% if !cuda %}
/* Before a host kernel returns: every step it sent by reference written out by the proxy
   (the head passed it), for the caller may change its buffers once the call returns. A
   peer that fails meanwhile ends the wait as any other. */
static int jc_settle_conn(struct jc_ctx* x, struct jc_conn* c) {
  if (c->refs <= c->credit) return JC_OK;
  JC_CHECK(jc_wait_ge(x, c->head, c->refs, c->peer, JC_WAIT_SPACE));
  c->credit = jc_load_acquire(c->head);
  return JC_OK;
}
static int jc_settle(struct jc_ctx* x) {
  if (!x->refs) return JC_OK;
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  JC_CHECK(jc_settle_conn(x, &ch->ring_send));
  JC_CHECK(jc_settle_conn(x, &ch->tree_up_send));
  for (int k = 0; k < JC_MAX_TREE_ARITY; k++) JC_CHECK(jc_settle_conn(x, &ch->tree_down_send[k]));
  if (a->p2p_send) JC_CHECK(jc_settle_conn(x, &a->p2p_send[x->chan]));
  for (int q = 0; a->peer_send && q < JC_NRANKS(a); q++) JC_CHECK(jc_settle_conn(x, &a->peer_send[q][x->chan]));
  return JC_OK;
}
#ifndef JC_LANDS
/* Only Simple steps land in the output (prims/host/simple.h). */
#define jc_land(x, r, dst, n) ((void)0)
#endif
{% endif %}
