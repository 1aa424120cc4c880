/* Direct ReduceScatter on registered buffers: rank r folds block r of every rank's input,
   in rank order, into its output. In place (the output is block r of the input) is safe:
   only rank r reads block r, each tile before it is written. */
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  jc_sym_reduce(x, &v, (jc_u64)x->args->rank * x->args->count, beg, end, x->args->rank, 1);
  return jc_sym_barrier(x, &v);
}
