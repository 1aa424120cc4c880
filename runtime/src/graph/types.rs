//! What the search takes (every host's system and where each rank sits) and what it gives
//! (per channel a ring, a tree, a NIC per rank and estimates).

use super::Tree;
use crate::topo::{PathType, System, TopoError};

/// The device a rank drives on its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// A GPU, by device index.
    Gpu(u32),
    /// A CPU rank (host target), by the NUMA domain it runs in.
    Numa(u32),
}

/// Where one rank is: its host (an index into [`GlobalSystem::hosts`]) and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankPlace {
    pub host: usize,
    pub device: Device,
}

/// Every host's system and every rank's place: the whole input of the search.
#[derive(Debug, Clone)]
pub struct GlobalSystem {
    pub hosts: Vec<System>,
    pub ranks: Vec<RankPlace>,
}

impl GlobalSystem {
    /// Checks that every rank names an existing host and, for a GPU, a GPU of that host.
    pub fn new(hosts: Vec<System>, ranks: Vec<RankPlace>) -> Result<GlobalSystem, TopoError> {
        for (r, p) in ranks.iter().enumerate() {
            let Some(sys) = hosts.get(p.host) else {
                return Err(TopoError::Invalid(format!("rank {r}: host {} of {} hosts", p.host, hosts.len())));
            };
            if let Device::Gpu(dev) = p.device {
                if sys.gpu(dev).is_none() {
                    return Err(TopoError::Invalid(format!(
                        "rank {r}: host {} ({}) has no GPU {dev}",
                        p.host, sys.source
                    )));
                }
            }
        }
        Ok(GlobalSystem { hosts, ranks })
    }

    /// The global system from what each rank reports (as ranks exchange it at init): its
    /// host's system and its device. Ranks whose systems carry the same host hash share a
    /// host (the first such rank's system stands for it); a system without one is its own.
    pub fn from_ranks(per_rank: Vec<(System, Device)>) -> Result<GlobalSystem, TopoError> {
        let mut hosts: Vec<System> = Vec::new();
        let mut ranks = Vec::new();
        for (sys, device) in per_rank {
            let same = |h: &System| h.host_hash.is_some() && h.host_hash == sys.host_hash;
            let host = match hosts.iter().position(same) {
                Some(h) => h,
                None => {
                    hosts.push(sys);
                    hosts.len() - 1
                }
            };
            ranks.push(RankPlace { host, device });
        }
        GlobalSystem::new(hosts, ranks)
    }

    /// One host with a rank per GPU (in device order), or per NUMA domain when it has no
    /// GPU, or a single rank when it has neither.
    pub fn one_rank_per_device(sys: System) -> GlobalSystem {
        let mut gpus: Vec<u32> = sys.gpus.iter().map(|g| g.dev).collect();
        gpus.sort_unstable();
        let mut devices: Vec<Device> = gpus.into_iter().map(Device::Gpu).collect();
        if devices.is_empty() {
            devices = sys.cpus.iter().map(|c| Device::Numa(c.numaid)).collect();
        }
        if devices.is_empty() {
            devices.push(Device::Numa(0));
        }
        let ranks = devices.into_iter().map(|device| RankPlace { host: 0, device }).collect();
        GlobalSystem { hosts: vec![sys], ranks }
    }

    /// This system with each GPU rank at its GPU, found in its host's topology by its PCI
    /// address (`gpus[q]`: rank q's; `None` for a host rank), for choosing the network
    /// devices nearest to it, as NCCL places a rank at its GPU. A rank whose GPU its host's
    /// topology does not show (a topology file of another machine) stays where it was; the
    /// second value lists those ranks.
    pub(crate) fn at_gpus(mut self, gpus: &[Option<String>]) -> (GlobalSystem, Vec<usize>) {
        let mut unplaced = Vec::new();
        for (q, p) in self.ranks.iter_mut().enumerate() {
            let Some(busid) = gpus.get(q).and_then(Option::as_deref) else { continue };
            match self.hosts[p.host].gpus.iter().find(|g| g.busid.eq_ignore_ascii_case(busid)) {
                Some(g) => p.device = Device::Gpu(g.dev),
                None => unplaced.push(q),
            }
        }
        (self, unplaced)
    }

    /// The system node of `rank`'s device (`None` for a CPU rank whose host shows no such
    /// NUMA domain: it is then treated as sharing memory with its host's other such ranks).
    pub fn node_of(&self, rank: usize) -> Option<usize> {
        let p = self.ranks.get(rank)?;
        let sys = self.hosts.get(p.host)?;
        match p.device {
            Device::Gpu(dev) => sys.gpu(dev).map(|g| g.node),
            Device::Numa(id) => sys.cpu(id).map(|c| c.node),
        }
    }
}

/// Limits of the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchParams {
    /// Fewest channels to return (rings are duplicated to reach it).
    pub min_channels: usize,
    /// Most channels to return.
    pub max_channels: usize,
    /// Search steps allowed in all (each try of a next device in a ring is one step).
    pub step_budget: u64,
}

impl Default for SearchParams {
    fn default() -> SearchParams {
        SearchParams { min_channels: 1, max_channels: crate::settings::GPU_CHANNELS, step_budget: 1 << 19 }
    }
}

/// One channel of the result.
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    /// User rank at each ring position; each host's ranks are contiguous.
    pub ring: Vec<usize>,
    /// Parent and children of every rank (arity at most `MAX_TREE_ARITY`).
    pub tree: Tree,
    /// Per rank: the net device (`Nic::dev` of its host) it uses in this channel, `None`
    /// where its host has no NIC.
    pub nic: Vec<Option<u32>>,
    /// Estimated bandwidth of the channel's ring, GB/s.
    pub bw: f64,
    /// Estimated latency once around the ring, and up and down the tree, µs.
    pub ring_lat_us: f64,
    pub tree_lat_us: f64,
}

/// The result of a search (or of a graph file).
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub nranks: usize,
    pub nhosts: usize,
    pub channels: Vec<Channel>,
    /// Per-channel bandwidth inside hosts and between hosts (0 with one host), GB/s.
    pub bw_intra: f64,
    pub bw_inter: f64,
    /// Latency of the network's devices between hosts, as their network reports it, µs
    /// (0: not known); the model adds it to each hop between hosts.
    pub lat_inter: f64,
    /// Worst path type used inside a host, and between a rank and its NIC.
    pub type_intra: PathType,
    pub type_inter: PathType,
    /// Search steps spent.
    pub steps: u64,
    /// No ring fit the budget on some host: its ranks go in rank order.
    pub fallback: bool,
}

impl Graph {
    pub fn nchannels(&self) -> usize {
        self.channels.len()
    }
}
