//! The client's side of the wire: requests encoded within the protocol's limits, and a
//! connection whose every read and write is bounded by the call's deadline.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::protocol::{Command, Put, MAX_FRAME_LEN, MAX_KEYS_PER_COMMAND, MAX_KEY_LEN, MAX_VALUE_LEN};
use super::{Result, StoreError};

/// Prepended to every key on the wire, as PyTorch's TCPStore client does, so a key set
/// here is the key a PyTorch process reads from the same server, and the other way round.
pub(super) const KEY_PREFIX: &str = "/";

/// A request being encoded, checked against the protocol's limits as it grows so that a
/// call breaking them fails before anything is sent.
pub(super) struct Frame {
    op: &'static str,
    pub bytes: Vec<u8>,
}

impl Frame {
    pub(super) fn new(op: &'static str, command: Command) -> Frame {
        Frame { op, bytes: vec![command as u8] }
    }

    pub(super) fn refuse(&self, msg: String) -> StoreError {
        StoreError::InvalidArgument { op: self.op, msg }
    }

    pub(super) fn key(&mut self, key: &str) -> Result<()> {
        let len = KEY_PREFIX.len() + key.len();
        if len > MAX_KEY_LEN {
            return Err(self.refuse(format!("a key of {len} bytes on the wire (limit {MAX_KEY_LEN})")));
        }
        self.bytes.put_u64(len as u64);
        self.bytes.extend_from_slice(KEY_PREFIX.as_bytes());
        self.bytes.extend_from_slice(key.as_bytes());
        Ok(())
    }

    pub(super) fn value(&mut self, value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE_LEN {
            return Err(self.refuse(format!("a value of {} bytes (limit {MAX_VALUE_LEN})", value.len())));
        }
        self.bytes.put_bytes(value);
        Ok(())
    }

    pub(super) fn count(&mut self, n: usize) -> Result<()> {
        if n > MAX_KEYS_PER_COMMAND {
            return Err(self.refuse(format!("{n} keys (limit {MAX_KEYS_PER_COMMAND})")));
        }
        self.bytes.put_u64(n as u64);
        Ok(())
    }

    pub(super) fn finish(self) -> Result<Vec<u8>> {
        if self.bytes.len() > MAX_FRAME_LEN {
            return Err(self.refuse(format!("a request of {} bytes (limit {MAX_FRAME_LEN})", self.bytes.len())));
        }
        Ok(self.bytes)
    }
}

/// The frame of a command whose argument is a key list.
pub(super) fn key_list(op: &'static str, command: Command, keys: &[&str]) -> Result<Frame> {
    let mut frame = Frame::new(op, command);
    frame.count(keys.len())?;
    for key in keys {
        frame.key(key)?;
    }
    Ok(frame)
}

/// The connection during one call: every read and write fails with `TimedOut` once
/// `deadline` has passed.
pub(super) struct Wire<'a> {
    pub stream: &'a mut TcpStream,
    pub deadline: Instant,
}

impl Wire<'_> {
    pub(super) fn left(&self) -> io::Result<Duration> {
        remaining(self.deadline).ok_or_else(|| io::ErrorKind::TimedOut.into())
    }

    pub(super) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        self.stream.write_all(bytes)
    }

    pub(super) fn exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            self.stream.set_read_timeout(Some(self.left()?))?;
            match self.stream.read(&mut buf[filled..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(super) fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut out = [0; N];
        self.exact(&mut out)?;
        Ok(out)
    }

    pub(super) fn u8(&mut self) -> io::Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(super) fn u32(&mut self) -> io::Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(super) fn i64(&mut self) -> io::Result<i64> {
        self.array().map(i64::from_le_bytes)
    }

    /// A length-prefixed value, allocated as its bytes arrive, never from the length alone.
    pub(super) fn bytes(&mut self) -> io::Result<Vec<u8>> {
        const CHUNK: usize = 64 << 10;
        let len = u64::from_le_bytes(self.array()?);
        if len > MAX_VALUE_LEN as u64 {
            return Err(invalid(format!("a reply value of {len} bytes (limit {MAX_VALUE_LEN})")));
        }
        let len = len as usize;
        let mut value = Vec::new();
        while value.len() < len {
            let start = value.len();
            value.resize(len.min(start + CHUNK), 0);
            self.exact(&mut value[start..])?;
        }
        Ok(value)
    }
}

/// What is left of the call's time until `deadline`, if anything.
pub(super) fn remaining(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

/// Whether a bounded read or write ran out of its time.
pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// A reply the protocol does not allow.
pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}
