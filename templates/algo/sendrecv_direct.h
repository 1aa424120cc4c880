/* Direct point-to-point on addressable buffers (the host arenas, registered memory), one
   launch for a batch of transfers (a send/recv, a group's sends and receives, an
   AlltoAllv): the receiver copies straight from the sender's buffer, one copy, no FIFO.

   Rank s's record for peer q (in s's flags area, JC_SYM_P2P + q * JC_SYM_P2P_WORDS) is
   written by s only: POSTED counts s's sends to q; post j's region, offset and bytes are
   written before it, in the words of j's parity (JC_P2P_POST); DONE counts s's receives
   from q, each raised once s has copied it (with REFUSED set when the sizes differ, so
   that the sender fails too). A sender rewrites post j's words only once q's DONE reached
   j - 2, and returns only once DONE caught up with POSTED, so its caller may reuse the
   buffer; the receiver compares the sizes, as NCCL's must match, and fails naming the
   sender when they differ.

   Eager (an AlltoAllv's block to another rank of at most JC_SYM_P2P_EAGER_BYTES, at least
   JC_SYM_EAGER_MIN_RANKS ranks, which the runtime marks JC_P2P_EAGER_OK): the sender copies
   the block into its eager slot for q of the post's parity (in its flags area, which every
   rank maps and keeps), marks the post STAGED and does not wait for DONE: one handshake.
   The slot, like the post's words, is rewritten only once DONE reached j - 2. The sender
   of a refused eager block may return before the receiver refuses it: it fails at its next
   wait on that DONE, and its communicator with the receiver's failure; the receiver never
   takes a block of another size.

   The launch's table (args->table): the number of transfers and of directory entries, the
   transfers (JC_P2P_OP words each: step, peer | kind << 32, bytes, this rank's pointer,
   and for a send its region's id and offset), then this rank's regions (id, the base of
   every rank's part as mapped here), through which a receiver finds the sender's buffer.
   The j-th send to a peer and the j-th receive from it share step j; a step posts all its
   sends, then receives, then waits for its sends: every rank posts step j before it waits
   on anything of it but its posts of step j - 2, so any pattern of transfers completes.
   One channel: the records are per peer. */
#define JC_P2P_POSTED 0
#define JC_P2P_DONE 4
#define JC_P2P_REFUSED (1ull << 63)
/* A post's words, from JC_P2P_POST(j). */
#define JC_P2P_ID 0
#define JC_P2P_OFF 1
#define JC_P2P_BYTES 2
#define JC_P2P_STAGED (1ull << 62) /* in BYTES: the block is in the sender's eager slot */
#define JC_P2P_POST(j) (1 + 4 * ((j) & 1))
#define JC_P2P_OP 6
#define JC_P2P_RECV 1
#define JC_P2P_EAGER_OK 2 /* a send's kind bit: it may go through the eager slot */

static JC_DEVICE JC_INLINE jc_u64* jc_p2p_rec(const struct jc_args* a, int owner, int peer) {
  return a->sym_flags[owner] + JC_SYM_P2P + (jc_u64)peer * JC_SYM_P2P_WORDS;
}

/* Rank owner's eager slot for peer for post j. */
static JC_DEVICE JC_INLINE char* jc_p2p_slot(const struct jc_args* a, int owner, int peer, jc_u64 j) {
  return (char*)(a->sym_flags[owner] + JC_SYM_P2P_EAGER + ((jc_u64)peer * 2 + (j & 1)) * (JC_SYM_P2P_EAGER_BYTES / 8));
}

/* Rank q's part of region `id` as mapped here, or 0 where this rank has no such region. */
static JC_DEVICE const char* jc_p2p_base(const jc_u64* dir, jc_u64 ndir, jc_u64 id, int q) {
  for (jc_u64 d = 0; d < ndir; d++)
    if (dir[2 * d] == id) return ((char* const*)dir[2 * d + 1])[q];
  return 0;
}

/* After thread 0's waits: every thread sees its failure through the channel's status. */
static JC_DEVICE int jc_p2p_sync(struct jc_ctx* x) {
  jc_barrier();
  return x->args->status[x->chan].code;
}

static JC_DEVICE void jc_p2p_copy(char* dst, const char* src, jc_u64 n) {
#ifdef JC_BYPASS_OUTPUT
  if (n >= (8u << 20) && ((jc_u64)dst & 15) == 0) {
    jc_stream(dst, src, n);
    jc_stream_fence();
  } else {
    jc_copy(dst, src, n);
  }
#else
  for (jc_u64 i = (jc_u64)jc_tid(); i < n; i += (jc_u64)jc_nthreads()) dst[i] = src[i];
#endif
}

/* Fails naming q where q refused one of this rank's sends to it (`done`: q's DONE for it). */
static JC_DEVICE int jc_p2p_refused(struct jc_ctx* x, const jc_u64* done, int q) {
  if (jc_load_acquire(done) & JC_P2P_REFUSED) return jc_fail(x, JC_ERR_MISMATCH, q, JC_WAIT_BARRIER);
  return JC_OK;
}

/* Posts send `o`: once its words (and eager slot) are free, stages it if eager, then raises
   POSTED. */
static JC_DEVICE int jc_p2p_send(struct jc_ctx* x, const jc_u64* o) {
  const struct jc_args* a = x->args;
  int me = a->rank, q = (int)(o[1] & 0xffffffffu);
  jc_u64* r = jc_p2p_rec(a, me, q);
  jc_u64* done = jc_p2p_rec(a, q, me) + JC_P2P_DONE;
  jc_u64 j = r[JC_P2P_POSTED] + 1;
  int staged = ((o[1] >> 32) & JC_P2P_EAGER_OK) != 0;
  /* Only a staged post j - 2 may still be read (a sender waited for any other's DONE), so
     only then is the peer's DONE read here. */
  int reuse = j > 2 && (r[JC_P2P_POST(j) + JC_P2P_BYTES] & JC_P2P_STAGED);
  if (jc_tid() == 0 && reuse) jc_wait_ge(x, done, j - 2, q, JC_WAIT_SPACE);
  JC_CHECK(jc_p2p_sync(x));
  if (reuse) JC_CHECK(jc_p2p_refused(x, done, q));
  if (staged) jc_p2p_copy(jc_p2p_slot(a, me, q, j), (const char*)o[3], o[2]);
  jc_barrier();
  if (jc_tid() == 0) {
    jc_u64* w = r + JC_P2P_POST(j);
    w[JC_P2P_ID] = o[4];
    w[JC_P2P_OFF] = o[5];
    w[JC_P2P_BYTES] = o[2] | (staged ? JC_P2P_STAGED : 0);
    jc_store_release(r + JC_P2P_POSTED, j);
  }
  return JC_OK;
}

/* Receives transfer `o` from its peer: waits for the post, checks it, copies, raises DONE. */
static JC_DEVICE int jc_p2p_recv(struct jc_ctx* x, const jc_u64* o, const jc_u64* dir, jc_u64 ndir) {
  const struct jc_args* a = x->args;
  int q = (int)(o[1] & 0xffffffffu);
  jc_u64* mine = jc_p2p_rec(a, a->rank, q);
  jc_u64* theirs = jc_p2p_rec(a, q, a->rank);
  jc_u64 want = (jc_load_relaxed(mine + JC_P2P_DONE) & ~JC_P2P_REFUSED) + 1;
  if (jc_tid() == 0) jc_wait_ge(x, theirs + JC_P2P_POSTED, want, q, JC_WAIT_DATA);
  JC_CHECK(jc_p2p_sync(x));
  const jc_u64* w = theirs + JC_P2P_POST(want);
  const char* src = 0;
  if (w[JC_P2P_BYTES] & JC_P2P_STAGED) {
    src = jc_p2p_slot(a, q, a->rank, want);
  } else {
    const char* base = jc_p2p_base(dir, ndir, w[JC_P2P_ID], q);
    if (base) src = base + w[JC_P2P_OFF];
  }
  if ((w[JC_P2P_BYTES] & ~JC_P2P_STAGED) != o[2] || !src) {
    if (jc_tid() == 0) jc_store_release(mine + JC_P2P_DONE, want | JC_P2P_REFUSED);
    return jc_fail(x, JC_ERR_MISMATCH, q, JC_WAIT_DATA);
  }
  jc_p2p_copy((char*)o[3], src, o[2]);
  jc_barrier();
  if (jc_tid() == 0) jc_store_release(mine + JC_P2P_DONE, want);
  return JC_OK;
}

static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
  if (x->chan != 0) return JC_OK;
  const jc_u64* ops = a->table + 2;
  jc_u64 nops = a->table[0], ndir = a->table[1];
  const jc_u64* dir = ops + nops * JC_P2P_OP;
  int me = a->rank;
  for (jc_u64 i = 0, e; i < nops; i = e) {
    for (e = i; e < nops && ops[e * JC_P2P_OP] == ops[i * JC_P2P_OP]; e++)
      if ((ops[e * JC_P2P_OP + 1] >> 32) != JC_P2P_RECV) JC_CHECK(jc_p2p_send(x, ops + e * JC_P2P_OP));
    for (jc_u64 k = i; k < e; k++)
      if ((ops[k * JC_P2P_OP + 1] >> 32) == JC_P2P_RECV) JC_CHECK(jc_p2p_recv(x, ops + k * JC_P2P_OP, dir, ndir));
    /* The buffers of non-eager sends: read by their receivers until DONE. */
    for (jc_u64 k = i; k < e && jc_tid() == 0; k++) {
      const jc_u64* o = ops + k * JC_P2P_OP;
      int q = (int)(o[1] & 0xffffffffu);
      if ((o[1] >> 32) == JC_P2P_RECV) continue;
      jc_u64* done = jc_p2p_rec(a, q, me) + JC_P2P_DONE;
      if (((o[1] >> 32) & JC_P2P_EAGER_OK) == 0 && jc_wait_ge(x, done, jc_p2p_rec(a, me, q)[JC_P2P_POSTED], q, JC_WAIT_BARRIER)) break;
      if (jc_p2p_refused(x, done, q)) break;
    }
    JC_CHECK(jc_p2p_sync(x));
  }
  return JC_OK;
}
