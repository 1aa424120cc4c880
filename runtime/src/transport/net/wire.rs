//! What travels on the network transport's sockets, and non-blocking I/O on them.
//!
//! Each socket opens with a hello from the sender naming the connector (sender rank, FIFO
//! offset in the receiver's segment) and the socket's index among the connector's sockets.
//! Then the sender sends frames (step, size word, the step's bytes) and the receiver sends
//! credits (its kernel's head, 8 bytes). All integers are little-endian u64.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

const MAGIC: u64 = 0x3254_454e_4c43_434a; // "JCCLNET2"
/// Frame header: step, size word.
pub(super) const FRAME_HEADER: usize = 16;
/// Credit: the receiving kernel's head.
pub(super) const CREDIT: usize = 8;
const SIZE_MASK: u64 = (1 << 56) - 1;

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
    ((word >> 56) as usize, (word & SIZE_MASK) as usize)
}

/// One non-blocking socket of a connector: what is still to be written, and what was
/// read but not used yet.
pub(super) struct Wire {
    pub stream: TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    pub inbuf: Vec<u8>,
    /// The peer closed its side; nothing more will arrive.
    pub eof: bool,
}

impl Wire {
    pub fn new(stream: TcpStream) -> std::io::Result<Wire> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Wire { stream, out: Vec::new(), out_pos: 0, inbuf: Vec::new(), eof: false })
    }

    /// Everything queued has been handed to the OS.
    pub fn flushed(&self) -> bool {
        self.out.is_empty()
    }

    pub fn queue(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Writes what it can of the queued bytes.
    pub fn flush(&mut self) -> Result<(), String> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err("closed the connection".into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    /// Reads what has arrived into `inbuf` through `scratch` (setting `eof` at the end of the
    /// stream); true if anything was read.
    pub fn fill(&mut self, scratch: &mut [u8]) -> Result<bool, String> {
        let mut any = false;
        while !self.eof {
            match self.stream.read(scratch) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&scratch[..n]);
                    any = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(any)
    }
}

/// Closes the sockets so that what was sent arrives: a socket closed with unread incoming
/// bytes (late credits) resets the connection, and a reset makes the peer drop data it has
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
