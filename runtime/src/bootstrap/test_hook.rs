//! Test-only fault injection at named points of a communicator's init, off unless its
//! variables are set (read once per process):
//!
//! - `JITCCL_TEST_DIE_AT=<point>[+<ms>]`: on reaching `<point>`, after `<ms>` (default 0),
//!   this process kills itself with SIGKILL, as a crash or the OOM killer would (nothing
//!   of it runs afterwards: no unwinding, no cleanup);
//! - `JITCCL_TEST_PAUSE_AT=<point>+<ms>`: it sleeps `<ms>` there, then goes on.
//!
//! Points: `store` (before the launcher's store: serving it, on rank 0, or connecting to
//! it), `join` (before this rank's hello to its root), `hello` (the root acknowledged it),
//! `ring` (the root told this rank its ring successor), `segment` (this rank's shared segment
//! is created, its name not yet unlinked), `transport` (just before this rank
//! opens its transport connections). `tests/init_deaths.rs` kills ranks at each point.

use std::sync::OnceLock;
use std::time::Duration;

use super::Secs;

use crate::settings::{Setting, TEST_DIE_AT, TEST_PAUSE_AT};

/// What to do at a point.
struct Hook {
    point: String,
    after: Duration,
    die: bool,
}

fn parse(var: &Setting, die: bool) -> Option<Hook> {
    let v = var.text().ok()??;
    let var = var.name;
    let (point, ms) = v.trim().split_once('+').unwrap_or((v.trim(), "0"));
    let Ok(ms) = ms.parse() else {
        tracing::warn!("{var}={v:?} is not <point>[+<ms>]: ignored");
        return None;
    };
    Some(Hook { point: point.to_string(), after: Duration::from_millis(ms), die })
}

/// Runs the hooks set for `point`, if any.
pub(crate) fn at(point: &str) {
    static HOOKS: OnceLock<Vec<Hook>> = OnceLock::new();
    let hooks =
        HOOKS.get_or_init(|| [parse(&TEST_PAUSE_AT, false), parse(&TEST_DIE_AT, true)].into_iter().flatten().collect());
    for h in hooks.iter().filter(|h| h.point == point) {
        tracing::warn!(
            "{}: {} at {point} after {}",
            if h.die { TEST_DIE_AT.name } else { TEST_PAUSE_AT.name },
            if h.die { "dying" } else { "pausing" },
            Secs(h.after)
        );
        std::thread::sleep(h.after);
        if h.die {
            // SAFETY: raising a signal on this process.
            unsafe { libc::raise(libc::SIGKILL) };
        }
    }
}
