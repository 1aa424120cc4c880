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
