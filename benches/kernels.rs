//! Benchmarks: a cold kernel compile (system cc; NVRTC when installed), a warm cache hit
//! (in memory, and on disk as a new process sees it), and a host all_reduce at a few sizes.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use jitccl::codegen::cache::DiskCache;
use jitccl::codegen::compile::nvrtc::{nvrtc, CudaOutput};
use jitccl::codegen::{CudaArch, Generator, KernelSpec};
use jitccl::{Comm, Config, Op};

fn spec() -> KernelSpec {
    "all_reduce.ring.simple.f32.sum".parse().expect("valid spec")
}

fn compile(c: &mut Criterion) {
    let spec = spec();
    let mut g = c.benchmark_group("compile");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.bench_function("host_cold", |b| {
        b.iter_batched(
            || Generator::new(None),
            |gen| black_box(gen.host_kernel(&spec).expect("compile")),
            BatchSize::PerIteration,
        )
    });
    if nvrtc().is_ok() {
        g.bench_function("nvrtc_cold_sm90_cubin", |b| {
            b.iter_batched(
                || Generator::new(None),
                |gen| black_box(gen.cuda_image(&spec, CudaArch(90), CudaOutput::Cubin).expect("compile")),
                BatchSize::PerIteration,
            )
        });
    } else {
        eprintln!("NVRTC not installed: skipping the NVRTC compile benchmark (run scripts/setup-nvrtc.sh)");
    }
    g.finish();
}

fn cache_hit(c: &mut Criterion) {
    let spec = spec();
    let dir = tempfile::tempdir().expect("tempdir");
    let warm = Generator::new(Some(DiskCache::new(dir.path())));
    warm.host_kernel(&spec).expect("compile");
    let mut g = c.benchmark_group("cache_hit");
    g.bench_function("memory", |b| b.iter(|| black_box(warm.host_kernel(&spec).expect("hit"))));
    g.bench_function("disk", |b| {
        b.iter_batched(
            || Generator::new(Some(DiskCache::new(dir.path()))),
            |gen| black_box(gen.host_kernel(&spec).expect("hit")),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn host_all_reduce(c: &mut Criterion) {
    let comms = Comm::init_all(2, &Config::default()).expect("init");
    let streams: Vec<_> = comms.iter().map(|c| c.device().stream().expect("stream")).collect();
    let mut g = c.benchmark_group("host_all_reduce_2ranks_f32_sum");
    g.sample_size(20);
    for bytes in [8usize, 64 << 10, 4 << 20] {
        let count = bytes / 4;
        let bufs: Vec<_> = comms.iter().map(|c| c.device().alloc::<f32>(count).expect("alloc")).collect();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_with_input(BenchmarkId::from_parameter(bytes), &count, |b, &count| {
            b.iter(|| {
                for r in 0..2 {
                    comms[r].all_reduce(&bufs[r], &bufs[r], count, Op::Sum, &streams[r]).expect("launch");
                }
                for s in &streams {
                    s.synchronize().expect("sync");
                }
            })
        });
    }
    g.finish();
}

/// The launch path alone: one rank, so no peer to wait for; 200 queued 8-byte launches and
/// one synchronize per iteration (the rate is launches per second), and a launch
/// synchronized on its own (the round trip through the stream thread).
fn launch(c: &mut Criterion) {
    const QUEUED: usize = 200;
    let comms = Comm::init_all(1, &Config::default()).expect("init");
    let (comm, stream) = (&comms[0], comms[0].device().stream().expect("stream"));
    let buf = comm.device().alloc::<f32>(2).expect("alloc");
    let mut g = c.benchmark_group("launch_1rank_8B");
    g.throughput(Throughput::Elements(QUEUED as u64));
    g.bench_function("queued", |b| {
        b.iter(|| {
            for _ in 0..QUEUED {
                comm.all_reduce(&buf, &buf, 2, Op::Sum, &stream).expect("launch");
            }
            stream.synchronize().expect("sync");
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("synchronized", |b| {
        b.iter(|| {
            comm.all_reduce(&buf, &buf, 2, Op::Sum, &stream).expect("launch");
            stream.synchronize().expect("sync");
        })
    });
    g.finish();
}

criterion_group!(benches, compile, cache_hit, host_all_reduce, launch);
criterion_main!(benches);
