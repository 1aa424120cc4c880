//! Which of a network's devices each channel of a rank uses, as NCCL chooses: the devices
//! nearest to the rank (from its GPU, or a host rank's NUMA domain: its PCI path to each
//! device in its host's topology, the best path type, then the widest), spread over the
//! ranks of the host that share them, each rank taking its share of them in turn across
//! channels. Init places each GPU rank at its GPU by its PCI address
//! (`GlobalSystem::at_gpus`).
//!
//! A device is placed in the topology by its `pciPath`: the deepest component of the path
//! that the topology knows (the device's own bus id, else the switch or bridge above it).
//! A device the topology cannot place is farther than any it can; where none can be placed,
//! or the rank has no place of its own, every device is as near as any other.

use crate::graph::{Device, GlobalSystem};
use crate::netplugin::DeviceProps;
use crate::topo::{PathType, System};

/// How far a device is from a rank: a path in the topology, or unknown (and why).
#[derive(Debug, Clone, PartialEq)]
enum Reach {
    Path { ty: PathType, bw: f64 },
    Unknown(String),
}

impl Reach {
    /// Orders reaches nearest first: path type, then bandwidth, unknown last.
    fn key(&self) -> (u8, PathType, i64) {
        match self {
            // Bandwidth in MB/s steps: equal links compare equal.
            Reach::Path { ty, bw } => (0, *ty, -((bw * 1000.0).round() as i64)),
            Reach::Unknown(_) => (1, PathType::Dis, 0),
        }
    }
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reach::Path { ty, bw } => write!(f, "{ty} ({bw:.1} GB/s)"),
            Reach::Unknown(why) => write!(f, "unknown ({why})"),
        }
    }
}

/// What a rank's channels use: a device per channel, how far it is from the rank (None:
/// the topology cannot say), and what the log says of the choice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub per_channel: Vec<usize>,
    pub distance: Vec<Option<PathType>>,
    pub why: String,
}

/// The topology node a device sits at, from its PCI path.
fn node_of(sys: &System, pci_path: &str) -> Option<usize> {
    pci_path
        .rsplit('/')
        .filter(|c| !c.is_empty())
        .find_map(|c| sys.nodes.iter().position(|n| n.name.eq_ignore_ascii_case(c)))
}

/// How far each device is from `from` (a node of `sys`).
fn reaches(sys: &System, from: Option<usize>, devices: &[DeviceProps]) -> Vec<Reach> {
    devices
        .iter()
        .map(|d| {
            let Some(from) = from else { return Reach::Unknown("the rank has no place in its topology".into()) };
            let Some(path) = d.pci_path.as_deref() else { return Reach::Unknown("no PCI path".into()) };
            let Some(to) = node_of(sys, path) else { return Reach::Unknown(format!("{path} is not in the topology")) };
            match sys.path(from, to) {
                Some(p) if p.ty != PathType::Dis => Reach::Path { ty: p.ty, bw: p.bw },
                _ => Reach::Unknown(format!("no path to {path}")),
            }
        })
        .collect()
}

/// The devices nearest to a rank at `from`, in device order.
fn nearest(sys: &System, from: Option<usize>, devices: &[DeviceProps]) -> (Vec<usize>, Vec<Reach>) {
    let reach = reaches(sys, from, devices);
    let best = reach.iter().map(Reach::key).min();
    let near = (0..devices.len()).filter(|&d| Some(reach[d].key()) == best).collect();
    (near, reach)
}

/// `v` with its low log2(`n`) bits reversed (`n` a power of two): ranks that share devices
/// start far apart, and the pattern is the same on every host.
fn mirror(v: usize, n: usize) -> usize {
    let bits = n.trailing_zeros();
    (0..bits).filter(|b| v & (1 << b) != 0).map(|b| 1 << (bits - 1 - b)).sum()
}

/// The device of each of `nchannels` channels of `rank`, among `devices`, from where the
/// ranks sit in `global`.
pub(crate) fn choose(global: &GlobalSystem, rank: usize, devices: &[DeviceProps], nchannels: usize) -> Choice {
    let place = global.ranks[rank];
    let sys = &global.hosts[place.host];
    let (near, reach) = nearest(sys, global.node_of(rank), devices);
    if near.is_empty() {
        return Choice {
            per_channel: vec![0; nchannels],
            distance: vec![None; nchannels],
            why: "the network has no device".into(),
        };
    }
    // The host's ranks with the same nearest devices share them; this rank is one of them.
    let sharing: Vec<usize> = (0..global.ranks.len())
        .filter(|&q| global.ranks[q].host == place.host)
        .filter(|&q| q == rank || nearest(sys, global.node_of(q), devices).0 == near)
        .collect();
    let index = sharing.iter().position(|&q| q == rank).expect("a rank shares its own devices");
    let n = near.len();
    let per_rank = n.div_ceil(sharing.len());
    let start = if n.is_power_of_two() { mirror(index % n, n) } else { index % n };
    let per_channel: Vec<usize> = (0..nchannels).map(|c| near[(start + c % per_rank) % n]).collect();
    let from = match place.device {
        Device::Gpu(g) => format!("GPU {g}{}", sys.gpu(g).map_or(String::new(), |x| format!(" ({})", x.busid))),
        Device::Numa(id) => format!("NUMA domain {id}"),
    };
    let far: Vec<String> =
        (0..devices.len()).filter(|d| !near.contains(d)).map(|d| format!("{d}: {}", reach[d])).collect();
    let why = format!(
        "{} of {} device(s) nearest to {from} ({}: {}), shared by {} rank(s) of the host, {per_rank} per rank, \
         this rank's index {index}{}",
        n,
        devices.len(),
        if n == 1 { "device" } else { "devices" },
        near.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ") + &format!(" at {}", reach[near[0]]),
        sharing.len(),
        if far.is_empty() { String::new() } else { format!("; farther: {}", far.join(", ")) },
    );
    let distance = per_channel
        .iter()
        .map(|&d| match reach[d] {
            Reach::Path { ty, .. } => Some(ty),
            Reach::Unknown(_) => None,
        })
        .collect();
    Choice { per_channel, distance, why }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::RankPlace;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo");

    fn device(pci: Option<&str>) -> DeviceProps {
        DeviceProps {
            name: "d".into(),
            pci_path: pci.map(str::to_string),
            guid: 0,
            ptr_support: 1,
            speed_mbps: 100_000,
            latency_us: 0.0,
            max_comms: 1,
            max_recvs: 1,
            reg_is_global: false,
            force_flush: false,
        }
    }

    /// The H100 fixture's NICs, by their PCI switches: a3, ad, b7, c1 under NUMA 0 (beside
    /// GPUs a4, ae, b8, c2), cb, d5, df, e9 under NUMA 1; listed in an order of their own.
    fn h100_nics() -> Vec<DeviceProps> {
        ["e9", "a3", "cb", "ad", "d5", "b7", "df", "c1"]
            .iter()
            .map(|b| device(Some(&format!("/sys/devices/pci0000:00/0000:00:01.0/0000:{b}:00.0"))))
            .collect()
    }

    fn h100(ranks: &[Device]) -> GlobalSystem {
        let sys = System::from_xml_file(format!("{FIXTURES}/hgx-h100-8gpu-8nic.xml")).unwrap();
        GlobalSystem::new(vec![sys], ranks.iter().map(|&device| RankPlace { host: 0, device }).collect()).unwrap()
    }

    #[test]
    fn each_gpu_takes_the_nic_on_its_own_switch() {
        let gpus: Vec<Device> = (0..8).map(Device::Gpu).collect();
        let g = h100(&gpus);
        let nics = h100_nics();
        // GPU 0 sits beside a3 (device 1), GPU 1 beside ad (device 3).
        for (rank, want) in [(0, 1), (1, 3)] {
            let c = choose(&g, rank, &nics, 2);
            assert_eq!(c.per_channel, [want, want], "{}", c.why);
            assert_eq!(c.distance, [Some(PathType::Pix); 2], "{}", c.why);
            assert!(c.why.contains("1 of 8 device(s) nearest to GPU") && c.why.contains("PIX"), "{}", c.why);
        }
    }

    /// As init places them: every rank at its NUMA domain (for the search), then each GPU
    /// rank at its GPU by PCI address. GPUs given in an order of their own each take the NIC
    /// behind their own PCIe switch; a rank whose GPU the topology does not show stays at its
    /// NUMA domain, with that domain's NICs.
    #[test]
    fn gpu_ranks_placed_by_pci_address_take_the_nic_behind_their_switch() {
        // Per rank: its GPU's bus, NUMA domain and device index, and the `h100_nics` index of
        // the NIC beside it.
        let gpus = [
            ("e0", 1, 6, 6),
            ("a4", 0, 0, 1),
            ("cc", 1, 4, 2),
            ("b8", 0, 2, 5),
            ("ea", 1, 7, 0),
            ("ae", 0, 1, 3),
            ("d6", 1, 5, 4),
            ("c2", 0, 3, 7),
        ];
        let mut ranks: Vec<Device> = gpus.iter().map(|&(_, numa, _, _)| Device::Numa(numa)).collect();
        let mut busids: Vec<Option<String>> = gpus.iter().map(|(b, ..)| Some(format!("0000:{b}:00.0"))).collect();
        ranks.extend([Device::Numa(0), Device::Numa(1)]);
        busids.extend([Some("0000:3b:00.0".to_string()), None]);
        let (g, unplaced) = h100(&ranks).at_gpus(&busids);
        assert_eq!(unplaced, [8], "{:?}", g.ranks);
        let nics = h100_nics();
        for (rank, &(bus, _, dev, want)) in gpus.iter().enumerate() {
            assert_eq!(g.ranks[rank].device, Device::Gpu(dev));
            let c = choose(&g, rank, &nics, 2);
            assert_eq!(c.per_channel, [want, want], "GPU {bus}: {}", c.why);
            let at = format!("1 of 8 device(s) nearest to GPU {dev} (0000:{bus}:00.0)");
            assert!(c.why.contains(&at) && c.why.contains("PIX"), "{at}: {}", c.why);
        }
        for (rank, want) in [(8, [1, 3, 5, 7]), (9, [0, 2, 4, 6])] {
            let c = choose(&g, rank, &nics, 4);
            let mut got = c.per_channel.clone();
            got.sort_unstable();
            assert_eq!(got, want, "{}", c.why);
            assert!(c.why.contains("nearest to NUMA domain"), "{}", c.why);
        }
    }

    #[test]
    fn ranks_of_a_numa_domain_spread_over_its_nics() {
        let g = h100(&[Device::Numa(0), Device::Numa(0), Device::Numa(1)]);
        let nics = h100_nics();
        let near0 = [1, 3, 5, 7];
        let (a, b) = (choose(&g, 0, &nics, 2), choose(&g, 1, &nics, 2));
        assert!(
            a.why.contains("4 of 8 device(s) nearest to NUMA domain 0") && a.why.contains("shared by 2"),
            "{}",
            a.why
        );
        for c in a.per_channel.iter().chain(&b.per_channel) {
            assert!(near0.contains(c), "{c} is not under NUMA 0: {}", a.why);
        }
        // Two ranks, four devices: two each, none shared.
        let mut all: Vec<usize> = a.per_channel.iter().chain(&b.per_channel).copied().collect();
        all.sort_unstable();
        assert_eq!(all, near0, "{a:?} {b:?}");
        // NUMA 1's rank has its own four to itself.
        let c = choose(&g, 2, &nics, 4);
        assert_eq!(c.per_channel, [0, 2, 4, 6], "{}", c.why);
    }

    #[test]
    fn devices_the_topology_cannot_place_come_last_or_share_alike() {
        let g = h100(&[Device::Gpu(0)]);
        let mut devs = vec![device(None), device(Some("/sys/devices/virtual/net/lo"))];
        let c = choose(&g, 0, &devs, 2);
        assert_eq!(c.per_channel, [0, 1], "none placed: all alike, {}", c.why);
        assert_eq!(c.distance, [None, None], "{}", c.why);
        devs.push(device(Some("/sys/devices/pci0000:c0/0000:c1:00.0")));
        let c = choose(&g, 0, &devs, 2);
        assert_eq!(c.per_channel, [2, 2], "{}", c.why);
        assert!(c.why.contains("0: unknown (no PCI path)") && c.why.contains("is not in the topology"), "{}", c.why);
    }

    #[test]
    fn mirrored_starts_spread_sharers_apart() {
        assert_eq!((0..4).map(|v| mirror(v, 4)).collect::<Vec<_>>(), [0, 2, 1, 3]);
        assert_eq!((0..8).map(|v| mirror(v, 8)).collect::<Vec<_>>(), [0, 4, 2, 6, 1, 5, 3, 7]);
        assert_eq!(mirror(0, 1), 0);
    }
}
