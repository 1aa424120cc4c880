/* SendRecv: `count` elements to the p2p_send peer and `recv_count` from the p2p_recv peer
   (either may be absent). While both directions have steps left, each turn moves whichever
   the peers allow (jc_wait_either), both where both can, so that any pattern of pairs (a
   ring, an exchange, a send to self, a peer that posts its two as separate calls)
   progresses within the FIFO depth. Its steps carry their direction's bytes as the call's
   tag (see jc_ctx_init). */
#define JC_P2P 1
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
    if (sb < se && rb < re) JC_CHECK(jc_wait_either(x, s, r, &ready));
    if (sb < se && (ready & JC_READY_SEND)) {
      jc_u64 len = jc_min(a->chunk_elems, se - sb);
      JC_CHECK(jc_send(x, s, in + sb, len, 0));
      sb += len;
    }
    if (rb < re && (ready & JC_READY_RECV)) {
      jc_u64 len = jc_min(a->chunk_elems, re - rb);
      JC_CHECK(jc_recv(x, r, out + rb, len));
      rb += len;
    }
  }
  return JC_OK;
}
