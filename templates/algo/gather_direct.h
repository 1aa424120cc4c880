/* Direct Gather on registered buffers, in one launch: the root reads every rank's input
   (see jc_sym_rooted); only its own output is written. */
#define JC_SYM_LOCAL_RECV
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) { return jc_sym_rooted(x, 1); }
