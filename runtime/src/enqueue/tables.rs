//! The tables a rank's kernels read and update in place, built once from its connectors:
//! per channel the ring and tree connector ends, per peer the point-to-point ends, and a
//! status word per channel.

use std::cell::UnsafeCell;

use jitccl_codegen::abi::{Channel, Conn, Status};

use crate::transport::connect::RankConns;

/// A fixed table that kernels update in place (connector step counters, statuses).
pub(crate) struct KernelTable<T>(UnsafeCell<Box<[T]>>);

// SAFETY: a table is written only by the kernels of one communicator, which run one at a
// time (the communicator's exec lock), and read by the runtime between them.
unsafe impl<T> Send for KernelTable<T> {}
unsafe impl<T> Sync for KernelTable<T> {}

impl<T> KernelTable<T> {
    pub(crate) fn new(v: Vec<T>) -> Self {
        KernelTable(UnsafeCell::new(v.into_boxed_slice()))
    }

    pub(crate) fn ptr(&self) -> *mut T {
        // SAFETY: see the Sync impl.
        unsafe { (*self.0.get()).as_mut_ptr() }
    }
}

/// Everything a rank's kernels reach through the launch arguments.
pub(crate) struct Tables {
    pub channels: KernelTable<Channel>,
    /// Per peer, one connector end per channel.
    pub p2p_send: Vec<KernelTable<Conn>>,
    pub p2p_recv: Vec<KernelTable<Conn>>,
    /// Per peer, its `p2p_send` / `p2p_recv` table: what one-shot kernels index by rank.
    pub peer_send: KernelTable<*mut Conn>,
    pub peer_recv: KernelTable<*mut Conn>,
    pub status: KernelTable<Status>,
    /// Ring orders the channels point into.
    _ring_ranks: Vec<Box<[i32]>>,
}

impl Tables {
    pub(crate) fn new(conns: RankConns, nchannels: usize) -> Tables {
        let table = |v: Vec<Vec<Conn>>| v.into_iter().map(KernelTable::new).collect::<Vec<_>>();
        let ptrs = |t: &[KernelTable<Conn>]| KernelTable::new(t.iter().map(KernelTable::ptr).collect());
        let (p2p_send, p2p_recv) = (table(conns.p2p_send), table(conns.p2p_recv));
        Tables {
            channels: KernelTable::new(conns.channels),
            peer_send: ptrs(&p2p_send),
            peer_recv: ptrs(&p2p_recv),
            p2p_send,
            p2p_recv,
            status: KernelTable::new(vec![Status::default(); nchannels]),
            _ring_ranks: conns.ring_ranks,
        }
    }

    /// Clears the statuses of the first `n` channels.
    ///
    /// # Safety
    /// No kernel of this rank runs.
    pub(crate) unsafe fn reset_statuses(&self, n: usize) {
        // SAFETY: in bounds (one status per channel); no kernel touches them now.
        unsafe { std::slice::from_raw_parts_mut(self.status.ptr(), n) }.fill(Status::default());
    }

    /// The statuses of the first `n` channels.
    ///
    /// # Safety
    /// No kernel of this rank runs.
    pub(crate) unsafe fn statuses(&self, n: usize) -> &[Status] {
        // SAFETY: in bounds (one status per channel); no kernel writes them now.
        unsafe { std::slice::from_raw_parts(self.status.ptr(), n) }
    }
}
