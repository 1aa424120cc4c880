/* Direct algorithms on registered buffers: every rank loads from and stores to its peers'
   buffers (mapped in its address space), with no FIFO in between. Target-independent.

   Each rank's flags area has a line per channel that only it writes: word 0 its barrier
   counter, then what it publishes of its call (the registrations and offsets of its
   buffers, the count and root, its PreMulSum scalar). A barrier raises the own counter and
   waits until every peer's is as high: all ranks run the same sequence of direct kernels,
   so the counters move in step with no per-call number from the host.

   Every kernel starts with `jc_sym_enter` (publish, barrier: the peers' buffers are ready
   and their records readable) and ends with a barrier after the last access to a peer's
   buffer, so a rank returns (and its caller may reuse its buffers, or start the next call,
   which rewrites its record) only once no peer touches them any more (small AlltoAlls,
   Gathers and Scatters instead stage their blocks in the flags area's eager area and need
   one barrier: see templates/common/eager.h). Rooted kernels in
   which only the root touches peers' buffers synchronize through the root alone (see
   jc_sym_sync); the counters still move by two per kernel on every rank.

   A kernel that touches only its own send (recv) buffer defines JC_SYM_LOCAL_SEND
   (JC_SYM_LOCAL_RECV) before including this: that side is this rank's own pointer, and
   the peers' registrations of it are neither read nor compared.

   Many CTAs (CUDA): a CTA is a channel, each with its own slice of the elements
   (jc_channel_range) and its own line, so a barrier is per CTA line: CTA c of every rank
   waits only for CTA c of the others, never for a grid-wide barrier (the CTAs of one rank
   need not run at once, and no CTA waits for a sibling). Within a CTA, thread 0 alone
   publishes, raises and waits for the counters, and fills the CTA's one `struct jc_sym`
   (JC_SHARED: shared memory on CUDA); block barriers hand its results (the view, a wait's
   error) to the other threads, so that every thread takes the same path. Thread 0 raises
   the counter through jc_publish_counter, after the block barrier that made the block's
   accesses its own: a fence of the peers' scope first (system scope where they may be
   other processes, through CUDA IPC, or GPUs). Counters are read with acquire loads (system scope), and every wait is bounded
   like the protocols' (jc_wait_ge: timeout, abort, failed peer, recorded in the channel's
   status and the halt word). */
#define JC_SYM_SEQ 0
#define JC_SYM_SEND_ID 1
#define JC_SYM_SEND_OFF 2
#define JC_SYM_RECV_ID 3
#define JC_SYM_RECV_OFF 4
#define JC_SYM_COUNT 5
#define JC_SYM_ROOT 6
#define JC_SYM_SCALAR_F 7
#define JC_SYM_SCALAR_I 8

/* What a direct kernel sees of every rank once entered. */
struct jc_sym {
  const T* in[JC_SYM_MAX_RANKS];
  T* out[JC_SYM_MAX_RANKS];
  struct jc_ctx px[JC_SYM_MAX_RANKS]; /* per rank, a context with that rank's pre-op scalar */
  jc_u64 seq;                          /* this channel's barrier counter */
  int bypass;                          /* outputs take cache-bypassing stores (JC_BYPASS_OUTPUT) */
};

static JC_DEVICE JC_INLINE jc_u64* jc_sym_line(const struct jc_args* a, int q, int chan) {
  return a->sym_flags[q] + (jc_u64)chan * JC_SYM_LINE;
}

/* Orders this rank's cache-bypassing output stores (jc_sym_put, jc_sym_copy) before what
   publishes them: a barrier's counter, or the kernel's end. Once per barrier rather than
   per tile: a fence waits for every such store to reach memory. */
static JC_DEVICE JC_INLINE void jc_sym_flush(void) {
#ifdef JC_BYPASS_OUTPUT
  jc_stream_fence();
#endif
}

/* Who waits for whom at a synchronization of the same channel of every rank (each rank
   raises its counter either way). A rooted kernel in which only the root touches peers'
   buffers needs the root to wait for every rank before, and every rank for the root after:
   one wait per rank besides the root, where a barrier has every rank wait for every other
   (twice as many handovers, and once ranks outnumber cores, turns the OS must give them). */
#define JC_SYNC_ALL 0       /* a barrier */
#define JC_SYNC_TO_ROOT 1   /* the root waits for every rank */
#define JC_SYNC_FROM_ROOT 2 /* every rank waits for the root */

static JC_DEVICE int jc_sym_sync(struct jc_ctx* x, struct jc_sym* v, int how) {
  JC_SHARED int jc_sync_err;  /* thread 0's result, read by all after the barrier */
  const struct jc_args* a = x->args;
  int n = JC_NRANKS(a), me = a->rank, root = a->root, e = JC_OK;
  jc_sym_flush();
  jc_barrier();
  if (jc_tid() == 0) {
    v->seq++;
    jc_publish_counter(jc_sym_line(a, me, x->chan) + JC_SYM_SEQ, v->seq, a->same_gpu);
    for (int k = 1; k < n && !e; k++) {
      int q = jc_mod(me + k, n);
      int waits = how == JC_SYNC_ALL || (how == JC_SYNC_TO_ROOT ? me == root : q == root);
      jc_u64* seq = jc_sym_line(a, q, x->chan) + JC_SYM_SEQ;
      if (waits) e = jc_wait_ge(x, seq, v->seq, q, JC_WAIT_BARRIER);
      /* The root may itself be waiting on a late rank: a second timeout's grace lets its
         failure, which names that rank, reach this one first (the failure board). */
      if (e == JC_ERR_TIMEOUT && how == JC_SYNC_FROM_ROOT) {
        a->status[x->chan].code = JC_OK;
        x->wait_start = 0;
        e = jc_wait_ge(x, seq, v->seq, q, JC_WAIT_BARRIER);
      }
    }
    jc_sync_err = e;
  }
  jc_barrier();
  return jc_sync_err;
}

/* One barrier among the same channel of every rank. */
static JC_DEVICE int jc_sym_barrier(struct jc_ctx* x, struct jc_sym* v) {
  return jc_sym_sync(x, v, JC_SYNC_ALL);
}

/* Records that peer q's call does not match this rank's. */
static JC_DEVICE int jc_sym_mismatch(struct jc_ctx* x, int q) {
  return jc_fail(x, JC_ERR_MISMATCH, q, JC_WAIT_BARRIER);
}

/* Publishes this rank's call, waits for every peer's (`how`: JC_SYNC_TO_ROOT, only the
   root waits, and only it reads the peers' calls), checks that they name the same
   registrations, count, root and call tag (jc_call_tag), and fills `v` (thread 0; the block's one, see above)
   with every rank's buffers and scalar. */
static JC_DEVICE int jc_sym_enter(struct jc_ctx* x, struct jc_sym* v, int how) {
  JC_SHARED int jc_enter_bad;  /* the first rank whose call differs, or -1 */
  const struct jc_args* a = x->args;
  int n = JC_NRANKS(a), me = a->rank;
  jc_u64* mine = jc_sym_line(a, me, x->chan);
  union { double d; jc_u64 u; } f;
  /* The multiplier as this rank's kernel has it (it may have read it from memory). */
  f.d = (double)x->scalar;
  /* The root with the call's tag (jc_call_tag: also its datatype and op) above it. */
  const jc_u64 root = (jc_u64)(jc_u32)a->root | x->tag_send << 32;
  if (n > JC_SYM_MAX_RANKS) return jc_sym_mismatch(x, me);
  if (jc_tid() == 0) {
    mine[JC_SYM_SEND_ID] = a->sym_send_id;
    mine[JC_SYM_SEND_OFF] = a->sym_send_off;
    mine[JC_SYM_RECV_ID] = a->sym_recv_id;
    mine[JC_SYM_RECV_OFF] = a->sym_recv_off;
    mine[JC_SYM_COUNT] = a->count;
    mine[JC_SYM_ROOT] = root;
    mine[JC_SYM_SCALAR_F] = f.u;
    mine[JC_SYM_SCALAR_I] = (jc_u64)(jc_i64)x->scalar;
    v->seq = jc_load_acquire(mine + JC_SYM_SEQ);
  }
  JC_CHECK(jc_sym_sync(x, v, how));
  if (how == JC_SYNC_TO_ROOT && me != a->root) return JC_OK;
  if (jc_tid() == 0) {
    jc_enter_bad = -1;
    for (int q = 0; q < n && jc_enter_bad < 0; q++) {
      const jc_u64* l = jc_sym_line(a, q, x->chan);
      int same = l[JC_SYM_COUNT] == a->count && l[JC_SYM_ROOT] == root;
#ifdef JC_SYM_LOCAL_SEND
      v->in[q] = q == me ? (const T*)a->sendbuff : 0;
#else
      same = same && l[JC_SYM_SEND_ID] == a->sym_send_id;
      v->in[q] = (const T*)(a->sym_send[q] + l[JC_SYM_SEND_OFF]);
#endif
#ifdef JC_SYM_LOCAL_RECV
      v->out[q] = q == me ? (T*)a->recvbuff : 0;
#else
      same = same && l[JC_SYM_RECV_ID] == a->sym_recv_id;
      v->out[q] = (T*)(a->sym_recv[q] + l[JC_SYM_RECV_OFF]);
#endif
      if (!same) jc_enter_bad = q;
      struct jc_args aq = *a;
      f.u = l[JC_SYM_SCALAR_F];
      aq.scalar_f = f.d;
      aq.scalar_i = (jc_i64)l[JC_SYM_SCALAR_I];
      aq.scalar_ptr = 0;
      v->px[q] = *x;
      v->px[q].scalar = jc_scalar(&aq);
    }
  }
  jc_barrier();
  return jc_enter_bad < 0 ? JC_OK : jc_sym_mismatch(x, jc_enter_bad);
}

/* Elements [off, off + len) of the channel's range, len <= JC_SYM_TILE * nthreads: this
   thread's j-th one is off + j * nthreads + tid. */
#define JC_SYM_EACH(off, len) \
  for (jc_u64 j = 0, i = (off) + (jc_u64)jc_tid(); i < (off) + (len); j++, i += (jc_u64)jc_nthreads())

/* res = post(pre_0(in_0) (+) pre_1(in_1) (+) ... (+) pre_{n-1}(in_{n-1})) over the tile
   at `off` of the inputs shifted by `shift` elements, folded in rank order: the same
   expression wherever it is computed. */
static JC_DEVICE void jc_sym_fold(const struct jc_ctx* x, const struct jc_sym* v, jc_u64 shift, jc_u64 off, jc_u64 len, T* res) {
  int n = JC_NRANKS(x->args);
  C acc[JC_SYM_TILE];
  const T* s = v->in[0] + shift;
  JC_SYM_EACH(off, len) acc[j] = jc_pre(&v->px[0], jc_to_c(s[i]));
  for (int q = 1; q < n; q++) {
    s = v->in[q] + shift;
    const struct jc_ctx* pq = &v->px[q];
    JC_SYM_EACH(off, len) acc[j] = jc_combine(acc[j], jc_pre(pq, jc_to_c(s[i])));
  }
  JC_SYM_EACH(off, len) res[j] = jc_from_c(jc_post(x, acc[j]));
}

#ifdef JC_SYM_PACK_UNROLL
/* The fold by 16-byte packs (CUDA): this thread's JC_SYM_PACK_UNROLL packs p, p + nt, ...
   (of np) of the inputs at element `base`, a rank's loaded before any is combined, the
   accumulators in registers. The tile of jc_sym_fold is indexed at run time, which keeps it
   in local memory with one load in flight per thread. The same expression, in rank order.
   In a kernel specialized for its rank count (JC_RANKS) the rank loop unrolls, so that every
   rank's packs may be in flight at once; otherwise `#pragma unroll` leaves it a loop. */
union jc_sym_pk { struct jc_pack16 v; T e[JC_PACK]; };
static JC_DEVICE JC_INLINE void jc_sym_fold_packs(const struct jc_ctx* x, const struct jc_sym* v, jc_u64 base, jc_u64 p, jc_u64 np,
                                                  union jc_sym_pk* res) {
  const jc_u64 nt = (jc_u64)jc_nthreads();
  C acc[JC_SYM_PACK_UNROLL][JC_PACK];
#pragma unroll
  for (int q = 0; q < JC_NRANKS(x->args); q++) {
    const struct jc_pack16* s = (const struct jc_pack16*)(v->in[q] + base);
    const struct jc_ctx* pq = &v->px[q];
    union jc_sym_pk in[JC_SYM_PACK_UNROLL];
#pragma unroll
    for (int u = 0; u < JC_SYM_PACK_UNROLL; u++) {
      /* Packs past the end fold zeros (never stored) rather than unset registers. */
      in[u].v.w[0] = in[u].v.w[1] = in[u].v.w[2] = in[u].v.w[3] = 0;
      if (p + u * nt < np) in[u].v = s[p + u * nt];
    }
#pragma unroll
    for (int u = 0; u < JC_SYM_PACK_UNROLL; u++)
#pragma unroll
      for (int k = 0; k < (int)JC_PACK; k++) {
        C c = jc_pre(pq, jc_to_c(in[u].e[k]));
        acc[u][k] = q == 0 ? c : jc_combine(acc[u][k], c);
      }
  }
#pragma unroll
  for (int u = 0; u < JC_SYM_PACK_UNROLL; u++)
#pragma unroll
    for (int k = 0; k < (int)JC_PACK; k++) res[u].e[k] = jc_from_c(jc_post(x, acc[u][k]));
}

/* The packs this thread folded (jc_sym_fold_packs) into dst at element `base`: 16-byte
   stores where dst allows. */
static JC_DEVICE JC_INLINE void jc_sym_put_packs(const union jc_sym_pk* res, T* dst, jc_u64 base, jc_u64 p, jc_u64 np) {
  const jc_u64 nt = (jc_u64)jc_nthreads();
  T* d = dst + base;
  const int whole = ((jc_u64)d & 15) == 0;
#pragma unroll
  for (int u = 0; u < JC_SYM_PACK_UNROLL; u++) {
    if (p + u * nt >= np) continue;
    if (whole) {
      ((struct jc_pack16*)d)[p + u * nt] = res[u].v;
    } else {
#pragma unroll
      for (int k = 0; k < (int)JC_PACK; k++) d[(p + u * nt) * JC_PACK + k] = res[u].e[k];
    }
  }
}

/* Whether every rank's input allows packs from element `at` (their offsets within 16
   bytes, and so the answer, are the same on every rank). */
static JC_DEVICE JC_INLINE int jc_sym_inputs_pack(const struct jc_ctx* x, const struct jc_sym* v, jc_u64 at) {
  jc_u64 bits = 0;
#pragma unroll
  for (int q = 0; q < JC_NRANKS(x->args); q++) bits |= (jc_u64)(v->in[q] + at);
  return (bits & 15) == 0;
}
#endif

/* dst[off..off+len) = the tile `res`. */
static JC_DEVICE JC_INLINE void jc_sym_put(const struct jc_sym* v, const T* res, T* dst, jc_u64 off, jc_u64 len) {
#ifdef JC_BYPASS_OUTPUT
  if (v->bypass && ((jc_u64)(dst + off) & 15) == 0) {
    jc_stream(dst + off, res, len * sizeof(T));
    return;
  }
#endif
  JC_SYM_EACH(off, len) dst[i] = res[j];
}

/* dst[i] = src[i] for i in [beg, end), by this block's threads. */
static JC_DEVICE JC_INLINE void jc_sym_copy(const struct jc_sym* v, const T* src, T* dst, jc_u64 beg, jc_u64 end) {
  if (src == dst) return;
#ifdef JC_BYPASS_OUTPUT
  if (v->bypass && ((jc_u64)(dst + beg) & 15) == 0) {
    jc_stream(dst + beg, src + beg, (end - beg) * sizeof(T));
    return;
  }
#endif
#ifdef JC_SYM_PACK_UNROLL
  /* 16-byte loads and stores where both sides allow (copies run as bytes), JC_SYM_PACK_UNROLL
     of them in flight per thread; the rest element by element below. */
  if ((((jc_u64)(src + beg) | (jc_u64)(dst + beg)) & 15) == 0) {
    const jc_u64 nt = (jc_u64)jc_nthreads(), np = (end - beg) * sizeof(T) / 16;
    const struct jc_pack16* s16 = (const struct jc_pack16*)(src + beg);
    struct jc_pack16* d16 = (struct jc_pack16*)(dst + beg);
    for (jc_u64 p = (jc_u64)jc_tid(); p < np; p += JC_SYM_PACK_UNROLL * nt) {
      struct jc_pack16 r[JC_SYM_PACK_UNROLL];
      for (int u = 0; u < JC_SYM_PACK_UNROLL; u++)
        if (p + u * nt < np) r[u] = s16[p + u * nt];
      for (int u = 0; u < JC_SYM_PACK_UNROLL; u++)
        if (p + u * nt < np) d16[p + u * nt] = r[u];
    }
    beg += np * 16 / sizeof(T);
  }
#endif
  for (jc_u64 i = beg + (jc_u64)jc_tid(); i < end; i += (jc_u64)jc_nthreads()) dst[i] = src[i];
}

/* [*beg, *end) narrowed to part `k` of `n` equal parts (aligned like channel ranges). */
static JC_DEVICE void jc_sym_part(int k, int n, jc_u64* beg, jc_u64* end) {
  jc_u64 b = *beg, e = *end;
  jc_channel_range(e - b, k, n, beg, end);
  *beg += b;
  *end += b;
}

/* The prologue of every direct kernel: the channel's element range, and entry (`how`:
   see jc_sym_enter). Large outputs bypass the cache where the target can (the host
   prelude's JC_BYPASS_OUTPUT). */
static JC_DEVICE int jc_sym_begin_as(struct jc_ctx* x, struct jc_sym* v, jc_u64* beg, jc_u64* end, int how) {
  if (jc_tid() == 0) {
#ifdef JC_BYPASS_OUTPUT
    v->bypass = JC_BYPASS_OUTPUT(x->args);
#else
    v->bypass = 0;
#endif
  }
  jc_channel_range(x->args->count, x->chan, x->args->nchannels, beg, end);
  return jc_sym_enter(x, v, how);
}

static JC_DEVICE int jc_sym_begin(struct jc_ctx* x, struct jc_sym* v, jc_u64* beg, jc_u64* end) {
  return jc_sym_begin_as(x, v, beg, end, JC_SYNC_ALL);
}

#ifdef JC_WIRE
/* A wire format's numerics where no FIFO step carries the elements: the peers' inputs as
   they would arrive (encoded, then decoded; this rank's own exact), folded in fp32 in rank
   order, and the result encoded once, every output getting its decoding, as a two-shot
   over FIFOs in that wire would give them. Each element is computed once: every rank holds
   the same bits. A thread folds whole tiles (a scaled format's block). */
static JC_DEVICE void jc_sym_wire_reduce(const struct jc_ctx* x, const struct jc_sym* v, jc_u64 shift, jc_u64 beg, jc_u64 end, int first, int ndst) {
  const int n = JC_NRANKS(x->args), me = x->args->rank;
  const jc_u64 nt = (jc_u64)jc_nthreads();
  for (jc_u64 b = beg + (jc_u64)jc_tid() * JC_WIRE_TILE; b < end; b += nt * JC_WIRE_TILE) {
    const jc_u64 m = jc_min(JC_WIRE_TILE, end - b);
    float acc[JC_WIRE_TILE], t[JC_WIRE_TILE];
    for (int q = 0; q < n; q++) {
      const T* s = v->in[q] + shift + b;
      for (jc_u64 i = 0; i < m; i++) t[i] = jc_pre(&v->px[q], jc_to_c(s[i]));
      if (q != me) jc_wire_round(t, m);
      for (jc_u64 i = 0; i < m; i++) acc[i] = q == 0 ? t[i] : jc_combine(acc[i], t[i]);
    }
    for (jc_u64 i = 0; i < m; i++) acc[i] = jc_post(x, acc[i]);
    if (n > 1) jc_wire_round(acc, m);
    for (int k = 0; k < ndst; k++) {
      T* d = v->out[jc_mod(first + k, n)] + b;
      for (jc_u64 i = 0; i < m; i++) d[i] = jc_from_c(acc[i]);
    }
  }
}
#endif

/* Folds [beg, end) of the inputs shifted by `shift` elements, tile by tile, and stores each
   tile into the outputs of ranks first, first + 1, ... (ndst of them, mod n). */
static JC_DEVICE void jc_sym_reduce(const struct jc_ctx* x, const struct jc_sym* v, jc_u64 shift, jc_u64 beg, jc_u64 end, int first, int ndst) {
#ifdef JC_WIRE
  jc_sym_wire_reduce(x, v, shift, beg, end, first, ndst);
#else
#ifdef JC_SYM_PACK_UNROLL
  if (jc_sym_inputs_pack(x, v, shift + beg)) {
    const jc_u64 nt = (jc_u64)jc_nthreads(), np = (end - beg) / JC_PACK;
    for (jc_u64 p = (jc_u64)jc_tid(); p < np; p += JC_SYM_PACK_UNROLL * nt) {
      union jc_sym_pk res[JC_SYM_PACK_UNROLL];
      jc_sym_fold_packs(x, v, shift + beg, p, np, res);
      for (int k = 0; k < ndst; k++) jc_sym_put_packs(res, v->out[jc_mod(first + k, JC_NRANKS(x->args))], beg, p, np);
    }
    beg += np * JC_PACK;
  }
#endif
  jc_u64 tile = (jc_u64)JC_SYM_TILE * jc_nthreads();
  T res[JC_SYM_TILE];
  for (jc_u64 off = beg; off < end; off += tile) {
    jc_u64 len = jc_min(tile, end - off);
    jc_sym_fold(x, v, shift, off, len, res);
    for (int k = 0; k < ndst; k++) jc_sym_put(v, res, v->out[jc_mod(first + k, JC_NRANKS(x->args))], off, len);
  }
#endif
}

/* Gather (to_root: the root copies every rank's input into that rank's block of its own
   output) or Scatter (the root copies block q of its input into rank q's output), the
   channel's range of each block. The root's own block does not move when in place; the
   other ranks only publish their buffers and wait until the root is done with them. */
static JC_DEVICE int jc_sym_rooted(struct jc_ctx* x, int to_root) {
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin_as(x, &v, &beg, &end, JC_SYNC_TO_ROOT));
  const struct jc_args* a = x->args;
  int me = a->rank;
  for (int k = 0; me == a->root && k < JC_NRANKS(a); k++) {
    int q = jc_mod(me + k, JC_NRANKS(a));
    jc_u64 at = (jc_u64)q * a->count;
    if (to_root) jc_sym_copy(&v, v.in[q], v.out[me] + at, beg, end);
    else jc_sym_copy(&v, v.in[me] + at, v.out[q], beg, end);
  }
  return jc_sym_sync(x, &v, JC_SYNC_FROM_ROOT);
}
