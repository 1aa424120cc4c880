/* Eager moves on registered buffers (host only: JC_SYM_EAGER_STAGING, the flags areas
   outlive their owners' calls there): AlltoAll, Gather and Scatter whose blocks fit
   JC_SYM_EAGER_BYTES over the ranks, at JC_SYM_EAGER_MIN_RANKS ranks or more (every rank
   decides alike, from the count they agree on). One barrier instead of two, on channel 0
   alone. Each rank stages what its peers will read (AlltoAll: its blocks for them; Gather:
   a non-root rank its input; Scatter: the root the other ranks' blocks) under a header
   (the barrier it precedes, the count, jc_sym_enter's root word), in the half of its eager
   area that this barrier's parity picks; after the barrier it checks every rank's header
   and copies what it takes from the staged halves. No exit barrier: peers read only the
   eager halves, never this rank's buffers or line record, so the caller may reuse its
   buffers at once. A rank rewrites a half before barrier v only once its previous call's
   last synchronization showed every peer at v - 1 (at v - 2 after a two-barrier rooted
   call, whose previous eager barrier was at most v - 4), that is past the eager call that
   last read the half (at v - 2 or earlier: a rank raises its counter next only in its next
   call, after those reads). */
#ifdef JC_SYM_EAGER_STAGING
#define JC_EAGER_SEQ 0
#define JC_EAGER_COUNT 1
#define JC_EAGER_ROOT 2
#define JC_EAGER_ALLTOALL 0
#define JC_EAGER_GATHER 1
#define JC_EAGER_SCATTER 2

/* Rank q's eager half for barrier `seq`. */
static JC_DEVICE JC_INLINE jc_u64* jc_eager_half(const struct jc_args* a, int q, jc_u64 seq) {
  return a->sym_flags[q] + JC_SYM_EAGER + (seq & 1) * JC_SYM_EAGER_HALF;
}

/* Whether a call takes the eager path. */
static JC_DEVICE JC_INLINE int jc_eager_fits(const struct jc_args* a) {
  return JC_NRANKS(a) >= JC_SYM_EAGER_MIN_RANKS && JC_NRANKS(a) <= JC_SYM_MAX_RANKS &&
         a->count <= JC_SYM_EAGER_BYTES / sizeof(T) / JC_NRANKS(a);
}

/* The eager call of `kind` (JC_EAGER_ALLTOALL, _GATHER, _SCATTER); a->count is a block. */
static JC_DEVICE int jc_run_eager(struct jc_ctx* x, int kind) {
  JC_SHARED struct jc_sym v;
  JC_SHARED int jc_eager_bad; /* the first rank whose header differs, or -1 */
  const struct jc_args* a = x->args;
  int n = JC_NRANKS(a), me = a->rank, root = a->root;
  jc_u64* line = jc_sym_line(a, me, 0);
  const jc_u64 root_word = (jc_u64)(jc_u32)root | x->tag_send << 32;
  if (x->chan != 0) return JC_OK;
  if (jc_tid() == 0) {
    v.bypass = 0;
    v.seq = jc_load_acquire(line + JC_SYM_SEQ);
    /* What a peer that took the two-barrier path (another count) compares, and fails on. */
    line[JC_SYM_COUNT] = a->count;
    line[JC_SYM_ROOT] = root_word;
  }
  jc_barrier();
  jc_u64* mine = jc_eager_half(a, me, v.seq + 1);
  const T* in = (const T*)a->sendbuff;
  T* out = (T*)a->recvbuff;
  T* stage = (T*)(mine + JC_SYM_EAGER_HEADER);
  const jc_u64 block = a->count, at = (jc_u64)me * block, all = (jc_u64)n * block;
  /* The peers' blocks only, each at its place: this rank's own goes straight across. */
  if (kind == JC_EAGER_GATHER) {
    if (me != root) jc_sym_copy(&v, in, stage, 0, block);
  } else if (kind == JC_EAGER_ALLTOALL || me == root) {
    jc_sym_copy(&v, in, stage, 0, at);
    jc_sym_copy(&v, in, stage, at + block, all);
  }
  if (jc_tid() == 0) {
    mine[JC_EAGER_SEQ] = v.seq + 1;
    mine[JC_EAGER_COUNT] = block;
    mine[JC_EAGER_ROOT] = root_word;
  }
  JC_CHECK(jc_sym_sync(x, &v, JC_SYNC_ALL));
  if (jc_tid() == 0) {
    jc_eager_bad = -1;
    for (int q = 0; q < n && jc_eager_bad < 0; q++) {
      const jc_u64* h = jc_eager_half(a, q, v.seq);
      if (h[JC_EAGER_SEQ] != v.seq || h[JC_EAGER_COUNT] != block || h[JC_EAGER_ROOT] != root_word) jc_eager_bad = q;
    }
  }
  jc_barrier();
  if (jc_eager_bad >= 0) return jc_sym_mismatch(x, jc_eager_bad);
  if (kind == JC_EAGER_SCATTER) {
    const T* from = me == root ? in : (const T*)(jc_eager_half(a, root, v.seq) + JC_SYM_EAGER_HEADER);
    jc_sym_copy(&v, from + at, out, 0, block);
    return JC_OK;
  }
  if (kind == JC_EAGER_GATHER && me != root) return JC_OK;
  /* AlltoAll: block `me` of every rank's input; Gather: every rank's whole input. */
  const jc_u64 from = kind == JC_EAGER_ALLTOALL ? at : 0;
  for (int k = 0; k < n; k++) {
    int q = jc_mod(me + k, n);
    const T* staged = q == me ? in : (const T*)(jc_eager_half(a, q, v.seq) + JC_SYM_EAGER_HEADER);
    jc_sym_copy(&v, staged + from, out + (jc_u64)q * block, 0, block);
  }
  return JC_OK;
}
#endif
