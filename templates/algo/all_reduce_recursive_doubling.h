/* Recursive doubling AllReduce: per chunk, log2(p) rounds among p ranks (p the largest power
   of two <= n); in round k each of them swaps its partial result with the rank whose
   position differs in bit k, and both combine the two, the lower positions' value on the
   left, so that every rank computes the same expression. With n not a power of two, the
   first 2(n - p) ranks pair up first: an even rank hands its input to the odd one after it,
   which takes its place in the rounds, and gets the result back from it at the end. Rank
   positions stay in rank order, so each partial result is a run of consecutive ranks. Few
   hops and few messages (each rank sends log2(p) times, plus one for the paired ranks), at
   log2(p) times the data: for small calls between hosts, where a hop is a network message.
   Uses the p2p connectors. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int n = JC_NRANKS(a), me = a->rank, c = x->chan;
  jc_u64 beg, end;
  jc_channel_range(a->count, c, a->nchannels, &beg, &end);
  if (n == 1) return jc_local_copy(x, in + beg, out + beg, end - beg, 1, 1);
  int p = 1;
  while (2 * p <= n) p *= 2;
  int paired = 2 * (n - p);          /* ranks below this pair up around the rounds */
  int folded = me < paired && !(me & 1); /* hands its input to me + 1 and sits the rounds out */
  int pos = me < paired ? me / 2 : me - paired / 2; /* position among the p */
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    if (folded) {
      JC_CHECK(jc_send(x, &a->peer_send[me + 1][c], in + off, len, 1));
      JC_CHECK(jc_recv(x, &a->peer_recv[me + 1][c], out + off, len));
      continue;
    }
    const T* acc = in + off;
    int pre = 1;
    if (me < paired) {
      JC_CHECK(jc_recv_reduce_copy(x, &a->peer_recv[me - 1][c], in + off, out + off, len, 1, 0));
      acc = out + off;
      pre = 0;
    }
    for (int bit = 1; bit < p; bit <<= 1) {
      int other = pos ^ bit;
      int q = other < paired / 2 ? 2 * other + 1 : other + paired / 2;
      int last = 2 * bit == p;
      JC_CHECK(jc_send(x, &a->peer_send[q][c], acc, len, pre));
      if (other < pos) JC_CHECK(jc_recv_reduce_copy(x, &a->peer_recv[q][c], acc, out + off, len, pre, last));
      else JC_CHECK(jc_reduce_recv_copy(x, &a->peer_recv[q][c], acc, out + off, len, pre, last));
      acc = out + off;
      pre = 0;
    }
    if (me < paired) JC_CHECK(jc_send(x, &a->peer_send[me - 1][c], out + off, len, 0));
  }
  return JC_OK;
}
