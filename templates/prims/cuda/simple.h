/* Simple protocol, CUDA: the host contract and framing (prims/host/simple.h), block-parallel.
   Thread 0 waits for the send slot's space and the recv slot's tail, a barrier hands the
   result to the block, every thread copies a strided share of the elements, and after a
   second barrier thread 0 fences and posts head/tail with release order. The step counters
   live in global memory: all threads read them before the first barrier, thread 0 alone
   advances them after the second, and a third barrier publishes them to the next call.
   jc_generic is __noinline__ (here and in ll.h, ll128.h): one copy per kernel instead of one
   per call site halves NVRTC's compile time; its branches on r/s/src/dst are uniform. */
#define JC_PROTO 0
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
  for (jc_u64 i = jc_tid(); i < n; i += jc_nthreads()) {
    T v = jc_elem(x, in ? in[i] : (T)0, in != 0, src, i, pre, post);
    if (dst) dst[i] = v;
    if (out) out[i] = v;
  }
  jc_barrier();
  if (jc_tid() == 0) {
    __threadfence_system();       /* the block's slot writes (and reads) before head/tail */
    if (r) jc_store_release(r->head, ++r->step);
    if (s) jc_post_step(s, JC_PROTO, n * sizeof(T));
  }
  jc_barrier();
  return JC_OK;
}
