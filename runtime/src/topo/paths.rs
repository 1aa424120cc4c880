//! Path types and the best path between every pair of nodes of one host.
//!
//! A path's type is the worst hop on it, by NCCL's scale (LOC best, DIS unreachable); among
//! paths of one type the one with the widest bottleneck wins, then the shortest. The hop
//! rules: an NVLink hop is NVL, or NVB when it leaves a GPU that is only passed through; a
//! PCIe hop is PIX, PXB once a second PCIe switch is passed, PHB when it leaves a CPU it
//! passed through; a CPU-to-CPU hop is SYS. NICs are never passed through, and GPUs only
//! from NVLink to NVLink.

use std::fmt;

use super::nodes::{Link, LinkKind, Node, NodeKind};

/// How two devices reach each other, best first (NCCL's names and order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathType {
    /// The same device.
    Loc,
    /// NVLink, directly or through NVSwitches.
    Nvl,
    /// NVLink through another GPU.
    Nvb,
    /// Chip-to-chip link to the CPU.
    C2c,
    /// PCIe through at most one switch.
    Pix,
    /// PCIe through several switches, not the CPU.
    Pxb,
    /// PCIe to the CPU, then C2C.
    P2c,
    /// A NIC reached through a peer GPU over NVLink.
    Pxn,
    /// PCIe through the CPU's host bridge.
    Phb,
    /// Across the CPUs' interconnect (another NUMA domain).
    Sys,
    /// Across the network (another host).
    Net,
    /// Not connected.
    Dis,
}

const NAMES: [(PathType, &str); 12] = [
    (PathType::Loc, "LOC"),
    (PathType::Nvl, "NVL"),
    (PathType::Nvb, "NVB"),
    (PathType::C2c, "C2C"),
    (PathType::Pix, "PIX"),
    (PathType::Pxb, "PXB"),
    (PathType::P2c, "P2C"),
    (PathType::Pxn, "PXN"),
    (PathType::Phb, "PHB"),
    (PathType::Sys, "SYS"),
    (PathType::Net, "NET"),
    (PathType::Dis, "DIS"),
];

impl PathType {
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(t, _)| *t == self).map_or("DIS", |(_, n)| n)
    }

    /// The type named `s` (case-insensitive), as graph files write it.
    pub fn parse(s: &str) -> Option<PathType> {
        NAMES.iter().find(|(_, n)| n.eq_ignore_ascii_case(s.trim())).map(|(t, _)| *t)
    }
}

impl fmt::Display for PathType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One traversal of a link: its index in [`super::System::links`] and whether it is
/// crossed from `a` to `b` (links are full duplex: each direction has the link's bandwidth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    pub link: usize,
    pub forward: bool,
}

/// The best path from one node to another.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub ty: PathType,
    /// Bottleneck bandwidth in GB/s (0 when not connected).
    pub bw: f64,
    pub hops: Vec<Hop>,
}

impl Path {
    fn unreachable() -> Path {
        Path { ty: PathType::Dis, bw: 0.0, hops: Vec::new() }
    }
}

/// Bandwidth of a path that stays on one device (memory copies), GB/s.
pub const LOC_BW: f64 = 5000.0;

#[derive(Clone)]
struct Label {
    ty: PathType,
    bw: f64,
    /// PCIe switches passed through so far (the second one makes the path PXB).
    switches: u32,
    hops: Vec<Hop>,
}

impl Label {
    /// Better: a better type, then a wider bottleneck, then fewer hops.
    fn better_than(&self, o: &Label) -> bool {
        (self.ty, o.bw, self.hops.len()) < (o.ty, self.bw, o.hops.len())
    }
}

/// The best path from every node to every node (`paths[from][to]`).
pub(crate) fn all_pairs(nodes: &[Node], links: &[Link]) -> Vec<Vec<Path>> {
    let mut adj: Vec<Vec<Hop>> = vec![Vec::new(); nodes.len()];
    for (i, l) in links.iter().enumerate() {
        if l.a < nodes.len() && l.b < nodes.len() {
            adj[l.a].push(Hop { link: i, forward: true });
            adj[l.b].push(Hop { link: i, forward: false });
        }
    }
    (0..nodes.len()).map(|s| from_source(nodes, links, &adj, s)).collect()
}

/// Label-setting search from `src`: labels only get worse along a path, so the first
/// label settled at a node is its best.
fn from_source(nodes: &[Node], links: &[Link], adj: &[Vec<Hop>], src: usize) -> Vec<Path> {
    let mut best: Vec<Option<Label>> = vec![None; nodes.len()];
    let mut done = vec![false; nodes.len()];
    best[src] = Some(Label { ty: PathType::Loc, bw: LOC_BW, switches: 0, hops: Vec::new() });
    loop {
        let mut pick: Option<usize> = None;
        for (i, l) in best.iter().enumerate() {
            if let (Some(l), false) = (l, done[i]) {
                if pick.is_none_or(|p| best[p].as_ref().is_some_and(|b| l.better_than(b))) {
                    pick = Some(i);
                }
            }
        }
        let Some(u) = pick else { break };
        done[u] = true;
        let Some(lu) = best[u].clone() else { break };
        for &hop in &adj[u] {
            let link = &links[hop.link];
            let v = if hop.forward { link.b } else { link.a };
            let Some(next) = extend(nodes, links, &lu, u, u == src, hop) else { continue };
            if !done[v] && best[v].as_ref().is_none_or(|b| next.better_than(b)) {
                best[v] = Some(next);
            }
        }
    }
    best.into_iter().map(|l| l.map_or_else(Path::unreachable, |l| Path { ty: l.ty, bw: l.bw, hops: l.hops })).collect()
}

/// `label` (a path ending at `u`) extended by `hop`, or `None` where `u` may not be passed.
fn extend(nodes: &[Node], links: &[Link], label: &Label, u: usize, at_src: bool, hop: Hop) -> Option<Label> {
    let link = &links[hop.link];
    let last = label.hops.last().map(|h| links[h.link].kind);
    let mut switches = label.switches;
    let hop_ty = if at_src {
        match link.kind {
            LinkKind::NvLink => PathType::Nvl,
            LinkKind::Pci => PathType::Pix,
            LinkKind::Sys => PathType::Sys,
        }
    } else {
        match (nodes[u].kind, last, link.kind) {
            (NodeKind::Nic, _, _) => return None,
            (NodeKind::Gpu, Some(LinkKind::NvLink), LinkKind::NvLink) => PathType::Nvb,
            (NodeKind::Gpu, _, _) => return None,
            (_, _, LinkKind::NvLink) => PathType::Nvl,
            (_, _, LinkKind::Sys) => PathType::Sys,
            (NodeKind::Cpu, _, LinkKind::Pci) => PathType::Phb,
            (NodeKind::Pci | NodeKind::NvSwitch, _, LinkKind::Pci) => {
                switches += 1;
                if switches > 1 {
                    PathType::Pxb
                } else {
                    PathType::Pix
                }
            }
        }
    };
    let mut hops = label.hops.clone();
    hops.push(hop);
    Some(Label { ty: label.ty.max(hop_ty), bw: label.bw.min(link.bw), switches, hops })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: NodeKind) -> Node {
        Node { kind, name: String::new(), cpu: 0 }
    }

    fn link(a: usize, b: usize, kind: LinkKind, bw: f64) -> Link {
        Link { a, b, kind, bw }
    }

    #[test]
    fn pcie_tree_types() {
        use NodeKind::*;
        // cpu0 - sw1 - {gpu2, nic3}; cpu0 - sw4 - {sw5 - gpu6, nic9}; cpu0 - cpu7 - gpu8
        let nodes: Vec<Node> = [Cpu, Pci, Gpu, Nic, Pci, Pci, Gpu, Cpu, Gpu, Nic].into_iter().map(node).collect();
        let p = LinkKind::Pci;
        let links = vec![
            link(0, 1, p, 24.0),
            link(1, 2, p, 24.0),
            link(1, 3, p, 12.0),
            link(0, 4, p, 24.0),
            link(4, 5, p, 24.0),
            link(5, 6, p, 24.0),
            link(0, 7, LinkKind::Sys, 10.0),
            link(7, 8, p, 24.0),
            link(4, 9, p, 24.0),
        ];
        let paths = all_pairs(&nodes, &links);
        assert_eq!((paths[2][3].ty, paths[2][3].bw), (PathType::Pix, 12.0));
        assert_eq!(paths[2][2].ty, PathType::Loc);
        assert_eq!(paths[2][6].ty, PathType::Phb);
        assert_eq!(paths[3][6].ty, PathType::Phb);
        assert_eq!(paths[4][6].ty, PathType::Pix, "one switch passed");
        assert_eq!(paths[6][9].ty, PathType::Pxb, "two switches passed");
        assert_eq!((paths[2][8].ty, paths[2][8].bw), (PathType::Sys, 10.0));
        assert_eq!(paths[2][8].hops.len(), 4);
    }

    #[test]
    fn nvlink_through_switch_and_gpu() {
        use NodeKind::*;
        let nodes: Vec<Node> = [Gpu, Gpu, Gpu, NvSwitch, Gpu].into_iter().map(node).collect();
        let nv = LinkKind::NvLink;
        let links = vec![link(0, 1, nv, 40.0), link(1, 2, nv, 40.0), link(0, 3, nv, 100.0), link(4, 3, nv, 100.0)];
        let paths = all_pairs(&nodes, &links);
        assert_eq!(paths[0][2].ty, PathType::Nvb);
        assert_eq!((paths[0][4].ty, paths[0][4].bw), (PathType::Nvl, 100.0));
        assert_eq!(paths[2][4].ty, PathType::Nvb);
        assert_eq!(paths[2][4].bw, 40.0);
    }

    #[test]
    fn unreachable_is_dis_and_names_round_trip() {
        let nodes = vec![node(NodeKind::Gpu), node(NodeKind::Gpu)];
        let paths = all_pairs(&nodes, &[]);
        assert_eq!((paths[0][1].ty, paths[0][1].bw), (PathType::Dis, 0.0));
        for (t, n) in NAMES {
            assert_eq!(PathType::parse(n), Some(t));
            assert_eq!(t.to_string(), n);
        }
    }
}
