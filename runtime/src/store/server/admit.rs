//! Which connections the event loop takes, keeps and closes under its limits: the
//! connection cap (making room by closing the oldest connection that has not validated, or
//! refusing), the validation deadline, descriptor exhaustion, and the buffer budget.

use std::io;
use std::time::Instant;

use mio::{Interest, Token};
use tracing::{debug, warn};

use super::super::conn::Conn;
use super::super::state::ConnId;
use super::{Close, EventLoop};
use crate::auth::{Gate, Service};

impl EventLoop {
    pub(super) fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) if self.conns.len() >= self.limits.max_conns && !self.evict_unvalidated() => {
                    // Closed at once: the client is told now rather than left to time out.
                    drop(stream);
                    let max = self.limits.max_conns;
                    self.warn(format_args!("store: refused the connection from {peer}: {max} connections are open"));
                }
                Ok((mut stream, peer)) => {
                    // Requests and replies are small and latency-bound.
                    if let Err(e) = stream.set_nodelay(true) {
                        debug!("store: TCP_NODELAY on the connection from {peer}: {e}");
                    }
                    let id = self.next_id;
                    self.next_id += 1;
                    if let Err(e) = self.registry.register(&mut stream, Token(id), Interest::READABLE) {
                        warn!("store: cannot watch the connection from {peer}: {e}");
                        continue;
                    }
                    let gate = match self.key.as_ref().map(|k| Gate::new(k, Service::Store)).transpose() {
                        Ok(gate) => gate,
                        Err(e) => {
                            self.warn(format_args!("store: dropped the connection from {peer}: {e}"));
                            continue;
                        }
                    };
                    debug!("store: connection from {peer}");
                    let conn = Conn::new(stream, peer, gate);
                    self.unvalidated.push_back((id, conn.since));
                    self.conns.insert(id, conn);
                    self.publish();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) && self.spare.release() => {
                    // Refuse the waiting connection with the spare descriptor rather than
                    // leave it hanging in the backlog (and this loop spinning on it).
                    let refused = self.listener.accept().map(|(_, peer)| peer);
                    self.spare.restore();
                    self.warn(format_args!("store: out of file descriptors ({e}); refused a connection: {refused:?}"));
                }
                Err(e) => {
                    // The peer stays in the backlog; the next connection attempt triggers
                    // another accept.
                    self.warn(format_args!("store: accept failed: {e}"));
                    return;
                }
            }
        }
    }

    /// Closes the connections that have not validated within the deadline.
    pub(super) fn sweep(&mut self) {
        let now = Instant::now();
        while let Some(&(id, since)) = self.unvalidated.front() {
            if now.saturating_duration_since(since) < self.limits.validate_timeout {
                return;
            }
            self.unvalidated.pop_front();
            self.close_unvalidated(id, "it sent no VALIDATE in time");
        }
    }

    /// Closes the oldest connection that has not validated, to make room; false if none.
    fn evict_unvalidated(&mut self) -> bool {
        while let Some((id, _)) = self.unvalidated.pop_front() {
            if self.close_unvalidated(id, "at the connection limit, it was the oldest not to have sent VALIDATE") {
                return true;
            }
        }
        false
    }

    /// Closes connection `id` if it is open and has not validated.
    fn close_unvalidated(&mut self, id: ConnId, why: &'static str) -> bool {
        match self.conns.remove(&id) {
            Some(conn) if !conn.validated => {
                self.close(id, conn, Close::Unvalidated(why));
                true
            }
            Some(conn) => {
                self.conns.insert(id, conn);
                false
            }
            None => false,
        }
    }

    /// Counts `conn`'s buffers against the budget. `Err` if they grew while every
    /// connection's together are past it: this connection is the one to close.
    pub(super) fn charge(&mut self, id: ConnId, conn: &mut Conn) -> Result<(), Close> {
        let held = conn.buffered() + self.state.parked_bytes(id);
        self.buffered = self.buffered - conn.charged + held;
        let grew = held > conn.charged;
        conn.charged = held;
        self.publish();
        if grew && self.buffered > self.limits.max_buffered {
            return Err(Close::OverBudget { held });
        }
        Ok(())
    }
}
