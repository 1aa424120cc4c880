//! Which rank this process is, from the variables its launcher set: torchrun (`env://`),
//! Open MPI's mpirun, a PMI launcher (MPICH's hydra, Intel MPI) or Slurm's srun; and where
//! the rendezvous is (MASTER_ADDR / MASTER_PORT, which only torchrun sets).

use std::net::SocketAddr;

use super::error::{BootstrapError, Result};
use crate::settings::{COMM_ID, MASTER_FD};

/// The variables one launcher sets.
struct Launcher {
    name: &'static str,
    rank: &'static str,
    size: &'static str,
    local_rank: Option<&'static str>,
    local_size: Option<&'static str>,
}

/// Every launcher `init_from_env` understands. When several are set (a launcher inside
/// another's allocation) they must agree, so the first one found only decides the name
/// reported.
const LAUNCHERS: [Launcher; 4] = [
    Launcher {
        name: "torchrun",
        rank: "RANK",
        size: "WORLD_SIZE",
        local_rank: Some("LOCAL_RANK"),
        local_size: Some("LOCAL_WORLD_SIZE"),
    },
    Launcher {
        name: "mpirun",
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: Some("OMPI_COMM_WORLD_LOCAL_RANK"),
        local_size: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
    },
    Launcher { name: "PMI", rank: "PMI_RANK", size: "PMI_SIZE", local_rank: None, local_size: None },
    Launcher {
        name: "Slurm",
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: Some("SLURM_LOCALID"),
        local_size: None,
    },
];

/// Every launcher's rank, size and local variables, and `JITCCL_MASTER_FD`: what a
/// launcher of its own (`jitccl launch`) clears in its ranks, so that an outer launcher's
/// (an salloc, an mpirun, an outer `jitccl launch`) do not disagree with the ones it sets.
pub fn launcher_vars() -> impl Iterator<Item = &'static str> {
    let ranks = LAUNCHERS.iter().flat_map(|l| [Some(l.rank), Some(l.size), l.local_rank, l.local_size]);
    ranks.flatten().chain([MASTER_FD.name])
}

/// What to tell a user whose launcher gave no rendezvous address.
const RENDEZVOUS_HINT: &str = "set JITCCL_COMM_ID=host:port (rank 0 runs the root there) or MASTER_ADDR and \
     MASTER_PORT; torchrun sets the latter, mpirun and srun set neither: pass e.g. \
     `mpirun -x JITCCL_COMM_ID=127.0.0.1:29500 ...` or `srun --export=ALL,JITCCL_COMM_ID=host:29500 ...`";

/// One launcher's view of this process, as parsed.
struct Seen {
    launcher: &'static Launcher,
    rank: usize,
    size: usize,
    local_rank: Option<usize>,
    local_size: Option<usize>,
}

impl Seen {
    fn describe(&self) -> String {
        let l = self.launcher;
        let mut s = format!("{}={}, {}={}", l.rank, self.rank, l.size, self.size);
        if let (Some(var), Some(v)) = (l.local_rank, self.local_rank) {
            s += &format!(", {var}={v}");
        }
        format!("{s} ({})", l.name)
    }
}

/// This process's place in the job, from its launcher's variables, and the torchrun
/// rendezvous address if one was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    /// The launcher whose variables were read (the first found, when several agree).
    pub launcher: &'static str,
    /// This process's global rank, `< world_size`.
    pub rank: usize,
    /// Number of ranks, `>= 1`.
    pub world_size: usize,
    /// Rank within the node, if the launcher says.
    pub local_rank: Option<usize>,
    /// Ranks on this node, if the launcher says.
    pub local_world_size: Option<usize>,
    /// `MASTER_ADDR` and `MASTER_PORT`, when set (both or neither).
    pub master: Option<(String, u16)>,
}

impl LaunchEnv {
    /// Reads the launchers' variables and MASTER_ADDR / MASTER_PORT from the process
    /// environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// As [`from_env`](Self::from_env) with the variables looked up by `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |var: &str| get(var).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let number = |var: &'static str| -> Result<Option<usize>> {
            get(var)
                .map(|v| {
                    v.parse::<usize>().map_err(|_| BootstrapError::EnvVar {
                        var,
                        problem: format!("{v:?} is not a non-negative integer"),
                    })
                })
                .transpose()
        };
        let mut seen = Vec::new();
        for l in &LAUNCHERS {
            let Some((rank, size)) = both((l.rank, number(l.rank)?), (l.size, number(l.size)?), l.name)? else {
                continue;
            };
            if size == 0 {
                return Err(BootstrapError::EnvVar { var: l.size, problem: "must be at least 1".into() });
            }
            if rank >= size {
                return Err(BootstrapError::EnvVar {
                    var: l.rank,
                    problem: format!("{rank} is not below {} = {size}", l.size),
                });
            }
            let local_rank = l.local_rank.map(number).transpose()?.flatten();
            let local_size = l.local_size.map(number).transpose()?.flatten();
            if let (Some(lr), Some(ls), Some(var), Some(size_var)) =
                (local_rank, local_size, l.local_rank, l.local_size)
            {
                if lr >= ls {
                    return Err(BootstrapError::EnvVar {
                        var,
                        problem: format!("{lr} is not below {size_var} = {ls}"),
                    });
                }
            }
            seen.push(Seen { launcher: l, rank, size, local_rank, local_size });
        }
        let Some(first) = seen.first() else {
            let looked: Vec<String> = LAUNCHERS.iter().map(|l| format!("{}/{} ({})", l.rank, l.size, l.name)).collect();
            return Err(BootstrapError::Launch(format!(
                "no launcher's rank and size are set: looked for {}; start the program with torchrun, \
                 `jitccl launch`, mpirun or srun, or set RANK and WORLD_SIZE",
                looked.join(", ")
            )));
        };
        for other in &seen[1..] {
            let local_differs = matches!((first.local_rank, other.local_rank), (Some(a), Some(b)) if a != b);
            if (first.rank, first.size) != (other.rank, other.size) || local_differs {
                return Err(BootstrapError::Launch(format!(
                    "launchers disagree: {} but {}; unset the variables of the launcher this \
                     program was not started by",
                    first.describe(),
                    other.describe()
                )));
            }
        }
        Ok(Self {
            launcher: first.launcher.name,
            rank: first.rank,
            world_size: first.size,
            local_rank: seen.iter().find_map(|s| s.local_rank),
            local_world_size: seen.iter().find_map(|s| s.local_size),
            master: master(&get)?,
        })
    }

    /// `MASTER_ADDR:MASTER_PORT` resolved to one address (IPv4 preferred); an error saying
    /// how to give one when they are not set.
    pub fn master_socket_addr(&self) -> Result<SocketAddr> {
        let Some((addr, port)) = &self.master else {
            return Err(BootstrapError::EnvVar {
                var: "MASTER_ADDR",
                problem: format!(
                    "is not set, nor is {}, so there is no rendezvous address: {RENDEZVOUS_HINT}",
                    COMM_ID.name
                ),
            });
        };
        let host = if addr.contains(':') && !addr.starts_with('[') { format!("[{addr}]") } else { addr.clone() };
        super::id::resolve(&format!("{host}:{port}"), "MASTER_ADDR")
    }
}

/// Two variables that go together (`who` sets them): both values, neither (`None`), or an
/// error naming the one missing.
fn both<T>(a: (&'static str, Option<T>), b: (&'static str, Option<T>), who: &str) -> Result<Option<(T, T)>> {
    match (a, b) {
        ((_, None), (_, None)) => Ok(None),
        ((_, Some(x)), (_, Some(y))) => Ok(Some((x, y))),
        ((a, x), (b, _)) => {
            let (missing, set) = if x.is_none() { (a, b) } else { (b, a) };
            Err(BootstrapError::EnvVar { var: missing, problem: format!("is not set, though {set} is ({who})") })
        }
    }
}

/// MASTER_ADDR and MASTER_PORT: both, or neither (`None`; JITCCL_COMM_ID may give the
/// address instead).
fn master(get: &impl Fn(&str) -> Option<String>) -> Result<Option<(String, u16)>> {
    let Some((addr, port)) =
        both(("MASTER_ADDR", get("MASTER_ADDR")), ("MASTER_PORT", get("MASTER_PORT")), "torchrun")?
    else {
        return Ok(None);
    };
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(Some((addr, p))),
        _ => Err(BootstrapError::EnvVar {
            var: "MASTER_PORT",
            problem: format!("{port:?} is not a port number in 1..65536"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<LaunchEnv> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        LaunchEnv::from_lookup(|k| m.get(k).cloned())
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        env(pairs).unwrap_err().to_string()
    }

    #[test]
    fn torchrun() {
        let ok = [("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "1"), ("WORLD_SIZE", "4")];
        let e = env(&ok).unwrap();
        assert_eq!((e.launcher, e.rank, e.world_size, e.local_rank), ("torchrun", 1, 4, None));
        assert_eq!(e.master_socket_addr().unwrap(), "127.0.0.1:29500".parse().unwrap());
        let mut with_local = ok.to_vec();
        with_local.push(("LOCAL_RANK", "1"));
        assert_eq!(env(&with_local).unwrap().local_rank, Some(1));

        assert!(err(&ok[1..]).contains("MASTER_ADDR: is not set, though MASTER_PORT is"));
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
        v.pop();
        v.extend([("LOCAL_RANK", "2"), ("LOCAL_WORLD_SIZE", "2")]);
        assert!(err(&v).contains("LOCAL_RANK: 2 is not below LOCAL_WORLD_SIZE = 2"), "{}", err(&v));
    }

    /// Variables, and the launcher, local rank and local size they give.
    type Case = (&'static [(&'static str, &'static str)], &'static str, Option<usize>, Option<usize>);

    #[test]
    fn each_launcher_alone() {
        let cases: [Case; 4] = [
            (&[("RANK", "2"), ("WORLD_SIZE", "3"), ("LOCAL_RANK", "0")], "torchrun", Some(0), None),
            (
                &[
                    ("OMPI_COMM_WORLD_RANK", "2"),
                    ("OMPI_COMM_WORLD_SIZE", "3"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
                ],
                "mpirun",
                Some(2),
                Some(3),
            ),
            (&[("PMI_RANK", "2"), ("PMI_SIZE", "3")], "PMI", None, None),
            (&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "3"), ("SLURM_LOCALID", "1")], "Slurm", Some(1), None),
        ];
        for (pairs, launcher, local_rank, local_size) in cases {
            let e = env(pairs).unwrap();
            assert_eq!((e.launcher, e.rank, e.world_size), (launcher, 2, 3), "{pairs:?}");
            assert_eq!((e.local_rank, e.local_world_size, &e.master), (local_rank, local_size, &None), "{pairs:?}");
            // No MASTER_ADDR: the error says how to give a rendezvous address.
            let m = e.master_socket_addr().unwrap_err().to_string();
            assert!(m.contains("MASTER_ADDR") && m.contains("JITCCL_COMM_ID") && m.contains("mpirun -x"), "{m}");
        }
        assert!(err(&[("PMI_RANK", "0")]).contains("PMI_SIZE: is not set, though PMI_RANK is (PMI)"));
        assert!(err(&[("SLURM_NTASKS", "2")]).contains("SLURM_PROCID: is not set, though SLURM_NTASKS is"));
        assert!(err(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "3")])
            .contains("OMPI_COMM_WORLD_RANK: 3 is not below OMPI_COMM_WORLD_SIZE = 3"));
        assert!(err(&[("PMI_RANK", "0"), ("PMI_SIZE", "0")]).contains("PMI_SIZE: must be at least 1"));
    }

    #[test]
    fn launchers_that_agree() {
        let e = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ])
        .unwrap();
        assert_eq!(
            (e.launcher, e.rank, e.world_size, e.local_rank, e.local_world_size),
            ("mpirun", 1, 2, Some(1), Some(2))
        );
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")]).unwrap();
        assert_eq!((e.launcher, e.rank, e.world_size), ("torchrun", 0, 1));
    }

    #[test]
    fn launchers_that_disagree() {
        let e = err(&[("RANK", "1"), ("WORLD_SIZE", "4"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")]);
        assert!(e.contains("RANK=1, WORLD_SIZE=4 (torchrun) but SLURM_PROCID=0, SLURM_NTASKS=4 (Slurm)"), "{e}");
        let e =
            err(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2"), ("PMI_RANK", "0"), ("PMI_SIZE", "3")]);
        assert!(e.contains("OMPI_COMM_WORLD_SIZE=2") && e.contains("PMI_SIZE=3"), "{e}");
        let e = err(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
        ]);
        assert!(e.contains("LOCAL_RANK=0") && e.contains("SLURM_LOCALID=1"), "{e}");
    }

    #[test]
    fn no_launcher() {
        let e = err(&[("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")]);
        for var in [
            "RANK/WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE",
            "PMI_RANK/PMI_SIZE",
            "SLURM_PROCID/SLURM_NTASKS",
        ] {
            assert!(e.contains(var), "{var}: {e}");
        }
        assert_eq!(launcher_vars().count(), 14);
        assert!(launcher_vars().any(|v| v == "SLURM_LOCALID"));
        assert!(launcher_vars().any(|v| v == "JITCCL_MASTER_FD"), "an outer launch's socket is not its ranks'");
        // Empty values count as unset.
        assert!(err(&[("RANK", " "), ("WORLD_SIZE", "")]).contains("no launcher's rank and size are set"));
    }
}
