//! How the proxy touches a connector's FIFO: with the same atomics and orders as kernels.

use std::sync::atomic::{AtomicU64, Ordering};

use jitccl_codegen::abi::{Conn, LAND_AT, LAND_TAG_SHIFT, LAND_WANT, STEPS};

use super::wire::split_size_word;

/// Protocol indices of a size word (Simple, LL, LL128).
pub(super) const SIMPLE: usize = 0;
const LL: usize = 1;
const LL128: usize = 2;

pub(super) fn atomic(p: *mut u64) -> &'static AtomicU64 {
    // SAFETY: FIFO counters and LL words are 8-byte aligned and live as long as the proxy.
    unsafe { AtomicU64::from_ptr(p) }
}

/// The slot of step `k`.
pub(super) fn slot(k: u64) -> usize {
    (k % STEPS as u64) as usize
}

/// Whether a size word names a protocol of `fifo` and fits its slot.
pub(super) fn fits(fifo: &Conn, word: u64) -> bool {
    let (proto, bytes) = split_size_word(word);
    proto < fifo.buf.len() && bytes as u64 <= fifo.slot_bytes[proto]
}

/// Where step `k`'s bytes of protocol `proto` go.
pub(super) fn slot_ptr(fifo: &Conn, k: u64, proto: usize) -> *mut u8 {
    // SAFETY: the slot is inside the protocol's buffer of STEPS slots.
    unsafe { fifo.buf[proto].add(slot(k) * fifo.slot_bytes[proto] as usize) }
}

/// Stores an arriving LL or LL128 step into its slot as the protocol's reader expects, and
/// its size word; `ll128_flag` is the word of an LL128 line that holds its flag. Their
/// readers poll the data's own flags, not the tail, so a step may land before the steps
/// ahead of it are complete.
///
/// # Safety
/// The slot must be free (the kernel has consumed step k - STEPS), `word` must fit `fifo` and `ll128_flag` must be below 16.
pub(super) unsafe fn store_flagged(fifo: &Conn, ll128_flag: usize, k: u64, word: u64, data: &[u8]) {
    let (proto, _) = split_size_word(word);
    let dst = slot_ptr(fifo, k, proto);
    match proto {
        // LL: each 8-byte {data, flag} half must appear whole.
        LL => {
            for (i, w) in data.chunks_exact(8).enumerate() {
                atomic(dst.add(8 * i) as *mut u64)
                    .store(u64::from_le_bytes(w.try_into().expect("8 bytes")), Ordering::Relaxed);
            }
        }
        // LL128: a line's data (the words around its flag) before its flag.
        LL128 => {
            let f = 8 * ll128_flag;
            for (l, line) in data.chunks_exact(128).enumerate() {
                let d = dst.add(128 * l);
                std::ptr::copy_nonoverlapping(line.as_ptr(), d, f);
                std::ptr::copy_nonoverlapping(line[f + 8..].as_ptr(), d.add(f + 8), 120 - f);
                atomic(d.add(f) as *mut u64)
                    .store(u64::from_le_bytes(line[f..f + 8].try_into().expect("8 bytes")), Ordering::Release);
            }
        }
        _ => unreachable!("Simple steps are read into their slot directly"),
    }
    set_size(fifo, k, word);
}

/// Where the kernel waiting on `fifo` wants step `k`, whose size word is `word`, to land:
/// the address it posted for exactly that step and word (`templates/prims/host/simple.h`'s
/// `jc_land`), if any.
pub(super) fn landing(fifo: &Conn, k: u64, word: u64) -> Option<*mut u8> {
    // SAFETY: the landing line has LAND_* words; the kernel writes the word it expects
    // before the address (which `posted` reads with acquire order).
    posted(fifo, k).filter(|_| unsafe { atomic(fifo.lands.add(LAND_WANT)).load(Ordering::Relaxed) } == word)
}

/// Where the kernel waiting on `fifo` posted that step `k` lands, whatever its word.
pub(super) fn posted(fifo: &Conn, k: u64) -> Option<*mut u8> {
    if fifo.lands.is_null() {
        return None;
    }
    // SAFETY: as in `landing`.
    let at = unsafe { atomic(fifo.lands.add(LAND_AT)).load(Ordering::Acquire) };
    let here = at & ((1 << LAND_TAG_SHIFT) - 1);
    (here != 0 && at >> LAND_TAG_SHIFT == k & 0xffff).then_some(here as *mut u8)
}

/// Forgets what the kernel posted on the landing line: its call has ended.
pub(super) fn clear_landing(fifo: &Conn) {
    if !fifo.lands.is_null() {
        // SAFETY: as in `landing`.
        unsafe { atomic(fifo.lands.add(LAND_AT)).store(0, Ordering::Release) };
    }
}

/// Records step `k`'s size word, which the kernel reads after the tail.
pub(super) fn set_size(fifo: &Conn, k: u64, word: u64) {
    // SAFETY: sizes has STEPS entries; the kernel reads this one only after the tail passes k.
    unsafe { *fifo.sizes.add(slot(k)) = word }
}

#[cfg(test)]
mod tests {
    use jitccl_codegen::abi::ll128_flag_word;

    use super::*;
    use crate::device::HostMemory;
    use crate::transport::layout::{Edge, Layout};

    /// LL128 steps land whole whichever word of their lines holds the flag (a host's or a
    /// GPU's), with their size word.
    #[test]
    fn ll128_lines_land_whole_for_either_flag_word() {
        for flag in [false, true].map(ll128_flag_word) {
            let layout = Layout { nranks: 2, nchannels: 1, slot_bytes: [256, 64, 256], ll128_flag: flag };
            let mem = HostMemory::zeroed(layout.segment_bytes()).unwrap();
            let fifo = layout.end(mem.ptr(), 0, Edge::Ring, 1);
            let data: Vec<u8> = (0..256).map(|i| (i * 7 + flag) as u8 | 1).collect();
            let word = (LL128 as u64) << 56 | data.len() as u64;
            // SAFETY: a fresh FIFO's slot is free and the step fits it.
            let got = unsafe {
                store_flagged(&fifo, flag, 3, word, &data);
                assert_eq!(*fifo.sizes.add(slot(3)), word);
                std::slice::from_raw_parts(slot_ptr(&fifo, 3, LL128), data.len())
            };
            assert_eq!(got, &data[..], "flag word {flag}");
        }
    }
}
