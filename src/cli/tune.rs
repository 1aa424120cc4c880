//! `jitccl tune`: measures every candidate (algorithm × protocol × channels × chunk size)
//! of each collective over a size sweep on this machine, writes the fastest per size as a
//! tuning table, and prints per size the cost model's pick, the measured best and the gap.
//!
//! Every candidate is forced through a one-row tuning table rather than `--algo/--proto`
//! (a row also fixes the chunk size, and the DEBUG log then confirms that the choice came
//! from it); the model's own pick runs with an empty table. All of them are timed side by
//! side, taking turns, by one `jitccl perf --compare` run (this program again) per band of
//! sizes: in the same rank processes, since separate runs of one choice differ by up to
//! 2-3x on a small VM and would pick winners by where the processes landed. Every finished
//! band is appended to `<output>.partial`, so an interrupted run resumes.

mod measure;
mod verify;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jitccl::{Collective, Protocol, Row, Table, Topology};

use super::at_least;
use super::ranks::parse_nranks;
use super::size::{parse_size, sweep_sizes, Step};
use measure::{Candidate, Measurement, Partial, Setup};

#[derive(clap::Args)]
pub struct TuneArgs {
    /// Collectives to tune, comma-separated (default all_reduce; sendrecv has no table rows).
    #[arg(long, value_delimiter = ',')]
    colls: Vec<Collective>,
    /// Number of ranks (the table applies to this many).
    #[arg(short = 'N', long, default_value_t = 2, value_parser = parse_nranks)]
    nranks: usize,
    /// Smallest size in bytes (K/M/G suffixes; default 8).
    #[arg(short = 'b', long = "minbytes", value_parser = parse_size)]
    min_bytes: Option<usize>,
    /// Largest size in bytes (default 32M; 1M with --quick).
    #[arg(short = 'e', long = "maxbytes", value_parser = parse_size)]
    max_bytes: Option<usize>,
    /// Multiply the size by this factor each step (default 4; 16 with --quick).
    #[arg(short = 'f', long = "stepfactor", value_parser = at_least::<2>)]
    factor: Option<usize>,
    /// Untimed iterations per size above 4 MiB (default 5; 2 with --quick); 5x as many up to
    /// 4 MiB and 50x up to 64 KiB.
    #[arg(short = 'w', long = "warmup_iters")]
    warmup: Option<usize>,
    /// Timed iterations per size above 4 MiB (default 20; 10 with --quick); 5x as many up to
    /// 4 MiB and 50x up to 64 KiB.
    #[arg(short = 'n', long = "iters", value_parser = at_least::<1>)]
    iters: Option<usize>,
    /// Try 1 to this many channels (default: what the runtime configures, JITCCL_NCHANNELS
    /// or cores / ranks up to 4; 2 with --quick).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=jitccl::MAX_CHANNELS as u64))]
    max_channels: Option<usize>,
    /// Chunk sizes (bytes per FIFO step, K/M suffixes) to try besides the model's, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    chunks: Vec<usize>,
    /// The table to write (default: this topology's cache file, which communicators load).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// A few minutes on 2 cores: all_reduce only, 8 B to 1 MiB by 16, 1 or 2 channels, few iterations.
    #[arg(long)]
    quick: bool,
    /// Turns each candidate takes per size, the order rotating (default 3; 2 with --quick);
    /// -n iterations are spread over them, and the median turn counts.
    #[arg(long, value_parser = at_least::<1>)]
    reps: Option<usize>,
    /// After writing the table, time the default choice (the table), the model alone and the
    /// two best candidates per size side by side, this many turns each, and print each
    /// one's gap.
    #[arg(long, value_name = "REPS", value_parser = at_least::<1>)]
    verify: Option<usize>,
}

/// Sizes sharing an iteration count, measured by one `perf --compare` run.
struct Band {
    /// Its smallest size: its key in the partial file.
    start: usize,
    sizes: Vec<usize>,
    /// perf's arguments, less the setups and turns.
    args: Vec<String>,
}

/// The settings of a run, defaults filled in.
struct Plan {
    colls: Vec<Collective>,
    nranks: usize,
    sizes: Vec<usize>,
    factor: usize,
    warmup: usize,
    iters: usize,
    /// Turns per candidate and size in the tuning pass.
    reps: usize,
    candidates: Vec<Candidate>,
}

impl Plan {
    /// Timed (and warm-up) iterations at `size`: a call of a few microseconds needs many
    /// more than one that moves megabytes to rise above timer and scheduling noise. Below
    /// 4 KiB (a call of well under a microsecond at 2 ranks) a turn of 1000 iterations
    /// took 0.1 ms and medians of 7 turns still differed by 10-24% between two runs of one
    /// setup, so these get 10x more.
    fn iters_at(&self, size: usize) -> (usize, usize) {
        let scale = if size < 4 << 10 {
            500
        } else if size <= 64 << 10 {
            50
        } else if size <= 4 << 20 {
            5
        } else {
            1
        };
        (self.warmup * scale, self.iters * scale)
    }

    /// The `perf --compare` runs that measure `coll` in `reps` turns per setup: one per
    /// band of sizes sharing an iteration count, whose timed iterations the turns share.
    fn bands(&self, coll: Collective, reps: usize) -> Vec<Band> {
        let mut bands: Vec<(Vec<usize>, (usize, usize))> = Vec::new();
        for &size in &self.sizes {
            match bands.last_mut() {
                Some(b) if b.1 == self.iters_at(size) => b.0.push(size),
                _ => bands.push((vec![size], self.iters_at(size))),
            }
        }
        bands
            .into_iter()
            .map(|(sizes, (warmup, iters))| {
                let (b, e) = (sizes[0], sizes[sizes.len() - 1]);
                let args = [
                    "perf".to_string(),
                    coll.to_string(),
                    format!("-N{}", self.nranks),
                    format!("-b{b}"),
                    format!("-e{e}"),
                    format!("-f{}", self.factor),
                    format!("-w{warmup}"),
                    format!("-n{}", iters.div_ceil(reps)),
                    "-c1".to_string(),
                    // The slowest rank's time, as a collective takes (nccl-tests' default is the mean).
                    "-a3".to_string(),
                ]
                .to_vec();
                Band { start: b, sizes, args }
            })
            .collect()
    }

    /// What the partial file must have been made with to be resumed.
    fn signature(&self) -> String {
        format!(
            "nranks={} sizes={}..{}x{} warmup={} iters={} reps={} side by side",
            self.nranks,
            self.sizes[0],
            self.sizes[self.sizes.len() - 1],
            self.factor,
            self.warmup,
            self.iters,
            self.reps
        )
    }
}

/// The runtime's default channel count (config.rs): JITCCL_NCHANNELS, else cores / ranks, 1 to 4.
fn default_channels(nranks: usize) -> usize {
    let env = std::env::var("JITCCL_NCHANNELS").ok().and_then(|v| v.trim().parse::<usize>().ok());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    env.unwrap_or((cores / nranks.max(1)).clamp(1, 4)).clamp(1, jitccl::MAX_CHANNELS)
}

/// Online CPUs, as rank 0 reports them in its tuning plan (the topology fingerprint's input).
fn machine_cores() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

impl TuneArgs {
    fn plan(&self) -> Result<Plan, String> {
        let q = self.quick;
        let colls = if self.colls.is_empty() || q { vec![Collective::AllReduce] } else { self.colls.clone() };
        if colls.contains(&Collective::SendRecv) {
            return Err(
                "sendrecv cannot be tuned: point-to-point follows a fixed rule and tables have no sendrecv rows".into(),
            );
        }
        let factor = self.factor.unwrap_or(if q { 16 } else { 4 });
        let max = self.max_bytes.unwrap_or(if q { 1 << 20 } else { 32 << 20 });
        let sizes = sweep_sizes(self.min_bytes.unwrap_or(8), max, Step::Factor(factor))?;
        let max_ch = self.max_channels.unwrap_or(if q { 2 } else { default_channels(self.nranks) });
        let mut chunks = vec![None];
        chunks.extend(self.chunks.iter().map(|&c| Some(c)));
        // Valid (algorithm, protocol) pairs differ per collective; `candidates` holds the union
        // and each collective takes those its table rows may name.
        let mut candidates = Vec::new();
        // The direct algorithms run on perf's plain buffers where every rank maps every
        // rank's host arena (else their runs fail and are left out); they have no FIFO
        // steps to size and only the Simple protocol.
        for &algo in Collective::AllReduce.algorithms() {
            for &proto in Protocol::ALL.iter().filter(|&&p| !algo.is_direct() || p == Protocol::Simple) {
                for channels in 1..=max_ch {
                    for &chunk in chunks.iter().filter(|c| !algo.is_direct() || c.is_none()) {
                        candidates.push(Candidate { algo, proto, channels, chunk });
                    }
                }
            }
        }
        Ok(Plan {
            colls,
            nranks: self.nranks,
            sizes,
            factor,
            warmup: self.warmup.unwrap_or(if q { 2 } else { 5 }),
            iters: self.iters.unwrap_or(if q { 10 } else { 20 }),
            reps: self.reps.unwrap_or(if q { 2 } else { 3 }),
            candidates,
        })
    }

    pub fn run(self) -> Result<ExitCode, String> {
        let plan = self.plan()?;
        let cores = machine_cores();
        let topo = Topology::host(plan.nranks, default_channels(plan.nranks), cores);
        let output = match &self.output {
            Some(p) => p.clone(),
            None => Table::cache_path(&topo)
                .ok_or("no cache directory for the table (JITCCL_CACHE_DIR / HOME unset?); pass --output")?,
        };
        let partial_path = PathBuf::from(format!("{}.partial", output.display()));
        let mut partial = Partial::open(&partial_path, &plan.signature())?;
        if partial.kept() > 0 {
            eprintln!("jitccl tune: resuming: {} measurement(s) kept from {}", partial.kept(), partial_path.display());
        }
        let work = std::env::temp_dir().join(format!("jitccl-tune-{}", std::process::id()));
        std::fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
        let res = self.tune(&plan, &topo, &output, &mut partial, &work).and_then(|table| {
            table.write(&output).map_err(|e| format!("writing {}: {e}", output.display()))?;
            let _ = std::fs::remove_file(&partial_path);
            println!("# wrote {} row(s) to {}", table.rows.len(), output.display());
            let Some(reps) = self.verify else { return Ok(()) };
            let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
            plan.colls.iter().try_for_each(|&coll| verify::verify(&exe, &plan, coll, &output, &partial, reps, &work))
        });
        let _ = std::fs::remove_dir_all(&work);
        res.map(|()| ExitCode::SUCCESS)
    }

    fn tune(
        &self, plan: &Plan, topo: &Topology, output: &Path, partial: &mut Partial, work: &Path,
    ) -> Result<Table, String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
        // Per collective, its setups (the model's, then every candidate of its algorithms)
        // and its bands.
        let mut runs = Vec::new();
        for &coll in &plan.colls {
            let mut setups = vec![Setup::model(work)?];
            for &c in plan.candidates.iter().filter(|c| coll.algorithms().contains(&c.algo)) {
                setups.push(Setup::candidate(coll, c, work)?);
            }
            runs.push((coll, setups, plan.bands(coll, plan.reps)));
        }
        let done = |partial: &Partial, coll, setups: &[Setup], b: &Band| {
            setups.iter().all(|s| partial.has(coll, s.cand.as_ref(), b.start))
        };
        let todo: usize =
            runs.iter().map(|(coll, s, bands)| bands.iter().filter(|b| !done(partial, *coll, s, b)).count()).sum();
        println!(
            "# jitccl tune: {} collective(s) x {} candidate(s) and the model, side by side in {} turn(s) each, {} run(s) of jitccl perf --compare ({todo} to do), {} rank(s), sizes {}..{} B by {}, table: {}",
            plan.colls.len(),
            runs.iter().map(|(_, s, _)| s.len() - 1).max().unwrap_or(0),
            plan.reps,
            runs.iter().map(|(_, _, b)| b.len()).sum::<usize>(),
            plan.nranks,
            plan.sizes[0],
            plan.sizes[plan.sizes.len() - 1],
            plan.factor,
            output.display()
        );
        let bar = ProgressBar::with_draw_target(Some(todo as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} runs, ETA {eta} {msg}") {
            bar.set_style(style);
        }
        for (coll, setups, bands) in &runs {
            for band in bands {
                if done(partial, *coll, setups, band) {
                    continue;
                }
                let last = band.sizes[band.sizes.len() - 1];
                bar.set_message(format!("{coll} {}..{last} B, {} setups", band.start, setups.len()));
                let measured = measure::compare(&exe, *coll, &band.args, setups, plan.reps);
                if let Err(why) = &measured {
                    bar.suspend(|| eprintln!("jitccl tune: {coll} {}..{last} B: {why}", band.start));
                }
                for s in setups {
                    let m = match &measured {
                        Ok(r) => r.of(s, &band.sizes),
                        Err(why) => Measurement::Failed(why.clone()),
                    };
                    if let (Measurement::Failed(why), Ok(_)) = (&m, &measured) {
                        bar.suspend(|| eprintln!("jitccl tune: {coll} {}: {why}", s.label));
                    }
                    partial.record(*coll, s.cand.as_ref(), band.start, &m)?;
                }
                bar.inc(1);
            }
        }
        bar.finish_and_clear();

        let mut table =
            Table { fingerprint: Some(topo.fingerprint), nranks: Some(plan.nranks), nnodes: Some(1), rows: Vec::new() };
        for &coll in &plan.colls {
            table.rows.extend(report(plan, coll, partial)?);
        }
        Ok(table)
    }
}

/// Prints the comparison for `coll` and returns its rows: per size the fastest candidate,
/// adjacent sizes with the same winner merged, each row reaching up to the next one's size.
fn report(plan: &Plan, coll: Collective, partial: &Partial) -> Result<Vec<Row>, String> {
    let (model, picks) = match partial.get(coll, None) {
        Some(Measurement::Done { times, picks }) => (Some(times), picks),
        _ => (None, BTreeMap::new()),
    };
    println!("#\n# {coll}, {} ranks: the cost model's pick and the measured best per size (time: min of out-of-place and in-place, us)", plan.nranks);
    println!("# {:>10}  {:<22} {:>10}  {:<24} {:>10} {:>8}", "size (B)", "model pick", "time", "best", "time", "gap");
    let mut winners: Vec<(usize, Candidate)> = Vec::new();
    for &size in &plan.sizes {
        let best = plan
            .candidates
            .iter()
            .filter_map(|c| match partial.get(coll, Some(c)) {
                Some(Measurement::Done { times, .. }) => times.get(&size).map(|&t| (*c, t)),
                _ => None,
            })
            // The model's run is a candidate too (its pick with the model's chunk): timing
            // noise may have made it faster than the same candidate's own run.
            .chain(model.as_ref().and_then(|m| Some((Candidate::from_pick(picks.get(&size)?)?, *m.get(&size)?))))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let Some((cand, t)) = best else {
            return Err(format!("{coll}: no candidate ran at {size} B (see the errors above)"));
        };
        let pick = picks.get(&size).map_or("?", String::as_str);
        let model_time = model.as_ref().and_then(|m| m.get(&size)).copied();
        let (mt, gap) = match model_time {
            Some(mt) => (format!("{mt:.2}"), format!("{:.1}%", 100.0 * (mt - t) / t)),
            None => ("failed".into(), "-".into()),
        };
        let model_pick = Candidate::from_pick(pick).zip(model_time);
        let row = winner((cand, t), model_pick);
        let kept = if row == cand { String::new() } else { format!("  (row: the model's, within {KEEP_MODEL_PCT}%)") };
        println!("  {size:>10}  {pick:<22} {mt:>10}  {:<24} {t:>10.2} {gap:>8}{kept}", cand.to_string());
        winners.push((size, row));
    }
    let mut rows: Vec<Row> = Vec::new();
    for (i, &(size, c)) in winners.iter().enumerate() {
        let max = winners.get(i + 1).map_or(size as u64, |&(next, _)| next as u64 - 1);
        match rows.last_mut() {
            Some(r) if (r.algo, r.proto, r.channels, r.chunk_bytes) == (c.algo, c.proto, Some(c.channels), c.chunk) => {
                r.max_bytes = max
            }
            _ => rows.push(c.row(coll, if i == 0 { 0 } else { size as u64 }, max, Some(plan.nranks))),
        }
    }
    Ok(rows)
}

/// How much faster (percent) than the cost model's pick a measured best must be to replace
/// it in the table. Below that the difference is within what two runs of one setup differ
/// by at small sizes (up to 6% with the default turns on a 2-core VM, up to 27% with
/// --quick), and the fastest of many noisy candidates is mostly the luckiest: quick tables
/// there ran 12-23% behind the best fixed candidate at 8-128 B where the model alone ran
/// within 14%.
const KEEP_MODEL_PCT: u32 = 5;

/// The row's candidate at one size: the measured best (candidate, time), unless the model's
/// pick (candidate, its measured time) is within `KEEP_MODEL_PCT` of it.
fn winner(best: (Candidate, f64), model: Option<(Candidate, f64)>) -> Candidate {
    match model {
        Some((m, mt)) if mt <= best.1 * (1.0 + f64::from(KEEP_MODEL_PCT) / 100.0) => m,
        _ => best.0,
    }
}

/// Appends a line to a file, creating it.
fn append(path: &Path, line: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    writeln!(f, "{line}").map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitccl::Algorithm;

    #[test]
    fn the_model_keeps_sizes_where_the_best_is_not_clearly_faster() {
        let c = |algo, proto| Candidate { algo, proto, channels: 1, chunk: None };
        let (best, model) = (c(Algorithm::Ring, Protocol::LL128), c(Algorithm::OneShot, Protocol::Simple));
        assert_eq!(winner((best, 1.0), Some((model, 1.04))), model, "4% slower: noise");
        assert_eq!(winner((best, 1.0), Some((model, 1.06))), best, "6% slower: measured");
        assert_eq!(winner((best, 1.0), None), best, "the model's run failed");
        assert_eq!(winner((model, 1.0), Some((model, 1.0))), model);
    }
}
