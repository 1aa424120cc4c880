//! Topology files and the graph search over them: the real fixtures in
//! tests/fixtures/topo (copies of ../shared/fixtures/topo), and two hosts with interleaved ranks.

use jitccl::graph::{search, Device, GlobalSystem, Graph, RankPlace, SearchParams};
use jitccl::topo::{PathType, System};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topo");

fn fixtures() -> Vec<(String, System)> {
    let mut names: Vec<String> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    names.sort();
    assert!(names.len() >= 2, "fixtures missing: {names:?}");
    names.into_iter().map(|n| (n.clone(), System::from_xml_file(format!("{FIXTURES}/{n}")).unwrap())).collect()
}

fn h100() -> System {
    System::from_xml_file(format!("{FIXTURES}/hgx-h100-8gpu-8nic.xml")).unwrap()
}

/// Index in `sys.nics` of net device `dev`.
fn nic_index(sys: &System, dev: u32) -> usize {
    sys.nics.iter().position(|n| n.dev == dev).unwrap()
}

/// Path type and bandwidth from a GPU to a NIC.
fn gpu_nic(sys: &System, gpu: u32, nic: usize) -> (PathType, f64) {
    let p = sys.path(sys.gpu(gpu).unwrap().node, sys.nics[nic].node).unwrap();
    (p.ty, p.bw)
}

fn check_tree(g: &Graph) {
    for ch in &g.channels {
        let t = &ch.tree;
        assert_eq!(t.parent.iter().filter(|p| p.is_none()).count(), 1, "one root");
        let mut kids: Vec<usize> = t.children.iter().flatten().copied().collect();
        kids.sort();
        let root = t.parent.iter().position(|p| p.is_none()).unwrap();
        assert_eq!(kids, (0..g.nranks).filter(|&r| r != root).collect::<Vec<_>>(), "every other rank once");
        for (r, p) in t.parent.iter().enumerate() {
            if let Some(p) = p {
                assert!(t.children[*p].contains(&r));
            }
        }
        assert!(t.children.iter().all(|c| c.len() <= jitccl::codegen::abi::MAX_TREE_ARITY));
    }
}

#[test]
fn every_fixture_loads_and_rings_visit_every_gpu_once() {
    for (name, sys) in fixtures() {
        assert_eq!(sys.gpus.len(), 8, "{name}");
        let global = GlobalSystem::one_rank_per_device(sys);
        let g = search(&global, &SearchParams::default()).unwrap();
        assert!(!g.fallback, "{name}");
        assert!(g.nchannels() >= 1 && g.nchannels() <= 32);
        for ch in &g.channels {
            let mut ring = ch.ring.clone();
            ring.sort();
            assert_eq!(ring, (0..8).collect::<Vec<_>>(), "{name}");
            assert!(ch.bw > 0.0);
        }
        check_tree(&g);
    }
}

#[test]
fn channels_spread_over_all_nics_each_gpu_on_its_nearest() {
    for (name, sys) in fixtures() {
        let global = GlobalSystem::one_rank_per_device(sys.clone());
        let g = search(&global, &SearchParams::default()).unwrap();
        // The NIC a channel enters a host by is its first rank's.
        let mut used: Vec<u32> = g.channels.iter().map(|c| c.nic[c.ring[0]].unwrap()).collect();
        used.sort();
        used.dedup();
        assert_eq!(used.len(), sys.nics.len(), "{name}: channels enter by {used:?}");
        for ch in &g.channels {
            for (rank, dev) in ch.nic.iter().enumerate() {
                let Device::Gpu(gpu) = global.ranks[rank].device else { panic!() };
                let got = gpu_nic(&sys, gpu, nic_index(&sys, dev.unwrap()));
                let best = (0..sys.nics.len()).map(|i| gpu_nic(&sys, gpu, i)).min_by(|a, b| a.partial_cmp(b).unwrap());
                assert_eq!(got.0, best.unwrap().0, "{name}: GPU {gpu}");
                // Both fixtures have a NIC on every GPU's own PCIe switch.
                assert_eq!(got.0, PathType::Pix, "{name}: GPU {gpu}");
            }
        }
    }
}

#[test]
fn h100_rings_run_at_nvlink_speed() {
    let global = GlobalSystem::one_rank_per_device(h100());
    let g = search(&global, &SearchParams::default()).unwrap();
    assert_eq!(g.type_intra, PathType::Nvl);
    assert!(g.bw_intra >= 10.0 && g.bw_intra <= 100.0, "{}", g.bw_intra);
    // The channels together use no more than a GPU's NVLink bandwidth (18 × 20.6 GB/s).
    assert!(g.nchannels() as f64 * g.bw_intra <= 18.0 * 20.6 + 1e-6);
}

#[test]
fn search_is_deterministic_and_bounded() {
    for (_, sys) in fixtures() {
        let global = GlobalSystem::one_rank_per_device(sys);
        let a = search(&global, &SearchParams::default()).unwrap();
        let b = search(&global, &SearchParams::default()).unwrap();
        assert_eq!(a, b);
        assert!(a.steps <= 1 << 19);
        let small = SearchParams { step_budget: 5, ..SearchParams::default() };
        let c = search(&global, &small).unwrap();
        assert!(c.steps <= 5);
        assert!(!c.channels.is_empty());
    }
}

/// Two copies of the H100 host; ranks 0 and 2 on host A (GPUs 0, 1), 1 and 3 on host B.
fn interleaved() -> GlobalSystem {
    let place = |host, gpu| RankPlace { host, device: Device::Gpu(gpu) };
    let ranks = vec![place(0, 0), place(1, 0), place(0, 1), place(1, 1)];
    GlobalSystem::new(vec![h100(), h100()], ranks).unwrap()
}

#[test]
fn two_hosts_interleaved_rings_cross_twice_trees_valid() {
    let global = interleaved();
    let g = search(&global, &SearchParams::default()).unwrap();
    assert_eq!(g.nhosts, 2);
    let host = |r: usize| global.ranks[r].host;
    for ch in &g.channels {
        let n = ch.ring.len();
        let crossings = (0..n).filter(|&k| host(ch.ring[k]) != host(ch.ring[(k + 1) % n])).count();
        assert_eq!(crossings, 2, "{:?}", ch.ring);
        assert!(ch.bw > 0.0 && ch.bw <= 25.0, "a channel is capped by its NIC: {}", ch.bw);
    }
    check_tree(&g);
    // The two trees have different roots (double binary tree).
    let root = |c: usize| g.channels[c].tree.parent.iter().position(|p| p.is_none()).unwrap();
    assert_ne!(host(root(0)), host(root(1)));
    assert!(g.bw_inter > 0.0 && g.type_inter == PathType::Pix);
}

#[test]
fn ranks_group_into_hosts_by_host_hash() {
    let a = h100();
    let mut b = h100();
    b.host_hash = Some(1);
    let per_rank =
        vec![(a.clone(), Device::Gpu(0)), (b.clone(), Device::Gpu(0)), (a, Device::Gpu(1)), (b, Device::Gpu(1))];
    let global = GlobalSystem::from_ranks(per_rank).unwrap();
    assert_eq!(global.hosts.len(), 2);
    assert_eq!(global.ranks.iter().map(|p| p.host).collect::<Vec<_>>(), vec![0, 1, 0, 1]);
    assert_eq!(
        search(&global, &SearchParams::default()).unwrap(),
        search(&interleaved(), &SearchParams::default()).unwrap()
    );
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    assert!(GlobalSystem::new(vec![h100()], vec![RankPlace { host: 1, device: Device::Gpu(0) }]).is_err());
    assert!(GlobalSystem::new(vec![h100()], vec![RankPlace { host: 0, device: Device::Gpu(9) }]).is_err());
    let empty = System::from_xml_str("e.xml", "<system version=\"1\"/>").unwrap();
    let global = GlobalSystem::one_rank_per_device(empty.clone());
    let g = search(&global, &SearchParams::default()).unwrap();
    assert_eq!(g.nranks, 1);
    let none = GlobalSystem::new(vec![empty], vec![]).unwrap();
    assert!(search(&none, &SearchParams::default()).is_err());
    let e = System::from_xml_str("m.xml", "<system>\n<cpu>\n<pci busid=\"x\">\n</cpu>\n</system>").unwrap_err();
    assert!(e.to_string().starts_with("m.xml:4: "), "{e}");
}

#[test]
fn topology_dump_load_dump_is_byte_stable() {
    for (name, sys) in fixtures() {
        let once = sys.to_xml();
        let twice = System::from_xml_str(&name, &once).unwrap().to_xml();
        assert_eq!(once, twice, "{name}");
    }
}

#[test]
fn graph_file_round_trip_two_hosts() {
    let global = interleaved();
    let g = search(&global, &SearchParams::default()).unwrap();
    let text = g.to_xml(&global, 0);
    assert!(text.contains("<net dev="), "{text}");
    let back = Graph::from_xml_str("g.xml", &text, &global).unwrap();
    for (a, b) in back.channels.iter().zip(&g.channels) {
        assert_eq!(a.ring, b.ring);
        assert_eq!(a.tree, b.tree);
    }
}
