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
        b.iter_batched(|| Generator::new(None), |gen| black_box(gen.host_kernel(&spec).expect("compile")), BatchSize::PerIteration)
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

criterion_group!(benches, compile, cache_hit, host_all_reduce);
criterion_main!(benches);
