//! `jitccl tune --verify R`: the check that the written table pays off. With the new table
//! in place, perf's default choice ("auto") is timed beside the best fixed candidates of
//! the tuning pass (the two fastest per size) and the cost model alone (an empty table),
//! all in one `perf --compare` run per size band: every setup runs in the same rank
//! processes, taking turns R times per size, so that neither where the processes landed
//! nor a burst of foreign load favours one. Per size the medians give auto's and the
//! model's gap to the best fixed candidate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jitccl::{Collective, Table};

use super::measure::{self, Candidate, Measurement, Partial};
use super::Plan;

/// One setup the verification times: a `perf --compare` label, table and channel count.
struct Setup {
    label: String,
    table: PathBuf,
    channels: Option<usize>,
}

impl Setup {
    fn arg(&self) -> String {
        match self.channels {
            Some(c) => format!("{}={}@{c}", self.label, self.table.display()),
            None => format!("{}={}", self.label, self.table.display()),
        }
    }
}

/// The fastest `k` candidates of the tuning pass at each size, each listed once.
fn finalists(plan: &Plan, coll: Collective, partial: &Partial, k: usize) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for &size in &plan.sizes {
        let mut timed: Vec<(Candidate, f64)> = plan
            .candidates
            .iter()
            .filter_map(|c| match partial.get(coll, Some(c)) {
                Some(Measurement::Done { times, .. }) => times.get(&size).map(|&t| (*c, t)),
                _ => None,
            })
            .collect();
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        for (c, _) in timed.into_iter().take(k) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// Runs the verification of `coll` against the table at `table` and prints its report.
pub(super) fn verify(
    exe: &Path, plan: &Plan, coll: Collective, table: &Path, partial: &Partial, reps: usize, work: &Path,
) -> Result<(), String> {
    let written = |t: Table, name: &str| -> Result<PathBuf, String> {
        let path = work.join(name);
        t.write(&path).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(path)
    };
    let mut setups = vec![
        Setup { label: "auto".into(), table: table.to_path_buf(), channels: None },
        Setup { label: "model".into(), table: written(Table::default(), "empty.csv")?, channels: None },
    ];
    for (k, c) in finalists(plan, coll, partial, 2).into_iter().enumerate() {
        let rows = vec![c.row(coll, 0, u64::MAX, None)];
        let path = written(Table { rows, ..Table::default() }, &format!("finalist-{k}.csv"))?;
        // The runtime caps a row's channels at the configured count.
        setups.push(Setup { label: c.to_string(), table: path, channels: Some(c.channels) });
    }
    let runs = plan.perf_runs(coll);
    let bar = ProgressBar::with_draw_target(Some(runs.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} verification runs, ETA {eta} {msg}") {
        bar.set_style(style);
    }
    bar.set_message(format!("{coll}: {} setups x {reps} rounds", setups.len()));
    // Per (size, label), the median round; per size, auto's choice and where it came from.
    let mut times: BTreeMap<(usize, String), f64> = BTreeMap::new();
    let mut auto_picks = BTreeMap::new();
    for args in runs {
        let mut cmd = Command::new(exe);
        cmd.args(args).arg(format!("--reps={reps}"));
        for s in &setups {
            cmd.arg(format!("--compare={}", s.arg()));
        }
        // Launcher variables would make perf act as one rank; overrides would veto the rows.
        for var in jitccl::launcher_vars().chain(["JITCCL_ALGO", "JITCCL_PROTO", "JITCCL_NCHANNELS"]) {
            cmd.env_remove(var);
        }
        // Each child's choices are logged under its name: auto's are what the table made.
        cmd.env("JITCCL_DEBUG", "DEBUG");
        let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("running {}: {e}", exe.display()))?;
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            bar.finish_and_clear();
            let last = stderr.lines().chain(stdout.lines()).rfind(|l| !l.contains("DEBUG")).unwrap_or("");
            return Err(format!("verifying {coll}: jitccl perf --compare exited with {}: {last}", out.status));
        }
        times.extend(parse_compare(&stdout));
        let auto_lines: String =
            stderr.lines().filter(|l| l.contains("Comm 'auto': ")).map(|l| format!("{l}\n")).collect();
        auto_picks.extend(measure::parse_picks(&auto_lines, coll));
        bar.inc(1);
    }
    bar.finish_and_clear();

    println!(
        "#\n# {coll}, {} ranks, verification: setups side by side in the same rank processes, median of {reps} rounds (us); gap = time / best fixed - 1",
        plan.nranks
    );
    println!(
        "# {:>10}  {:<22} {:>9}  {:<24} {:>9} {:>8}  {:>9} {:>8}",
        "size (B)", "auto pick", "auto", "best fixed", "time", "auto gap", "model", "mdl gap"
    );
    let (mut worst_auto, mut worst_model) = ((f64::NEG_INFINITY, 0usize), (f64::NEG_INFINITY, 0usize));
    for &size in &plan.sizes {
        let at = |s: &Setup| times.get(&(size, s.label.clone())).copied();
        let (Some(auto), Some(model)) = (at(&setups[0]), at(&setups[1])) else {
            return Err(format!("verifying {coll}: perf --compare printed no time for {size} B"));
        };
        let Some((best, bt)) = setups[2..].iter().filter_map(|s| Some((s, at(s)?))).min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        let (ga, gm) = (auto / bt - 1.0, model / bt - 1.0);
        if ga > worst_auto.0 {
            worst_auto = (ga, size);
        }
        if gm > worst_model.0 {
            worst_model = (gm, size);
        }
        let pick = auto_picks.get(&size).map_or("?", |(p, _)| p.as_str());
        println!(
            "  {size:>10}  {pick:<22} {auto:>9.2}  {:<24} {bt:>9.2} {:>7.1}%  {model:>9.2} {:>7.1}%",
            best.label,
            100.0 * ga,
            100.0 * gm
        );
    }
    println!(
        "# worst gap to the best fixed candidate: auto {:.1}% at {} B, model alone {:.1}% at {} B",
        100.0 * worst_auto.0,
        worst_auto.1,
        100.0 * worst_model.0,
        worst_model.1
    );
    Ok(())
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
