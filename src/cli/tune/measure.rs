//! One measurement of `jitccl tune` (a `jitccl perf` run, its output parsed) and the
//! partial file that keeps finished measurements across interrupted runs.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use jitccl::{Algorithm, Collective, Protocol, Row, Table};

use super::{append, Plan};

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
    pub fn row(&self, coll: Collective, min_bytes: u64, max_bytes: u64, nranks: Option<usize>) -> Row {
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
            reg_buff: None,
            chunk_bytes: self.chunk,
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

    pub fn get(&self, coll: Collective, c: Option<&Candidate>) -> Option<&Measurement> {
        self.done.get(&(coll.to_string(), Candidate::key(c)))
    }

    pub fn record(&mut self, coll: Collective, c: Option<&Candidate>, m: &Measurement) -> Result<(), String> {
        append(&self.path, &format!("{coll}\t{}\t{}", Candidate::key(c), m.encode()))?;
        self.done.insert((coll.to_string(), Candidate::key(c)), m.clone());
        Ok(())
    }
}

/// Runs `jitccl perf` for `coll` with `cand`'s one-row table (the model's run: an empty
/// table), and reads the times from its table and the choices from its DEBUG log.
pub(super) fn run(exe: &Path, plan: &Plan, coll: Collective, cand: Option<&Candidate>, work: &Path) -> Measurement {
    let table_path = work.join("candidate.csv");
    let rows = cand.map(|c| vec![c.row(coll, 0, u64::MAX, None)]).unwrap_or_default();
    let written = Table { rows, ..Table::default() }
        .write(&table_path)
        .map_err(|e| format!("writing {}: {e}", table_path.display()));
    // The runtime caps a row's channels at the configured count.
    let channels = cand.map(|c| c.channels);
    match written.and_then(|()| with_table(exe, plan, coll, &table_path, channels, cand.is_some())) {
        Ok(m) => m,
        Err(why) => Measurement::Failed(why),
    }
}

/// Runs `jitccl perf` for `coll` with the tuning table at `table` (and `channels` configured,
/// if given); with `from_table`, every size's choice must have come from the table.
fn with_table(
    exe: &Path, plan: &Plan, coll: Collective, table: &Path, channels: Option<usize>, from_table: bool,
) -> Result<Measurement, String> {
    let (mut times, mut picks) = (BTreeMap::new(), BTreeMap::new());
    for args in plan.perf_runs(coll) {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        // Launcher variables would make perf act as one rank; overrides would veto the row.
        for var in jitccl::launcher_vars().chain(["JITCCL_ALGO", "JITCCL_PROTO"]) {
            cmd.env_remove(var);
        }
        cmd.env("JITCCL_TUNER_CONFIG_FILE", table).env("JITCCL_DEBUG", "DEBUG");
        if let Some(c) = channels {
            cmd.env("JITCCL_NCHANNELS", c.to_string());
        }
        let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("running {}: {e}", exe.display()))?;
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            let last = stderr.lines().chain(stdout.lines()).rfind(|l| !l.contains("DEBUG")).unwrap_or("");
            return Err(format!("jitccl perf exited with {}: {last}", out.status));
        }
        times.extend(parse_times(&stdout));
        picks.extend(parse_picks(&stderr, coll));
    }
    for &size in &plan.sizes {
        if !times.contains_key(&size) {
            return Err(format!("jitccl perf printed no time for {size} B"));
        }
        match picks.get(&size) {
            Some((_, source)) if from_table && source != "tuning table" => {
                return Err(format!("at {size} B the runtime chose from the {source}, not the table"));
            }
            None => return Err(format!("jitccl perf logged no choice for {size} B")),
            _ => {}
        }
    }
    Ok(Measurement::Done { times, picks: picks.into_iter().map(|(s, (p, _))| (s, p)).collect() })
}

/// Per size, the smaller of the out-of-place and in-place times of perf's table (the two
/// run the same choice; the smaller is the less disturbed by other load).
fn parse_times(stdout: &str) -> BTreeMap<usize, f64> {
    let mut times = BTreeMap::new();
    for line in stdout.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(size) = f.first().and_then(|s| s.parse::<usize>().ok()) else { continue };
        let t =
            [5, 9].iter().filter_map(|&i| f.get(i).and_then(|t| t.parse::<f64>().ok())).fold(f64::INFINITY, f64::min);
        if t.is_finite() {
            times.insert(size, t);
        }
    }
    times
}

/// Per size, the first choice logged for `coll` ("ring/ll/1ch") and its source, from lines
/// such as "all_reduce 8 B x 2 ranks: ring/ll, 1 channel(s), 2 elements/step, from the
/// cost model (...)".
pub(super) fn parse_picks(stderr: &str, coll: Collective) -> BTreeMap<usize, (String, String)> {
    let mut picks = BTreeMap::new();
    let name = format!("{coll} ");
    for line in stderr.lines() {
        let Some((head, tail)) = line.split_once(" B x ") else { continue };
        let Some((_, bytes)) = head.rsplit_once(&name) else { continue };
        let Ok(bytes) = bytes.trim().parse::<usize>() else { continue };
        let Some((_, what)) = tail.split_once("ranks: ") else { continue };
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
        let out = "# size ...\n           8            2     float     sum     -1    17.20    0.00    0.00      0     9.09    0.00    0.00      0\n";
        assert_eq!(parse_times(out).get(&8), Some(&9.09));
        let err = "[0] 2026 DEBUG x: all_reduce 8 B x 2 ranks: tree/ll, 2 channel(s), 2 elements/step, from the tuning table (row 0..=9 B)\n";
        let p = parse_picks(err, Collective::AllReduce);
        assert_eq!(p.get(&8), Some(&("tree/ll/2ch".to_string(), "tuning table".to_string())));
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
