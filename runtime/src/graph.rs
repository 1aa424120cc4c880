//! Graph search: the ring and tree each channel uses. In one process every path is equal,
//! so channels alternate orders (even: rank order, odd: reversed) — this spreads roots and
//! leaves like NCCL's double binary tree and exercises the ring position mapping.
//!
//! The topology-aware search (`search`, over a [`GlobalSystem`]) lives in the files below;
//! it is not wired into communicator init yet.

mod model;
mod rings;
mod search;
mod trees;
mod xml;

pub use model::{Channel, Device, GlobalSystem, Graph, RankPlace, SearchParams};
pub use search::search;
pub use xml::search_or_load;

/// Ring order of channel `chan`: user rank at each ring position.
pub fn ring(nranks: usize, chan: usize) -> Vec<usize> {
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
pub fn tree(nranks: usize, chan: usize) -> Tree {
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
}
