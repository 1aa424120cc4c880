use super::*;

fn t(coll: Collective, algo: Algorithm, n: usize, bytes: usize) -> f64 {
    time(&Topology::host(n, 1, 2), &Constants::HOST, coll, algo, Protocol::Simple, 1, bytes).unwrap()
}

#[test]
fn time_grows_with_size_and_hops() {
    for &algo in Collective::AllReduce.algorithms() {
        for n in [2, 3, 4, 8] {
            let mut last = 0.0;
            for shift in 0..28 {
                let now = t(Collective::AllReduce, algo, n, 1 << shift);
                assert!(now > last && now.is_finite(), "{algo} n={n} 2^{shift}: {now} after {last}");
                last = now;
            }
        }
    }
    assert!(t(Collective::AllReduce, Algorithm::Ring, 8, 8) > t(Collective::AllReduce, Algorithm::Ring, 3, 8));
}

#[test]
fn invalid_algorithms_have_no_time() {
    let topo = Topology::host(4, 1, 2);
    assert!(time(&topo, &Constants::HOST, Collective::Broadcast, Algorithm::Tree, Protocol::Simple, 1, 8).is_none());
    assert!(time(&topo, &Constants::HOST, Collective::AllGather, Algorithm::OneShot, Protocol::LL, 1, 8).is_none());
}

#[test]
fn fingerprints_are_stable_and_name_the_cores() {
    assert_eq!(Topology::host(2, 1, 2).fingerprint, Topology::host(8, 4, 2).fingerprint);
    assert_ne!(Topology::host(2, 1, 2).fingerprint, Topology::host(2, 1, 4).fingerprint);
    assert_eq!(Topology::host(2, 1, 2).fingerprint_hex().len(), 16);
}

#[test]
fn a_graph_over_two_hosts_costs_network_hops() {
    let one = Graph::uniform(4, 2);
    let two = Graph { nhosts: 2, bw_inter: 1.25, ..Graph::uniform(4, 2) };
    let (t1, t2) = (Topology::from_graph(&one, 4), Topology::from_graph(&two, 4));
    assert_eq!((t1.nnodes, t1.nchannels, t1.nranks), (1, 2, 4));
    assert_eq!((t2.nnodes, t2.bw_inter, t2.lat_inter), (2, 1.25, HOST_NET_HOP));
    let ring = |t: &Topology, bytes| {
        time(t, &Constants::HOST, Collective::AllReduce, Algorithm::Ring, Protocol::Simple, 1, bytes).unwrap()
    };
    // Four of the ring's six hops count as crossing hosts (twice per host, as NCCL counts
    // them); big messages run at the NIC's speed.
    let hops = 4.0 * (HOST_NET_HOP - t1.lat_intra);
    assert!((ring(&t2, 8) - ring(&t1, 8) - hops).abs() < 0.01);
    assert!(ring(&t2, 1 << 26) > 5.0 * ring(&t1, 1 << 26));
    let fastest = |direct| t1.fastest(&Constants::HOST, Collective::AllReduce, 1 << 26, direct).map(|e| e.algo);
    assert_eq!(fastest(false), Some(Algorithm::Ring));
    assert_eq!(fastest(true), Some(Algorithm::Direct), "peers' buffers addressed directly");
}

/// Across hosts a small AllReduce leaves the ring: recursive doubling where its phases cross
/// hosts fewer times than the tree's hops do (its first swap stays inside hosts of two), the
/// tree where they do not (hosts of three, whose pairing crosses), one-shot with a rank on
/// each of two hosts (one message each way, level with recursive doubling's one swap); and
/// the ring once the size is large (the others move the bytes more times).
#[test]
fn small_calls_across_hosts_leave_the_ring() {
    let fastest = |hosts, per_host, bytes| across_hosts(hosts, per_host, 2, bytes);
    for (hosts, per_host, small) in
        [(2, 2, Algorithm::RecursiveDoubling), (4, 2, Algorithm::RecursiveDoubling), (2, 3, Algorithm::Tree)]
    {
        for bytes in [8, 4096] {
            assert_eq!(fastest(hosts, per_host, bytes), small, "{hosts}x{per_host}, {bytes} B");
        }
        assert_eq!(fastest(hosts, per_host, 64 << 20), Algorithm::Ring, "{hosts}x{per_host}, 64 MiB");
    }
    assert_eq!(fastest(2, 1, 8), Algorithm::OneShot);
    assert_eq!(fastest(4, 1, 8), Algorithm::RecursiveDoubling);
}

/// The host model's AllReduce algorithm for `hosts` x `per_host` ranks on `nch` channels.
fn across_hosts(hosts: usize, per_host: usize, nch: usize, bytes: usize) -> Algorithm {
    let graph = Graph { nhosts: hosts, ..Graph::uniform(hosts * per_host, nch) };
    Topology::from_graph(&graph, 2).fastest(&Constants::HOST, Collective::AllReduce, bytes, false).unwrap().algo
}

/// Where the algorithms cross over between hosts over the sockets, as measured between
/// network namespaces (docs/performance.md, "Beside OpenMPI and Gloo across hosts"): one
/// rank a host leaves one-shot for the ring by 256 KiB; four hosts and two of two ranks take
/// the tree at tens of KiB and the ring by 256 KiB.
#[test]
fn mid_sizes_across_hosts_take_the_measured_algorithm() {
    let want = [
        (2, 1, 1, 8, Algorithm::OneShot),
        (2, 1, 1, 256 << 10, Algorithm::Ring),
        (4, 1, 2, 64 << 10, Algorithm::Tree),
        (4, 1, 2, 256 << 10, Algorithm::Ring),
        (2, 2, 2, 32 << 10, Algorithm::Tree),
        (2, 2, 2, 256 << 10, Algorithm::Ring),
    ];
    for (hosts, per_host, nch, bytes, algo) in want {
        assert_eq!(across_hosts(hosts, per_host, nch, bytes), algo, "{hosts}x{per_host}, {bytes} B");
    }
}

/// Recursive doubling has not run on a GPU: the GPU constants never pick it, on one host or
/// across hosts.
#[test]
fn gpus_never_pick_recursive_doubling() {
    for (hosts, per_host) in [(1, 4), (1, 8), (4, 1), (2, 2)] {
        let graph = Graph { nhosts: hosts, ..Graph::uniform(hosts * per_host, 2) };
        for bytes in [8, 4096, 1 << 20] {
            let e = Topology::cuda(&graph).fastest(&Constants::CUDA, Collective::AllReduce, bytes, false).unwrap();
            assert_ne!(e.algo, Algorithm::RecursiveDoubling, "{hosts}x{per_host}, {bytes} B");
        }
    }
}

#[test]
fn tree_depth_matches_the_heap_layout() {
    assert_eq!([1, 2, 3, 4, 7, 8, 9].map(tree_depth), [0, 1, 1, 2, 2, 3, 3]);
}

/// Recursive doubling's chain: a swap per bit of the positions, and the pairing there and
/// back where n is no power of two; a phase crosses hosts where any of its pairs does
/// (ranks numbered host by host).
#[test]
fn recursive_doubling_counts_its_phases_and_their_crossings() {
    assert_eq!(doubling_hops(1, 1), (0, 0));
    assert_eq!(doubling_hops(4, 4), (2, 0));
    assert_eq!(doubling_hops(4, 1), (0, 2));
    // The first swap inside each host, the second across.
    assert_eq!(doubling_hops(4, 2), (1, 1));
    assert_eq!(doubling_hops(8, 2), (1, 2));
    assert_eq!(doubling_hops(6, 6), (4, 0));
    // Pairs (0, 1) and (2, 3) inside hosts of two; both swaps cross.
    assert_eq!(doubling_hops(6, 2), (2, 2));
    // With hosts of three the pair (2, 3) crosses too.
    assert_eq!(doubling_hops(6, 3), (0, 4));
}
