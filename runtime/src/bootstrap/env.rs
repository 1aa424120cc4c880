//! Environment variables of the bootstrap, and the torchrun / `env://` launch convention.

use std::net::SocketAddr;
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

/// The torchrun / `torch.distributed` `env://` convention: where the master (rank 0) is and
/// which rank this process is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorchrunEnv {
    /// `MASTER_ADDR`: host name or address of the master.
    pub master_addr: String,
    /// `MASTER_PORT`.
    pub master_port: u16,
    /// `RANK`: this process's global rank, `< world_size`.
    pub rank: usize,
    /// `WORLD_SIZE`: number of ranks, `>= 1`.
    pub world_size: usize,
    /// `LOCAL_RANK`: rank within the node (set by torchrun; optional for plain `env://`).
    pub local_rank: Option<usize>,
    /// `LOCAL_WORLD_SIZE`: ranks on this node, if set.
    pub local_world_size: Option<usize>,
}

impl TorchrunEnv {
    /// Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (required) and LOCAL_RANK,
    /// LOCAL_WORLD_SIZE (optional) from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// As [`from_env`](Self::from_env) with the variables looked up by `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let required = |var: &'static str| -> Result<String> {
            match get(var) {
                Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
                _ => Err(BootstrapError::EnvVar { var, problem: "is not set (torchrun / env:// convention)".into() }),
            }
        };
        let number = |var: &'static str, v: &str| -> Result<usize> {
            v.parse::<usize>()
                .map_err(|_| BootstrapError::EnvVar { var, problem: format!("{v:?} is not a non-negative integer") })
        };
        let optional = |var: &'static str| -> Result<Option<usize>> {
            match get(var) {
                Some(v) if !v.trim().is_empty() => number(var, v.trim()).map(Some),
                _ => Ok(None),
            }
        };
        let master_addr = required("MASTER_ADDR")?;
        let port = required("MASTER_PORT")?;
        let master_port = match port.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => {
                return Err(BootstrapError::EnvVar {
                    var: "MASTER_PORT",
                    problem: format!("{port:?} is not a port number in 1..65536"),
                })
            }
        };
        let rank = number("RANK", &required("RANK")?)?;
        let world_size = number("WORLD_SIZE", &required("WORLD_SIZE")?)?;
        if world_size == 0 {
            return Err(BootstrapError::EnvVar { var: "WORLD_SIZE", problem: "must be at least 1".into() });
        }
        if rank >= world_size {
            return Err(BootstrapError::EnvVar {
                var: "RANK",
                problem: format!("{rank} is not below WORLD_SIZE = {world_size}"),
            });
        }
        let local_rank = optional("LOCAL_RANK")?;
        let local_world_size = optional("LOCAL_WORLD_SIZE")?;
        if let (Some(lr), Some(lws)) = (local_rank, local_world_size) {
            if lr >= lws {
                return Err(BootstrapError::EnvVar {
                    var: "LOCAL_RANK",
                    problem: format!("{lr} is not below LOCAL_WORLD_SIZE = {lws}"),
                });
            }
        }
        Ok(Self { master_addr, master_port, rank, world_size, local_rank, local_world_size })
    }

    /// `MASTER_ADDR:MASTER_PORT` resolved to one address (IPv4 preferred).
    pub fn master_socket_addr(&self) -> Result<SocketAddr> {
        let host = if self.master_addr.contains(':') && !self.master_addr.starts_with('[') {
            format!("[{}]", self.master_addr)
        } else {
            self.master_addr.clone()
        };
        super::id::resolve(&format!("{host}:{}", self.master_port), "MASTER_ADDR")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<TorchrunEnv> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        TorchrunEnv::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("2.5").unwrap(), Duration::from_millis(2500));
        for bad in ["0", "-1", "abc", "inf", "", "NaN", "-inf", "1e19", "1e10", "1e300"] {
            let e = parse_timeout(bad).unwrap_err().to_string();
            assert!(e.contains(TIMEOUT_VAR) && e.contains("1e9"), "{bad}: {e}");
        }
        assert_eq!(parse_timeout("1e9").unwrap(), Duration::from_secs(1_000_000_000));
    }

    #[test]
    fn torchrun() {
        let ok = [("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "1"), ("WORLD_SIZE", "4")];
        let e = env(&ok).unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank), (1, 4, None));
        assert_eq!(e.master_socket_addr().unwrap(), "127.0.0.1:29500".parse().unwrap());
        let mut with_local = ok.to_vec();
        with_local.push(("LOCAL_RANK", "1"));
        assert_eq!(env(&with_local).unwrap().local_rank, Some(1));

        let err = |pairs: &[(&str, &str)]| env(pairs).unwrap_err().to_string();
        assert!(err(&ok[1..]).contains("MASTER_ADDR: is not set"));
        let mut v = ok.to_vec();
        v[2] = ("RANK", "x");
        assert!(err(&v).contains("RANK: \"x\" is not a non-negative integer"), "{}", err(&v));
        v[2] = ("RANK", "4");
        assert!(err(&v).contains("not below WORLD_SIZE"));
        v[2] = ("RANK", "0");
        v[1] = ("MASTER_PORT", "0");
        assert!(err(&v).contains("MASTER_PORT"));
        let mut v = ok.to_vec();
        v.push(("LOCAL_RANK", "-1"));
        assert!(err(&v).contains("LOCAL_RANK"));
    }
}
