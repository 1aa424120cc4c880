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
//!
//! With `--target cuda` the ranks are threads of one perf process on the GPUs `--devices`
//! names (processes sharing a GPU would take turns on it), the candidates leave out the
//! direct algorithms (host-only) and try powers of two of channels, and the table is
//! written for the GPU cost model's fingerprint, which GPU communicators load.

mod measure;
mod report;
mod verify;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jitccl::{Collective, Config, Device, Machine, Protocol, Table, Topology};

use super::at_least;
use super::perf::Target;
use super::ranks::parse_nranks;
use super::size::{parse_size, sweep_sizes, Step};
use measure::{Candidate, Measurement, Partial, Setup};
use report::report;

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
    /// or on the host cores / ranks up to 4, 2 with --quick; on GPUs 16, by powers of two).
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
    /// Where the ranks run (cuda: all of them threads of one process, as `perf -g N`).
    #[arg(long, value_enum, default_value_t = Target::Host)]
    target: Target,
    /// With --target cuda: rank i's GPU is the i-th entry (default: rank i on GPU i; e.g.
    /// 0,0 for two ranks on GPU 0).
    #[arg(long, value_delimiter = ',')]
    devices: Vec<usize>,
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
    /// The machine whose cost model the table is written for.
    machine: Machine,
    /// perf's arguments that put the ranks on it.
    target_args: Vec<String>,
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
                let mut args = [
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
                args.extend(self.target_args.iter().cloned());
                Band { start: b, sizes, args }
            })
            .collect()
    }

    /// What the partial file must have been made with to be resumed.
    fn signature(&self) -> String {
        // Host runs keep the signature of before, so their partial files still resume.
        let target: String = self.target_args.iter().map(|a| format!("{a} ")).collect();
        format!(
            "{target}nranks={} sizes={}..{}x{} warmup={} iters={} reps={} side by side",
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
        let gpus = self.target == Target::Cuda;
        if !self.devices.is_empty() && (!gpus || self.devices.len() != self.nranks) {
            return Err(format!(
                "--devices lists {} GPU(s): it needs --target cuda and one GPU per rank (-N {})",
                self.devices.len(),
                self.nranks
            ));
        }
        let (machine, device) = match self.target {
            Target::Host => (Machine::Host { cores: machine_cores() }, Device::host(0)),
            Target::Cuda => (Machine::Gpus, Device::Cuda { ordinal: 0 }),
        };
        let configured = Config::default().nchannels_on(self.nranks, &device).map_err(|e| e.to_string())?;
        let max_ch = self.max_channels.unwrap_or(if q && !gpus { 2 } else { configured });
        // A GPU's channels add up nearly linearly, so every count would mostly measure the
        // same line: powers of two, and the most.
        let channel_counts: Vec<usize> =
            (1..=max_ch).filter(|&c| !gpus || c.is_power_of_two() || c == max_ch).collect();
        let mut target_args = Vec::new();
        if gpus {
            target_args = vec!["--target=cuda".to_string(), format!("-g{}", self.nranks)];
            if !self.devices.is_empty() {
                let list: Vec<String> = self.devices.iter().map(usize::to_string).collect();
                target_args.push(format!("--devices={}", list.join(",")));
            }
        }
        let mut chunks = vec![None];
        chunks.extend(self.chunks.iter().map(|&c| Some(c)));
        // Valid (algorithm, protocol) pairs differ per collective; `candidates` holds the union
        // and each collective takes those its table rows may name.
        let mut candidates = Vec::new();
        // The direct algorithms run on perf's plain buffers where every rank maps every
        // rank's host arena (else their runs fail and are left out); they have no FIFO
        // steps to size and only the Simple protocol.
        for &algo in Collective::AllReduce.algorithms().iter().filter(|a| !gpus || !a.is_direct()) {
            for &proto in Protocol::ALL.iter().filter(|&&p| !algo.is_direct() || p == Protocol::Simple) {
                for &channels in &channel_counts {
                    for &chunk in chunks.iter().filter(|c| !algo.is_direct() || c.is_none()) {
                        candidates.push(Candidate { algo, proto, channels, chunk });
                    }
                }
            }
        }
        Ok(Plan {
            colls,
            nranks: self.nranks,
            machine,
            target_args,
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
        if self.target == Target::Cuda {
            // Before any run: each would fail alike, and a table of failures is no table.
            for r in 0..plan.nranks {
                let gpu = self.devices.get(r).copied().unwrap_or(r);
                jitccl::Device::cuda(gpu).map_err(|e| format!("--target cuda: rank {r} on GPU {gpu}: {e}"))?;
            }
        }
        let (topo, _) =
            plan.machine.one_node(plan.nranks, plan.candidates.iter().map(|c| c.channels).max().unwrap_or(1));
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
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: TuneArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("tune").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        cli.args.plan()
    }

    fn channels(p: &Plan) -> Vec<usize> {
        let mut ch: Vec<usize> = p.candidates.iter().map(|c| c.channels).collect();
        ch.sort_unstable();
        ch.dedup();
        ch
    }

    #[test]
    fn gpu_plans_put_the_ranks_on_the_gpus_and_try_powers_of_two_of_channels() {
        let p = plan(&["--target", "cuda", "-N", "4", "--devices", "0,0,1,1", "--max-channels", "16"]).unwrap();
        assert_eq!(p.machine, Machine::Gpus);
        assert!(p.candidates.iter().all(|c| !c.algo.is_direct()), "direct algorithms are host-only");
        assert_eq!(channels(&p), [1, 2, 4, 8, 16]);
        for band in p.bands(Collective::AllReduce, 1) {
            assert!(
                band.args.ends_with(&["--target=cuda".into(), "-g4".into(), "--devices=0,0,1,1".into()]),
                "{:?}",
                band.args
            );
        }
        let p = plan(&["--target", "cuda", "--max-channels", "12"]).unwrap();
        assert_eq!(channels(&p), [1, 2, 4, 8, 12], "the most is tried too");
        assert_ne!(
            p.signature(),
            plan(&["--max-channels", "12"]).unwrap().signature(),
            "a host partial file is not resumed"
        );

        let host = plan(&["--max-channels", "3"]).unwrap();
        assert!(matches!(host.machine, Machine::Host { .. }));
        assert_eq!(channels(&host), [1, 2, 3]);
        assert!(host.candidates.iter().any(|c| c.algo.is_direct()));
        assert!(host.bands(Collective::AllReduce, 1).iter().all(|b| !b.args.iter().any(|a| a.contains("target"))));
    }
}
