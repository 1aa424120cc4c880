//! The bootstrap ring: one connection to the successor, one from the predecessor, and the
//! ring AllGather over them (contributions of any length, one `RingData` message each).
//! With `JITCCL_TLS=1` both connections carry TLS once the communicator's configuration is
//! agreed ([`Ring::start_tls`]): this rank is the session's client towards its successor,
//! its server towards its predecessor.

use super::error::{BootstrapError, Result};
use super::net;
use super::stream::Stream;
use super::wait::Waiter;
use super::wire::{self, Header, Kind, HEADER_BYTES};
use crate::auth::Tls;

pub(crate) struct Ring {
    pub next: Stream,
    pub prev: Stream,
    /// Number of all-gathers run on this ring (tags their messages, so ranks that call
    /// different collectives in a different order fail instead of mixing data).
    pub seq: u32,
}

impl Ring {
    /// Opens a TLS session on both connections at once (each neighbour waits for this
    /// rank's half of its own handshake, so neither may wait for the other).
    pub fn start_tls(&mut self, tls: &Tls, rank: usize, nranks: usize, w: &Waiter) -> Result<()> {
        let (next_rank, prev_rank) = ((rank + 1) % nranks, (rank + nranks - 1) % nranks);
        let failed = |peer: usize, e: std::io::Error| BootstrapError::Tls {
            op: w.op,
            rank,
            peer,
            detail: match e.kind() {
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    format!("{e}: the peer refused the session (it does not know the job's key, or does not run TLS)")
                }
                _ => e.to_string(),
            },
        };
        self.next.secure(tls.client().map_err(|e| failed(next_rank, e))?);
        self.prev.secure(tls.server().map_err(|e| failed(prev_rank, e))?);
        loop {
            let next_open = self.next.handshake().map_err(|e| failed(next_rank, e))?;
            let prev_open = self.prev.handshake().map_err(|e| failed(prev_rank, e))?;
            if next_open && prev_open {
                return Ok(());
            }
            w.sub(w.op, Some(if next_open { prev_rank } else { next_rank })).check()?;
            let mut fds = Vec::with_capacity(2);
            if !next_open {
                fds.push(net::pollfd(self.next.fd(), self.next.handshake_events()));
            }
            if !prev_open {
                fds.push(net::pollfd(self.prev.fd(), self.prev.handshake_events()));
            }
            net::poll(&mut fds, w.slice()).map_err(|e| BootstrapError::io(format!("{}: poll", w.op), e))?;
        }
    }
}

/// Ring AllGather: at step s, rank r sends block (r - s) to its successor and receives block
/// (r - s - 1) from its predecessor; after n - 1 steps it has every block. Sending and
/// receiving of a step run at once (non-blocking, one poll), so large blocks cannot
/// deadlock on full socket buffers.
pub(crate) fn all_gather(
    ring: &mut Ring, rank: usize, nranks: usize, nonce: u64, mine: &[u8], w: &Waiter,
) -> Result<Vec<Vec<u8>>> {
    let n = nranks;
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); n];
    out[rank] = mine.to_vec();
    let seq = ring.seq;
    ring.seq = ring.seq.wrapping_add(1);
    let (next_rank, prev_rank) = ((rank + 1) % n, (rank + n - 1) % n);
    for step in 0..n.saturating_sub(1) {
        let send_idx = (rank + n - step) % n;
        let recv_idx = (rank + 2 * n - step - 1) % n;
        let tag = ((seq as u64) << 32) | step as u64;
        let msg = wire::message(
            Header::new(nonce, Kind::RingData, send_idx as u32, tag, out[send_idx].len()),
            &out[send_idx],
        );
        let (h, data) = exchange(&mut ring.next, next_rank, &msg, &mut ring.prev, prev_rank, nonce, w)?;
        if h.kind != Kind::RingData || h.rank as usize != recv_idx || h.tag != tag {
            return Err(BootstrapError::Protocol {
                from: format!("rank {prev_rank} (ring predecessor)"),
                detail: format!(
                    "{} expected block of rank {recv_idx} (call {seq}, step {step}), got {:?} of rank {} (call {}, step {}): \
                     ranks must call all_gather/barrier in the same order",
                    w.op,
                    h.kind,
                    h.rank,
                    h.tag >> 32,
                    h.tag & 0xffff_ffff
                ),
            });
        }
        out[recv_idx] = data;
    }
    Ok(out)
}

/// Sends `msg` on `next` while receiving one message from `prev`.
fn exchange(
    next: &mut Stream, next_rank: usize, msg: &[u8], prev: &mut Stream, prev_rank: usize, nonce: u64, w: &Waiter,
) -> Result<(Header, Vec<u8>)> {
    const CHUNK: usize = 1 << 20;
    let mut sent = 0;
    let mut hdr = [0u8; HEADER_BYTES];
    let mut hdr_got = 0;
    let mut header: Option<Header> = None;
    let mut payload: Vec<u8> = Vec::new();
    let mut got = 0;
    let closed = |peer| w.lost(BootstrapError::ConnectionClosed { op: w.op, peer: Some(peer) });
    let unreachable = |peer| w.unreachable(Some(peer));
    let io_err = |what: &str, e| BootstrapError::io(format!("{}: {what}", w.op), e);
    loop {
        // With TLS, the last bytes written may still wait in the session.
        while sent < msg.len() || next.pending() {
            let r = match sent < msg.len() {
                true => next.write(&msg[sent..]),
                false => next.flush().map(|()| 0),
            };
            match r {
                Ok(0) if sent < msg.len() => return Err(closed(next_rank)),
                Ok(k) => sent += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_closed(&e) => return Err(closed(next_rank)),
                Err(e) if net::is_unreachable(&e) => return Err(unreachable(next_rank)),
                Err(e) => return Err(io_err("write", e)),
            }
        }
        let recv_done = loop {
            // `got`: payload bytes received; `payload` grows by CHUNK ahead of them.
            let want = match header {
                None => HEADER_BYTES - hdr_got,
                Some(h) => h.len as usize - got,
            };
            if want == 0 {
                break true;
            }
            let r = match header {
                None => prev.read(&mut hdr[hdr_got..]),
                Some(_) => {
                    if payload.len() == got {
                        payload.resize(got + want.min(CHUNK), 0);
                    }
                    prev.read(&mut payload[got..])
                }
            };
            match r {
                Ok(0) => return Err(closed(prev_rank)),
                Ok(k) if header.is_some() => got += k,
                Ok(k) => {
                    hdr_got += k;
                    if hdr_got == HEADER_BYTES {
                        let h = Header::decode(&hdr, nonce, &|| format!("rank {prev_rank} (ring predecessor)"))?;
                        usize::try_from(h.len).map_err(|_| BootstrapError::Protocol {
                            from: format!("rank {prev_rank}"),
                            detail: format!("payload length {}", h.len),
                        })?;
                        header = Some(h);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_closed(&e) => return Err(closed(prev_rank)),
                Err(e) if net::is_unreachable(&e) => return Err(unreachable(prev_rank)),
                Err(e) => return Err(io_err("read", e)),
            }
        };
        let send_done = sent == msg.len() && !next.pending();
        if send_done && recv_done {
            return Ok((header.unwrap(), payload));
        }
        let waiting_on = if recv_done { next_rank } else { prev_rank };
        w.sub(w.op, Some(waiting_on)).check()?;
        let mut fds = Vec::with_capacity(2);
        if !send_done {
            fds.push(net::pollfd(next.fd(), libc::POLLOUT));
        }
        if !recv_done {
            fds.push(net::pollfd(prev.fd(), libc::POLLIN));
        }
        net::poll(&mut fds, w.slice()).map_err(|e| io_err("poll", e))?;
    }
}

fn is_closed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected)
}
