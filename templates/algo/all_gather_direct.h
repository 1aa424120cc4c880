/* Direct AllGather on registered buffers: every rank copies the channel's range of every
   rank's input into that rank's block of its own output (its own block too, unless in
   place). Peers only read each other's inputs, which are never written here. */
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  const struct jc_args* a = x->args;
  for (int k = 1; k <= JC_NRANKS(a); k++) {
    int q = jc_mod(a->rank + k, JC_NRANKS(a));
    jc_sym_copy(&v, v.in[q], v.out[a->rank] + (jc_u64)q * a->count, beg, end);
  }
  return jc_sym_barrier(x, &v);
}
