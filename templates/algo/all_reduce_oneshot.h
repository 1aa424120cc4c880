/* One-shot AllReduce: per chunk, every rank sends its input to every other rank, then
   folds the n values in rank order: v0 (+) (v1 (+) (... (+) v[n-1])), the same expression on
   every rank. Its own value enters the fold straight from its input where that is safe in
   place: as the innermost operand (the last rank), or at 2 ranks as the outer one. Other
   ranks send it to themselves too, over their own p2p FIFO, since the fold overwrites the
   output (in place, their input) before it reaches them. One hop of latency against the
   ring's 2(n-1), at n times the data: for small sizes. Uses the p2p connectors. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a), me = a->rank;
  jc_u64 beg, end;
  jc_channel_range(a->count, x->chan, a->nchannels, &beg, &end);
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 1, 1);
  /* Out of place the input is never written (AllReduce's buffers are the same or disjoint):
     its sends may go by reference. */
  x->ref_input = in != out;
  int self = me < n - 1 && n > 2;  /* whether this rank's value goes through its own FIFO */
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    /* Starting after this rank spreads the first sends over different receivers. */
    for (int k = 1; k <= n; k++) {
      int q = jc_mod(me + k, n);
      if (q != me || self) JC_CHECK(jc_send(x, &a->peer_send[q][x->chan], in + off, len, 1));
    }
    int q = n - 1;
    if (self) {
      JC_CHECK(jc_recv(x, &a->peer_recv[q][x->chan], out + off, len));
    } else if (me == n - 1) {
      q = n - 2;
      JC_CHECK(jc_recv_reduce_copy(x, &a->peer_recv[q][x->chan], in + off, out + off, len, 1, q == 0));
    } else {
      q = 0; /* 2 ranks, rank 0: v0 (+) v1 */
      JC_CHECK(jc_reduce_recv_copy(x, &a->peer_recv[1][x->chan], in + off, out + off, len, 1, 1));
    }
    while (--q >= 0) {
      JC_CHECK(jc_recv_reduce_copy(x, &a->peer_recv[q][x->chan], out + off, out + off, len, 0, q == 0));
    }
  }
  return JC_OK;
}
