//! Noticing a peer process that exited, on this host: a process-local watcher holds a
//! pidfd for each peer process and notes a peer whose process ended on this rank's failure
//! board, so the kernel waits on it end within a poll interval instead of at the timeout.
//! (Peers across the network are noticed by their closed connections.)

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{Board, Notice, Seen};

/// How often the watcher wakes to see whether it should stop (peer exits wake it at once).
const POLL_MS: i32 = 100;

/// Watches peer processes until dropped.
pub(crate) struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Watches `peers` (rank, pid) for `rank`, noting on `board` each one whose process
    /// exits. A peer that cannot be watched (no pidfd: an old kernel, or already gone) is
    /// logged and left to the timeout, or noted at once when already gone.
    pub(crate) fn start(rank: usize, peers: &[(usize, u32)], board: Board) -> Option<Watch> {
        let mut fds = Vec::new();
        for &(peer, pid) in peers {
            match pidfd(pid) {
                Ok(fd) => fds.push((peer, fd)),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => board.note(peer, Notice::gone(peer, Seen::Closed)),
                Err(e) => tracing::info!(
                    "rank {rank}: cannot watch rank {peer}'s process {pid} ({e}): its death is noticed by the timeout"
                ),
            }
        }
        if fds.is_empty() {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("jitccl-watch{rank}"))
            .spawn(move || watch(rank, fds, board, &flag))
            .map_err(|e| tracing::warn!("rank {rank}: cannot start the peer watcher: {e}"))
            .ok()?;
        Some(Watch { stop, thread: Some(thread) })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pidfd(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain system call; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn watch(rank: usize, mut fds: Vec<(usize, OwnedFd)>, board: Board, stop: &AtomicBool) {
    while !fds.is_empty() && !stop.load(Ordering::Acquire) {
        let mut polled: Vec<libc::pollfd> =
            fds.iter().map(|(_, fd)| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: `polled` is a valid array of pollfd for the call's duration.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, POLL_MS) };
        if n <= 0 {
            continue;
        }
        let exited: Vec<usize> = polled.iter().enumerate().filter(|(_, p)| p.revents != 0).map(|(i, _)| i).collect();
        for &i in exited.iter().rev() {
            let (peer, _) = fds.remove(i);
            // Normal at the end of a job: it matters only to a rank still waiting on it.
            tracing::info!("rank {rank}: rank {peer}'s process exited");
            board.note(peer, Notice::gone(peer, Seen::Closed));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn an_exiting_process_is_noted_at_once() {
        let mut words = vec![0i32; 3];
        let board = Board::new(words.as_mut_ptr(), 3);
        let mut child = std::process::Command::new("sleep").arg("0.2").spawn().unwrap();
        let _w = Watch::start(0, &[(2, child.id())], board).expect("a watcher");
        assert_eq!(board.get(2), None);
        child.wait().unwrap();
        let t0 = Instant::now();
        while board.get(2).is_none() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(board.get(2), Some(Notice::gone(2, Seen::Closed)), "not noted within {:?}", t0.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}
