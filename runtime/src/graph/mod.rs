//! Graph search: the ring and tree each channel uses, computed once per communicator and
//! handed to channel setup (nothing below calls back in here). The topology-aware search
//! (`search`, over a [`GlobalSystem`]) lives in the files below. Where every path is
//! equal (`Graph::uniform`), channels alternate orders (even: rank order, odd: reversed):
//! this spreads roots and leaves like NCCL's double binary tree and exercises the ring
//! position mapping; over several hosts (`Graph::by_host`) each host's ranks stay together.
//! Public for `jitccl topo` and plan inspection.

mod describe;
mod rings;
mod search;
mod trees;
mod types;
mod xml;

pub use search::search;
pub use types::{Channel, Device, GlobalSystem, Graph, RankPlace, SearchParams};
pub use xml::search_or_load;

use crate::topo::PathType;

impl Graph {
    /// The graph of `nchannels` channels over `nranks` ranks of one host that share every
    /// path.
    pub(crate) fn uniform(nranks: usize, nchannels: usize) -> Graph {
        let channel = |c| Channel {
            ring: ring(nranks, c),
            tree: tree(nranks, c),
            nic: vec![None; nranks],
            bw: 0.0,
            ring_lat_us: 0.0,
            tree_lat_us: 0.0,
        };
        Graph {
            nranks,
            nhosts: 1,
            channels: (0..nchannels).map(channel).collect(),
            bw_intra: 0.0,
            bw_inter: 0.0,
            lat_inter: 0.0,
            type_intra: PathType::Loc,
            type_inter: PathType::Loc,
            steps: 0,
            fallback: false,
        }
    }

    /// The graph of `nchannels` channels without a search, rank `r` on host `hosts[r]`: each
    /// host's ranks together (in rank order, reversed on odd channels, so the host's head
    /// changes with the channel), hosts in the order of their first rank, so that every ring
    /// crosses each host boundary once each way; the trees are chains inside the hosts under
    /// a tree of their heads, as the search builds them. One host: [`Graph::uniform`].
    pub(crate) fn by_host(hosts: &[usize], nchannels: usize) -> Graph {
        let nranks = hosts.len();
        let mut order: Vec<usize> = Vec::new();
        for &h in hosts {
            if !order.contains(&h) {
                order.push(h);
            }
        }
        if order.len() < 2 {
            return Graph::uniform(nranks, nchannels);
        }
        let channel = |c: usize| {
            let groups: Vec<Vec<usize>> = order
                .iter()
                .map(|&h| {
                    let mut g: Vec<usize> = (0..nranks).filter(|&r| hosts[r] == h).collect();
                    if c % 2 == 1 {
                        g.reverse();
                    }
                    g
                })
                .collect();
            Channel {
                ring: groups.concat(),
                tree: trees::channel_tree(nranks, &groups, c),
                nic: vec![None; nranks],
                bw: 0.0,
                ring_lat_us: 0.0,
                tree_lat_us: 0.0,
            }
        };
        Graph { nhosts: order.len(), channels: (0..nchannels).map(channel).collect(), ..Graph::uniform(nranks, 0) }
    }
}

/// Ring order of channel `chan`: user rank at each ring position.
fn ring(nranks: usize, chan: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nranks).collect();
    if chan % 2 == 1 {
        order.reverse();
    }
    order
}

/// A tree over the ranks: parent and children of every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub parent: Vec<Option<usize>>,
    pub children: Vec<Vec<usize>>,
}

/// The binary tree of channel `chan` (heap layout over the channel's ring order; arity 2,
/// within the ABI's limit of 3).
fn tree(nranks: usize, chan: usize) -> Tree {
    let order = ring(nranks, chan);
    let mut t = Tree { parent: vec![None; nranks], children: vec![Vec::new(); nranks] };
    for i in 1..nranks {
        let (child, parent) = (order[i], order[(i - 1) / 2]);
        t.parent[child] = Some(parent);
        t.children[parent].push(child);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_span_every_rank_once() {
        for n in 1..20 {
            for chan in 0..2 {
                let t = tree(n, chan);
                assert_eq!(t.parent.iter().filter(|p| p.is_none()).count(), 1);
                let mut seen: Vec<usize> = t.children.iter().flatten().copied().collect();
                seen.sort();
                let root = t.parent.iter().position(|p| p.is_none()).unwrap();
                let expect: Vec<usize> = (0..n).filter(|&r| r != root).collect();
                assert_eq!(seen, expect);
                assert!(t.children.iter().all(|c| c.len() <= jitccl_codegen::abi::MAX_TREE_ARITY));
            }
        }
    }

    #[test]
    fn without_a_search_each_host_stays_together() {
        // Ranks interleaved over three hosts: rank order would cross between hosts at every hop.
        let hosts = [0, 1, 2, 0, 1, 2];
        let g = Graph::by_host(&hosts, 2);
        assert_eq!((g.nhosts, g.nchannels()), (3, 2));
        assert_eq!(g.channels[0].ring, vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(g.channels[1].ring, vec![3, 0, 4, 1, 5, 2], "odd channels enter each host elsewhere");
        for ch in &g.channels {
            assert_eq!(describe::ring_crossings(&ch.ring, &hosts), 3);
            let between = (0..6).filter(|&r| ch.tree.parent[r].is_some_and(|p| hosts[p] != hosts[r])).count();
            assert_eq!(between, 2, "one tree over the three hosts' heads: {:?}", ch.tree.parent);
            assert_eq!(ch.tree.parent.iter().filter(|p| p.is_none()).count(), 1);
        }
        // One host: the uniform graph.
        assert_eq!(Graph::by_host(&[0, 0, 0], 2), Graph::uniform(3, 2));
    }
}
