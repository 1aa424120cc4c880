//! Builds one rank's connector tables from the receive segments of all ranks and the
//! communicator's graph: a rank receives in its own segment and sends into its peers'.

use jitccl_codegen::abi::{Channel, Conn};

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::transport::layout::{Edge, Layout};

/// One connector between this rank and `peer`, named by the FIFO it uses in the
/// receiver's segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    pub peer: usize,
    pub chan: usize,
    pub edge: Edge,
}

/// Which end of a link a rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Send,
    Recv,
}

/// What the kernels of one rank use to reach the others.
pub(crate) struct RankConns {
    pub channels: Vec<Channel>,
    /// Per peer, one end per channel.
    pub p2p_send: Vec<Vec<Conn>>,
    pub p2p_recv: Vec<Vec<Conn>>,
    /// Per channel, the user rank at each ring position (`Channel::ring_ranks` points here).
    pub ring_ranks: Vec<Box<[i32]>>,
    /// Every connector this rank sends on and receives on (peers other than itself).
    pub sends: Vec<Link>,
    pub recvs: Vec<Link>,
    /// Every rank's kernels run on this rank's GPU in this process (`Args::same_gpu`).
    pub same_gpu: bool,
}

impl RankConns {
    /// Marks the connectors to the peers that the built-in sockets reach (`sockets[q]`) as
    /// moved by the host's proxy (`Conn::proxied`): their large moves pass by reference.
    pub fn mark_proxied(&mut self, sockets: &[bool]) {
        let links: Vec<_> =
            self.sends.iter().map(|&l| (Side::Send, l)).chain(self.recvs.iter().map(|&l| (Side::Recv, l))).collect();
        for (side, link) in links.into_iter().filter(|(_, l)| sockets.get(l.peer).copied().unwrap_or(false)) {
            if let Some(c) = self.end_mut(side, link) {
                c.proxied = 1;
            }
        }
    }

    /// The connector end on `side` of `link` (one of `sends` or `recvs`), to be changed
    /// before the tables go to the kernels.
    pub fn end_mut(&mut self, side: Side, link: Link) -> Option<&mut Conn> {
        let (c, peer) = (link.chan, link.peer);
        match (side, link.edge) {
            (Side::Send, Edge::P2p(_)) => self.p2p_send.get_mut(peer)?.get_mut(c),
            (Side::Recv, Edge::P2p(_)) => self.p2p_recv.get_mut(peer)?.get_mut(c),
            (side, edge) => {
                let ch = self.channels.get_mut(c)?;
                let children = ch.tree_nchildren.max(0) as usize;
                let parent = ch.tree_parent == peer as i32;
                match (side, edge) {
                    (Side::Send, Edge::Ring) => Some(&mut ch.ring_send),
                    (Side::Recv, Edge::Ring) => Some(&mut ch.ring_recv),
                    (Side::Send, Edge::FromChild(_)) if parent => Some(&mut ch.tree_up_send),
                    (Side::Recv, Edge::FromParent) if parent => Some(&mut ch.tree_up_recv),
                    (Side::Send, Edge::FromParent) => {
                        ch.tree_down_send[..children].iter_mut().find(|e| e.peer == peer as i32)
                    }
                    (Side::Recv, Edge::FromChild(k)) => ch.tree_down_recv[..children].get_mut(k),
                    _ => None,
                }
            }
        }
    }
}

/// The connector tables of `rank`, given every rank's segment as mapped in this process
/// (where this rank sends), per peer the segment of this rank's that the peer's FIFOs are
/// in (`recv`: its own segment, or on a GPU its device FIFOs for CUDA IPC peers), and the
/// rings and trees of `graph` (one channel per layout channel); `same_gpu[q]`: rank q's
/// kernels run on this rank's GPU in this process (see `Conn::same_gpu`); `plain[q]`: a
/// wired ring's partial sums cross to and from rank q as fp32 (see `Conn::wire_plain`).
pub(crate) fn connect(
    layout: &Layout, rank: usize, segments: &[*mut u8], recv: &[*mut u8], graph: &Graph, same_gpu: &[bool],
    plain: &[bool],
) -> Result<RankConns> {
    if graph.channels.len() != layout.nchannels {
        return Err(Error::Internal(format!(
            "a graph of {} channel(s) for {} channel(s)",
            graph.channels.len(),
            layout.nchannels
        )));
    }
    let n = layout.nranks;
    let end = |base: *mut u8, c: usize, edge: Edge, peer: usize| Conn {
        same_gpu: same_gpu.get(peer).copied().unwrap_or(false) as i32,
        ..layout.end(base, c, edge, peer)
    };
    let mut channels = vec![Channel::default(); layout.nchannels];
    let mut ring_ranks = Vec::with_capacity(layout.nchannels);
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    for ((c, ch), g) in channels.iter_mut().enumerate().zip(&graph.channels) {
        let order = &g.ring;
        let ranks: Box<[i32]> = order.iter().map(|&r| r as i32).collect();
        let pos = order
            .iter()
            .position(|&r| r == rank)
            .ok_or_else(|| Error::Internal(format!("rank {rank} is not on channel {c}'s ring {order:?}")))?;
        ch.ring_index = pos as i32;
        ch.ring_ranks = ranks.as_ptr();
        ring_ranks.push(ranks);
        if n > 1 {
            let (prev, next) = (order[(pos + n - 1) % n], order[(pos + 1) % n]);
            let plain = |q: usize| plain.get(q).copied().unwrap_or(false) as i32;
            ch.ring_send = Conn { wire_plain: plain(next), ..end(segments[next], c, Edge::Ring, next) };
            ch.ring_recv = Conn { wire_plain: plain(prev), ..end(recv[prev], c, Edge::Ring, prev) };
            sends.push(Link { peer: next, chan: c, edge: Edge::Ring });
            recvs.push(Link { peer: prev, chan: c, edge: Edge::Ring });
        }
        let tree = &g.tree;
        if let Some(p) = tree.parent[rank] {
            let k = tree.children[p].iter().position(|&x| x == rank).ok_or_else(|| {
                Error::Internal(format!("rank {rank} is not among its parent {p}'s children on channel {c}"))
            })?;
            ch.tree_parent = p as i32;
            ch.tree_up_send = end(segments[p], c, Edge::FromChild(k), p);
            ch.tree_up_recv = end(recv[p], c, Edge::FromParent, p);
            sends.push(Link { peer: p, chan: c, edge: Edge::FromChild(k) });
            recvs.push(Link { peer: p, chan: c, edge: Edge::FromParent });
        }
        ch.tree_nchildren = tree.children[rank].len() as i32;
        for (k, &child) in tree.children[rank].iter().enumerate() {
            ch.tree_down_send[k] = end(segments[child], c, Edge::FromParent, child);
            ch.tree_down_recv[k] = end(recv[child], c, Edge::FromChild(k), child);
            sends.push(Link { peer: child, chan: c, edge: Edge::FromParent });
            recvs.push(Link { peer: child, chan: c, edge: Edge::FromChild(k) });
        }
    }
    let per_peer = |f: &dyn Fn(usize, usize) -> Conn| -> Vec<Vec<Conn>> {
        (0..n).map(|peer| (0..layout.nchannels).map(|c| f(peer, c)).collect()).collect()
    };
    for peer in (0..n).filter(|&q| q != rank) {
        for c in 0..layout.nchannels {
            sends.push(Link { peer, chan: c, edge: Edge::P2p(rank) });
            recvs.push(Link { peer, chan: c, edge: Edge::P2p(peer) });
        }
    }
    Ok(RankConns {
        sends,
        recvs,
        p2p_send: per_peer(&|peer, c| end(segments[peer], c, Edge::P2p(rank), peer)),
        p2p_recv: per_peer(&|peer, c| end(recv[peer], c, Edge::P2p(peer), peer)),
        channels,
        ring_ranks,
        same_gpu: (0..n).all(|q| same_gpu.get(q).copied().unwrap_or(false)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::device::Device;

    /// `same_gpu` of rank 0 of 3, each rank's segment a buffer of the layout's size.
    fn same_gpu_of(flags: &[bool]) -> (bool, Vec<i32>) {
        let n = 3;
        let cfg = Config { nchannels: Some(2), ..Config::default() }.resolve(n).unwrap();
        let layout = Layout::new(n, &cfg, &Device::host(0));
        let mut segs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; layout.segment_bytes()]).collect();
        let bases: Vec<*mut u8> = segs.iter_mut().map(|s| s.as_mut_ptr()).collect();
        let c = connect(&layout, 0, &bases, &bases, &Graph::uniform(n, 2), flags, &[]).unwrap();
        (c.same_gpu, c.p2p_send.iter().map(|t| t[0].same_gpu).collect())
    }

    /// Every link a rank's tables name leads to the connector end whose FIFO it is.
    #[test]
    fn every_link_finds_its_connector_end() {
        let n = 4;
        let cfg = Config { nchannels: Some(2), ..Config::default() }.resolve(n).unwrap();
        let layout = Layout::new(n, &cfg, &Device::host(0));
        let mut segs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; layout.segment_bytes()]).collect();
        let bases: Vec<*mut u8> = segs.iter_mut().map(|s| s.as_mut_ptr()).collect();
        for rank in 0..n {
            let recv = vec![bases[rank]; n];
            let mut c = connect(&layout, rank, &bases, &recv, &Graph::uniform(n, 2), &[], &[]).unwrap();
            for (side, links, base) in [(Side::Send, c.sends.clone(), None), (Side::Recv, c.recvs.clone(), Some(rank))]
            {
                for l in links {
                    let want = layout.end(bases[base.unwrap_or(l.peer)], l.chan, l.edge, l.peer);
                    let got = c.end_mut(side, l).unwrap_or_else(|| panic!("rank {rank}: no {side:?} end for {l:?}"));
                    assert_eq!(
                        (got.head, got.buf, got.peer),
                        (want.head, want.buf, want.peer),
                        "rank {rank}: {side:?} {l:?}"
                    );
                }
            }
            let stranger = Link { peer: rank, chan: 0, edge: Edge::FromChild(0) };
            assert!(c.end_mut(Side::Send, stranger).is_none(), "not its parent");
        }
    }

    #[test]
    fn a_rank_fences_at_gpu_scope_only_where_every_rank_shares_its_gpu_and_process() {
        assert_eq!(same_gpu_of(&[true, true, true]), (true, vec![1, 1, 1]));
        assert_eq!(same_gpu_of(&[true, false, true]), (false, vec![1, 0, 1]), "one peer elsewhere");
        assert_eq!(same_gpu_of(&[]), (false, vec![0, 0, 0]), "rank processes");
    }
}
