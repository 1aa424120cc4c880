//! `jitccl perf`'s command line. Where nccl-tests has a flag, perf takes it with the same
//! letter, long name and meaning (`-n` iterations, `-w` warm-up, `-t` threads, `-g` GPUs,
//! `-m` aggregation, `-z` blocking, `-G` graph launches, `-a` averaging, `-b -e -f -i -d -o
//! -r -c`), so an nccl-tests command line means the same here. Ranks are `-N` (nccl-tests
//! takes them from MPI); `--target`, `--devices`, `--algo`, `--proto`, `--channels`,
//! `--threads` and `--wire` are jitccl's own. Every number is range-checked at parse time, and the
//! combinations in [`PerfArgs::validate`], with an error naming the flag.

use jitccl::codegen::BuiltinOp;
use jitccl::{Algorithm, DataType, Protocol, Wire};

use super::super::at_least;
use super::super::ranks::{max_local_ranks, parse_nranks};
use super::super::size::{parse_size, sweep_sizes, Step};
use super::coll::PerfColl;

/// Which device kind the ranks run on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// This machine's CPUs and memory.
    Host,
    /// CUDA GPUs.
    Cuda,
}

/// How the per-rank times become the reported one (nccl-tests' `-a`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Average {
    Rank0,
    Mean,
    Min,
    Max,
}

#[derive(clap::Args)]
pub struct PerfArgs {
    /// all_reduce, broadcast, reduce, all_gather, reduce_scatter, sendrecv, all_to_all,
    /// all_to_allv, gather or scatter.
    pub coll: PerfColl,
    /// Total number of ranks (at most max(1024, 4 x CPUs)): -N / (-t x -g) processes.
    #[arg(short = 'N', long, default_value_t = 2, value_parser = parse_nranks)]
    pub nranks: usize,
    /// Threads per process (nccl-tests' -t), each driving -g ranks.
    #[arg(short = 't', long = "nthreads", default_value_t = 1, value_parser = per_process)]
    pub nthreads: usize,
    /// Ranks ("GPUs") per thread (nccl-tests' -g): one thread launches on all of them.
    #[arg(short = 'g', long = "ngpus", default_value_t = 1, value_parser = per_process)]
    pub ngpus: usize,
    /// All ranks in this one process, driven by one thread (the same as -g N).
    #[arg(long, conflicts_with_all = ["nthreads", "ngpus"])]
    pub threads: bool,
    /// Smallest size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Largest size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Multiply the size by this factor (at least 2) each step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = at_least::<2>)]
    pub factor: usize,
    /// Add this many bytes (K/M/G suffixes, at least 1) each step instead of multiplying.
    #[arg(short = 'i', long = "stepbytes", value_parser = step_bytes, conflicts_with = "factor")]
    pub step_bytes: Option<usize>,
    /// Datatype (nccl-tests names: int8 uint8 int32 uint32 int64 uint64 half float double
    /// bfloat16 f8e4m3 f8e5m2).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: DataType,
    /// Reduction op: sum prod min max avg premulsum.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: BuiltinOp,
    /// Root rank of broadcast, reduce, gather and scatter.
    #[arg(short = 'r', long, default_value_t = 0)]
    pub root: usize,
    /// Timed iterations (at least 1).
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = at_least::<1>)]
    pub iters: usize,
    /// Untimed iterations before timing.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Operations launched per iteration before it synchronizes (at least 1).
    #[arg(short = 'm', long = "agg_iters", default_value_t = 1, value_parser = at_least::<1>)]
    pub agg: usize,
    /// 1: synchronize after every operation; 0: once, after the last.
    #[arg(short = 'z', long = "blocking", default_value = "0", value_parser = zero_or_one, action = clap::ArgAction::Set)]
    pub blocking: bool,
    /// Graph launches (nccl-tests' CUDA graph replay, --target cuda): the -n iterations are
    /// captured once into a CUDA graph per rank, which is replayed this many times.
    #[arg(short = 'G', long = "cudagraph", default_value_t = 0)]
    pub cudagraph: u64,
    /// How per-rank times combine: 0 rank 0's, 1 the mean, 2 the minimum, 3 the maximum.
    #[arg(short = 'a', long = "average", default_value = "1", value_parser = average)]
    pub average: Average,
    /// Check results against the reference this many times per size (0: no check).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: usize,
    /// Where the ranks run.
    #[arg(long, value_enum, default_value_t = Target::Host)]
    pub target: Target,
    /// With --target cuda: rank i's GPU is the i-th entry (e.g. 0,0,0,0: four ranks on GPU 0).
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<usize>,
    /// Buffer registration (nccl-tests' -R): 0 none, 1 register the buffers perf allocates
    /// (ranks of one process), 2 allocate them as symmetric memory. Registered buffers may
    /// run the direct algorithms.
    #[arg(short = 'R', long = "local_register", default_value = "0", value_parser = register)]
    pub register: Register,
    /// Force the algorithm (ring, tree, oneshot, direct, direct_oneshot, recursive_doubling).
    #[arg(long)]
    pub algo: Option<Algorithm>,
    /// Force the protocol (simple, ll, ll128).
    #[arg(long)]
    pub proto: Option<Protocol>,
    /// The wire format the collective carries its elements in (a name as JITCCL_WIRE takes:
    /// exact, bf16, fp16, fp8e4m3[bN], fp8e5m2[bN], int8[bN]); results are checked within
    /// the wire's error bound and for the same bits on every rank; busbw counts the
    /// datatype's bytes. Perf runs this wire whatever JITCCL_WIRE says.
    #[arg(long, default_value = "exact", value_parser = wire)]
    pub wire: Wire,
    /// Channels per rank.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=jitccl::MAX_CHANNELS as u64))]
    pub channels: Option<usize>,
    /// Time setups side by side in one run instead of the sweep (give it at least twice):
    /// LABEL=TABLE, or LABEL=TABLE@CHANNELS. A setup is a tuning table (NCCL's tuner CSV;
    /// one with no rows leaves every choice to the cost model) and optionally a channel
    /// count; each runs on a communicator split from the ranks' own, with plain buffers,
    /// out of place.
    #[arg(long = "compare", value_name = "LABEL=TABLE[@CHANNELS]", value_parser = parse_setup)]
    pub compare: Vec<Setup>,
    /// With --compare: rounds per size, each setup timed once per round (-n iterations),
    /// the order rotating; the table gives the median round.
    #[arg(long, default_value_t = 5, value_parser = at_least::<1>, requires = "compare")]
    pub reps: usize,
}

/// One setup of `--compare`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    pub label: String,
    pub table: std::path::PathBuf,
    pub channels: Option<usize>,
}

/// Parses `LABEL=TABLE[@CHANNELS]`; the label is a word (it is a column of the output),
/// the channel count a number of 1 to MAX_CHANNELS.
fn parse_setup(s: &str) -> Result<Setup, String> {
    let (label, rest) = s.split_once('=').ok_or("expected LABEL=TABLE or LABEL=TABLE@CHANNELS")?;
    if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || "_-./:".contains(c)) {
        return Err(format!("label {label:?} must be a non-empty word of letters, digits and _-./:"));
    }
    let (table, channels) = match rest.rsplit_once('@') {
        Some((t, ch)) if !ch.is_empty() && ch.bytes().all(|b| b.is_ascii_digit()) => {
            let max = jitccl::MAX_CHANNELS;
            match ch.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => (t, Some(n)),
                _ => return Err(format!("channels {ch} must be 1 to {max}")),
            }
        }
        _ => (rest, None),
    };
    if table.is_empty() {
        return Err(format!("setup {label}: no table file"));
    }
    Ok(Setup { label: label.to_string(), table: table.into(), channels })
}

/// How the ranks are spread: `procs` processes of `threads` threads of `per_thread` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub nranks: usize,
    pub procs: usize,
    pub threads: usize,
    pub per_thread: usize,
}

impl Layout {
    pub fn per_process(&self) -> usize {
        self.threads * self.per_thread
    }
}

impl PerfArgs {
    /// What -G needs: CUDA graphs (the CUDA target with asynchronous launches), no wait
    /// between operations, ranks of this process.
    fn validate_graphs(&self) -> Result<(), String> {
        let g = self.cudagraph;
        if self.target != Target::Cuda {
            return Err(format!(
                "-G/--cudagraph {g}: CUDA graph replay is not supported on the host target (it has no graphs); use \
                 --target cuda, or -G 0"
            ));
        }
        if jitccl::cuda_sync_launches() {
            return Err(format!(
                "-G/--cudagraph {g}: JITCCL_CUDA_SYNC=1 waits for every launch, which a graph capture forbids; unset it"
            ));
        }
        if self.blocking {
            return Err(format!("-G/--cudagraph {g} with -z 1: a captured operation cannot be waited for; use -z 0"));
        }
        if !self.compare.is_empty() {
            return Err(format!("-G/--cudagraph {g}: not with --compare"));
        }
        Ok(())
    }

    pub fn step(&self) -> Step {
        self.step_bytes.map_or(Step::Factor(self.factor), Step::Bytes)
    }

    pub fn sizes(&self) -> Result<Vec<usize>, String> {
        sweep_sizes(self.min_bytes, self.max_bytes, self.step())
    }

    /// Checks what no single flag's parser can, before any rank starts, and says how the
    /// ranks are spread.
    pub fn validate(&self) -> Result<Layout, String> {
        self.sizes()?;
        let n = self.nranks;
        if self.root >= n {
            return Err(format!("root {} is not one of the {n} ranks", self.root));
        }
        if self.cudagraph > 0 {
            self.validate_graphs()?;
        }
        if !self.devices.is_empty() {
            if self.target != Target::Cuda {
                return Err("--devices applies to --target cuda only".into());
            }
            if self.devices.len() != n {
                return Err(format!("--devices lists {} GPU(s), one per rank (-N {n}) is needed", self.devices.len()));
            }
        }
        self.validate_wire()?;
        self.validate_compare()?;
        let (threads, per_thread) = if self.threads { (1, n) } else { (self.nthreads, self.ngpus) };
        let per_process = threads * per_thread;
        if !n.is_multiple_of(per_process) {
            return Err(format!(
                "-N {n} ranks do not fill whole processes of -t {threads} x -g {per_thread} = {per_process} ranks"
            ));
        }
        Ok(Layout { nranks: n, procs: n / per_process, threads, per_thread })
    }
}

impl PerfArgs {
    /// --compare: two setups or more, distinct labels, tables that read, and nothing that
    /// would override their choices.
    fn validate_compare(&self) -> Result<(), String> {
        let setups = &self.compare;
        if setups.is_empty() {
            return Ok(());
        }
        if setups.len() < 2 {
            return Err("--compare needs two setups or more".into());
        }
        if self.algo.is_some() || self.proto.is_some() || self.channels.is_some() {
            return Err("--compare: --algo, --proto and --channels would override every setup; give channels per setup (LABEL=TABLE@CHANNELS)".into());
        }
        if self.register != Register::None {
            return Err("--compare runs plain buffers: use -R 0".into());
        }
        if let Some((k, s)) = setups.iter().enumerate().find(|(k, s)| setups[..*k].iter().any(|o| o.label == s.label)) {
            return Err(format!(
                "--compare: label {} is given twice (setups {} and {})",
                s.label,
                setups.iter().position(|o| o.label == s.label).unwrap_or(0) + 1,
                k + 1
            ));
        }
        for s in setups {
            jitccl::tune::Table::read(&s.table).map_err(|e| format!("--compare {}: {e}", s.label))?;
        }
        Ok(())
    }
}

impl PerfArgs {
    /// --wire: a float datatype wider than the wire's codes, a collective whose kernels
    /// carry wires, a sum or avg. With --compare each setup's table steers the wired calls
    /// through its rows of that wire (`# wire` rows).
    fn validate_wire(&self) -> Result<(), String> {
        let w = self.wire;
        if w == Wire::Exact {
            return Ok(());
        }
        let no = |why: String| Err(format!("--wire {w}: {why}"));
        if !self.coll.has_wire_path() {
            return no(format!(
                "{} has no wire path (the wires run on all_reduce, reduce_scatter, all_gather, broadcast, reduce and \
                 sendrecv); use --wire exact",
                self.coll
            ));
        }
        if let Err(e) = w.check_dtype(self.dtype) {
            return no(format!("{e} (-d float, or -d half / bfloat16 for the 8-bit wires)"));
        }
        if self.coll.reduces() && !matches!(self.op, BuiltinOp::Sum | BuiltinOp::Avg) {
            return no(format!("the wires reduce with sum or avg only (they add in fp32), not -o {}", self.op));
        }
        Ok(())
    }
}

/// Value parser of --wire: a name as `Wire` parses it.
pub(crate) fn wire(s: &str) -> Result<Wire, String> {
    s.parse::<Wire>().map_err(|e| e.to_string())
}

/// Value parser of -t and -g: 1 to the local rank limit (so their product cannot overflow).
fn per_process(s: &str) -> Result<usize, String> {
    let max = max_local_ranks();
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        Ok(_) => Err(format!("must be 1 to {max}")),
        Err(e) => Err(e.to_string()),
    }
}

fn step_bytes(s: &str) -> Result<usize, String> {
    match parse_size(s)? {
        0 => Err("must be at least 1".into()),
        b => Ok(b),
    }
}

fn zero_or_one(s: &str) -> Result<bool, String> {
    match s.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err("must be 0 or 1".into()),
    }
}

/// How perf allocates its buffers (-R).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Register {
    None,
    Local,
    Symmetric,
}

fn register(s: &str) -> Result<Register, String> {
    match s.trim() {
        "0" => Ok(Register::None),
        "1" => Ok(Register::Local),
        "2" => Ok(Register::Symmetric),
        _ => Err("must be 0 (none), 1 (register the buffers) or 2 (symmetric memory)".into()),
    }
}

fn average(s: &str) -> Result<Average, String> {
    match s.trim() {
        "0" => Ok(Average::Rank0),
        "1" => Ok(Average::Mean),
        "2" => Ok(Average::Min),
        "3" => Ok(Average::Max),
        _ => Err("must be 0 (rank 0), 1 (mean), 2 (min) or 3 (max)".into()),
    }
}
