//! The cost model: time = latency + bytes / bandwidth for each (collective, algorithm,
//! protocol, channels), NCCL's shape (nccl:src/graph/tuning.cc) over jitccl's algorithms.
//!
//! - latency = base[algo] + hops x hop latency x hop_factor[algo] x proto_lat[proto], where
//!   hops count the steps a call waits through in sequence (ring allreduce 2(n-1); tree
//!   2 x depth; one-shot n-1, one wait per peer; recursive doubling log2(n), 2 more where n
//!   is no power of two) and the hop latency comes from the topology (inside a node or
//!   between nodes); hops inside a node between ranks that have a core each take
//!   `proto_lat_spin` instead. A hop between nodes costs the
//!   network's latency x proto_lat[proto] (no algorithm factor); across nodes the ring
//!   allreduce counts 2 x nodes of its hops there (NCCL's count), the tree 2 x the depth of
//!   the nodes' tree (chains inside them), one-shot every message to another node's rank,
//!   recursive doubling each of its phases in which a pair crosses nodes.
//! - bandwidth = the channels' bandwidth x proto_bw[proto] x algo_bw[algo], where the
//!   channels' is min(channels x per-channel bandwidth, the rank's cap) on the host and
//!   approaches the cap gradually on GPUs ([`Scaling`]), turned into algorithm bandwidth by how many times each byte crosses
//!   a link (ring allreduce 2(n-1)/n, tree 2, one-shot n-1 times the contention, recursive
//!   doubling once per hop times the contention).
//! - each channel past the first costs `chan_lat` (a worker per channel to wake and join).
//!
//! # Host constants
//! [`Constants::HOST`] and the `HOST_*` values are fitted to `jitccl perf` sweeps of every
//! algorithm and protocol at 2 to 8 rank processes on a 2-core machine; how they were
//! measured, the fit and the checks against `jitccl tune` are in the repository's
//! docs/performance.md ("Host cost model and tuning tables"). What shapes them:
//! - a hop costs far more once ranks outnumber cores, when it waits for the OS to run the
//!   peer, than while every rank has a core and its waits spin;
//! - between ranks that spin, an LL or LL128 hop is one cache line handed over (data and
//!   flag together; LL128's flag ends the first 64 bytes of its line, so for steps up to 56
//!   bytes) where Simple's is two in sequence (the tail counter, then the data): half the
//!   hop latency. Collectives that only move data keep Simple's hop factors, since LL128
//!   brings them no gain;
//! - the direct algorithms (registered buffers, one host) pay two barriers. A barrier hands
//!   over one flag line while every rank has a core (half a Simple hop, as LL's) and costs
//!   more than a hop once ranks outnumber cores (the last rank to arrive waits for the
//!   others' turns). A byte crossing to a peer is one load or store instead of a FIFO's
//!   store and load, so they reach twice the FIFO's bus bandwidth (one-shot: its n-fold
//!   reads, like the FIFO one-shot's); one-shot's base latency is the FIFO one-shot's,
//!   two-shot's adds the stores into the peers' lines;
//! - bandwidth falls past the cache for every algorithm alike, which does not change the
//!   ranking, so the in-cache figure serves;
//! - recursive doubling's swaps inside a host cost far more than one-shot's hops: each
//!   waits for the one rank it swaps with to run, where one-shot takes its peers' steps in
//!   whatever order they come. Its factor keeps it behind the tree on one host at every
//!   rank count; it serves calls between hosts, where a hop is a network message and it
//!   sends fewest.
//!
//! The constants do not carry to every CPU: a table from `jitccl tune` overrides the picks
//! where another machine measures differently.

use std::fmt;

use jitccl_codegen::abi::NPROTOS;
use jitccl_codegen::{Algorithm, Collective, Protocol};

use crate::graph::Graph;

/// What runs the ranks' kernels, as far as the model tells machines apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    /// CPUs, `cores` per machine.
    Host { cores: usize },
    /// CUDA GPUs.
    Gpus,
}

impl Machine {
    /// The model of `graph`'s ranks on this machine: its topology and constants.
    pub fn model(self, graph: &Graph) -> (Topology, Constants) {
        match self {
            Machine::Host { cores } => (Topology::from_graph(graph, cores), Constants::HOST),
            Machine::Gpus => (Topology::cuda(graph), Constants::CUDA),
        }
    }

    /// The model of `nranks` ranks on one machine of this kind, `nchannels` channels each
    /// (what `jitccl tune` measures).
    pub fn one_node(self, nranks: usize, nchannels: usize) -> (Topology, Constants) {
        self.model(&Graph::uniform(nranks, nchannels))
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Machine::Host { cores } => write!(f, "host constants for {cores} cores"),
            Machine::Gpus => f.write_str("GPU constants"),
        }
    }
}

/// What the model knows of the machine: from the graph search, or [`Topology::host`].
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    pub nranks: usize,
    pub nnodes: usize,
    /// Channels the graph built: the most one call may use.
    pub nchannels: usize,
    /// Bus bandwidth of one channel inside a node, GB/s (Simple).
    pub bw_intra: f64,
    /// Bus bandwidth of one channel between nodes, GB/s.
    pub bw_inter: f64,
    /// Most bus bandwidth one rank reaches over all its channels, GB/s.
    pub bw_rank: f64,
    /// How the rank's bandwidth grows with channels towards `bw_rank`.
    pub scaling: Scaling,
    /// Latency of one hop (a step handed to the next rank) inside a node, us.
    pub lat_intra: f64,
    /// Latency of one hop between nodes, us.
    pub lat_inter: f64,
    /// Cost of each channel past the first, us.
    pub chan_lat: f64,
    /// How many ranks share one core's work when all of them compute at once (>= 1):
    /// what slows one-shot's n-way reduction when ranks outnumber cores.
    pub contention: f64,
    /// Identifies the machine and graph (not the rank count), for tuning tables.
    pub fingerprint: u64,
}

/// How a rank's bus bandwidth grows with its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaling {
    /// Each channel adds its whole bandwidth up to the rank's cap: on the host a channel is
    /// a worker with a core of its own.
    Capped,
    /// Channels share one device's memory system, so each adds less as the rank nears its
    /// cap (1 / bus = 1 / (channels x per channel) + 1 / cap): a GPU's CTAs, where a rank
    /// kept gaining up to the most channels it may have.
    Saturating,
}

impl Scaling {
    /// Bus bandwidth of `nch` channels of `per_channel` each, against a rank's `cap`.
    fn bus(self, nch: usize, per_channel: f64, cap: f64) -> f64 {
        let linear = nch.max(1) as f64 * per_channel;
        match self {
            Scaling::Capped => linear.min(cap),
            Scaling::Saturating => 1.0 / (1.0 / linear + 1.0 / cap),
        }
    }
}

/// Per-algorithm and per-protocol factors on the topology's latencies and bandwidths.
#[derive(Debug, Clone, PartialEq)]
pub struct Constants {
    /// Fixed latency per call, us, by algorithm (Ring, Tree, OneShot, Direct,
    /// DirectOneShot, RecursiveDoubling).
    pub base: [f64; 6],
    /// Hop latency factor by algorithm.
    pub hop_factor: [f64; 6],
    /// Fraction of the bus bandwidth each algorithm reaches.
    pub algo_bw: [f64; 6],
    /// Hop latency factor by protocol (Simple, LL, LL128).
    pub proto_lat: [f64; NPROTOS],
    /// The same for hops inside a node while every rank has a core (its waits spin).
    pub proto_lat_spin: [f64; NPROTOS],
    /// Fraction of Simple's bandwidth each protocol reaches.
    pub proto_bw: [f64; NPROTOS],
}

impl Constants {
    /// Measured on the host target (see the module comment).
    pub const HOST: Constants = Constants {
        base: [0.1, 0.1, 0.1, 0.2, 0.1, 0.1],
        hop_factor: [1.0, 1.64, 0.87, 1.0, 1.0, 4.0],
        algo_bw: [1.0, 0.68, 0.47, 2.0, 0.94, 0.47],
        proto_lat: [1.0, 1.15, 1.85],
        proto_lat_spin: [1.0, 0.5, 0.5],
        proto_bw: [1.0, 0.125, 0.5],
    };

    /// Fitted to an H200's runs (see [`Topology::cuda`]; ranks as threads sharing it,
    /// calls queued back to back): every algorithm's base is a launch, one-shot's longer;
    /// tree and one-shot hops cost more than the ring's, LL's and LL128's more than
    /// Simple's; tree and one-shot reach less of the ring's bandwidth per channel, LL much
    /// less than Simple (one line per thread at a time) and LL128 more than LL (eight
    /// threads a line, two lines in flight). The direct algorithms on registered buffers:
    /// two-shot above the ring's busbw (a byte is loaded and stored once per rank, where the
    /// ring also moves it through a FIFO), one-shot below it (each rank reads every input)
    /// but level with it at small sizes. The runs behind the values: docs/performance.md,
    /// "The GPU kernels". Recursive doubling has no GPU figures to fit: its infinite base
    /// keeps the tuner from picking it there (`JITCCL_ALGO` can still ask for it).
    pub const CUDA: Constants = Constants {
        base: [2.75, 2.75, 3.75, 2.75, 2.75, f64::INFINITY],
        hop_factor: [1.0, 1.5, 1.89, 1.0, 1.0, 1.89],
        algo_bw: [1.0, 0.65, 0.67, 1.85, 0.63, 0.67],
        proto_lat: [1.0, 1.11, 1.37],
        proto_lat_spin: [1.0, 1.11, 1.37],
        proto_bw: [1.0, 0.16, 0.29],
    };
}

/// Host hop latency while every rank has a core, and once they share cores, us.
const HOST_HOP_SPIN: f64 = 0.1;
const HOST_HOP_SWITCH: f64 = 2.06;
const HOST_BW: f64 = 8.6;
const HOST_SECOND_CHANNEL: f64 = 0.5;
const HOST_CHAN_LAT: f64 = 20.0;
/// ... once ranks outnumber cores: the second channel's worker waits for a core, so a
/// second channel starts paying only at a few MiB.
const HOST_CHAN_LAT_SWITCH: f64 = 200.0;
/// Hops one barrier of the direct algorithms costs once ranks outnumber cores, and while
/// every rank has a core (a flag line handed over, as an LL hop is).
const HOST_BARRIER_SWITCH: f64 = 1.5;
const HOST_BARRIER_SPIN: f64 = 0.5;
/// Hop latency through the network transport (TCP, moved by the waiting kernels at both
/// ends), us: fitted as half of an 8-byte ring AllReduce at 2 rank processes over the
/// sockets, over loopback and between two network namespaces (docs/performance.md, "Beside
/// OpenMPI and Gloo across hosts", where the algorithms' crossovers it moves are measured).
const HOST_NET_HOP: f64 = 20.0;
/// Bumped when the host constants change: tables tuned against older ones are stale.
const HOST_MODEL_VERSION: u64 = 10;
/// GPU ranks: a hop inside a node (us), one channel's bus bandwidth and one rank's over
/// all channels (GB/s), and each channel past the first (us): see [`Topology::cuda`].
const CUDA_HOP: f64 = 4.54;
const CUDA_BW: f64 = 13.5;
const CUDA_BW_RANK: f64 = 970.0;
const CUDA_CHAN_LAT: f64 = 0.1;
/// Bumped when the CUDA constants change (2: the 16-byte Simple copy; 3: coalesced LL128;
/// 4: the direct algorithms, unmeasured; 5: the direct algorithms as an H200 ran them; 6: the
/// Simple copy's packs in registers, 32 channels; 7: channels saturating towards the rank's
/// cap, 64 channels, kernels specialized for the rank count).
const CUDA_MODEL_VERSION: u64 = 7;

impl Topology {
    /// Today's host case: one node, shared memory, `nranks` processes or threads on
    /// `cores` cores, `nchannels` channels.
    pub fn host(nranks: usize, nchannels: usize, cores: usize) -> Topology {
        let (nranks, cores) = (nranks.max(1), cores.max(1));
        let oversubscribed = nranks > cores;
        Topology {
            nranks,
            nnodes: 1,
            nchannels: nchannels.max(1),
            bw_intra: HOST_BW,
            bw_inter: HOST_BW,
            bw_rank: HOST_BW * (1.0 + HOST_SECOND_CHANNEL),
            scaling: Scaling::Capped,
            lat_intra: if oversubscribed { HOST_HOP_SWITCH } else { HOST_HOP_SPIN },
            lat_inter: HOST_HOP_SWITCH,
            chan_lat: if oversubscribed { HOST_CHAN_LAT_SWITCH } else { HOST_CHAN_LAT },
            contention: (nranks as f64 / cores as f64).max(1.0),
            fingerprint: fnv1a(&[0x686f7374, HOST_MODEL_VERSION, cores as u64]),
        }
    }

    /// The host case for a searched graph: its hosts, its channels, and between hosts its
    /// bandwidth (the NICs' speed) and the network transport's hop latency; `cores` are
    /// one machine's.
    pub fn from_graph(graph: &Graph, cores: usize) -> Topology {
        Topology::host(graph.nranks, graph.nchannels(), cores).across_hosts(graph)
    }

    /// `self` (one machine's figures) over `graph`'s hosts: between them, the NICs' speed
    /// where the graph knows it and the network transport's hop latency, plus the
    /// network's own where its plugin reports one.
    fn across_hosts(mut self, graph: &Graph) -> Topology {
        self.nnodes = graph.nhosts.clamp(1, self.nranks);
        if self.nnodes > 1 {
            if graph.bw_inter > 0.0 {
                self.bw_inter = graph.bw_inter.min(self.bw_intra);
            }
            self.lat_inter = HOST_NET_HOP + graph.lat_inter.max(0.0);
        }
        self
    }

    /// Ranks on CUDA GPUs over a searched graph (between hosts, the network as for the
    /// host). Fitted to `jitccl perf all_reduce --target cuda` on one H200 holding 1-8 ranks
    /// (threads of one process), each choice forced by a one-row table, 8 B to 256 MiB
    /// (`tools/gpu-check.sh run points channels direct` measures them again): a small ring
    /// AllReduce is a launch plus a hop per step (2, 6 and 14 hops at 2, 4 and 8 ranks), and
    /// bus bandwidth grows with channels (a CTA each), less with each towards `CUDA_BW_RANK`
    /// ([`Scaling::Saturating`]), so more channels cost a small call nothing measurable (docs/performance.md, "The GPU
    /// kernels"). Ranks on separate GPUs (NVLink, PCIe) have not run: their hops and
    /// per-channel bandwidth may differ; `jitccl tune` measures the machine at hand.
    pub fn cuda(graph: &Graph) -> Topology {
        Topology {
            nranks: graph.nranks.max(1),
            nnodes: 1,
            nchannels: graph.nchannels().max(1),
            bw_intra: CUDA_BW,
            bw_inter: CUDA_BW,
            bw_rank: CUDA_BW_RANK,
            scaling: Scaling::Saturating,
            lat_intra: CUDA_HOP,
            lat_inter: CUDA_HOP,
            chan_lat: CUDA_CHAN_LAT,
            contention: 1.0,
            fingerprint: fnv1a(&[0x63756461, CUDA_MODEL_VERSION]),
        }
        .across_hosts(graph)
    }

    /// The model's fastest (algorithm, protocol, channels) for `coll` over `bytes` with a
    /// commutative op and nothing overridden, as a communicator on this topology with
    /// constants `k` picks without a tuning table; `direct`: every rank addresses the
    /// buffers (registered, or plain ones in the host arenas).
    pub fn fastest(&self, k: &Constants, coll: Collective, bytes: usize, direct: bool) -> Option<Estimate> {
        let algos: Vec<Algorithm> = coll.algorithms().iter().copied().filter(|a| direct || !a.is_direct()).collect();
        best(self, k, coll, &algos, Protocol::ALL, bytes)
    }

    /// The estimated time (us) of `coll` over `bytes` with the choice fixed; `None` where
    /// the collective has no such algorithm.
    pub fn estimate(
        &self, k: &Constants, coll: Collective, algo: Algorithm, proto: Protocol, nch: usize, bytes: usize,
    ) -> Option<f64> {
        time(self, k, coll, algo, proto, nch, bytes)
    }

    /// The fingerprint as tables and cache file names show it.
    pub fn fingerprint_hex(&self) -> String {
        format!("{:016x}", self.fingerprint)
    }
}

/// FNV-1a over words: stable across processes and builds (unlike std's hasher).
fn fnv1a(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn algo_index(a: Algorithm) -> usize {
    match a {
        Algorithm::Ring => 0,
        Algorithm::Tree => 1,
        Algorithm::OneShot => 2,
        Algorithm::Direct => 3,
        Algorithm::DirectOneShot => 4,
        Algorithm::RecursiveDoubling => 5,
    }
}

/// Depth of a binary tree over `n` members (heap layout, as graph::tree builds it).
fn tree_depth(n: usize) -> usize {
    (usize::BITS - 1 - n.max(1).leading_zeros()) as usize
}

/// (hops inside a host, hops between hosts) in the chain of recursive doubling's phases over
/// `n` ranks, rank r on host r / `ppn` (launchers number ranks host by host): the pairing of
/// the first 2(n - p) ranks there and back where n is not a power of two p, and a swap per
/// bit of the positions of the p ranks that take part (templates/algo's file). A phase is a
/// network hop where any of its pairs crosses hosts.
fn doubling_hops(n: usize, ppn: usize) -> (usize, usize) {
    let p = 1usize << tree_depth(n);
    let paired = 2 * (n - p);
    let host = |rank: usize| rank / ppn.max(1);
    let rank_at = |pos: usize| if pos < paired / 2 { 2 * pos + 1 } else { pos + paired / 2 };
    let mut crossing = Vec::new();
    if paired > 0 {
        let crosses = (0..paired / 2).any(|i| host(2 * i) != host(2 * i + 1));
        crossing.extend([crosses, crosses]);
    }
    crossing.extend((0..tree_depth(n)).map(|k| (0..p).any(|pos| host(rank_at(pos)) != host(rank_at(pos ^ (1 << k))))));
    let inter = crossing.iter().filter(|&&c| c).count();
    (crossing.len() - inter, inter)
}

/// A candidate and its estimated time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub nchannels: usize,
    /// Estimated time of one call, us.
    pub us: f64,
}

/// The fastest candidate among `algos` x `protos` x 1..=the topology's channels; ties go
/// to the earlier candidate, then to fewer channels.
pub(crate) fn best(
    t: &Topology, k: &Constants, coll: Collective, algos: &[Algorithm], protos: &[Protocol], bytes: usize,
) -> Option<Estimate> {
    let mut best: Option<Estimate> = None;
    for &algo in algos {
        for &proto in protos {
            for nchannels in 1..=t.nchannels.max(1) {
                let Some(us) = time(t, k, coll, algo, proto, nchannels, bytes) else { continue };
                if best.is_none_or(|b| us < b.us) {
                    best = Some(Estimate { algo, proto, nchannels, us });
                }
            }
        }
    }
    best
}

/// Estimated time in us of `coll` over `bytes` (the caller's per-call byte count) with
/// `algo`, `proto` and `nch` channels; `None` where the collective has no such algorithm.
pub fn time(
    t: &Topology, k: &Constants, coll: Collective, algo: Algorithm, proto: Protocol, nch: usize, bytes: usize,
) -> Option<f64> {
    if !coll.algorithms().contains(&algo) {
        return None;
    }
    let n = t.nranks.max(1);
    let nodes = t.nnodes.clamp(1, n);
    let ppn = n.div_ceil(nodes);
    let a = algo_index(algo);
    let p = proto as usize;
    // (intra-node hops, inter-node hops, link crossings per byte of the call).
    // Direct algorithms need every rank on one host; they wait through two barriers.
    if algo.is_direct() && (nodes > 1 || proto != Protocol::Simple) {
        return None;
    }
    let (intra, inter, per_byte) = match (coll, algo) {
        (Collective::AllReduce, Algorithm::Direct) => (2, 0, 2.0 * (n - 1) as f64 / n as f64),
        (Collective::AllReduce, Algorithm::DirectOneShot) => (2, 0, (n - 1) as f64 * t.contention.max(1.0)),
        (Collective::AllGather | Collective::ReduceScatter, Algorithm::Direct) => (2, 0, (n - 1) as f64 / n as f64),
        (Collective::Broadcast | Collective::Reduce, Algorithm::Direct) => (2, 0, 1.0),
        // Between nodes NCCL's count: a small call's steps wait on each other around the
        // ring, so its chain of steps crosses the network about twice per node.
        (Collective::AllReduce, Algorithm::Ring) => {
            let inter = if nodes > 1 { (2 * nodes).min(2 * (n - 1)) } else { 0 };
            (2 * (n - 1) - inter, inter, 2.0 * (n - 1) as f64 / n as f64)
        }
        // Inside a lone node the tree is as deep as its binary layout; across nodes it is a
        // chain inside each node under a binary tree of the nodes' heads (graph::trees).
        (Collective::AllReduce, Algorithm::Tree) => {
            let intra = if nodes > 1 { 2 * (ppn - 1) } else { 2 * tree_depth(ppn) };
            (intra, 2 * tree_depth(nodes), 2.0)
        }
        // Every rank's message to every rank of another node leaves through its node's
        // network transport, one after another: ppn x (n - ppn) of them.
        (Collective::AllReduce, Algorithm::OneShot) => {
            (ppn - 1, ppn * (n - ppn), (n - 1) as f64 * t.contention.max(1.0))
        }
        // Its phases in sequence (see `doubling_hops`); each moves the whole call.
        (Collective::AllReduce, Algorithm::RecursiveDoubling) => {
            let (intra, inter) = doubling_hops(n, ppn);
            (intra, inter, (intra + inter) as f64 * t.contention.max(1.0))
        }
        (Collective::AllGather | Collective::ReduceScatter, _) => (n - nodes, nodes - 1, (n - 1) as f64 / n as f64),
        (Collective::Broadcast | Collective::Reduce, _) => (n - nodes, nodes - 1, 1.0),
        (Collective::SendRecv, _) => (1, 0, 1.0),
        // One launch, two barriers; a byte crosses once (a rank's own block is copied too).
        (Collective::AllToAll | Collective::Gather | Collective::Scatter, Algorithm::Direct) => {
            (2, 0, (n - 1) as f64 / n as f64)
        }
        // Point-to-point rounds (the ring's place): a launch and a hop per peer, in turn.
        (Collective::AllToAll | Collective::Gather | Collective::Scatter, _) => {
            (2 * (n - nodes), 2 * (nodes - 1), (n - 1) as f64 / n as f64)
        }
    };
    // Rounds pay a launch each. (On the host they run as one batch launch whose exchanges
    // overlap, `enqueue::batch`: this overstates them there, which only ever favours the
    // direct kernel on registered buffers of one host.)
    let launches = if coll.in_rounds() && !algo.is_direct() { n } else { 1 };
    let hop = |lat: f64, proto_lat: f64| lat * k.hop_factor[a] * proto_lat;
    // Collectives that only move data gained nothing from LL128's shorter hop (ring
    // Broadcast and AllGather at 2 ranks ran slower with it than with Simple at small sizes).
    let intra_lat = if t.contention > 1.0 || !coll.reduces() { k.proto_lat[p] } else { k.proto_lat_spin[p] };
    // A barrier waits for the last rank to arrive: longer than a hop once ranks take
    // turns on the cores.
    let barrier = match (algo.is_direct(), t.contention > 1.0) {
        (false, _) => 1.0,
        (true, true) => HOST_BARRIER_SWITCH,
        (true, false) => HOST_BARRIER_SPIN,
    };
    // A hop between nodes is the network's: the algorithm's own work per hop (its hop
    // factor, fitted inside a node) is small beside it.
    let latency = launches as f64 * k.base[a]
        + intra as f64 * barrier * hop(t.lat_intra, intra_lat)
        + inter as f64 * t.lat_inter * k.proto_lat[p]
        + nch.saturating_sub(1) as f64 * t.chan_lat;
    let per_channel = if nodes > 1 { t.bw_inter } else { t.bw_intra };
    let bus = t.scaling.bus(nch, per_channel, t.bw_rank) * k.proto_bw[p] * k.algo_bw[a];
    if n == 1 {
        return Some(latency);
    }
    if bus <= 0.0 {
        return None;
    }
    // GB/s is 1000 bytes per us.
    Some(latency + bytes as f64 * per_byte / (bus * 1000.0))
}

#[cfg(test)]
mod tests;
