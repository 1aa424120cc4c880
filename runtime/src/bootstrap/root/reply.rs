//! What the root says on the ranks' links: its acknowledgements, each rank's ring successor
//! once every rank is here, and the communicator-wide errors it tells every rank that
//! reached it.

use std::net::SocketAddr;
use std::time::Duration;

use super::watch::Leave;
use super::{RootReport, RootState, TELL_TIMEOUT};
use crate::bootstrap::error::{BootstrapError, Result};
use crate::bootstrap::wire::{self, Kind, RootReply};

impl RootState {
    /// Everyone is here: tell each rank of the block its successor (the last one's is the
    /// next block's first rank, or rank 0 with one root). A rank that cannot be told is gone,
    /// and fails the communicator.
    pub(super) fn reply_all(&mut self) -> Result<RootReport> {
        let addrs: Vec<SocketAddr> = self.by_rank.iter().map(|a| a.unwrap()).collect();
        let Some(comm) = self.comm.clone() else {
            return Err(BootstrapError::Protocol { from: "root".into(), detail: "no hello before the reply".into() });
        };
        for (i, addr) in addrs.iter().enumerate() {
            let next = match addrs.get(i + 1) {
                Some(a) => *a,
                None => self.neighbour_addr.unwrap_or(addrs[0]),
            };
            let rank = self.block.first + i;
            let reply = RootReply { nranks: comm.nranks, next }.encode();
            // Duplicates fail the communicator before this: one link per rank.
            let Some(m) = self.members.iter().position(|m| m.rank == rank) else { continue };
            if let Err(e) = self.send(m, Kind::RootReply, &reply, TELL_TIMEOUT) {
                tracing::error!(rank, %addr, error = %e, "jitccl bootstrap root: cannot reach a rank");
                self.members.remove(m);
                let gone = Leave::Closed.error(rank);
                self.fail_comm(clone_err(&gone));
                return Err(gone);
            }
        }
        tracing::debug!(nranks = addrs.len(), after = ?self.start.elapsed(), "jitccl bootstrap root: all ranks connected");
        Ok(RootReport { nranks: comm.nranks as usize, first: self.block.first, addrs, rejected: self.rejected })
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
        let e = BootstrapError::MissingRanks { rank: None, missing, nranks, after };
        self.tell_all(&e, TELL_TIMEOUT);
        e
    }

    /// Acknowledges member `m`'s hello, saying which rank runs the root if it is known.
    pub(super) fn ack(&mut self, m: usize) {
        let host = self.host.map_or(0, |h| h as u32 + 1).to_le_bytes();
        if let Err(e) = self.send(m, Kind::HelloAck, &host, TELL_TIMEOUT) {
            tracing::warn!(from = %self.members[m].from, error = %e, "jitccl bootstrap root: cannot acknowledge a hello");
        }
    }

    /// Tells every member which rank runs the root (just learned).
    pub(super) fn announce_host(&mut self) {
        (0..self.members.len()).for_each(|m| self.ack(m));
    }

    pub(super) fn tell_all(&mut self, e: &BootstrapError, limit: Duration) {
        self.telling_order().into_iter().for_each(|m| self.tell(m, e, limit));
    }

    pub(super) fn tell(&mut self, m: usize, e: &BootstrapError, limit: Duration) {
        if let Some(payload) = wire::encode_error(e) {
            if let Err(err) = self.send(m, Kind::RootError, &payload, limit) {
                tracing::warn!(rank = self.members[m].rank, error = %err, "jitccl bootstrap root: cannot tell a rank the error");
            }
        }
    }

    /// Writes one message on member `m`'s link, bounded by `limit` (and the root's timeout).
    pub(super) fn send(&mut self, m: usize, kind: Kind, payload: &[u8], limit: Duration) -> Result<()> {
        let limit = limit.min(self.timeout);
        self.members[m].send(kind, payload, limit)
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
