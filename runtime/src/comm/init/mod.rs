//! Creating communicators: all ranks in this process (`init_all`, in `threads`), or one
//! rank of a group of processes (bootstrap from a unique id, a store, JITCCL_COMM_ID or the
//! launcher's environment, in `entry`; then agreement on the configuration), in blocking
//! mode on the caller's thread, else on the new handle's progress thread. Either way:
//! every rank's receive segment, the graph, each peer's transport from the transport
//! table, the connectors. A process rank that dies or fails before every rank has finished
//! fails the others at once, naming it (the bootstrap's roots watch; `explain` extends that
//! to the waits outside the bootstrap).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use jitccl_codegen::abi::{NPROTOS, STEPS};

use crate::affinity::{self, CpuSet};
use crate::bootstrap::{test_hook, Bootstrap, BootstrapConfig, UniqueId};
use crate::comm::lifecycle::{Cell, Handle};
use crate::comm::peer_arenas;
use crate::comm::progress::Progress;
use crate::comm::{Comm, CommInner};
use crate::config::{Config, Resolved, WireLocal};
use crate::device::Device;
use crate::enqueue::{self, Group, Reach};
use crate::error::{invalid, Error, Result};
use crate::fault::{Board, Watch};
use crate::graph::{self, GlobalSystem, Graph, SearchParams};
use crate::netplugin::{self, Network};
use crate::store::Server;
use crate::stream::{Executor, Failure, Tables};
use crate::topo::System;
use crate::transport::connect::{connect, RankConns};
use crate::transport::cuda_ipc::{self, DeviceSegment};
use crate::transport::layout::Layout;
use crate::transport::net::plugin::{self, Placing, Plan};
use crate::transport::net::{tls_for_peers, tls_of, Activity, NetListener, Proxy};
use crate::transport::shm::ShmSegment;
use crate::transport::{self, AttachCtx, Endpoint};
use crate::tune::{self, Tuner};

mod entry;
mod threads;

/// What the connectors point into: the proxy (if any peer is over the network; declared
/// first so it stops before the memory goes), the peers' segments as mapped here (shared
/// memory, device FIFOs or local shadows), and this rank's own (on a GPU, its device FIFOs
/// too, and its shared segment mapped into the GPU until then).
struct Segments {
    _watch: Option<Watch>,
    _proxy: Option<Proxy>,
    _attached: Vec<Box<dyn Send + Sync>>,
    _device: Option<DeviceSegment>,
    _own: ShmSegment,
}

impl Comm {
    /// A handle on a finished rank state; nonblocking per its configuration.
    pub(crate) fn from_inner(inner: CommInner) -> Comm {
        let (rank, nranks) = (inner.enq.group.rank, inner.enq.group.nranks);
        let cfg = &inner.enq.cfg;
        let (device, name, timeout) = (inner.enq.device.clone(), cfg.comm_name.clone(), cfg.timeout);
        let progress = (!inner.enq.cfg.blocking).then(Progress::default);
        let cell = Cell::default();
        let _ = cell.inner.set(Arc::new(inner));
        Comm { h: Arc::new(Handle { rank, nranks, device, name, timeout, cell: Arc::new(cell), progress }) }
    }

    /// Creates rank `rank` of `nranks` with `init` (given its abort flag): on this thread in
    /// blocking mode; else on the new handle's progress thread, returning the handle at once.
    pub(crate) fn start_init(
        config: &Config, rank: usize, nranks: usize,
        init: impl FnOnce(Arc<AtomicBool>) -> Result<Comm> + Send + 'static,
    ) -> Result<Comm> {
        if config.is_blocking()? {
            return init(Arc::new(AtomicBool::new(false)));
        }
        if rank >= nranks {
            return Err(Error::InvalidArgument(format!("rank {rank} is not below nranks {nranks}")));
        }
        // Checked now: a bad configuration is the caller's error, not an async one.
        let cfg = config.resolve(nranks)?;
        // The device init will give the rank.
        let h = Handle {
            rank,
            nranks,
            device: config.device.clone().unwrap_or(Device::host(rank)),
            name: cfg.comm_name,
            timeout: cfg.timeout,
            cell: Arc::new(Cell::default()),
            progress: Some(Progress::default()),
        };
        let cell = h.cell.clone();
        let job = move || match init(cell.init_abort.clone()) {
            // The temporary handle `init` made goes; its state moves here.
            Ok(made) => match made.h.cell.inner.get() {
                Some(inner) => cell.set(inner.clone()),
                None => cell.init_failed(rank, Error::Internal("init returned no rank state".into())),
            },
            Err(e) => cell.init_failed(rank, e),
        };
        h.progress.as_ref().map_or(Ok(()), |p| p.push(Box::new(job)))?;
        Ok(Comm { h: Arc::new(h) })
    }

    /// `abort`: the flag that ends the bootstrap's waits (set by an abort of a nonblocking
    /// communicator still initializing); `root_rank`: the rank that runs the root, if known.
    /// Until every rank has finished, a rank's death or failure fails the others at once,
    /// naming it (see the bootstrap's links): this rank tells the roots its own failure.
    pub(super) fn init_rank_with(
        ids: &[UniqueId], nranks: usize, rank: usize, config: &Config, store_server: Option<Server>,
        abort: Arc<AtomicBool>, root_rank: Option<usize>,
    ) -> Result<Comm> {
        crate::logging::init();
        if rank >= nranks {
            return invalid(format!("rank {rank} is not below nranks {nranks}"));
        }
        let device = config.device.clone().unwrap_or(Device::host(rank));
        cuda_ipc::check_device(rank, &device)?;
        let bcfg = BootstrapConfig::from_env()?.with_abort(abort.clone()).with_root_rank(root_rank);
        let bs = Bootstrap::init_scalable(ids, rank, nranks, &bcfg)?;
        let inner = match wire_rank(&bs, rank, nranks, config, device).and_then(|inner| {
            bs.finish_init()?;
            Ok(inner)
        }) {
            Ok(inner) => inner,
            Err(e) => {
                let e = explain(&bs, "init", e);
                bs.fail_init(&e);
                // A rank killed after creating its segment left the name behind.
                crate::transport::shm::sweep();
                return Err(e);
            }
        };
        Ok(Comm::from_inner(inner.with_bootstrap(bs, abort, store_server)))
    }
}

/// The error `e` of this rank's `op`, or, when `e` is about a peer's connection (an OS
/// error, a timeout), the roots' word on which rank died or failed first if it comes
/// within a second. The bootstrap's own errors have heard the roots already.
fn explain(bs: &Bootstrap, op: &'static str, e: Error) -> Error {
    match e {
        Error::System { .. } | Error::Timeout { .. } => bs.why_lost(op).map_or(e, Error::Bootstrap),
        e => e,
    }
}

/// The configuration of ranks whose steps cross a network: host ranks take larger FIFOs
/// (`settings::NET_BUFFSIZE`: fewer and larger plugin requests, fewer passes of the proxy
/// over the sockets) unless a size is set, if every rank finds room for them (a segment
/// within `settings::NET_SEGMENT_BUDGET`, all of its host's within half of what /dev/shm has
/// free). Over `Socket` (no `plugin`), calls that only copy keep the usual steps (the slots
/// returned beside the configuration, for the tuner): theirs go by reference from and into
/// the callers' buffers, and larger ones measured slower (docs/performance.md, "The socket
/// transport"). GPU ranks keep the usual FIFOs (device memory, one per channel and peer).
/// The ranks decide together (one vote each), so that they cannot disagree on the size.
fn network_fifos(
    bs: &Bootstrap, rank: usize, config: &Config, cfg: Resolved, device: &Device, whereabouts: &[Endpoint],
    plugin: Option<&Network>,
) -> Result<(Resolved, Option<[usize; NPROTOS]>)> {
    let nranks = whereabouts.len();
    let net = cfg.with_network_fifos();
    let segment = Layout::new(nranks, &net, device).segment_bytes();
    let on_host = whereabouts.iter().filter(|e| e.host == whereabouts[rank].host).count();
    let yes = !device.is_cuda() && !config.fifo_size_set()? && room_for(segment, on_host, ShmSegment::available());
    let votes = bs.all_gather(&[u8::from(yes)])?;
    let take = votes.iter().all(|v| v[..] == [1]);
    let copies = (take && plugin.is_none()).then_some(cfg.slot_bytes);
    let chosen = if take { net } else { cfg };
    if rank == 0 {
        let network = plugin.map_or("Socket", Network::name);
        let why = if take {
            format!("the default over a network ({network}): fewer, larger steps")
        } else {
            let no: Vec<usize> = (0..nranks).filter(|&q| votes[q][..] != [1]).collect();
            format!("not the network's larger default: set, on a GPU, or no room for it on rank(s) {no:?}")
        };
        let steps = match copies {
            Some(s) => format!(", steps of {} KiB for calls that only copy", s[0] >> 10),
            None => String::new(),
        };
        tracing::info!(
            "rank 0: Simple FIFOs of {} KiB{steps}, {} MiB of FIFOs a rank ({why})",
            (chosen.slot_bytes[0] * STEPS) >> 10,
            Layout::new(nranks, &chosen, device).segment_bytes() >> 20
        );
    }
    Ok((chosen, copies))
}

/// Whether a host holds `on_host` segments of `segment` bytes: each within its budget, all
/// within half of the `free` bytes of /dev/shm (which other jobs share).
fn room_for(segment: usize, on_host: usize, free: Option<u64>) -> bool {
    segment <= crate::settings::NET_SEGMENT_BUDGET && free.is_some_and(|f| (segment * on_host) as u64 <= f / 2)
}

/// Everything of a process rank's init past the bootstrap: agreement on the
/// configuration, segments, transports, graph, tuning, connectors, registered memory.
fn wire_rank(bs: &Bootstrap, rank: usize, nranks: usize, config: &Config, device: Device) -> Result<CommInner> {
    // Where each rank runs and whether it asks for the network, before anything is laid
    // out: the transports each pair will take follow from it.
    let whereabouts = bs.all_gather(&Endpoint::of_process("", None)?.encode())?;
    let whereabouts =
        whereabouts.iter().enumerate().map(|(q, b)| Endpoint::decode(q, b)).collect::<Result<Vec<_>>>()?;
    // Ranks on one machine share its CPUs, whatever namespace each runs in.
    let same_machine = |q: &usize| whereabouts[*q].machine() == whereabouts[rank].machine();
    let cpus =
        affinity::for_local_rank((0..rank).filter(same_machine).count(), (0..nranks).filter(same_machine).count());
    // Every rank must have been given the same configuration, or their kernels would
    // not agree on channels, protocols or FIFO slots.
    let cfg = config.resolve_on(nranks, &device)?;
    cfg.agree(rank, &bs.all_gather(&cfg.encode())?)?;
    // What the ranks tell each other from here on (endpoints, addresses, a plugin's
    // handles, tuning) goes in TLS when it is asked for; every rank now knows that all do.
    let tls = tls_of(&cfg, bs.key().as_ref())?;
    if let Some(tls) = &tls {
        bs.start_tls(tls)?;
        tracing::info!("rank {rank}: the bootstrap ring and the links to the root carry TLS");
    }
    // The network before the FIFOs, where steps cross one (NCCL loads its plugin first):
    // steps over a network want to be larger.
    let any_net = !transport::all_in_memory(&whereabouts);
    let network = if any_net {
        network(bs, rank, &cfg)?
    } else {
        netplugin::check(cfg.net_name.as_deref())?;
        None
    };
    let (cfg, copy_slots) = if any_net {
        network_fifos(bs, rank, config, cfg, &device, &whereabouts, network.as_ref())?
    } else {
        (cfg, None)
    };

    let layout = Layout::new(nranks, &cfg, &device);
    let own = ShmSegment::create(layout.segment_bytes())?;
    test_hook::at("segment");
    let own_device = DeviceSegment::new(rank, &device, &layout, &own)?;
    // What the transport table decides each pair's transport from.
    let me = Endpoint::of_process(own.name(), own_device.as_ref().map(DeviceSegment::end))?;
    let gathered = bs.all_gather(&me.encode())?;
    let endpoints = gathered.iter().enumerate().map(|(q, b)| Endpoint::decode(q, b)).collect::<Result<Vec<_>>>()?;
    cuda_ipc::check_targets(rank, &endpoints)?;
    let own_fifos = own_device.as_ref().map(DeviceSegment::ptr);
    let Attached { bases, boards, recv, mut keep, net } =
        attach(&layout, rank, &endpoints, &device, None, own.ptr(), own_fifos)?;
    // Once everyone has mapped every segment, the names can go: nothing is left behind
    // in /dev/shm even if a process dies later.
    bs.barrier()?;
    own.unlink();
    let (mut graph, global) = global_graph(bs, rank, &device, &endpoints, cfg.nchannels)?;
    let tls = tls_for_peers(tls, network.as_ref().map(Network::name))?;
    if let Some(n) = &network {
        between_hosts(&mut graph, n);
    }
    if !any_net {
        test_hook::at("transport");
    }
    // Rank processes keep system-scope ordering, even on one GPU (another context).
    let mut conns = connect(&layout, rank, &bases, &recv, &graph, &[], &wire_plain(&cfg, &net))?;
    // A host kernel's large moves to and from peers over the built-in sockets pass by
    // reference: the proxy sends from and receives into the caller's buffers.
    if network.is_none() && !device.is_cuda() {
        conns.mark_proxied(&net);
    }
    // Over a plugin, a GPU rank's connectors may keep their Simple slots in device memory
    // (the plan moves them in the kernels' tables), which the proxy registers as such.
    let mut routes = match &network {
        Some(n) => {
            let at = Placing {
                rank,
                device: &device,
                global: &global,
                layout: &layout,
                net: &net,
                own: own.ptr(),
                own_device: own_fifos,
            };
            let (plan, memory) = Plan::new(n, &at, &mut conns)?;
            keep.extend(memory.map(|m| Box::new(m) as Box<dyn Send + Sync>));
            Some(plan)
        }
        None => None,
    };
    // Every rank tunes as rank 0 does (its machine's topology, its table): so they
    // cannot disagree.
    let priced = priced(&graph, &endpoints);
    let plan = if rank == 0 { tune::plan(&priced, &cfg, &device)? } else { Vec::new() };
    let tuner = tune::from_plan(&bs.all_gather(&plan)?[0], &priced, &cfg)?.with_copy_slots(copy_slots);
    let tuner = Arc::new(tuner.agreed(|started| Ok(bs.all_gather(started)?))?);
    let proxy = if any_net {
        // The roots' word that a rank died or failed ends the wait for its connections.
        const OP: &str = "net connection setup";
        let lost = || bs.check_peers(OP).map_err(Error::Bootstrap);
        let proxy = match &network {
            None => {
                let sends: Vec<_> = conns.sends.iter().copied().filter(|l| net[l.peer]).collect();
                let recvs: Vec<_> = conns.recvs.iter().copied().filter(|l| net[l.peer]).collect();
                let ip =
                    bs.peer_addr(rank).map(|a| a.ip()).ok_or_else(|| Error::Internal("no bootstrap address".into()))?;
                let listener = NetListener::bind(ip)?;
                let addrs = bs
                    .all_gather(listener.addr()?.to_string().as_bytes())?
                    .iter()
                    .map(|a| {
                        String::from_utf8_lossy(a)
                            .parse()
                            .map_err(|e| Error::Internal(format!("bad peer address: {e}")))
                    })
                    .collect::<Result<Vec<std::net::SocketAddr>>>()?;
                test_hook::at("transport");
                Proxy::start(&layout, rank, &sends, &recvs, &bases, listener, &addrs, &cfg, bs.key(), tls, &lost)
            }
            Some(network) => {
                let exchange = |handles: &[u8]| {
                    let published = bs.all_gather(handles)?;
                    test_hook::at("transport");
                    Ok(published)
                };
                let routes =
                    routes.take().ok_or_else(|| Error::Internal("no routes for the plugin's connectors".into()))?;
                plugin::start(network, routes, &layout, rank, &bases, &cfg, &exchange, &lost)
            }
        };
        Some(proxy.map_err(|e| explain(bs, OP, e))?)
    } else {
        None
    };
    let nnet = net.iter().filter(|&&n| n).count();
    tracing::info!(
        "init_rank: rank {rank} of {nranks} (pid {}), {} channel(s), {} peer(s) over shared memory, {nnet} over the network{}",
        std::process::id(),
        cfg.nchannels,
        nranks - 1 - nnet,
        if me.net_only { " (JITCCL_TRANSPORT=net)" } else { "" }
    );
    let activity = proxy.as_ref().map(Proxy::activity);
    // Peer processes on this host: their exit is noticed through pidfds (not ranks of
    // this process, which cannot exit without this one: 256 ranks as threads would
    // otherwise hold 65 280 pidfds).
    let local: Vec<(usize, u32)> = (0..nranks)
        .filter(|&q| q != rank && !net[q] && !ShmSegment::is_created_here(&endpoints[q].segment))
        .map(|q| (q, endpoints[q].pid))
        .collect();
    let watch = Watch::start(rank, &local, layout.board(bases[rank]));
    let segments = Arc::new(Segments { _watch: watch, _proxy: proxy, _attached: keep, _device: own_device, _own: own });
    // Later exchanges over the bootstrap (split, shrink) end, naming the rank, once this
    // rank's board says a peer is gone (the board lives in `segments`, kept for it).
    let (board, held) = (layout.board(bases[rank]), segments.clone());
    bs.watch_peers(move |q| {
        let _held = &held;
        board.get(q).is_some_and(|n| n.is_gone())
    });
    // Failure boards this process can write: those of peers in memory.
    let boards = (0..nranks).map(|q| (!net[q]).then(|| layout.board(boards[q]))).collect();
    let shareable = !device.is_cuda() && nnet == 0;
    let reach = reach(rank, &cfg, &endpoints, &graph);
    let wiring = Wiring { conns, board: layout.board(bases[rank]), boards, device, reach };
    let inner = rank_state(rank, cfg, wiring, cpus, tuner, activity, segments)?;
    peer_arenas::share_processes(bs, rank, shareable, &inner.enq.sym)?;
    Ok(inner)
}

/// Per peer, whether a wired ring's partial sums cross to and from it as fp32: it shares
/// this rank's memory (`net[q]`: it does not) and `Config::wire_local` leaves such hops exact.
fn wire_plain(cfg: &Resolved, net: &[bool]) -> Vec<bool> {
    net.iter().map(|&n| !n && cfg.wire_local == WireLocal::Exact).collect()
}

/// How the ranks of `endpoints` reach each other over `graph`'s rings; rank 0 says what
/// that leaves a wired ring call to encode where some hops go through the network.
fn reach(rank: usize, cfg: &Resolved, endpoints: &[Endpoint], graph: &Graph) -> Reach {
    let hops: Vec<usize> = graph.channels.iter().map(|c| transport::net_hops(endpoints, &c.ring)).collect();
    let reach = Reach {
        in_memory: transport::all_in_memory(endpoints),
        ring_net_hops: hops.iter().copied().max().unwrap_or(0),
    };
    if rank == 0 && !reach.in_memory && cfg.wire_local == WireLocal::Exact {
        let per: Vec<String> = hops.iter().enumerate().map(|(c, h)| format!("channel {c} {h}")).collect();
        tracing::info!(
            "wired ring calls encode partial sums only on the ring's hops through the network, of {} per ring: {}; \
             hops in memory carry them as fp32",
            endpoints.len(),
            per.join(", ")
        );
    }
    reach
}

/// The network this rank's peers on other hosts are reached through: a plugin's, or None
/// for the built-in sockets. Every rank must have chosen the same one.
fn network(bs: &Bootstrap, rank: usize, cfg: &Resolved) -> Result<Option<Network>> {
    let chosen = netplugin::select(cfg.net_name.as_deref(), bs.nonce())?;
    let name = chosen.as_ref().map_or("Socket", Network::name);
    let names = bs.all_gather(name.as_bytes())?;
    if let Some((q, theirs)) = names.iter().enumerate().find(|(_, n)| !n.eq_ignore_ascii_case(name.as_bytes())) {
        return Err(Error::InvalidUsage(format!(
            "rank {rank} reaches other hosts through network {name}, rank {q} through {}: set JITCCL_NET (NCCL_NET) or JITCCL_NET_PLUGIN alike on every rank",
            String::from_utf8_lossy(theirs)
        )));
    }
    Ok(chosen)
}

/// What the network's devices say of the links between hosts, for the cost model: the
/// slowest device's speed bounds a channel between hosts, the slowest latency adds to a hop.
fn between_hosts(graph: &mut Graph, network: &Network) {
    let devs = network.devices();
    let speed = devs.iter().map(|d| d.speed_mbps).filter(|&s| s > 0).min();
    if let Some(mbps) = speed {
        let gbs = f64::from(mbps) / 8000.0;
        graph.bw_inter = if graph.bw_inter > 0.0 { graph.bw_inter.min(gbs) } else { gbs };
    }
    graph.lat_inter = devs.iter().map(|d| f64::from(d.latency_us)).filter(|l| l.is_finite()).fold(0.0, f64::max);
}

/// `graph` as the cost model prices it: where every rank asks for the network
/// (`JITCCL_TRANSPORT=net`), each pair's hops and bandwidth are the network's, as between
/// ranks on separate hosts, so that small calls take the paths of fewest hops over it.
fn priced(graph: &Graph, endpoints: &[Endpoint]) -> Graph {
    let nhosts = if endpoints.iter().all(|e| e.net_only) { endpoints.len() } else { graph.nhosts };
    Graph { nhosts, ..graph.clone() }
}

/// The rings and trees of a communicator of processes: every rank shares its machine's
/// topology (detected, or `JITCCL_TOPO_FILE`) and its NUMA domain, and every rank searches
/// the same global system, so all find the same graph (`JITCCL_GRAPH_FILE` replaces the
/// search, `JITCCL_GRAPH_DUMP_FILE` records it). Hosts are told apart as the transports
/// tell them (machine and network namespace). A search that cannot give exactly the
/// configured channels falls back to rank-order rings that keep each host's ranks
/// together, with a warning. Rank 0 describes the graph across hosts (INFO). The global
/// system comes back with it, each GPU rank placed at its GPU (by its PCI address): where
/// the network devices nearest to a rank are chosen from.
fn global_graph(
    bs: &Bootstrap, rank: usize, device: &Device, endpoints: &[Endpoint], nchannels: usize,
) -> Result<(Graph, GlobalSystem)> {
    let nranks = endpoints.len();
    let sys = System::local()?;
    let numa = sys.cpus.first().map_or(0, |c| c.numaid);
    let gpu = device.gpu()?.map_or_else(|| "-".to_string(), |g| g.busid.clone());
    let shared = bs.all_gather(format!("{numa} {gpu}\n{}", sys.to_xml()).as_bytes())?;
    let mut per_rank = Vec::with_capacity(nranks);
    let mut gpus = Vec::with_capacity(nranks);
    for (q, bytes) in shared.iter().enumerate() {
        let text = String::from_utf8_lossy(bytes);
        let (place, xml) = text.split_once('\n').unwrap_or(("", ""));
        let (numa, gpu) = place.split_once(' ').unwrap_or((place, "-"));
        gpus.push((gpu != "-").then(|| gpu.to_string()));
        let mut sys = System::from_xml_str(&format!("rank {q}'s topology"), xml)?;
        sys.host_hash = Some(fingerprint(&endpoints[q].host));
        let numa =
            numa.parse().map_err(|_| Error::Internal(format!("rank {q} sent a malformed NUMA domain '{numa}'")))?;
        per_rank.push((sys, graph::Device::Numa(numa)));
    }
    let global = GlobalSystem::from_ranks(per_rank)?;
    let params = SearchParams { min_channels: nchannels, max_channels: nchannels, ..SearchParams::default() };
    let graph = graph::search_or_load(&global, &params, global.ranks[rank].host)?;
    let hosts: Vec<usize> = global.ranks.iter().map(|p| p.host).collect();
    let graph = if graph.channels.len() != nchannels {
        tracing::warn!(
            "rank {rank}: the graph search gave {} channel(s), {nchannels} are configured: using rank-order rings, each host's ranks together",
            graph.channels.len()
        );
        Graph::by_host(&hosts, nchannels)
    } else {
        if rank == 0 {
            log_search(&global, &graph);
        }
        graph
    };
    for (c, ch) in graph.channels.iter().enumerate() {
        tracing::info!("rank {rank}: channel {c}: ring {:?}, tree parents {:?}", ch.ring, ch.tree.parent);
    }
    if rank == 0 && global.hosts.len() > 1 {
        for line in graph.across_hosts(&hosts) {
            tracing::info!("across hosts: {line}");
        }
    }
    // Only the choice of network devices starts from the GPU: the search above, and with
    // it the rings and the tuning of GPU ranks, keeps every rank at its NUMA domain.
    let (global, unplaced) = global.at_gpus(&gpus);
    if let (true, Some(gpu)) = (unplaced.contains(&rank), &gpus[rank]) {
        tracing::info!(
            "rank {rank}: GPU {gpu} is not in its host's topology: network devices are chosen nearest to its NUMA domain {numa}"
        );
    }
    Ok((graph, global))
}

/// Rank 0's summary of the search: the hosts, its own machine, the graph's figures.
fn log_search(global: &GlobalSystem, graph: &Graph) {
    let host = &global.hosts[0];
    tracing::info!(
        "topology: {} host(s); rank 0's: {} NUMA domain(s), {} GPU(s), {} NIC(s) ({}); graph: {} channel(s), intra {:.1} GB/s ({}), inter {:.1} GB/s ({}), {} search steps{}",
        global.hosts.len(),
        host.cpus.len(),
        host.gpus.len(),
        host.nics.len(),
        host.source,
        graph.channels.len(),
        graph.bw_intra,
        graph.type_intra,
        graph.bw_inter,
        graph.type_inter,
        graph.steps,
        if graph.fallback { ", fallback rings" } else { "" }
    );
}

/// A stable 64-bit digest of `s` (FNV-1a): the same in every process.
fn fingerprint(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Every rank's receive segment as mapped here.
struct Attached {
    /// Indexed by rank.
    bases: Vec<*mut u8>,
    /// Per rank, where its failure board is mapped here (at the start of a segment).
    boards: Vec<*mut u8>,
    /// Per peer, this rank's segment that the peer's FIFOs are in.
    recv: Vec<*mut u8>,
    /// What keeps the mappings alive.
    keep: Vec<Box<dyn Send + Sync>>,
    /// Per rank, whether it is reached over the network.
    net: Vec<bool>,
}

/// Maps every peer's receive segment here through the transport the table picks for it
/// (logged with the reason); `own` is this rank's, `own_fifos` its device FIFOs on a GPU.
fn attach(
    layout: &Layout, rank: usize, endpoints: &[Endpoint], device: &Device, local: Option<&[*mut u8]>, own: *mut u8,
    own_fifos: Option<*mut u8>,
) -> Result<Attached> {
    let ctx = AttachCtx { rank, bytes: layout.segment_bytes(), device, endpoints, local };
    let n = endpoints.len();
    let mut a = Attached {
        bases: vec![own; n],
        boards: vec![own; n],
        recv: vec![own; n],
        keep: Vec::new(),
        net: vec![false; n],
    };
    for q in (0..n).filter(|&q| q != rank) {
        let (t, why) = transport::select(&endpoints[rank], &endpoints[q]);
        tracing::info!("rank {rank}: peer {q} over {} ({why})", t.name());
        let (base, k) = t.attach(&ctx, q)?;
        (a.bases[q], a.boards[q], a.net[q]) = (base, base, t.is_net());
        a.keep.extend(k);
        if let Some((board, k)) = t.attach_board(&ctx, q)? {
            a.boards[q] = board;
            a.keep.extend(k);
        }
        if t.receives_in_device() {
            a.recv[q] =
                own_fifos.ok_or_else(|| Error::Internal(format!("rank {rank}: no device FIFOs for rank {q}")))?;
        }
    }
    Ok(a)
}

/// How one rank reaches the others: its connectors, its own failure board, each rank's
/// board where this process can write it (None: reached through the proxy), its device,
/// and whether every rank of the communicator reaches every other through memory.
struct Wiring {
    conns: RankConns,
    board: Board,
    boards: Vec<Option<Board>>,
    device: Device,
    reach: Reach,
}

/// The state of one rank wired by `w`, whose pointers stay valid while `segments` lives.
fn rank_state(
    rank: usize, cfg: Resolved, w: Wiring, cpus: Option<Arc<CpuSet>>, tuner: Arc<Tuner>,
    activity: Option<Arc<Activity>>, segments: Arc<dyn Send + Sync>,
) -> Result<CommInner> {
    let nranks = w.boards.len();
    let failure = Failure::new(rank, cfg.timeout, w.board, w.boards, activity.clone());
    let tables = Tables::new(w.conns, cfg.nchannels, &w.device)?;
    let exec = Executor::new(rank, cfg.spin, cpus.clone(), cfg.timeout, tables, failure, activity);
    let enq = enqueue::Rank::new(Group { rank, nranks }, w.device, cfg, Arc::new(exec), w.board, cpus, tuner, w.reach);
    Ok(CommInner::new(enq, segments))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(net_only: &[bool]) -> Vec<Endpoint> {
        let ep = |q: usize, net_only: bool| Endpoint {
            host: "one machine".into(),
            group: None,
            segment: format!("jitccl-{q}"),
            net_only,
            pid: q as u32,
            cuda: None,
        };
        net_only.iter().enumerate().map(|(q, &n)| ep(q, n)).collect()
    }

    #[test]
    fn larger_fifos_need_room_in_the_budget_and_in_dev_shm() {
        const MIB: usize = 1 << 20;
        assert!(room_for(78 * MIB, 2, Some(24 << 30)));
        assert!(!room_for(300 * MIB, 1, Some(24 << 30)), "over a rank's budget");
        assert!(!room_for(78 * MIB, 2, Some(64 << 20)), "docker's default /dev/shm");
        assert!(!room_for(78 * MIB, 2, None), "free space unknown");
    }

    #[test]
    fn ranks_that_all_ask_for_the_network_are_priced_as_hosts_of_their_own() {
        let graph = Graph::uniform(4, 2);
        assert_eq!(priced(&graph, &ranks(&[true; 4])).nhosts, 4);
        assert_eq!(priced(&graph, &ranks(&[true, true, false, true])).nhosts, 1);
        let two = Graph { nhosts: 2, ..Graph::uniform(4, 2) };
        assert_eq!(priced(&two, &ranks(&[false; 4])), two);
    }
}
