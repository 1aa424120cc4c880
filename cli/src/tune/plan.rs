//! The settings of a `jitccl tune` run, defaults filled in: its sizes, iteration counts,
//! candidates, and the `perf --compare` bands that measure them.

use jitccl::tune::Machine;
use jitccl::{Collective, Config, Device, Protocol, Wire};

use super::measure::Candidate;
use super::TuneArgs;
use crate::perf::Target;
use crate::size::{sweep_sizes, Step};

/// Sizes sharing an iteration count, measured by one `perf --compare` run.
pub(super) struct Band {
    /// Its smallest size: its key in the partial file.
    pub(super) start: usize,
    pub(super) sizes: Vec<usize>,
    /// perf's arguments, less the setups and turns.
    pub(super) args: Vec<String>,
}

/// The settings of a run, defaults filled in.
pub(super) struct Plan {
    pub(super) colls: Vec<Collective>,
    pub(super) nranks: usize,
    /// The machine whose cost model the table is written for.
    pub(super) machine: Machine,
    /// perf's arguments that put the ranks on it.
    pub(super) target_args: Vec<String>,
    pub(super) sizes: Vec<usize>,
    pub(super) factor: usize,
    pub(super) warmup: usize,
    pub(super) iters: usize,
    /// Turns per candidate and size in the tuning pass.
    pub(super) reps: usize,
    pub(super) candidates: Vec<Candidate>,
    /// The wire format of the tuned calls.
    pub(super) wire: Wire,
}

impl Plan {
    /// Timed (and warm-up) iterations at `size`: a call of a few microseconds needs many
    /// more than one that moves megabytes to rise above timer and scheduling noise. Below
    /// 4 KiB a call is so short that the default turns left two runs of one setup too far
    /// apart to rank candidates, so these get many more.
    pub(super) fn iters_at(&self, size: usize) -> (usize, usize) {
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
    pub(super) fn bands(&self, coll: Collective, reps: usize) -> Vec<Band> {
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
                if self.wire != Wire::Exact {
                    args.push(format!("--wire={}", self.wire));
                }
                Band { start: b, sizes, args }
            })
            .collect()
    }

    /// The candidates `coll`'s rows may name: its algorithms', and in a wire format those
    /// whose kernels carry it.
    pub(super) fn candidates_of(&self, coll: Collective) -> Vec<Candidate> {
        let carried = |c: &&Candidate| self.wire == Wire::Exact || Wire::algorithms(coll).contains(&c.algo);
        self.candidates.iter().filter(|c| coll.algorithms().contains(&c.algo)).filter(carried).copied().collect()
    }

    /// What the partial file must have been made with to be resumed.
    pub(super) fn signature(&self) -> String {
        // Host runs keep the signature of before, so their partial files still resume.
        let target: String = self.target_args.iter().map(|a| format!("{a} ")).collect();
        let wire = match self.wire {
            Wire::Exact => String::new(),
            w => format!("wire={w} "),
        };
        format!(
            "{target}{wire}nranks={} sizes={}..{}x{} warmup={} iters={} reps={} side by side",
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
    pub(super) fn plan(&self) -> Result<Plan, String> {
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
        let mut configured = Config::default().nchannels_on(self.nranks, &device).map_err(|e| e.to_string())?;
        if gpus {
            // The ranks are threads of one perf process, rank r on `--devices`' r-th GPU (GPU r
            // without): their communicators' channels, within the SMs of a GPU they share. Where
            // the GPUs cannot be asked (no driver), `run` refuses next, naming the GPU.
            let on: Vec<Device> =
                (0..self.nranks).map(|r| Device::Cuda { ordinal: self.devices.get(r).copied().unwrap_or(r) }).collect();
            if let Ok(n) = Config::default().nchannels_on_devices(&on) {
                configured = n;
            }
        }
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
        // A wire runs with the Simple protocol only.
        let protos: &[Protocol] = match self.wire {
            Wire::Exact => Protocol::ALL,
            _ => &[Protocol::Simple],
        };
        // The direct algorithms run on perf's plain buffers where every rank maps every
        // rank's host arena (else their runs fail and are left out); they have no FIFO
        // steps to size and only the Simple protocol.
        for &algo in Collective::AllReduce.algorithms().iter().filter(|a| !gpus || !a.is_direct()) {
            for &proto in protos.iter().filter(|&&p| !algo.is_direct() || p == Protocol::Simple) {
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
            wire: self.wire,
        })
    }
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

    #[test]
    fn a_wired_plan_runs_the_wire_on_the_algorithms_that_carry_it() {
        let p = plan(&["--wire", "int8", "--max-channels", "2"]).unwrap();
        assert!(p.candidates.iter().all(|c| c.proto == Protocol::Simple), "Simple only");
        let algos = |coll| p.candidates_of(coll).iter().map(|c| c.algo).collect::<Vec<_>>();
        assert!(algos(Collective::ReduceScatter).iter().all(|&a| a == jitccl::Algorithm::Ring || a.is_direct()));
        assert!(!algos(Collective::AllReduce).contains(&jitccl::Algorithm::OneShot), "one-shot carries no wire");
        for band in p.bands(Collective::AllReduce, 1) {
            assert!(band.args.contains(&"--wire=int8b64".to_string()), "{:?}", band.args);
        }
        assert_ne!(p.signature(), plan(&["--max-channels", "2"]).unwrap().signature(), "another wire's partial file");
    }
}
