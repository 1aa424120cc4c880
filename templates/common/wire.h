/* Wire format {{ wire }}: how this kernel's FIFO steps carry its elements (see the Wire type
   in codegen/src/spec/wire.rs for each format's error bound). A step of n elements is its
   n codes, then, for the scaled formats, one f32 scale per JC_WIRE_BLOCK elements (blocks
   counted from the step's start) at the next 4-byte boundary. Round to nearest even
   everywhere; NaN and +-Inf pass as themselves. Target-independent: the primitives define
   JC_WIRE_TILE (elements a thread folds at once: one block for the scaled formats) and
   JC_SLOT_READ (how a received slot is read) before including it. */
#define JC_WIRE {{ wire_code }}
#define JC_WIRE_BLOCK {{ wire_block }} /* elements per scale; 0: unscaled */
#if JC_WIRE <= 2
typedef jc_u16 jc_code;
#else
typedef jc_u8 jc_code;
#endif

static JC_DEVICE JC_INLINE jc_u64 jc_wire_scales_at(jc_u64 n) { return (n * sizeof(jc_code) + 3) & ~(jc_u64)3; }
/* The bytes a step of n elements fills (its size word carries them: a network proxy sends
   only those). */
static JC_DEVICE JC_INLINE jc_u64 jc_wire_bytes(jc_u64 n) {
#if JC_WIRE_BLOCK
  return jc_wire_scales_at(n) + (n + JC_WIRE_BLOCK - 1) / JC_WIRE_BLOCK * 4;
#else
  return n * sizeof(jc_code);
#endif
}
static JC_DEVICE JC_INLINE int jc_wire_finite(float v) { return (jc_f32_bits(v) & 0x7f800000u) != 0x7f800000u; }
static JC_DEVICE JC_INLINE float jc_wire_signed_inf(jc_u32 negative) { return jc_bits_f32(negative ? 0xff800000u : 0x7f800000u); }

#if JC_WIRE == 3 || JC_WIRE == 4
/* fp8: a power-of-two scale 2^j that puts the block's largest finite magnitude `amax` in
   (M/2, M], M = 416 for e4m3 (whose codes +-448 carry +-Inf) and 57344 for e5m2, so that
   scaling is exact and no finite value saturates; j >= -126, so that 2^-j is a float.
   `*k`: the encoder's factor 2^-j. */
#define JC_WIRE_MAX (JC_WIRE == 3 ? 416.0f : 57344.0f)
#define JC_WIRE_MAX_EXP (JC_WIRE == 3 ? 8 : 15)
static JC_DEVICE JC_INLINE float jc_wire_scale(float amax, float* k) {
  int j = (int)((jc_f32_bits(amax) >> 23) & 0xff) - 127 - JC_WIRE_MAX_EXP;
  if (j < -126) j = -126;
  if (amax * jc_bits_f32((jc_u32)(127 - j) << 23) > JC_WIRE_MAX) j++;
  *k = jc_bits_f32((jc_u32)(127 - j) << 23);
  return jc_bits_f32((jc_u32)(127 + j) << 23);
}
#if JC_WIRE == 3
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) {
  jc_u32 b = jc_f32_bits(v);
  if (v != v) return 0x7f;
  if (!jc_wire_finite(v)) return (jc_code)(((b >> 24) & 0x80) | 0x7e);
  return jc_f32_to_e4m3(v * k);
}
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) {
  if ((c & 0x7f) == 0x7e) return jc_wire_signed_inf(c & 0x80);
  return jc_e4m3_to_f32(c) * scale;
}
#else
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) {
  jc_u32 b = jc_f32_bits(v);
  if (v != v) return 0x7e;
  if (!jc_wire_finite(v)) return (jc_code)(((b >> 24) & 0x80) | 0x7c);
  return jc_f32_to_e5m2(v * k);
}
/* e5m2's own Inf and NaN codes decode to themselves, which the scale keeps. */
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) { return jc_e5m2_to_f32(c) * scale; }
#endif
#elif JC_WIRE == 5
/* int8: the scale amax / 126 and codes -126..126; 127, -127 and -128 carry +Inf, -Inf and
   NaN. `*k`: the scale, which the encoder divides by. */
static JC_DEVICE JC_INLINE float jc_wire_scale(float amax, float* k) {
  *k = amax / 126.0f;
  return *k;
}
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) {
  if (v != v) return (jc_code)0x80;
  if (!jc_wire_finite(v)) return (jc_code)(v > 0 ? 127 : -127);
  if (k == 0.0f) return 0;
  float q = v / k;
  q = q > 126.0f ? 126.0f : q < -126.0f ? -126.0f : q;
  /* Adding and taking away 1.5 * 2^23 rounds to an integer, ties to even (FP contraction
     is off on both targets). */
  q = (q + 12582912.0f) - 12582912.0f;
  return (jc_code)(jc_i8)(int)q;
}
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) {
  jc_i8 q = (jc_i8)c;
  if (q == -128) return jc_bits_f32(0x7fc00000u);
  if (q == 127 || q == -127) return jc_wire_signed_inf(q < 0);
  return (float)q * scale;
}
#elif JC_WIRE == 1
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) { (void)k; return jc_f32_to_bf16(v); }
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) { (void)scale; return jc_bf16_to_f32(c); }
#else
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) { (void)k; return jc_f32_to_f16(v); }
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) { (void)scale; return jc_f16_to_f32(c); }
#endif

/* The scale of a block of values (1 for the unscaled formats), from its largest finite
   magnitude `amax`; `*k`: the encoder's factor. */
static JC_DEVICE JC_INLINE float jc_wire_block_scale(float amax, float* k) {
  *k = 1.0f;
#if JC_WIRE_BLOCK
  return jc_wire_scale(amax, k);
#else
  (void)amax;
  return 1.0f;
#endif
}
static JC_DEVICE JC_INLINE float jc_wire_abs_max(float amax, float v) {
  float a = v < 0 ? -v : v;
  return jc_wire_finite(v) && a > amax ? a : amax;
}

/* v[0..m) (m <= JC_WIRE_TILE: one block) replaced by what a receiver decodes of them:
   the wire's rounding where no FIFO step carries them (the direct algorithms). */
static JC_DEVICE JC_INLINE void jc_wire_round(float* v, jc_u64 m) {
  float amax = 0.0f, k;
  for (jc_u64 i = 0; i < m; i++) amax = jc_wire_abs_max(amax, v[i]);
  float scale = jc_wire_block_scale(amax, &k);
  for (jc_u64 i = 0; i < m; i++) v[i] = jc_wire_dec(jc_wire_enc(v[i], k), scale);
}

/* The slot of the step last posted on connector c: its bytes, to be sent again as they are
   (a tree node's children all get one encoding). Only c's sender writes it, and not
   before its next step on c. */
static JC_DEVICE JC_INLINE const char* jc_wire_posted(const struct jc_conn* c) {
  return c->buf[JC_PROTO] + ((c->step - 1) % JC_STEPS) * c->slot_bytes[JC_PROTO];
}

/* Elements [b, b + m) of a step of n (m <= JC_WIRE_TILE; one whole block for the scaled
   formats): v = the fold of the decoded received element and the source element, encoded
   into `out`. `dst` gets v itself when nothing is sent, else the decoding of what was
   sent: every rank that receives it decodes the same bits. */
static JC_DEVICE JC_INLINE void jc_wire_tile(const struct jc_ctx* x, JC_SLOT_READ char* in, char* out, const T* src,
                                             T* dst, jc_u64 n, jc_u64 b, jc_u64 m, int pre, int post) {
  JC_SLOT_READ jc_code* ic = (JC_SLOT_READ jc_code*)in;
  float rscale = 1.0f;
#if JC_WIRE_BLOCK
  if (in) rscale = ((JC_SLOT_READ float*)(in + jc_wire_scales_at(n)))[b / JC_WIRE_BLOCK];
#endif
  float v[JC_WIRE_TILE];
  float amax = 0.0f;
  for (jc_u64 i = 0; i < m; i++) {
    C r = in ? jc_wire_dec(ic[b + i], rscale) : (C)0;
    v[i] = jc_fold_c(x, r, in != 0, src != 0, src ? src[b + i] : (T)0, pre, post);
    amax = jc_wire_abs_max(amax, v[i]);
  }
  if (!out) {
    if (dst) for (jc_u64 i = 0; i < m; i++) dst[b + i] = jc_from_c(v[i]);
    return;
  }
  jc_code* oc = (jc_code*)out;
  float k;
  float scale = jc_wire_block_scale(amax, &k);
#if JC_WIRE_BLOCK
  ((float*)(out + jc_wire_scales_at(n)))[b / JC_WIRE_BLOCK] = scale;
#endif
  for (jc_u64 i = 0; i < m; i++) {
    jc_code c = jc_wire_enc(v[i], k);
    oc[b + i] = c;
    if (dst) dst[b + i] = jc_from_c(jc_wire_dec(c, scale));
  }
}
