//! The root's replies: each rank's ring successor once every rank is here, and the
//! communicator-wide errors it tells every rank that reached it.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::{RootReport, RootState, TELL_TIMEOUT};
use crate::bootstrap::error::{BootstrapError, Result};
use crate::bootstrap::net::{self, Waiter};
use crate::bootstrap::wire::{self, Header, Kind, RootReply, ROOT_RANK};

impl RootState {
    /// Everyone is here: tell each rank of the block its successor (the last one's is the
    /// next block's first rank, or rank 0 with one root).
    pub(super) fn reply_all(&mut self) -> Result<RootReport> {
        let addrs: Vec<SocketAddr> = self.by_rank.iter().map(|a| a.unwrap()).collect();
        let Some(comm) = self.comm.clone() else {
            return Err(BootstrapError::Protocol { from: "root".into(), detail: "no hello before the reply".into() });
        };
        let n = addrs.len();
        let mut first_err = None;
        for (i, addr) in addrs.iter().enumerate() {
            let next = match addrs.get(i + 1) {
                Some(a) => *a,
                None => self.neighbour_addr.unwrap_or(addrs[0]),
            };
            let reply = RootReply { nranks: comm.nranks, next }.encode();
            if let Err(e) = self.send(*addr, comm.comm_nonce, Kind::RootReply, &reply, TELL_TIMEOUT) {
                tracing::error!(rank = self.block.first + i, %addr, error = %e, "jitccl bootstrap root: cannot reach a rank");
                first_err.get_or_insert(e);
            }
        }
        tracing::debug!(nranks = n, after = ?self.start.elapsed(), "jitccl bootstrap root: all ranks connected");
        match first_err {
            Some(e) => Err(e),
            None => {
                Ok(RootReport { nranks: comm.nranks as usize, first: self.block.first, addrs, rejected: self.rejected })
            }
        }
    }

    pub(super) fn on_deadline(&mut self) -> BootstrapError {
        if let Some(e) = self.failed.take() {
            return e;
        }
        let Some(nranks) = self.comm.as_ref().map(|c| c.nranks as usize) else {
            return BootstrapError::Timeout {
                op: "root: waiting for the first rank",
                peer: None,
                after: self.start.elapsed(),
            };
        };
        let mut missing: Vec<usize> =
            (0..self.block.len).filter(|&i| self.by_rank[i].is_none()).map(|i| self.block.first + i).collect();
        if let (Some(r), None) = (self.neighbour, self.neighbour_addr) {
            missing.push(r);
        }
        let after = self.first_hello.map(|t| t.elapsed()).unwrap_or_else(|| self.start.elapsed());
        let e = BootstrapError::MissingRanks { missing, nranks, after };
        self.tell_all(&e, TELL_TIMEOUT);
        e
    }

    pub(super) fn tell_all(&mut self, e: &BootstrapError, limit: Duration) {
        for (addr, nonce) in self.arrivals.clone() {
            self.tell(addr, nonce, e, limit);
        }
    }

    pub(super) fn tell(&self, addr: SocketAddr, nonce: u64, e: &BootstrapError, limit: Duration) {
        if let Some(payload) = wire::encode_error(e) {
            if let Err(err) = self.send(addr, nonce, Kind::RootError, &payload, limit) {
                tracing::warn!(%addr, error = %err, "jitccl bootstrap root: cannot tell a rank the error");
            }
        }
    }

    /// Connects to a rank's listener and sends one message (not abortable: the root uses
    /// it to report errors, aborts included; bounded by `limit`), with the communicator's
    /// session `nonce` (the rank's listener accepts only that).
    pub(super) fn send(&self, addr: SocketAddr, nonce: u64, kind: Kind, payload: &[u8], limit: Duration) -> Result<()> {
        static NEVER: AtomicBool = AtomicBool::new(false);
        let w = Waiter::new("root: connect back to a rank", None, limit.min(self.timeout), &NEVER);
        let s = net::connect(addr, &w)?;
        let msg = wire::message(Header::new(nonce, kind, ROOT_RANK, 0, payload.len()), payload);
        net::write_all(&s, &msg, &w)
    }
}

/// The errors the root forwards are plain data; rebuild one (BootstrapError holds an
/// io::Error and so is not Clone).
pub(super) fn clone_err(e: &BootstrapError) -> BootstrapError {
    match wire::encode_error(e) {
        Some(p) => wire::decode_error(&p, "root"),
        None => BootstrapError::Protocol { from: "root".into(), detail: e.to_string() },
    }
}
