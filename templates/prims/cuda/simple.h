/* Simple protocol, CUDA: the host contract and framing (prims/host/simple.h), block-parallel.
   Thread 0 waits for the send slot's space and the recv slot's tail, a barrier hands the
   result to the block, every thread copies a strided share of the elements, and after a
   second barrier thread 0 fences once and posts head/tail. The step counters
   live in global memory: all threads read them before the first barrier, thread 0 alone
   advances them after the second, and a third barrier publishes them to the next call.
   jc_generic is __noinline__ (here and in ll.h, ll128.h): one copy per kernel instead of one
   per call site halves NVRTC's compile time; its branches on r/s/src/dst are uniform. */
#define JC_PROTO 0
/* 16 bytes or more in flight per thread and stream. */
#define JC_UNROLL (sizeof(T) >= 2 ? 8 : 16)
static JC_DEVICE __noinline__ int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  __shared__ int jc_wait_err;     /* thread 0's wait result, read by all after the barrier */
  if (jc_tid() == 0) {
    int e = s ? jc_wait_space(x, s) : JC_OK;
    if (!e && r) e = jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA);
    jc_wait_err = e;
  }
  /* The peer wrote the slot from outside this SM: volatile loads skip stale L1 lines. */
  const volatile T* in = r ? (const volatile T*)jc_slot(r, JC_PROTO) : 0;
  T* out = s ? (T*)jc_slot(s, JC_PROTO) : 0;
  jc_barrier();
  int e = jc_wait_err;
  if (e) return e;                /* every thread saw the same value: all leave together */
  /* JC_UNROLL elements per thread and pass, all loaded before any is used, so that loads
     overlap; the stride keeps each warp's accesses coalesced. On an H200 this took a
     channel from 3.45 to 3.9 GB/s (64 MiB, 2 ranks): what bounds a CTA lies elsewhere. */
  const jc_u64 nt = (jc_u64)jc_nthreads();
  jc_u64 i = (jc_u64)jc_tid();
  for (; i + (JC_UNROLL - 1) * nt < n; i += JC_UNROLL * nt) {
    T rv[JC_UNROLL], sv[JC_UNROLL];
#pragma unroll
    for (int u = 0; u < JC_UNROLL; u++) rv[u] = in ? in[i + u * nt] : (T)0;
#pragma unroll
    for (int u = 0; u < JC_UNROLL; u++) sv[u] = src ? src[i + u * nt] : (T)0;
#pragma unroll
    for (int u = 0; u < JC_UNROLL; u++) {
      T v = jc_elem(x, rv[u], in != 0, src ? sv : 0, u, pre, post);
      if (dst) dst[i + u * nt] = v;
      if (out) out[i + u * nt] = v;
    }
  }
  for (; i < n; i += nt) {
    T v = jc_elem(x, in ? in[i] : (T)0, in != 0, src, i, pre, post);
    if (dst) dst[i] = v;
    if (out) out[i] = v;
  }
  jc_barrier();
  if (jc_tid() == 0) {
    /* One fence orders the block's slot reads and writes (the barrier made them this
       thread's) and the step's size before both counters, which are then plain stores (a
       release store each would fence again); peers on this GPU need only GPU scope. On an
       H200, 8-byte ring AllReduce went 22-25 -> 21 us at 2 ranks, 73 -> 60 us at 8. */
    if (s) jc_post_size(s, JC_PROTO, n * sizeof(T));
    if ((r && !r->same_gpu) || (s && !s->same_gpu)) __threadfence_system();
    else __threadfence();
    if (r) jc_store_relaxed(r->head, ++r->step);
    if (s) jc_store_relaxed(s->tail, ++s->step);
  }
  jc_barrier();
  return JC_OK;
}
