//! Graph search time on the topology fixtures (target: well under 100 ms for an HGX H100
//! host), and on two such hosts; loading a topology file and detecting this host (target:
//! under 10 ms added to init).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use jitccl::graph::{search, Device, GlobalSystem, RankPlace, SearchParams};
use jitccl::topo::System;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo");

fn load(name: &str) -> System {
    System::from_xml_file(format!("{FIXTURES}/{name}")).expect("fixture")
}

fn graph_search(c: &mut Criterion) {
    let mut g = c.benchmark_group("graph_search");
    for name in ["hgx-h100-8gpu-8nic.xml", "ndv4-a100-pci-only.xml"] {
        let global = GlobalSystem::one_rank_per_device(load(name));
        g.bench_function(name, |b| b.iter(|| black_box(search(&global, &SearchParams::default()).expect("search"))));
    }
    let h100 = load("hgx-h100-8gpu-8nic.xml");
    let ranks = (0..16).map(|r| RankPlace { host: r % 2, device: Device::Gpu((r / 2) as u32) }).collect();
    let two = GlobalSystem::new(vec![h100.clone(), h100], ranks).expect("global");
    g.bench_function("two_h100_hosts_interleaved", |b| {
        b.iter(|| black_box(search(&two, &SearchParams::default()).expect("search")))
    });
    g.bench_function("load_h100_xml", |b| b.iter(|| black_box(load("hgx-h100-8gpu-8nic.xml"))));
    // What init adds on the host: detecting this machine (sysfs, procfs, NVML if present).
    g.bench_function("detect_local", |b| b.iter(|| black_box(System::local().expect("detect"))));
    g.finish();
}

criterion_group!(benches, graph_search);
criterion_main!(benches);
