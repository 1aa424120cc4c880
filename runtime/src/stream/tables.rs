//! The tables a rank's kernels read and update in place, built once from its connectors:
//! per channel the ring and tree connector ends, per peer the point-to-point ends, a status
//! word per channel and the abort flag. They live where the rank's kernels run: on a GPU
//! the connector tables are device memory (the kernels advance the step counters in them,
//! at device speed), while the statuses and the abort flag are host memory mapped into the
//! device, which the host reads and writes directly. Held by the rank's `Executor`, which
//! reads the statuses after each kernel; `enqueue` points the launch arguments at them.

use std::marker::PhantomData;
use std::sync::atomic::AtomicI32;

use jitccl_codegen::abi::{Channel, Conn, Status};

use crate::device::{Device, Memory};
use crate::error::{Error, Result};
use crate::transport::connect::RankConns;

/// A fixed table of plain-data entries that kernels update in place.
pub(crate) struct KernelTable<T> {
    mem: Memory,
    len: usize,
    _t: PhantomData<T>,
}

// SAFETY: a table is written only by the kernels of one communicator, which run one at a
// time (the communicator's exec lock), and read by the runtime between them.
unsafe impl<T> Send for KernelTable<T> {}
unsafe impl<T> Sync for KernelTable<T> {}

/// The bytes of plain-data table entries (ABI structs of integers and pointers).
fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: the entries are plain data; the view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

impl<T: Copy> KernelTable<T> {
    /// `v` in memory of `device` that only its kernels address.
    pub(crate) fn new(device: &Device, v: &[T]) -> Result<Self> {
        Self::filled(Memory::zeroed(device, size_of_val(v), true)?, v)
    }

    /// `v` in memory that the host and the kernels of `device` both address.
    pub(crate) fn mapped(device: &Device, v: &[T]) -> Result<Self> {
        Self::filled(Memory::mapped(device, size_of_val(v))?, v)
    }

    fn filled(mem: Memory, v: &[T]) -> Result<Self> {
        mem.write(0, bytes_of(v))?;
        Ok(KernelTable { mem, len: v.len(), _t: PhantomData })
    }

    /// The address kernels use.
    pub(crate) fn ptr(&self) -> *mut T {
        self.mem.ptr().cast()
    }

    /// The entries as the host sees them, for a mapped table.
    fn host(&self) -> Result<*mut T> {
        self.mem.host_ptr().map(|p| p.cast()).ok_or_else(|| Error::Internal("a device table read by the host".into()))
    }
}

/// A word of mapped memory as the host addresses it.
struct HostWord(*mut i32);

// SAFETY: only accessed atomically, and it lives as long as the table holding it.
unsafe impl Send for HostWord {}
unsafe impl Sync for HostWord {}

/// Everything a rank's kernels reach through the launch arguments.
pub(crate) struct Tables {
    pub channels: KernelTable<Channel>,
    /// Per peer, one connector end per channel.
    pub p2p_send: Vec<KernelTable<Conn>>,
    pub p2p_recv: Vec<KernelTable<Conn>>,
    /// Per peer, its `p2p_send` / `p2p_recv` table: what one-shot kernels index by rank.
    pub peer_send: KernelTable<*mut Conn>,
    pub peer_recv: KernelTable<*mut Conn>,
    /// Mapped: one per channel.
    pub status: KernelTable<Status>,
    /// Mapped: nonzero once the rank is aborted; kernels poll it.
    abort: KernelTable<i32>,
    abort_word: HostWord,
    /// Ring orders the channels point into.
    _ring_ranks: Vec<KernelTable<i32>>,
    /// Every rank's kernels run on this rank's GPU in this process (`Args::same_gpu`).
    pub same_gpu: bool,
}

impl Tables {
    pub(crate) fn new(conns: RankConns, nchannels: usize, device: &Device) -> Result<Tables> {
        let tables = |v: Vec<Vec<Conn>>| v.iter().map(|t| KernelTable::new(device, t)).collect::<Result<Vec<_>>>();
        let ptrs =
            |t: &[KernelTable<Conn>]| KernelTable::new(device, &t.iter().map(KernelTable::ptr).collect::<Vec<_>>());
        let (p2p_send, p2p_recv) = (tables(conns.p2p_send)?, tables(conns.p2p_recv)?);
        let ring_ranks = conns.ring_ranks.iter().map(|r| KernelTable::new(device, r)).collect::<Result<Vec<_>>>()?;
        // The channels point to the ring orders where the kernels read them.
        let mut channels = conns.channels;
        for (ch, ranks) in channels.iter_mut().zip(&ring_ranks) {
            ch.ring_ranks = ranks.ptr();
        }
        let abort = KernelTable::mapped(device, &[0])?;
        let abort_word = HostWord(abort.host()?);
        Ok(Tables {
            channels: KernelTable::new(device, &channels)?,
            peer_send: ptrs(&p2p_send)?,
            peer_recv: ptrs(&p2p_recv)?,
            p2p_send,
            p2p_recv,
            status: KernelTable::mapped(device, &vec![Status::default(); nchannels])?,
            abort,
            abort_word,
            _ring_ranks: ring_ranks,
            same_gpu: conns.same_gpu,
        })
    }

    /// The abort flag, as the kernels address it.
    pub(crate) fn abort_ptr(&self) -> *const i32 {
        self.abort.ptr()
    }

    /// The abort flag, as the host sees it.
    pub(crate) fn abort(&self) -> &AtomicI32 {
        // SAFETY: the abort table's one i32 as the host addresses it, alive as long as
        // `self`; i32 and AtomicI32 share their layout.
        unsafe { AtomicI32::from_ptr(self.abort_word.0) }
    }

    /// Clears the statuses of the first `n` channels.
    ///
    /// # Safety
    /// No kernel of this rank runs.
    pub(crate) unsafe fn reset_statuses(&self, n: usize) -> Result<()> {
        // SAFETY: in bounds (one status per channel); no kernel touches them now.
        unsafe { std::slice::from_raw_parts_mut(self.status.host()?, n.min(self.status.len)) }.fill(Status::default());
        Ok(())
    }

    /// The statuses of the first `n` channels.
    ///
    /// # Safety
    /// No kernel of this rank runs.
    pub(crate) unsafe fn statuses(&self, n: usize) -> Result<&[Status]> {
        // SAFETY: in bounds (one status per channel); no kernel writes them now.
        Ok(unsafe { std::slice::from_raw_parts(self.status.host()?, n.min(self.status.len)) })
    }
}
