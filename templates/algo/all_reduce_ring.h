/* Ring AllReduce: per loop of nranks chunks, a reduce-scatter then an all-gather around the
   channel's ring: send, (n-2) x recv-reduce-send, recv-reduce-copy-send, (n-2) x
   recv-copy-send, recv — 2(n-1) steps. Chunk c is finished by ring position c - 1. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a), p = ch->ring_index;
  jc_u64 beg, end;
  jc_channel_range(a->count, x->chan, a->nchannels, &beg, &end);
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 1, 1);
  /* Out of place the input is never written (AllReduce's buffers are the same or disjoint):
     its sends may go by reference. */
  x->ref_input = in != out;
  struct jc_conn* s = &ch->ring_send;
  struct jc_conn* r = &ch->ring_recv;
  jc_u64 loop = (jc_u64)n * a->chunk_elems;
  for (jc_u64 off = beg; off < end; off += loop) {
    jc_u64 rem = jc_min(end - off, loop), cs = jc_split(rem, n, a->chunk_elems);
/* offset and length of chunk c of this loop (possibly empty at the end) */
#define JC_CHUNK(c) jc_u64 o = off + (jc_u64)(c) * cs, len = (jc_u64)(c) * cs >= rem ? 0 : jc_min(cs, rem - (jc_u64)(c) * cs)
    { JC_CHUNK(p); JC_CHECK(jc_send(x, s, in + o, len, 1)); }
    for (int k = 1; k < n - 1; k++) { JC_CHUNK(jc_mod(p - k, n)); JC_CHECK(jc_recv_reduce_send(x, r, s, in + o, len, 1)); }
    { JC_CHUNK(jc_mod(p + 1, n)); JC_CHECK(jc_recv_reduce_copy_send(x, r, s, in + o, out + o, len, 1, 1)); }
    for (int k = 0; k < n - 2; k++) { JC_CHUNK(jc_mod(p - k, n)); JC_CHECK(jc_recv_copy_send(x, r, s, out + o, len)); }
    { JC_CHUNK(jc_mod(p + 2, n)); JC_CHECK(jc_recv(x, r, out + o, len)); }
#undef JC_CHUNK
  }
  return JC_OK;
}
