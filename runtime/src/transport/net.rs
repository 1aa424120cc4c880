//! The network transport: TCP connections (socket2) between ranks that do not share
//! memory, moved by one proxy thread per rank (NCCL's proxy: posted -> transmitted -> done).
//!
//! A sender's kernel writes into a local shadow of the receiver's FIFO (same layout). The
//! proxy forwards each posted step (the protocol slot and byte count its size word names)
//! once the receiver's FIFO has room, and counts the slot free locally as soon as it is
//! copied out. The receiving proxy writes arriving steps into its rank's own FIFO — LL lines
//! as atomic 8-byte words, LL128 flags after their data — posts the tail, and reports the
//! kernel's head back as credits. Kernels see ordinary connectors and need no change.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jitccl_codegen::abi::{Conn, STEPS};
use socket2::{Domain, Socket, Type};

use crate::error::{sys, Error, Result};
use crate::transport::connect::Link;
use crate::transport::layout::Layout;

const MAGIC: u64 = 0x3154_454e_4c43_434a; // "JCCLNET1"
/// Data frame header: step, size word.
const FRAME_HEADER: usize = 16;
const SIZE_MASK: u64 = (1 << 56) - 1;

/// A listening socket for the connections peers open to this rank.
pub(crate) struct NetListener {
    listener: TcpListener,
}

impl NetListener {
    /// Listens on `ip` (the bootstrap's interface) at an ephemeral port.
    pub(crate) fn bind(ip: std::net::IpAddr) -> Result<NetListener> {
        let addr = SocketAddr::new(ip, 0);
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(sys("creating a socket"))?;
        sock.set_reuse_address(true).map_err(sys("configuring a socket"))?;
        sock.bind(&addr.into()).map_err(sys(format!("binding {addr}")))?;
        // Every peer connects before anyone accepts: the backlog must hold them all.
        sock.listen(4096).map_err(sys(format!("listening on {addr}")))?;
        Ok(NetListener { listener: sock.into() })
    }

    pub(crate) fn addr(&self) -> Result<SocketAddr> {
        self.listener.local_addr().map_err(sys("reading the listen address"))
    }
}

/// The side of one link this rank drives.
struct SendSide {
    link: Link,
    fifo: Conn,
    stream: TcpStream,
    /// Steps copied out of the shadow FIFO.
    sent: u64,
    /// Steps the receiver's kernel has consumed.
    remote_head: u64,
    credit: [u8; 8],
    credit_len: usize,
    out: Vec<u8>,
    out_pos: usize,
    /// The connection failed; the link is no longer served.
    dead: bool,
}

struct RecvSide {
    link: Link,
    fifo: Conn,
    stream: TcpStream,
    /// The next step expected.
    next: u64,
    reported_head: u64,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    dead: bool,
}

/// The proxy thread of one rank; stops when dropped.
pub(crate) struct Proxy {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

// SAFETY: the raw FIFO pointers in the sides stay valid while the communicator (which owns
// both the segments and the proxy) lives, and are accessed with the same atomics as kernels.
struct Sides(Vec<SendSide>, Vec<RecvSide>);
unsafe impl Send for Sides {}

impl Proxy {
    /// Opens one TCP connection per link: this rank connects for its sends (to `addrs`) and
    /// accepts its receives on `listener`; then starts the proxy thread. `shadows[q]` /
    /// `own` are the segment bases the links' FIFOs live in.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        layout: &Layout,
        rank: usize,
        sends: &[Link],
        recvs: &[Link],
        bases: &[*mut u8],
        listener: NetListener,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Proxy> {
        let deadline = Instant::now() + timeout;
        let mut send_sides = Vec::new();
        for &link in sends {
            let addr = addrs[link.peer];
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let mut stream = TcpStream::connect_timeout(&addr, left)
                .map_err(sys(format!("rank {rank}: connecting to rank {} at {addr}", link.peer)))?;
            let mut hello = Vec::with_capacity(24);
            hello.extend(MAGIC.to_le_bytes());
            hello.extend((rank as u64).to_le_bytes());
            hello.extend((layout.offset(link.chan, link.edge) as u64).to_le_bytes());
            stream.write_all(&hello).map_err(sys(format!("rank {rank}: greeting rank {}", link.peer)))?;
            send_sides.push(SendSide {
                link,
                fifo: layout.end(bases[link.peer], link.chan, link.edge, link.peer),
                stream,
                sent: 0,
                remote_head: 0,
                credit: [0; 8],
                credit_len: 0,
                out: Vec::new(),
                out_pos: 0,
                dead: false,
            });
        }
        let mut pending: Vec<Link> = recvs.to_vec();
        let mut recv_sides = Vec::new();
        listener.listener.set_nonblocking(true).map_err(sys("configuring the listener"))?;
        while !pending.is_empty() {
            let (mut stream, from) = match listener.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let ranks: Vec<usize> = pending.iter().map(|l| l.peer).collect();
                        return Err(Error::Timeout {
                            op: "net connection setup".into(),
                            rank,
                            channel: pending[0].chan,
                            peer: ranks[0] as i32,
                            waiting: "a connection from",
                            timeout_s: timeout.as_secs_f64(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(sys(format!("rank {rank}: accepting a connection"))(e)),
            };
            stream.set_nonblocking(false).map_err(sys("configuring a connection"))?;
            stream.set_read_timeout(Some(timeout)).map_err(sys("configuring a connection"))?;
            let mut hello = [0u8; 24];
            if stream.read_exact(&mut hello).is_err() || u64::from_le_bytes(hello[..8].try_into().expect("8 bytes")) != MAGIC {
                tracing::warn!("rank {rank}: dropped a connection from {from} that is not a jitccl peer");
                continue;
            }
            let peer = u64::from_le_bytes(hello[8..16].try_into().expect("8 bytes")) as usize;
            let offset = u64::from_le_bytes(hello[16..24].try_into().expect("8 bytes")) as usize;
            let Some(i) = pending.iter().position(|l| l.peer == peer && layout.offset(l.chan, l.edge) == offset) else {
                tracing::warn!("rank {rank}: dropped an unexpected connection from rank {peer} ({from})");
                continue;
            };
            let link = pending.swap_remove(i);
            recv_sides.push(RecvSide {
                link,
                fifo: layout.end(bases[rank], link.chan, link.edge, link.peer),
                stream,
                next: 0,
                reported_head: 0,
                inbuf: Vec::new(),
                out: Vec::new(),
                out_pos: 0,
                dead: false,
            });
        }
        for s in &send_sides {
            s.stream.set_nonblocking(true).map_err(sys("configuring a connection"))?;
            s.stream.set_nodelay(true).map_err(sys("configuring a connection"))?;
        }
        for r in &recv_sides {
            r.stream.set_nonblocking(true).map_err(sys("configuring a connection"))?;
            r.stream.set_nodelay(true).map_err(sys("configuring a connection"))?;
        }
        tracing::info!("rank {rank}: net transport up, {} send and {} receive connection(s)", send_sides.len(), recv_sides.len());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sides = Sides(send_sides, recv_sides);
        let thread = std::thread::Builder::new()
            .name(format!("jitccl-proxy{rank}"))
            .spawn(move || {
                let sides = sides;
                run(rank, sides.0, sides.1, &flag)
            })
            .map_err(sys("starting the proxy thread"))?;
        Ok(Proxy { stop, thread: Some(thread) })
    }
}

/// How long a closing proxy keeps forwarding steps its kernels already posted (a send
/// completes once its data is in the local shadow FIFO, so they must still go out).
const DRAIN: Duration = Duration::from_secs(10);

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn atomic(p: *mut u64) -> &'static AtomicU64 {
    // SAFETY: FIFO counters and LL words are 8-byte aligned and live as long as the proxy.
    unsafe { AtomicU64::from_ptr(p) }
}

/// Writes what it can of `out[*pos..]`; false when the connection is gone.
fn flush(stream: &mut TcpStream, out: &mut Vec<u8>, pos: &mut usize) -> bool {
    while *pos < out.len() {
        match stream.write(&out[*pos..]) {
            Ok(0) => return false,
            Ok(n) => *pos += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    out.clear();
    *pos = 0;
    true
}

/// Moves posted steps out of the shadow FIFO and credits in; true if anything happened.
fn pump_send(s: &mut SendSide) -> std::result::Result<bool, String> {
    let mut progressed = false;
    loop {
        match s.stream.read(&mut s.credit[s.credit_len..]) {
            Ok(0) => return Err("closed the connection".into()),
            Ok(n) => {
                s.credit_len += n;
                if s.credit_len == 8 {
                    s.remote_head = s.remote_head.max(u64::from_le_bytes(s.credit));
                    s.credit_len = 0;
                    progressed = true;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    if !flush(&mut s.stream, &mut s.out, &mut s.out_pos) {
        return Err("closed the connection".into());
    }
    while s.out.is_empty() && s.sent < atomic(s.fifo.tail).load(Ordering::Acquire) && s.sent < s.remote_head + STEPS as u64 {
        let slot = (s.sent % STEPS as u64) as usize;
        // SAFETY: sizes has STEPS entries; written before the tail we acquired.
        let word = unsafe { *s.fifo.sizes.add(slot) };
        let (proto, bytes) = ((word >> 56) as usize, (word & SIZE_MASK) as usize);
        if proto >= s.fifo.buf.len() || bytes as u64 > s.fifo.slot_bytes[proto] {
            return Err(format!("step {} has a bad size word {word:#x}", s.sent));
        }
        s.out.extend(s.sent.to_le_bytes());
        s.out.extend(word.to_le_bytes());
        // SAFETY: the slot holds `bytes` posted bytes of protocol `proto`.
        let data = unsafe { std::slice::from_raw_parts(s.fifo.buf[proto].add(slot * s.fifo.slot_bytes[proto] as usize), bytes) };
        s.out.extend_from_slice(data);
        s.sent += 1;
        // Copied out: the kernel may refill the slot.
        atomic(s.fifo.head).store(s.sent, Ordering::Release);
        progressed = true;
        if !flush(&mut s.stream, &mut s.out, &mut s.out_pos) {
            return Err("closed the connection".into());
        }
    }
    Ok(progressed)
}

/// Stores an arriving step into the rank's FIFO as its protocol's reader expects.
fn deliver(fifo: &Conn, step: u64, word: u64, data: &[u8]) {
    let slot = (step % STEPS as u64) as usize;
    let proto = (word >> 56) as usize;
    // SAFETY: the sender only sends step k once the kernel has consumed step k - STEPS, so
    // the slot is free; sizes were checked on receipt.
    unsafe {
        let dst = fifo.buf[proto].add(slot * fifo.slot_bytes[proto] as usize);
        match proto {
            // LL: each 8-byte {data, flag} half must appear whole.
            1 => {
                for (i, w) in data.chunks_exact(8).enumerate() {
                    atomic(dst.add(8 * i) as *mut u64).store(u64::from_le_bytes(w.try_into().expect("8 bytes")), Ordering::Relaxed);
                }
            }
            // LL128: a line's data before its flag word (the last of 16).
            2 => {
                for (l, line) in data.chunks_exact(128).enumerate() {
                    let d = dst.add(128 * l);
                    std::ptr::copy_nonoverlapping(line.as_ptr(), d, 120);
                    atomic(d.add(120) as *mut u64).store(u64::from_le_bytes(line[120..].try_into().expect("8 bytes")), Ordering::Release);
                }
            }
            _ => std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()),
        }
        *fifo.sizes.add(slot) = word;
    }
    atomic(fifo.tail).store(step + 1, Ordering::Release);
}

/// Moves arriving steps into the FIFO and the kernel's progress back; true if anything happened.
fn pump_recv(r: &mut RecvSide) -> std::result::Result<bool, String> {
    let mut progressed = false;
    let mut closed = false;
    let mut buf = [0u8; 64 << 10];
    loop {
        match r.stream.read(&mut buf) {
            // The peer's last steps may have come with its close: deliver them first.
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => {
                r.inbuf.extend_from_slice(&buf[..n]);
                progressed = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let mut at = 0;
    while r.inbuf.len() - at >= FRAME_HEADER {
        let step = u64::from_le_bytes(r.inbuf[at..at + 8].try_into().expect("8 bytes"));
        let word = u64::from_le_bytes(r.inbuf[at + 8..at + 16].try_into().expect("8 bytes"));
        let (proto, bytes) = ((word >> 56) as usize, (word & SIZE_MASK) as usize);
        if step != r.next || proto >= r.fifo.buf.len() || bytes as u64 > r.fifo.slot_bytes[proto] {
            return Err(format!("sent a bad frame (step {step}, expected {}; size word {word:#x})", r.next));
        }
        if r.inbuf.len() - at - FRAME_HEADER < bytes {
            break;
        }
        deliver(&r.fifo, step, word, &r.inbuf[at + FRAME_HEADER..at + FRAME_HEADER + bytes]);
        r.next += 1;
        at += FRAME_HEADER + bytes;
    }
    r.inbuf.drain(..at);
    if closed {
        return Err("closed the connection".into());
    }
    let head = atomic(r.fifo.head).load(Ordering::Acquire);
    if head > r.reported_head {
        r.reported_head = head;
        r.out.extend(head.to_le_bytes());
        progressed = true;
    }
    if !flush(&mut r.stream, &mut r.out, &mut r.out_pos) {
        return Err("closed the connection".into());
    }
    Ok(progressed)
}

fn run(rank: usize, mut sends: Vec<SendSide>, mut recvs: Vec<RecvSide>, stop: &AtomicBool) {
    let mut idle = 0u32;
    let mut drain_until = None;
    loop {
        if stop.load(Ordering::Acquire) {
            let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN);
            let flushed =
                sends.iter().all(|s| s.dead || (s.out.is_empty() && s.sent >= atomic(s.fifo.tail).load(Ordering::Acquire)));
            if flushed || Instant::now() > until {
                if !flushed {
                    tracing::warn!("rank {rank}: closing with posted steps its peers never took");
                }
                linger(sends.iter_mut().map(|s| &mut s.stream).chain(recvs.iter_mut().map(|r| &mut r.stream)), until);
                break;
            }
        }
        let mut progressed = false;
        for s in sends.iter_mut().filter(|s| !s.dead) {
            match pump_send(s) {
                Ok(p) => progressed |= p,
                Err(why) => {
                    // A peer that finished closes its links; one that fails with steps in
                    // flight is worth a warning (kernels waiting on it end by their timeout,
                    // which names it).
                    let busy = s.sent < atomic(s.fifo.tail).load(Ordering::Acquire) || !s.out.is_empty();
                    link_failed(rank, "to", s.link, &why, busy);
                    s.dead = true;
                }
            }
        }
        for r in recvs.iter_mut().filter(|r| !r.dead) {
            match pump_recv(r) {
                Ok(p) => progressed |= p,
                Err(why) => {
                    link_failed(rank, "from", r.link, &why, !r.inbuf.is_empty());
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

/// Closes the connections so that what was sent arrives: a socket closed with unread
/// incoming bytes (late credits) resets the connection, and a reset makes the peer drop
/// data it has not read yet. So: end our side, then read until each peer has closed its
/// side too (or the deadline passes).
fn linger<'a>(streams: impl Iterator<Item = &'a mut TcpStream>, until: Instant) {
    let mut open: Vec<&mut TcpStream> = streams.filter(|s| s.shutdown(std::net::Shutdown::Write).is_ok()).collect();
    let mut buf = [0u8; 4096];
    while !open.is_empty() && Instant::now() < until {
        open.retain_mut(|s| match s.read(&mut buf) {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
        });
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn link_failed(rank: usize, dir: &str, link: Link, why: &str, busy: bool) {
    if busy {
        tracing::warn!("rank {rank}: net link {dir} rank {} (channel {}) failed with steps in flight: {why}", link.peer, link.chan);
    } else {
        tracing::debug!("rank {rank}: net link {dir} rank {} (channel {}) ended: {why}", link.peer, link.chan);
    }
}
