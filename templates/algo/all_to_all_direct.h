/* Direct AlltoAll on registered buffers, in one launch: every rank copies block `rank` of
   every rank's input (the channel's range of it) into that rank's block of its own output,
   starting after its own so that the ranks read different peers at once. Peers only read
   each other's inputs, which are never written here.

   Eager, where a rank's whole input fits JC_SYM_EAGER_BYTES and there are at least
   JC_SYM_EAGER_MIN_RANKS ranks (every rank decides alike, from the count they agree on):
   one barrier instead of two, on channel 0 alone. Each rank stages its blocks for its
   peers, under a header (the barrier it precedes, the count, jc_sym_enter's root word), in
   the half of its eager area that this barrier's parity picks; after the barrier it
   checks every peer's header and copies its block from the peer's staged input. No exit
   barrier: peers read only the eager half, never this rank's buffers or line record, so the
   caller may reuse its buffers at once. A rank rewrites a half before barrier v only once
   its previous call's last synchronization showed every peer at v - 1 (at v - 2 after a
   rooted call, whose previous eager barrier was at most v - 4), that is past the eager call
   that last read the half (at v - 2 or earlier: a rank raises its counter next only in its
   next call, after those reads). Host only (JC_SYM_EAGER_STAGING: the flags areas outlive
   their owners' calls there). */
#define JC_SYM_LOCAL_RECV
{% include "common/direct.h" %}
#ifdef JC_SYM_EAGER_STAGING
#define JC_EAGER_SEQ 0
#define JC_EAGER_COUNT 1
#define JC_EAGER_ROOT 2

/* Rank q's eager half for barrier `seq`. */
static JC_DEVICE JC_INLINE jc_u64* jc_eager_half(const struct jc_args* a, int q, jc_u64 seq) {
  return a->sym_flags[q] + JC_SYM_EAGER + (seq & 1) * JC_SYM_EAGER_HALF;
}

static JC_DEVICE int jc_run_eager(struct jc_ctx* x) {
  JC_SHARED struct jc_sym v;
  JC_SHARED int jc_eager_bad; /* the first rank whose header differs, or -1 */
  const struct jc_args* a = x->args;
  int n = a->nranks, me = a->rank;
  jc_u64* line = jc_sym_line(a, me, 0);
  const jc_u64 root = (jc_u64)(jc_u32)a->root | x->tag_send << 32;
  if (x->chan != 0) return JC_OK;
  if (jc_tid() == 0) {
    v.bypass = 0;
    v.seq = jc_load_acquire(line + JC_SYM_SEQ);
    /* What a peer that took the two-barrier path (another count) compares, and fails on. */
    line[JC_SYM_COUNT] = a->count;
    line[JC_SYM_ROOT] = root;
  }
  jc_barrier();
  jc_u64* mine = jc_eager_half(a, me, v.seq + 1);
  const T* in = (const T*)a->sendbuff;
  T* stage = (T*)(mine + JC_SYM_EAGER_HEADER);
  jc_u64 at = (jc_u64)me * a->count;
  /* The peers' blocks only, each at its place: this rank's own goes straight across. */
  jc_sym_copy(&v, in, stage, 0, at);
  jc_sym_copy(&v, in, stage, at + a->count, (jc_u64)n * a->count);
  if (jc_tid() == 0) {
    mine[JC_EAGER_SEQ] = v.seq + 1;
    mine[JC_EAGER_COUNT] = a->count;
    mine[JC_EAGER_ROOT] = root;
  }
  JC_CHECK(jc_sym_sync(x, &v, JC_SYNC_ALL));
  if (jc_tid() == 0) {
    jc_eager_bad = -1;
    for (int q = 0; q < n && jc_eager_bad < 0; q++) {
      const jc_u64* h = jc_eager_half(a, q, v.seq);
      if (h[JC_EAGER_SEQ] != v.seq || h[JC_EAGER_COUNT] != a->count || h[JC_EAGER_ROOT] != root) jc_eager_bad = q;
    }
  }
  jc_barrier();
  if (jc_eager_bad >= 0) return jc_sym_mismatch(x, jc_eager_bad);
  for (int k = 0; k < n; k++) {
    int q = jc_mod(me + k, n);
    const T* staged = q == me ? in : (const T*)(jc_eager_half(a, q, v.seq) + JC_SYM_EAGER_HEADER);
    jc_sym_copy(&v, staged + at, (T*)a->recvbuff + (jc_u64)q * a->count, 0, a->count);
  }
  return JC_OK;
}
#endif

static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
#ifdef JC_SYM_EAGER_STAGING
  if (a->nranks >= JC_SYM_EAGER_MIN_RANKS && a->nranks <= JC_SYM_MAX_RANKS && a->count <= JC_SYM_EAGER_BYTES / sizeof(T) / a->nranks) return jc_run_eager(x);
#endif
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  jc_u64 mine = (jc_u64)a->rank * a->count;
  for (int k = 0; k < a->nranks; k++) {
    int q = jc_mod(a->rank + k, a->nranks);
    jc_sym_copy(&v, v.in[q] + mine, v.out[a->rank] + (jc_u64)q * a->count, beg, end);
  }
  return jc_sym_barrier(x, &v);
}
