/* SendRecv: `count` elements to the p2p_send peer and `recv_count` from the p2p_recv peer
   (either may be absent). While both directions have steps left, each turn moves whichever
   the peers allow (jc_wait_either), both where both can, so that any pattern of pairs (a
   ring, an exchange, a send to self, a peer that posts its two as separate calls)
   progresses within the FIFO depth; in place, a step is received only once it was sent.
   Its steps carry their direction's bytes as the call's tag (see jc_ctx_init). */
#define JC_P2P 1
/* Whether receiving n elements at dst would land on elements [sb, se) of src, still to be
   sent (a shift in place). */
static JC_DEVICE JC_INLINE int jc_lands_on_unsent(const T* dst, jc_u64 n, const T* src, jc_u64 sb, jc_u64 se) {
  return sb < se && (jc_u64)dst < (jc_u64)(src + se) && (jc_u64)(src + sb) < (jc_u64)(dst + n);
}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  struct jc_conn* s = a->p2p_send ? &a->p2p_send[x->chan] : 0;
  struct jc_conn* r = a->p2p_recv ? &a->p2p_recv[x->chan] : 0;
  jc_u64 sb = 0, se = 0, rb = 0, re = 0;
  if (s) jc_channel_range(a->count, x->chan, a->nchannels, &sb, &se);
  if (r) jc_channel_range(a->recv_count, x->chan, a->nchannels, &rb, &re);
  while (sb < se || rb < re) {
    int ready = JC_READY_SEND | JC_READY_RECV;
    jc_u64 rlen = jc_min(a->chunk_elems, re - rb);
    /* A receive must not overwrite what is still to be sent: the send goes first then, step
       for step, as the FIFOs' order promises. */
    if (rb < re && jc_lands_on_unsent(out + rb, rlen, in, sb, se))
      ready = JC_READY_SEND;
    else if (sb < se && rb < re)
      JC_CHECK(jc_wait_either(x, s, r, &ready));
    if (sb < se && (ready & JC_READY_SEND)) {
      jc_u64 len = jc_min(a->chunk_elems, se - sb);
      JC_CHECK(jc_send(x, s, in + sb, len, 0));
      sb += len;
    }
    if (rb < re && (ready & JC_READY_RECV)) {
      JC_CHECK(jc_recv(x, r, out + rb, rlen));
      rb += rlen;
    }
  }
  return JC_OK;
}
