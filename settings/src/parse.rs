//! The one parser of setting values: whole numbers, byte sizes, durations, flags and
//! choices. Each returns what was expected on failure, for the caller to name the variable.

use std::time::Duration;

/// The longest duration a setting may give (about 31 years): deadlines computed from it
/// never overflow an `Instant`, and anything longer is a typo.
pub const MAX_SECONDS: f64 = 1e9;

/// A whole number in `min..=max`.
pub fn whole(v: &str, min: u64, max: u64) -> Result<u64, String> {
    v.trim().parse::<u64>().ok().filter(|n| (min..=max).contains(n)).ok_or_else(|| format!("expected {min}..={max}"))
}

/// A byte size: a whole number, optionally with a K, M or G suffix (powers of 1024, as
/// nccl-tests reads sizes).
pub fn bytes(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (digits, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| "expected bytes, e.g. 8, 64K, 16M, 1G".to_string())
}

/// A byte size in `min..=max`.
pub fn bytes_within(v: &str, min: u64, max: u64) -> Result<u64, String> {
    let range = || format!("expected bytes (e.g. 4M), {min}..={max}");
    bytes(v).map_err(|_| range()).and_then(|b| if (min..=max).contains(&b) { Ok(b) } else { Err(range()) })
}

/// A duration in seconds (`30`, `2.5`), more than 0 and at most [`MAX_SECONDS`].
pub fn seconds(v: &str) -> Result<Duration, String> {
    let bad = || format!("expected seconds, more than 0 and at most {MAX_SECONDS:e}");
    let s: f64 = v.trim().parse().map_err(|_| bad())?;
    // NaN fails both comparisons.
    if !(s > 0.0 && s <= MAX_SECONDS) {
        return Err(bad());
    }
    Duration::try_from_secs_f64(s).map_err(|_| bad())
}

/// Whether a duration is one [`seconds`] accepts.
pub fn seconds_in_range(d: Duration) -> Result<Duration, String> {
    if d.is_zero() || d.as_secs_f64() > MAX_SECONDS {
        return Err(format!("expected more than 0 and at most {MAX_SECONDS:e} s"));
    }
    Ok(d)
}

/// A flag: 1/0, true/false, yes/no, on/off.
pub fn flag(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected 0 or 1".into()),
    }
}

/// One of `choices`, case-insensitive, as the table spells it.
pub fn choice(v: &str, choices: &'static [&'static str]) -> Result<&'static str, String> {
    choices
        .iter()
        .find(|c| c.eq_ignore_ascii_case(v.trim()))
        .copied()
        .ok_or_else(|| format!("expected one of {}", choices.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_positive_seconds_up_to_1e9() {
        assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(seconds(" 300 "), Ok(Duration::from_secs(300)));
        assert_eq!(seconds("1e9"), Ok(Duration::from_secs(1_000_000_000)));
        for bad in ["0", "-1", "abc", "inf", "", "NaN", "-inf", "1e19", "1e10", "1e300", "5s"] {
            let e = seconds(bad).unwrap_err();
            assert!(e.contains("more than 0") && e.contains("1e9"), "{bad}: {e}");
        }
        assert!(seconds_in_range(Duration::ZERO).is_err());
        assert!(seconds_in_range(Duration::from_secs(1_000_000_001)).is_err());
        assert_eq!(seconds_in_range(Duration::from_secs(1)), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        for (v, b) in [("8", 8), ("64K", 64 << 10), ("16m", 16 << 20), ("1G", 1 << 30), (" 4M ", 4 << 20)] {
            assert_eq!(bytes(v), Ok(b), "{v}");
        }
        for bad in ["", "K", "1X", "-1", "1.5M", "99999999999G"] {
            assert!(bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(bytes_within("1K", 512, 2048), Ok(1024));
        let e = bytes_within("4K", 512, 2048).unwrap_err();
        assert!(e.contains("512..=2048"), "{e}");
    }

    #[test]
    fn whole_numbers_flags_and_choices() {
        assert_eq!(whole("16", 1, 16), Ok(16));
        for bad in ["0", "17", "x", "-1", "1.0"] {
            assert_eq!(whole(bad, 1, 16), Err("expected 1..=16".into()), "{bad}");
        }
        for (v, b) in [("1", true), ("TRUE", true), ("on", true), ("yes", true), ("0", false), ("Off", false)] {
            assert_eq!(flag(v), Ok(b), "{v}");
        }
        assert!(flag("2").is_err() && flag("").is_err());
        assert_eq!(choice("NET", &["auto", "net"]), Ok("net"));
        assert_eq!(choice("ib", &["auto", "net"]), Err("expected one of auto, net".into()));
    }
}
