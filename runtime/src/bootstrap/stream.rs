//! A connection of the bootstrap's ring or of a rank's link to its root: its non-blocking
//! socket, and the TLS session all its bytes pass through once
//! [`Bootstrap::start_tls`](super::Bootstrap::start_tls) has opened one. Reads and writes keep the socket's non-blocking contract (`WouldBlock`:
//! poll the socket), so the ring's poll loops drive both alike.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

use rustls::Connection;
use socket2::Socket;

use super::error::Result;
use super::net;
use super::wait::Waiter;

pub(crate) struct Stream {
    s: Socket,
    tls: Option<Box<Connection>>,
}

impl Stream {
    pub fn new(s: Socket) -> Stream {
        Stream { s, tls: None }
    }

    pub fn socket(&self) -> &Socket {
        &self.s
    }

    pub fn fd(&self) -> RawFd {
        self.s.as_raw_fd()
    }

    /// From now on, every byte passes through `conn` (a session whose handshake has not
    /// begun: [`handshake`](Self::handshake) drives it).
    pub fn secure(&mut self, conn: Connection) {
        self.tls = Some(Box::new(conn));
    }

    /// Whether a session carries the bytes and its handshake is complete.
    pub fn is_secure(&self) -> bool {
        self.tls.as_ref().is_some_and(|c| !c.is_handshaking())
    }

    /// Moves the session's handshake on as far as the socket allows, without waiting:
    /// true once it is complete. An error is the peer's refusal (another key, no TLS).
    pub fn handshake(&mut self) -> io::Result<bool> {
        let Some(c) = self.tls.as_mut() else { return Ok(true) };
        while c.is_handshaking() {
            push(c, &self.s)?;
            if c.wants_write() {
                // The socket takes no more for now; the flight goes on once it does.
                return Ok(false);
            }
            match c.read_tls(&mut &self.s) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed during the TLS handshake")),
                Ok(_) => {
                    if let Err(e) = c.process_new_packets() {
                        // Tell the peer why (best effort): its error then names it too.
                        let _ = c.write_tls(&mut &self.s);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        push(c, &self.s)?;
        Ok(!c.wants_write())
    }

    /// What the socket should be polled for while the handshake waits.
    pub fn handshake_events(&self) -> libc::c_short {
        if self.pending() {
            libc::POLLOUT
        } else {
            libc::POLLIN
        }
    }

    /// Reads what has arrived: `Ok(0)` once the peer has closed; `WouldBlock` only when
    /// the session holds nothing more and the socket has nothing.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(c) = self.tls.as_mut() else { return (&self.s).read(buf) };
        loop {
            match c.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // A peer gone without closing its session is a closed connection too.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                r => return r,
            }
            if c.read_tls(&mut &self.s)? > 0 {
                c.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
        }
    }

    /// Writes what it can of `buf`: through the session, only once the records it already
    /// holds are on the socket (`WouldBlock` until then). Bytes it took may still wait in
    /// the session: [`pending`](Self::pending) says so, [`flush`](Self::flush) sends them.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(c) = self.tls.as_mut() else { return (&self.s).write(buf) };
        push(c, &self.s)?;
        if c.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = c.writer().write(buf)?;
        push(c, &self.s)?;
        Ok(n)
    }

    /// Writes all of `buf`, and the records it makes, on the socket (bounded by `w`).
    pub fn write_all(&mut self, buf: &[u8], w: &Waiter) -> Result<()> {
        let (fd, mut off) = (self.fd(), 0);
        net::send_with(fd, w, || {
            if off < buf.len() {
                off += net::nonzero(self.write(&buf[off..])?)?;
            }
            self.flush()?;
            Ok(off == buf.len())
        })
    }

    /// Whether the session holds records the socket has not taken yet.
    pub fn pending(&self) -> bool {
        self.tls.as_ref().is_some_and(|c| c.wants_write())
    }

    /// Hands the socket the session's records: `WouldBlock` while it cannot take them all.
    pub fn flush(&mut self) -> io::Result<()> {
        let Some(c) = self.tls.as_mut() else { return Ok(()) };
        push(c, &self.s)?;
        match c.wants_write() {
            true => Err(io::ErrorKind::WouldBlock.into()),
            false => Ok(()),
        }
    }
}

/// Hands `s` what `c` holds, as far as it takes it.
fn push(c: &mut Connection, mut s: &Socket) -> io::Result<()> {
    while c.wants_write() {
        match c.write_tls(&mut s) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
