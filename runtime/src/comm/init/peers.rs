//! Dead peers outside the bootstrap's own waits: an init error that is about a peer's
//! connection becomes the roots' word on which rank died first, when it comes soon.

use crate::bootstrap::Bootstrap;
use crate::error::Error;

/// The error `e` of this rank's `op`, or, when `e` is about a peer's connection (an OS
/// error, a timeout), the roots' word on which rank died or failed first if it comes
/// within a second. The bootstrap's own errors have heard the roots already.
pub(super) fn explain(bs: &Bootstrap, op: &'static str, e: Error) -> Error {
    match e {
        Error::System { .. } | Error::Timeout { .. } => bs.why_lost(op).map_or(e, Error::Bootstrap),
        e => e,
    }
}
