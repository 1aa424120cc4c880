//! Trees per channel: inside a host a chain in the channel's ring order, whose head (the
//! rank where the ring enters the host) joins a binary tree over the hosts. Even channels
//! use one binary tree, odd channels its complement (mirrored for an even host count,
//! shifted by one for an odd), so that a host that is a leaf in one tree is an inner node
//! in the other and both directions of every NIC carry work: the double binary tree.

use super::Tree;

/// Parent of each of `n` hosts in a balanced binary tree over them in order: host i is
/// number v = i + 1, its height the lowest set bit of v, so every even-indexed host is a
/// leaf and the largest power of two up to n is the root. A parent past n is skipped for
/// its own parent (that only happens on the right edge, so no node gets a third child).
fn binary_tree(n: usize) -> Vec<Option<usize>> {
    let root = if n == 0 { 0 } else { 1usize << n.ilog2() };
    (1..=n)
        .map(|v| {
            let mut p = v;
            while p != root {
                let low = p & p.wrapping_neg();
                // Of p - low and p + low, the parent is the one with bit `2 * low` set.
                p = if p & (low << 1) != 0 { p - low } else { p + low };
                if p <= n {
                    return Some(p - 1);
                }
            }
            None
        })
        .collect()
}

/// Parent of each host in the inter-host tree of `channel`.
pub(crate) fn host_tree(n: usize, channel: usize) -> Vec<Option<usize>> {
    let t = binary_tree(n);
    if channel.is_multiple_of(2) || n < 2 {
        return t;
    }
    // The complement: host h plays the role of host map(h) in the first tree.
    let map = |h: usize| if n.is_multiple_of(2) { n - 1 - h } else { (h + 1) % n };
    let unmap = |m: usize| if n.is_multiple_of(2) { n - 1 - m } else { (m + n - 1) % n };
    (0..n).map(|h| t[map(h)].map(unmap)).collect()
}

/// The tree of one channel over `nranks` ranks, given each host's ranks in the channel's
/// ring order (head first), hosts in ring order.
pub(crate) fn channel_tree(nranks: usize, hosts: &[Vec<usize>], channel: usize) -> Tree {
    let mut t = Tree { parent: vec![None; nranks], children: vec![Vec::new(); nranks] };
    let connect = |t: &mut Tree, parent: usize, child: usize| {
        if parent < nranks && child < nranks {
            t.parent[child] = Some(parent);
            t.children[parent].push(child);
        }
    };
    for order in hosts {
        for w in order.windows(2) {
            connect(&mut t, w[0], w[1]);
        }
    }
    let heads: Vec<Option<usize>> = hosts.iter().map(|o| o.first().copied()).collect();
    for (h, p) in host_tree(hosts.len(), channel).into_iter().enumerate() {
        if let (Some(p), Some(child)) = (p, heads[h]) {
            if let Some(parent) = heads[p] {
                connect(&mut t, parent, child);
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_trees_are_trees_and_complementary() {
        for n in 1..40 {
            for chan in 0..2 {
                let t = host_tree(n, chan);
                assert_eq!(t.iter().filter(|p| p.is_none()).count(), 1, "n={n}");
                for h in 0..n {
                    let kids = t.iter().filter(|p| **p == Some(h)).count();
                    assert!(kids <= 2);
                    // Every host reaches the root.
                    let (mut at, mut steps) = (h, 0);
                    while let Some(p) = t[at] {
                        at = p;
                        steps += 1;
                        assert!(steps <= n);
                    }
                }
            }
            if n > 2 {
                let (a, b) = (host_tree(n, 0), host_tree(n, 1));
                let inner = |t: &[Option<usize>], h| t.contains(&Some(h));
                // No host is a leaf in both trees (the point of the second tree).
                let both_leaf = (0..n).filter(|&h| !inner(&a, h) && !inner(&b, h)).count();
                assert!(both_leaf <= 1, "n={n}: {both_leaf}");
            }
        }
    }

    #[test]
    fn chain_inside_hosts_heads_between() {
        // Host 0: ranks 0, 2; host 1: ranks 1, 3; the ring enters host 1 at rank 3.
        let t = channel_tree(4, &[vec![0, 2], vec![3, 1]], 0);
        assert_eq!(t.parent, vec![Some(3), Some(3), Some(0), None]);
        assert_eq!(t.children[3], vec![1, 0]);
        let t = channel_tree(4, &[vec![0, 2], vec![3, 1]], 1);
        assert_eq!(t.parent, vec![None, Some(3), Some(0), Some(0)], "the other tree has the other root");
        assert_eq!(t.children[0], vec![2, 3]);
    }
}
