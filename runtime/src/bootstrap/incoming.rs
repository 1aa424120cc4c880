//! Connections arriving at a rank's listening socket: the root's reply, the ring
//! predecessor, and one connection per send/recv message. Anything that is not a
//! well-formed message of this communicator is logged and dropped.

use std::collections::VecDeque;
use std::time::Duration;

use socket2::Socket;

use super::error::{BootstrapError, Result};
use super::net::{self, Waiter};
use super::wire::{self, Kind, RootReply, MAX_CONTROL_PAYLOAD, ROOT_RANK};

/// A connection that has not sent its header within this time is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) enum Incoming {
    RootReply(RootReply),
    RootError(BootstrapError),
    /// The ring predecessor's connection (rank it claims).
    Ring(Socket, usize),
    P2p(Message),
}

/// One send/recv message.
pub(crate) struct Message {
    pub from: usize,
    pub tag: u64,
    pub data: Vec<u8>,
}

/// Messages received before they were asked for, in arrival order.
#[derive(Default)]
pub(crate) struct Mailbox {
    msgs: VecDeque<Message>,
}

impl Mailbox {
    pub fn push(&mut self, m: Message) {
        self.msgs.push_back(m);
    }

    /// The oldest message from `from` with `tag`.
    pub fn take(&mut self, from: usize, tag: u64) -> Option<Vec<u8>> {
        let i = self.msgs.iter().position(|m| m.from == from && m.tag == tag)?;
        self.msgs.remove(i).map(|m| m.data)
    }
}

/// Accepts at most one connection (waiting at most one slice) and reads its message.
/// `Ok(None)`: nothing arrived, or a connection was rejected.
pub(crate) fn accept_message(l: &Socket, nonce: u64, nranks: usize, w: &Waiter) -> Result<Option<Incoming>> {
    let Some(s) = net::accept_once(l, w)? else { return Ok(None) };
    let from = net::describe(&s);
    match read_message(s, nonce, nranks, w) {
        Ok(m) => Ok(Some(m)),
        Err(e) => {
            // The operation's own deadline or abort ends it; a bad connection does not.
            w.check()?;
            tracing::warn!(%from, error = %e, "jitccl bootstrap: rejected an incoming connection");
            Ok(None)
        }
    }
}

fn read_message(s: Socket, nonce: u64, nranks: usize, w: &Waiter) -> Result<Incoming> {
    let from = || net::describe(&s);
    let hw = w.capped("read the header of an incoming connection", HEADER_TIMEOUT);
    let h = net::read_header(&s, nonce, &hw)?;
    let bad = |detail: String| BootstrapError::Protocol { from: from(), detail };
    let control = |s: &Socket| -> Result<Vec<u8>> {
        if h.len > MAX_CONTROL_PAYLOAD {
            return Err(bad(format!("{:?} message of {} bytes", h.kind, h.len)));
        }
        net::read_payload(s, h.len, w)
    };
    match h.kind {
        Kind::RootReply | Kind::RootError if h.rank != ROOT_RANK => {
            Err(bad(format!("{:?} message from rank {} instead of the root", h.kind, h.rank)))
        }
        Kind::RootReply => {
            let p = control(&s)?;
            RootReply::decode(&p).map(Incoming::RootReply).ok_or_else(|| bad("malformed root reply".into()))
        }
        Kind::RootError => Ok(Incoming::RootError(wire::decode_error(&control(&s)?, "the root"))),
        Kind::RingConnect | Kind::P2p if h.rank as usize >= nranks => {
            Err(bad(format!("{:?} message from rank {} of a {nranks}-rank communicator", h.kind, h.rank)))
        }
        Kind::RingConnect if h.len == 0 => Ok(Incoming::Ring(s, h.rank as usize)),
        Kind::P2p => {
            let data = net::read_payload(&s, h.len, &w.sub(w.op, Some(h.rank as usize)))?;
            Ok(Incoming::P2p(Message { from: h.rank as usize, tag: h.tag, data }))
        }
        k => Err(bad(format!("unexpected {k:?} message on a new connection"))),
    }
}
