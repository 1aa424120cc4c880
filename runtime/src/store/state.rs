//! What each command does to the store: the key-value map and the parked WAITs. No I/O;
//! the server feeds it decoded requests and sends the replies it produces.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::protocol::{
    show_key, ProtocolError, Put, Request, MAX_FRAME_LEN, MAX_VALUE_LEN, NOT_READY, READY, STOP_WAITING, WAIT_CANCELED,
};

/// A connection, as the server numbers them (never reused while the server runs).
pub(crate) type ConnId = usize;

#[derive(Default)]
pub(crate) struct State {
    data: HashMap<Vec<u8>, Vec<u8>>,
    /// For each missing key, the connections whose parked WAIT needs it. Keys are shared
    /// with `parked`, so a parked key is held once.
    waiters: HashMap<Rc<[u8]>, Vec<ConnId>>,
    /// For each connection with a parked WAIT, the keys it still misses.
    parked: HashMap<ConnId, Parked>,
}

/// A parked WAIT: the keys it still misses (never empty) and their total length.
struct Parked {
    keys: HashSet<Rc<[u8]>>,
    bytes: usize,
}

impl State {
    /// Runs `req` from connection `conn`: appends its reply (if the command has one) to
    /// `reply`, and the connections whose WAIT it completed — they are owed STOP_WAITING —
    /// to `woken`. An error leaves the store unchanged.
    pub(crate) fn apply(
        &mut self, conn: ConnId, req: Request<'_>, reply: &mut Vec<u8>, woken: &mut Vec<ConnId>,
    ) -> Result<(), ProtocolError> {
        match req {
            Request::Validate { .. } => return Err(ProtocolError::RepeatedValidate),
            Request::Set { key, value } => self.set(key, value.to_vec(), woken),
            Request::CompareSet { key, expected, desired } => {
                // PyTorch's rules: a missing key is created only when `expected` is empty,
                // and the reply is the value after the operation — for a missing key and a
                // non-empty `expected`, `expected` itself.
                match self.data.get_mut(key) {
                    Some(current) => {
                        if current.as_slice() == expected {
                            *current = desired.to_vec();
                        }
                        reply.put_bytes(current);
                    }
                    None if expected.is_empty() => {
                        reply.put_bytes(desired);
                        self.set(key, desired.to_vec(), woken);
                    }
                    None => reply.put_bytes(expected),
                }
            }
            Request::Get { key } => reply.put_bytes(self.data.get(key).map_or(&[][..], Vec::as_slice)),
            Request::Add { key, delta } => {
                let bad = |reason| ProtocolError::BadAdd { key: show_key(key), delta, reason };
                let old = match self.data.get(key) {
                    None => 0,
                    Some(v) => parse_decimal(v).ok_or_else(|| bad("the stored value is not a decimal i64"))?,
                };
                let new = old.checked_add(delta).ok_or_else(|| bad("the sum overflows i64"))?;
                reply.put_i64(new);
                self.set(key, new.to_string().into_bytes(), woken);
            }
            Request::Check { keys } => {
                let ready = keys.iter().all(|k| self.data.contains_key(*k));
                reply.put_u8(if ready { READY } else { NOT_READY });
            }
            Request::Wait { keys } => {
                if self.parked.contains_key(&conn) {
                    return Err(ProtocolError::SecondWait);
                }
                let missing: HashSet<Rc<[u8]>> =
                    keys.into_iter().filter(|k| !self.data.contains_key(*k)).map(Rc::from).collect();
                if missing.is_empty() {
                    reply.put_u8(STOP_WAITING);
                } else {
                    for key in &missing {
                        self.waiters.entry(Rc::clone(key)).or_default().push(conn);
                    }
                    let bytes = missing.iter().map(|k| k.len()).sum();
                    self.parked.insert(conn, Parked { keys: missing, bytes });
                }
            }
            Request::GetNumKeys => reply.put_i64(self.data.len() as i64),
            Request::DeleteKey { key } => reply.put_i64(i64::from(self.data.remove(key).is_some())),
            Request::Append { key, value } => match self.data.get_mut(key) {
                Some(current) => {
                    let len = (current.len() + value.len()) as u64;
                    if len > MAX_VALUE_LEN as u64 {
                        return Err(ProtocolError::AppendTooLong { key: show_key(key), len });
                    }
                    // An existing key has no waiters: nobody to wake.
                    current.extend_from_slice(value);
                }
                None => self.set(key, value.to_vec(), woken),
            },
            Request::MultiGet { keys } => {
                let values: Vec<&[u8]> =
                    keys.iter().map(|k| self.data.get(*k).map_or(&[][..], Vec::as_slice)).collect();
                let len: u64 = values.iter().map(|v| 8 + v.len() as u64).sum();
                if len > MAX_FRAME_LEN as u64 {
                    return Err(ProtocolError::ReplyTooLong(len));
                }
                for v in values {
                    reply.put_bytes(v);
                }
            }
            Request::MultiSet { pairs } => {
                for (key, value) in pairs {
                    self.set(key, value.to_vec(), woken);
                }
            }
            Request::CancelWait => {
                self.unpark(conn);
                reply.put_u8(WAIT_CANCELED);
            }
            Request::Ping { nonce } => reply.put_u32(nonce),
        }
        Ok(())
    }

    /// Forgets a closed connection's parked WAIT.
    pub(crate) fn disconnect(&mut self, conn: ConnId) {
        self.unpark(conn);
    }

    /// Bytes of keys `conn`'s parked WAIT holds.
    pub(crate) fn parked_bytes(&self, conn: ConnId) -> usize {
        self.parked.get(&conn).map_or(0, |p| p.bytes)
    }

    fn set(&mut self, key: &[u8], value: Vec<u8>, woken: &mut Vec<ConnId>) {
        self.data.insert(key.to_vec(), value);
        let Some(conns) = self.waiters.remove(key) else { return };
        for conn in conns {
            if let Some(p) = self.parked.get_mut(&conn) {
                if p.keys.remove(key) {
                    p.bytes -= key.len();
                }
                if p.keys.is_empty() {
                    self.parked.remove(&conn);
                    woken.push(conn);
                }
            }
        }
    }

    fn unpark(&mut self, conn: ConnId) {
        let Some(p) = self.parked.remove(&conn) else { return };
        for key in p.keys {
            if let Some(conns) = self.waiters.get_mut(&key) {
                conns.retain(|&c| c != conn);
                if conns.is_empty() {
                    self.waiters.remove(&key);
                }
            }
        }
    }
}

/// An ADD counter's stored form: ASCII decimal, as PyTorch writes it.
fn parse_decimal(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}
