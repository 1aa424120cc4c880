/* Direct Broadcast on registered buffers: every rank copies the channel's range of the
   root's input into its own output (the root too, unless in place). */
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  jc_sym_copy(&v, v.in[x->args->root], v.out[x->args->rank], beg, end);
  return jc_sym_barrier(x, &v);
}
