/* Ring AllGather: each rank's block travels n-1 hops around the ring; every rank copies it
   into its place in the output and forwards it. `count` is the per-rank block size. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a), p = ch->ring_index;
  jc_u64 beg, end, cnt = a->count;
  jc_channel_range(cnt, x->chan, a->nchannels, &beg, &end);
  x->ref_input = 1; /* in place, the input is this rank's final output */
  T* mine = out + (jc_u64)a->rank * cnt;
  if (n == 1) return jc_local_copy(x, in + beg, mine + beg, end - beg, 0, 0);
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    JC_CHECK(jc_copy_send(x, &ch->ring_send, in + off, mine + off, len, 0));
    for (int k = 1; k < n; k++) {
      T* blk = out + (jc_u64)ch->ring_ranks[jc_mod(p - k, n)] * cnt + off;
      if (k < n - 1) JC_CHECK(jc_recv_copy_send(x, &ch->ring_recv, &ch->ring_send, blk, len));
      else JC_CHECK(jc_recv(x, &ch->ring_recv, blk, len));
    }
  }
  return JC_OK;
}
