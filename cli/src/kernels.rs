//! `jitccl kernels list | show | compile | check`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::{Subcommand, ValueEnum};
use jitccl::codegen::{render, CudaArch, Generator, KernelSpec, Provenance, Target};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum TargetKind {
    Host,
    Cuda,
}

#[derive(clap::Args)]
pub(super) struct TargetArgs {
    /// Compile target.
    #[arg(long, value_enum, default_value = "host")]
    target: TargetKind,
    /// CUDA architecture (with --target cuda) [default: CUDA device 0's, else sm_90].
    #[arg(long, value_parser = parse_arch)]
    arch: Option<CudaArch>,
    /// Produce PTX instead of CUBIN (with --target cuda).
    #[arg(long)]
    ptx: bool,
}

fn parse_arch(s: &str) -> Result<CudaArch, String> {
    s.parse().map_err(|e: jitccl::codegen::InvalidSpec| e.to_string())
}

fn parse_spec(s: &str) -> Result<KernelSpec, String> {
    s.parse().map_err(|e: jitccl::codegen::InvalidSpec| e.to_string())
}

/// The arch for `--target cuda` without `--arch` when no device tells it: the newest that
/// NVRTC 12 and 13 both compile for and the templates are tuned for (Hopper).
const DEFAULT_ARCH: CudaArch = CudaArch(90);

impl TargetArgs {
    fn target(&self) -> Result<Target, String> {
        let arch = || match self.arch {
            Some(a) => Ok(a),
            None => device_arch(),
        };
        Ok(match self.target {
            TargetKind::Host => Target::Host,
            TargetKind::Cuda if self.ptx => Target::ptx(arch()?),
            TargetKind::Cuda => Target::cubin(arch()?),
        })
    }
}

/// CUDA device 0's arch, else (no driver or no device) [`DEFAULT_ARCH`] with a note on
/// stderr. A device older than the templates' minimum is an error: its kernels cannot be built.
fn device_arch() -> Result<CudaArch, String> {
    let cc = match jitccl::cuda_compute_capability(0) {
        Ok(cc) => cc,
        Err(why) => {
            eprintln!("# note: no --arch and no CUDA device to take it from ({why}); compiling for {DEFAULT_ARCH}");
            return Ok(DEFAULT_ARCH);
        }
    };
    let arch = format!("sm_{cc}");
    let arch = parse_arch(&arch).map_err(|e| format!("CUDA device 0 is {arch}: {e}; pass --arch"))?;
    eprintln!("# no --arch: compiling for {arch}, CUDA device 0's arch");
    Ok(arch)
}

#[derive(Subcommand)]
pub(super) enum KernelsCmd {
    /// Every valid kernel spec (for the target), one per line.
    List {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The generated source of one kernel, e.g. all_reduce.ring.ll.f32.sum.
    Show {
        #[arg(value_parser = parse_spec)]
        spec: KernelSpec,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Compile kernels (into the cache); prints failures with the compiler log.
    Compile(Batch),
    /// Check that kernels compile, building nothing: the C compiler's front end for the
    /// host, NVRTC without optimization for CUDA. Much faster than compile; remembers passes in
    /// the cache, so a second check re-checks only what changed.
    Check(Batch),
}

/// The kernels of `compile` and `check`, and how many at a time.
#[derive(clap::Args)]
pub(super) struct Batch {
    /// Kernel specs.
    #[arg(value_parser = parse_spec, required_unless_present = "all")]
    specs: Vec<KernelSpec>,
    /// Every valid spec for the target.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    target: TargetArgs,
    /// Kernels at a time, 1 to 1024 (default: the number of cores).
    #[arg(short = 'j', long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    jobs: Option<usize>,
}

fn valid_for(target: Target) -> Vec<KernelSpec> {
    KernelSpec::all().into_iter().filter(|s| s.validate_for(target).is_ok()).collect()
}

impl KernelsCmd {
    pub(super) fn run(self) -> Result<ExitCode, String> {
        match self {
            KernelsCmd::List { target } => {
                for s in valid_for(target.target()?) {
                    println!("{s}");
                }
                Ok(ExitCode::SUCCESS)
            }
            KernelsCmd::Show { spec, target } => {
                print!("{}", render(&spec, target.target()?).map_err(|e| e.to_string())?);
                Ok(ExitCode::SUCCESS)
            }
            KernelsCmd::Compile(b) => {
                let (specs, target, jobs) = b.resolve()?;
                let gen = Generator::global();
                if let Some(d) = gen.cache_dir() {
                    eprintln!(
                        "# compiling {} kernel(s) for {target} with {jobs} job(s); cache {}",
                        specs.len(),
                        d.display()
                    );
                }
                Ok(for_each(&specs, jobs, Work::Compile, |spec| {
                    gen.get(spec, target).map(|(_, p)| p == Provenance::Compiled)
                }))
            }
            KernelsCmd::Check(b) => {
                let (specs, target, jobs) = b.resolve()?;
                let gen = Generator::global();
                eprintln!("# checking {} kernel(s) for {target} with {jobs} job(s)", specs.len());
                Ok(for_each(&specs, jobs, Work::Check, |spec| {
                    gen.check(spec, target).map(|p| p == Provenance::Compiled)
                }))
            }
        }
    }
}

impl Batch {
    /// The specs (all valid ones with `all`), each checked against the target, the target,
    /// and the number of threads to work through them with.
    fn resolve(self) -> Result<(Vec<KernelSpec>, Target, usize), String> {
        let target = self.target.target()?;
        let specs = if self.all { valid_for(target) } else { self.specs };
        for s in &specs {
            s.validate_for(target).map_err(|e| format!("{s}: {e}"))?;
        }
        let jobs = self.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        // More threads than kernels would only idle.
        let jobs = jobs.min(specs.len()).max(1);
        Ok((specs, target, jobs))
    }
}

/// What [`for_each`] does to each kernel.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    Compile,
    Check,
}

/// Runs `work` on every spec with `jobs` threads, printing each failure and then the summary
/// (`compiled N, failed F, cached C in T s`; `checked N, failed F, remembered R in T s`),
/// where `work` returns whether it did the work (else the cache had it).
fn for_each(
    specs: &[KernelSpec], jobs: usize, what: Work,
    work: impl Fn(&KernelSpec) -> Result<bool, jitccl::codegen::CompileError> + Sync,
) -> ExitCode {
    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    let (worked, cached, done) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(spec) = specs.get(i) else { break };
                match work(spec) {
                    Ok(true) => _ = worked.fetch_add(1, Ordering::Relaxed),
                    Ok(false) => _ = cached.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        println!("FAILED {spec}: {e}");
                        failures.lock().unwrap_or_else(|e| e.into_inner()).push(spec.to_string());
                    }
                }
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if d % 100 == 0 && d < specs.len() {
                    eprintln!("# {d}/{} kernels, {:.1} s", specs.len(), t0.elapsed().as_secs_f64());
                }
            });
        }
    });
    let failed = failures.into_inner().unwrap_or_else(|e| e.into_inner()).len();
    let (worked, cached, secs) = (worked.into_inner(), cached.into_inner(), t0.elapsed().as_secs_f64());
    match what {
        Work::Compile => println!("compiled {worked}, failed {failed}, cached {cached} in {secs:.2} s"),
        Work::Check => println!("checked {worked}, failed {failed}, remembered {cached} in {secs:.2} s"),
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
