//! `jitccl topo`: the system (detected, or read with `--xml`), the paths between the ranks'
//! devices and NICs, and the rings and trees the graph search builds per channel.

use std::path::PathBuf;
use std::process::ExitCode;

use jitccl::graph::{search_or_load, Device, GlobalSystem, Graph, SearchParams};
use jitccl::topo::{NodeKind, Path, System};
use jitccl::tune::{Constants, Machine, Topology};
use jitccl::Collective;

#[derive(clap::Args)]
pub struct TopoArgs {
    /// Read the system from this NCCL topology XML file instead of detecting it; one rank is
    /// planned per GPU in the file (per NUMA domain when it has none).
    #[arg(long, value_name = "FILE")]
    xml: Option<PathBuf>,
    /// Write the topology, as NCCL topology XML, to this file.
    #[arg(long, value_name = "FILE")]
    dump_xml: Option<PathBuf>,
    /// Cores per machine for the cost model's host constants (default: this machine's).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    cores: Option<usize>,
    /// Ranks to plan for, spread in blocks over the devices (default: one per device).
    #[arg(short = 'N', long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    nranks: Option<usize>,
    /// Channels to search for (default: up to 32 with GPUs; the communicator's default,
    /// cores per rank from 1 to 4, without).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=jitccl::MAX_CHANNELS as u64))]
    channels: Option<usize>,
}

impl TopoArgs {
    pub(super) fn run(self) -> Result<ExitCode, String> {
        let sys = match &self.xml {
            Some(f) => System::from_xml_file(f),
            None => System::local(),
        }
        .map_err(|e| e.to_string())?;
        if let Some(f) = &self.dump_xml {
            std::fs::write(f, sys.to_xml()).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        print_system(&sys);
        let cores = self.cores.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let global = spread(GlobalSystem::one_rank_per_device(sys), self.nranks)?;
        print_paths(&global);
        let mut params = SearchParams::default();
        let host_default = global.hosts[0].gpus.is_empty().then(|| (cores / global.ranks.len()).clamp(1, 4));
        if let Some(n) = self.channels.or(host_default) {
            (params.min_channels, params.max_channels) = (n, n);
        }
        let graph = search_or_load(&global, &params, 0).map_err(|e| e.to_string())?;
        print_graph(&graph);
        let gpus = !global.hosts[0].gpus.is_empty();
        let machine = if gpus { Machine::Gpus } else { Machine::Host { cores } };
        let (topo, constants) = machine.model(&graph);
        // Plain host buffers of one machine live in the host arenas, which every rank maps.
        let direct = !gpus && topo.nnodes == 1 && jitccl::host_arena_available();
        print_picks(&topo, &constants, machine, direct);
        Ok(ExitCode::SUCCESS)
    }
}

/// `nranks` ranks in contiguous blocks over the devices `one` has a rank on.
fn spread(one: GlobalSystem, nranks: Option<usize>) -> Result<GlobalSystem, String> {
    let Some(n) = nranks else { return Ok(one) };
    let ndev = one.ranks.len();
    let ranks = (0..n).map(|r| one.ranks[r * ndev / n]).collect();
    GlobalSystem::new(one.hosts, ranks).map_err(|e| e.to_string())
}

fn print_system(sys: &System) {
    let hash = sys.host_hash.map_or("unknown".to_string(), |h| format!("{h:#018x}"));
    println!("system: {} (host {hash})", sys.source);
    for c in &sys.cpus {
        let what = [c.vendor.clone(), c.family.map(|f| format!("family {f}")), c.model.map(|m| format!("model {m}"))];
        let what: Vec<String> = what.into_iter().flatten().collect();
        let arch = c.arch.as_deref().unwrap_or("?");
        println!("  numa {}: {} CPUs, {} ({arch})", c.numaid, c.cpus.len(), what.join(" "));
    }
    for g in &sys.gpus {
        let numa = sys.cpus.get(sys.nodes[g.node].cpu).map_or(0, |c| c.numaid);
        let sm = if g.sm == 0 { "?".to_string() } else { g.sm.to_string() };
        println!("  gpu {}: {} sm {sm}, {} NVLinks, numa {numa}", g.dev, g.busid, g.nvlinks);
    }
    for n in &sys.nics {
        let numa = sys.cpus.get(sys.nodes[n.node].cpu).map_or(0, |c| c.numaid);
        let at = n.busid.as_deref().unwrap_or("-");
        let gbps = n.speed_mbps as f64 / 1000.0;
        println!("  nic {} {}: {gbps} Gb/s, port {}, {at}, numa {numa}", n.dev, n.name, n.port);
    }
    let nvswitches = sys.nodes.iter().filter(|n| n.kind == NodeKind::NvSwitch).count();
    if nvswitches > 0 {
        println!("  nvswitch fabric: yes");
    }
}

fn label(d: Device) -> String {
    match d {
        Device::Gpu(g) => format!("gpu{g}"),
        Device::Numa(n) => format!("numa{n}"),
    }
}

fn cell(p: Option<&Path>) -> String {
    p.map_or("-".to_string(), |p| format!("{} {:.1}", p.ty, p.bw))
}

/// Path type and bandwidth (GB/s) from each rank's device to every other's and to each NIC.
fn print_paths(global: &GlobalSystem) {
    let sys = &global.hosts[0];
    let nodes: Vec<Option<usize>> = (0..global.ranks.len()).map(|r| global.node_of(r)).collect();
    let mut cols: Vec<(String, Option<usize>)> =
        global.ranks.iter().zip(&nodes).map(|(p, n)| (label(p.device), *n)).collect();
    cols.extend(sys.nics.iter().map(|n| (n.name.clone(), Some(n.node))));
    let rows: Vec<(String, Vec<String>)> = global
        .ranks
        .iter()
        .zip(&nodes)
        .map(|(p, from)| {
            let cells = cols.iter().map(|(_, to)| match (from, to) {
                (Some(a), Some(b)) => cell(sys.path(*a, *b)),
                _ => "-".to_string(),
            });
            (label(p.device), cells.collect())
        })
        .collect();
    let width = rows.iter().flat_map(|(_, c)| c.iter()).chain(cols.iter().map(|(l, _)| l)).map(|s| s.len()).max();
    let width = width.unwrap_or(0) + 2;
    println!("paths (type, GB/s):");
    let header: Vec<String> = cols.iter().map(|(l, _)| format!("{l:>width$}")).collect();
    println!("  {:8}{}", "", header.join(""));
    for (name, cells) in rows {
        let cells: Vec<String> = cells.iter().map(|c| format!("{c:>width$}")).collect();
        println!("  {name:8}{}", cells.join(""));
    }
}

fn print_graph(g: &Graph) {
    let inter = if g.nhosts > 1 { format!(", inter {:.1} GB/s ({})", g.bw_inter, g.type_inter) } else { String::new() };
    let fallback = if g.fallback { " (fallback: no ring fit the search budget)" } else { "" };
    println!(
        "graph: {} channels, intra {:.1} GB/s ({}){inter}, {} search steps{fallback}",
        g.nchannels(),
        g.bw_intra,
        g.type_intra,
        g.steps
    );
    for (c, ch) in g.channels.iter().enumerate() {
        let ring: Vec<String> = ch.ring.iter().map(|r| r.to_string()).collect();
        let nics: Vec<String> = ch.nic.iter().map(|n| n.map_or("-".into(), |d| d.to_string())).collect();
        println!(
            "  channel {c}: ring {} | bw {:.1} GB/s, ring {:.1} us, tree {:.1} us",
            ring.join(" "),
            ch.bw,
            ch.ring_lat_us,
            ch.tree_lat_us
        );
        let tree: Vec<String> = (0..ch.tree.parent.len())
            .map(|r| match ch.tree.parent[r] {
                Some(p) => format!("{r}<-{p}"),
                None => format!("{r}:root"),
            })
            .collect();
        println!("    tree {} | nic per rank {}", tree.join(" "), nics.join(" "));
    }
}

/// What the cost model picks per collective and size (a commutative op, no table, no
/// override): what a communicator on this graph runs without a tuning table.
fn print_picks(topo: &Topology, constants: &Constants, machine: Machine, direct: bool) {
    const COLLS: [Collective; 5] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
    ];
    let buffers = if direct {
        "plain buffers in the host arenas, so the direct algorithms too"
    } else {
        "buffers the peers do not address"
    };
    println!(
        "model picks ({} ranks, {} node(s), {} channel(s), {machine}, {buffers}; algorithm/protocol/channels, estimated us):",
        topo.nranks, topo.nnodes, topo.nchannels
    );
    let head: Vec<String> = COLLS.iter().map(|c| format!("{:>30}", c.to_string())).collect();
    println!("  {:>10}{}", "bytes", head.join(""));
    for shift in (3..=28).step_by(3) {
        let bytes = 1usize << shift;
        let cells: Vec<String> = COLLS
            .iter()
            .map(|&c| {
                let pick = topo
                    .fastest(constants, c, bytes, direct)
                    .map_or("-".to_string(), |e| format!("{}/{}/{} {:.1}", e.algo, e.proto, e.nchannels, e.us));
                format!("{pick:>30}")
            })
            .collect();
        println!("  {bytes:>10}{}", cells.join(""));
    }
}
