//! Byte sizes with K/M/G suffixes (powers of 1024), as nccl-tests accepts them, and the
//! sizes of a sweep (nccl-tests' `-f` factor or `-i` fixed step).

/// The most sizes one sweep may have: `-i 1` from 8 B to 32 MiB would otherwise run for
/// days (nccl-tests accepts it; a typo should not).
pub const MAX_SIZES: usize = 10_000;

pub fn parse_size(s: &str) -> Result<usize, String> {
    jitccl::settings::parse::bytes(s)
        .and_then(|b| usize::try_from(b).map_err(|e| e.to_string()))
        .map_err(|e| format!("bad size '{s}' ({e})"))
}

/// How a sweep goes from one size to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Multiply by this (nccl-tests' `-f/--stepfactor`).
    Factor(usize),
    /// Add this many bytes (nccl-tests' `-i/--stepbytes`).
    Bytes(usize),
}

/// The sizes of a sweep: `min`, then each step up to `max`. Refuses a sweep that cannot
/// progress (from 0, by a factor below 2, by 0 bytes), has no size, or has more than
/// [`MAX_SIZES`].
pub fn sweep_sizes(min: usize, max: usize, step: Step) -> Result<Vec<usize>, String> {
    if min == 0 {
        return Err("the smallest size (-b/--minbytes) must be at least 1: a sweep from 0 never grows".into());
    }
    match step {
        Step::Factor(f) if f < 2 => return Err("the step factor (-f/--stepfactor) must be at least 2".into()),
        Step::Bytes(0) => return Err("the step (-i/--stepbytes) must be at least 1".into()),
        _ => {}
    }
    if min > max {
        return Err(format!("minbytes {min} is larger than maxbytes {max}"));
    }
    if let Step::Bytes(b) = step {
        let n = (max - min) / b + 1;
        if n > MAX_SIZES {
            return Err(format!(
                "-i/--stepbytes {b} from {min} to {max} B gives {n} sizes; at most {MAX_SIZES} are allowed"
            ));
        }
    }
    let next = |b: usize| match step {
        Step::Factor(f) => b.checked_mul(f),
        Step::Bytes(s) => b.checked_add(s),
    };
    let mut sizes = vec![min];
    while let Some(n) = sizes.last().and_then(|&b| next(b)).filter(|&b| b <= max) {
        sizes.push(n);
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::{parse_size, sweep_sizes, Step};

    #[test]
    fn sweeps() {
        let f = Step::Factor;
        assert_eq!(sweep_sizes(8, 64, f(2)), Ok(vec![8, 16, 32, 64]));
        assert_eq!(sweep_sizes(8, 100, f(8)), Ok(vec![8, 64]));
        assert_eq!(sweep_sizes(5, 5, f(2)), Ok(vec![5]));
        assert_eq!(sweep_sizes(1 << 62, usize::MAX, f(4)), Ok(vec![1 << 62]));
        assert_eq!(sweep_sizes(1024, 4000, Step::Bytes(1024)), Ok(vec![1024, 2048, 3072]));
        assert_eq!(sweep_sizes(usize::MAX - 1, usize::MAX, Step::Bytes(5)), Ok(vec![usize::MAX - 1]));
        for (min, max, step) in [
            (0, 64, f(2)),
            (8, 64, f(1)),
            (8, 64, f(0)),
            (64, 8, f(2)),
            (8, 64, Step::Bytes(0)),
            (1, 1 << 20, Step::Bytes(1)),
        ] {
            assert!(sweep_sizes(min, max, step).is_err(), "{min} {max} {step:?}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("1.5M").is_err());
        assert!(parse_size("").is_err());
    }
}
