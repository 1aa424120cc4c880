/* Ring ReduceScatter: block q (of the n per-rank blocks of `count` elements) is reduced
   along the ring starting at position q + 1 and ends, complete, at position q. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a), p = ch->ring_index;
  jc_u64 beg, end, cnt = a->count;
  jc_channel_range(cnt, x->chan, a->nchannels, &beg, &end);
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 1, 1);
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    for (int k = 0; k < n; k++) {
      const T* blk = in + (jc_u64)ch->ring_ranks[jc_mod(p - k - 1, n)] * cnt + off;
      if (k == 0) JC_CHECK(jc_send(x, &ch->ring_send, blk, len, 1));
      else if (k < n - 1) JC_CHECK(jc_recv_reduce_send(x, &ch->ring_recv, &ch->ring_send, blk, len, 1));
      else JC_CHECK(jc_recv_reduce_copy(x, &ch->ring_recv, blk, out + off, len, 1, 1));
    }
  }
  return JC_OK;
}
