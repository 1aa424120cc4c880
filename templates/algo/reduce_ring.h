/* Ring Reduce: a chain along the ring that starts after the root and ends at it; each rank
   adds its input to what it receives and forwards it, the root writes the result. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a);
  int dist = jc_mod(ch->ring_index - jc_ring_pos(ch, n, a->root), n);
  jc_u64 beg, end;
  jc_channel_range(a->count, x->chan, a->nchannels, &beg, &end);
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 1, 1);
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    if (dist == 1) JC_CHECK(jc_send(x, &ch->ring_send, in + off, len, 1));
    else if (dist == 0) JC_CHECK(jc_recv_reduce_copy(x, &ch->ring_recv, in + off, out + off, len, 1, 1));
    else JC_CHECK(jc_recv_reduce_send(x, &ch->ring_recv, &ch->ring_send, in + off, len, 1));
  }
  return JC_OK;
}
