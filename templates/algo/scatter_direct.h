/* Direct Scatter on registered buffers, in one launch: the root writes every rank's output
   (see jc_sym_rooted); only its own input is read. */
#define JC_SYM_LOCAL_SEND
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) { return jc_sym_rooted(x, 0); }
