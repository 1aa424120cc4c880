/* Direct AlltoAll on registered buffers, in one launch: every rank copies block `rank` of
   every rank's input (the channel's range of it) into that rank's block of its own output,
   starting after its own so that the ranks read different peers at once. Peers only read
   each other's inputs, which are never written here. Small calls: common/eager.h. */
#define JC_SYM_LOCAL_RECV
{% include "common/direct.h" %}
{% include "common/eager.h" %}

static JC_DEVICE int jc_run(struct jc_ctx* x) {
  const struct jc_args* a = x->args;
#ifdef JC_SYM_EAGER_STAGING
  if (jc_eager_fits(a)) return jc_run_eager(x, JC_EAGER_ALLTOALL);
#endif
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  jc_u64 mine = (jc_u64)a->rank * a->count;
  for (int k = 0; k < JC_NRANKS(a); k++) {
    int q = jc_mod(a->rank + k, JC_NRANKS(a));
    jc_sym_copy(&v, v.in[q] + mine, v.out[a->rank] + (jc_u64)q * a->count, beg, end);
  }
  return jc_sym_barrier(x, &v);
}
