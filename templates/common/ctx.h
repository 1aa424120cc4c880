/* Per-CTA context and the bounded wait every primitive uses: polls with the prelude's
   jc_relax, and gives up on abort, when the peer it waits for is known to have failed, or
   after timeout_ns without progress, recording which peer it waited for.
   Target-independent. */
struct jc_ctx {
  const struct jc_args* args;
  int chan;
  C scalar;                       /* pre-op multiplier (PreMulSum, float Avg) */
  jc_u64 wait_start;              /* when the current wait started, 0 if not timing */
  jc_u64 tag_send, tag_recv;      /* the call's identity as its sends carry it and its
                                     receives expect it (jc_call_tag) */
  int refs;                       /* host: a step went by reference (jc_settle waits for it) */
  int ref_input;                  /* the call never writes its input, so that plain sends from
                                     it may pass by reference (set by the algorithms that know) */
};

/* The identity of a call that every FIFO step carries (in its size word, in LL's header
   line, in LL128's flags): its bytes mixed with `salt` (root and the kernel's collective,
   algorithm, datatype and op), JC_TAG_MASK wide. A receiver whose own differs fails the
   call instead of pairing steps of different calls into a wrong result; two different calls
   share a tag with odds of 1 in 2^24. */
static JC_DEVICE JC_INLINE jc_u64 jc_call_tag(jc_u64 bytes, jc_u64 salt) {
  jc_u64 h = (bytes ^ salt) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return h & JC_TAG_MASK;
}

/* v mod n, in [0, n). The algorithms' v lie within a rank count of [0, n): those take no
   division (a 32-bit one is 14-30 cycles on the host's x86, on every small call's path). */
static JC_DEVICE JC_INLINE int jc_mod(int v, int n) {
  if (v >= 0 && v < n) return v;
  if (v >= n && v - n < n) return v - n;
  if (v < 0 && v + n >= 0) return v + n;
  v %= n;
  return v < 0 ? v + n : v;
}
static JC_DEVICE JC_INLINE jc_u64 jc_min(jc_u64 a, jc_u64 b) { return a < b ? a : b; }

/* Ring position of user rank `rank` on channel `ch`. */
static JC_DEVICE int jc_ring_pos(const struct jc_channel* ch, int nranks, int rank) {
  for (int i = 0; i < nranks; i++) if (ch->ring_ranks[i] == rank) return i;
  return 0;
}

/* Called while a wait has not succeeded: why it must end (a JC_ERR_*), or JC_OK. It
   records nothing, because the peer may have posted what was awaited and then failed or
   exited (a process's end is noted on the failure board) between the caller's last look
   and this check: every wait looks once more after a nonzero check, and only then fails,
   through jc_fail. */
static JC_DEVICE int jc_check(struct jc_ctx* x, jc_u64 spins, int peer) {
  if ((spins & 255) != 0) return JC_OK;
  if (jc_load_flag(x->args->abort_flag)) return JC_ERR_ABORTED;
  if (peer >= 0 && jc_load_flag(&x->args->peer_failed[peer])) return JC_ERR_PEER;
  jc_u64 now = jc_now_ns();
  if (x->wait_start == 0) x->wait_start = now;
  else if (now - x->wait_start > x->args->timeout_ns) return JC_ERR_TIMEOUT;
  return JC_OK;
}

/* Records why the kernel ends (a failed check's `code`), for the runtime's error. */
static JC_DEVICE int jc_fail(struct jc_ctx* x, int code, int peer, int what) {
  struct jc_status* st = &x->args->status[x->chan];
  st->code = code;
  st->peer = peer;
  st->what = what;
  x->args->channels[0].halted = 1;
  return code;
}

/* Waits until *p >= v. */
static JC_DEVICE int jc_wait_ge(struct jc_ctx* x, jc_u64* p, jc_u64 v, int peer, int what) {
  jc_u64 spins = 0;
  int e = JC_OK;
  while (jc_load_acquire(p) < v) {
    if (e) return jc_fail(x, e, peer, what); /* still short after a failed check */
    e = jc_check(x, ++spins, peer);
    if (!e) jc_relax(spins, x->args->spin);
  }
  x->wait_start = 0;
  return JC_OK;
}

/* The sender may fill slot `step` once the receiver has consumed step - JC_STEPS. The head
   is read only when the last value read does not already allow it: reading it misses in
   the cache whenever the receiver has moved on, which costs as much as the data itself. */
static JC_DEVICE JC_INLINE jc_u64 jc_space_needed(const struct jc_conn* s) {
  return s->step + 1 > JC_STEPS ? s->step + 1 - JC_STEPS : 0;
}
static JC_DEVICE int jc_wait_space(struct jc_ctx* x, struct jc_conn* s) {
  jc_u64 need = jc_space_needed(s);
  if (s->credit >= need) return JC_OK;
  int e = jc_wait_ge(x, s->head, need, s->peer, JC_WAIT_SPACE);
  if (!e) s->credit = jc_load_acquire(s->head);
  return e;
}

/* For a call that both sends on `s` and receives on `r` (point to point): waits until the
   next send step has space or the next receive step has arrived (its tail, which every
   protocol posts once the step is whole), and tells which (*ready: JC_READY_*), alike on
   every thread of the CTA. Such a call moves whichever direction its peers allow: taking
   the two in turn, it would wait for ever beside a peer that receives everything before it
   sends back, or sends everything before it receives (NCCL runs the two on separate warps). */
#define JC_READY_SEND 1
#define JC_READY_RECV 2
struct jc_either { int ready, err; };
static JC_DEVICE int jc_wait_either(struct jc_ctx* x, struct jc_conn* s, struct jc_conn* r, int* ready) {
  JC_SHARED struct jc_either got;
  if (jc_tid() == 0) {
    jc_u64 spins = 0;
    int e = JC_OK, peer = r->peer, what = JC_WAIT_DATA;
    got.ready = 0;
    got.err = JC_OK;
    for (;;) {
      if (s->credit < jc_space_needed(s)) s->credit = jc_load_acquire(s->head);
      got.ready = (s->credit >= jc_space_needed(s) ? JC_READY_SEND : 0) |
                  (jc_load_acquire(r->tail) > r->step ? JC_READY_RECV : 0);
      if (got.ready) break;
      if (e) { /* still neither after a failed check */
        got.err = jc_fail(x, e, peer, what);
        break;
      }
      e = jc_check(x, ++spins, r->peer);
      if (!e && (spins & 255) == 0 && s->peer >= 0 && jc_load_flag(&x->args->peer_failed[s->peer])) {
        e = JC_ERR_PEER;
        peer = s->peer;
        what = JC_WAIT_SPACE;
      }
      if (!e) jc_relax(spins, x->args->spin);
    }
    x->wait_start = 0;
  }
  jc_barrier();
  *ready = got.ready;
  return got.err;
}

/* A step's size word: which protocol's slot it fills, how many bytes (a network proxy
   forwards exactly those) and the sending call's tag. */
static JC_DEVICE JC_INLINE jc_u64 jc_size_word(int proto, jc_u64 bytes, jc_u64 tag) {
  return bytes | (tag << JC_SIZE_TAG_SHIFT) | ((jc_u64)proto << JC_SIZE_PROTO_SHIFT);
}
/* Publishes the sender's step: its size word, then the tail counter with release order. */
static JC_DEVICE JC_INLINE void jc_post_size(struct jc_ctx* x, struct jc_conn* s, int proto, jc_u64 bytes) {
  s->sizes[s->step % JC_STEPS] = jc_size_word(proto, bytes, x->tag_send);
}
static JC_DEVICE JC_INLINE void jc_post_step(struct jc_ctx* x, struct jc_conn* s, int proto, jc_u64 bytes) {
  jc_post_size(x, s, proto, bytes);
  jc_store_release(s->tail, ++s->step);
}

static JC_DEVICE char* jc_slot(const struct jc_conn* c, int proto) {
  return c->buf[proto] + (c->step % JC_STEPS) * c->slot_bytes[proto];
}

/* Elements in 16 bytes: a pack, what the CUDA Simple copy moves per load and store. */
#define JC_PACK (16 / sizeof(T))

/* The size of each of n chunks that split rem elements, at most cap: whole packs where cap
   allows, so that every chunk starts where the CUDA Simple copy can move packs. Chunks
   under a pack stay as they are (one element a rank stays one element a rank, and with it
   the order a non-commutative op combines them in). */
static JC_DEVICE JC_INLINE jc_u64 jc_split(jc_u64 rem, int n, jc_u64 cap) {
  jc_u64 cs = (rem + n - 1) / n;
  if (cs >= JC_PACK) cs = (cs + JC_PACK - 1) / JC_PACK * JC_PACK;
  return jc_min(cs, cap);
}

/* Element range [*beg, *end) of `count` that channel `chan` of `nch` handles. */
static JC_DEVICE void jc_channel_range(jc_u64 count, int chan, int nch, jc_u64* beg, jc_u64* end) {
  if (nch == 1) { /* every small call: no 64-bit division (dozens of cycles on the host) */
    *beg = 0;
    *end = count;
    return;
  }
  jc_u64 per = (count + nch - 1) / nch;
  per = (per + 15) & ~(jc_u64)15;  /* keep channel boundaries aligned */
  *beg = per * chan < count ? per * chan : count;
  *end = per * (chan + 1) < count ? per * (chan + 1) : count;
}
