/* Direct one-shot AllReduce on registered buffers: every rank folds the whole channel range
   from every rank's input, in rank order (the same expression on every rank, so the same
   bits). Per tile: fold into a local tile, a barrier (every rank has read this tile of
   every input, so that in place an output may now overwrite it), store the tile. One
   barrier per tile: for small sizes. */
{% include "common/direct.h" %}
static JC_DEVICE int jc_run(struct jc_ctx* x) {
  jc_u64 tile = (jc_u64)JC_SYM_TILE * jc_nthreads();
  JC_SHARED struct jc_sym v;
  jc_u64 beg, end;
  JC_CHECK(jc_sym_begin(x, &v, &beg, &end));
  /* The tile barriers also end the peers' reads of this rank's record and input; an empty
     range still needs one. */
  if (beg == end) return jc_sym_barrier(x, &v);
#ifdef JC_SYM_PACK_UNROLL
  /* Whole packs first, JC_SYM_PACK_UNROLL a thread per tile; every rank takes as many
     barriers, since whether the inputs allow packs is the same on every rank. */
  if (jc_sym_inputs_pack(x, &v, beg)) {
    const jc_u64 nt = (jc_u64)jc_nthreads(), np = (end - beg) / JC_PACK;
    for (jc_u64 p = 0; p < np; p += JC_SYM_PACK_UNROLL * nt) {
      union jc_sym_pk pk[JC_SYM_PACK_UNROLL];
      jc_sym_fold_packs(x, &v, beg, p + (jc_u64)jc_tid(), np, pk);
      JC_CHECK(jc_sym_barrier(x, &v));
      jc_sym_put_packs(pk, v.out[x->args->rank], beg, p + (jc_u64)jc_tid(), np);
    }
    beg += np * JC_PACK;
  }
#endif
  T res[JC_SYM_TILE];
  for (jc_u64 off = beg; off < end; off += tile) {
    jc_u64 len = jc_min(tile, end - off);
    jc_sym_fold(x, &v, 0, off, len, res);
    JC_CHECK(jc_sym_barrier(x, &v));
    jc_sym_put(&v, res, v.out[x->args->rank], off, len);
  }
  jc_sym_flush();
  return JC_OK;
}
