//! Where the thread ranks of one `init_all` meet to split: each rank's n-th split joins
//! round n; the rank that completes a round creates every color's child communicators
//! (fresh `init_all`s: nothing shared with the parent) and each rank takes its own. Waits
//! are bounded by the parent's timeout, and a round fails at once if any parent rank is
//! aborted or failed, so no split hangs on a rank that will never come.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::{groups, Entry};
use crate::comm::{Comm, CommInner};
use crate::config::Config;
use crate::device::Device;
use crate::error::{Error, Result};

/// How often a waiting rank looks at the other ranks' state (abort and failure are not
/// signalled to the rendezvous).
const POLL: Duration = Duration::from_millis(20);

pub(crate) struct Rendezvous {
    /// The parent's ranks, to see their aborts and failures (weak: the rendezvous must not
    /// keep a destroyed rank alive).
    ranks: Vec<Weak<CommInner>>,
    rounds: Mutex<HashMap<u64, Round>>,
    done: Condvar,
}

struct Round {
    entries: Vec<Option<Entry>>,
    /// Per parent rank, the configuration it gave its child.
    cfgs: Vec<Option<Config>>,
    /// Per parent rank, its child (taken once); or why the round failed.
    outcome: Option<Result<Vec<Option<Comm>>>>,
    taken: usize,
}

impl Rendezvous {
    pub(crate) fn new(ranks: Vec<Weak<CommInner>>) -> Rendezvous {
        Rendezvous { ranks, rounds: Mutex::new(HashMap::new()), done: Condvar::new() }
    }

    /// Why the parent cannot split now: a rank of it was aborted, failed or destroyed.
    fn parent_broken(&self) -> Option<Error> {
        self.ranks.iter().enumerate().find_map(|(q, w)| match w.upgrade() {
            None => Some(Error::InvalidUsage(format!("split: rank {q} of the parent was destroyed"))),
            Some(inner) => inner.usable("split").err(),
        })
    }

    /// Each parent rank's device: a child rank lives where its parent rank does.
    fn devices(&self) -> Result<Vec<Device>> {
        let device = |(q, w): (usize, &Weak<CommInner>)| {
            w.upgrade()
                .map(|inner| inner.enq.device.clone())
                .ok_or_else(|| Error::InvalidUsage(format!("split: rank {q} of the parent was destroyed")))
        };
        self.ranks.iter().enumerate().map(device).collect()
    }

    /// Rank `rank`'s part in split round `seq`; `cfg` makes its child, and must be what the
    /// other members of that child give.
    pub(crate) fn arrive(
        &self, seq: u64, rank: usize, entry: Entry, cfg: &Config, timeout: Duration,
    ) -> Result<Option<Comm>> {
        let n = self.ranks.len();
        let deadline = Instant::now() + timeout;
        let mut rounds = self.rounds.lock().unwrap_or_else(|e| e.into_inner());
        let round = rounds.entry(seq).or_insert_with(|| Round {
            entries: vec![None; n],
            cfgs: vec![None; n],
            outcome: None,
            taken: 0,
        });
        round.entries[rank] = Some(entry);
        round.cfgs[rank] = Some(cfg.clone());
        if round.outcome.is_none() && round.entries.iter().all(Option::is_some) {
            let entries: Vec<Entry> = round.entries.iter().flatten().copied().collect();
            let cfgs: Vec<Config> = round.cfgs.iter().flatten().cloned().collect();
            round.outcome = Some(self.devices().and_then(|d| build(&entries, &d, &cfgs)));
            self.done.notify_all();
        }
        loop {
            let Some(round) = rounds.get_mut(&seq) else {
                return Err(Error::Internal(format!("split round {seq} vanished")));
            };
            if round.outcome.is_none() {
                let why = self.parent_broken().or_else(|| {
                    (Instant::now() >= deadline).then(|| {
                        let missing: Vec<usize> = (0..n).filter(|&q| round.entries[q].is_none()).collect();
                        Error::InvalidUsage(format!(
                            "split on rank {rank}: rank(s) {missing:?} did not call split within {timeout:?}"
                        ))
                    })
                });
                if let Some(e) = why {
                    round.outcome = Some(Err(e));
                    self.done.notify_all();
                }
            }
            if let Some(outcome) = &mut round.outcome {
                let mine = match outcome {
                    Ok(children) => Ok(children[rank].take()),
                    Err(e) => Err(copy(e)),
                };
                round.taken += 1;
                if round.taken == n {
                    rounds.remove(&seq);
                }
                return mine;
            }
            let wait = deadline.saturating_duration_since(Instant::now()).min(POLL);
            rounds = self.done.wait_timeout(rounds, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// An error for every rank of a failed round, of the same kind (`replay` keeps only the
/// kinds operations fail with).
fn copy(e: &Error) -> Error {
    match e {
        Error::InvalidUsage(m) => Error::InvalidUsage(m.clone()),
        Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
        e => e.replay(),
    }
}

/// Every color's children, by parent rank (`None` for ranks of no color), each child made
/// with the configuration its members gave (refused if they differ).
fn build(entries: &[Entry], devices: &[Device], cfgs: &[Config]) -> Result<Vec<Option<Comm>>> {
    let mut out: Vec<Option<Comm>> = vec![None; entries.len()];
    for members in groups(entries) {
        // As process ranks agree at init: field by field, naming the one that differs.
        let resolved =
            members.iter().map(|&q| cfgs[q].resolve_on(members.len(), &devices[q])).collect::<Result<Vec<_>>>()?;
        let encoded: Vec<Vec<u8>> = resolved.iter().map(|r| r.encode()).collect();
        resolved[0].agree(0, &encoded)?;
        let on: Vec<Device> = members.iter().map(|&q| devices[q].clone()).collect();
        for (q, child) in members.iter().zip(Comm::init_all_on(&on, &cfgs[members[0]])?) {
            out[*q] = Some(child);
        }
    }
    Ok(out)
}
