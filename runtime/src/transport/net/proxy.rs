//! The proxy thread of one rank (NCCL's proxy progress): moves posted steps out of the
//! local shadows of its peers' FIFOs, stores arriving steps into the rank's own FIFOs, and
//! returns the kernels' progress as credits.
//!
//! A connector's steps are dealt round-robin over its sockets (step k on socket k % n), so
//! the steps in flight (up to STEPS) travel in parallel. Each socket stays in step order;
//! the receiver stores a step as soon as its frame is complete and posts the tail only up to
//! the first step still missing. Credits travel on socket 0.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jitccl_codegen::abi::{Conn, STEPS};

use super::wire::{frame_header, linger, parse_frame_header, split_size_word, Wire, CREDIT, FRAME_HEADER};
use crate::error::{sys, Result};
use crate::transport::connect::Link;

/// How long a closing proxy keeps forwarding steps its kernels already posted (a send
/// completes once its data is in the local shadow FIFO, so they must still go out).
const DRAIN: Duration = Duration::from_secs(10);

/// The side of one connector this rank sends on.
pub(super) struct SendSide {
    link: Link,
    /// The local shadow of the receiver's FIFO.
    fifo: Conn,
    socks: Vec<Wire>,
    /// Steps copied out of the shadow FIFO.
    sent: u64,
    /// Steps the receiver's kernel has consumed.
    remote_head: u64,
    /// The connection failed; the connector is no longer served.
    dead: bool,
}

impl SendSide {
    pub fn new(link: Link, fifo: Conn, socks: Vec<Wire>) -> SendSide {
        SendSide { link, fifo, socks, sent: 0, remote_head: 0, dead: false }
    }
}

/// The side of one connector this rank receives on.
pub(super) struct RecvSide {
    link: Link,
    fifo: Conn,
    socks: Vec<Wire>,
    /// Per socket, the next step it carries.
    expect: Vec<u64>,
    /// Steps posted to the kernel (the tail).
    posted: u64,
    reported_head: u64,
    dead: bool,
}

impl RecvSide {
    pub fn new(link: Link, fifo: Conn, socks: Vec<Wire>) -> RecvSide {
        let expect = (0..socks.len() as u64).collect();
        RecvSide { link, fifo, socks, expect, posted: 0, reported_head: 0, dead: false }
    }
}

// SAFETY: the raw FIFO pointers in the sides stay valid while the communicator (which owns
// both the segments and the proxy) lives, and are accessed with the same atomics as kernels.
struct Sides(Vec<SendSide>, Vec<RecvSide>);
unsafe impl Send for Sides {}

/// Starts the proxy thread of `rank`; it runs until `stop` is set, then drains and closes.
pub(super) fn spawn(
    rank: usize,
    sends: Vec<SendSide>,
    recvs: Vec<RecvSide>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    let sides = Sides(sends, recvs);
    std::thread::Builder::new()
        .name(format!("jitccl-proxy{rank}"))
        .spawn(move || {
            let sides = sides;
            run(rank, sides.0, sides.1, &stop)
        })
        .map_err(sys("starting the proxy thread"))
}

fn atomic(p: *mut u64) -> &'static AtomicU64 {
    // SAFETY: FIFO counters and LL words are 8-byte aligned and live as long as the proxy.
    unsafe { AtomicU64::from_ptr(p) }
}

/// Whether a size word names a protocol of `fifo` and fits its slot.
fn fits(fifo: &Conn, word: u64) -> bool {
    let (proto, bytes) = split_size_word(word);
    proto < fifo.buf.len() && bytes as u64 <= fifo.slot_bytes[proto]
}

/// Moves posted steps out of the shadow FIFO and credits in; true if anything happened.
fn pump_send(s: &mut SendSide, scratch: &mut [u8]) -> std::result::Result<bool, String> {
    // Credits come on socket 0 only, and a peer closes all its sockets together: reading
    // socket 0 also notices the close.
    let credits = &mut s.socks[0];
    let mut progressed = credits.fill(scratch)?;
    if credits.eof {
        return Err("closed the connection".into());
    }
    let whole = credits.inbuf.len() / CREDIT * CREDIT;
    for c in credits.inbuf[..whole].chunks_exact(CREDIT) {
        s.remote_head = s.remote_head.max(u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    credits.inbuf.drain(..whole);
    for w in &mut s.socks {
        w.flush()?;
    }
    let n = s.socks.len() as u64;
    loop {
        let w = &mut s.socks[(s.sent % n) as usize];
        if !w.flushed()
            || s.sent >= atomic(s.fifo.tail).load(Ordering::Acquire)
            || s.sent >= s.remote_head + STEPS as u64
        {
            break;
        }
        let slot = (s.sent % STEPS as u64) as usize;
        // SAFETY: sizes has STEPS entries; written before the tail we acquired.
        let word = unsafe { *s.fifo.sizes.add(slot) };
        if !fits(&s.fifo, word) {
            return Err(format!("step {} has a bad size word {word:#x}", s.sent));
        }
        let (proto, bytes) = split_size_word(word);
        // SAFETY: the slot holds `bytes` posted bytes of protocol `proto`.
        let data = unsafe {
            std::slice::from_raw_parts(s.fifo.buf[proto].add(slot * s.fifo.slot_bytes[proto] as usize), bytes)
        };
        w.queue(&frame_header(s.sent, word));
        w.queue(data);
        s.sent += 1;
        // Copied out: the kernel may refill the slot.
        atomic(s.fifo.head).store(s.sent, Ordering::Release);
        progressed = true;
        w.flush()?;
    }
    Ok(progressed)
}

/// Stores an arriving step into the rank's FIFO as its protocol's reader expects. LL and
/// LL128 readers poll the data's own flags, not the tail, so a step may land before the
/// steps ahead of it are complete.
fn store(fifo: &Conn, step: u64, word: u64, data: &[u8]) {
    let slot = (step % STEPS as u64) as usize;
    let (proto, _) = split_size_word(word);
    // SAFETY: the sender only sends step k once the kernel has consumed step k - STEPS, so
    // the slot is free; sizes were checked on receipt.
    unsafe {
        let dst = fifo.buf[proto].add(slot * fifo.slot_bytes[proto] as usize);
        match proto {
            // LL: each 8-byte {data, flag} half must appear whole.
            1 => {
                for (i, w) in data.chunks_exact(8).enumerate() {
                    atomic(dst.add(8 * i) as *mut u64)
                        .store(u64::from_le_bytes(w.try_into().expect("8 bytes")), Ordering::Relaxed);
                }
            }
            // LL128: a line's data before its flag word (the last of 16).
            2 => {
                for (l, line) in data.chunks_exact(128).enumerate() {
                    let d = dst.add(128 * l);
                    std::ptr::copy_nonoverlapping(line.as_ptr(), d, 120);
                    atomic(d.add(120) as *mut u64)
                        .store(u64::from_le_bytes(line[120..].try_into().expect("8 bytes")), Ordering::Release);
                }
            }
            _ => std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()),
        }
        *fifo.sizes.add(slot) = word;
    }
}

/// Moves arriving steps into the FIFO and the kernel's progress back; true if anything happened.
fn pump_recv(r: &mut RecvSide, scratch: &mut [u8]) -> std::result::Result<bool, String> {
    let mut progressed = false;
    let n = r.socks.len() as u64;
    for (i, w) in r.socks.iter_mut().enumerate() {
        // The peer's last steps may have come with its close: store them first.
        progressed |= w.fill(scratch)?;
        let mut at = 0;
        while w.inbuf.len() - at >= FRAME_HEADER {
            let (step, word) = parse_frame_header(&w.inbuf[at..]);
            if step != r.expect[i] || !fits(&r.fifo, word) {
                return Err(format!(
                    "sent a bad frame on socket {i} (step {step}, expected {}; size word {word:#x})",
                    r.expect[i]
                ));
            }
            let bytes = split_size_word(word).1;
            if w.inbuf.len() - at - FRAME_HEADER < bytes {
                break;
            }
            store(&r.fifo, step, word, &w.inbuf[at + FRAME_HEADER..at + FRAME_HEADER + bytes]);
            r.expect[i] += n;
            at += FRAME_HEADER + bytes;
        }
        w.inbuf.drain(..at);
    }
    // Step k is stored once its socket expects a later one.
    let mut tail = r.posted;
    while r.expect[(tail % n) as usize] > tail {
        tail += 1;
    }
    if tail > r.posted {
        r.posted = tail;
        atomic(r.fifo.tail).store(tail, Ordering::Release);
        progressed = true;
    }
    if r.socks.iter().all(|w| w.eof) {
        return Err("closed the connection".into());
    }
    let head = atomic(r.fifo.head).load(Ordering::Acquire);
    if head > r.reported_head {
        r.reported_head = head;
        r.socks[0].queue(&head.to_le_bytes());
        progressed = true;
    }
    r.socks[0].flush()?;
    Ok(progressed)
}

fn run(rank: usize, mut sends: Vec<SendSide>, mut recvs: Vec<RecvSide>, stop: &AtomicBool) {
    let mut scratch = vec![0u8; 64 << 10];
    let mut idle = 0u32;
    let mut drain_until = None;
    loop {
        if stop.load(Ordering::Acquire) {
            let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN);
            let flushed = sends.iter().all(|s| {
                s.dead || (s.socks.iter().all(Wire::flushed) && s.sent >= atomic(s.fifo.tail).load(Ordering::Acquire))
            });
            if flushed || Instant::now() > until {
                if !flushed {
                    tracing::warn!("rank {rank}: closing with posted steps its peers never took");
                }
                let socks =
                    sends.iter_mut().flat_map(|s| &mut s.socks).chain(recvs.iter_mut().flat_map(|r| &mut r.socks));
                linger(socks.map(|w| &mut w.stream), until);
                break;
            }
        }
        let mut progressed = false;
        for s in sends.iter_mut().filter(|s| !s.dead) {
            match pump_send(s, &mut scratch) {
                Ok(p) => progressed |= p,
                Err(why) => {
                    // A peer that finished closes its connectors; one that fails with steps
                    // in flight is worth a warning (kernels waiting on it end by their
                    // timeout, which names it).
                    let busy =
                        s.sent < atomic(s.fifo.tail).load(Ordering::Acquire) || !s.socks.iter().all(Wire::flushed);
                    link_failed(rank, "to", s.link, &why, busy);
                    s.dead = true;
                }
            }
        }
        for r in recvs.iter_mut().filter(|r| !r.dead) {
            match pump_recv(r, &mut scratch) {
                Ok(p) => progressed |= p,
                Err(why) => {
                    link_failed(rank, "from", r.link, &why, r.socks.iter().any(|w| !w.inbuf.is_empty()));
                    r.dead = true;
                }
            }
        }
        // Spin briefly, then give the cores to the kernels this proxy serves.
        idle = if progressed { 0 } else { idle.saturating_add(1) };
        match idle {
            0..=64 => std::hint::spin_loop(),
            65..=20_000 => std::thread::yield_now(),
            _ => std::thread::sleep(Duration::from_micros(50)),
        }
    }
}

fn link_failed(rank: usize, dir: &str, link: Link, why: &str, busy: bool) {
    if busy {
        tracing::warn!(
            "rank {rank}: net link {dir} rank {} (channel {}) failed with steps in flight: {why}",
            link.peer,
            link.chan
        );
    } else {
        tracing::debug!("rank {rank}: net link {dir} rank {} (channel {}) ended: {why}", link.peer, link.chan);
    }
}
