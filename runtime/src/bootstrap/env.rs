//! Environment variables of the bootstrap (the launchers' are in [`super::launch`]).

use std::time::Duration;

use super::error::{BootstrapError, Result};

/// `host:port` of a root every rank uses (rank 0 starts it there).
pub const COMM_ID_VAR: &str = "JITCCL_COMM_ID";
/// Timeout of every bootstrap wait, in seconds (fractions allowed).
pub const TIMEOUT_VAR: &str = "JITCCL_BOOTSTRAP_TIMEOUT";
/// Interface filter, as NCCL_SOCKET_IFNAME (see [`super::iface`]).
pub const IFNAME_VAR: &str = "JITCCL_SOCKET_IFNAME";
/// Timeout when `JITCCL_BOOTSTRAP_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest `JITCCL_BOOTSTRAP_TIMEOUT`, in seconds (~31 years): anything above is a typo, and
/// far larger values do not fit a `Duration` or a deadline.
pub const MAX_TIMEOUT_SECS: f64 = 1e9;

/// Reads `var` as UTF-8; `None` when unset or empty.
pub(crate) fn var(var: &'static str) -> Result<Option<String>> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v.trim().to_string())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(BootstrapError::EnvVar { var, problem: "is not valid UTF-8".into() })
        }
    }
}

/// Parses a timeout in seconds (`"30"`, `"2.5"`): a number in (0, [`MAX_TIMEOUT_SECS`]].
pub(crate) fn parse_timeout(value: &str) -> Result<Duration> {
    let bad = || BootstrapError::EnvVar {
        var: TIMEOUT_VAR,
        problem: format!("{value:?} is not a number of seconds in (0, {MAX_TIMEOUT_SECS:e}]"),
    };
    let s: f64 = value.trim().parse().map_err(|_| bad())?;
    // NaN fails both comparisons.
    if !(s > 0.0 && s <= MAX_TIMEOUT_SECS) {
        return Err(bad());
    }
    Duration::try_from_secs_f64(s).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("2.5").unwrap(), Duration::from_millis(2500));
        for bad in ["0", "-1", "abc", "inf", "", "NaN", "-inf", "1e19", "1e10", "1e300"] {
            let e = parse_timeout(bad).unwrap_err().to_string();
            assert!(e.contains(TIMEOUT_VAR) && e.contains("1e9"), "{bad}: {e}");
        }
        assert_eq!(parse_timeout("1e9").unwrap(), Duration::from_secs(1_000_000_000));
    }
}
