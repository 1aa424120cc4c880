/* One-shot AllReduce: per chunk, every rank sends its input to every rank (itself
   included, over its own p2p FIFO, so that in place works), then folds the n received
   chunks in rank order: v0 (+) (v1 (+) (... (+) v[n-1])), the same expression on every
   rank. One hop of latency against the ring's 2(n-1), at n times the data: for small
   sizes. Uses the p2p connectors. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = a->nranks, me = a->rank;
  jc_u64 beg, end;
  jc_channel_range(a->count, x->chan, a->nchannels, &beg, &end);
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 1, 1);
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    /* Starting after this rank spreads the first sends over different receivers. */
    for (int k = 1; k <= n; k++) {
      int q = jc_mod(me + k, n);
      JC_CHECK(jc_send(x, &a->peer_send[q][x->chan], in + off, len, 1));
    }
    JC_CHECK(jc_recv(x, &a->peer_recv[n - 1][x->chan], out + off, len));
    for (int q = n - 2; q >= 0; q--) {
      JC_CHECK(jc_recv_reduce_copy(x, &a->peer_recv[q][x->chan], out + off, out + off, len, 0, q == 0));
    }
  }
  return JC_OK;
}
