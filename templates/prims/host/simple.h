/* Simple protocol, host: a step's elements are copied straight into the receiver's slot;
   the tail counter is published with release order after them, and the receiver hands the
   slot back through head. Pure moves go through memcpy (the C library's fastest copy);
   only steps that compute run the element loop. */
#define JC_PROTO 0
static JC_DEVICE int jc_generic(struct jc_ctx* x, struct jc_conn* r, struct jc_conn* s,
                                const T* src, T* dst, jc_u64 n, int pre, int post) {
  if (s) JC_CHECK(jc_wait_space(x, s));
  if (r) JC_CHECK(jc_wait_ge(x, r->tail, r->step + 1, r->peer, JC_WAIT_DATA));
  const T* in = r ? (const T*)jc_slot(r, JC_PROTO) : 0;
  T* out = s ? (T*)jc_slot(s, JC_PROTO) : 0;
  const T* from = in ? in : src;
  if (!(in && src) && !pre && !post) {
    if (dst && dst != from) memcpy(dst, from, n * sizeof(T));
    if (out) memcpy(out, from, n * sizeof(T));
  } else {
    for (jc_u64 i = 0; i < n; i++) {
      T v = jc_elem(x, in ? in[i] : (T)0, in != 0, src, i, pre, post);
      if (dst) dst[i] = v;
      if (out) out[i] = v;
    }
  }
  if (r) jc_store_release(r->head, ++r->step);
  if (s) jc_post_step(s, JC_PROTO, n * sizeof(T));
  return JC_OK;
}
