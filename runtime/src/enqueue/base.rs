//! The launch arguments every launch of a rank passes alike (`Rank::launch_into` adds the
//! call's own).

use jitccl_codegen::abi::{Channel, Conn, Status};

use crate::config::Resolved;
use crate::fault::Board;
use crate::stream::Tables;

/// The launch arguments every launch of a rank passes alike: its tables, failure board
/// (kernels poll the word of the peer they wait for), abort flag and timeout, found once
/// instead of per launch (each table's address is a match on where its memory lives).
pub(super) struct Base {
    pub(super) timeout_ns: u64,
    pub(super) channels: *mut Channel,
    pub(super) peer_send: *const *mut Conn,
    pub(super) peer_recv: *const *mut Conn,
    pub(super) status: *mut Status,
    pub(super) abort_flag: *const i32,
    pub(super) peer_failed: *const i32,
    pub(super) same_gpu: i32,
}

// SAFETY: the pointers lead into the rank's tables (owned by the `Rank` holding this) and
// its failure board (in a segment its communicator keeps alive longer); only kernels
// dereference them.
unsafe impl Send for Base {}
unsafe impl Sync for Base {}

impl Base {
    pub(super) fn new(cfg: &Resolved, t: &Tables, board: &Board) -> Base {
        Base {
            timeout_ns: cfg.timeout.as_nanos().min(u64::MAX as u128) as u64,
            channels: t.channels.ptr(),
            peer_send: t.peer_send.ptr(),
            peer_recv: t.peer_recv.ptr(),
            status: t.status.ptr(),
            abort_flag: t.abort_ptr(),
            peer_failed: board.as_ptr(),
            same_gpu: t.same_gpu as i32,
        }
    }
}
