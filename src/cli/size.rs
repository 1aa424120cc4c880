//! Byte sizes with K/M/G suffixes (powers of 1024), as nccl-tests accepts them.

pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("bad size '{s}' (expected e.g. 8, 64K, 16M, 1G)"))
}

/// The sizes of a sweep: `min`, `min * factor`, ... up to `max`. Refuses a sweep that
/// cannot progress (from 0, or by a factor below 2) or has no size.
pub fn sweep_sizes(min: usize, max: usize, factor: usize) -> Result<Vec<usize>, String> {
    if min == 0 {
        return Err("the smallest size (-b/--minbytes) must be at least 1: a sweep from 0 never grows".into());
    }
    if factor < 2 {
        return Err("the step factor (-f/--stepfactor) must be at least 2".into());
    }
    if min > max {
        return Err(format!("minbytes {min} is larger than maxbytes {max}"));
    }
    let mut sizes = vec![min];
    while let Some(next) = sizes.last().and_then(|b| b.checked_mul(factor)).filter(|&b| b <= max) {
        sizes.push(next);
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::{parse_size, sweep_sizes};

    #[test]
    fn sweeps() {
        assert_eq!(sweep_sizes(8, 64, 2), Ok(vec![8, 16, 32, 64]));
        assert_eq!(sweep_sizes(8, 100, 8), Ok(vec![8, 64]));
        assert_eq!(sweep_sizes(5, 5, 2), Ok(vec![5]));
        assert_eq!(sweep_sizes(1 << 62, usize::MAX, 4), Ok(vec![1 << 62]));
        for (min, max, factor) in [(0, 64, 2), (8, 64, 1), (8, 64, 0), (64, 8, 2)] {
            assert!(sweep_sizes(min, max, factor).is_err(), "{min} {max} {factor}");
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
