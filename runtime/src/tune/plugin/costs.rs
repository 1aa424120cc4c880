//! NCCL's cost table (`collCostTable[algorithm][protocol]`, microseconds, -1 where
//! unavailable) in NCCL's order, filled from jitccl's cost model and read back after a
//! plugin edited it. jitccl's ring and tree are NCCL's RING and TREE; its other
//! algorithms (one-shot, the direct ones) have no index in the table and so stay out of it.

use std::ffi::c_int;

use jitccl_codegen::{Algorithm, Collective, Protocol};

use crate::tune::Estimate;

pub(super) const NUM_ALGOS: usize = 7;
pub(super) const NUM_PROTOS: usize = 3;
pub(super) type CostTable = [[f32; NUM_PROTOS]; NUM_ALGOS];

pub(super) const TREE: usize = 0;
pub(super) const RING: usize = 1;
pub(super) const COLLNET_CHAIN: usize = 3;
pub(super) const NVLS: usize = 4;
pub(super) const NVLS_TREE: usize = 5;
pub(super) const SIMPLE: usize = 2;

/// NCCL's names, for logs (its `NCCL_ALGO` spelling).
const ALGO_NAMES: [&str; NUM_ALGOS] = ["Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"];
const PROTO_NAMES: [&str; NUM_PROTOS] = ["LL", "LL128", "Simple"];

/// What NCCL writes for an unavailable entry.
const UNAVAILABLE: f32 = -1.0;

/// NCCL's `ncclFunc_t` of the collectives NCCL asks its tuner about; the others (point to
/// point, AlltoAll, Gather, Scatter: NCCL runs them as point-to-point) are never asked.
pub(super) fn func(c: Collective) -> Option<c_int> {
    match c {
        Collective::Broadcast => Some(0),
        Collective::Reduce => Some(1),
        Collective::AllGather => Some(2),
        Collective::ReduceScatter => Some(3),
        Collective::AllReduce => Some(4),
        Collective::SendRecv | Collective::AllToAll | Collective::Gather | Collective::Scatter => None,
    }
}

pub(super) fn algo_index(a: Algorithm) -> Option<usize> {
    match a {
        Algorithm::Tree => Some(TREE),
        Algorithm::Ring => Some(RING),
        // NCCL's table has no column for jitccl's own algorithms.
        _ => None,
    }
}

fn algo_at(i: usize) -> Option<Algorithm> {
    match i {
        TREE => Some(Algorithm::Tree),
        RING => Some(Algorithm::Ring),
        _ => None,
    }
}

pub(super) fn proto_index(p: Protocol) -> usize {
    match p {
        Protocol::LL => 0,
        Protocol::LL128 => 1,
        Protocol::Simple => SIMPLE,
    }
}

const PROTOS: [Protocol; NUM_PROTOS] = [Protocol::LL, Protocol::LL128, Protocol::Simple];

/// An entry by NCCL's names: `Tree/LL`.
pub(super) fn entry_name(a: usize, p: usize) -> String {
    format!("{}/{}", ALGO_NAMES[a], PROTO_NAMES[p])
}

/// The table of `candidates` (the model's best per algorithm and protocol): their time
/// where the algorithm has an index, -1 everywhere else.
pub(super) fn fill(candidates: &[Estimate]) -> CostTable {
    let mut t = [[UNAVAILABLE; NUM_PROTOS]; NUM_ALGOS];
    for e in candidates {
        if let Some(a) = algo_index(e.algo) {
            t[a][proto_index(e.proto)] = e.us as f32;
        }
    }
    t
}

/// What a plugin made of the table jitccl filled (`before`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Edited {
    /// Whether it changed any entry jitccl can run (asking for one jitccl cannot run
    /// changes nothing of what runs).
    pub changed: bool,
    /// The entries jitccl can run, with the plugin's costs, in NCCL's order.
    pub runnable: Vec<(Algorithm, Protocol, f32)>,
    /// Entries the plugin made available that jitccl had marked unavailable: (algorithm,
    /// protocol) indices.
    pub refused: Vec<(usize, usize)>,
}

/// Reads `after` against `before`. A negative or NaN cost is unavailable.
pub(super) fn read(before: &CostTable, after: &CostTable) -> Edited {
    let mut e = Edited { changed: false, runnable: Vec::new(), refused: Vec::new() };
    for a in 0..NUM_ALGOS {
        for p in 0..NUM_PROTOS {
            let (was, now) = (before[a][p], after[a][p]);
            e.changed |= was >= 0.0 && was.to_bits() != now.to_bits();
            if now.is_nan() || now < 0.0 {
                continue;
            }
            match algo_at(a) {
                Some(algo) if was >= 0.0 => e.runnable.push((algo, PROTOS[p], now)),
                _ => e.refused.push((a, p)),
            }
        }
    }
    e
}

/// Why jitccl cannot run entry (`a`, `p`) for `coll` in this call.
pub(super) fn why_not(a: usize, p: usize, coll: Collective) -> String {
    match algo_at(a) {
        None => format!("jitccl has no {} algorithm", ALGO_NAMES[a]),
        Some(algo) if !coll.algorithms().contains(&algo) => format!("jitccl's {coll} has no {algo}"),
        Some(algo) => format!(
            "{algo}/{} is not allowed for this call (JITCCL_ALGO / JITCCL_PROTO, or an op that is not commutative)",
            PROTOS[p]
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(algo: Algorithm, proto: Protocol, us: f64) -> Estimate {
        Estimate { algo, proto, nchannels: 1, us }
    }

    #[test]
    fn jitccl_ring_and_tree_fill_nccl_indices_and_the_rest_stay_out() {
        let t = fill(&[
            est(Algorithm::Ring, Protocol::Simple, 10.0),
            est(Algorithm::Ring, Protocol::LL, 4.0),
            est(Algorithm::Tree, Protocol::LL128, 7.5),
            est(Algorithm::OneShot, Protocol::LL, 1.0),
            est(Algorithm::Direct, Protocol::Simple, 2.0),
        ]);
        assert_eq!(t[1], [4.0, -1.0, 10.0], "RING: LL, LL128, SIMPLE");
        assert_eq!(t[0], [-1.0, 7.5, -1.0], "TREE");
        for a in 2..NUM_ALGOS {
            assert_eq!(t[a], [-1.0; 3], "{}", ALGO_NAMES[a]);
        }
        assert_eq!(entry_name(4, 2), "NVLS/Simple");
        assert_eq!(entry_name(TREE, 0), "Tree/LL");
        // NCCL's ncclFunc_t order.
        assert_eq!(func(Collective::AllReduce), Some(4));
        assert_eq!(func(Collective::Broadcast), Some(0));
        assert_eq!(func(Collective::ReduceScatter), Some(3));
        assert_eq!(func(Collective::AllToAll), None);
    }

    #[test]
    fn edits_split_into_what_runs_and_what_was_asked_in_vain() {
        let before = fill(&[est(Algorithm::Ring, Protocol::Simple, 10.0), est(Algorithm::Tree, Protocol::LL, 7.0)]);
        assert_eq!(
            read(&before, &before),
            Edited {
                changed: false,
                runnable: vec![(Algorithm::Tree, Protocol::LL, 7.0), (Algorithm::Ring, Protocol::Simple, 10.0)],
                refused: vec![]
            }
        );
        let mut after = before;
        after[NVLS][SIMPLE] = 0.0;
        let e = read(&before, &after);
        assert!(!e.changed && e.refused == [(NVLS, SIMPLE)], "{e:?}");
        after[TREE][0] = 0.0;
        after[RING][SIMPLE] = f32::NAN;
        after[NVLS][SIMPLE] = 0.0;
        after[RING][0] = 3.0;
        let e = read(&before, &after);
        assert!(e.changed);
        assert_eq!(e.runnable, vec![(Algorithm::Tree, Protocol::LL, 0.0)]);
        assert_eq!(e.refused, vec![(RING, 0), (NVLS, SIMPLE)]);
        assert!(why_not(NVLS, SIMPLE, Collective::AllReduce).contains("no NVLS algorithm"));
        assert!(why_not(TREE, 0, Collective::Broadcast).contains("broadcast has no tree"));
        assert!(why_not(RING, 0, Collective::AllReduce).contains("not allowed"));
    }
}
