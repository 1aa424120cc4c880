/* Ring Broadcast: a chain from the root along the ring; each chunk is copied to the output
   and forwarded (copy-send at the root, recv-copy-send in the middle, recv at the end). */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a);
  int dist = jc_mod(ch->ring_index - jc_ring_pos(ch, n, a->root), n);
  jc_u64 beg, end;
  jc_channel_range(a->count, x->chan, a->nchannels, &beg, &end);
  x->ref_input = 1; /* in place, the input is this rank's final output */
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 0, 0);
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    if (dist == 0) JC_CHECK(jc_copy_send(x, &ch->ring_send, in + off, out + off, len, 0));
    else if (dist == n - 1) JC_CHECK(jc_recv(x, &ch->ring_recv, out + off, len));
    else JC_CHECK(jc_recv_copy_send(x, &ch->ring_recv, &ch->ring_send, out + off, len));
  }
  return JC_OK;
}
