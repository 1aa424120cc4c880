//! Running `jitccl` under a time limit and looking at the processes it starts (via /proc),
//! for the tests of hangs, runaway spawning and signals. Every process a test starts is
//! killed and reaped before the test ends, even on failure: this machine's init does not
//! reap orphans, so the test process makes itself their subreaper.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Orphaned descendants of a test become children of the test process (see the module doc).
pub fn adopt_orphans() {
    static ONCE: Once = Once::new();
    // SAFETY: a process-wide flag; no memory is involved.
    ONCE.call_once(|| unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    });
}

/// (ppid, state) of a process, `None` once it is gone.
fn stat(pid: u32) -> Option<(u32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    Some((f.next()?.parse().ok()?, state))
}

/// Whether `pid` runs (a zombie counts as gone: it has ended, only its parent has not
/// collected it).
pub fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, s)| s != 'Z')
}

/// The running children of `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat(p).is_some_and(|(pp, s)| pp == pid && s != 'Z'))
        .collect()
}

fn descendants(pid: u32) -> Vec<u32> {
    let mut all = children(pid);
    let mut i = 0;
    while i < all.len() {
        let more = children(all[i]);
        all.extend(more);
        i += 1;
    }
    all
}

/// Stops `child` and everything it started, and reaps what became ours.
pub fn kill_tree(child: &mut Child) {
    let pid = child.id();
    // SAFETY: signals to processes this test started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let tree = descendants(pid);
    for &p in &tree {
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
    reap(&tree);
}

/// Collects those of `pids` that were orphaned to the test process.
pub fn reap(pids: &[u32]) {
    for &p in pids {
        // SAFETY: waits only for the given processes; ECHILD when they are not ours.
        unsafe { libc::waitpid(p as i32, std::ptr::null_mut(), 0) };
    }
}

/// Starts jitccl with captured output.
pub fn start(args: &[&str], cache: &Path) -> Child {
    adopt_orphans();
    Command::new(env!("CARGO_BIN_EXE_jitccl"))
        .args(args)
        .env("JITCCL_CACHE_DIR", cache)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jitccl")
}

/// Waits up to `limit` for `child`; `None` (after killing it and all it started) when
/// it runs longer.
pub fn finish_within(mut child: Child, limit: Duration) -> Option<Output> {
    let pipe = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = pipe(child.stdout.take().map(|p| Box::new(p) as _));
    let err = pipe(child.stderr.take().map(|p| Box::new(p) as _));
    let t0 = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            // Processes left behind would hold the output open.
            while !(out.is_finished() && err.is_finished()) {
                assert!(t0.elapsed() < limit + Duration::from_secs(5), "leftover processes hold jitccl's output open");
                std::thread::sleep(Duration::from_millis(20));
            }
            return Some(Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() });
        }
        if t0.elapsed() > limit {
            kill_tree(&mut child);
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs jitccl to completion within `limit`, failing the test when it takes longer.
pub fn run_within(args: &[&str], cache: &Path, limit: Duration) -> Output {
    finish_within(start(args, cache), limit).unwrap_or_else(|| panic!("jitccl {args:?} ran longer than {limit:?}"))
}
