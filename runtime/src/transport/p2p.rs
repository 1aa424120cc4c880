//! The in-process transport: one allocation per connector holding the head and tail
//! counters and each protocol's FIFO; both ends point into it.

use jitccl_codegen::abi::{Conn, NPROTOS, STEPS};

use crate::device::Memory;
use crate::error::Result;

/// Counters get a cache line each so sender and receiver do not false-share.
const COUNTER_BYTES: usize = 128;

/// A connector's memory, owned by the world of communicators that uses it.
pub(crate) struct Fifo {
    mem: Memory,
    slot_bytes: [usize; NPROTOS],
}

impl Fifo {
    pub(crate) fn new(slot_bytes: [usize; NPROTOS]) -> Result<Fifo> {
        let total = 2 * COUNTER_BYTES + slot_bytes.iter().map(|s| s * STEPS).sum::<usize>();
        Ok(Fifo { mem: Memory::zeroed(total)?, slot_bytes })
    }

    /// The sending and the receiving end of this connector.
    pub(crate) fn ends(&self, sender: usize, receiver: usize) -> (Conn, Conn) {
        let base = self.mem.ptr();
        let mut conn = Conn {
            head: base as *mut u64,
            // SAFETY: offsets within the allocation sized in `new`.
            tail: unsafe { base.add(COUNTER_BYTES) } as *mut u64,
            ..Conn::default()
        };
        let mut off = 2 * COUNTER_BYTES;
        for p in 0..NPROTOS {
            // SAFETY: as above.
            conn.buf[p] = unsafe { base.add(off) };
            conn.slot_bytes[p] = self.slot_bytes[p] as u64;
            off += self.slot_bytes[p] * STEPS;
        }
        conn.connected = 1;
        (Conn { peer: receiver as i32, ..conn }, Conn { peer: sender as i32, ..conn })
    }
}
