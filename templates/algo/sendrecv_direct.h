/* Direct point-to-point on addressable buffers (the host arenas, registered memory), one
   launch for a batch of transfers (a send/recv, a group's sends and receives, an
   AlltoAllv): the receiver copies straight from the sender's buffer, one copy, no FIFO.

   Rank s's record for peer q (in s's flags area, JC_SYM_P2P + q * JC_SYM_P2P_WORDS) is
   written by s only: POSTED counts s's sends to q, the last one's region, offset and bytes
   written before it; DONE counts s's receives from q, each raised once s has copied it
   (with REFUSED set when the sizes differ, so that the sender fails at once too). A sender
   rewrites its record for q only once q's DONE has caught up with its POSTED, and returns
   only then, so its caller may reuse the buffer; the receiver compares the sizes, as
   NCCL's must match, and fails naming the sender when they differ.

   The launch's table (args->table): the number of transfers and of directory entries, the
   transfers (JC_P2P_OP words each: step, peer | kind << 32, bytes, this rank's pointer,
   and for a send its region's id and offset), then this rank's regions (id, the base of
   every rank's part as mapped here), through which a receiver finds the sender's buffer.
   The j-th send to a peer and the j-th receive from it share step j; a step posts all its
   sends, then receives, then waits for its sends: every rank posts step j before it waits
   on anything of it, so any pattern of transfers completes. One channel: the records are
   per peer. */
#define JC_P2P_POSTED 0
#define JC_P2P_ID 1
#define JC_P2P_OFF 2
#define JC_P2P_BYTES 3
#define JC_P2P_DONE 4
#define JC_P2P_REFUSED (1ull << 63)
#define JC_P2P_OP 6
#define JC_P2P_RECV 1

static JC_DEVICE JC_INLINE jc_u64* jc_p2p_rec(const struct jc_args* a, int owner, int peer) {
  return a->sym_flags[owner] + JC_SYM_P2P + (jc_u64)peer * JC_SYM_P2P_WORDS;
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

/* Receives transfer `o` from its peer: waits for the post, checks it, copies, raises DONE. */
static JC_DEVICE int jc_p2p_recv(struct jc_ctx* x, const jc_u64* o, const jc_u64* dir, jc_u64 ndir) {
  const struct jc_args* a = x->args;
  int q = (int)(o[1] & 0xffffffffu);
  jc_u64* mine = jc_p2p_rec(a, a->rank, q);
  jc_u64* theirs = jc_p2p_rec(a, q, a->rank);
  jc_u64 want = (jc_load_relaxed(mine + JC_P2P_DONE) & ~JC_P2P_REFUSED) + 1;
  if (jc_tid() == 0) jc_wait_ge(x, theirs + JC_P2P_POSTED, want, q, JC_WAIT_DATA);
  JC_CHECK(jc_p2p_sync(x));
  const char* base = jc_p2p_base(dir, ndir, theirs[JC_P2P_ID], q);
  if (theirs[JC_P2P_BYTES] != o[2] || !base) {
    if (jc_tid() == 0) jc_store_release(mine + JC_P2P_DONE, want | JC_P2P_REFUSED);
    return jc_fail(x, JC_ERR_MISMATCH, q, JC_WAIT_DATA);
  }
  jc_p2p_copy((char*)o[3], base + theirs[JC_P2P_OFF], o[2]);
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
    for (e = i; e < nops && ops[e * JC_P2P_OP] == ops[i * JC_P2P_OP]; e++) {
      const jc_u64* o = ops + e * JC_P2P_OP;
      if ((o[1] >> 32) == JC_P2P_RECV || jc_tid() != 0) continue;
      jc_u64* r = jc_p2p_rec(a, me, (int)(o[1] & 0xffffffffu));
      r[JC_P2P_ID] = o[4];
      r[JC_P2P_OFF] = o[5];
      r[JC_P2P_BYTES] = o[2];
      jc_store_release(r + JC_P2P_POSTED, r[JC_P2P_POSTED] + 1);
    }
    for (jc_u64 k = i; k < e; k++)
      if ((ops[k * JC_P2P_OP + 1] >> 32) == JC_P2P_RECV) JC_CHECK(jc_p2p_recv(x, ops + k * JC_P2P_OP, dir, ndir));
    for (jc_u64 k = i; k < e && jc_tid() == 0; k++) {
      const jc_u64* o = ops + k * JC_P2P_OP;
      int q = (int)(o[1] & 0xffffffffu);
      if ((o[1] >> 32) == JC_P2P_RECV) continue;
      jc_u64* done = jc_p2p_rec(a, q, me) + JC_P2P_DONE;
      if (jc_wait_ge(x, done, jc_p2p_rec(a, me, q)[JC_P2P_POSTED], q, JC_WAIT_BARRIER)) break;
      if (jc_load_acquire(done) & JC_P2P_REFUSED) jc_fail(x, JC_ERR_MISMATCH, q, JC_WAIT_BARRIER);
    }
    JC_CHECK(jc_p2p_sync(x));
  }
  return JC_OK;
}
