//! The target-dependent functions a body may call (abs, sqrt and fused multiply-add of
//! floats), each a `jcu_*` macro defined at the top of the body for both targets.

use crate::types::Prim;

/// Target-dependent helpers a body uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Helper {
    Fabs(Prim),
    Sqrt(Prim),
    Fma(Prim),
}

impl Helper {
    pub(super) fn name(self) -> &'static str {
        match self {
            Helper::Fabs(Prim::F32) => "jcu_fabsf",
            Helper::Fabs(_) => "jcu_fabs",
            Helper::Sqrt(Prim::F32) => "jcu_sqrtf",
            Helper::Sqrt(_) => "jcu_sqrt",
            Helper::Fma(Prim::F32) => "jcu_fmaf",
            Helper::Fma(_) => "jcu_fma",
        }
    }

    pub(super) fn cuda(self) -> String {
        let f = match self {
            Helper::Fabs(Prim::F32) => "fabsf(x)",
            Helper::Fabs(_) => "fabs(x)",
            Helper::Sqrt(Prim::F32) => "sqrtf(x)",
            Helper::Sqrt(_) => "sqrt(x)",
            Helper::Fma(Prim::F32) => "fmaf(x, y, z)",
            Helper::Fma(_) => "fma(x, y, z)",
        };
        format!("#define {}{} {f}", self.name(), self.params())
    }

    fn params(self) -> &'static str {
        match self {
            Helper::Fma(_) => "(x, y, z)",
            _ => "(x)",
        }
    }

    pub(super) fn host(self) -> String {
        let name = self.name();
        match self {
            Helper::Fabs(Prim::F32) => format!("#define {name}(x) __builtin_fabsf(x)"),
            Helper::Fabs(_) => format!("#define {name}(x) __builtin_fabs(x)"),
            Helper::Sqrt(p) => {
                // The instruction itself: __builtin_sqrt keeps a libm call for errno.
                let (ty, x86, arm, builtin) = if p == Prim::F32 {
                    ("float", "sqrtss %1, %0", "fsqrt %s0, %s1", "__builtin_sqrtf")
                } else {
                    ("double", "sqrtsd %1, %0", "fsqrt %d0, %d1", "__builtin_sqrt")
                };
                let asm = |ins: &str, reg: &str| {
                    format!(
                        "#define {name}(x) __extension__({{ {ty} jcu_r_, jcu_v_ = (x); \
                         __asm__(\"{ins}\" : \"={reg}\"(jcu_r_) : \"{reg}\"(jcu_v_)); jcu_r_; }})"
                    )
                };
                format!(
                    "#if defined(__x86_64__)\n{}\n#elif defined(__aarch64__)\n{}\n#else\n#define {name}(x) {builtin}(x)\n#endif",
                    asm(x86, "x"),
                    asm(arm, "w")
                )
            }
            Helper::Fma(Prim::F32) => format!(
                "/* fused multiply-add, exact without libm: the product is exact in double; the sum \
                 is rounded to odd (TwoSum error), then once to float */\n\
                 #define {name}(x, y, z) __extension__({{ \\\n\
                 \x20 double jcu_p_ = (double)(x) * (double)(y), jcu_c_ = (double)(z), jcu_s_ = jcu_p_ + jcu_c_; \\\n\
                 \x20 if (jcu_s_ - jcu_s_ == 0) {{ \\\n\
                 \x20   double jcu_b_ = jcu_s_ - jcu_p_, jcu_e_ = (jcu_p_ - (jcu_s_ - jcu_b_)) + (jcu_c_ - jcu_b_); \\\n\
                 \x20   union {{ double d; jc_u64 u; }} jcu_w_; \\\n\
                 \x20   jcu_w_.d = jcu_s_; \\\n\
                 \x20   if (jcu_e_ != 0 && !(jcu_w_.u & 1)) {{ if ((jcu_e_ > 0) == (jcu_s_ > 0)) jcu_w_.u++; else jcu_w_.u--; }} \\\n\
                 \x20   jcu_s_ = jcu_w_.d; \\\n\
                 \x20 }} \\\n\
                 \x20 (float)jcu_s_; }})"
            ),
            Helper::Fma(_) => FMA_F64.to_string(),
        }
    }
}

/// Fused multiply-add of doubles on the host, exact and without libm: the product of the
/// 53-bit significands as a 128-bit integer, the addend aligned to it (lost bits kept as
/// a sticky bit), one rounding to nearest-even (subnormal and overflowing results
/// included). Specials and zero operands take the plain operations, exact for them.
const FMA_F64: &str = r#"/* fused multiply-add, exact without libm: 128-bit integer significands, one rounding */
#define jcu_fma(x, y, z) __extension__({ \
  double jcu_x_ = (x), jcu_y_ = (y), jcu_z_ = (z), jcu_r_; \
  if (jcu_x_ - jcu_x_ != 0 || jcu_y_ - jcu_y_ != 0) jcu_r_ = jcu_x_ * jcu_y_ + jcu_z_; \
  else if (jcu_z_ - jcu_z_ != 0) jcu_r_ = jcu_z_; \
  else if (jcu_x_ == 0 || jcu_y_ == 0) jcu_r_ = jcu_x_ * jcu_y_ + jcu_z_; \
  else if (jcu_z_ == 0) jcu_r_ = jcu_x_ * jcu_y_; \
  else { \
    union { double d; jc_u64 u; } jcu_w_; \
    jc_u64 jcu_m_[3]; int jcu_e_[3], jcu_s_[3]; \
    double jcu_in_[3] = { jcu_x_, jcu_y_, jcu_z_ }; \
    for (int jcu_i_ = 0; jcu_i_ < 3; jcu_i_++) { \
      jcu_w_.d = jcu_in_[jcu_i_]; \
      int jcu_be_ = (int)((jcu_w_.u >> 52) & 0x7ff); \
      jcu_s_[jcu_i_] = (int)(jcu_w_.u >> 63); \
      jcu_m_[jcu_i_] = jcu_w_.u & 0xfffffffffffffULL; \
      if (jcu_be_) jcu_m_[jcu_i_] |= 1ULL << 52; \
      jcu_e_[jcu_i_] = (jcu_be_ ? jcu_be_ : 1) - 1075; \
    } \
    /* A = x*y and B = z as 128-bit integers whose top bit is bit 125 */ \
    unsigned __int128 jcu_a_ = (unsigned __int128)jcu_m_[0] * jcu_m_[1], jcu_b_ = jcu_m_[2]; \
    int jcu_ea_ = jcu_e_[0] + jcu_e_[1], jcu_eb_ = jcu_e_[2], jcu_sa_ = jcu_s_[0] ^ jcu_s_[1], jcu_sb_ = jcu_s_[2]; \
    int jcu_la_ = (jc_u64)(jcu_a_ >> 64) ? __builtin_clzll((jc_u64)(jcu_a_ >> 64)) : 64 + __builtin_clzll((jc_u64)jcu_a_); \
    int jcu_lb_ = 64 + __builtin_clzll((jc_u64)jcu_b_); \
    jcu_a_ <<= jcu_la_ - 2; jcu_ea_ -= jcu_la_ - 2; \
    jcu_b_ <<= jcu_lb_ - 2; jcu_eb_ -= jcu_lb_ - 2; \
    if (jcu_eb_ > jcu_ea_ || (jcu_eb_ == jcu_ea_ && jcu_b_ > jcu_a_)) { \
      unsigned __int128 jcu_t_ = jcu_a_; jcu_a_ = jcu_b_; jcu_b_ = jcu_t_; \
      int jcu_te_ = jcu_ea_; jcu_ea_ = jcu_eb_; jcu_eb_ = jcu_te_; \
      jcu_te_ = jcu_sa_; jcu_sa_ = jcu_sb_; jcu_sb_ = jcu_te_; \
    } \
    /* align B; lost bits are a fraction f in (0, 1) of the last unit */ \
    int jcu_d_ = jcu_ea_ - jcu_eb_, jcu_st_ = 0; \
    if (jcu_d_ >= 128) { jcu_st_ = 1; jcu_b_ = 0; } \
    else if (jcu_d_ > 0) { jcu_st_ = (jcu_b_ << (128 - jcu_d_)) != 0; jcu_b_ >>= jcu_d_; } \
    unsigned __int128 jcu_r128_; \
    if (jcu_sa_ == jcu_sb_) jcu_r128_ = jcu_a_ + jcu_b_; \
    else jcu_r128_ = jcu_a_ - jcu_b_ - (unsigned __int128)jcu_st_; \
    if (jcu_r128_ == 0 && !jcu_st_) jcu_r_ = 0.0; \
    else { \
      int jcu_t_ = 127 - ((jc_u64)(jcu_r128_ >> 64) ? __builtin_clzll((jc_u64)(jcu_r128_ >> 64)) : 64 + __builtin_clzll((jc_u64)jcu_r128_)); \
      int jcu_lsb_ = jcu_t_ + jcu_ea_ - 52; \
      if (jcu_lsb_ < -1074) jcu_lsb_ = -1074; \
      int jcu_sh_ = jcu_lsb_ - jcu_ea_; \
      jc_u64 jcu_mm_; \
      if (jcu_sh_ <= 0) jcu_mm_ = (jc_u64)(jcu_r128_ << -jcu_sh_); \
      else if (jcu_sh_ >= 128) jcu_mm_ = 0; \
      else { \
        unsigned __int128 jcu_rem_ = jcu_r128_ & (((unsigned __int128)1 << jcu_sh_) - 1), jcu_half_ = (unsigned __int128)1 << (jcu_sh_ - 1); \
        jcu_mm_ = (jc_u64)(jcu_r128_ >> jcu_sh_); \
        if (jcu_rem_ > jcu_half_ || (jcu_rem_ == jcu_half_ && (jcu_st_ || (jcu_mm_ & 1)))) jcu_mm_++; \
        if (jcu_mm_ == 1ULL << 53) { jcu_mm_ >>= 1; jcu_lsb_++; } \
      } \
      if (jcu_mm_ >= 1ULL << 52) { \
        int jcu_be_ = jcu_lsb_ + 1075; \
        jcu_w_.u = jcu_be_ >= 2047 ? 0x7ffULL << 52 : ((jc_u64)jcu_be_ << 52) | (jcu_mm_ & 0xfffffffffffffULL); \
      } else jcu_w_.u = jcu_mm_; \
      jcu_w_.u |= (jc_u64)jcu_sa_ << 63; \
      jcu_r_ = jcu_w_.d; \
    } \
  } \
  jcu_r_; })"#;
