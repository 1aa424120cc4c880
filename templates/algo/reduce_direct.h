/* Direct Reduce on registered buffers: rank r folds part r of the channel's range from
   every rank's input, in rank order, and stores it into the root's output, so the ranks
   share the work. In place at the root is safe: part r is read and written by rank r only. */
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  jc_sym_part(x->args->rank, JC_NRANKS(x->args), &beg, &end);
  jc_sym_reduce(x, &v, 0, beg, end, x->args->root, 1);
  return jc_sym_barrier(x, &v);
}
