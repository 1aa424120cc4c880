//! Dead peers outside the bootstrap's own waits: the network transport's connection setup
//! (whose accept loop takes no abort flag) is ended when the roots say a rank died or
//! failed, and an init error that is about a peer's connection becomes the roots' word on
//! which rank died first, when it comes soon.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use socket2::SockRef;

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};

/// How often the transport's setup looks at the roots' word.
const POLL: Duration = Duration::from_millis(20);

/// The error `e` of this rank's `op`, or, when `e` is about a peer's connection (an OS
/// error, a timeout), the roots' word on which rank died or failed first if it comes
/// within a second. The bootstrap's own errors have heard the roots already.
pub(super) fn explain(bs: &Bootstrap, op: &'static str, e: Error) -> Error {
    match e {
        Error::System { .. } | Error::Timeout { .. } => bs.why_lost(op).map_or(e, Error::Bootstrap),
        e => e,
    }
}

/// Runs `start`, the network transport's connection setup (which accepts connections on
/// the listener at `at`), while watching the roots: when they say a rank died or failed,
/// the listener is shut down (through a duplicate of its descriptor), so the accept loop
/// fails at once instead of waiting for the dead rank's connections until the timeout;
/// the error is then theirs.
pub(super) fn watching<T>(bs: &Bootstrap, rank: usize, at: SocketAddr, start: impl FnOnce() -> Result<T>) -> Result<T> {
    const OP: &str = "net connection setup";
    let Some(listener) = listening_socket(at) else {
        tracing::debug!("rank {rank}: no listening socket at {at} to watch: a dead peer is noticed by the timeout");
        return start().map_err(|e| explain(bs, OP, e));
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if bs.check_peers(OP).is_err() {
                    // SAFETY: a plain call on a descriptor this function owns.
                    unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
                    return;
                }
                std::thread::sleep(POLL);
            }
        });
        let r = start();
        done.store(true, Ordering::Release);
        r.map_err(|e| explain(bs, OP, e))
    })
}

/// A duplicate of this process's descriptor of the socket listening at `addr`.
fn listening_socket(addr: SocketAddr) -> Option<OwnedFd> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).find_map(|fd| {
        // A duplicate is ours, whatever another thread does with `fd` meanwhile.
        // SAFETY: fcntl on any number is safe; a non-negative result is a new descriptor.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        // SAFETY: as above.
        let dup = (dup >= 0).then(|| unsafe { OwnedFd::from_raw_fd(dup) })?;
        let at = SockRef::from(&dup).local_addr().ok()?.as_socket();
        (at == Some(addr) && is_listening(&dup)).then_some(dup)
    })
}

fn is_listening(fd: &OwnedFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && v != 0
}
