//! What travels on the network transport's sockets, and non-blocking I/O on them.
//!
//! Each socket opens with a hello from the sender naming the connector (sender rank, FIFO
//! offset in the receiver's segment) and the socket's index among the connector's sockets.
//! Then the sender sends frames (step, size word, the step's bytes), and nothing comes
//! back; a failed sender's last frame is a fault frame. All integers are little-endian u64. With TLS, all of it travels as TLS records: the socket
//! is read and written through its session, which the proxy drives like the socket itself.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use jitccl_codegen::abi::{SIZE_BYTES_MASK, SIZE_PROTO_SHIFT};
use rustls::Connection;
use socket2::SockRef;

use crate::bootstrap::watch_link;

const MAGIC: u64 = 0x3354_454e_4c43_434a; // "JCCLNET3"
/// Frame header: step, size word.
pub(super) const FRAME_HEADER: usize = 16;
/// The step number of a fault frame: its size word is the rank that failed first, as the
/// sender knows it, and nothing follows it (the sender's communicator has failed).
pub(super) const FAULT_STEP: u64 = u64::MAX;
/// What a TLS socket's read takes from the socket at most.
const TLS_INBOX: usize = 256 << 10;

/// The first bytes on every socket of a connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    /// The sending rank.
    pub rank: usize,
    /// The connector's FIFO offset in the receiver's segment: its identity.
    pub fifo: usize,
    /// This socket's index among the connector's `nsocks`.
    pub socket: usize,
    pub nsocks: usize,
}

impl Hello {
    pub const LEN: usize = 40;

    pub fn encode(&self) -> [u8; Hello::LEN] {
        let mut b = [0u8; Hello::LEN];
        for (i, v) in
            [MAGIC, self.rank as u64, self.fifo as u64, self.socket as u64, self.nsocks as u64].into_iter().enumerate()
        {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// None if the bytes are not a jitccl hello.
    pub fn decode(b: &[u8; Hello::LEN]) -> Option<Hello> {
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        (word(0) == MAGIC).then(|| Hello {
            rank: word(1) as usize,
            fifo: word(2) as usize,
            socket: word(3) as usize,
            nsocks: word(4) as usize,
        })
    }
}

pub(super) fn frame_header(step: u64, word: u64) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[..8].copy_from_slice(&step.to_le_bytes());
    h[8..].copy_from_slice(&word.to_le_bytes());
    h
}

/// (step, size word) of the frame header at the start of `b`.
pub(super) fn parse_frame_header(b: &[u8]) -> (u64, u64) {
    let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    (word(0), word(1))
}

/// (protocol, bytes) of a FIFO size word.
pub(super) fn split_size_word(word: u64) -> (usize, usize) {
    ((word >> SIZE_PROTO_SHIFT) as usize, (word & SIZE_BYTES_MASK) as usize)
}

/// Why a connector's link failed.
#[derive(Debug)]
pub(super) struct Broken {
    pub why: String,
    /// Nothing came back on it, not even TCP's acknowledgements, for the link timeout:
    /// the peer is unreachable (rather than gone).
    pub unreachable: bool,
}

impl From<String> for Broken {
    fn from(why: String) -> Broken {
        Broken { why, unreachable: false }
    }
}

/// A socket while it is set up (blocking, its timeouts bounding every wait): in the clear,
/// or through its TLS session once that is open.
pub(super) struct Opening {
    pub stream: TcpStream,
    pub tls: Option<Box<Connection>>,
}

impl Read for Opening {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(c) = &mut self.tls else { return self.stream.read(buf) };
        // Until plaintext arrives, or the peer's close (which the session's reader reports).
        while c.wants_read() && c.complete_io(&mut self.stream)?.0 > 0 {}
        c.reader().read(buf)
    }
}

impl Write for Opening {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(c) = &mut self.tls else { return self.stream.write(buf) };
        let n = c.writer().write(buf)?;
        self.flush()?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let Some(c) = &mut self.tls else { return self.stream.flush() };
        while c.wants_write() {
            c.write_tls(&mut self.stream)?;
        }
        Ok(())
    }
}

/// One non-blocking socket of a connector, with its readiness as the proxy's poller last
/// reported it. Readiness is edge-triggered, so it holds until an operation would block.
pub(super) struct Wire {
    pub stream: TcpStream,
    pub readable: bool,
    pub writable: bool,
    /// The poller reported the peer's close (or an error): read on until it shows.
    pub hangup: bool,
    /// The peer closed its side; nothing more will arrive.
    pub eof: bool,
    /// The socket's TLS session, which all its bytes pass through.
    tls: Option<Box<Connection>>,
    /// With TLS, what the socket brought that the session has not taken yet (`at..end`):
    /// the session reads a few KiB at a time, the socket is read in larger pieces.
    inbox: Vec<u8>,
    at: usize,
    end: usize,
    link_timeout: Duration,
}

impl Wire {
    /// `stream`, failing once its link carries nothing back for `link_timeout` (see
    /// `bootstrap::watch_link`).
    pub fn new(opened: Opening, link_timeout: Duration) -> std::io::Result<Wire> {
        let Opening { stream, tls } = opened;
        stream.set_nonblocking(true)?;
        // Steps are latency-bound messages: send each as soon as it is written.
        stream.set_nodelay(true)?;
        watch_link(SockRef::from(&stream), link_timeout)?;
        let inbox = if tls.is_some() { vec![0; TLS_INBOX] } else { Vec::new() };
        Ok(Wire {
            stream,
            readable: true,
            writable: true,
            hangup: false,
            eof: false,
            tls,
            inbox,
            at: 0,
            end: 0,
            link_timeout,
        })
    }

    fn broken(&self, e: std::io::Error) -> Broken {
        if e.kind() == ErrorKind::TimedOut {
            Broken {
                why: format!("carried nothing for the link timeout of {} s ({e})", self.link_timeout.as_secs_f64()),
                unreachable: true,
            }
        } else {
            e.to_string().into()
        }
    }

    /// Reads what has arrived into `buf` (not empty): 0 once nothing more is there for now
    /// (or ever: `eof`).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, Broken> {
        if self.tls.is_some() {
            return self.read_tls(buf);
        }
        while self.readable && !self.eof {
            match self.stream.read(buf) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    // A short read emptied the socket, and what comes next raises a new edge:
                    // no need to spend a call on hearing "would block". Not so for a close
                    // that came with the data: its edge is already spent.
                    self.readable = n == buf.len() || self.hangup;
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.broken(e)),
            }
        }
        Ok(0)
    }

    /// Writes what the socket takes of `bufs` (not all empty) in one call: 0 once it takes
    /// nothing more for now.
    pub fn write(&mut self, bufs: &[IoSlice]) -> Result<usize, Broken> {
        if self.tls.is_some() {
            return self.write_tls(bufs);
        }
        while self.writable {
            match self.stream.write_vectored(bufs) {
                Ok(0) => return Err(Broken::from("closed the connection".to_string())),
                Ok(n) => {
                    // A short write filled the send buffer, whose draining raises a new edge.
                    self.writable = n == bufs.iter().map(|b| b.len()).sum::<usize>();
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.broken(e)),
            }
        }
        Ok(0)
    }

    /// Whether a read would find nothing: the poller reported nothing since the socket last
    /// ran dry. A TLS session may hold plaintext read earlier, so it is never counted quiet.
    pub fn quiet(&self) -> bool {
        !self.readable && self.tls.is_none()
    }

    /// Whether a write would go nowhere now: the socket took no more last time and the
    /// poller has not said it drained since. Never with TLS, whose session may hold records
    /// to hand on.
    pub fn blocked(&self) -> bool {
        !self.writable && self.tls.is_none()
    }

    /// Whether the socket's TLS session holds records the socket has not taken yet.
    pub fn pending(&self) -> bool {
        self.tls.as_ref().is_some_and(|c| c.wants_write())
    }

    /// Hands the socket what its TLS session holds, as far as it takes it (nothing to do
    /// in the clear, where writes go to the socket directly).
    pub fn flush(&mut self) -> Result<(), Broken> {
        let Some(conn) = self.tls.as_mut() else { return Ok(()) };
        while self.writable && conn.wants_write() {
            match conn.write_tls(&mut self.stream) {
                Ok(0) => return Err(Broken::from("closed the connection".to_string())),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.broken(e)),
            }
        }
        Ok(())
    }

    /// `read` through the TLS session: its plaintext first, then what the socket brought.
    fn read_tls(&mut self, buf: &mut [u8]) -> Result<usize, Broken> {
        let conn = self.tls.as_mut().expect("a TLS session");
        loop {
            match conn.reader().read(buf) {
                Ok(0) => {
                    // The peer's close notice.
                    self.eof = true;
                    return Ok(0);
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("TLS: {e}").into()),
            }
            if self.at == self.end {
                // A peer's close without TLS's close notice counts as a plain close (a frame
                // cut short by it is found out by the frame's reader, as in the clear).
                if !self.readable || self.eof {
                    return Ok(0);
                }
                match self.stream.read(&mut self.inbox) {
                    Ok(0) => self.eof = true,
                    Ok(n) => (self.at, self.end) = (0, n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.broken(e)),
                }
                continue;
            }
            let taken = conn.read_tls(&mut &self.inbox[self.at..self.end]).and_then(|n| {
                conn.process_new_packets().map_err(std::io::Error::other)?;
                Ok(n)
            });
            match taken {
                // Nothing taken from bytes offered: the peer's close notice came before them.
                Ok(0) => {
                    self.eof = true;
                    return Ok(0);
                }
                Ok(n) => self.at += n,
                Err(e) => {
                    // Tell the peer why before the link is closed.
                    let _ = conn.write_tls(&mut self.stream);
                    return Err(format!("TLS: {e}").into());
                }
            }
        }
    }

    /// `write` through the TLS session: it takes plaintext only once the socket has taken
    /// its earlier records, so what it holds stays bounded by one write.
    fn write_tls(&mut self, bufs: &[IoSlice]) -> Result<usize, Broken> {
        self.flush()?;
        if self.pending() {
            return Ok(0);
        }
        let conn = self.tls.as_mut().expect("a TLS session");
        let n = conn.writer().write_vectored(bufs).map_err(|e| Broken::from(format!("TLS: {e}")))?;
        self.flush()?;
        Ok(n)
    }
}

/// Closes the sockets so that what was sent arrives: a socket closed with unread incoming
/// bytes (steps a failed receiver never took) resets the connection, and a reset makes the peer drop data it has
/// not read yet. So: end our side, then read until each peer has closed its side too (or
/// the deadline passes).
pub(super) fn linger<'a>(streams: impl Iterator<Item = &'a mut TcpStream>, until: Instant) {
    let mut open: Vec<&mut TcpStream> = streams.filter(|s| s.shutdown(Shutdown::Write).is_ok()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_rejects_strangers() {
        let h = Hello { rank: 3, fifo: 1 << 20, socket: 2, nsocks: 4 };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        let mut b = h.encode();
        b[0] ^= 1;
        assert_eq!(Hello::decode(&b), None);
    }
}
