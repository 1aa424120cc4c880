//! Only a job's own processes get in: the job's key ([`JobKey`]), and the handshake every
//! connection of the job opens with when there is one (`handshake`): the bootstrap's (to
//! the root, the ring), jitccl's store clients to jitccl's store server, and the network
//! transport's sockets; the bootstrap's send/recv messages, which must not wait for their
//! receiver, are sealed instead (`seal`). With `JITCCL_TLS=1` the bootstrap's ring and the
//! network transport's sockets then carry TLS 1.3, pinned to the job's key (`tls`).
//!
//! The key comes with the unique id (rank 0 makes a fresh one with the id), or from
//! `JITCCL_AUTH_KEY` / `JITCCL_AUTH_KEY_FILE` where every rank makes the id itself. Without
//! one, connections open as they always did, and the log says so once.

mod handshake;
mod key;
mod seal;
mod tls;

pub use handshake::{initiate, respond, Failure, Gate, Initiator, Refusal, Service, HELLO_LEN, PROOF_LEN, REPLY_LEN};
pub use key::{new_secret, JobKey, KeyError, KEY_BYTES, MIN_SECRET_CHARS};
pub use seal::{new_session, seal, Seen, Session, SEAL_LEN};
pub use tls::Tls;

/// Says once per process (INFO) that `what` opens its connections without authentication.
pub fn note_unauthenticated(what: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::info!(
            "jitccl: {what}: connections are not authenticated (no job key: set JITCCL_AUTH_KEY or \
             JITCCL_AUTH_KEY_FILE on every rank, or use a unique id made by rank 0); any process that \
             reaches this job's ports can join its setup"
        )
    });
}
