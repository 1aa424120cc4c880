//! A wire format of one's own: `#[jitccl::wire_codec]` turns a module of plain Rust
//! functions into a format the kernels carry their elements in, here a log-scale 8-bit
//! format (a sign and a 7-bit log2 magnitude in quarter octaves below a per-block scale).
//! The AllReduce decodes on arrival, adds in fp32 and encodes once per hop; every rank ends
//! with the same bits. Run: `cargo run --release --example log8_wire`.

use std::process::ExitCode;

use jitccl::{Comm, Config, Op, Wire, WireLocal};

/// Codes: 0 is zero, `s | q` (`s` the sign bit 0x80, `q` in 1..=126) is
/// `±scale * 2^((q - 126) / 4)`, 0x7f and 0xff are ±Inf, 0x80 is NaN. A block's scale is its
/// largest finite magnitude, so every code lies at or below it.
#[jitccl::wire_codec(block = 64)]
pub mod log8 {
    pub fn scale(amax: f32) -> f32 {
        amax
    }

    pub fn encode(value: f32, scale: f32) -> u8 {
        let bits = value.to_bits();
        let sign = (bits >> 24) as u8 & 0x80;
        let mag = bits & 0x7fff_ffff;
        if mag > 0x7f80_0000 {
            0x80
        } else if mag == 0x7f80_0000 {
            sign | 0x7f
        } else if scale == 0.0 {
            0
        } else {
            // |value| / scale in (0, 1]: its octave from the exponent bits, its quarter
            // from the mantissa against 2^(1/8), 2^(3/8), 2^(5/8), 2^(7/8): the nearest
            // quarter octave.
            let r = (f32::from_bits(mag) / scale).to_bits();
            let octave = (r >> 23) as i32 - 127;
            let m = f32::from_bits((r & 0x7f_ffff) | 0x3f80_0000);
            let quarter = if m >= 1.834_008 {
                4
            } else if m >= 1.542_211 {
                3
            } else if m >= 1.296_84 {
                2
            } else if m >= 1.090_508 {
                1
            } else {
                0
            };
            let q = 126 + 4 * octave + quarter;
            if q < 1 {
                0
            } else {
                sign | q as u8
            }
        }
    }

    // A body takes literals, not paths: 2^(1/2) is written out.
    #[allow(clippy::approx_constant)]
    pub fn decode(code: u8, scale: f32) -> f32 {
        let q = (code & 0x7f) as i32;
        let mag = if code == 0x80 {
            f32::from_bits(0x7fc0_0000)
        } else if q == 0x7f {
            f32::from_bits(0x7f80_0000)
        } else if q == 0 {
            0.0
        } else {
            // 2^((q - 126) / 4) as a power of two times 2^(t / 4), t in 0..4: exact.
            let k = 126 - q;
            let octaves = (k + 3) / 4;
            let t = 4 * octaves - k;
            let frac = if t == 3 {
                1.681_792_9
            } else if t == 2 {
                1.414_213_5
            } else if t == 1 {
                1.189_207_1
            } else {
                1.0
            };
            f32::from_bits(((127 - octaves) as u32) << 23) * frac * scale
        };
        if code > 0x80 {
            -mag
        } else {
            mag
        }
    }
}

/// One encoding's error: a relative term (half a quarter octave, and the scale's
/// multiplication) and one of the block's scale (values below its smallest code).
pub const RELATIVE: f64 = 0.090_507_732_665_257_66 + 1.0 / (1u64 << 23) as f64;
pub const OF_SCALE: f64 = 1.0 / (1u64 << 31) as f64;

/// Rank `r`'s inputs: magnitudes over six decades, a run of zeros, and at rank 0 an Inf
/// and a NaN.
pub fn input(r: usize, i: usize) -> f32 {
    let h = ((i * 7919 + r * 104_729) % 1000) as f32 / 1000.0 - 0.5;
    match (r, i) {
        (0, 5) => f32::INFINITY,
        (0, 6) => f32::NAN,
        (_, 100..=163) => 0.0,
        _ => h * 10f32.powi((i % 7) as i32 - 3),
    }
}

/// The AllReduce of `input` in the log8 wire over `nranks` ranks: each rank's result.
pub fn run(nranks: usize, count: usize) -> Result<Vec<Vec<f32>>, jitccl::Error> {
    // Within one host memory bandwidth is the wire and the runtime keeps such calls exact
    // unless told to encode; here it is told, to show the format.
    let cfg = Config { wire_local: Some(WireLocal::Encode), ..Config::default() };
    let comms = Comm::init_all(nranks, &cfg)?;
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let stream = c.device().stream()?;
                    let xs: Vec<f32> = (0..count).map(|i| input(c.rank(), i)).collect();
                    let send = c.device().alloc_from(&xs)?;
                    let recv = c.device().alloc::<f32>(count)?;
                    c.wired(Wire::Custom(&LOG8)).all_reduce(&send, &recv, count, Op::Sum, &stream)?;
                    stream.synchronize()?;
                    Ok(recv.to_vec())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

/// Where rank 0's `got` leaves the bound of `nranks` encodings of the exact sum (or a
/// non-finite sum does not come out as itself), or a rank's bits differ from rank 0's.
pub fn check(nranks: usize, outs: &[Vec<f32>]) -> Option<String> {
    let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if let Some(r) = outs.iter().position(|o| bits(o) != bits(&outs[0])) {
        return Some(format!("rank {r}'s result differs from rank 0's"));
    }
    let got = &outs[0];
    let n = nranks as f64;
    for (j, &g) in got.iter().enumerate() {
        let want: f64 = (0..nranks).map(|r| input(r, j) as f64).sum();
        if !want.is_finite() {
            if !(want.is_nan() && g.is_nan() || want == g as f64) {
                return Some(format!("element {j}: {g}, the exact sum is {want}"));
            }
            continue;
        }
        // `a`: the largest magnitudes' sum within a block of the element, which bounds the
        // scale of every block it is encoded in.
        let m_of = |k: usize| (0..nranks).map(|r| (input(r, k) as f64).abs()).filter(|v| v.is_finite()).sum::<f64>();
        let a = (j.saturating_sub(63)..(j + 64).min(got.len())).map(m_of).fold(0.0, f64::max);
        let bound = n
            * ((RELATIVE + 1.0 / (1u64 << 24) as f64) * m_of(j) + OF_SCALE * a)
            * (1.0 + RELATIVE).powi(nranks as i32);
        // NaN, where a finite value was due, fails too.
        if (g as f64 - want).abs().partial_cmp(&bound).is_none_or(|o| o == std::cmp::Ordering::Greater) {
            return Some(format!("element {j}: {g}, exact {want}, bound {bound:e}"));
        }
    }
    None
}

#[allow(dead_code, reason = "the tests call run() only")]
fn main() -> ExitCode {
    let (nranks, count) = (4, 1031);
    match run(nranks, count) {
        Ok(outs) => {
            for j in [0, 1, 5, 6, 100, 500] {
                let exact: f64 = (0..nranks).map(|r| input(r, j) as f64).sum();
                println!("element {j}: log8 wire {:e}, exact {exact:e}", outs[0][j]);
            }
            let (v, s) = (0.3f32, 1.0f32);
            println!(
                "the codec in Rust: {v} -> {:#04x} -> {}",
                log8::encode(v, s),
                log8::decode(log8::encode(v, s), s)
            );
            match check(nranks, &outs) {
                None => ExitCode::SUCCESS,
                Some(p) => {
                    eprintln!("{p}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
