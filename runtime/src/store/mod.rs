//! The rendezvous key-value store: a TCP server and client wire-compatible with PyTorch's
//! TCPStore (the wire format and the limits are in the private `protocol` module), and
//! [`PrefixStore`] to give each user of one store its own key space.
//!
//! ```no_run
//! use std::time::Duration;
//! use jitccl_runtime::store::{Server, Store, TcpStore};
//! let server = Server::bind("127.0.0.1:0")?;
//! let store = TcpStore::connect(server.local_addr(), Duration::from_secs(30))?;
//! store.set("rank0", b"127.0.0.1:5000")?;
//! assert_eq!(store.get("rank0")?, b"127.0.0.1:5000");
//! # Ok::<(), jitccl_runtime::store::StoreError>(())
//! ```

mod client;
mod conn;
mod limits;
mod prefix;
mod protocol;
mod request;
mod server;
mod state;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::bootstrap::Secs;

pub use client::TcpStore;
pub use prefix::PrefixStore;
pub use server::Server;

/// Errors of store calls. A call that fails with `Timeout`, `Io`, `Closed` or `Protocol`
/// may or may not have taken effect on the server.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The call did not finish in time; `keys` are the keys it concerned.
    #[error("store {op} timed out after {} (keys: [{}])", Secs(*.after), .keys.join(", "))]
    Timeout { op: &'static str, keys: Vec<String>, after: Duration },
    /// No store server answered at `addr` within `after`; `source` is the last failure.
    #[error("cannot reach a store server at {addr} within {}: {source}", Secs(*.after))]
    Connect { addr: String, after: Duration, source: io::Error },
    /// The server at `addr`, which this client had reached, refuses it now (`source`): it
    /// is gone (stopped, or its process died), and waiting would not bring it back.
    #[error("store {op}: the server at {addr} is gone: it served this client before, and now {source}")]
    Gone { op: &'static str, addr: String, source: io::Error },
    /// The server closed the connection — it stopped, or it refused the request (the
    /// protocol has no error replies; the server logs why).
    #[error("store {op}: the server closed the connection")]
    Closed { op: &'static str },
    /// The server at `addr` did not authenticate (`why`): with a key, a client talks only to
    /// a jitccl store server given the same key.
    #[error("store: the server at {addr}: {why}")]
    Auth { addr: String, why: crate::auth::Refusal },
    /// The server's reply broke the protocol.
    #[error("store {op}: protocol error: {msg}")]
    Protocol { op: &'static str, msg: String },
    /// An argument breaks a limit of the protocol (keys up to 64 KiB, values up to 64 MiB,
    /// up to 128 Ki keys per command, up to 16 MiB of keys in one wait); nothing was sent.
    #[error("store {op}: invalid argument: {msg}")]
    InvalidArgument { op: &'static str, msg: String },
    /// An OS call failed.
    #[error("store {op}: {source}")]
    Io { op: &'static str, source: io::Error },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A key-value store shared by the ranks of a job. Keys are strings and values bytes; a
/// missing key is waited for by `get`, `multi_get` and `wait`, up to a timeout.
pub trait Store: Send + Sync {
    /// Stores `value` under `key`, replacing any value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, waiting for the key to be set up to the store's timeout.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// Adds `delta` to the counter `key` (missing counts as 0) and returns the new value.
    /// The counter is stored as ASCII decimal, so `get` returns e.g. `b"42"`.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
    /// Sets `key` to `desired` if its value is `expected` (a missing key matches an empty
    /// `expected`), and returns the value after the operation. For a missing key and a
    /// non-empty `expected` nothing is set and `expected` is returned, as in PyTorch.
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>>;
    /// Whether every key exists, without waiting.
    fn check(&self, keys: &[&str]) -> Result<bool>;
    /// Waits until every key exists; `StoreError::Timeout` after `timeout`.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()>;
    /// Deletes `key`; whether it existed.
    fn delete(&self, key: &str) -> Result<bool>;
    /// The number of keys in the whole store (not only under a prefix, as in PyTorch).
    fn num_keys(&self) -> Result<u64>;
    /// Appends `value` to the value of `key`, creating the key if missing.
    fn append(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The values of `keys`, in order, waiting for all of them up to the store's timeout.
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>>;
    /// Sets every (key, value) pair in one request.
    fn multi_set(&self, pairs: &[(&str, &[u8])]) -> Result<()>;
}

/// A shared store, e.g. one client used by several threads or wrapped by several
/// `PrefixStore`s.
impl<S: Store + ?Sized> Store for Arc<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        (**self).set(key, value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        (**self).get(key)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        (**self).add(key, delta)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        (**self).compare_set(key, expected, desired)
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        (**self).check(keys)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        (**self).wait(keys, timeout)
    }
    fn delete(&self, key: &str) -> Result<bool> {
        (**self).delete(key)
    }
    fn num_keys(&self) -> Result<u64> {
        (**self).num_keys()
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        (**self).append(key, value)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        (**self).multi_get(keys)
    }
    fn multi_set(&self, pairs: &[(&str, &[u8])]) -> Result<()> {
        (**self).multi_set(pairs)
    }
}
