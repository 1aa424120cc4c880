/* SendRecv: `count` elements to the p2p_send peer and `recv_count` from the p2p_recv peer
   (either may be absent). While both directions have steps left, each turn moves whichever
   the peers allow (jc_wait_either), both where both can, so that any pattern of pairs (a
   ring, an exchange, a send to self, a peer that posts its two as separate calls)
   progresses within the FIFO depth; in place, a step is received only once it was sent.
   Its steps carry their direction's bytes as the call's tag (see jc_ctx_init). */
#define JC_P2P 1
/* The channel's part of a transfer of `count` elements; both ends compute it from the count
   alone. On the host a transfer spreads over one channel a FIFO step's worth, up to every
   channel: below that a channel's thread costs more than it moves (over a network, threads
   that take turns at the rank's one proxy, on few cores). On a GPU, over every channel. */
static JC_DEVICE JC_INLINE void jc_p2p_range(const struct jc_args* a, jc_u64 count, int chan, jc_u64* beg, jc_u64* end) {
  int nch = a->nchannels;
{% if !cuda %}  if (count <= a->chunk_elems) {
    nch = 1;
  } else if (nch > 1) {
    jc_u64 steps = (count + a->chunk_elems - 1) / a->chunk_elems;
    if (steps < (jc_u64)nch) nch = (int)steps;
  }
{% endif %}  if (chan >= nch) {
    *beg = *end = count;
    return;
  }
  jc_channel_range(count, chan, nch, beg, end);
}
/* Whether receiving n elements at dst would land on elements [sb, se) of src, still to be
   sent (a shift in place). */
static JC_DEVICE JC_INLINE int jc_lands_on_unsent(const T* dst, jc_u64 n, const T* src, jc_u64 sb, jc_u64 se) {
  return sb < se && (jc_u64)dst < (jc_u64)(src + se) && (jc_u64)(src + sb) < (jc_u64)(dst + n);
}
/* A shift in place over several channels: whether receiving n elements at dst would land on
   what another channel has still to send. Each channel splits the buffer its own way
   (jc_p2p_range) and publishes its send steps done (jc_channel.sent, from zero at every
   launch: jc_shift_done). */
static JC_DEVICE int jc_lands_on_others_now(struct jc_ctx* x, const T* dst, jc_u64 n, const T* src) {
  const struct jc_args* a = x->args;
  for (int c = 0; c < a->nchannels; c++) {
    jc_u64 cb = 0, ce = 0;
    if (c == x->chan) continue;
    jc_p2p_range(a, a->count, c, &cb, &ce);
    jc_u64 done = jc_load_acquire(&a->channels[c].sent) * a->chunk_elems;
    if (jc_lands_on_unsent(dst, n, src, jc_min(cb + done, ce), ce)) return 1;
  }
  return 0;
}
/* The same, decided by thread 0 for the whole CTA (the counters move while its threads
   look). With `wait`, it waits until the receive no longer lands there, bounded as any other
   wait (the channel waited on waits only on its own peers); a failed wait lands, its error in
   *err. */
struct jc_lands { int lands, err; };
static JC_DEVICE int jc_lands_on_others(struct jc_ctx* x, const T* dst, jc_u64 n, const T* src, int wait, int peer, int* err) {
  JC_SHARED struct jc_lands got;
  if (jc_tid() == 0) {
    jc_u64 spins = 0;
    int e = JC_OK;
    got.err = JC_OK;
    while ((got.lands = jc_lands_on_others_now(x, dst, n, src)) && wait) {
      if (e) { /* still there after a failed check */
        got.err = jc_fail(x, e, peer, JC_WAIT_SPACE);
        break;
      }
      e = jc_check(x, ++spins, peer);
      if (!e) jc_relax(spins, x->args->spin);
    }
    x->wait_start = 0;
  }
  jc_barrier();
  struct jc_lands l = got;
  jc_barrier();
  *err = l.err;
  return l.lands;
}
/* Publishes this channel's send steps done, once every thread of the CTA has read them. */
static JC_DEVICE void jc_shift_sent(struct jc_ctx* x, jc_u64 steps) {
  jc_barrier();
  if (jc_tid() == 0) jc_publish_counter(&x->args->channels[x->chan].sent, steps, 1);
}
/* The end of a channel's shift in place: the last channel to end clears every channel's
   counter for the next launch (which may be queued on a GPU before the host sees this one). */
static JC_DEVICE void jc_shift_done(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  jc_barrier();
  if (jc_tid() == 0 && jc_fetch_add(&a->channels[0].shifted, 1) == (jc_u64)a->nchannels - 1) {
    for (int c = 0; c < a->nchannels; c++) jc_store_relaxed(&a->channels[c].sent, 0);
    jc_store_relaxed(&a->channels[0].shifted, 0);
  }
}
{% if !cuda %}
/* A batch (args->table: on the host, the transfers of an AlltoAll(v), Gather, Scatter or a
   group's sends and receives that no direct launch carries) in one launch: every transfer
   moves a step whenever its peer allows, so that the exchanges with all peers overlap
   instead of running one pair after another (each a round trip over a network). The
   table: the transfers' number and a zero, then JC_P2P_BATCH_OP words a transfer: peer |
   kind << 32, its buffer, its bytes, and for a copy to itself (a send to self paired with a
   receive from self) the destination. The transfers with one peer in one direction share
   that peer's FIFO, so they run in table order, as posted. Each moves exactly the steps of
   the SendRecv its round would launch (this kernel's, on its bytes), so a peer may run it
   as rounds. The runtime makes a batch only where no receive lands on a send of it. */
#define JC_P2P_BATCH_OP 4
#define JC_P2P_BATCH_RECV 1
#define JC_P2P_BATCH_COPY 2
static JC_DEVICE int jc_run_batch(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  const jc_u64* ops = a->table + 2;
  int n = (int)a->table[0];
  x->ref_input = 1; /* no receive of a batch lands on one of its sends */
  jc_u64 at[JC_P2P_BATCH_MAX], end[JC_P2P_BATCH_MAX];
  int left = 0;
  for (int i = 0; i < n; i++) {
    const jc_u64* o = ops + i * JC_P2P_BATCH_OP;
    jc_p2p_range(a, o[2], x->chan, &at[i], &end[i]);
    left += at[i] < end[i];
  }
  jc_u64 spins = 0;
  int e = JC_OK, peer = -1, what = JC_WAIT_DATA;
  while (left) {
    int moved = 0, waiting = -1, waits_for = JC_WAIT_DATA;
    jc_u64 fifo = ~0ull;
    for (int i = 0, taken = 0; i < n; i++) {
      const jc_u64* o = ops + i * JC_P2P_BATCH_OP;
      if (o[0] != fifo) {
        fifo = o[0];
        taken = 0;
      }
      if (at[i] >= end[i] || taken) continue;
      taken = 1; /* the first transfer left on its FIFO; those behind it wait */
      int q = (int)(o[0] & 0xffffffffu), kind = (int)(o[0] >> 32);
      jc_u64 len = jc_min(a->chunk_elems, end[i] - at[i]);
      if (kind == JC_P2P_BATCH_COPY) {
        JC_CHECK(jc_local_copy(x, (const T*)o[1] + at[i], (T*)o[3] + at[i], len, 0, 0));
      } else if (kind == JC_P2P_BATCH_RECV) {
        struct jc_conn* r = &a->peer_recv[q][x->chan];
        x->tag_recv = jc_call_tag(o[2], 0);
        if (jc_load_acquire(r->tail) <= r->step) {
          jc_land(x, r, (T*)o[1] + at[i], len);
          if (waiting < 0) waiting = q, waits_for = JC_WAIT_DATA;
          continue;
        }
        JC_CHECK(jc_recv(x, r, (T*)o[1] + at[i], len));
      } else {
        struct jc_conn* s = &a->peer_send[q][x->chan];
        if (s->credit < jc_space_needed(s)) s->credit = jc_load_acquire(s->head);
        if (s->credit < jc_space_needed(s)) {
          if (waiting < 0) waiting = q, waits_for = JC_WAIT_SPACE;
          continue;
        }
        x->tag_send = jc_call_tag(o[2], 0);
        JC_CHECK(jc_send(x, s, (const T*)o[1] + at[i], len, 0));
      }
      at[i] += len;
      left -= at[i] >= end[i];
      moved = 1;
    }
    if (moved) {
      spins = 0;
      e = JC_OK;
      x->wait_start = 0;
      continue;
    }
    if (e) return jc_fail(x, e, peer, what); /* still nothing after a failed check */
    peer = waiting;
    what = waits_for;
    e = jc_check(x, ++spins, peer);
    /* Any peer of a transfer still to move that is known to have failed ends the wait. */
    for (int i = 0; !e && (spins & 255) == 0 && i < n; i++) {
      int q = (int)(ops[i * JC_P2P_BATCH_OP] & 0xffffffffu);
      if (at[i] < end[i] && jc_load_flag(&a->peer_failed[q])) {
        e = JC_ERR_PEER;
        peer = q;
        what = (ops[i * JC_P2P_BATCH_OP] >> 32) == JC_P2P_BATCH_RECV ? JC_WAIT_DATA : JC_WAIT_SPACE;
      }
    }
    if (!e) jc_relax(spins, a->spin);
  }
  return JC_OK;
}
{% endif %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
{% if !cuda %}  if (a->table) return jc_run_batch(x);
{% endif %}  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  struct jc_conn* s = a->p2p_send ? &a->p2p_send[x->chan] : 0;
  struct jc_conn* r = a->p2p_recv ? &a->p2p_recv[x->chan] : 0;
  jc_u64 sb = 0, se = 0, rb = 0, re = 0;
  if (s) jc_p2p_range(a, a->count, x->chan, &sb, &se);
  if (r) jc_p2p_range(a, a->recv_count, x->chan, &rb, &re);
  /* Sends may pass by reference unless a receive lands on the send buffer (a shift in place). */
  x->ref_input = !s || !r || !jc_lands_on_unsent(out, a->recv_count, in, 0, a->count);
  int shift = !x->ref_input && a->nchannels > 1, e = JC_OK;
  jc_u64 sent = 0;
  while (sb < se || rb < re) {
    int ready = JC_READY_SEND | JC_READY_RECV;
    jc_u64 rlen = jc_min(a->chunk_elems, re - rb);
    /* A receive must not overwrite what is still to be sent: the send goes first then, step
       for step, as the FIFOs' order promises. */
    if (rb < re && jc_lands_on_unsent(out + rb, rlen, in, sb, se)) {
      ready = JC_READY_SEND;
    } else if (rb < re && shift && jc_lands_on_others(x, out + rb, rlen, in, sb >= se, s->peer, &e)) {
      /* ... nor what another channel is still to send: this one's sends go meanwhile (with
         none left, it waited above, and lands only if the wait failed). */
      if (e) return e;
      ready = JC_READY_SEND;
    } else if (sb < se && rb < re) {
{% if !cuda %}      jc_land(x, r, out + rb, rlen);
{% endif %}      JC_CHECK(jc_wait_either(x, s, r, &ready));
    }
    if (sb < se && (ready & JC_READY_SEND)) {
      jc_u64 len = jc_min(a->chunk_elems, se - sb);
      JC_CHECK(jc_send(x, s, in + sb, len, 0));
      sb += len;
      if (shift) jc_shift_sent(x, ++sent);
    }
    if (rb < re && (ready & JC_READY_RECV)) {
      JC_CHECK(jc_recv(x, r, out + rb, rlen));
      rb += rlen;
    }
  }
  if (shift) jc_shift_done(x);
  return JC_OK;
}
