//! How `jitccl tune` measures: setups (a one-row tuning table per candidate, an empty one
//! for the cost model, or a given table) timed side by side by one `jitccl perf --compare`
//! run per size band, its output and DEBUG log parsed; and the partial file that keeps
//! finished bands across interrupted runs.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use jitccl::settings::{ALGO, NCHANNELS, PROTO, WIRE_LOCAL};
use jitccl::tune::{Row, Table};
use jitccl::{Algorithm, Collective, Protocol, Wire};

use super::append;

/// One candidate: what a tuning table row fixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub channels: usize,
    /// Bytes per FIFO step; `None`: the model's (the whole slot).
    pub chunk: Option<usize>,
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}ch", self.algo, self.proto, self.channels)?;
        match self.chunk {
            Some(c) => write!(f, "/{c}B"),
            None => Ok(()),
        }
    }
}

impl Candidate {
    pub fn row(&self, coll: Collective, min_bytes: u64, max_bytes: u64, nranks: Option<usize>, wire: Wire) -> Row {
        Row {
            coll,
            min_bytes,
            max_bytes,
            algo: self.algo,
            proto: self.proto,
            channels: Some(self.channels),
            nnodes: nranks.map(|_| 1),
            nranks,
            pipe_ops: None,
            // A direct algorithm's row is for registered buffers only (the others' calls
            // take the model); the other rows were measured best among every candidate.
            reg_buff: self.algo.is_direct().then_some(true),
            chunk_bytes: self.chunk,
            wire,
        }
    }

    /// The candidate a logged pick ("ring/ll/1ch") names, with the model's chunk size.
    pub fn from_pick(pick: &str) -> Option<Candidate> {
        let mut f = pick.split('/');
        let (algo, proto) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?);
        let channels = f.next()?.strip_suffix("ch")?.parse().ok()?;
        Some(Candidate { algo, proto, channels, chunk: None })
    }

    /// The partial file's spelling, `None` being the model's run.
    fn key(c: Option<&Candidate>) -> String {
        c.map_or_else(
            || "model".into(),
            |c| format!("{}/{}/{}/{}", c.algo, c.proto, c.channels, c.chunk.map_or(-1, |c| c as i64)),
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Measurement {
    /// Per size: the time (us) and what the runtime chose ("ring/ll/1ch").
    Done {
        times: BTreeMap<usize, f64>,
        picks: BTreeMap<usize, String>,
    },
    Failed(String),
}

impl Measurement {
    fn encode(&self) -> String {
        match self {
            Measurement::Failed(why) => format!("failed\t{}", why.replace(['\t', '\n'], " ")),
            Measurement::Done { times, picks } => {
                let sizes: Vec<String> = times
                    .iter()
                    .map(|(s, t)| format!("{s}={t}={}", picks.get(s).map_or("?", String::as_str)))
                    .collect();
                format!("ok\t{}", sizes.join(";"))
            }
        }
    }

    fn decode(kind: &str, rest: &str) -> Option<Measurement> {
        match kind {
            "failed" => Some(Measurement::Failed(rest.to_string())),
            "ok" => {
                let (mut times, mut picks) = (BTreeMap::new(), BTreeMap::new());
                for item in rest.split(';') {
                    let mut f = item.splitn(3, '=');
                    let size = f.next()?.parse().ok()?;
                    times.insert(size, f.next()?.parse().ok()?);
                    picks.insert(size, f.next()?.to_string());
                }
                Some(Measurement::Done { times, picks })
            }
            _ => None,
        }
    }
}

/// `<output>.partial`: a header naming the parameters, then one line per finished run.
pub(super) struct Partial {
    path: PathBuf,
    done: HashMap<(String, String), Measurement>,
}

impl Partial {
    /// Opens the file, keeping what a run with the same parameters recorded; one made
    /// with other parameters is started over (its times would not compare).
    pub fn open(path: &Path, signature: &str) -> Result<Partial, String> {
        let header = format!("# jitccl tune partial: {signature}");
        let mut done = HashMap::new();
        match std::fs::read_to_string(path) {
            Ok(text) if text.lines().next() == Some(header.as_str()) => {
                // A line cut short by a kill does not decode and is measured again.
                for line in text.lines().skip(1) {
                    let f: Vec<&str> = line.splitn(4, '\t').collect();
                    if let [coll, key, kind, rest] = f[..] {
                        if let Some(m) = Measurement::decode(kind, rest) {
                            done.insert((coll.to_string(), key.to_string()), m);
                        }
                    }
                }
            }
            Ok(_) => {
                eprintln!("jitccl tune: starting over: {} was made with other parameters", path.display());
                std::fs::remove_file(path).map_err(|e| format!("removing {}: {e}", path.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        }
        if done.is_empty() {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            }
            std::fs::write(path, format!("{header}\n")).map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok(Partial { path: path.to_path_buf(), done })
    }

    pub fn kept(&self) -> usize {
        self.done.len()
    }

    /// `c`'s measurement over every band recorded so far (the model's for `None`): the
    /// first failure, else the sizes of all of them.
    pub fn get(&self, coll: Collective, c: Option<&Candidate>) -> Option<Measurement> {
        let prefix = format!("{}@", Candidate::key(c));
        let mut found = self.done.iter().filter(|((cl, k), _)| *cl == coll.to_string() && k.starts_with(&prefix));
        let (mut times, mut picks) = (BTreeMap::new(), BTreeMap::new());
        let mut any = false;
        for (_, m) in found.by_ref() {
            any = true;
            match m {
                Measurement::Failed(_) => return Some(m.clone()),
                Measurement::Done { times: t, picks: p } => {
                    times.extend(t);
                    picks.extend(p.iter().map(|(s, v)| (*s, v.clone())));
                }
            }
        }
        any.then_some(Measurement::Done { times, picks })
    }

    /// Whether the band starting at `start` is recorded for `c`.
    pub fn has(&self, coll: Collective, c: Option<&Candidate>, start: usize) -> bool {
        self.done.contains_key(&(coll.to_string(), format!("{}@{start}", Candidate::key(c))))
    }

    /// Records `c`'s measurement of the band starting at `start`.
    pub fn record(
        &mut self, coll: Collective, c: Option<&Candidate>, start: usize, m: &Measurement,
    ) -> Result<(), String> {
        let key = format!("{}@{start}", Candidate::key(c));
        append(&self.path, &format!("{coll}\t{key}\t{}", m.encode()))?;
        self.done.insert((coll.to_string(), key), m.clone());
        Ok(())
    }
}

/// One setup of a `perf --compare` run: a label, a tuning table and optionally channels.
#[derive(Clone)]
pub(super) struct Setup {
    pub label: String,
    /// The candidate its one-row table forces; `None` for the model or a given table.
    pub cand: Option<Candidate>,
    table: PathBuf,
    channels: Option<usize>,
}

impl Setup {
    /// The setup running `table` as it is (its label `label`).
    pub fn table(label: &str, table: &Path) -> Setup {
        Setup { label: label.to_string(), cand: None, table: table.to_path_buf(), channels: None }
    }

    /// The cost model alone: an empty table, written into `work`.
    pub fn model(work: &Path) -> Result<Setup, String> {
        let path = work.join("model.csv");
        Table::default().write(&path).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(Setup::table("model", &path))
    }

    /// Candidate `c` of `coll` in `wire`, forced by a one-row table written into `work`; the
    /// channel count is configured too, as the runtime caps a row's at the configured one.
    pub fn candidate(coll: Collective, c: Candidate, wire: Wire, work: &Path) -> Result<Setup, String> {
        let path = work.join(format!("{}.csv", Candidate::key(Some(&c)).replace('/', "_")));
        let rows = vec![c.row(coll, 0, u64::MAX, None, wire)];
        Table { rows, ..Table::default() }.write(&path).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(Setup { label: c.to_string(), cand: Some(c), table: path, channels: Some(c.channels) })
    }

    fn arg(&self) -> String {
        match self.channels {
            Some(c) => format!("--compare={}={}@{c}", self.label, self.table.display()),
            None => format!("--compare={}={}", self.label, self.table.display()),
        }
    }
}

/// What one `perf --compare` run measured: per (size, label) the median round (us), and
/// per label its choices by size ("ring/ll/1ch", and where each came from).
pub(super) struct Compared {
    pub times: BTreeMap<(usize, String), f64>,
    pub picks: HashMap<String, BTreeMap<usize, (String, String)>>,
}

impl Compared {
    /// `s`'s measurement of `sizes`: failed if a size has no time, or if a candidate's
    /// choice did not come from its table (its row was not applicable).
    pub fn of(&self, s: &Setup, sizes: &[usize]) -> Measurement {
        let (mut times, mut picks) = (BTreeMap::new(), BTreeMap::new());
        let logged = self.picks.get(&s.label);
        for &size in sizes {
            let Some(&t) = self.times.get(&(size, s.label.clone())) else {
                return Measurement::Failed(format!("jitccl perf --compare printed no time for {size} B"));
            };
            let Some((pick, source)) = logged.and_then(|p| p.get(&size)) else {
                return Measurement::Failed(format!("jitccl perf --compare logged no choice for {size} B"));
            };
            if s.cand.is_some() && source != "tuning table" {
                return Measurement::Failed(format!("at {size} B the runtime chose from the {source}, not the table"));
            }
            times.insert(size, t);
            picks.insert(size, pick.clone());
        }
        Measurement::Done { times, picks }
    }
}

/// Runs `jitccl perf` with `args` (one band of sizes of `coll` in `wire`) and every setup,
/// `rounds` turns each.
pub(super) fn compare(
    exe: &Path, coll: Collective, wire: Wire, args: &[String], setups: &[Setup], rounds: usize,
) -> Result<Compared, String> {
    let mut cmd = Command::new(exe);
    cmd.args(args).arg(format!("--reps={rounds}")).args(setups.iter().map(Setup::arg));
    // Launcher variables would make perf act as one rank; overrides would veto the rows
    // (under either name).
    let overrides = [ALGO, PROTO, NCHANNELS].into_iter().flat_map(|s| s.names());
    for var in jitccl::launcher_vars().chain(overrides) {
        cmd.env_remove(var);
    }
    // Each setup's choices are logged under its label (the child communicator's name).
    cmd.env("JITCCL_DEBUG", "DEBUG");
    // The ranks share this host's memory, where a wire otherwise runs exactly: its
    // kernels are what is tuned.
    if wire != Wire::Exact {
        cmd.env(WIRE_LOCAL.name, "encode");
    }
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("running {}: {e}", exe.display()))?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        let last = stderr.lines().chain(stdout.lines()).rfind(|l| !l.contains("DEBUG")).unwrap_or("");
        return Err(format!("jitccl perf --compare exited with {}: {last}", out.status));
    }
    let picks = setups
        .iter()
        .map(|s| {
            let tag = format!("Comm '{}': ", s.label);
            let lines: String = stderr.lines().filter(|l| l.contains(&tag)).map(|l| format!("{l}\n")).collect();
            (s.label.clone(), parse_picks(&lines, coll, wire))
        })
        .collect();
    Ok(Compared { times: parse_compare(&stdout), picks })
}

/// `perf --compare`'s rows: (size, label) -> median time (us).
fn parse_compare(stdout: &str) -> BTreeMap<(usize, String), f64> {
    stdout
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(((f.first()?.parse().ok()?, f.get(1)?.to_string()), f.get(2)?.parse().ok()?))
        })
        .collect()
}

/// Per size, the first choice logged for `coll` in `wire` ("ring/ll/1ch") and its source,
/// from lines such as "all_reduce 8 B x 2 ranks: ring/ll, 1 channel(s), 2 elements/step,
/// from the cost model (...)" ("... x 2 ranks in the int8b64 wire: ..." for a wired call).
fn parse_picks(stderr: &str, coll: Collective, wire: Wire) -> BTreeMap<usize, (String, String)> {
    let mut picks = BTreeMap::new();
    let name = format!("{coll} ");
    let ranks = match wire {
        Wire::Exact => "ranks: ".to_string(),
        w => format!("ranks in the {w} wire: "),
    };
    for line in stderr.lines() {
        let Some((head, tail)) = line.split_once(" B x ") else { continue };
        let Some((_, bytes)) = head.rsplit_once(&name) else { continue };
        let Ok(bytes) = bytes.trim().parse::<usize>() else { continue };
        let Some((_, what)) = tail.split_once(&ranks) else { continue };
        let Some((what, source)) = what.split_once(", from the ") else { continue };
        let source = source.split(" (").next().unwrap_or(source).to_string();
        let mut f = what.split(", ");
        let algo_proto = f.next().unwrap_or("?");
        let channels = f.next().and_then(|c| c.split(' ').next()).unwrap_or("?");
        picks.entry(bytes).or_insert((format!("{algo_proto}/{channels}ch"), source));
    }
    picks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_output_and_choice_logs_parse() {
        let out = "#       size  setup ...\n           8   ring/ll/1ch      17.20     9.09    18.00     0.00    +3.0%      0\n";
        assert_eq!(parse_compare(out).get(&(8, "ring/ll/1ch".to_string())), Some(&17.20));
        let err = "[0] 2026 DEBUG x: all_reduce 8 B x 2 ranks: tree/ll, 2 channel(s), 2 elements/step, from the tuning table (row 0..=9 B)\n";
        let p = parse_picks(err, Collective::AllReduce, Wire::Exact);
        assert_eq!(p.get(&8), Some(&("tree/ll/2ch".to_string(), "tuning table".to_string())));
        // A wired call's line, which an exact run's parse passes over.
        let wired = "[0] DEBUG x: all_reduce 8 B x 2 ranks in the int8b64 wire: ring/simple, 1 channel(s), 1024 elements/step, from the tuning table (row 0..=9 B)\n";
        let w = parse_picks(wired, Collective::AllReduce, Wire::Int8 { block: 64 });
        assert_eq!(w.get(&8), Some(&("ring/simple/1ch".to_string(), "tuning table".to_string())));
        assert!(parse_picks(wired, Collective::AllReduce, Wire::Exact).is_empty());
        let c = Candidate::from_pick("tree/ll/2ch").unwrap();
        assert_eq!((c.algo, c.proto, c.channels, c.chunk), (Algorithm::Tree, Protocol::LL, 2, None));
    }

    #[test]
    fn measurements_survive_the_partial_file() {
        let m = Measurement::Done { times: [(8, 1.5)].into(), picks: [(8, "ring/ll/1ch".to_string())].into() };
        let line = m.encode();
        let (kind, rest) = line.split_once('\t').unwrap();
        assert_eq!(Measurement::decode(kind, rest), Some(m));
        assert_eq!(Measurement::decode("ok", "8=x=y"), None, "a damaged line is measured again");
    }
}
