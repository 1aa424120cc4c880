//! Rings inside one host: as many cycles through the host's ranks as its links carry at
//! one per-channel speed, trying speeds fastest first and keeping the best total.
//!
//! A cycle is found by depth-first search: from a start rank, the next rank is tried in
//! order of the previous cycle's choice (so channels agree where they can), then best path
//! type, then widest path, then rank order; a hop is possible when every link on its path
//! still has the speed left in that direction. Each try counts as a step; a cycle may take
//! `ATTEMPT_STEPS`, the whole search the caller's budget. Nothing depends on the clock, so
//! the same inputs give the same rings.

use crate::topo::{Path, PathType, System, LOC_BW};

/// Per-channel speeds tried, GB/s, fastest first.
const SPEEDS: [f64; 18] =
    [60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 10.0, 8.0, 6.0, 4.0, 3.0, 2.0, 1.2, 0.6, 0.3, 0.1];
/// Steps one cycle may take before the search gives up on it.
const ATTEMPT_STEPS: u64 = 1 << 14;
/// Bandwidth of the rank-order fallback when its paths are unknown (NCCL's value).
const FALLBACK_BW: f64 = 0.1;

/// Search steps spent and allowed, over all hosts.
#[derive(Debug)]
pub(crate) struct Budget {
    pub used: u64,
    pub limit: u64,
}

/// The rings found for one host.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostRings {
    /// Cycles over local rank indices.
    pub cycles: Vec<Vec<usize>>,
    /// Bandwidth of each cycle, GB/s.
    pub bw: f64,
    /// Worst path type on the cycles.
    pub ty: PathType,
    pub fallback: bool,
}

/// Two ranks without a system node (CPU ranks in an undescribed domain) share memory.
static LOCAL: Path = Path { ty: PathType::Loc, bw: LOC_BW, hops: Vec::new() };

/// The path between local ranks `i` and `j` (`None`: not connected).
pub(crate) fn local_path<'a>(sys: &'a System, nodes: &[Option<usize>], i: usize, j: usize) -> Option<&'a Path> {
    match (nodes[i], nodes[j]) {
        (Some(a), Some(b)) => sys.path(a, b).filter(|p| p.ty != PathType::Dis),
        _ => Some(&LOCAL),
    }
}

/// Rings for the ranks whose system nodes are `nodes`, at most `max_cycles`.
pub(crate) fn search(sys: &System, nodes: &[Option<usize>], max_cycles: usize, budget: &mut Budget) -> HostRings {
    let n = nodes.len();
    let max_cycles = max_cycles.max(1);
    // No ring carries more than its slowest rank sends in all.
    let out_bw = |node: Option<usize>| match node {
        Some(v) => sys.links.iter().filter(|l| l.a == v || l.b == v).map(|l| l.bw).sum::<f64>(),
        None => f64::INFINITY,
    };
    let bound = if n < 2 { f64::INFINITY } else { nodes.iter().map(|&v| out_bw(v)).fold(f64::INFINITY, f64::min) };
    let mut best: Option<HostRings> = None;
    for &s in SPEEDS.iter().filter(|&&s| s <= bound || s == FALLBACK_BW) {
        if budget.used >= budget.limit {
            break;
        }
        let mut dfs =
            Dfs { sys, nodes, caps: sys.links.iter().map(|l| [l.bw, l.bw]).collect(), s, prefer: None, left: 0 };
        let mut cycles: Vec<Vec<usize>> = Vec::new();
        while cycles.len() < max_cycles && budget.used < budget.limit {
            dfs.left = ATTEMPT_STEPS.min(budget.limit - budget.used);
            let before = dfs.left;
            let found = dfs.cycle(cycles.len() % n.max(1));
            budget.used += before - dfs.left;
            let Some(c) = found else { break };
            dfs.prefer = Some(c.clone());
            cycles.push(c);
        }
        let total = cycles.len() as f64 * s;
        if !cycles.is_empty() && best.as_ref().is_none_or(|b| total > b.cycles.len() as f64 * b.bw + 1e-9) {
            let ty = worst_type(sys, nodes, &cycles);
            best = Some(HostRings { cycles, bw: s, ty, fallback: false });
        }
        let full = best.as_ref().is_some_and(|b| b.cycles.len() == max_cycles || b.cycles.len() as f64 * b.bw >= bound);
        if full {
            break;
        }
    }
    best.unwrap_or_else(|| fallback(sys, nodes))
}

/// Ranks in order, at the slowest path's bandwidth: what is left when no ring fits.
fn fallback(sys: &System, nodes: &[Option<usize>]) -> HostRings {
    let cycle: Vec<usize> = (0..nodes.len()).collect();
    let n = nodes.len().max(1);
    let bw = (0..nodes.len())
        .map(|i| local_path(sys, nodes, i, (i + 1) % n).map_or(0.0, |p| p.bw))
        .fold(f64::INFINITY, f64::min);
    let bw = if bw.is_finite() && bw > 0.0 { bw } else { FALLBACK_BW };
    let ty = worst_type(sys, nodes, std::slice::from_ref(&cycle));
    HostRings { cycles: vec![cycle], bw, ty, fallback: true }
}

fn worst_type(sys: &System, nodes: &[Option<usize>], cycles: &[Vec<usize>]) -> PathType {
    let hops = cycles.iter().flat_map(|c| (0..c.len()).map(move |k| (c[k], c[(k + 1) % c.len()])));
    hops.map(|(a, b)| local_path(sys, nodes, a, b).map_or(PathType::Dis, |p| p.ty)).max().unwrap_or(PathType::Loc)
}

struct Dfs<'a> {
    sys: &'a System,
    nodes: &'a [Option<usize>],
    /// Bandwidth left on each link, per direction (forward = a to b).
    caps: Vec<[f64; 2]>,
    s: f64,
    /// The previous cycle, whose successors are tried first.
    prefer: Option<Vec<usize>>,
    left: u64,
}

impl Dfs<'_> {
    /// A cycle from `start` through every rank, its bandwidth taken from the links. The
    /// search keeps its own stack (one candidate list per rank placed), not the call stack,
    /// so a host with many ranks cannot overflow it.
    fn cycle(&mut self, start: usize) -> Option<Vec<usize>> {
        let n = self.nodes.len();
        if n <= 1 {
            return (n == 1 && self.take(start, start)).then(|| vec![start]);
        }
        let mut order = vec![start];
        let mut used = vec![false; n];
        used[start] = true;
        let mut stack = vec![self.candidates(start, &used).into_iter()];
        while let Some(top) = stack.last_mut() {
            let last = order[order.len() - 1];
            let Some(next) = top.next() else {
                // Every candidate after `last` failed: step back.
                stack.pop();
                if order.len() > 1 {
                    order.pop();
                    used[last] = false;
                    self.give(order[order.len() - 1], last);
                }
                continue;
            };
            if self.left == 0 {
                break;
            }
            self.left -= 1;
            if !self.take(last, next) {
                continue;
            }
            order.push(next);
            used[next] = true;
            if order.len() < n {
                stack.push(self.candidates(next, &used).into_iter());
            } else if self.take(next, start) {
                return Some(order);
            } else {
                order.pop();
                used[next] = false;
                self.give(last, next);
            }
        }
        // Out of steps (or of orders): return what the partial cycle took.
        for w in order.windows(2) {
            self.give(w[0], w[1]);
        }
        None
    }

    /// Unused ranks in the order they are tried after `from`.
    fn candidates(&self, from: usize, used: &[bool]) -> Vec<usize> {
        let preferred = self.prefer.as_ref().and_then(|c| {
            let at = c.iter().position(|&x| x == from)?;
            Some(c[(at + 1) % c.len()])
        });
        let mut cands: Vec<(bool, PathType, f64, usize)> = (0..used.len())
            .filter(|&j| !used[j])
            .filter_map(|j| {
                let p = local_path(self.sys, self.nodes, from, j)?;
                Some((preferred != Some(j), p.ty, -p.bw, j))
            })
            .collect();
        cands.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)).then(a.3.cmp(&b.3)));
        cands.into_iter().map(|c| c.3).collect()
    }

    /// Takes the speed from every link between local ranks `a` and `b`, if all have it.
    fn take(&mut self, a: usize, b: usize) -> bool {
        let Some(path) = local_path(self.sys, self.nodes, a, b) else { return false };
        let fits = path.hops.iter().all(|h| self.caps[h.link][usize::from(!h.forward)] + 1e-9 >= self.s);
        if fits {
            for h in &path.hops {
                self.caps[h.link][usize::from(!h.forward)] -= self.s;
            }
        }
        fits
    }

    fn give(&mut self, a: usize, b: usize) {
        if let Some(path) = local_path(self.sys, self.nodes, a, b) {
            for h in &path.hops {
                self.caps[h.link][usize::from(!h.forward)] += self.s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> System {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo");
        System::from_xml_file(format!("{dir}/{name}")).unwrap()
    }

    fn gpu_nodes(sys: &System) -> Vec<Option<usize>> {
        sys.gpus.iter().map(|g| Some(g.node)).collect()
    }

    #[test]
    fn nvswitch_host_rings_at_nvlink_speed() {
        let sys = fixture("hgx-h100-8gpu-8nic.xml");
        let mut budget = Budget { used: 0, limit: 1 << 19 };
        let r = search(&sys, &gpu_nodes(&sys), 32, &mut budget);
        assert!(!r.fallback);
        assert_eq!(r.ty, PathType::Nvl);
        assert!(r.bw >= 20.0, "{}", r.bw);
        assert!(r.cycles.len() as f64 * r.bw <= 18.0 * 20.6 + 1e-9);
        for c in &r.cycles {
            let mut s = c.clone();
            s.sort();
            assert_eq!(s, (0..8).collect::<Vec<_>>());
        }
    }

    #[test]
    fn pci_host_crosses_each_domain_once() {
        let sys = fixture("ndv4-a100-pci-only.xml");
        let mut budget = Budget { used: 0, limit: 1 << 19 };
        let nodes = gpu_nodes(&sys);
        let r = search(&sys, &nodes, 32, &mut budget);
        assert!(!r.fallback);
        for c in &r.cycles {
            let crossings = (0..8).filter(|&k| {
                let (a, b) = (nodes[c[k]].unwrap(), nodes[c[(k + 1) % 8]].unwrap());
                sys.nodes[a].cpu != sys.nodes[b].cpu
            });
            assert_eq!(crossings.count(), 4, "{c:?}");
        }
    }

    #[test]
    fn tiny_budget_falls_back_to_rank_order() {
        let sys = fixture("ndv4-a100-pci-only.xml");
        let mut budget = Budget { used: 0, limit: 3 };
        let r = search(&sys, &gpu_nodes(&sys), 32, &mut budget);
        assert!(r.fallback);
        assert_eq!(r.cycles, vec![(0..8).collect::<Vec<_>>()]);
        assert!(budget.used <= 3);
    }

    #[test]
    fn one_rank_and_shared_memory_ranks() {
        let sys = System::from_xml_str("e", "<system/>").unwrap();
        let mut budget = Budget { used: 0, limit: 1 << 10 };
        let r = search(&sys, &[None], 4, &mut budget);
        assert_eq!((r.cycles.len(), r.ty), (4, PathType::Loc));
        let r = search(&sys, &[None, None, None], 2, &mut budget);
        assert_eq!(r.cycles.len(), 2);
        // Many ranks on one host: no recursion to overflow.
        let mut budget = Budget { used: 0, limit: 1 << 19 };
        let r = search(&sys, &vec![None; 2000], 1, &mut budget);
        assert_eq!((r.cycles.len(), r.cycles[0].len(), r.fallback), (1, 2000, false));
    }

    #[test]
    fn exhausted_attempt_gives_back_what_it_took() {
        let sys = fixture("ndv4-a100-pci-only.xml");
        let nodes = gpu_nodes(&sys);
        let caps: Vec<[f64; 2]> = sys.links.iter().map(|l| [l.bw, l.bw]).collect();
        let mut dfs = Dfs { sys: &sys, nodes: &nodes, caps: caps.clone(), s: 20.0, prefer: None, left: 5 };
        assert!(dfs.cycle(0).is_none());
        assert_eq!(dfs.caps, caps);
    }
}
