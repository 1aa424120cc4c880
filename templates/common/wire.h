/* Wire format {{ wire }}: how this kernel's FIFO steps carry its elements (see the Wire type
   in codegen/src/spec/wire.rs for each format's error bound; 6: a user's codec). A step of n elements is its
   n codes, then, for the scaled formats, one f32 scale per JC_WIRE_BLOCK elements (blocks
   counted from the step's start) at the next 4-byte boundary. Round to nearest even
   everywhere; NaN and +-Inf pass as themselves. Target-independent: the primitives define
   JC_WIRE_TILE (elements a thread folds at once: one block for the scaled formats) and
   JC_SLOT_READ (how a received slot is read) before including it, and JC_WIRE_SOFT_CVT
   where the element conversions below should be the branch-free jc_wire_narrow and
   jc_wire_widen rather than the prelude's.
   An element's encoding and decoding are selections among values computed without
   branches, and a block's steps are plain loops over it, so that a compiler vectorizes
   them. */
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
/* Selection by masks, all ones where a condition holds (jc_wire_mask): `pick(m, a, b)` is a
   where m is set, else b. A `?:` may become a branch (jump threading merges neighbouring
   ones), and a loop that branches around float operations (which may trap) or through many
   paths does not vectorize: the element codecs select with these only. */
static JC_DEVICE JC_INLINE jc_u32 jc_wire_mask(int c) { return (jc_u32)0 - (jc_u32)(c != 0); }
static JC_DEVICE JC_INLINE jc_u32 jc_wire_pick(jc_u32 m, jc_u32 a, jc_u32 b) { return (a & m) | (b & ~m); }
/* f32 bits of the magnitude a (sign cleared): whether NaN, whether finite. Signed
   comparisons (a < 2^31), which vectorize where unsigned ones take more steps. */
static JC_DEVICE JC_INLINE jc_u32 jc_wire_nan(jc_u32 a) { return jc_wire_mask((jc_i32)a > 0x7f800000); }
static JC_DEVICE JC_INLINE jc_u32 jc_wire_fin(jc_u32 a) { return jc_wire_mask((jc_i32)a < 0x7f800000); }

#ifdef JC_WIRE_SOFT_CVT
/* f as a float format of eb exponent and mb mantissa bits (bias 2^(eb-1) - 1), rounded to
   nearest even: the prelude's jc_f32_to_narrow, bit for bit. `sat`: the format's largest
   finite value as f32 bits, which larger magnitudes and Inf become (fp8's satfinite), or 0:
   beyond the range is Inf, `inf` the code of +Inf. `nan`: the code NaN takes. */
static JC_DEVICE JC_INLINE jc_u32 jc_wire_narrow(float f, int eb, int mb, jc_u32 sat, jc_u32 inf, jc_u32 nan) {
  const jc_u32 x = jc_f32_bits(f), sign = (x >> 31) << (eb + mb), bias = (1u << (eb - 1)) - 1;
  jc_u32 a = x & 0x7fffffffu;
  const jc_u32 is_nan = jc_wire_nan(a);
  if (sat) a = jc_wire_pick(jc_wire_mask((jc_i32)a > (jc_i32)sat), sat, a);
  /* Below the format's smallest normal 2^(1 - bias): added to 2^(24 - bias - mb) (whose
     f32 ulp is the format's smallest subnormal), f32's own rounding puts |f| on the
     subnormal grid, ties to even; the sum's low bits are then the code. */
  const jc_u32 magic = (128 - bias - mb + 23) << 23;
  const jc_u32 sub = jc_f32_bits(jc_bits_f32(a) + jc_bits_f32(magic)) - magic;
  /* Normal: the exponent rebiased, the dropped bits rounded to nearest even by adding just
     under half an ulp plus the kept lowest bit (a carry steps the exponent up). */
  const jc_u32 norm = (a - ((127 - bias) << 23) + (1u << (22 - mb)) - 1 + ((a >> (23 - mb)) & 1)) >> (23 - mb);
  jc_u32 c = jc_wire_pick(jc_wire_mask((jc_i32)a < (jc_i32)((128 - bias) << 23)), sub, norm);
  if (!sat) c = jc_wire_pick(jc_wire_mask((jc_i32)a >= (jc_i32)((128 + bias) << 23)), inf, c);
  return sign | jc_wire_pick(is_nan, nan, c);
}
/* The f32 of code h of such a format (exact): the prelude's jc_narrow_to_f32, bit for bit.
   `fn`: e4m3's encoding (no Inf; all-ones exponent and mantissa is NaN). A subnormal m
   comes as 2^(1 - bias) (1 + m 2^-mb) - 2^(1 - bias), in f32's normal range: no f32
   subnormal on the way, which a flush-to-zero mode would lose. */
static JC_DEVICE JC_INLINE float jc_wire_widen(jc_u32 h, int eb, int mb, int fn) {
  const jc_u32 bias = (1u << (eb - 1)) - 1, sign = ((h >> (eb + mb)) & 1) << 31;
  const jc_u32 em = h & ((1u << (eb + mb)) - 1), e = em >> mb, m = em & ((1u << mb) - 1);
  const jc_u32 norm = (em << (23 - mb)) + ((127 - bias) << 23);
  const jc_u32 sub = jc_f32_bits(jc_bits_f32(norm + (1u << 23)) - jc_bits_f32((128 - bias) << 23));
  jc_u32 r = jc_wire_pick(jc_wire_mask(e == 0), sub, norm);
  if (fn) r = jc_wire_pick(jc_wire_mask(em == (1u << (eb + mb)) - 1), 0x7fc00000u, r);
  else r = jc_wire_pick(jc_wire_mask(e == (1u << eb) - 1), jc_wire_pick(jc_wire_mask(m != 0), 0x7fc00000u, 0x7f800000u), r);
  return jc_bits_f32(sign | r);
}
/* bf16: the prelude's jc_f32_to_bf16 with a mask for its NaN test. */
static JC_DEVICE JC_INLINE jc_u32 jc_wire_bf16(float f) {
  const jc_u32 x = jc_f32_bits(f);
  return jc_wire_pick(jc_wire_nan(x & 0x7fffffffu), (x >> 16) | 0x40, (x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}
#define JC_WIRE_CVT(soft, prelude) soft
#else
#define JC_WIRE_CVT(soft, prelude) prelude
#endif

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
/* NaN is 0x7f, +-Inf +-448 (0x7e). */
#define JC_WIRE_FP8(f) JC_WIRE_CVT(jc_wire_narrow(f, 4, 3, 0x43e00000u, 0, 0x7f), jc_f32_to_e4m3(f))
#define JC_WIRE_FP8_NAN 0x7fu
#define JC_WIRE_FP8_INF 0x7eu
#else
/* e5m2's own NaN (0x7e) and Inf (0x7c). */
#define JC_WIRE_FP8(f) JC_WIRE_CVT(jc_wire_narrow(f, 5, 2, 0x47600000u, 0, 0x7e), jc_f32_to_e5m2(f))
#define JC_WIRE_FP8_NAN 0x7eu
#define JC_WIRE_FP8_INF 0x7cu
#endif
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) {
  const jc_u32 b = jc_f32_bits(v), a = b & 0x7fffffffu;
  const jc_u32 special = jc_wire_pick(jc_wire_nan(a), JC_WIRE_FP8_NAN, ((b >> 24) & 0x80) | JC_WIRE_FP8_INF);
  return (jc_code)jc_wire_pick(jc_wire_fin(a), JC_WIRE_FP8(v * k), special);
}
#if JC_WIRE == 3
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) {
  const float v = JC_WIRE_CVT(jc_wire_widen(c, 4, 3, 1), jc_e4m3_to_f32(c)) * scale;
  return jc_bits_f32(jc_wire_pick(jc_wire_mask((c & 0x7f) == 0x7e), (jc_u32)(c & 0x80) << 24 | 0x7f800000u, jc_f32_bits(v)));
}
#else
/* e5m2's own Inf and NaN codes decode to themselves, which the scale keeps. */
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) {
  return JC_WIRE_CVT(jc_wire_widen(c, 5, 2, 0), jc_e5m2_to_f32(c)) * scale;
}
#endif
#elif JC_WIRE == 5
/* int8: the scale amax / 126 and codes -126..126; 127, -127 and -128 carry +Inf, -Inf and
   NaN. `*k`: the scale, which the encoder divides by. */
static JC_DEVICE JC_INLINE float jc_wire_scale(float amax, float* k) {
  *k = amax / 126.0f;
  return *k;
}
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) {
  const jc_u32 b = jc_f32_bits(v), a = b & 0x7fffffffu, fin = jc_wire_fin(a), some = jc_wire_mask(k != 0.0f);
  /* The specials, and every value of a block of zeros (scale 0), divide 0 by 1. */
  const jc_u32 q = jc_f32_bits(jc_bits_f32(b & fin & some) / jc_bits_f32(jc_wire_pick(some, jc_f32_bits(k), 0x3f800000u)));
  /* |q| at most 126 (q is no NaN), then rounded to an integer, ties to even: 1.5 * 2^23 + q,
     whose ulp is 1, differs from 1.5 * 2^23 in its low bits by that integer. */
  const jc_u32 qa = q & 0x7fffffffu;
  const float clamped = jc_bits_f32((q & 0x80000000u) | jc_wire_pick(jc_wire_mask((jc_i32)qa > 0x42fc0000), 0x42fc0000u, qa));
  const jc_u32 r = jc_f32_bits(clamped + 12582912.0f) - 0x4b400000u;
  const jc_u32 special = jc_wire_pick(jc_wire_nan(a), 0x80u, jc_wire_pick(jc_wire_mask(b >> 31), 0x81u, 0x7fu));
  return (jc_code)jc_wire_pick(fin, r, special);
}
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) {
  const jc_i32 q = (jc_i8)c;
  const jc_u32 special = jc_wire_pick(jc_wire_mask(q == -128), 0x7fc00000u, jc_wire_pick(jc_wire_mask(q < 0), 0xff800000u, 0x7f800000u));
  return jc_bits_f32(jc_wire_pick(jc_wire_mask(q > 126) | jc_wire_mask(q < -126), special, jc_f32_bits((float)q * scale)));
}
{% if let Some(c) = codec %}#elif JC_WIRE == 6
/* The user's codec {{ c.name }}, its functions translated from Rust by #[wire_codec]: the
   scale is the codec's of the block's largest finite magnitude, and what the encoder gets. */
static JC_DEVICE JC_INLINE jc_u8 jc_codec_encode(float a, float b) {
  (void)b;
  {{ c.encode }}
}
static JC_DEVICE JC_INLINE float jc_codec_decode(jc_u8 a, float b) {
  (void)b;
  {{ c.decode }}
}
#if JC_WIRE_BLOCK
static JC_DEVICE JC_INLINE float jc_codec_scale(float a) {
  {{ c.scale }}
}
static JC_DEVICE JC_INLINE float jc_wire_scale(float amax, float* k) {
  *k = jc_codec_scale(amax);
  return *k;
}
#endif
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) { return jc_codec_encode(v, k); }
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) { return jc_codec_decode(c, scale); }
{% endif %}#elif JC_WIRE == 1
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) { (void)k; return (jc_code)JC_WIRE_CVT(jc_wire_bf16(v), jc_f32_to_bf16(v)); }
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) { (void)scale; return jc_bf16_to_f32(c); }
#else
static JC_DEVICE JC_INLINE jc_code jc_wire_enc(float v, float k) {
  (void)k;
  return (jc_code)JC_WIRE_CVT(jc_wire_narrow(v, 5, 10, 0, 0x7c00, 0x7e00), jc_f32_to_f16(v));
}
static JC_DEVICE JC_INLINE float jc_wire_dec(jc_code c, float scale) {
  (void)scale;
  return JC_WIRE_CVT(jc_wire_widen(c, 5, 10, 0), jc_f16_to_f32(c));
}
#endif

/* The bytes of a step of n elements on a connector: its codes, or with `plain` the fp32
   values themselves (a partial sum between ranks that share memory). */
static JC_DEVICE JC_INLINE jc_u64 jc_wire_step_bytes(jc_u64 n, int plain) {
  return plain ? n * sizeof(float) : jc_wire_bytes(n);
}

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
/* The largest finite magnitude of v[0..m) (0 for the unscaled formats, which need none),
   found as the largest of the magnitudes' bits, which order as the magnitudes do: an
   integer maximum, which vectorizes where a float comparison that must respect NaN does
   not. */
static JC_DEVICE JC_INLINE float jc_wire_abs_max(const float* v, jc_u64 m) {
  jc_i32 amax = 0;
#if JC_WIRE_BLOCK
  for (jc_u64 i = 0; i < m; i++) {
    const jc_i32 a = (jc_i32)(jc_f32_bits(v[i]) & jc_wire_fin(jc_f32_bits(v[i]) & 0x7fffffffu) & 0x7fffffffu);
    amax = a > amax ? a : amax;
  }
#else
  (void)v, (void)m;
#endif
  return jc_bits_f32((jc_u32)amax);
}

/* v[0..m) (m <= JC_WIRE_TILE: one block) replaced by what a receiver decodes of them:
   the wire's rounding where no FIFO step carries them (the direct algorithms). */
static JC_DEVICE JC_INLINE void jc_wire_round(float* v, jc_u64 m) {
  float k;
  const float scale = jc_wire_block_scale(jc_wire_abs_max(v, m), &k);
  for (jc_u64 i = 0; i < m; i++) v[i] = jc_wire_dec(jc_wire_enc(v[i], k), scale);
}

/* The slot of the step last posted on connector c: its bytes, to be sent again as they are
   (a tree node's children all get one encoding). Only c's sender writes it, and not
   before its next step on c. */
static JC_DEVICE JC_INLINE const char* jc_wire_posted(const struct jc_conn* c) {
  return c->buf[JC_PROTO] + ((c->step - 1) % JC_STEPS) * c->slot_bytes[JC_PROTO];
}

/* v[0..m) = the fold of the received values (with has_recv: the fp32 values iv[0..m) with
   plain, else the decoded codes ic[0..m)) and the source elements src[0..m) (with has_src);
   jc_wire_tile calls it with the flags constant, so that each case is a loop of its own
   without tests. */
static JC_DEVICE JC_INLINE void jc_wire_fold(const struct jc_ctx* x, JC_SLOT_READ jc_code* ic, float rscale,
                                             JC_SLOT_READ float* iv, const T* src, float* v, jc_u64 m, int has_recv,
                                             int plain, int has_src, int pre, int post) {
  for (jc_u64 i = 0; i < m; i++) {
    const C rv = !has_recv ? (C)0 : plain ? (C)iv[i] : jc_wire_dec(ic[i], rscale);
    v[i] = jc_fold_c(x, rv, has_recv, has_src, has_src ? src[i] : (T)0, pre, post);
  }
}

/* Elements [b, b + m) of a step of n (m <= JC_WIRE_TILE; one whole block for the scaled
   formats): v = the fold of the received element (decoded, or as it is with `rplain`) and
   the source element, encoded into `out` (written as it is with `splain`). `dst` gets v
   itself when nothing is sent or it is sent as it is, else the decoding of what was sent:
   every rank that receives it decodes the same bits. */
static JC_DEVICE JC_INLINE void jc_wire_tile(const struct jc_ctx* x, JC_SLOT_READ char* in, int rplain, char* out,
                                             int splain, const T* src, T* dst, jc_u64 n, jc_u64 b, jc_u64 m, int pre,
                                             int post) {
  JC_SLOT_READ jc_code* ic = in ? (JC_SLOT_READ jc_code*)in + b : 0;
  JC_SLOT_READ float* iv = in ? (JC_SLOT_READ float*)in + b : 0;
  const T* s = src ? src + b : 0;
  float rscale = 1.0f;
#if JC_WIRE_BLOCK
  if (in && !rplain) rscale = ((JC_SLOT_READ float*)(in + jc_wire_scales_at(n)))[b / JC_WIRE_BLOCK];
#endif
  float v[JC_WIRE_TILE];
  if (in && rplain && src) jc_wire_fold(x, ic, rscale, iv, s, v, m, 1, 1, 1, pre, post);
  else if (in && rplain) jc_wire_fold(x, ic, rscale, iv, s, v, m, 1, 1, 0, pre, post);
  else if (in && src) jc_wire_fold(x, ic, rscale, iv, s, v, m, 1, 0, 1, pre, post);
  else if (in) jc_wire_fold(x, ic, rscale, iv, s, v, m, 1, 0, 0, pre, post);
  else if (src) jc_wire_fold(x, ic, rscale, iv, s, v, m, 0, 0, 1, pre, post);
  else jc_wire_fold(x, ic, rscale, iv, s, v, m, 0, 0, 0, pre, post);
  if (out && splain) {
    float* ov = (float*)out + b;
    for (jc_u64 i = 0; i < m; i++) ov[i] = v[i];
  }
  if (!out || splain) {
    if (dst) for (jc_u64 i = 0; i < m; i++) dst[b + i] = jc_from_c(v[i]);
    return;
  }
  jc_code* oc = (jc_code*)out + b;
  float k;
  const float scale = jc_wire_block_scale(jc_wire_abs_max(v, m), &k);
#if JC_WIRE_BLOCK
  ((float*)(out + jc_wire_scales_at(n)))[b / JC_WIRE_BLOCK] = scale;
#endif
  if (dst) {
    for (jc_u64 i = 0; i < m; i++) {
      const jc_code c = jc_wire_enc(v[i], k);
      oc[i] = c;
      dst[b + i] = jc_from_c(jc_wire_dec(c, scale));
    }
  } else {
    for (jc_u64 i = 0; i < m; i++) oc[i] = jc_wire_enc(v[i], k);
  }
}
