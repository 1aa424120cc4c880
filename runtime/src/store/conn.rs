//! One client connection on the server side: a non-blocking socket with the bytes received
//! but not yet decoded and the reply bytes not yet sent.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::TcpStream;

use crate::auth::{Gate, Refusal, HELLO_LEN};

/// Read this much at most before decoding again, so a large frame arriving in many pieces
/// is re-scanned a bounded number of times and pipelined small requests are answered soon.
const READ_BATCH: usize = 1 << 20;
/// Buffers emptied after holding a large frame shrink back to this, so a connection that
/// once moved 64 MiB does not keep that memory.
const KEEP_CAPACITY: usize = 64 << 10;

pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) peer: SocketAddr,
    /// The handshake, on a server with a key: the client proves that it knows it first.
    pub(crate) gate: Option<Gate>,
    /// VALIDATE has been received.
    pub(crate) validated: bool,
    /// WRITABLE interest is registered (only while replies are waiting to go out).
    pub(crate) wants_write: bool,
    /// When the connection was accepted.
    pub(crate) since: Instant,
    /// Bytes counted against the server's buffer budget for this connection.
    pub(crate) charged: usize,
    input: Vec<u8>,
    /// Decoded bytes at the front of `input`.
    consumed: usize,
    output: Vec<u8>,
    /// Sent bytes at the front of `output`.
    sent: usize,
}

/// What one `fill` got.
pub(crate) enum Fill {
    /// New bytes; `drained` if the socket then had no more.
    Data { drained: bool },
    /// Nothing to read now.
    Empty,
    /// The peer closed its side.
    Eof,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, peer: SocketAddr, gate: Option<Gate>) -> Conn {
        Conn {
            stream,
            peer,
            gate,
            validated: false,
            wants_write: false,
            since: Instant::now(),
            charged: 0,
            input: Vec::new(),
            consumed: 0,
            output: Vec::new(),
            sent: 0,
        }
    }

    /// The client has authenticated, or need not.
    pub(crate) fn is_open(&self) -> bool {
        self.gate.as_ref().is_none_or(Gate::is_open)
    }

    /// Takes the next message of the client's handshake if it has arrived (answering its
    /// hello): true if it took one. A stranger (a PyTorch client's VALIDATE) is refused
    /// before the rest of a hello arrives.
    pub(crate) fn authenticate(&mut self) -> Result<bool, Refusal> {
        let Some(gate) = self.gate.as_mut() else { return Ok(false) };
        let want = gate.wants();
        let got = &self.input[self.consumed..];
        if got.len() < want {
            let stranger = want == HELLO_LEN && !Gate::may_begin(got);
            return if stranger { Err(Refusal::NoHandshake) } else { Ok(false) };
        }
        let reply = gate.take(&got[..want])?;
        self.consume(want);
        if let Some(reply) = reply {
            self.queue(&reply);
        }
        Ok(true)
    }

    /// Bytes of memory the connection's buffers hold.
    pub(crate) fn buffered(&self) -> usize {
        self.input.capacity() + self.output.capacity()
    }

    /// Received bytes not yet decoded.
    pub(crate) fn unparsed(&self) -> &[u8] {
        &self.input[self.consumed..]
    }

    /// Marks `n` bytes at the front of `unparsed()` as decoded.
    pub(crate) fn consume(&mut self, n: usize) {
        self.consumed += n;
        if self.consumed == self.input.len() {
            self.input.clear();
            self.consumed = 0;
            self.input.shrink_to(KEEP_CAPACITY);
        }
    }

    /// Reads what the socket has, up to READ_BATCH bytes, through `scratch`.
    pub(crate) fn fill(&mut self, scratch: &mut [u8]) -> io::Result<Fill> {
        if self.consumed > 0 {
            self.input.drain(..self.consumed);
            self.consumed = 0;
        }
        let mut got = 0;
        while got < READ_BATCH {
            match self.stream.read(scratch) {
                Ok(0) if got == 0 => return Ok(Fill::Eof),
                // The close is seen on the next fill, after these bytes are decoded.
                Ok(0) => return Ok(Fill::Data { drained: false }),
                Ok(n) => {
                    // Grown by a quarter rather than doubled: a large frame then holds at
                    // most 1.25 times its size, for a bounded number of copies.
                    let needed = self.input.len() + n;
                    if needed > self.input.capacity() {
                        self.input.reserve_exact(needed.max(self.input.capacity() / 4 * 5) - self.input.len());
                    }
                    self.input.extend_from_slice(&scratch[..n]);
                    got += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(if got == 0 { Fill::Empty } else { Fill::Data { drained: true } });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Fill::Data { drained: false })
    }

    /// Queues reply bytes; `flush` sends them.
    pub(crate) fn queue(&mut self, bytes: &[u8]) {
        self.output.extend_from_slice(bytes);
    }

    /// Reply bytes not yet sent.
    pub(crate) fn pending_output(&self) -> usize {
        self.output.len() - self.sent
    }

    /// Sends queued replies until done or the socket is full.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while self.sent < self.output.len() {
            match self.stream.write(&self.output[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.output.len() {
            self.output.clear();
            self.sent = 0;
            self.output.shrink_to(KEEP_CAPACITY);
        } else if self.sent > self.output.len() / 2 {
            self.output.drain(..self.sent);
            self.sent = 0;
        }
        Ok(())
    }
}
