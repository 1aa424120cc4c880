//! The layout of a rank's receive segment: the failure board (one word per rank, see
//! `fault`), then one FIFO per (channel, incoming edge), each FIFO the head and tail
//! counters (the head's line also holding the receiver's landing line, used over the
//! built-in sockets), then every protocol's slots. Fixed slots per channel (ring,
//! tree parent, tree children, one per p2p sender) keep offsets independent of the graph,
//! so a sender finds its FIFO in a peer's segment without asking. Unused FIFOs cost
//! address space only: their pages are never touched.

use jitccl_codegen::abi::{ll128_flag_word, Conn, MAX_TREE_ARITY, NPROTOS, STEPS};

use crate::config::Resolved;
use crate::device::Device;
use crate::fault::Board;

/// Counters get a cache line each so sender and receiver do not false-share.
const COUNTER_BYTES: usize = 128;
/// The receiver's landing line, in the head's line, a 64-byte line away from the head: the
/// receiving kernel writes both, the peer reads only the head, and only over the network
/// (where the head's reader is the rank's own proxy) is the landing line used.
const LANDS_AT: usize = 64;
const PAGE: usize = 4096;

/// Which FIFO of a receiver's segment, on a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// From the previous ring position.
    Ring,
    /// From the tree parent (down phase).
    FromParent,
    /// From tree child number `k` (up phase).
    FromChild(usize),
    /// Point-to-point from rank `sender`.
    P2p(usize),
}

/// Per-channel FIFOs for the ring and tree edges.
const GRAPH_FIFOS: usize = 2 + MAX_TREE_ARITY;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub nranks: usize,
    pub nchannels: usize,
    pub slot_bytes: [usize; NPROTOS],
    /// The word of an LL128 line that holds its flag in the ranks' kernels
    /// (`abi::ll128_flag_word`): what writes lines besides them (the net proxy) stores it last.
    pub ll128_flag: usize,
}

impl Layout {
    /// The layout of `nranks` ranks' segments under `cfg`, for kernels on `device`'s target.
    pub fn new(nranks: usize, cfg: &Resolved, device: &Device) -> Layout {
        Layout {
            nranks,
            nchannels: cfg.nchannels,
            slot_bytes: cfg.slot_bytes,
            ll128_flag: ll128_flag_word(device.is_cuda()),
        }
    }

    /// Bytes of one FIFO, page-aligned.
    fn fifo_bytes(&self) -> usize {
        let b = 2 * COUNTER_BYTES + self.slot_bytes.iter().map(|s| s * STEPS).sum::<usize>();
        b.div_ceil(PAGE) * PAGE
    }

    /// Bytes of the failure board at the start of a segment, page-aligned.
    fn board_bytes(&self) -> usize {
        (self.nranks * size_of::<i32>()).div_ceil(PAGE) * PAGE
    }

    /// Bytes of a rank's receive segment.
    pub fn segment_bytes(&self) -> usize {
        self.board_bytes() + self.fifo_bytes() * self.nchannels * (GRAPH_FIFOS + self.nranks)
    }

    /// The failure board of the segment at `base` (as mapped in this process).
    pub fn board(&self, base: *mut u8) -> Board {
        Board::new(base as *mut i32, self.nranks)
    }

    /// Byte offset of the FIFO of `edge` on `chan` in a receiver's segment (also the FIFO's
    /// identity on the wire).
    pub fn offset(&self, chan: usize, edge: Edge) -> usize {
        let index = match edge {
            Edge::Ring => chan * GRAPH_FIFOS,
            Edge::FromParent => chan * GRAPH_FIFOS + 1,
            Edge::FromChild(k) => chan * GRAPH_FIFOS + 2 + k,
            Edge::P2p(sender) => self.nchannels * GRAPH_FIFOS + sender * self.nchannels + chan,
        };
        self.board_bytes() + index * self.fifo_bytes()
    }

    /// A connector end on the FIFO of `edge` on `chan` in the receiver's segment at `base`
    /// (as mapped in this process); `peer` is the rank at the other end.
    pub fn end(&self, base: *mut u8, chan: usize, edge: Edge, peer: usize) -> Conn {
        // SAFETY: every offset computed here lies within segment_bytes() of `base`.
        let fifo = unsafe { base.add(self.offset(chan, edge)) };
        let mut conn = Conn {
            head: fifo as *mut u64,
            // SAFETY: as above.
            tail: unsafe { fifo.add(COUNTER_BYTES) } as *mut u64,
            // SAFETY: as above; the slot sizes share the tail's cache line.
            sizes: unsafe { fifo.add(COUNTER_BYTES + 8) } as *mut u64,
            // SAFETY: as above.
            lands: unsafe { fifo.add(LANDS_AT) } as *mut u64,
            peer: peer as i32,
            ..Conn::default()
        };
        let mut off = 2 * COUNTER_BYTES;
        for p in 0..NPROTOS {
            // SAFETY: as above.
            conn.buf[p] = unsafe { fifo.add(off) };
            conn.slot_bytes[p] = self.slot_bytes[p] as u64;
            off += self.slot_bytes[p] * STEPS;
        }
        conn
    }
}
