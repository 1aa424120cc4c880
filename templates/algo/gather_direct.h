/* Direct Gather on registered buffers, in one launch: the root reads every rank's input
   (see jc_sym_rooted); only its own output is written. Small calls: common/eager.h. */
#define JC_SYM_LOCAL_RECV
{% include "common/direct.h" %}
{% include "common/eager.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
#ifdef JC_SYM_EAGER_STAGING
  if (jc_eager_fits(x->args)) return jc_run_eager(x, JC_EAGER_GATHER);
#endif
  return jc_sym_rooted(x, 1);
}
