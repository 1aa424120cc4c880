/* Direct (two-shot) AllReduce on registered buffers: rank r folds part r of the channel's
   range from every rank's input, in rank order, and stores the result into every rank's
   output (a reduce-scatter reading the peers' inputs and an all-gather writing into their
   outputs, in one pass). Each element is computed once, so every rank gets the same bits.
   In place is safe: part r of every buffer is read and written by rank r alone, each tile
   read before it is written. */
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  int n = JC_NRANKS(x->args), me = x->args->rank;
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  jc_sym_part(me, n, &beg, &end);
  /* Starting after this rank spreads the stores over different peers. */
  jc_sym_reduce(x, &v, 0, beg, end, me + 1, n);
  return jc_sym_barrier(x, &v);
}
