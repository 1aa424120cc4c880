//! The graph search over every host: rings inside each host ([`super::rings`]), joined host
//! after host so each host's ranks stay contiguous (one entry and one exit per host and
//! channel), a NIC per rank and channel spread over the NICs nearest to it, the trees
//! ([`super::trees`]), and the bandwidth and latency estimates. A pure function of its
//! inputs: every rank that runs it on the same global system gets the same graph.

use super::rings::{self, Budget, HostRings};
use super::trees;
use super::types::{Channel, GlobalSystem, Graph, SearchParams};
use crate::topo::{PathType, System, TopoError};

/// Latency of one hop of a path of type `ty`, µs (rough: for comparing graphs, not a model).
pub(crate) fn hop_latency(ty: PathType) -> f64 {
    match ty {
        PathType::Loc => 0.2,
        PathType::Nvl | PathType::Nvb | PathType::C2c => 0.6,
        PathType::Pix | PathType::Pxb | PathType::P2c | PathType::Pxn => 1.0,
        PathType::Phb => 1.5,
        PathType::Sys => 2.0,
        PathType::Net => 2.7,
        PathType::Dis => 10.0,
    }
}

/// One host taking part: its ranks (global, ascending) and their system nodes.
pub(crate) struct HostRanks<'a> {
    pub sys: &'a System,
    pub ranks: Vec<usize>,
    pub nodes: Vec<Option<usize>>,
}

/// The hosts that have ranks, in the order of their lowest rank (the ring's host order).
pub(crate) fn hosts_of(global: &GlobalSystem) -> Result<Vec<HostRanks<'_>>, TopoError> {
    let mut out: Vec<(usize, HostRanks)> = Vec::new();
    for (r, p) in global.ranks.iter().enumerate() {
        let sys =
            global.hosts.get(p.host).ok_or_else(|| TopoError::Invalid(format!("rank {r}: no host {}", p.host)))?;
        let node = global.node_of(r);
        if node.is_none() && matches!(p.device, super::Device::Gpu(_)) {
            return Err(TopoError::Invalid(format!("rank {r}: host {} has no {:?}", p.host, p.device)));
        }
        match out.iter_mut().find(|(h, _)| *h == p.host) {
            Some((_, h)) => {
                h.ranks.push(r);
                h.nodes.push(node);
            }
            None => out.push((p.host, HostRanks { sys, ranks: vec![r], nodes: vec![node] })),
        }
    }
    Ok(out.into_iter().map(|(_, h)| h).collect())
}

/// Searches rings and trees for the ranks of `global`.
pub fn search(global: &GlobalSystem, params: &SearchParams) -> Result<Graph, TopoError> {
    let hosts = hosts_of(global)?;
    if hosts.is_empty() {
        return Err(TopoError::Invalid("no ranks to search a graph for".into()));
    }
    let max = params.max_channels.max(1);
    let mut budget = Budget { used: 0, limit: params.step_budget };
    let found: Vec<HostRings> = hosts.iter().map(|h| rings::search(h.sys, &h.nodes, max, &mut budget)).collect();
    // Every host runs every channel: as many channels as the poorest host found.
    let base = found.iter().map(|f| f.cycles.len()).min().unwrap_or(1).max(1);
    // Channels are doubled (two channels share one ring's bandwidth) until every NIC and
    // every rank can lead one, or the minimum is met.
    let want = hosts.iter().map(|h| h.sys.nics.len().max(h.ranks.len())).max().unwrap_or(1).max(params.min_channels);
    let mut nch = base;
    while nch < want && nch * 2 <= max {
        nch *= 2;
    }
    let share = nch as f64 / base as f64;
    let plan = Plan { hosts: &hosts, found: &found, base, nranks: global.ranks.len() };
    let mut usage: Vec<Vec<u32>> = hosts.iter().map(|h| vec![0; h.sys.nics.len()]).collect();
    let (mut channels, ends): (Vec<Channel>, Vec<Vec<Ends>>) =
        (0..nch).map(|c| plan.channel(c, share, &mut usage)).unzip();
    let multi = hosts.len() > 1;
    let (bw_inter, type_inter) = if multi { plan.inter(&mut channels, &ends) } else { (0.0, PathType::Loc) };
    Ok(Graph {
        nranks: global.ranks.len(),
        nhosts: hosts.len(),
        channels,
        bw_intra: found.iter().map(|f| f.bw / share).fold(f64::INFINITY, f64::min),
        bw_inter,
        lat_inter: 0.0,
        type_intra: found.iter().map(|f| f.ty).max().unwrap_or(PathType::Loc),
        type_inter,
        steps: budget.used,
        fallback: found.iter().any(|f| f.fallback),
    })
}

/// Where a channel enters a host (head) and leaves it (tail): local rank and NIC index.
struct Ends {
    head: (usize, Option<usize>),
    tail: (usize, Option<usize>),
}

pub(crate) struct Plan<'a> {
    pub hosts: &'a [HostRanks<'a>],
    pub found: &'a [HostRings],
    pub base: usize,
    pub nranks: usize,
}

impl Plan<'_> {
    /// Channel `c`: each host's ring cut open at a rank that changes with the channel,
    /// with its intra-host bandwidth (the network is added by [`Plan::inter`]).
    fn channel(&self, c: usize, share: f64, usage: &mut [Vec<u32>]) -> (Channel, Vec<Ends>) {
        let mut orders: Vec<Vec<usize>> = Vec::new();
        let mut ends = Vec::new();
        let mut nic = vec![None; self.nranks];
        let multi = self.hosts.len() > 1;
        for (h, host) in self.hosts.iter().enumerate() {
            let cycle = &self.found[h].cycles[c % self.base];
            let n = cycle.len().max(1);
            let at = cycle.iter().position(|&l| l == c % n).unwrap_or(0);
            let local: Vec<usize> = (0..cycle.len()).map(|k| cycle[(at + k) % n]).collect();
            // The head receives from the previous host and the tail sends to the next:
            // their NICs carry the channel, so their choices are counted to spread them.
            for (k, &l) in local.iter().enumerate() {
                let pick = nearest_nic(host, l, &usage[h]);
                if let Some(i) = pick.filter(|_| k == 0 || (multi && k + 1 == local.len())) {
                    usage[h][i] += 1;
                }
                nic[host.ranks[l]] = pick.map(|i| host.sys.nics[i].dev);
            }
            let (head, tail) = (local[0], local[local.len() - 1]);
            let nic_of = |l: usize| host.sys.nics.iter().position(|x| Some(x.dev) == nic[host.ranks[l]]);
            ends.push(Ends { head: (head, nic_of(head)), tail: (tail, nic_of(tail)) });
            orders.push(local.iter().map(|&l| host.ranks[l]).collect());
        }
        let bw = self.found.iter().map(|f| f.bw / share).fold(f64::INFINITY, f64::min);
        (self.finish(c, &orders, nic, bw), ends)
    }

    /// Channel `c` from each host's ranks in ring order: the ring, tree and latencies.
    pub(crate) fn finish(&self, c: usize, orders: &[Vec<usize>], nic: Vec<Option<u32>>, bw: f64) -> Channel {
        let ring: Vec<usize> = orders.iter().flatten().copied().collect();
        let tree = trees::channel_tree(self.nranks, orders, c);
        let (ring_lat_us, tree_lat_us) = self.latencies(&ring, &tree);
        Channel { ring, tree, nic, bw, ring_lat_us, tree_lat_us }
    }

    /// Caps each channel's bandwidth by its NICs, each NIC direction shared by the
    /// channels using it; the inter-host bandwidth and the worst rank-to-NIC path type.
    fn inter(&self, channels: &mut [Channel], ends: &[Vec<Ends>]) -> (f64, PathType) {
        let mut load: Vec<Vec<[u32; 2]>> = self.hosts.iter().map(|h| vec![[0; 2]; h.sys.nics.len()]).collect();
        for per_host in ends {
            for (h, e) in per_host.iter().enumerate() {
                for (dir, (_, i)) in [e.head, e.tail].into_iter().enumerate() {
                    if let Some(i) = i {
                        load[h][i][dir] += 1;
                    }
                }
            }
        }
        let (mut bw_inter, mut worst) = (f64::INFINITY, PathType::Loc);
        for (ch, per_host) in channels.iter_mut().zip(ends) {
            let mut bw = f64::INFINITY;
            for (h, e) in per_host.iter().enumerate() {
                for (dir, (l, i)) in [e.head, e.tail].into_iter().enumerate() {
                    let path = i.and_then(|i| path_to_nic(&self.hosts[h], l, i));
                    let (ty, path_bw) = path.map_or((PathType::Dis, 0.0), |p| (p.ty, p.bw));
                    worst = worst.max(ty);
                    let nic_bw = i.map_or(0.0, |i| self.hosts[h].sys.nics[i].bw().min(path_bw));
                    bw = bw.min(nic_bw / i.map_or(1, |i| load[h][i][dir]).max(1) as f64);
                }
            }
            bw_inter = bw_inter.min(bw);
            ch.bw = ch.bw.min(bw);
        }
        (if bw_inter.is_finite() { bw_inter } else { 0.0 }, worst)
    }

    fn latencies(&self, ring: &[usize], tree: &super::Tree) -> (f64, f64) {
        let n = ring.len();
        let ring_lat = (0..n).map(|k| self.hop_lat(ring[k], ring[(k + 1) % n])).sum::<f64>();
        // Deepest root-to-leaf path, up and back down.
        let depth = |mut r: usize| {
            let (mut d, mut guard) = (0.0, 0);
            while let Some(p) = tree.parent.get(r).copied().flatten() {
                d += self.hop_lat(p, r);
                r = p;
                guard += 1;
                if guard > n {
                    break;
                }
            }
            d
        };
        let tree_lat = 2.0 * (0..n).map(depth).fold(0.0, f64::max);
        (ring_lat, tree_lat)
    }

    /// Latency between two global ranks: their path inside a host, else the network.
    fn hop_lat(&self, a: usize, b: usize) -> f64 {
        for host in self.hosts {
            let (ia, ib) = (host.ranks.iter().position(|&r| r == a), host.ranks.iter().position(|&r| r == b));
            match (ia, ib) {
                (Some(i), Some(j)) if i == j => return 0.0,
                (Some(i), Some(j)) => {
                    return hop_latency(rings::local_path(host.sys, &host.nodes, i, j).map_or(PathType::Dis, |p| p.ty))
                }
                (Some(_), None) | (None, Some(_)) => return hop_latency(PathType::Net),
                _ => {}
            }
        }
        hop_latency(PathType::Dis)
    }
}

fn path_to_nic<'a>(host: &'a HostRanks, local: usize, nic: usize) -> Option<&'a crate::topo::Path> {
    let from = host.nodes[local].or_else(|| host.sys.cpus.first().map(|c| c.node))?;
    host.sys.path(from, host.sys.nics.get(nic)?.node)
}

/// The NIC (index into the host's `nics`) of local rank `l`: among those with the best
/// path type and bandwidth from it, the least used so far (then the first).
pub(crate) fn nearest_nic(host: &HostRanks, l: usize, usage: &[u32]) -> Option<usize> {
    let score = |i: usize| path_to_nic(host, l, i).map(|p| (p.ty, -p.bw));
    let best = (0..host.sys.nics.len()).filter_map(score).min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))?;
    (0..host.sys.nics.len()).filter(|&i| score(i) == Some(best)).min_by_key(|&i| (usage.get(i), i))
}
