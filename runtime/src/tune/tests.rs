use super::*;
use crate::config::Config;
use crate::device::Device;
use crate::graph::Graph;
use Algorithm::*;
use Collective::*;

/// A tuner for `n` ranks on a 2-core host (the measured machine) with `nch` channels.
fn tuner(n: usize, nch: usize, algos: &str, protos: &str, table: Option<Table>) -> Tuner {
    let cfg = Config {
        nchannels: Some(nch),
        algos: Some(if algos.is_empty() { AlgoOverrides::default() } else { algos.parse().unwrap() }),
        protos: Some(if protos.is_empty() { ProtoOverrides::default() } else { protos.parse().unwrap() }),
        ..Config::default()
    }
    .resolve(n)
    .unwrap();
    Tuner::new(Topology::host(n, nch, 2), Constants::HOST, table, &cfg)
}

fn sizes() -> impl Iterator<Item = usize> {
    (0..=28).map(|s| 1usize << s)
}

#[test]
fn host_picks_match_the_measurements() {
    for n in 1..=8 {
        let t = tuner(n, 1, "", "", None);
        for bytes in sizes() {
            let c = t.choose(AllReduce, bytes, 4, true).unwrap();
            // Ranks with a core each hand a small step over in one line with LL128 (data and
            // flag together), where Simple's receiver fetches the flag, then the data.
            let proto = if n == 2 && bytes <= 128 { Protocol::LL128 } else { Protocol::Simple };
            assert_eq!(c.proto, proto, "n={n} {bytes} B: {c:?}");
            if n == 1 || (n == 2 && bytes >= 2 << 10) {
                assert_eq!(c.algo, Ring, "n={n} {bytes} B");
            }
        }
        for coll in [Broadcast, AllGather] {
            assert_eq!(t.choose(coll, 64, 1, true).unwrap().proto, Protocol::Simple, "n={n} {coll}: moves only");
        }
        if n >= 2 {
            assert_eq!(t.choose(AllReduce, 8, 4, true).unwrap().algo, OneShot, "n={n}");
            assert_eq!(t.choose(AllReduce, 512, 4, true).unwrap().algo, OneShot, "n={n}");
        }
        assert_eq!(t.choose(AllReduce, 64 << 20, 4, true).unwrap().algo, Ring, "n={n}");
    }
    // The measured crossovers: one-shot gives way near 8 KiB at 3 ranks, 5 KiB at 4.
    assert_eq!(tuner(3, 1, "", "", None).choose(AllReduce, 4 << 10, 4, true).unwrap().algo, OneShot);
    assert_eq!(tuner(3, 1, "", "", None).choose(AllReduce, 32 << 10, 4, true).unwrap().algo, Ring);
    assert_eq!(tuner(4, 1, "", "", None).choose(AllReduce, 16 << 10, 4, true).unwrap().algo, Ring);
    // At 8 ranks the tree wins between one-shot and the ring, as measured.
    assert_eq!(tuner(8, 1, "", "", None).choose(AllReduce, 16 << 10, 4, true).unwrap().algo, Tree);
}

#[test]
fn picks_move_one_way_as_sizes_grow() {
    let rank = |a: Algorithm| match a {
        OneShot => 0,
        Tree => 1,
        Ring => 2,
        Direct | DirectOneShot => panic!("{a} chosen for buffers that are not registered"),
        RecursiveDoubling => panic!("{a} chosen on one host"),
    };
    for n in 2..=16 {
        for nch in [1, 2, 4] {
            let t = tuner(n, nch, "", "", None);
            let (mut last_algo, mut last_nch) = (0, 1);
            for bytes in sizes() {
                let c = t.choose(AllReduce, bytes, 4, true).unwrap();
                assert!(rank(c.algo) >= last_algo, "n={n}: {:?} after a later algorithm at {bytes} B", c.algo);
                assert!(c.nchannels >= last_nch && c.nchannels <= nch, "n={n}: {c:?} at {bytes} B");
                (last_algo, last_nch) = (rank(c.algo), c.nchannels);
            }
            // The host caps a rank at 1.5 channels' bandwidth: a third channel only costs.
            assert_eq!(last_nch, nch.min(2), "n={n}: 256 MiB does not use a second channel");
            assert_eq!(t.choose(AllReduce, 8, 4, true).unwrap().nchannels, 1);
        }
    }
}

#[test]
fn choices_are_always_valid_and_allowed() {
    let algo_sets = ["", "ring", "tree;broadcast:ring", "^ring", "allreduce:oneshot,ring", "allreduce:^oneshot"];
    let proto_sets = ["", "ll", "^simple", "allreduce:ll128;reduce:ll", "^ll128"];
    for a in algo_sets {
        for p in proto_sets {
            let algos: AlgoOverrides = if a.is_empty() { Default::default() } else { a.parse().unwrap() };
            let protos: ProtoOverrides = if p.is_empty() { Default::default() } else { p.parse().unwrap() };
            for n in [1, 2, 3, 5] {
                let t = tuner(n, 3, a, p, None);
                for &coll in Collective::ALL {
                    for bytes in sizes().step_by(3) {
                        for commutative in [true, false] {
                            let Ok(c) = t.choose(coll, bytes, 8, commutative) else {
                                // Only an override that leaves no algorithm for buffers
                                // that are not registered may fail.
                                assert!(
                                    !coll
                                        .algorithms()
                                        .iter()
                                        .any(|&x| !x.is_direct() && algos.allowed(coll).contains(x)),
                                    "{a} / {p}: {coll}"
                                );
                                continue;
                            };
                            let what = format!("{a} / {p}: {coll} n={n} {bytes} B commutative={commutative}: {c:?}");
                            // Point-to-point on buffers that are not addressable has the
                            // FIFO alone, whatever the overrides.
                            let fifo = coll == Collective::SendRecv && c.algo == Ring;
                            assert!(
                                coll.algorithms().contains(&c.algo) && (fifo || algos.allowed(coll).contains(c.algo)),
                                "{what}"
                            );
                            assert!(protos.allowed(coll).contains(c.proto), "{what}");
                            assert!((1..=3).contains(&c.nchannels) && c.chunk_elems >= 1, "{what}");
                            if !commutative && algos.allowed(coll).contains(Ring) {
                                assert_eq!(c.algo, Ring, "{what}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn impossible_overrides_are_errors_naming_the_variable() {
    let t = tuner(4, 1, "allreduce:^ring,tree,oneshot,recursive_doubling", "", None);
    let e = t.choose(AllReduce, 64, 4, true).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("JITCCL_ALGO") && m.contains("all_reduce")), "{e}");
    assert!(t.choose(Broadcast, 64, 1, true).is_ok(), "another collective failed");
    // Tree everywhere: broadcast has none.
    let e = tuner(4, 1, "tree", "", None).choose(Broadcast, 64, 1, true).unwrap_err();
    assert!(e.to_string().contains("JITCCL_ALGO='"), "{e}");
    let e = tuner(4, 1, "", "reduce:^simple,ll,ll128", None).choose(Reduce, 64, 4, true).unwrap_err();
    assert!(e.to_string().contains("JITCCL_PROTO"), "{e}");
}

#[test]
fn non_commutative_ops_stay_on_the_ring() {
    for n in 3..=8 {
        let t = tuner(n, 1, "", "", None);
        for bytes in sizes() {
            assert_eq!(t.choose(AllReduce, bytes, 4, false).unwrap().algo, Ring);
        }
    }
    // Forced off the ring, the choice names the forced algorithm: the kernel spec then
    // refuses it, naming the op.
    let t = tuner(4, 1, "allreduce:tree", "", None);
    assert_eq!(t.choose(AllReduce, 8, 4, false).unwrap().algo, Tree);
}

#[test]
fn a_table_forces_the_choice_it_names() {
    let row = Row {
        coll: AllReduce,
        min_bytes: 1024,
        max_bytes: 65536,
        algo: Tree,
        proto: Protocol::LL,
        channels: Some(2),
        nnodes: None,
        nranks: Some(4),
        pipe_ops: None,
        reg_buff: None,
        chunk_bytes: Some(512),
        wire: Wire::Exact,
    };
    let table = Table {
        rows: vec![
            row.clone(),
            Row {
                coll: Broadcast,
                algo: Ring,
                min_bytes: 0,
                max_bytes: 10,
                proto: Protocol::LL128,
                channels: None,
                ..row.clone()
            },
        ],
        ..Table::default()
    };
    let t = tuner(4, 4, "", "", Some(table.clone()));
    let c = t.choose(AllReduce, 4096, 4, true).unwrap();
    assert_eq!(c, Choice { algo: Tree, proto: Protocol::LL, nchannels: 2, chunk_elems: 128 });
    assert_eq!(
        t.decide(Key {
            coll: AllReduce,
            bytes: 4096,
            elem_size: 4,
            commutative: true,
            direct: false,
            wire: Wire::Exact
        })
        .unwrap()
        .1,
        Source::Table
    );
    // Outside the row's range, the model.
    assert_eq!(t.choose(AllReduce, 64, 4, true).unwrap().algo, OneShot);
    let c = t.choose(Broadcast, 8, 1, true).unwrap();
    assert_eq!((c.proto, c.nchannels), (Protocol::LL128, 1), "channels -1: the model's");
    // Rows for 4 ranks do not apply to 3.
    assert_eq!(
        tuner(3, 4, "", "", Some(table.clone())).choose(AllReduce, 4096, 4, true).unwrap().proto,
        Protocol::Simple
    );
    // Overrides win over the table; so does commutativity.
    let t = tuner(4, 4, "", "^ll", Some(table.clone()));
    let (c, source, why) = t
        .decide(Key { coll: AllReduce, bytes: 4096, elem_size: 4, commutative: true, direct: false, wire: Wire::Exact })
        .unwrap();
    assert_eq!((c.proto, source), (Protocol::Simple, Source::Model), "{why}");
    assert!(why.contains("table's tree/ll is not allowed"), "{why}");
    assert_eq!(tuner(4, 4, "", "", Some(table)).choose(AllReduce, 4096, 4, false).unwrap().algo, Ring);
}

#[test]
fn point_to_point_uses_every_channel_at_every_size() {
    let t = tuner(4, 3, "", "", None);
    for bytes in sizes() {
        let c = t.choose(SendRecv, bytes, 1, true).unwrap();
        assert_eq!((c.algo, c.proto, c.nchannels), (Ring, Protocol::Simple, 3));
    }
    assert_eq!(tuner(4, 3, "", "^simple", None).choose(SendRecv, 8, 1, true).unwrap().proto, Protocol::LL128);
}

#[test]
fn point_to_point_on_addressable_buffers_is_the_direct_copy_unless_overridden() {
    let t = tuner(4, 3, "", "", None);
    for bytes in sizes() {
        let c = t.choose_for(SendRecv, bytes, 1, true, true).unwrap();
        assert_eq!((c.algo, c.proto, c.nchannels), (Direct, Protocol::Simple, 1));
    }
    assert!(t.allows_direct(SendRecv) && t.allows_direct(AllToAll));
    let ring = tuner(4, 3, "sendrecv:ring;alltoall:ring", "", None);
    assert!(!ring.allows_direct(SendRecv) && !ring.allows_direct(AllToAll));
    assert_eq!(ring.choose_for(SendRecv, 64, 1, true, true).unwrap().algo, Ring);
    // Forced direct, but the buffers are not addressable: the FIFO, its only way.
    let direct = tuner(4, 3, "direct", "", None);
    assert_eq!(direct.choose_for(SendRecv, 64, 1, true, false).unwrap().algo, Ring);
}

#[test]
fn sources_say_whether_an_override_changed_the_pick() {
    let key = Key { coll: AllReduce, bytes: 64, elem_size: 4, commutative: true, direct: false, wire: Wire::Exact };
    assert_eq!(tuner(4, 1, "", "", None).decide(key).unwrap().1, Source::Model);
    assert_eq!(tuner(4, 1, "allreduce:ring", "", None).decide(key).unwrap().1, Source::Override);
    assert_eq!(tuner(4, 1, "allreduce:oneshot,ring", "", None).decide(key).unwrap().1, Source::Model);
}

/// Across hosts a small AllReduce leaves the ring (for recursive doubling: one swap crosses
/// the hosts, where the tree crosses twice), and the reason names the ring's higher
/// estimate and what the network costs.
#[test]
fn across_hosts_the_reason_names_the_ring_and_the_network() {
    let cfg = Config { nchannels: Some(2), ..Config::default() }.resolve(4).unwrap();
    let graph = Graph { nhosts: 2, ..Graph::uniform(4, 2) };
    let t = Tuner::new(Topology::from_graph(&graph, 2), Constants::HOST, None, &cfg);
    let key = Key { coll: AllReduce, bytes: 8, elem_size: 4, commutative: true, direct: false, wire: Wire::Exact };
    let (choice, source, why) = t.decide(key).unwrap();
    assert_eq!((choice.algo, source), (RecursiveDoubling, Source::Model), "{why}");
    let us = |name: &str| -> f64 {
        let at = why.find(&format!("{name} ")).unwrap_or_else(|| panic!("no {name} in '{why}'")) + name.len() + 1;
        why[at..].split(' ').next().unwrap().parse().unwrap()
    };
    assert!(us("ring") > why.split(' ').next().unwrap().parse::<f64>().unwrap(), "{why}");
    assert!(why.contains("2 hosts: ") && why.contains(" us a network hop"), "{why}");
    // One host: no word of a network.
    let (_, _, why) = tuner(4, 2, "", "", None).decide(key).unwrap();
    assert!(why.contains(", beside ring ") && !why.contains("hosts"), "{why}");
}

#[test]
fn legacy_single_values_force_where_available() {
    let cfg = Config { nchannels: Some(1), algo: Some(Tree), proto: Some(Protocol::LL), ..Config::default() }
        .resolve(4)
        .unwrap();
    let t = Tuner::new(Topology::host(4, 1, 2), Constants::HOST, None, &cfg);
    assert_eq!(t.choose(AllReduce, 1 << 20, 4, true).unwrap().algo, Tree);
    let c = t.choose(Broadcast, 1 << 20, 1, true).unwrap();
    assert_eq!((c.algo, c.proto), (Ring, Protocol::LL));
    let both = Config { algo: Some(Tree), algos: Some("ring".parse().unwrap()), ..Config::default() }.resolve(4);
    assert!(both.unwrap_err().to_string().contains("Config.algo and Config.algos"));
}

#[test]
fn direct_algorithms_only_for_registered_buffers_and_then_always() {
    for n in [2, 3, 4] {
        let t = tuner(n, 2, "", "", None);
        for bytes in sizes() {
            let plain = t.choose_for(AllReduce, bytes, 4, true, false).unwrap();
            assert!(!plain.algo.is_direct(), "n={n} {bytes} B: {plain:?}");
            if bytes < 64 << 10 {
                continue;
            }
            let reg = t.choose_for(AllReduce, bytes, 4, true, true).unwrap();
            assert!(reg.algo == Direct && reg.proto == Protocol::Simple, "n={n} {bytes} B: {reg:?}");
            for coll in [AllGather, ReduceScatter, Broadcast, Reduce] {
                assert_eq!(t.choose_for(coll, bytes, 4, true, true).unwrap().algo, Direct, "{coll} n={n} {bytes} B");
            }
        }
        // A non-commutative op keeps the ring even on registered buffers.
        assert_eq!(t.choose_for(AllReduce, 1 << 24, 4, false, true).unwrap().algo, Ring);
    }
    // Forcing a direct algorithm on buffers that are not registered is an error, not a
    // kernel without peers' addresses.
    let forced = tuner(2, 1, "allreduce:direct", "", None);
    let e = forced.choose_for(AllReduce, 64, 4, true, false).unwrap_err();
    assert!(e.to_string().contains("need every buffer of the call registered"), "{e}");
    assert_eq!(forced.choose_for(AllReduce, 64, 4, true, true).unwrap().algo, Direct);
    // Excluding them leaves the pick for plain buffers.
    assert_eq!(
        tuner(2, 1, "^direct,direct_oneshot", "", None).choose_for(AllReduce, 64, 4, true, true).unwrap().algo,
        tuner(2, 1, "", "", None).choose_for(AllReduce, 64, 4, true, false).unwrap().algo
    );
}

#[test]
fn ranks_with_a_core_each_take_the_direct_algorithms_from_a_few_hundred_bytes() {
    // Measured at 2 ranks on plain buffers in the host arena (see the model's comment):
    // FIFO one-shot to 64 B, direct one-shot at 512 B, two-shot from 4 KiB.
    let t = tuner(2, 1, "", "", None);
    for (bytes, algo) in [(8, OneShot), (64, OneShot), (512, DirectOneShot), (4096, Direct), (1 << 20, Direct)] {
        assert_eq!(t.choose_for(AllReduce, bytes, 4, true, true).unwrap().algo, algo, "{bytes} B");
    }
}

#[test]
fn oversubscribed_tiny_calls_on_registered_buffers_keep_the_fifo_one_shot() {
    // 4 ranks on 2 cores: the direct algorithms' two barriers wait for every rank's turn,
    // where the FIFO one-shot's waits overlap.
    let t = tuner(4, 1, "", "", None);
    for bytes in [4, 8, 64] {
        assert_eq!(t.choose_for(AllReduce, bytes, 4, true, true).unwrap().algo, OneShot, "{bytes} B");
    }
    // From a few KiB the direct two-shot's single copy wins.
    assert_eq!(t.choose_for(AllReduce, 4096, 4, true, true).unwrap().algo, Direct);
}

#[test]
fn ranks_sharing_cores_take_a_second_channel_for_large_calls_only() {
    // 4 ranks on 2 cores: two channels, the default there.
    assert_eq!(
        Config::default().resolve(64 * std::thread::available_parallelism().map_or(1, |n| n.get())).unwrap().nchannels,
        2
    );
    let t = tuner(4, 2, "", "", None);
    assert_eq!(t.choose(AllReduce, 1 << 20, 4, true).unwrap().nchannels, 1, "1 MiB");
    for bytes in [64 << 20, 256 << 20] {
        assert_eq!(t.choose(AllReduce, bytes, 4, true).unwrap().nchannels, 2, "{bytes} B");
    }
    // Ranks with a core each keep the cheap second channel of before.
    let t = tuner(2, 2, "", "", None);
    assert_eq!(t.choose(AllReduce, 64 << 20, 4, true).unwrap().nchannels, 2);
}

#[test]
fn gpu_ranks_take_the_cuda_constants_and_many_channels_for_large_calls() {
    // GPU ranks must not get the host's constants, which would give a large call two
    // channels where a GPU needs many.
    let cfg = Config::default().resolve_on(2, &Device::Cuda { ordinal: 0 }).unwrap();
    assert_eq!(cfg.nchannels, 32, "a GPU of its own");
    let capped = Config { max_ctas: Some(8), ..Config::default() }.resolve_on(2, &Device::Cuda { ordinal: 0 });
    assert_eq!(capped.unwrap().nchannels, 8, "within max_ctas");
    // Ranks sharing a GPU: the default within the CTAs each may hold; an explicit count kept.
    let within = |c: Config, budget| c.resolve_within(8, &Device::Cuda { ordinal: 0 }, Some(budget)).unwrap();
    assert_eq!(within(Config::default(), 16).nchannels, 16, "8 ranks on 132 SMs");
    assert_eq!(within(Config::default(), 66).nchannels, 64, "2 ranks sharing one");
    assert_eq!(within(Config { nchannels: Some(24), ..Config::default() }, 16).nchannels, 24, "explicit");
    assert_eq!(within(Config { min_ctas: Some(20), ..Config::default() }, 16).nchannels, 20, "min_ctas");
    let graph = Graph::uniform(2, cfg.nchannels);
    let plan = plan(&graph, &cfg, &Device::Cuda { ordinal: 0 }).unwrap();
    let t = from_plan(&plan, &graph, &cfg).unwrap();
    assert_eq!(t.topo.fingerprint, Topology::cuda(&graph).fingerprint);
    assert_ne!(t.topo.fingerprint, Topology::from_graph(&graph, 2).fingerprint, "host tables never apply");
    let big = t.choose(AllReduce, 64 << 20, 4, true).unwrap();
    // Every channel: on a GPU each adds bandwidth up to the most a rank may have.
    assert_eq!((big.algo, big.proto), (Ring, Protocol::Simple), "{big:?}");
    assert_eq!(big.nchannels, cfg.nchannels, "{big:?}");
    assert_eq!(t.choose(AllReduce, 8, 4, true).unwrap().nchannels, 1, "8 B");
}

#[test]
fn the_cuda_model_reproduces_the_h200_measurements() {
    // (ranks, algorithm, protocol, channels, bytes, measured us): out of place, on an H200
    // (gpu-check stages points, channels and direct, 7f87797, and channels of 89798c2 from
    // 48 channels on, the direct kernels specialized for the rank count; Topology::cuda's
    // comment).
    let measured = [
        (2, Ring, Protocol::Simple, 1, 8, 13.33),
        (4, Ring, Protocol::Simple, 1, 8, 33.95),
        (8, Ring, Protocol::Simple, 1, 8, 61.26),
        (8, Ring, Protocol::LL, 1, 8, 68.57),
        (8, OneShot, Protocol::Simple, 1, 8, 63.83),
        (8, Tree, Protocol::LL, 1, 8, 50.95),
        (2, Ring, Protocol::Simple, 1, 64 << 20, 4929.0),
        (2, Ring, Protocol::Simple, 8, 64 << 20, 699.6),
        (2, Ring, Protocol::Simple, 16, 64 << 20, 366.8),
        (4, Ring, Protocol::Simple, 16, 64 << 20, 472.7),
        (8, Ring, Protocol::Simple, 1, 64 << 20, 6870.0),
        (8, Tree, Protocol::Simple, 8, 64 << 20, 2004.0),
        (4, OneShot, Protocol::Simple, 1, 16 << 20, 5702.0),
        (2, Ring, Protocol::LL, 1, 4 << 20, 1927.0),
        (2, Ring, Protocol::LL, 8, 4 << 20, 283.3),
        (2, Ring, Protocol::LL128, 8, 16 << 20, 561.8),
        (2, Ring, Protocol::Simple, 8, 256 << 20, 2740.0),
        (2, Ring, Protocol::Simple, 16, 256 << 20, 1414.0),
        (2, Ring, Protocol::Simple, 32, 256 << 20, 778.0),
        (2, Ring, Protocol::Simple, 32, 128 << 20, 392.4),
        (2, Direct, Protocol::Simple, 32, 128 << 20, 229.2),
        (2, Direct, Protocol::Simple, 32, 8 << 20, 27.8),
        (2, DirectOneShot, Protocol::Simple, 32, 32 << 20, 180.4),
        (2, Ring, Protocol::Simple, 48, 256 << 20, 658.6),
        (2, Ring, Protocol::Simple, 64, 256 << 20, 589.0),
        (2, Direct, Protocol::Simple, 32, 256 << 20, 452.9),
        (4, Direct, Protocol::Simple, 32, 256 << 20, 734.1),
    ];
    for (n, algo, proto, nch, bytes, us) in measured {
        let topo = Topology::cuda(&Graph::uniform(n, 64));
        let model = model::time(&topo, &Constants::CUDA, AllReduce, algo, proto, nch, bytes).unwrap();
        assert!((model / us - 1.0).abs() < 0.3, "n={n} {algo}/{proto} x{nch} {bytes} B: {model:.1} us, measured {us}");
    }
}

#[test]
fn gpu_ranks_take_the_direct_kernels_on_registered_buffers_where_they_measured_faster() {
    // On registered buffers two-shot direct beats the ring from a few MiB (the CUDA
    // model's direct entries, docs/performance.md, "The GPU kernels"); plain buffers keep
    // the ring.
    let gpu = Device::Cuda { ordinal: 0 };
    let tuner = |cfg: Config| {
        let cfg = cfg.resolve_on(2, &gpu).unwrap();
        let graph = Graph::uniform(2, cfg.nchannels);
        from_plan(&plan(&graph, &cfg, &gpu).unwrap(), &graph, &cfg).unwrap()
    };
    let t = tuner(Config::default());
    for bytes in [8 << 20, 256 << 20] {
        let reg = t.choose_for(AllReduce, bytes, 4, true, true).unwrap();
        assert_eq!(reg.algo, Algorithm::Direct, "{bytes} B registered: {reg:?}");
        let plain = t.choose_for(AllReduce, bytes, 4, true, false).unwrap();
        assert!(!plain.algo.is_direct(), "{bytes} B plain: {plain:?}");
    }
    // Forced, direct runs registered buffers alone, with Simple, within the flags area's lines.
    let t = tuner(Config { algo: Some(Algorithm::Direct), ..Config::default() });
    for bytes in [8, 1 << 20, 256 << 20] {
        for coll in [AllReduce, AllGather, ReduceScatter, Broadcast, Reduce] {
            let reg = t.choose_for(coll, bytes, 4, true, true).unwrap();
            assert!(reg.algo == Algorithm::Direct && reg.proto == Protocol::Simple, "{coll} {bytes} B: {reg:?}");
            assert!(reg.nchannels <= jitccl_codegen::abi::SYM_CHANNELS, "{coll} {bytes} B: within the flags area");
            assert!(t.choose_for(coll, bytes, 4, true, false).is_err(), "{coll} {bytes} B plain, forced direct");
        }
    }
}

#[test]
fn wired_calls_take_an_algorithm_whose_kernel_carries_the_wire() {
    let t = tuner(4, 2, "", "", None);
    for bytes in sizes() {
        for direct in [false, true] {
            let c = t.for_wire(AllReduce, bytes, 4, direct, Wire::Bf16).unwrap();
            let carried = Wire::algorithms(AllReduce).contains(&c.algo) && (direct || !c.algo.is_direct());
            assert!(carried && c.proto == Protocol::Simple, "{bytes} B, direct {direct}: {c:?}");
            for coll in [ReduceScatter, AllGather, Broadcast, Reduce, SendRecv] {
                assert_eq!(t.for_wire(coll, bytes, 4, direct, Wire::Bf16).unwrap().algo, Ring, "{coll} {bytes} B");
            }
        }
    }
    // The overrides choose among the wire's algorithms; LL and one-shot carry none.
    let tree = tuner(4, 2, "allreduce:tree", "ll", None).for_wire(AllReduce, 1 << 20, 4, false, Wire::Bf16).unwrap();
    assert_eq!((tree.algo, tree.proto), (Tree, Protocol::Simple));
    assert_eq!(
        tuner(4, 2, "allreduce:direct", "", None).for_wire(AllReduce, 64, 4, true, Wire::Bf16).unwrap().algo,
        Direct
    );
    let oneshot = tuner(4, 2, "allreduce:oneshot", "", None).for_wire(AllReduce, 64, 4, false, Wire::Bf16).unwrap();
    assert!(matches!(oneshot.algo, Ring | Tree), "{oneshot:?}");
}

#[test]
fn a_wired_call_takes_its_wires_rows_and_an_exact_call_the_plain_ones() {
    let plain = Row { channels: Some(1), ..Row::every_size(AllReduce, Ring, Protocol::LL, Wire::Exact) };
    let int8 = Wire::Int8 { block: 64 };
    let wired = Row { algo: Tree, proto: Protocol::Simple, channels: Some(2), wire: int8, ..plain.clone() };
    let t = tuner(4, 4, "", "", Some(Table { rows: vec![plain, wired], ..Table::default() }));
    let c = t.for_wire(AllReduce, 1 << 20, 4, false, int8).unwrap();
    assert_eq!((c.algo, c.proto, c.nchannels), (Tree, Protocol::Simple, 2), "the int8 row");
    let exact = t.choose(AllReduce, 1 << 20, 4, true).unwrap();
    assert_eq!((exact.algo, exact.proto, exact.nchannels), (Ring, Protocol::LL, 1), "the plain row");
    // No row for bf16: the usual choice's algorithm (the plain row's ring), with Simple.
    let bf16 = t.for_wire(AllReduce, 1 << 20, 4, false, Wire::Bf16).unwrap();
    assert_eq!((bf16.algo, bf16.proto), (Ring, Protocol::Simple));
    // A 16-bit element's steps leave room for its partial sums in fp32.
    let half = t.for_wire(AllReduce, 1 << 20, 2, false, int8).unwrap();
    assert_eq!(half.chunk_elems, c.chunk_elems, "steps of as many elements as f32's");
}

/// Over the sockets' larger FIFOs, calls that reduce take the larger steps and calls that
/// only copy (AllGather, Broadcast, point-to-point and what runs in its rounds) the usual
/// ones; without copy slots (the usual FIFOs, or a plugin's larger ones) every call takes
/// its FIFO's steps, and copy slots never exceed the FIFO's.
#[test]
fn over_the_sockets_copies_keep_the_usual_steps() {
    let usual = Config::default().resolve(2).unwrap();
    let large = usual.with_network_fifos();
    let step = |cfg: &crate::config::Resolved, copies: Option<[usize; NPROTOS]>, coll: Collective| {
        let t = Tuner::new(Topology::host(2, 1, 2), Constants::HOST, None, cfg).with_copy_slots(copies);
        t.choose(coll, 64 << 20, 4, true).unwrap().chunk_elems as usize * 4
    };
    let (small_step, large_step) = (usual.slot_bytes[0], large.slot_bytes[0]);
    assert!(large_step > small_step);
    for coll in [AllReduce, ReduceScatter, Reduce, AllGather, Broadcast, SendRecv] {
        assert_eq!(step(&usual, None, coll), small_step, "{coll}, the usual FIFOs");
        assert_eq!(step(&large, None, coll), large_step, "{coll} over a plugin");
        let socket = if coll.reduces() { large_step } else { small_step };
        assert_eq!(step(&large, Some(usual.slot_bytes), coll), socket, "{coll} over the sockets");
        assert_eq!(step(&usual, Some(large.slot_bytes), coll), small_step, "{coll}: within the FIFO's slots");
    }
}
