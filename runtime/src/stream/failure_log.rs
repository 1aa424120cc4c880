//! The failures a stream keeps for those who wait for points of it (`Stream::mark`): a
//! process group asks which launch between its creation and one of its operations failed,
//! so a failure before the group existed (of another call on the same stream) must not
//! hide one after. Only the failures someone can ask about are kept: the stream's first,
//! and the first at or after each watched point (`Stream::watch`).

use crate::error::Error;

#[derive(Default)]
pub(super) struct FailureLog {
    /// Launch index and a copy of the error, in increasing index order.
    failed: Vec<(u64, Error)>,
    /// Watched points past the last kept failure, increasing: a failure at or after the
    /// first of them is the first after that point, and is kept.
    watched: Vec<u64>,
}

impl FailureLog {
    /// Asks for the first failure at or after launch `at` to be kept.
    pub(super) fn watch(&mut self, at: u64) {
        if self.watched.last().is_none_or(|&w| w < at) {
            self.watched.push(at);
        }
    }

    /// Notes that launch `i` failed with `e` (launches fail in index order).
    pub(super) fn note(&mut self, i: u64, e: &Error) {
        let first_since_a_watch = self.watched.first().is_some_and(|&w| w <= i);
        if self.failed.is_empty() || first_since_a_watch {
            self.failed.push((i, e.replay()));
            self.watched.retain(|&w| w > i);
        }
    }

    /// A copy of the error of the first launch in `from..to` that failed, where `from` is 0
    /// or a watched point.
    pub(super) fn between(&self, from: u64, to: u64) -> Option<Error> {
        let (i, e) = self.failed.iter().find(|(i, _)| *i >= from)?;
        (*i < to).then(|| e.replay())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure before a watched point is not reported from it; the first one at or
    /// after it is, however many failed since the stream's first.
    #[test]
    fn a_watched_point_sees_only_the_failures_after_it() {
        let mut log = FailureLog::default();
        let fail = |log: &mut FailureLog, i: u64| log.note(i, &Error::Internal(format!("launch {i}")));
        fail(&mut log, 1);
        fail(&mut log, 2);
        log.watch(4);
        log.watch(6);
        fail(&mut log, 3);
        assert!(log.between(4, 10).is_none(), "launches 1 to 3 failed before point 4");
        fail(&mut log, 5);
        fail(&mut log, 7);
        let at = |from, to| log.between(from, to).map(|e| e.to_string());
        assert_eq!(at(0, 2).as_deref(), Some("internal error: launch 1"));
        assert_eq!(at(4, 5), None);
        assert_eq!(at(4, 6).as_deref(), Some("internal error: launch 5"));
        assert_eq!(at(6, 10).as_deref(), Some("internal error: launch 7"));
        assert_eq!(log.failed.len(), 3, "only the failures someone can ask about are kept");
    }
}
