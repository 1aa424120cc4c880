//! perf's output: nccl-tests' table (size, count, type, redop, root, then time, algbw,
//! busbw and #wrong out of place and in place), its closing lines, and this machine's
//! memcpy bandwidth as a yardstick for host figures (a GPU's copies are not measured by a
//! host memcpy, so CUDA runs print none). Only the thread holding rank 0 prints.

use std::time::Instant;

use super::flags::{Average, Layout, PerfArgs, Register, Target};

/// One measured placement of one size, combined over all ranks.
pub struct Timing {
    pub us: f64,
    pub wrong: usize,
}

/// Prints nothing unless this thread holds rank 0.
pub struct Report {
    printer: bool,
    bus_sum: f64,
    cells: usize,
    pub wrong: usize,
    /// busbw of the largest size, out of place and in place.
    last_bus: [f64; 2],
}

impl Report {
    pub fn new(printer: bool) -> Self {
        Report { printer, bus_sum: 0.0, cells: 0, wrong: 0, last_bus: [0.0; 2] }
    }

    pub fn say(&self, line: &str) {
        if self.printer {
            println!("{line}");
        }
    }

    /// The run's header; `encodes`: whether the wire's kernels run (`Wired::encodes`),
    /// `encodings`: the most on an element's path, which the check's bound counts.
    pub fn header(&self, a: &PerfArgs, lay: &Layout, encodes: bool, encodings: usize) {
        if !self.printer {
            return;
        }
        let target = target_words(a.target, &a.devices, jitccl::cuda_device_count());
        let how = if lay.procs == 1 {
            format!("ranks as threads of one process ({} thread(s) x {} rank(s))", lay.threads, lay.per_thread)
        } else {
            format!("rank processes ({} x {} thread(s) x {} rank(s))", lay.procs, lay.threads, lay.per_thread)
        };
        let avg = match a.average {
            Average::Rank0 => "rank 0's",
            Average::Mean => "mean",
            Average::Min => "min",
            Average::Max => "max",
        };
        self.say(&format!(
            "# jitccl perf: {} in the {} wire on {target}, {} {how}, {} buffers, {} warmup + {} timed iterations of {} op(s){}{}, check {}, {avg} time over ranks",
            a.coll,
            a.wire,
            lay.nranks,
            match a.register {
                Register::None => "plain",
                Register::Local => "registered",
                Register::Symmetric => "symmetric",
            },
            a.warmup,
            a.iters,
            a.agg,
            if a.blocking { ", blocking" } else { "" },
            match a.cudagraph {
                0 => String::new(),
                g => format!(", captured into a CUDA graph replayed {g} time(s)"),
            },
            a.check
        ));
        if a.wire != jitccl::Wire::Exact {
            let applied = if encodes {
                format!("The {} wire encodes what the ranks send, a result at most {encodings} time(s)", a.wire)
            } else {
                format!(
                    "The {} wire was asked, but every hop is in memory, where encoding cannot pay: the calls run \
                     exactly ({}=encode runs the wire's kernels)",
                    a.wire,
                    jitccl::settings::WIRE_LOCAL.name
                )
            };
            self.say(&format!(
                "# {applied}; busbw counts the {} bytes; #wrong counts results outside the wire's error bound of the \
                 exact ones, and results whose bits differ between ranks",
                a.dtype.nccl_name()
            ));
        }
        self.say("#");
        self.say(&format!("# {:>66}{:>34}", "out-of-place", "in-place"));
        let cols = |v: [&str; 13]| {
            format!(
                "# {:>10} {:>12} {:>9} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6}",
                v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]
            )
        };
        let t = ["time", "algbw", "busbw", "#wrong"];
        self.say(&cols(["size", "count", "type", "redop", "root", t[0], t[1], t[2], t[3], t[0], t[1], t[2], t[3]]));
        let u = ["(us)", "(GB/s)", "(GB/s)", ""];
        self.say(&cols(["(B)", "(elements)", "", "", "", u[0], u[1], u[2], u[3], u[0], u[1], u[2], u[3]]));
    }

    /// The row's first five columns.
    pub fn row_start(size: usize, count: usize, dtype: &str, redop: &str, root: i64) -> String {
        format!("  {size:>10} {count:>12} {dtype:>9} {redop:>7} {root:>6}")
    }

    /// Appends one placement's cells (None: the placement does not exist).
    pub fn cell(
        &mut self, line: &mut String, in_place: bool, size: usize, factor: f64, t: Option<&Timing>, check: bool,
    ) {
        let Some(t) = t else {
            line.push_str(&format!(" {:>8} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A"));
            return;
        };
        let algbw = size as f64 / t.us / 1e3;
        let busbw = algbw * factor;
        self.bus_sum += busbw;
        self.cells += 1;
        self.last_bus[in_place as usize] = busbw;
        self.wrong += t.wrong;
        let wrong = if check { t.wrong.to_string() } else { "N/A".into() };
        line.push_str(&format!(" {:>8.2} {algbw:>7.2} {busbw:>7.2} {wrong:>6}", t.us));
    }

    /// The closing lines; `max_bytes` sizes the memcpy yardstick, which `target` may skip.
    pub fn finish(&self, max_bytes: usize, target: Target) {
        let w = self.wrong;
        self.say(&format!("# Out of bounds values : {w} {}", if w == 0 { "OK" } else { "FAILED" }));
        self.say(&format!("# Avg bus bandwidth    : {:.4}", self.bus_sum / self.cells.max(1) as f64));
        if !self.printer || target == Target::Cuda {
            return;
        }
        // At least 64 MiB, so that the copy runs from memory, not from the last-level cache.
        let memcpy = memcpy_gbps(max_bytes.clamp(64 << 20, 256 << 20));
        self.say(&format!(
            "# Single-thread memcpy bandwidth on this machine: {memcpy:.2} GB/s; busbw of the last size is {:.0}% of it out of place, {:.0}% in place",
            100.0 * self.last_bus[0] / memcpy,
            100.0 * self.last_bus[1] / memcpy
        ));
    }
}

/// Where the ranks run, for the header; `gpus` is the driver's device count or why none.
fn target_words(target: Target, devices: &[usize], gpus: Result<usize, String>) -> String {
    match target {
        Target::Cuda => format!("CUDA devices {devices:?}"),
        // Say why the host when there is a GPU too.
        Target::Host => match gpus {
            Ok(g) => format!("the host target ({g} CUDA device(s) present, but --target host was asked for)"),
            Err(e) => format!("the host target ({e})"),
        },
    }
}

/// Single-thread memcpy bandwidth (bytes copied per second) over `bytes`-sized buffers.
fn memcpy_gbps(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    let reps = (1usize << 30).div_ceil(bytes).clamp(3, 64);
    let t0 = Instant::now();
    for _ in 0..reps {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (bytes * reps) as f64 / t0.elapsed().as_secs_f64() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_the_target_the_ranks_run_on() {
        // A CUDA run once said "on the host target (1 CUDA device(s) present, but --target
        // host was asked for)".
        assert_eq!(target_words(Target::Cuda, &[0, 0], Ok(1)), "CUDA devices [0, 0]");
        assert!(target_words(Target::Host, &[], Ok(2)).contains("2 CUDA device(s) present"));
        assert_eq!(target_words(Target::Host, &[], Err("no driver".into())), "the host target (no driver)");
    }
}
