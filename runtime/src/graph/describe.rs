//! A graph as the log tells it across hosts: per channel, the ring host by host and how
//! often it crosses between hosts, and the tree over the hosts' heads, each beside the
//! fewest crossings possible, so a log shows at once whether the network carries more
//! than it must.

use super::{Channel, Graph};

/// Hops of `ring` (cyclic) between ranks of different hosts, rank `r` on host `hosts[r]`.
pub(crate) fn ring_crossings(ring: &[usize], hosts: &[usize]) -> usize {
    let n = ring.len();
    (0..n).filter(|&k| hosts.get(ring[k]) != hosts.get(ring[(k + 1) % n])).count()
}

/// Edges of the channel's tree between ranks of different hosts.
fn tree_crossings(ch: &Channel, hosts: &[usize]) -> usize {
    let parents = ch.tree.parent.iter().enumerate();
    parents.filter(|(r, p)| p.is_some_and(|p| hosts.get(p) != hosts.get(*r))).count()
}

impl Graph {
    /// One line per channel describing it across hosts, rank `r` on host `hosts[r]`: the
    /// ring as runs of one host's ranks and its crossings between hosts (each host once
    /// each way at best), the hosts' heads in the tree (its root, and each head under its
    /// parent) and the tree's edges between hosts (one fewer than the hosts at best).
    pub(crate) fn across_hosts(&self, hosts: &[usize]) -> Vec<String> {
        let nhosts = {
            let mut h: Vec<usize> = hosts.to_vec();
            h.sort_unstable();
            h.dedup();
            h.len()
        };
        let fewest_ring = if nhosts > 1 { nhosts } else { 0 };
        let host = |r: usize| hosts.get(r).map_or_else(|| "?".to_string(), |h| h.to_string());
        self.channels
            .iter()
            .enumerate()
            .map(|(c, ch)| {
                let mut runs: Vec<(String, Vec<String>)> = Vec::new();
                for &r in &ch.ring {
                    match runs.last_mut() {
                        Some((h, ranks)) if *h == host(r) => ranks.push(r.to_string()),
                        _ => runs.push((host(r), vec![r.to_string()])),
                    }
                }
                let ring: Vec<String> = runs.iter().map(|(h, ranks)| format!("host {h} [{}]", ranks.join(" "))).collect();
                let heads: Vec<String> = ch
                    .ring
                    .iter()
                    .filter_map(|&r| match ch.tree.parent.get(r).copied().flatten() {
                        None => Some(format!("{r} (root)")),
                        Some(p) if hosts.get(p) != hosts.get(r) => Some(format!("{r} under {p}")),
                        Some(_) => None,
                    })
                    .collect();
                format!(
                    "channel {c}: ring {}, crossing between hosts {} time(s) (fewest {fewest_ring}); tree: hosts' heads {}, chains inside hosts, {} edge(s) between hosts (fewest {})",
                    ring.join(" | "),
                    ring_crossings(&ch.ring, hosts),
                    heads.join(", "),
                    tree_crossings(ch, hosts),
                    nhosts.saturating_sub(1)
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_rings_and_trees_host_by_host() {
        let hosts = [0, 1, 0, 1];
        let g = Graph::by_host(&hosts, 2);
        let lines = g.across_hosts(&hosts);
        assert_eq!(
            lines[0],
            "channel 0: ring host 0 [0 2] | host 1 [1 3], crossing between hosts 2 time(s) (fewest 2); tree: hosts' \
             heads 0 under 1, 1 (root), chains inside hosts, 1 edge(s) between hosts (fewest 1)"
        );
        assert!(lines[1].starts_with("channel 1: ring host 0 [2 0] | host 1 [3 1], crossing between hosts 2 time(s)"));
        // Rank order over interleaved hosts crosses at every hop.
        let naive = Graph::uniform(4, 1);
        assert!(naive.across_hosts(&hosts)[0].contains("crossing between hosts 4 time(s) (fewest 2)"), "{naive:?}");
    }
}
