/* Direct Scatter on registered buffers, in one launch: the root writes every rank's output
   (see jc_sym_rooted); only its own input is read. Small calls: common/eager.h. */
#define JC_SYM_LOCAL_SEND
{% include "common/direct.h" %}
{% include "common/eager.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
#ifdef JC_SYM_EAGER_STAGING
  if (jc_eager_fits(x->args)) return jc_run_eager(x, JC_EAGER_SCATTER);
#endif
  return jc_sym_rooted(x, 0);
}
