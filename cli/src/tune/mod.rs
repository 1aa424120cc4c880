//! `jitccl tune`: measures every candidate (algorithm × protocol × channels × chunk size)
//! of each collective over a size sweep on this machine, writes the fastest per size as a
//! tuning table, and prints per size the cost model's pick, the measured best and the gap.
//!
//! Every candidate is forced through a one-row tuning table rather than `--algo/--proto`
//! (a row also fixes the chunk size, and the DEBUG log then confirms that the choice came
//! from it); the model's own pick runs with an empty table. All of them are timed side by
//! side, taking turns, by one `jitccl perf --compare` run (this program again) per band of
//! sizes: in the same rank processes, since separate runs of one choice differ widely on
//! a small VM and would pick winners by where the processes landed. Every finished
//! band is appended to `<output>.partial`, so an interrupted run resumes.
//!
//! With `--wire W` the calls carry their elements in wire format W (`perf --wire`: busbw
//! on the datatype's bytes, every result checked within the wire's error bound), the
//! candidates are the algorithms whose kernels carry it with the Simple protocol, and the
//! rows are written as that wire's (`# wire W:` lines, which only calls in W consult); the
//! table's rows of other wires are kept. Its runs set `JITCCL_WIRE_LOCAL=encode`: their ranks
//! share one host, where the wire's kernels run only so; the rows then serve the calls that
//! encode.
//!
//! With `--target cuda` the ranks are threads of one perf process on the GPUs `--devices`
//! names (processes sharing a GPU would take turns on it), the candidates leave out the
//! direct algorithms (host-only) and try powers of two of channels, and the table is
//! written for the GPU cost model's fingerprint, which GPU communicators load.

mod measure;
mod plan;
mod prune;
mod report;
mod verify;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jitccl::tune::{Constants, Table, Topology};
use jitccl::{Collective, Wire};

use super::at_least;
use super::perf::Target;
use super::ranks::parse_nranks;
use super::size::parse_size;
use measure::{Measurement, Partial, Setup};
use plan::{Band, Plan};
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
    /// or on the host cores / ranks up to 4, 2 with --quick; on GPUs 32, or a shared GPU's SMs
    /// over its ranks where fewer; by powers of two).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=jitccl::MAX_CHANNELS as u64))]
    max_channels: Option<usize>,
    /// Chunk sizes (bytes per FIFO step, K/M suffixes) to try besides the model's, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    chunks: Vec<usize>,
    /// The table to write (default: this topology's cache file, which communicators load).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// A short run: all_reduce only, 8 B to 1 MiB by 16, 1 or 2 channels, few iterations.
    #[arg(long)]
    quick: bool,
    /// Measure every candidate at every size (default: per band of sizes, skip those the
    /// cost model puts over 4x behind its best estimate, and over 1 ms a call, at each of the
    /// band's sizes).
    #[arg(long)]
    all: bool,
    /// Turns each candidate takes per size, the order rotating (default 3; 2 with --quick);
    /// -n iterations are spread over them, and the median turn counts.
    #[arg(long, value_parser = at_least::<1>)]
    reps: Option<usize>,
    /// After writing the table, time the default choice (the table), the model alone and the
    /// two best candidates per size side by side, this many turns each, and print each
    /// one's gap.
    #[arg(long, value_name = "REPS", value_parser = at_least::<1>)]
    verify: Option<usize>,
    /// The wire format the tuned calls carry their elements in (a name as JITCCL_WIRE
    /// takes); its rows go into the table beside those of other wires.
    #[arg(long, default_value = "exact", value_parser = crate::perf::wire)]
    wire: Wire,
    /// Where the ranks run (cuda: all of them threads of one process, as `perf -g N`).
    #[arg(long, value_enum, default_value_t = Target::Host)]
    target: Target,
    /// With --target cuda: rank i's GPU is the i-th entry (default: rank i on GPU i; e.g.
    /// 0,0 for two ranks on GPU 0).
    #[arg(long, value_delimiter = ',')]
    devices: Vec<usize>,
}

impl TuneArgs {
    pub fn run(self) -> Result<ExitCode, String> {
        let plan = self.plan()?;
        if self.target == Target::Cuda {
            // Before any run: each would fail alike, and a table of failures is no table.
            for r in 0..plan.nranks {
                let gpu = self.devices.get(r).copied().unwrap_or(r);
                jitccl::Device::cuda(gpu).map_err(|e| format!("--target cuda: rank {r} on GPU {gpu}: {e}"))?;
            }
        }
        let (topo, k) =
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
        let res = self.tune(&plan, (&topo, &k), &output, &mut partial, &work).and_then(|table| {
            let table = with_other_wires(table, &output, plan.wire);
            table.write(&output).map_err(|e| format!("writing {}: {e}", output.display()))?;
            let _ = std::fs::remove_file(&partial_path);
            println!("# wrote {} row(s) to {}", table.rows.len(), output.display());
            let Some(reps) = self.verify else { return Ok(()) };
            let exe = crate::ranks::this_program()?;
            plan.colls.iter().try_for_each(|&coll| verify::verify(&exe, &plan, coll, &output, &partial, reps, &work))
        });
        let _ = std::fs::remove_dir_all(&work);
        res.map(|()| ExitCode::SUCCESS)
    }

    fn tune(
        &self, plan: &Plan, (topo, k): (&Topology, &Constants), output: &Path, partial: &mut Partial, work: &Path,
    ) -> Result<Table, String> {
        let exe = crate::ranks::this_program()?;
        // Per collective, its bands, each with its setups: the model's, then the candidates
        // of its algorithms worth measuring there.
        let mut runs = Vec::new();
        let mut skipped = Vec::new();
        let model = Setup::model(work)?;
        for &coll in &plan.colls {
            let cands = plan.candidates_of(coll);
            let cand_setups: Vec<Setup> =
                cands.iter().map(|&c| Setup::candidate(coll, c, plan.wire, work)).collect::<Result<_, _>>()?;
            let bands: Vec<(Band, Vec<Setup>)> = plan
                .bands(coll, plan.reps)
                .into_iter()
                .map(|band| {
                    let keep = match self.all {
                        true => vec![true; cands.len()],
                        false => prune::worth_measuring(topo, k, coll, &cands, &band.sizes),
                    };
                    let n = keep.iter().filter(|&&measure| !measure).count();
                    if n > 0 {
                        let last = band.sizes[band.sizes.len() - 1];
                        skipped.push(format!("{coll} {}..{last} B: {n} of {}", band.start, cands.len()));
                    }
                    let kept = cand_setups.iter().zip(keep).filter(|(_, measure)| *measure).map(|(s, _)| s.clone());
                    (band, std::iter::once(model.clone()).chain(kept).collect())
                })
                .collect();
            runs.push((coll, cands.len(), bands));
        }
        let done = |partial: &Partial, coll, setups: &[Setup], b: &Band| {
            setups.iter().all(|s| partial.has(coll, s.cand.as_ref(), b.start))
        };
        let todo: usize =
            runs.iter().map(|(coll, _, bands)| bands.iter().filter(|(b, s)| !done(partial, *coll, s, b)).count()).sum();
        println!(
            "# jitccl tune: {} collective(s) x {} candidate(s) and the model, side by side in {} turn(s) each, {} run(s) of jitccl perf --compare ({todo} to do), {} rank(s), sizes {}..{} B by {}, table: {}",
            plan.colls.len(),
            runs.iter().map(|(_, n, _)| *n).max().unwrap_or(0),
            plan.reps,
            runs.iter().map(|(_, _, b)| b.len()).sum::<usize>(),
            plan.nranks,
            plan.sizes[0],
            plan.sizes[plan.sizes.len() - 1],
            plan.factor,
            output.display()
        );
        if plan.wire != Wire::Exact {
            println!(
                "# the {} wire: busbw counts the uncompressed bytes; every candidate's results are checked within the \
                 wire's error bound and for the same bits on every rank (#wrong), and one that fails is left out",
                plan.wire
            );
        }
        if !skipped.is_empty() {
            println!(
                "# skipped (the model puts them over {}x behind its best and over {} us; --all measures them): {}",
                prune::SLOWER,
                prune::LONG_US,
                skipped.join(", ")
            );
        }
        let bar = ProgressBar::with_draw_target(Some(todo as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} runs, ETA {eta} {msg}") {
            bar.set_style(style);
        }
        for (coll, _, bands) in &runs {
            for (band, setups) in bands {
                if done(partial, *coll, setups, band) {
                    continue;
                }
                let last = band.sizes[band.sizes.len() - 1];
                bar.set_message(format!("{coll} {}..{last} B, {} setups", band.start, setups.len()));
                let measured = measure::compare(&exe, *coll, plan.wire, &band.args, setups, plan.reps);
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

/// `table` (rows of `wire`) with the rows of other wires that `output` holds, where it
/// holds a table for the same topology and ranks: tuning one wire keeps the others' rows.
fn with_other_wires(mut table: Table, output: &Path, wire: Wire) -> Table {
    let Ok(old) = Table::read(output) else { return table };
    if (old.fingerprint, old.nranks, old.nnodes) != (table.fingerprint, table.nranks, table.nnodes) {
        return table;
    }
    table.rows.extend(old.rows.into_iter().filter(|r| r.wire != wire));
    table
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
    use jitccl::tune::Row;
    use jitccl::{Algorithm, Protocol};

    use super::*;

    fn row(wire: Wire, algo: Algorithm) -> Row {
        Row::every_size(Collective::AllReduce, algo, Protocol::Simple, wire)
    }

    #[test]
    fn tuning_one_wire_keeps_the_rows_of_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let table = |rows| Table { fingerprint: Some(7), nranks: Some(2), nnodes: Some(1), rows };
        let int8 = Wire::Int8 { block: 64 };
        let old = [row(Wire::Exact, Algorithm::Tree), row(int8, Algorithm::Tree), row(Wire::Bf16, Algorithm::Tree)];
        table(old.to_vec()).write(&path).unwrap();
        let new = with_other_wires(table(vec![row(int8, Algorithm::Ring)]), &path, int8);
        let wires: Vec<(Wire, Algorithm)> = new.rows.iter().map(|r| (r.wire, r.algo)).collect();
        assert_eq!(wires, [(int8, Algorithm::Ring), (Wire::Exact, Algorithm::Tree), (Wire::Bf16, Algorithm::Tree)]);
        // A table of another topology is replaced whole.
        let other = Table { fingerprint: Some(8), ..table(vec![row(int8, Algorithm::Ring)]) };
        assert_eq!(with_other_wires(other.clone(), &path, int8), other);
    }
}
