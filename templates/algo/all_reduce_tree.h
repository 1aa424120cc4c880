/* Tree AllReduce: all chunks of the channel are reduced up the channel's tree (children's
   partial results combined into the output, the last child's straight into the send to the
   parent), then the root's result is broadcast down. Up and down are separate passes, so
   each pipelines through the tree's depth. In a wire format (JC_WIRE) each edge up carries
   a partial sum encoded once, and the root encodes its sums once for the way down, keeping
   their decoding: every node forwards those bytes to all its children as they are, so that
   every rank decodes the same bits. */
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  struct jc_channel* ch = &a->channels[x->chan];
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  int nch = ch->tree_nchildren, root = ch->tree_parent < 0;
  jc_u64 beg, end;
  jc_channel_range(a->count, x->chan, a->nchannels, &beg, &end);
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    if (nch == 0) {
      if (root) JC_CHECK(jc_local_copy(x, in + off, out + off, len, 1, 1));
      else JC_CHECK(jc_send(x, &ch->tree_up_send, in + off, len, 1));
      continue;
    }
    const T* acc = in + off;
    int pre = 1;
    for (int c = 0; c < nch; c++) {
      int last = c == nch - 1;
      if (last && !root) JC_CHECK(jc_recv_reduce_send(x, &ch->tree_down_recv[c], &ch->tree_up_send, acc, len, pre));
      else JC_CHECK(jc_recv_reduce_copy(x, &ch->tree_down_recv[c], acc, out + off, len, pre, last));
      acc = out + off;
      pre = 0;
    }
  }
  for (jc_u64 off = beg; off < end; off += a->chunk_elems) {
    jc_u64 len = jc_min(a->chunk_elems, end - off);
    int first = 0;
    if (!root) {
      if (nch == 0) JC_CHECK(jc_recv(x, &ch->tree_up_recv, out + off, len));
      else JC_CHECK(jc_recv_copy_send(x, &ch->tree_up_recv, &ch->tree_down_send[0], out + off, len));
      first = 1;
    }
#ifdef JC_WIRE
    if (!first && nch > 0) JC_CHECK(jc_copy_send(x, &ch->tree_down_send[0], out + off, out + off, len, 0));
    for (int c = 1; c < nch; c++) JC_CHECK(jc_wire_resend(x, &ch->tree_down_send[0], &ch->tree_down_send[c], len));
#else
    for (int c = first; c < nch; c++) JC_CHECK(jc_send(x, &ch->tree_down_send[c], out + off, len, 0));
#endif
  }
  return JC_OK;
}
