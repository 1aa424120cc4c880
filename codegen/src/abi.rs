//! The kernel ABI: `#[repr(C)]` mirrors of `templates/common/abi.h`. Every generated kernel
//! asserts these sizes at compile time, so a drift between the two fails loudly.

/// FIFO slots per connector (NCCL_STEPS).
pub const STEPS: usize = 8;
pub const NPROTOS: usize = 3;
pub const MAX_TREE_ARITY: usize = 3;

/// Kernel status codes (`JC_OK`, `JC_ERR_*`).
pub const OK: i32 = 0;
pub const ERR_ABORTED: i32 = 1;
pub const ERR_TIMEOUT: i32 = 2;
/// The peer a wait was for is known to have failed (`peer_failed[peer] != 0`).
pub const ERR_PEER: i32 = 3;
/// Direct algorithms: a peer's call names other registered buffers or another size.
pub const ERR_MISMATCH: i32 = 4;
/// The kernel is specialized for another rank count than the call's (`KernelSpec::ranks`).
pub const ERR_SPECIALIZED: i32 = 5;
/// What a failed wait waited for (`JC_WAIT_*`).
pub const WAIT_DATA: i32 = 1;
pub const WAIT_SPACE: i32 = 2;
pub const WAIT_BARRIER: i32 = 3;
/// A FIFO step's size word (`JC_SIZE_*`): its bytes in the low 32 bits, the protocol from
/// bit 56; between them the sending call's tag, which only kernels read.
pub const SIZE_BYTES_MASK: u64 = 0xffff_ffff;
pub const SIZE_PROTO_SHIFT: u32 = 56;
/// Over the built-in sockets (`Conn::proxied`), a size word's mark (`JC_SIZE_REF`): the
/// sender's step passes by reference (its slot holds the address of its bytes), or the
/// receiver's landed where the kernel's landing line said. The network never carries it.
pub const SIZE_REF: u64 = 1 << 60;
/// The fewest bytes of a step that passes by reference (`JC_REF_MIN`).
pub const REF_MIN: usize = 8192;
/// A proxied receiver's landing line (`JC_LAND_*`, `Conn::lands`): the address the step the
/// kernel waits for may land at (with the step's low bits from `LAND_TAG_SHIFT`; 0 when
/// none), and the size word it expects there.
pub const LAND_AT: usize = 0;
pub const LAND_WANT: usize = 1;
pub const LAND_TAG_SHIFT: u32 = 48;
/// The word of a 16-word LL128 line that holds its flag, for GPU (`cuda`) or host kernels
/// (`JC_LL128_FLAG` of `prims/<target>/ll128.h`, asserted by every LL128 kernel); what else
/// writes a line (the net proxy) stores it after the other 15. On the host it ends the
/// first 64-byte cache line, so that a step of up to 56 bytes is one line handed between
/// CPUs, not two; a GPU's warp writes the 128-byte line whole, and there the flag is last.
pub const fn ll128_flag_word(cuda: bool) -> usize {
    if cuda {
        15
    } else {
        7
    }
}
/// Direct algorithms: channel lines in a rank's flags area, and u64 words per line.
pub const SYM_CHANNELS: usize = 64;
pub const SYM_LINE: usize = 16;
/// Direct algorithms: the most ranks (their kernels hold every rank's pointers).
pub const SYM_MAX_RANKS: usize = 64;
/// Direct point-to-point: u64 words of a rank's record per peer, after the channel lines.
pub const SYM_P2P_WORDS: usize = 8;
/// The eager area of direct AlltoAll, Gather and Scatter, after the point-to-point records:
/// two halves (chosen by the barrier counter's parity) of a header of SYM_EAGER_HEADER words
/// and what a rank stages for its peers when its blocks hold at most SYM_EAGER_BYTES (see
/// `templates/common/eager.h`).
pub const SYM_EAGER_BYTES: usize = 8192;
/// The fewest ranks at which the eager paths run: at 2 ranks (a core each on the 2-core VM)
/// the synchronization an AlltoAll, Gather or Scatter saves and the wait an AlltoAllv saves
/// cost less than moving the blocks through the flags area (docs/performance.md, "Other
/// collectives beside OpenMPI").
pub const SYM_EAGER_MIN_RANKS: usize = 3;
pub const SYM_EAGER_HEADER: usize = 8;
/// Direct point-to-point's eager slots, after the AlltoAll's eager area: two per peer (by
/// the post's parity), each for one AlltoAllv block of at most SYM_P2P_EAGER_BYTES (see
/// `templates/algo/sendrecv_direct.h`).
pub const SYM_P2P_EAGER_BYTES: usize = 2048;
/// u64 words of a rank's flags area: the channel lines, a point-to-point record per peer,
/// the AlltoAll's eager area's two halves, two point-to-point eager slots per peer.
pub const SYM_FLAGS_WORDS: usize = SYM_CHANNELS * SYM_LINE
    + SYM_MAX_RANKS * SYM_P2P_WORDS
    + 2 * (SYM_EAGER_HEADER + SYM_EAGER_BYTES / 8)
    + SYM_MAX_RANKS * 2 * SYM_P2P_EAGER_BYTES / 8;

/// The most transfers of a point-to-point batch over the FIFOs (`JC_P2P_BATCH_MAX`: the
/// host kernel keeps two words of each on its stack); a larger one runs in rounds.
pub const P2P_BATCH_MAX: usize = 128;

/// One end of a connector (`struct jc_conn`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub buf: [*mut u8; NPROTOS],
    pub head: *mut u64,
    pub tail: *mut u64,
    pub sizes: *mut u64,
    /// Receiver over the built-in sockets: its landing line (`LAND_*`).
    pub lands: *mut u64,
    pub slot_bytes: [u64; NPROTOS],
    pub step: u64,
    pub credit: u64,
    /// Sender over the built-in sockets: the head its kernel waits for before it returns
    /// (the steps it passed by reference written out).
    pub refs: u64,
    pub peer: i32,
    /// CUDA: 1 when the peer's kernels run on the same GPU in this process, so that
    /// GPU-scope fences order the FIFO for it (a system-scope one costs microseconds).
    pub same_gpu: i32,
    /// Ring: 1 when the peer shares this rank's memory (no network between them), so that
    /// a wired kernel's partial sums cross to it as fp32 and only hops through the network
    /// encode them (`templates/prims/host/wire.h`).
    pub wire_plain: i32,
    /// 1 when the host's proxy moves the steps over the built-in sockets: large steps that
    /// only move bytes pass by reference (`SIZE_REF`, `templates/prims/host/simple.h`).
    pub proxied: i32,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            buf: [std::ptr::null_mut(); NPROTOS],
            head: std::ptr::null_mut(),
            tail: std::ptr::null_mut(),
            sizes: std::ptr::null_mut(),
            lands: std::ptr::null_mut(),
            slot_bytes: [0; NPROTOS],
            step: 0,
            credit: 0,
            refs: 0,
            peer: -1,
            same_gpu: 0,
            wire_plain: 0,
            proxied: 0,
        }
    }
}

/// Per-channel topology and connectors (`struct jc_channel`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Channel {
    pub ring_send: Conn,
    pub ring_recv: Conn,
    pub tree_up_send: Conn,
    pub tree_up_recv: Conn,
    pub tree_down_send: [Conn; MAX_TREE_ARITY],
    pub tree_down_recv: [Conn; MAX_TREE_ARITY],
    pub ring_ranks: *const i32,
    pub ring_index: i32,
    pub tree_parent: i32,
    pub tree_nchildren: i32,
    /// Channel 0's: nonzero once a kernel of the rank failed (CUDA kernels queued behind
    /// the failure end at their start).
    pub halted: i32,
    /// A sendrecv's send steps done on this channel while a receive of the call lands on its
    /// send buffer (a shift in place): receives on other channels wait for them.
    pub sent: u64,
    /// Channel 0's: the channels done with a shift in place; the last one clears every
    /// channel's `sent`, so that the next launch starts from zero.
    pub shifted: u64,
}

impl Default for Channel {
    fn default() -> Self {
        Channel {
            ring_send: Conn::default(),
            ring_recv: Conn::default(),
            tree_up_send: Conn::default(),
            tree_up_recv: Conn::default(),
            tree_down_send: [Conn::default(); MAX_TREE_ARITY],
            tree_down_recv: [Conn::default(); MAX_TREE_ARITY],
            ring_ranks: std::ptr::null(),
            ring_index: 0,
            tree_parent: -1,
            tree_nchildren: 0,
            halted: 0,
            sent: 0,
            shifted: 0,
        }
    }
}

/// A channel's outcome (`struct jc_status`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    pub code: i32,
    pub peer: i32,
    pub what: i32,
    pub pad: i32,
}

/// Launch arguments (`struct jc_args`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Args {
    pub sendbuff: *const u8,
    pub recvbuff: *mut u8,
    pub count: u64,
    pub recv_count: u64,
    pub chunk_elems: u64,
    pub timeout_ns: u64,
    pub channels: *mut Channel,
    pub p2p_send: *mut Conn,
    pub p2p_recv: *mut Conn,
    /// One-shot: per rank (self included), that peer's per-channel `p2p_send` ends.
    pub peer_send: *const *mut Conn,
    pub peer_recv: *const *mut Conn,
    pub status: *mut Status,
    pub abort_flag: *const i32,
    /// Per rank: nonzero once that rank is known to have failed (the communicator's failure
    /// board, see the runtime's `fault` module).
    pub peer_failed: *const i32,
    /// Direct algorithms: per rank, the base of its part of the send / recv buffer's
    /// registration, and its flags area (null otherwise).
    pub sym_send: *const *mut u8,
    pub sym_recv: *const *mut u8,
    pub sym_flags: *const *mut u64,
    pub sym_send_id: u64,
    pub sym_recv_id: u64,
    pub sym_send_off: u64,
    pub sym_recv_off: u64,
    /// Direct point-to-point: the launch's table of transfers and of this rank's regions
    /// (see `templates/algo/sendrecv_direct.h`), null otherwise.
    pub table: *const u64,
    pub scalar_f: f64,
    pub scalar_i: i64,
    /// PreMulSum: where the kernel reads its multiplier (one element of the call's type)
    /// when it runs, instead of `scalar_f` / `scalar_i`; null otherwise.
    pub scalar_ptr: *const u8,
    /// Host: busy-poll rounds before a wait yields its core.
    pub spin: u64,
    pub nranks: i32,
    pub rank: i32,
    pub root: i32,
    pub nchannels: i32,
    /// CUDA: 1 when every rank's kernels run on this GPU in this process, so that a direct
    /// kernel's barrier fences at GPU scope rather than system scope.
    pub same_gpu: i32,
    pub pad: i32,
    /// Host: called by a waiting kernel before each back-off round with `progress_ctx`,
    /// to move its rank's network traffic on the caller's thread (MPI's way: no hand-off
    /// to a proxy thread on a step's path); nonzero if it moved anything. Null where
    /// nothing needs it.
    pub progress: Option<unsafe extern "C" fn(*mut std::ffi::c_void) -> i32>,
    pub progress_ctx: *mut std::ffi::c_void,
}

/// The sizes the templates assert.
pub(crate) struct AbiSizes {
    pub conn: usize,
    pub channel: usize,
    pub status: usize,
    pub args: usize,
    pub sym_flags_words: usize,
    pub p2p_batch_max: usize,
}

impl AbiSizes {
    pub(crate) fn of_this_build() -> Self {
        AbiSizes {
            conn: size_of::<Conn>(),
            channel: size_of::<Channel>(),
            status: size_of::<Status>(),
            args: size_of::<Args>(),
            sym_flags_words: SYM_FLAGS_WORDS,
            p2p_batch_max: P2P_BATCH_MAX,
        }
    }
}
